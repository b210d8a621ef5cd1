//! A whole model whose weights are IQ4_NL and MXFP4 (`tests/fixtures/iq-tiny`, made by
//! `tools/ref/make_iq_fixtures.py` from the tiny random Llama): the GGUF loads, every weight
//! (the tied IQ4_NL embedding table and output head included) runs through the quantized
//! kernels, and the logits agree with the F32 twin holding the same weights decoded by the
//! `gguf` package: bit for bit with the reference kernels (`OXINFER_KERNELS=scalar`, f32
//! activations), within the error of the int8 activations with the default kernels.

mod common;

use common::{fixtures, max_abs_diff};
use oxinfer::gguf::GgufFile;
use oxinfer::Model;
use oxinfer_kernels::WeightFormat;

fn logits(file: &str, prompt: &[u32]) -> Vec<f32> {
    let path = fixtures().join("iq-tiny").join(file);
    let model = Model::load(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    let lm = model.lm();
    let mut cache = lm.new_cache(prompt.len());
    lm.forward(prompt, &mut cache, true).unwrap()
}

/// The prompt: BOS and byte tokens.
const PROMPT: [u32; 9] = [256, 72, 101, 108, 108, 111, 32, 119, 111];

/// Run by [`iq4_nl_and_mxfp4_model_matches_its_f32_twin`] in a child process with
/// `OXINFER_KERNELS=scalar` (the kernel set is read once per process).
#[test]
#[ignore = "run by iq4_nl_and_mxfp4_model_matches_its_f32_twin under OXINFER_KERNELS=scalar"]
fn reference_kernels_child() {
    assert_eq!(
        oxinfer_kernels::dispatch::kernel_set(),
        oxinfer_kernels::dispatch::KernelSet::Scalar
    );
    for p in [&PROMPT[..1], &PROMPT[..]] {
        let (q, f) = (logits("model-iq.gguf", p), logits("model-deq.gguf", p));
        let bits = |v: &[f32]| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
        assert_eq!(bits(&q), bits(&f), "t={}", p.len());
    }
}

#[test]
fn iq4_nl_and_mxfp4_model_matches_its_f32_twin() {
    let child = std::process::Command::new(std::env::current_exe().unwrap())
        .args(["--ignored", "--exact", "reference_kernels_child"])
        .env(oxinfer_kernels::dispatch::KERNELS_VAR, "scalar")
        .output()
        .unwrap();
    assert!(
        child.status.success() && String::from_utf8_lossy(&child.stdout).contains("1 passed"),
        "reference kernels: IQ model differs from its F32 twin:\n{}{}",
        String::from_utf8_lossy(&child.stdout),
        String::from_utf8_lossy(&child.stderr)
    );

    let g = GgufFile::open(fixtures().join("iq-tiny/model-iq.gguf")).unwrap();
    let count = |f| g.tensors().iter().filter(|t| t.format == f).count();
    assert_eq!(
        (count(WeightFormat::IQ4_NL), count(WeightFormat::MXFP4)),
        (8, 7)
    );
    // Default kernels: one token (t = 1, decode) and a prefill (t = 9). The int8 activations
    // move the logits by ~2 % of their range here (1.2e-2 and 2.7e-2 of 1.22 when written; the
    // same model with Q4_0 weights: 1.4e-2 and 2.5e-2); a wrong table or scale moves them by
    // tens of percent.
    let prompt = PROMPT;
    for p in [&prompt[..1], &prompt[..]] {
        let (q, f) = (logits("model-iq.gguf", p), logits("model-deq.gguf", p));
        assert_eq!(q.len(), f.len());
        let scale = f.iter().fold(0f32, |m, v| m.max(v.abs()));
        let diff = max_abs_diff(&q, &f);
        eprintln!(
            "t={}: max |logit diff| {diff:.2e}, max |logit| {scale:.3}",
            p.len()
        );
        assert!(
            diff <= 0.05 * scale,
            "t={}: {diff} vs scale {scale}",
            p.len()
        );
        // the same next-token choice at every position
        let argmax = |r: &[f32]| {
            r.iter()
                .enumerate()
                .fold((0, f32::MIN), |b, (i, &v)| if v > b.1 { (i, v) } else { b })
                .0
        };
        let vocab = f.len() / p.len();
        for (a, b) in q.chunks_exact(vocab).zip(f.chunks_exact(vocab)) {
            assert_eq!(argmax(a), argmax(b));
        }
    }
}
