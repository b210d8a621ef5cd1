//! The Walsh–Hadamard rotation of a quantized KV cache (llama.cpp's `attn_rot_k` /
//! `attn_rot_v`). Rounding a head's keys to Q8_0 / Q4_0 blocks costs most where a few channels
//! carry large values: a block's step is its largest value over 127 (or 8). Multiplying every
//! `n`-value chunk of a head by the orthonormal Hadamard matrix `H_n` first spreads such
//! channels over the whole chunk, so the blocks round with small, even steps; the scores are
//! unchanged in exact arithmetic because the queries are rotated by the same `H_n`
//! (`(q H)(k H)ᵀ = q kᵀ`). Values are rotated the same way before they are stored, and the
//! attention output, `p · (V H) = (p · V) H`, is rotated back (`H_n² = I`).
//!
//! Which rows are rotated is [`kv_rotation`]'s rule, llama.cpp's: keys and values stored in a
//! block type (Q8_0, Q4_0) of heads whose width is a multiple of 64; keys in chunks of the
//! largest power of two dividing the head (64 … 512), values in chunks of 64. (llama.cpp turns
//! the rotation off for a whole model whose layers differ in head width; here each layer
//! follows the rule with its own width.) `OXINFER_KV_ROTATION=0` stores every type unrotated
//! (A/B runs; [`crate::dispatch::kv_rotation_enabled`]). With SmolLM2 on a Q4_0 key cache the rotation brings perplexity from 12.28 to
//! llama.cpp's 10.94 (docs/kv-cache.md).

use super::KvType;

/// What a cached row holds: a key (rotated with the query) or a value (rotated back in the
/// output).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum KvRole {
    /// Keys.
    Key,
    /// Values.
    Value,
}

/// The chunk width rows of `role` stored in `ty` are rotated in, for heads of `head_dim`
/// values: `None` for the float types, heads whose width is not a multiple of 64, or with
/// `OXINFER_KV_ROTATION=0`.
pub fn kv_rotation(ty: KvType, head_dim: usize, role: KvRole) -> Option<usize> {
    if !crate::dispatch::kv_rotation_enabled() {
        return None;
    }
    rotation_chunk(ty, head_dim, role)
}

/// [`kv_rotation`] without the process switch.
pub fn rotation_chunk(ty: KvType, head_dim: usize, role: KvRole) -> Option<usize> {
    let quantized = matches!(ty, KvType::Q8_0 | KvType::Q4_0);
    if !quantized || head_dim == 0 || !head_dim.is_multiple_of(64) {
        return None;
    }
    Some(match role {
        // The largest power of two (from 64) that divides the head.
        KvRole::Key => 1 << head_dim.trailing_zeros().min(9),
        KvRole::Value => 64,
    })
}

/// Multiplies every `n`-value chunk of `x` by `H_n`, the Sylvester Hadamard matrix scaled to
/// be orthonormal (`H[i][j] = (−1)^popcount(i & j) / √n`, llama.cpp's `ggml_gen_hadamard`),
/// in place: a fast Walsh–Hadamard transform of each chunk, then the scale. Applying it twice
/// gives `x` back up to rounding.
///
/// # Panics
/// If `n` is not a power of two or `x.len()` not a multiple of `n`.
pub fn rotate_chunks(x: &mut [f32], n: usize) {
    assert!(
        n.is_power_of_two(),
        "rotation width {n} is not a power of two"
    );
    assert!(
        x.len().is_multiple_of(n),
        "{} values are not whole chunks of {n}",
        x.len()
    );
    let scale = 1.0 / (n as f32).sqrt();
    for chunk in x.chunks_exact_mut(n) {
        // The first three stages (pairs 1, 2 and 4 apart) within each group of 8, unrolled;
        // the later ones as loops over whole runs, which vectorize.
        let mut h = 1;
        if n >= 8 {
            for g in chunk.chunks_exact_mut(8) {
                let g: &mut [f32; 8] = g.try_into().expect("groups of 8");
                for step in [1, 2, 4] {
                    for base in (0..8).step_by(2 * step) {
                        for i in base..base + step {
                            let (u, v) = (g[i], g[i + step]);
                            g[i] = u + v;
                            g[i + step] = u - v;
                        }
                    }
                }
            }
            h = 8;
        }
        while h < n {
            for block in chunk.chunks_exact_mut(2 * h) {
                let (a, b) = block.split_at_mut(h);
                for (u, v) in a.iter_mut().zip(b.iter_mut()) {
                    let (s, d) = (*u + *v, *u - *v);
                    *u = s;
                    *v = d;
                }
            }
            h *= 2;
        }
        for v in chunk.iter_mut() {
            *v *= scale;
        }
    }
}

