//! The memory read probe behind `oxinfer bench --memory`: a pass over a buffer that reads
//! every byte the way the decode kernels stream weights (wide loads, several independent
//! accumulators, software prefetch a few KiB ahead), so the bandwidth it measures is the one
//! those kernels can reach. A plain scalar fold leaves most of a core's outstanding-miss
//! capacity unused and measured less than half of it on a Xeon where one decode thread
//! streamed 20 GB/s.
//!
//! The buffer lives on transparent huge pages like the repacked weights ([`crate::huge`]), and
//! a measurement is the best of several passes: on 4 KiB pages, and from single passes, two calls
//! a minute apart read 53.6 and 25.2 GB/s on the same VM. The passes fill a time window
//! ([`PROBE_SECONDS`]), not a count: a shared host's bandwidth drifts over seconds, and on a
//! 2-core Xeon VM the best of 7 two-thread passes (0.3 s) spread by 36 % over six calls, the
//! best of 40 (1.6 s) by 13 %. [`DecodeProduct`] times a format's
//! one-token product the way a decode step runs it, for comparing the two ([`decode_vs_probe`]:
//! in alternation, since this bandwidth drifts by the second on shared VMs).

use crate::huge::HugeBytes;
use crate::pool::parallel_for;
use std::time::Instant;

/// Bytes the probe streams per pass: far beyond any last-level cache.
pub const PROBE_BYTES: usize = 1 << 30;

/// Passes of each kind (one thread, all threads) at least, of which the fastest counts.
pub const PROBE_PASSES: usize = 7;

/// Seconds the probe's passes last at least ([`ProbeBuffer::measure`]).
pub const PROBE_SECONDS: f64 = 3.0;

/// Read bandwidth in GB/s (10⁹ bytes per second).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Bandwidth {
    /// One thread.
    pub single: f64,
    /// Every pool thread, the buffer split in 64 parts.
    pub all: f64,
    /// Passes of each kind the best was taken from.
    pub passes: usize,
}

/// A probe buffer of `bytes` (rounded down to 8), written once so every page is resident.
pub struct ProbeBuffer {
    bytes: HugeBytes,
}

impl ProbeBuffer {
    /// A filled buffer of about `bytes` bytes.
    pub fn new(bytes: usize) -> Self {
        let mut b = HugeBytes::zeroed(bytes / 8 * 8);
        for (i, c) in b.chunks_exact_mut(8).enumerate() {
            c.copy_from_slice(&(i as u64).to_le_bytes());
        }
        Self { bytes: b }
    }

    fn words(&self) -> &[u64] {
        // SAFETY: any 8 initialized bytes are a valid u64; align_to only hands out the
        // aligned middle (the whole buffer, which is page- or allocator-aligned).
        let (pre, mid, _) = unsafe { self.bytes.align_to::<u64>() };
        debug_assert!(pre.is_empty());
        mid
    }

    /// Seconds of one read of the buffer by one thread.
    pub fn pass_single(&self) -> f64 {
        timed(|| read_sum(self.words()))
    }

    /// Seconds of one read of the buffer by every pool thread (the buffer split in 64 parts).
    pub fn pass_all(&self) -> f64 {
        let words = self.words();
        let parts = 64;
        let per = words.len() / parts;
        timed(|| {
            let sum = std::sync::atomic::AtomicU64::new(0);
            parallel_for(parts, &|i| {
                let s = read_sum(&words[i * per..(i + 1) * per]);
                sum.fetch_add(s, std::sync::atomic::Ordering::Relaxed);
            });
            sum.into_inner()
        })
    }

    /// Bytes one pass reads.
    pub fn len(&self) -> usize {
        self.bytes.len()
    }

    /// Whether the buffer is empty.
    pub fn is_empty(&self) -> bool {
        self.bytes.is_empty()
    }

    /// The bandwidth of one thread and of every pool thread, each the best of its passes:
    /// pairs of passes (all threads, then one) in alternation, so both kinds see the same
    /// moments, at least `passes` pairs and until `seconds` have passed.
    pub fn measure(&self, passes: usize, seconds: f64) -> Bandwidth {
        let start = Instant::now();
        let (mut single, mut all, mut n) = (f64::MAX, f64::MAX, 0);
        while n < passes.max(1) || start.elapsed().as_secs_f64() < seconds {
            all = all.min(self.pass_all());
            single = single.min(self.pass_single());
            n += 1;
        }
        Bandwidth {
            single: gbs(self.len(), single),
            all: gbs(self.len(), all),
            passes: n,
        }
    }
}

