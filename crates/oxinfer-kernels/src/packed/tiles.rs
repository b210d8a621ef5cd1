//! The token tile the packed kernels fill, and (x86-64) the one skeleton of the AVX2 and the
//! AVX-512 VNNI tile kernels.
//!
//! The two instruction sets load, unpack, scale and accumulate the packed blocks the same way
//! and differ only in how four quant bytes meet four activation bytes: AVX2 multiplies them
//! with `maddubs` into i16 pair sums and widens those with `madd` (within its i16 headroom),
//! VNNI adds them straight into i32 lanes with `vpdpbusd`. [`packed_tiles!`] writes the
//! kernels once, with `#[target_feature]` set per instruction set, around four integer hooks
//! each of `avx2.rs` and `vnni.rs` defines (`#[inline(always)]`, so they compile into the
//! kernels with the kernels' features):
//!
//! - `q8_0_sums::<N>(qs, xq) -> [__m256i; N]`: per lane, Σ of the eight signed quant
//!   registers at `qs` times the activation bytes at `xq[k]` (32 each).
//! - `nibble_sums::<N, FIVE, SCALED>(qs, hb, xq, sc, s32)`: adds to `s32[k]`, per lane, the sum
//!   of the four nibble chunks at `qs` (fifth bits from `hb` with `FIVE`) times the 32
//!   activation bytes at `xq[k]`, times the lane's scale `sc` (i32 per lane) with `SCALED`.
//! - `q6k_scales(scq) -> (sc0, sc1)`: the two Q6_K group scales of a sub-block (`scq`: the
//!   lanes' `(sc[2s], sc[2s + 1])` as i16 pairs) in the form `q6k_sums` takes.
//! - `q6k_sums::<N>(w, xq, scv, s32)`: adds to `s32[k]` the group scale `scv` times the sum of
//!   the four 6-bit quant registers `w` times the 16 activation bytes at `xq[k]`.
//!
//! Integer sums are exact in both, and every float operation is the same and in the same
//! order, so both agree bit for bit with each other and with the scalar twin (`scalar.rs`).

/// Tokens multiplied together against one unpacked weight register, at most: 8 on the AVX-512
/// VNNI kernels, 4 on the others (see `tile_width` in `mod.rs`).
pub const TILE_TOKENS: usize = 8;

