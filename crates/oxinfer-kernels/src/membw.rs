//! The memory read probe behind `oxinfer bench --memory`: a pass over a buffer that reads
//! every byte the way the decode kernels stream weights (wide loads, several independent
//! accumulators, software prefetch a few KiB ahead), so the bandwidth it measures is the one
//! those kernels can reach. A plain scalar fold leaves most of a core's outstanding-miss
//! capacity unused and measured less than half of it on a Xeon where one decode thread
//! streamed 20 GB/s.

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
}
