//! Kernel choices made by measurement on the running CPU: of two kernels that compute the same
//! product, time both on a decode-sized problem and keep the faster.
//!
//! Today one choice is measured: the 512-bit two-group (16-row) Q4_K/Q6_K kernels against the
//! 256-bit one-group kernels on AVX-512 VNNI CPUs ([`crate::dispatch::TwoGroupChoice`]). Feature
//! flags cannot decide it: the same instructions run on full-width units on Intel Xeons and
//! Zen 5 but are split in two 256-bit halves on Zen 4, where the two-group kernels lose.
//! The caller (`oxinfer::tuning` in the engine crate) caches the result per CPU model and
//! installs it with [`crate::dispatch::install_measured_two_group`] before loading weights.

use crate::dispatch::{detected_isa, two_group_supported};
use crate::packed::{matmul_packed_variant, pairs_possible, PackedMatrix};
use crate::{WeightFormat, WeightMatrix};
use std::time::Instant;

/// Bytes of packed weights one measurement streams per product: larger than the last-level
/// caches of the CPUs we know (up to 32 MiB per CCD on Zen 4), so it is timed at the memory
/// wall as a decode step is.
pub const MEASURE_BYTES: usize = 96 << 20;

/// Columns of the measured matrix (a 7B model's hidden size).
const COLS: usize = 4096;

/// Timed products per variant (interleaved, after one warm-up each).
const REPS: usize = 9;

/// How much faster the two-group kernels must be to be chosen (noise margin).
pub const MARGIN: f64 = 1.03;

/// One format's measurement: weight bytes streamed per second by each variant for a
/// single-token product (`t = 1`), median of [`REPS`] interleaved runs.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct TwoGroupTiming {
    /// Q4_K or Q6_K.
    pub format: WeightFormat,
    /// The 256-bit one-group kernels, GB/s (10⁹ bytes per second).
    pub one_group_gbs: f64,
    /// The 512-bit two-group kernels, GB/s.
    pub two_group_gbs: f64,
}

impl TwoGroupTiming {
    /// Whether the two-group kernels should run: faster by more than [`MARGIN`].
    pub fn two_group_wins(&self) -> bool {
        self.two_group_gbs > self.one_group_gbs * MARGIN
    }
}

/// A matrix of `rows × COLS` random quants of `format` ([`crate::synthetic::random_matrix`]).
fn synthetic(format: WeightFormat, rows: usize) -> Vec<u8> {
    crate::synthetic::random_matrix(format, rows, COLS, 0x9e37_79b9_7f4a_7c15 ^ format as u64)
        .expect("COLS is a multiple of 256")
}

/// Times one-group against two-group kernels for `format` on a matrix of about `bytes` bytes;
/// `None` when the CPU cannot run the two-group kernels for it.
pub fn measure_two_group_bytes(format: WeightFormat, bytes: usize) -> Option<TwoGroupTiming> {
    let isa = detected_isa();
    if !two_group_supported() || !pairs_possible(format, isa) {
        return None;
    }
    let rb = format.row_bytes(COLS)?;
    // Whole pairs of 8-row groups.
    let rows = (bytes / rb).max(16).next_multiple_of(16);
    let data = synthetic(format, rows);
    let w = WeightMatrix::new(format, &data, rows, COLS).ok()?;
    let packed = PackedMatrix::pack(&w)?;
    drop(data);
    let x: Vec<f32> = (0..COLS)
        .map(|i| ((i * 37 % 101) as f32 - 50.0) / 50.0)
        .collect();
    let mut y = vec![0f32; rows];
    let mut time = |pairs: bool| {
        let start = Instant::now();
        matmul_packed_variant(&packed, &x, 1, &mut y, isa, pairs);
        start.elapsed().as_secs_f64()
    };
    time(false);
    time(true);
    let (mut one, mut two) = (Vec::with_capacity(REPS), Vec::with_capacity(REPS));
    for _ in 0..REPS {
        one.push(time(false));
        two.push(time(true));
    }
    let gbs = |mut v: Vec<f64>| {
        v.sort_by(f64::total_cmp);
        packed.size_bytes() as f64 / v[v.len() / 2].max(1e-9) / 1e9
    };
    Some(TwoGroupTiming {
        format,
        one_group_gbs: gbs(one),
        two_group_gbs: gbs(two),
    })
}

/// [`measure_two_group_bytes`] at [`MEASURE_BYTES`] (about a second on a 2-core VM, both
/// formats together).
pub fn measure_two_group(format: WeightFormat) -> Option<TwoGroupTiming> {
    measure_two_group_bytes(format, MEASURE_BYTES)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn measures_both_variants_where_the_cpu_has_them() {
        for format in [WeightFormat::Q4K, WeightFormat::Q6K] {
            match measure_two_group_bytes(format, 1 << 20) {
                Some(t) => {
                    assert_eq!(t.format, format);
                    assert!(
                        t.one_group_gbs.is_finite() && t.one_group_gbs > 0.0,
                        "{t:?}"
                    );
                    assert!(
                        t.two_group_gbs.is_finite() && t.two_group_gbs > 0.0,
                        "{t:?}"
                    );
                }
                None => assert!(!two_group_supported()),
            }
        }
        // Other formats have no two-group kernels.
        assert!(measure_two_group_bytes(WeightFormat::Q8_0, 1 << 20).is_none());
    }

    #[test]
    fn both_variants_compute_the_same_product() {
        let isa = detected_isa();
        for format in [WeightFormat::Q4K, WeightFormat::Q6K] {
            if !pairs_possible(format, isa) {
                continue;
            }
            let rows = 40; // five groups: two pairs and a single one
            let data = synthetic(format, rows);
            let w = WeightMatrix::new(format, &data, rows, COLS).unwrap();
            let p = PackedMatrix::pack(&w).unwrap();
            let t = 3;
            let x: Vec<f32> = (0..t * COLS)
                .map(|i| ((i % 13) as f32 - 6.0) / 7.0)
                .collect();
            let (mut a, mut b) = (vec![0f32; t * rows], vec![0f32; t * rows]);
            matmul_packed_variant(&p, &x, t, &mut a, isa, false);
            matmul_packed_variant(&p, &x, t, &mut b, isa, true);
            // Same products in the same order: bit-identical.
            assert_eq!(a, b, "{format}");
        }
    }

    #[test]
    fn the_margin_decides() {
        let t = |one, two| TwoGroupTiming {
            format: WeightFormat::Q4K,
            one_group_gbs: one,
            two_group_gbs: two,
        };
        assert!(t(10.0, 11.0).two_group_wins());
        assert!(!t(10.0, 10.2).two_group_wins());
        assert!(!t(10.0, 8.0).two_group_wins());
    }
}