/// Seconds `f` takes (its result kept from the optimizer), at least 1 ns.
fn timed(f: impl FnOnce() -> u64) -> f64 {
    let t0 = Instant::now();
    std::hint::black_box(f());
    t0.elapsed().as_secs_f64().max(1e-9)
}

/// GB/s of `bytes` read in `secs`.
pub fn gbs(bytes: usize, secs: f64) -> f64 {
    bytes as f64 / secs / 1e9
}

/// [`ProbeBuffer::measure`] on a fresh [`PROBE_BYTES`] buffer, [`PROBE_PASSES`] passes and
/// [`PROBE_SECONDS`] at least.
pub fn measure() -> Bandwidth {
    ProbeBuffer::new(PROBE_BYTES).measure(PROBE_PASSES, PROBE_SECONDS)
}

/// Columns of the matrices [`DecodeProduct`] times (a 7B model's hidden size).
const DECODE_COLS: usize = 4096;

/// A format's one-token product (what a decode step runs for each weight matrix) on
/// [`crate::synthetic`] weights, through the kernels a model of that format uses (the packed
/// kernels where the format packs, else the row-major ones), ready to be timed.
pub struct DecodeProduct {
    format: crate::WeightFormat,
    rows: usize,
    /// Row-major bytes, on huge pages like the probe's; empty when `packed` is set.
    data: HugeBytes,
    packed: Option<crate::packed::PackedMatrix>,
    x: Vec<f32>,
}

impl DecodeProduct {
    /// About `bytes` of synthetic `format` weights; `None` for formats without synthetic
    /// weights (see [`crate::synthetic::random_matrix`]).
    pub fn new(format: crate::WeightFormat, bytes: usize) -> Option<Self> {
        use crate::packed::{packing_pays, PackedMatrix};
        if !crate::synthetic::supports(format) {
            return None;
        }
        let rb = format.row_bytes(DECODE_COLS)?;
        let rows = (bytes / rb).max(8).next_multiple_of(8);
        let seed = 0x5eed ^ format as u64;
        let data = crate::synthetic::random_matrix(format, rows, DECODE_COLS, seed)?;
        let w = crate::WeightMatrix::new(format, &data, rows, DECODE_COLS).ok()?;
        let packed = if packing_pays(format) {
            PackedMatrix::pack(&w)
        } else {
            None
        };
        let data = match packed {
            Some(_) => HugeBytes::zeroed(0),
            None => HugeBytes::copy_of(&data),
        };
        let x = (0..DECODE_COLS)
            .map(|i| ((i * 37 % 101) as f32 - 50.0) / 50.0)
            .collect();
        Some(Self {
            format,
            rows,
            data,
            packed,
            x,
        })
    }

    /// Weight bytes one product reads.
    pub fn bytes(&self) -> usize {
        self.packed
            .as_ref()
            .map_or(self.data.len(), crate::packed::PackedMatrix::size_bytes)
    }

    /// Seconds of one product on the pool.
    pub fn pass(&self) -> f64 {
        let mut y = vec![0f32; self.rows];
        let t0 = Instant::now();
        match &self.packed {
            Some(p) => crate::packed::matmul_packed(p, &self.x, 1, &mut y),
            None => {
                let w = crate::WeightMatrix::new(self.format, &self.data, self.rows, DECODE_COLS)
                    .expect("checked at construction");
                crate::matmul(&w, &self.x, 1, &mut y);
            }
        }
        let secs = t0.elapsed().as_secs_f64().max(1e-9);
        std::hint::black_box(&y);
        secs
    }
}

/// A decode product's bandwidth against the probe's (every pool thread), measured in
/// alternation so that both see the same moments of a machine whose bandwidth drifts: GB/s
/// `(product, probe)`, the best of `passes` each.
pub fn decode_vs_probe(product: &DecodeProduct, probe: &ProbeBuffer, passes: usize) -> (f64, f64) {
    product.pass();
    let (mut p, mut k) = (f64::MAX, f64::MAX);
    for _ in 0..passes.max(1) {
        p = p.min(probe.pass_all());
        k = k.min(product.pass());
    }
    (gbs(product.bytes(), k), gbs(probe.len(), p))
}

