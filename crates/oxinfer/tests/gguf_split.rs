//! Models split into several GGUF files by llama.cpp's `gguf-split` load as one: the tiny Llama
//! split in three parts by tools/ref/split_gguf.py (tests/fixtures/llama-tiny-split, checked there
//! against llama.cpp) gives logits bit-identical to the single file and within 1e-4 of
//! transformers; the real SmolLM2 split at test time (tests/split_writer, byte-identical to the
//! script's layout) gives the single file's logits and greedy tokens bit for bit; missing,
//! misnamed and mismatched parts are errors naming the file.

mod common;
mod split_writer;

use std::fs;
use std::path::{Path, PathBuf};

use common::{check_sources, fixtures, greedy, prompt_logits, real_model, scratch_dir};
use oxinfer::gguf::GgufFile;
use oxinfer::Model;
use split_writer::split_gguf;

const TOL: f32 = 1e-4;

fn single() -> PathBuf {
    fixtures().join("llama-tiny-a/model.gguf")
}

fn fixture_part(i: u32) -> PathBuf {
    fixtures().join(format!("llama-tiny-split/model-{i:05}-of-00003.gguf"))
}

fn load(path: &Path) -> Model {
    Model::load(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

fn load_err(path: &Path) -> String {
    match Model::load(path) {
        Ok(_) => panic!("{} loaded", path.display()),
        Err(e) => e.to_string(),
    }
}

#[test]
fn the_test_splitter_writes_the_fixture_byte_for_byte() {
    let dir = scratch_dir("split-writer");
    let parts = split_gguf(&single(), dir.join("model").to_str().unwrap(), 8);
    assert_eq!(parts.len(), 3);
    for (i, p) in parts.iter().enumerate() {
        let want = fs::read(fixture_part(i as u32 + 1)).unwrap();
        assert!(fs::read(p).unwrap() == want, "{} differs", p.display());
    }
    fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn a_split_model_loads_as_one_with_the_single_files_tensors_and_logits() {
    let whole = GgufFile::open(single()).unwrap();
    for first in [fixture_part(1), fixture_part(2)] {
        // Any part opens the whole model, from the first part.
        let g = GgufFile::open(&first).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(g.path(), fixture_part(1));
        assert_eq!(g.parts().len(), 3);
        assert_eq!(g.tensors().len(), whole.tensors().len());
        for t in whole.tensors() {
            let a = whole.tensor(&t.name).unwrap();
            let b = g.tensor(&t.name).unwrap();
            assert_eq!((a.format, &a.shape), (b.format, &b.shape), "{}", t.name);
            assert!(a.bytes() == b.bytes(), "{}: bytes differ", t.name);
        }
        let parts_used: Vec<usize> = g.tensors().iter().map(|t| t.part).collect();
        assert_eq!(
            parts_used,
            [[0; 8], [1; 8]]
                .concat()
                .into_iter()
                .chain([2; 4])
                .collect::<Vec<_>>()
        );
        for (k, v) in whole.metadata() {
            assert_eq!(g.get(k).map(|x| x.to_string()), Some(v.to_string()), "{k}");
        }
        assert_eq!(
            g.file_size(),
            (1..=3)
                .map(|i| fs::metadata(fixture_part(i)).unwrap().len() as usize)
                .sum::<usize>()
        );
    }

    let a = load(&single());
    let b = load(&fixture_part(1));
    let prompt = [1u32, 5, 9, 14, 3, 200, 7, 42];
    let (la, lb) = (prompt_logits(&a, &prompt, 3), prompt_logits(&b, &prompt, 3));
    assert!(la == lb, "split logits differ from the single file's");
    assert_eq!(greedy(&a, &prompt, 16), greedy(&b, &prompt, 16));
    // A folder holding exactly the parts loads them as one model too.
    let c = load(&fixtures().join("llama-tiny-split"));
    assert!(prompt_logits(&c, &prompt, 3) == la);
    check_sources(
        &fixtures().join("llama-tiny-a"),
        &[fixture_part(1)],
        &[0, 3],
        TOL,
    );
}

#[test]
fn missing_misnamed_and_mismatched_parts_name_the_file() {
    let dir = scratch_dir("split-bad");
    let copy = |i: u32, name: &str| fs::copy(fixture_part(i), dir.join(name)).unwrap();
    copy(1, "m-00001-of-00003.gguf");
    copy(3, "m-00003-of-00003.gguf");
    copy(2, "m-00002-of-00003.gguf");
    // Every part is watched for truncation while loaded, not only the first.
    let m = load(&dir.join("m-00001-of-00003.gguf"));
    m.check_files().unwrap();
    let f = fs::OpenOptions::new()
        .write(true)
        .open(dir.join("m-00003-of-00003.gguf"))
        .unwrap();
    f.set_len(1000).unwrap();
    let e = m.check_files().unwrap_err().to_string();
    assert!(
        e.contains("m-00003-of-00003.gguf") && e.contains("shrank"),
        "{e}"
    );
    drop(m);
    copy(3, "m-00003-of-00003.gguf");
    fs::remove_file(dir.join("m-00002-of-00003.gguf")).unwrap();
    let e = load_err(&dir.join("m-00001-of-00003.gguf"));
    assert!(
        e.contains(&format!("{}", dir.join("m-00002-of-00003.gguf").display()))
            && e.contains("part 2 of 3 of the split GGUF model")
            && e.contains("is missing"),
        "{e}"
    );
    // Part 2 where part 3 belongs.
    copy(2, "m-00002-of-00003.gguf");
    copy(2, "m-00003-of-00003.gguf");
    let e = load_err(&dir.join("m-00001-of-00003.gguf"));
    assert!(
        e.contains("m-00003-of-00003.gguf")
            && e.contains("metadata says part 2 of 3, but its name says part 3 of 3"),
        "{e}"
    );
    // A first part renamed: the others cannot be found.
    copy(1, "renamed.gguf");
    let e = load_err(&dir.join("renamed.gguf"));
    assert!(
        e.contains("renamed.gguf")
            && e.contains("part 1 of a GGUF split into 3 files")
            && e.contains("-00001-of-00003.gguf"),
        "{e}"
    );
    // A whole model under a part's name.
    fs::copy(single(), dir.join("m-00003-of-00003.gguf")).unwrap();
    let e = load_err(&dir.join("m-00001-of-00003.gguf"));
    assert!(e.contains("a whole model (no split metadata)"), "{e}");
    fs::remove_dir_all(&dir).unwrap();
}

/// SmolLM2-135M Q4_1 split in 3 parts (100 tensors each) at test time: logits of a prompt and
/// 24 greedy tokens bit-identical to the single file's.
#[test]
fn real_smollm2_split_equals_the_single_file() {
    let Some(path) = real_model("SmolLM2-135M-Instruct.Q4_1.gguf") else {
        return;
    };
    let dir = scratch_dir("split-smollm2");
    let parts = split_gguf(&path, dir.join("SmolLM2").to_str().unwrap(), 100);
    assert_eq!(parts.len(), 3);
    let a = load(&path);
    let b = load(&parts[0]);
    let prompt = a
        .tokenize("The capital of France is", a.adds_bos())
        .unwrap();
    assert_eq!(
        b.tokenize("The capital of France is", b.adds_bos())
            .unwrap(),
        prompt
    );
    assert!(prompt_logits(&a, &prompt, 64) == prompt_logits(&b, &prompt, 64));
    let (ga, gb) = (greedy(&a, &prompt, 24), greedy(&b, &prompt, 24));
    assert_eq!(ga, gb);
    println!("SmolLM2 split in 3: logits and 24 greedy tokens identical: {ga:?}");
    drop(b);
    fs::remove_dir_all(&dir).unwrap();
}
