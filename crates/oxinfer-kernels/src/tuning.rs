//! Kernel choices made by measurement on the running CPU: of two kernels that compute the same
//! product, time both on a decode-sized problem and keep the faster.
//!
//! Today one choice is measured: the 512-bit two-group (16-row) Q4_K/Q6_K kernels against the
//! 256-bit one-group kernels on AVX-512 VNNI CPUs ([`crate::dispatch::TwoGroupChoice`]). Feature
//! flags cannot decide it: the same instructions run on full-width units on Intel Xeons and
//! Zen 5 but are split in two 256-bit halves on Zen 4, where the two-group kernels lose.
//! It is made twice, for the two regimes a model runs in: decode (one token against a matrix
//! beyond the caches we know, memory- or instruction-bound) and prefill ([`PREFILL_TOKENS`]
//! tokens against a matrix held in L2, bound by the integer dot products). On a 2-core Xeon VM
//! with a 300 MiB L3 the decode measurement ran in L3 and the variants tied within noise,
//! while the two-group kernels prefilled a 7B 26 % faster.
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

/// How much faster either variant must be to decide (noise margin); within it, the
/// known-CPU table decides ([`crate::dispatch::cpu_table_two_group`]).
pub const MARGIN: f64 = 1.03;

/// Tokens of the prefill measurement (one token block of the packed GEMM).
pub const PREFILL_TOKENS: usize = 64;

/// Bytes of the prefill measurement's matrix: held in a core's L2, so the kernels' arithmetic
/// is timed, not memory.
pub const PREFILL_BYTES: usize = 512 << 10;

/// Timed prefill products per variant (interleaved, after one warm-up each).
const PREFILL_REPS: usize = 15;

/// One format's measurement, each the best of interleaved runs: weight bytes streamed per
/// second by each variant for a single-token product (`t = 1`, [`MEASURE_BYTES`]), and
/// multiply-adds per second for a [`PREFILL_TOKENS`]-token product ([`PREFILL_BYTES`]).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct TwoGroupTiming {
    /// Q4_K or Q6_K.
    pub format: WeightFormat,
    /// Decode, the 256-bit one-group kernels, GB/s (10⁹ bytes per second).
    pub one_group_gbs: f64,
    /// Decode, the 512-bit two-group kernels, GB/s.
    pub two_group_gbs: f64,
    /// Prefill, the one-group kernels, GFLOP/s (2 per multiply-add).
    pub one_group_gflops: f64,
    /// Prefill, the two-group kernels, GFLOP/s.
    pub two_group_gflops: f64,
}

/// Which variant a pair of speeds favours: `Some(true)` when the two-group one is faster by
/// more than [`MARGIN`], `Some(false)` when the one-group one is, `None` within the margin.
fn verdict(one: f64, two: f64) -> Option<bool> {
    if two > one * MARGIN {
        Some(true)
    } else if one > two * MARGIN {
        Some(false)
    } else {
        None
    }
}

impl TwoGroupTiming {
    /// Whether the two-group kernels should run for decode-sized products: faster by more
    /// than [`MARGIN`], slower by more than it, or (`None`) a tie.
    pub fn decode_verdict(&self) -> Option<bool> {
        verdict(self.one_group_gbs, self.two_group_gbs)
    }

    /// The same for prefill-sized products.
    pub fn prefill_verdict(&self) -> Option<bool> {
        verdict(self.one_group_gflops, self.two_group_gflops)
    }
}

/// A matrix of `rows × COLS` random quants of `format` ([`crate::synthetic::random_matrix`]).
fn synthetic(format: WeightFormat, rows: usize) -> Vec<u8> {
    crate::synthetic::random_matrix(format, rows, COLS, 0x9e37_79b9_7f4a_7c15 ^ format as u64)
        .expect("COLS is a multiple of 256")
}

/// The fastest of `reps` interleaved timings (after one warm-up each) of `run(false)`
/// (one-group) and `run(true)` (two-group), in seconds: on a shared machine other processes
/// only ever slow a run down, so the best run is the steadiest estimate of what each variant
/// can do (medians of nine flipped the decode choice from run to run on a 2-core Xeon VM).
fn interleaved(reps: usize, mut run: impl FnMut(bool)) -> (f64, f64) {
    let mut time = |pairs: bool| {
        let start = Instant::now();
        run(pairs);
        start.elapsed().as_secs_f64().max(1e-9)
    };
    time(false);
    time(true);
    let (mut one, mut two) = (Vec::with_capacity(reps), Vec::with_capacity(reps));
    for _ in 0..reps {
        one.push(time(false));
        two.push(time(true));
    }
    let best = |v: Vec<f64>| v.into_iter().fold(f64::MAX, f64::min);
    (best(one), best(two))
}

/// Seconds (one-group, two-group) of `t`-token products of `format` on a matrix of about
/// `bytes` bytes, and the packed size in bytes.
fn time_variants(
    format: WeightFormat,
    bytes: usize,
    t: usize,
    reps: usize,
) -> Option<(f64, f64, usize)> {
    let isa = detected_isa();
    let rb = format.row_bytes(COLS)?;
    // Whole pairs of 8-row groups.
    let rows = (bytes / rb).max(16).next_multiple_of(16);
    let data = synthetic(format, rows);
    let w = WeightMatrix::new(format, &data, rows, COLS).ok()?;
    let packed = PackedMatrix::pack(&w)?;
    drop(data);
    let x: Vec<f32> = (0..t * COLS)
        .map(|i| ((i * 37 % 101) as f32 - 50.0) / 50.0)
        .collect();
    let mut y = vec![0f32; t * rows];
    let (one, two) = interleaved(reps, |pairs| {
        matmul_packed_variant(&packed, &x, t, &mut y, isa, pairs)
    });
    Some((one, two, packed.size_bytes()))
}

/// Times one-group against two-group kernels for `format`: decode on a matrix of about
/// `bytes` bytes, prefill on one of [`PREFILL_BYTES`]; `None` when the CPU cannot run the
/// two-group kernels for it.
pub fn measure_two_group_bytes(format: WeightFormat, bytes: usize) -> Option<TwoGroupTiming> {
    if !two_group_supported() || !pairs_possible(format, detected_isa()) {
        return None;
    }
    let (one, two, size) = time_variants(format, bytes, 1, REPS)?;
    let gbs = |secs: f64| size as f64 / secs / 1e9;
    let t = PREFILL_TOKENS;
    let (p1, p2, psize) = time_variants(format, PREFILL_BYTES.min(bytes), t, PREFILL_REPS)?;
    let rows = psize / format.row_bytes(COLS)?;
    let gflops = |secs: f64| (2 * rows * COLS * t) as f64 / secs / 1e9;
    Some(TwoGroupTiming {
        format,
        one_group_gbs: gbs(one),
        two_group_gbs: gbs(two),
        one_group_gflops: gflops(p1),
        two_group_gflops: gflops(p2),
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
                    for v in [t.two_group_gbs, t.one_group_gflops, t.two_group_gflops] {
                        assert!(v.is_finite() && v > 0.0, "{t:?}");
                    }
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
            one_group_gflops: two,
            two_group_gflops: one,
        };
        assert_eq!(t(10.0, 11.0).decode_verdict(), Some(true));
        assert_eq!(t(10.0, 11.0).prefill_verdict(), Some(false));
        assert_eq!(t(10.0, 10.2).decode_verdict(), None);
        assert_eq!(t(10.2, 10.0).prefill_verdict(), None);
        assert_eq!(t(10.0, 8.0).decode_verdict(), Some(false));
    }
}