/// Bytes between a load and the prefetch issued alongside it (as the packed kernels do).
#[cfg(target_arch = "x86_64")]
const PREFETCH_AHEAD: usize = 4096;

/// Reads every element of `data` and returns their wrapping sum (so the reads cannot be
/// optimized away).
pub fn read_sum(data: &[u64]) -> u64 {
    #[cfg(target_arch = "x86_64")]
    if crate::dispatch::detected_isa().has_avx2() {
        // SAFETY: the CPU has AVX2 (detected).
        return unsafe { avx2::read_sum(data) };
    }
    data.iter().fold(0u64, |a, &b| a.wrapping_add(b))
}

#[cfg(target_arch = "x86_64")]
mod avx2 {
    use super::PREFETCH_AHEAD;
    use std::arch::x86_64::*;

    /// [`super::read_sum`] with 256-bit loads, four accumulators and prefetches.
    #[target_feature(enable = "avx2")]
    pub(super) unsafe fn read_sum(data: &[u64]) -> u64 {
        let mut acc = [_mm256_setzero_si256(); 4];
        let chunks = data.chunks_exact(16);
        let tail = chunks.remainder();
        for c in chunks {
            let p = c.as_ptr() as *const __m256i;
            // SAFETY: `c` holds 16 u64 = four 32-byte vectors; prefetch is a hint that never
            // faults (wrapping_add keeps the address computation defined).
            unsafe {
                _mm_prefetch::<_MM_HINT_T0>((p as *const i8).wrapping_add(PREFETCH_AHEAD));
                _mm_prefetch::<_MM_HINT_T0>((p as *const i8).wrapping_add(PREFETCH_AHEAD + 64));
                for (j, a) in acc.iter_mut().enumerate() {
                    *a = _mm256_add_epi64(*a, _mm256_loadu_si256(p.add(j)));
                }
            }
        }
        let mut lanes = [0u64; 4];
        let s = _mm256_add_epi64(
            _mm256_add_epi64(acc[0], acc[1]),
            _mm256_add_epi64(acc[2], acc[3]),
        );
        // SAFETY: `lanes` holds four u64.
        unsafe { _mm256_storeu_si256(lanes.as_mut_ptr() as *mut __m256i, s) };
        let tail_sum = tail.iter().fold(0u64, |a, &b| a.wrapping_add(b));
        lanes.iter().fold(tail_sum, |a, &b| a.wrapping_add(b))
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn read_sum_is_the_wrapping_sum() {
        for n in [0usize, 1, 15, 16, 17, 1000, 4099] {
            let v: Vec<u64> = (0..n as u64)
                .map(|i| i.wrapping_mul(0x9E37_79B9_7F4A_7C15))
                .collect();
            let want = v.iter().fold(0u64, |a, &b| a.wrapping_add(b));
            assert_eq!(super::read_sum(&v), want, "n = {n}");
        }
    }

    #[test]
    fn probe_and_decode_timings_are_positive() {
        let bw = super::ProbeBuffer::new(8 << 20).measure(2, 0.0);
        assert!(
            bw.single > 0.0 && bw.all > 0.0 && bw.all.is_finite() && bw.passes == 2,
            "{bw:?}"
        );
        let bw = super::ProbeBuffer::new(1 << 20).measure(1, 0.05);
        assert!(bw.passes > 1, "{bw:?}");
        let probe = super::ProbeBuffer::new(1 << 20);
        for f in [
            crate::WeightFormat::Q4_0,
            crate::WeightFormat::Q4K,
            crate::WeightFormat::Q6K,
            crate::WeightFormat::BF16,
        ] {
            let p = super::DecodeProduct::new(f, 1 << 20).unwrap();
            assert!(
                p.bytes().abs_diff(1 << 20) < 1 << 17,
                "{f}: {} bytes",
                p.bytes()
            );
            let (k, w) = super::decode_vs_probe(&p, &probe, 2);
            assert!(k > 0.0 && k.is_finite() && w > 0.0, "{f}: {k} {w}");
        }
        // No synthetic weights for the IQ types.
        assert!(super::DecodeProduct::new(crate::WeightFormat::IQ4_NL, 1 << 20).is_none());
    }
}
