//! The portable register tile (the twin the SIMD tiles are tested against).

use super::NR;

/// `tile[i][r] = Σ_{k < kc} a[i * lda + k] · b[k * 16 + r]`, `tile.len()` tokens.
pub(super) fn tile(a: &[f32], lda: usize, b: &[f32], kc: usize, tile: &mut [[f32; NR]]) {
    for (i, acc) in tile.iter_mut().enumerate() {
        *acc = [0.0; NR];
        let row = &a[i * lda..i * lda + kc];
        for (&av, w) in row.iter().zip(b.chunks_exact(NR)) {
            for (c, &wv) in acc.iter_mut().zip(w) {
                *c += av * wv;
            }
        }
    }
}