/// Writes the tile kernels of one x86-64 instruction set: `tile` (the entry point,
/// `super::run_tile`'s twin for that set) and the format kernels it dispatches to, every one
/// with `#[target_feature(enable = $features)]`; tiles of `$wide` tokens get kernels of their
/// own (tiles of fewer than 4 tokens always do; wider ones run 4 at a time otherwise). The
/// invoking module defines the integer hooks (see the module doc) and glob-imports
/// `std::arch::x86_64`. `$d` is a `$` token (the kernels' width dispatch is a macro itself).
#[cfg(target_arch = "x86_64")]
macro_rules! packed_tiles {
    ($d:tt features = $features:literal, wide = [$($wide:literal),*]) => {
        use super::pack::{q2k, q3k, q4k, q5k, q6k, qh_offset, qs_offset, t4, t4_table, table32};
        use super::x86::{e8m0_half_x8, f16x8, format_of, high2, prefetch_ahead, table16};
        use super::x86::{IQ4_NL, MXFP4, Q4_0, Q4_1, Q5_0, Q5_1, Q8_0};
        use super::pack::LANES;
        use super::tiles::TILE_TOKENS;
        use crate::fast::Acts;
        use crate::format::WeightFormat;
        use crate::q8::{BlockQ8, BlockQ8K};

        /// See `super::run_tile`: dispatches on format and tile width.
        ///
        /// # Safety
        /// The CPU must have the features of this module's kernels; `g` must be a whole packed
        /// group of `nb` blocks of `format`, and `acts` must hold `nb` blocks per token for
        /// tokens `ti .. ti + n`.
        #[allow(clippy::too_many_arguments)]
        #[target_feature(enable = $features)]
        pub(crate) unsafe fn tile(
            format: WeightFormat,
            g: &[u8],
            nb: usize,
            acts: &Acts,
            ti: usize,
            n: usize,
            tile: &mut [[f32; LANES]; TILE_TOKENS],
        ) {
            let gp = g.as_ptr();
            // Calls kernel `$k` (its generic arguments before the width in `$f`, arguments
            // after the output tile in `$a`) on the tile width `n`, with the activation rows
            // of tokens ti .. ti + n of `$q`.
            macro_rules! go {
                ($d q:expr, $d k:ident $d (, $d f:expr)? $d (; $d ($d a:expr),*)?) => {{
                    let x = |k: usize| $d q[(ti + k) * nb..(ti + k + 1) * nb].as_ptr();
                    match n {
                        1 => $d k::<$d ({ $d f },)? 1>(
                            gp, nb, [x(0)], tile $d ($d (, $d a)*)?
                        ),
                        2 => $d k::<$d ({ $d f },)? 2>(
                            gp, nb, [x(0), x(1)], tile $d ($d (, $d a)*)?
                        ),
                        3 => $d k::<$d ({ $d f },)? 3>(
                            gp, nb, [x(0), x(1), x(2)], tile $d ($d (, $d a)*)?
                        ),
                        $(
                            $wide => $d k::<$d ({ $d f },)? $wide>(
                                gp,
                                nb,
                                std::array::from_fn(x),
                                tile
                                $d ($d (, $d a)*)?
                            ),
                        )*
                        _ => $d k::<$d ({ $d f },)? 4>(
                            gp, nb, [x(0), x(1), x(2), x(3)], tile $d ($d (, $d a)*)?
                        ),
                    }
                }};
            }
            // SAFETY (every arm): forwarded contract; the pointers start the activation rows
            // of tokens ti .. ti + n (bounds checked by the slicing).
            unsafe {
                match (acts, format) {
                    (Acts::Q8(q), WeightFormat::Q4_0) => go!(q, tile32, Q4_0),
                    (Acts::Q8(q), WeightFormat::Q4_1) => go!(q, tile32, Q4_1),
                    (Acts::Q8(q), WeightFormat::Q5_0) => go!(q, tile32, Q5_0),
                    (Acts::Q8(q), WeightFormat::Q5_1) => go!(q, tile32, Q5_1),
                    (Acts::Q8(q), WeightFormat::IQ4_NL) => go!(q, tile32, IQ4_NL),
                    (Acts::Q8(q), WeightFormat::MXFP4) => go!(q, tile32, MXFP4),
                    (Acts::Q8(q), _) => go!(q, tile32, Q8_0),
                    (Acts::Q8K(q), WeightFormat::Q4K) => go!(q, tile_q4k_),
                    (Acts::Q8K(q), WeightFormat::Q5K) => go!(q, tile_q5k_),
                    (Acts::Q8K(q), f) if t4_table(f).is_some() => {
                        let (table, unit) = t4_table(f).expect("a table format");
                        go!(q, tile_t4; table, unit)
                    }
                    (Acts::Q8K(q), WeightFormat::Q3K) => go!(q, tile_q6k, 3),
                    (Acts::Q8K(q), WeightFormat::Q2K) => go!(q, tile_q6k, 2),
                    (Acts::Q8K(q), _) => go!(q, tile_q6k, 6),
                    (Acts::F32(_), _) => unreachable!("float formats are not packed"),
                }
            }
        }

        /// Q4_0 / Q4_1 / Q5_0 / Q5_1 / Q8_0 / IQ4_NL / MXFP4: `N` tokens × eight rows.
        #[target_feature(enable = $features)]
        unsafe fn tile32<const F: u8, const N: usize>(
            g: *const u8,
            nb: usize,
            xs: [*const BlockQ8; N],
            out: &mut [[f32; LANES]; TILE_TOKENS],
        ) {
            let pb = match F {
                Q4_0 => 144,
                Q4_1 => 160,
                Q5_0 => 176,
                Q5_1 => 192,
                IQ4_NL => 144,
                MXFP4 => 136,
                _ => 272,
            };
            let qo = qs_offset(format_of(F));
            // SAFETY: a 16-byte table; the kernel has AVX2.
            let table = unsafe { table16(table32(format_of(F)).unwrap_or(&[0; 16])) };
            let mut acc = [_mm256_setzero_ps(); N];
            for i in 0..nb {
                // SAFETY: block i of the group spans [i*pb, (i+1)*pb) (the group holds nb
                // blocks); token k's block i exists (nb blocks per token); offsets follow the
                // layout.
                unsafe {
                    let p = g.add(i * pb);
                    prefetch_ahead(p, pb);
                    let d = if F == MXFP4 {
                        e8m0_half_x8(p)
                    } else {
                        f16x8(p)
                    };
                    let qs = p.add(qo);
                    let mut xq = [std::ptr::null::<i8>(); N];
                    for k in 0..N {
                        xq[k] = (*xs[k].add(i)).qs.as_ptr();
                    }
                    let s32 = if F == Q8_0 {
                        q8_0_sums::<N>(qs, xq)
                    } else if F == IQ4_NL || F == MXFP4 {
                        let w = table_quants(qs, table);
                        let a = signed_sums4::<N>([w[0], w[1], w[2], w[3]], xq);
                        let b = signed_sums4::<N>([w[4], w[5], w[6], w[7]], xq.map(|x| x.add(16)));
                        std::array::from_fn(|k| _mm256_add_epi32(a[k], b[k]))
                    } else {
                        let mut s32 = [_mm256_setzero_si256(); N];
                        let zero = _mm256_setzero_si256();
                        if F == Q5_0 || F == Q5_1 {
                            let hb = _mm256_loadu_si256(
                                p.add(qh_offset(format_of(F))) as *const __m256i
                            );
                            nibble_sums::<N, true, false>(qs, hb, xq, zero, &mut s32);
                        } else {
                            nibble_sums::<N, false, false>(qs, zero, xq, zero, &mut s32);
                        }
                        s32
                    };
                    let mw = match F {
                        Q4_1 | Q5_1 => f16x8(p.add(16)),
                        Q5_0 => _mm256_mul_ps(d, _mm256_set1_ps(16.0)),
                        _ => _mm256_mul_ps(d, _mm256_set1_ps(8.0)),
                    };
                    for k in 0..N {
                        let y = &*xs[k].add(i);
                        let dd = _mm256_mul_ps(d, _mm256_set1_ps(y.d));
                        acc[k] = _mm256_fmadd_ps(dd, _mm256_cvtepi32_ps(s32[k]), acc[k]);
                        match F {
                            Q4_1 | Q5_1 => {
                                acc[k] = _mm256_fmadd_ps(mw, _mm256_set1_ps(y.s), acc[k])
                            }
                            Q4_0 | Q5_0 => {
                                acc[k] = _mm256_fnmadd_ps(mw, _mm256_set1_ps(y.s), acc[k])
                            }
                            _ => {}
                        }
                    }
                }
            }
            for k in 0..N {
                // SAFETY: out[k] holds 8 f32.
                unsafe { _mm256_storeu_ps(out[k].as_mut_ptr(), acc[k]) };
            }
        }

        /// The eight signed quant registers `W_0 .. W_7` of the four nibble chunks at `qs`:
        /// each 4-bit index looked up in `table` (16 i8 values in both 128-bit halves).
        #[inline(always)]
        unsafe fn table_quants(qs: *const u8, table: __m256i) -> [__m256i; 8] {
            let zero = _mm256_setzero_si256();
            let mut w = [zero; 8];
            for c in 0..4 {
                // SAFETY: the caller guarantees 128 readable bytes at `qs`; the kernels that
                // inline this have AVX2.
                unsafe {
                    let (lo, hi) = super::x86::nibble_pair::<false>(qs, zero, c);
                    w[2 * c] = _mm256_shuffle_epi8(table, lo);
                    w[2 * c + 1] = _mm256_shuffle_epi8(table, hi);
                }
            }
            w
        }

        /// 256-weight table formats (IQ4_XS, IQ2_*, IQ3_*, IQ1_*, TQ*): `N` tokens × eight
        /// rows; `table` holds the 16 values of the packed indices, `unit` the factor of `d`.
        #[target_feature(enable = $features)]
        unsafe fn tile_t4<const N: usize>(
            g: *const u8,
            nb: usize,
            xs: [*const BlockQ8K; N],
            out: &mut [[f32; LANES]; TILE_TOKENS],
            table: &[i8; 16],
            unit: f32,
        ) {
            // SAFETY: a 16-byte table; the kernel has AVX2.
            let tv = unsafe { table16(table) };
            let mut acc = [_mm256_setzero_ps(); N];
            for i in 0..nb {
                // SAFETY: block i of the group spans [i*t4::BYTES, (i+1)*t4::BYTES); token k's
                // super-block i exists; offsets follow the layout.
                unsafe {
                    let p = g.add(i * t4::BYTES);
                    prefetch_ahead(p, t4::QS);
                    let mut s32 = [_mm256_setzero_si256(); N];
                    for s in 0..8 {
                        prefetch_ahead(p.add(t4::qs(s)), 128);
                        // Lanes' integer scales of groups 2s (low 8 bytes) and 2s + 1.
                        let scb = _mm_loadu_si128(p.add(t4::SC + 16 * s) as *const __m128i);
                        let sc0 = _mm256_cvtepi8_epi32(scb);
                        let sc1 = _mm256_cvtepi8_epi32(_mm_srli_si128::<8>(scb));
                        let w = table_quants(p.add(t4::qs(s)), tv);
                        let mut xq = [std::ptr::null::<i8>(); N];
                        for k in 0..N {
                            xq[k] = (*xs[k].add(i)).qs.as_ptr().add(32 * s);
                        }
                        let a = signed_sums4::<N>([w[0], w[1], w[2], w[3]], xq);
                        let b = signed_sums4::<N>([w[4], w[5], w[6], w[7]], xq.map(|x| x.add(16)));
                        for k in 0..N {
                            let part = _mm256_add_epi32(
                                _mm256_mullo_epi32(a[k], sc0),
                                _mm256_mullo_epi32(b[k], sc1),
                            );
                            s32[k] = _mm256_add_epi32(s32[k], part);
                        }
                    }
                    let d = _mm256_mul_ps(f16x8(p), _mm256_set1_ps(unit));
                    for k in 0..N {
                        let y = &*xs[k].add(i);
                        let dd = _mm256_mul_ps(d, _mm256_set1_ps(y.d));
                        acc[k] = _mm256_fmadd_ps(dd, _mm256_cvtepi32_ps(s32[k]), acc[k]);
                    }
                }
            }
            for k in 0..N {
                // SAFETY: out[k] holds 8 f32.
                unsafe { _mm256_storeu_ps(out[k].as_mut_ptr(), acc[k]) };
            }
        }

        /// [`tile_q4k`] for Q4_K.
        #[target_feature(enable = $features)]
        unsafe fn tile_q4k_<const N: usize>(
            g: *const u8,
            nb: usize,
            xs: [*const BlockQ8K; N],
            out: &mut [[f32; LANES]; TILE_TOKENS],
        ) {
            // SAFETY: forwarded contract.
            unsafe { tile_q4k::<N, false>(g, nb, xs, out) }
        }

        /// [`tile_q4k`] for Q5_K.
        #[target_feature(enable = $features)]
        unsafe fn tile_q5k_<const N: usize>(
            g: *const u8,
            nb: usize,
            xs: [*const BlockQ8K; N],
            out: &mut [[f32; LANES]; TILE_TOKENS],
        ) {
            // SAFETY: forwarded contract.
            unsafe { tile_q4k::<N, true>(g, nb, xs, out) }
        }

        /// Q4_K (Q5_K with `FIVE`: the fifth bits of each sub-block at `q5k::qh(s)`): `N`
        /// tokens × eight rows.
        #[target_feature(enable = $features)]
        unsafe fn tile_q4k<const N: usize, const FIVE: bool>(
            g: *const u8,
            nb: usize,
            xs: [*const BlockQ8K; N],
            out: &mut [[f32; LANES]; TILE_TOKENS],
        ) {
            let mut acc = [_mm256_setzero_ps(); N];
            for i in 0..nb {
                // SAFETY: block i of the group spans [i*pb, (i+1)*pb); token k's super-block i
                // exists; offsets follow the layout.
                unsafe {
                    let pb = if FIVE { q5k::BYTES } else { q4k::BYTES };
                    let p = g.add(i * pb);
                    prefetch_ahead(p, q4k::QS);
                    let mut s32 = [_mm256_setzero_si256(); N];
                    for s in 0..8 {
                        let sc = _mm256_cvtepu8_epi32(_mm_loadl_epi64(
                            p.add(q4k::SC + 8 * s) as *const __m128i
                        ));
                        let qs = p.add(if FIVE { q5k::qs(s) } else { q4k::QS + 128 * s });
                        prefetch_ahead(qs, if FIVE { 160 } else { 128 });
                        let hb = if FIVE {
                            _mm256_loadu_si256(p.add(q5k::qh(s)) as *const __m256i)
                        } else {
                            _mm256_setzero_si256()
                        };
                        let mut xq = [std::ptr::null::<i8>(); N];
                        for k in 0..N {
                            xq[k] = (*xs[k].add(i)).qs.as_ptr().add(32 * s);
                        }
                        nibble_sums::<N, FIVE, true>(qs, hb, xq, sc, &mut s32);
                    }
                    let d = f16x8(p);
                    let dmin = f16x8(p.add(q4k::DMIN));
                    for k in 0..N {
                        let y = &*xs[k].add(i);
                        // i16 sums of sub-block pairs: lanes 0..4 of each 128-bit half hold
                        // (bsums[2s] + bsums[2s + 1]) for s = 0..4 (low half) and 4..8 (high
                        // half).
                        let b = _mm256_loadu_si256(y.bsums.as_ptr() as *const __m256i);
                        let h = _mm256_hadd_epi16(b, b);
                        let mut mins = _mm256_setzero_si256();
                        for (pair, idx) in [0, 1, 4, 5].into_iter().enumerate() {
                            let mp = _mm256_cvtepu8_epi16(_mm_loadu_si128(
                                p.add(q4k::MIN + 16 * pair) as *const __m128i,
                            ));
                            let bs = _mm256_permutevar8x32_epi32(h, _mm256_set1_epi32(idx));
                            mins = _mm256_add_epi32(mins, _mm256_madd_epi16(mp, bs));
                        }
                        let dy = _mm256_set1_ps(y.d);
                        acc[k] = _mm256_fmadd_ps(
                            _mm256_mul_ps(d, dy),
                            _mm256_cvtepi32_ps(s32[k]),
                            acc[k],
                        );
                        acc[k] = _mm256_fnmadd_ps(
                            _mm256_mul_ps(dmin, dy),
                            _mm256_cvtepi32_ps(mins),
                            acc[k],
                        );
                    }
                }
            }
            for k in 0..N {
                // SAFETY: out[k] holds 8 f32.
                unsafe { _mm256_storeu_ps(out[k].as_mut_ptr(), acc[k]) };
            }
        }

        /// The K-quants with a scale per 16 weights, `N` tokens × eight rows: Q6_K (`BITS` 6),
        /// Q3_K (3: 2-bit and 1-bit planes, offset 4 instead of 32) and Q2_K (2: 2-bit planes,
        /// a min per 16 weights as Q4_K's per 32). One scale layout (lanes' pairs of i8
        /// scales per sub-block) and the same sums.
        #[target_feature(enable = $features)]
        unsafe fn tile_q6k<const BITS: u8, const N: usize>(
            g: *const u8,
            nb: usize,
            xs: [*const BlockQ8K; N],
            out: &mut [[f32; LANES]; TILE_TOKENS],
        ) {
            let m4 = _mm256_set1_epi8(0x0F);
            let (m3, m4b) = (_mm256_set1_epi8(0x03), _mm256_set1_epi8(0x04));
            let (pb, head, sub) = match BITS {
                3 => (q3k::BYTES, q3k::QL, 96),
                2 => (q2k::BYTES, q2k::QL, 64),
                _ => (q6k::BYTES, q6k::QL, 192),
            };
            let mut acc = [_mm256_setzero_ps(); N];
            for i in 0..nb {
                // SAFETY: block i of the group spans [i*pb, (i+1)*pb); token k's super-block
                // i exists; offsets follow the layout.
                unsafe {
                    let p = g.add(i * pb);
                    prefetch_ahead(p, head);
                    let mut s32 = [_mm256_setzero_si256(); N];
                    // Q2_K: Σ m · bsums per lane.
                    let mut m32 = [_mm256_setzero_si256(); N];
                    for s in 0..8 {
                        let ql = p.add(match BITS {
                            3 => q3k::ql(s),
                            2 => q2k::ql(s),
                            _ => q6k::ql(s),
                        });
                        prefetch_ahead(ql, sub);
                        // Lanes r: (sc[2s], sc[2s + 1]) as i16 (Q2_K: their low nibbles; the
                        // mins, the high nibbles, in mq).
                        let (scq, mq) = if BITS == 2 {
                            let raw = _mm_loadu_si128(p.add(q2k::SCM + 16 * s) as *const __m128i);
                            let m15 = _mm_set1_epi8(0x0F);
                            (
                                _mm256_cvtepu8_epi16(_mm_and_si128(raw, m15)),
                                _mm256_cvtepu8_epi16(_mm_and_si128(_mm_srli_epi16::<4>(raw), m15)),
                            )
                        } else {
                            let sc_at = if BITS == 3 { q3k::SC } else { q6k::SC };
                            let raw = _mm_loadu_si128(p.add(sc_at + 16 * s) as *const __m128i);
                            (_mm256_cvtepi8_epi16(raw), _mm256_setzero_si256())
                        };
                        let (sc0, sc1) = q6k_scales(scq);
                        for (h, scv) in [(0usize, sc0), (1, sc1)] {
                            let w = if BITS == 2 {
                                let lo = _mm256_loadu_si256(ql.add(32 * h) as *const __m256i);
                                [
                                    _mm256_and_si256(lo, m3),
                                    _mm256_and_si256(_mm256_srli_epi16::<2>(lo), m3),
                                    _mm256_and_si256(_mm256_srli_epi16::<4>(lo), m3),
                                    _mm256_and_si256(_mm256_srli_epi16::<6>(lo), m3),
                                ]
                            } else if BITS == 3 {
                                // Low bits (L >> 2k) & 3, third bit (H >> (4h + k)) & 1 at bit 2.
                                let lo = _mm256_loadu_si256(ql.add(32 * h) as *const __m256i);
                                let hb = _mm256_loadu_si256(p.add(q3k::qh(s)) as *const __m256i);
                                let hb = if h == 0 {
                                    _mm256_slli_epi16::<2>(hb)
                                } else {
                                    _mm256_srli_epi16::<2>(hb)
                                };
                                [
                                    _mm256_or_si256(
                                        _mm256_and_si256(lo, m3),
                                        _mm256_and_si256(hb, m4b),
                                    ),
                                    _mm256_or_si256(
                                        _mm256_and_si256(_mm256_srli_epi16::<2>(lo), m3),
                                        _mm256_and_si256(_mm256_srli_epi16::<1>(hb), m4b),
                                    ),
                                    _mm256_or_si256(
                                        _mm256_and_si256(_mm256_srli_epi16::<4>(lo), m3),
                                        _mm256_and_si256(_mm256_srli_epi16::<2>(hb), m4b),
                                    ),
                                    _mm256_or_si256(
                                        _mm256_and_si256(_mm256_srli_epi16::<6>(lo), m3),
                                        _mm256_and_si256(_mm256_srli_epi16::<3>(hb), m4b),
                                    ),
                                ]
                            } else {
                                let qh = p.add(q6k::qh(s));
                                let hb = _mm256_loadu_si256(qh.add(32 * h) as *const __m256i);
                                let v0 = _mm256_loadu_si256(ql.add(64 * h) as *const __m256i);
                                let v1 = _mm256_loadu_si256(ql.add(64 * h + 32) as *const __m256i);
                                [
                                    _mm256_or_si256(_mm256_and_si256(v0, m4), high2::<0>(hb)),
                                    _mm256_or_si256(
                                        _mm256_and_si256(_mm256_srli_epi16::<4>(v0), m4),
                                        high2::<1>(hb),
                                    ),
                                    _mm256_or_si256(_mm256_and_si256(v1, m4), high2::<2>(hb)),
                                    _mm256_or_si256(
                                        _mm256_and_si256(_mm256_srli_epi16::<4>(v1), m4),
                                        high2::<3>(hb),
                                    ),
                                ]
                            };
                            let mut xq = [std::ptr::null::<i8>(); N];
                            for k in 0..N {
                                xq[k] = (*xs[k].add(i)).qs.as_ptr().add(32 * s + 16 * h);
                            }
                            q6k_sums::<N>(w, xq, scv, &mut s32);
                        }
                        for k in 0..N {
                            // -32 (Q3_K: -4) · (sc[2s] · bsums[2s] + sc[2s + 1] · bsums[2s + 1])
                            // per lane; Q2_K: the mins' m · bsums, kept apart.
                            let y = &*xs[k].add(i);
                            let bs = _mm256_set1_epi32(std::ptr::read_unaligned(
                                y.bsums.as_ptr().add(2 * s) as *const i32,
                            ));
                            match BITS {
                                2 => m32[k] = _mm256_add_epi32(m32[k], _mm256_madd_epi16(mq, bs)),
                                3 => {
                                    let corr = _mm256_slli_epi32::<2>(_mm256_madd_epi16(scq, bs));
                                    s32[k] = _mm256_sub_epi32(s32[k], corr);
                                }
                                _ => {
                                    let corr = _mm256_slli_epi32::<5>(_mm256_madd_epi16(scq, bs));
                                    s32[k] = _mm256_sub_epi32(s32[k], corr);
                                }
                            }
                        }
                    }
                    let d = f16x8(p);
                    for k in 0..N {
                        let y = &*xs[k].add(i);
                        let dd = _mm256_mul_ps(d, _mm256_set1_ps(y.d));
                        acc[k] = _mm256_fmadd_ps(dd, _mm256_cvtepi32_ps(s32[k]), acc[k]);
                        if BITS == 2 {
                            let dmin = f16x8(p.add(q2k::DMIN));
                            let dm = _mm256_mul_ps(dmin, _mm256_set1_ps(y.d));
                            acc[k] = _mm256_fnmadd_ps(dm, _mm256_cvtepi32_ps(m32[k]), acc[k]);
                        }
                    }
                }
            }
            for k in 0..N {
                // SAFETY: out[k] holds 8 f32.
                unsafe { _mm256_storeu_ps(out[k].as_mut_ptr(), acc[k]) };
            }
        }
    };
}

#[cfg(target_arch = "x86_64")]
pub(super) use packed_tiles;