/// `x` with every `n`-value chunk rotated ([`rotate_chunks`]), or `x` itself for `None`.
pub fn rotated(x: &[f32], n: Option<usize>) -> std::borrow::Cow<'_, [f32]> {
    match n {
        None => std::borrow::Cow::Borrowed(x),
        Some(n) => {
            let mut r = x.to_vec();
            rotate_chunks(&mut r, n);
            std::borrow::Cow::Owned(r)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// llama.cpp's `ggml_gen_hadamard`: `[[A, A], [A, −A]]` grown from `1 / √n`.
    fn hadamard(n: usize) -> Vec<f32> {
        let mut h = vec![0f32; n * n];
        h[0] = 1.0 / (n as f32).sqrt();
        let mut s = 1;
        while s < n {
            for i in 0..s {
                for j in 0..s {
                    let v = h[i * n + j];
                    h[(i + s) * n + j] = v;
                    h[i * n + j + s] = v;
                    h[(i + s) * n + j + s] = -v;
                }
            }
            s *= 2;
        }
        h
    }

    /// Values in [−1, 1] in steps of 0.001, hashed from the index and `seed`.
    fn values(len: usize, seed: u32) -> Vec<f32> {
        (0..len)
            .map(|i| {
                let v = (i as u32 ^ seed).wrapping_mul(2_654_435_761) >> 16;
                (v % 2001) as f32 / 1000.0 - 1.0
            })
            .collect()
    }

    #[test]
    fn rotation_is_the_hadamard_matrix_and_its_own_inverse() {
        for n in [64usize, 128, 256, 512] {
            let x = values(3 * n, n as u32);
            let mut y = x.clone();
            rotate_chunks(&mut y, n);
            let h = hadamard(n);
            for (c, chunk) in x.chunks_exact(n).enumerate() {
                for i in 0..n {
                    let want: f32 = (0..n).map(|j| h[i * n + j] * chunk[j]).sum();
                    let got = y[c * n + i];
                    assert!(
                        (got - want).abs() <= 1e-5,
                        "n {n} chunk {c} row {i}: {got} vs {want}"
                    );
                }
            }
            rotate_chunks(&mut y, n);
            for (a, b) in y.iter().zip(&x) {
                assert!((a - b).abs() <= 1e-5, "n {n}: twice gives {a}, not {b}");
            }
        }
    }

    #[test]
    fn dot_products_survive_the_rotation() {
        let (q, k) = (values(256, 1), values(256, 2));
        let dot = |a: &[f32], b: &[f32]| a.iter().zip(b).map(|(x, y)| x * y).sum::<f32>();
        let (mut qr, mut kr) = (q.clone(), k.clone());
        rotate_chunks(&mut qr, 64);
        rotate_chunks(&mut kr, 64);
        assert!((dot(&q, &k) - dot(&qr, &kr)).abs() <= 1e-4);
    }

    #[test]
    fn the_rule_is_llama_cpps() {
        use KvRole::{Key, Value};
        assert_eq!(rotation_chunk(KvType::Q8_0, 64, Key), Some(64));
        assert_eq!(rotation_chunk(KvType::Q4_0, 128, Key), Some(128));
        assert_eq!(rotation_chunk(KvType::Q4_0, 256, Key), Some(256));
        assert_eq!(rotation_chunk(KvType::Q4_0, 192, Key), Some(64));
        assert_eq!(rotation_chunk(KvType::Q4_0, 256, Value), Some(64));
        assert_eq!(rotation_chunk(KvType::Q8_0, 80, Key), None);
        for ty in [KvType::F32, KvType::F16, KvType::Bf16] {
            assert_eq!(rotation_chunk(ty, 128, Key), None);
        }
    }

    /// The reason for it all: keys with one large channel round to Q4_0 with a far smaller
    /// score error once rotated (root mean square over 64 keys, outliers in varying channels).
    #[test]
    fn rotation_shrinks_the_rounding_error_of_outlier_channels() {
        let hd = 128;
        let q = values(hd, 7);
        let (mut plain, mut rot) = (0f64, 0f64);
        for s in 0..64u32 {
            let mut k = values(hd, 100 + s);
            k[(s as usize * 37) % hd] = 40.0;
            let exact: f32 = q.iter().zip(&k).map(|(a, b)| a * b).sum();
            let score = |n: Option<usize>| -> f32 {
                let (qr, kr) = (rotated(&q, n), rotated(&k, n));
                let mut stored = Vec::new();
                KvType::Q4_0.quantize_row(&kr, &mut stored);
                let back = KvView::Packed {
                    ty: KvType::Q4_0,
                    data: &stored,
                }
                .to_f32(0..1, hd);
                qr.iter().zip(&back).map(|(a, b)| a * b).sum()
            };
            plain += f64::from(score(None) - exact).powi(2);
            rot += f64::from(score(Some(128)) - exact).powi(2);
        }
        assert!(
            rot * 4.0 < plain,
            "rotated squared error {rot} vs plain {plain}"
        );
    }

    use super::super::KvView;
}
