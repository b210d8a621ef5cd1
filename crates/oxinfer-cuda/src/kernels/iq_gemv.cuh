// int8 (dp4a) GEMV bodies of the IQ / TQ / MXFP4 formats. IQ4_NL and MXFP4 (32-weight blocks of
// 4-bit codes into a 16-entry int8 table; activations in blocks of 32): dot32_i8 for gemv.cu's
// b32_i8_rows, byte permutes looking codes up eight at a time (lut16_x8; IQ4_NL's sign-split
// dot iq4nl_dot32). The 256-weight formats (activations in blocks of 256, the CPU's Q8_K):
// iq_i8_rows, each lane decoding one 32-weight group to int8 quants with the integer scales of
// the CPU's int_scale (iq_group32; one-row IQ4_XS takes iq4nl_dot32 instead, or
// iq4xs_wide_rows). The integer sums are the CPU's; only the f32 combination differs in order.
// Included after gemv.cu (it uses dp4a, prmt, ld32_a2 and the templates declared there).

#ifndef OXINFER_IQ_GEMV_CUH
#define OXINFER_IQ_GEMV_CUH

#include "iq_dequant.cuh"

// Four 4-bit codes (one per byte of `codes`, each 0..15) -> the four int8 table entries
// (table as four little-endian words w0..w3), packed in byte order.
__device__ __forceinline__ int lut16_x4(u32 codes, u32 w0, u32 w1, u32 w2, u32 w3) {
    u32 n = codes | (codes >> 4);
    u32 sel = (n & 0xffu) | ((n >> 8) & 0xff00u);  // the four codes as nibbles
    u32 lo = __byte_perm(w0, w1, sel & 0x7777u);   // entries 0..7
    u32 hi = __byte_perm(w2, w3, sel & 0x7777u);   // entries 8..15
    return (int)__byte_perm(lo, hi, 0x3210u | ((sel & 0x8888u) >> 1));
}

// The 16 weights' int8 table values of four bytes of codes: low nibbles (lo) and high (hi).
#define IQ4NL_X4(c) lut16_x4((c), KVALUES_IQ4NL_W0, KVALUES_IQ4NL_W1, KVALUES_IQ4NL_W2, KVALUES_IQ4NL_W3)
#define MXFP4_X4(c) lut16_x4((c), KVALUES_MXFP4_W0, KVALUES_MXFP4_W1, KVALUES_MXFP4_W2, KVALUES_MXFP4_W3)

// Eight 4-bit codes (the two nibbles of each byte of `q`) -> their int8 table entries (table
// as four little-endian words): x holds the low nibbles' four values, y the high nibbles', each
// in byte order. llama.cpp's get_int_from_table_16: each half-word of q (two bytes, four codes
// in nibble order lo0 hi0 lo1 hi1) is looked up whole in both table halves, a third permute picks
// each byte's half by the code's top bit, and two permutes split the even bytes (low nibbles)
// from the odd ones: about 13 instructions for eight values, where lut16_x4 takes about 24 (it
// first gathers each nibble half into a selector). Every selector has its top bits clear (prmt).
__device__ __forceinline__ int2 lut16_x8(u32 q, u32 w0, u32 w1, u32 w2, u32 w3) {
    u32 m = q & 0x77777777u, mh = m >> 16;                    // each code's index mod 8
    u32 sel = ((q & 0x88888888u) >> 1) + 0x32103210u;         // byte i of lo, or of hi if >= 8
    u32 a = prmt(prmt(w0, w1, m), prmt(w2, w3, m), sel);
    u32 b = prmt(prmt(w0, w1, mh), prmt(w2, w3, mh), sel >> 16);
    return make_int2((int)prmt(a, b, 0x6420u), (int)prmt(a, b, 0x7531u));
}

#define IQ4NL_X8(c) lut16_x8((c), KVALUES_IQ4NL_W0, KVALUES_IQ4NL_W1, KVALUES_IQ4NL_W2, KVALUES_IQ4NL_W3)
#define MXFP4_X8(c) lut16_x8((c), KVALUES_MXFP4_W0, KVALUES_MXFP4_W1, KVALUES_MXFP4_W2, KVALUES_MXFP4_W3)

// The integer dot product of 32 weights given as 16 bytes of 4-bit codes (words c: byte j holds
// weight j's code in its low nibble and weight 16 + j's in its high one) with their 32 int8
// activations x (eight packed words), through the table w0..w3 (lut16_x8): exact.
__device__ __forceinline__ int dot32_codes(const u32 (&c)[4], const int* x, u32 w0, u32 w1,
                                           u32 w2, u32 w3) {
    int dot = 0;
    #pragma unroll
    for (int i = 0; i < 4; i++) {
        int2 v = lut16_x8(c[i], w0, w1, w2, w3);
        dot = dp4a(v.y, x[4 + i], dp4a(v.x, x[i], dot));
    }
    return dot;
}

// Four int8 bytes negated (two's complement per byte; no byte may be 0, so none carries).
__host__ __device__ constexpr u32 neg4(u32 w) { return ~w + 0x01010101u; }

// IQ4_NL's table split by sign for iq4nl_dot32: entries 0..7 negated (10..127) and entries
// 8..15 (1..113), as words in constant memory: a byte permute takes one table word from a
// register, and ptxas rematerializes an immediate's register before every use (16 moves per
// 32 weights), where words loaded from constant memory stay in registers.
__constant__ u32 IQ4NL_SPLIT[4] = {neg4(KVALUES_IQ4NL_W0), neg4(KVALUES_IQ4NL_W1),
                                   KVALUES_IQ4NL_W2, KVALUES_IQ4NL_W3};

// dot32_codes for IQ4_NL's table without building the weights' bytes. In prmt's sign mode (a
// selector nibble with its top bit set) a byte comes out as its sign, 0 for the positive
// entries of both split halves: the codes as stored select entries 0..7 of the negated half
// and 0 for codes >= 8, the codes with their top bits flipped entries 8..15 and 0 for codes
// < 8, so the dot is the second lookup's dp4a minus the first's. The lookups keep the codes'
// order in a half-word (weight j, j + 16, j + 1, j + 17), so the activations are permuted to
// it (two permutes per eight weights): 13 instructions per eight weights, against lut16_x8's
// 13 plus two dp4a. The same integer sum.
__device__ __forceinline__ int iq4nl_dot32(const u32 (&c)[4], const int* x) {
    u32 n0 = IQ4NL_SPLIT[0], n1 = IQ4NL_SPLIT[1], p0 = IQ4NL_SPLIT[2], p1 = IQ4NL_SPLIT[3];
    int pos = 0, neg = 0;
    #pragma unroll
    for (int i = 0; i < 4; i++) {
        u32 q = c[i], qx = q ^ 0x88888888u, qh = q >> 16, qxh = qx >> 16;
        int xa = (int)prmt((u32)x[i], (u32)x[4 + i], 0x5140u);
        int xb = (int)prmt((u32)x[i], (u32)x[4 + i], 0x7362u);
        neg = dp4a((int)prmt(n0, n1, qh), xb, dp4a((int)prmt(n0, n1, q), xa, neg));
        pos = dp4a((int)prmt(p0, p1, qxh), xb, dp4a((int)prmt(p0, p1, qx), xa, pos));
    }
    return pos - neg;
}

// IQ4_NL: 18-byte blocks are only 2-byte aligned, so a block is read as the five aligned words
// covering it (from blk rounded down to 4: up to 2 bytes past the block, which every device
// buffer and staged row has readable) and its scale and code words are cut out of them with
// byte permutes: 5 word loads where 2-byte loads took 9. Returns the f16 scale; c: the codes
// as dot32_codes takes them.
__device__ __forceinline__ u16 iq4nl_block(const u8* blk, u32 (&c)[4]) {
    u32 o = (u32)(unsigned long long)blk & 2u;
    const u32* a = (const u32*)(blk - o);
    u32 w[5];
    #pragma unroll
    for (int i = 0; i < 5; i++) w[i] = a[i];
    #pragma unroll
    for (int i = 0; i < 4; i++) c[i] = __byte_perm(w[i], w[i + 1], o ? 0x7654u : 0x5432u);
    return (u16)__byte_perm(w[0], 0u, o ? 0x32u : 0x10u);
}

template <>
__device__ __forceinline__ float dot32_i8<FMT_IQ4_NL>(const u8* blk, const int* x, int sx, float dx) {
    u32 c[4];
    u16 d = iq4nl_block(blk, c);
    return dx * h2f(d) * (float)iq4nl_dot32(c, x);
}

// IQ4_NL at several activation rows: b32_i8_rows' layout (one lane per block), each block's
// weights looked up once (lut16_x8) for all rows, where dot32_i8 redoes them per row. Each
// accumulator gets the same f32 terms in the same order as there.
template <int T, int R>
__device__ __forceinline__ void iq4nl_rows(const u8* __restrict__ w0, long row_bytes,
                                           const i8* __restrict__ xq,
                                           const float* __restrict__ xd, int cols, int t,
                                           int lane, int share, int split, float (&accs)[R][T]) {
    int nb = cols >> 5;
    #pragma unroll 1
    for (int b = lane + 32 * share; b < nb; b += 32 * split) {
        #pragma unroll
        for (int rr = 0; rr < R; rr++) {
            u32 c[4];
            float d = h2f(iq4nl_block(w0 + rr * row_bytes + (long)b * Fmt<FMT_IQ4_NL>::BYTES, c));
            int q[8];
            #pragma unroll
            for (int i = 0; i < 4; i++) {
                int2 v = IQ4NL_X8(c[i]);
                q[i] = v.x;
                q[4 + i] = v.y;
            }
            #pragma unroll
            for (int r = 0; r < T; r++) {
                if (r < t) {
                    const int4* xr = (const int4*)(xq + (long)r * cols + b * 32);
                    int4 a = xr[0], e = xr[1];
                    int dot = dp4a(q[0], a.x, dp4a(q[1], a.y, dp4a(q[2], a.z, dp4a(q[3], a.w, 0))));
                    dot = dp4a(q[4], e.x, dp4a(q[5], e.y, dp4a(q[6], e.z, dp4a(q[7], e.w, dot))));
                    accs[rr][r] += xd[(long)r * nb + b] * d * (float)dot;
                }
            }
        }
    }
}

template <>
__device__ __forceinline__ float dot32_i8<FMT_MXFP4>(const u8* blk, const int* x, int sx, float dx) {
    u32 c[4];
    #pragma unroll
    for (int i = 0; i < 4; i++) c[i] = ld32_a1(blk + 1 + 4 * i);
    int dot = dot32_codes(c, x, KVALUES_MXFP4_W0, KVALUES_MXFP4_W1, KVALUES_MXFP4_W2,
                          KVALUES_MXFP4_W3);
    return dx * e8m0_half(blk[0]) * (float)dot;
}

// Four sign bits (bit j set: byte j negative) as a mask of 0xff bytes.
__device__ __forceinline__ u32 sign_mask4(u32 bits) {
    return (((bits & 15u) * 0x00204081u) & 0x01010101u) * 0xffu;
}

// Four magnitudes (the bytes of g, each 1..127) with four sign bits: four int8 values
// (g ^ m) + (m & 1) negates the bytes under the mask; no byte carries since g >= 1.
__device__ __forceinline__ int signed4(u32 g, u32 bits) {
    u32 m = sign_mask4(bits);
    return (int)((g ^ m) + (m & 0x01010101u));
}

// Four IQ1 grid values (bytes of g as i8 in {-1, 0, 1}) as 8 g + 1, or 8 g - 1 when `neg`.
__device__ __forceinline__ int iq1_4(u32 g, bool neg) {
    u32 x = (g << 3) & 0xf8f8f8f8u;
    return (int)(neg ? __vsub4(x, 0x01010101u) : (x | 0x01010101u));
}

// Group ib (0..7: weights 32 ib .. 32 ib + 31) of a 256-weight IQ/TQ block as int8 quants: q[i]
// holds weights 4 i .. 4 i + 3 (byte order), s[h] the integer scale of weights 16 h .. 16 h + 15
// and unit the block's float factor, so weight = unit * s[h] * q: the CPU's IqBlock quants (IQ1
// in eighths) and int_scale (oxinfer-kernels/src/dequant/iq.rs).
template <int F>
__device__ __forceinline__ void iq_group32(const u8* blk, int ib, int (&q)[8], int (&s)[2],
                                           float& unit);

template <>
__device__ __forceinline__ void iq_group32<FMT_IQ2_XXS>(const u8* blk, int ib, int (&q)[8],
                                                        int (&s)[2], float& unit) {
    const u8* g = blk + 2 + 8 * ib;
    u32 aux = ld32_a1(g + 4);
    unit = h2f(ld16(blk)) * 0.125f;
    s[0] = s[1] = 2 * (int)(aux >> 28) + 1;
    #pragma unroll
    for (int l = 0; l < 4; l++) {
        unsigned long long gr = __ldg(&IQ2XXS_GRID[g[l]]);
        u32 sg = __ldg(&KSIGNS_IQ2XS[(aux >> (7 * l)) & 127u]);
        q[2 * l] = signed4((u32)gr, sg);
        q[2 * l + 1] = signed4((u32)(gr >> 32), sg >> 4);
    }
}

template <>
__device__ __forceinline__ void iq_group32<FMT_IQ2_XS>(const u8* blk, int ib, int (&q)[8],
                                                       int (&s)[2], float& unit) {
    unit = h2f(ld16(blk)) * 0.125f;
    u32 c = blk[66 + ib];
    s[0] = 2 * (int)(c & 15u) + 1;
    s[1] = 2 * (int)(c >> 4) + 1;
    #pragma unroll
    for (int l = 0; l < 4; l++) {
        u32 v = ld16(blk + 2 + 2 * (4 * ib + l));
        unsigned long long gr = __ldg(&IQ2XS_GRID[v & 511u]);
        u32 sg = __ldg(&KSIGNS_IQ2XS[v >> 9]);
        q[2 * l] = signed4((u32)gr, sg);
        q[2 * l + 1] = signed4((u32)(gr >> 32), sg >> 4);
    }
}

template <>
__device__ __forceinline__ void iq_group32<FMT_IQ2_S>(const u8* blk, int ib, int (&q)[8],
                                                      int (&s)[2], float& unit) {
    unit = h2f(ld16(blk)) * 0.125f;
    u32 c = blk[74 + ib], qh = blk[66 + ib];
    s[0] = 2 * (int)(c & 15u) + 1;
    s[1] = 2 * (int)(c >> 4) + 1;
    #pragma unroll
    for (int l = 0; l < 4; l++) {
        int i = 4 * ib + l;
        u32 idx = (u32)blk[2 + i] | (((qh >> (2 * l)) & 3u) << 8);
        unsigned long long gr = __ldg(&IQ2S_GRID[idx]);
        u32 sg = blk[34 + i];
        q[2 * l] = signed4((u32)gr, sg);
        q[2 * l + 1] = signed4((u32)(gr >> 32), sg >> 4);
    }
}

template <>
__device__ __forceinline__ void iq_group32<FMT_IQ3_XXS>(const u8* blk, int ib, int (&q)[8],
                                                        int (&s)[2], float& unit) {
    const u8* qs = blk + 2 + 8 * ib;
    u32 aux = ld32_a1(blk + 66 + 4 * ib);
    unit = h2f(ld16(blk)) * 0.25f;
    s[0] = s[1] = 2 * (int)(aux >> 28) + 1;
    #pragma unroll
    for (int l = 0; l < 4; l++) {
        u32 sg = __ldg(&KSIGNS_IQ2XS[(aux >> (7 * l)) & 127u]);
        q[2 * l] = signed4(__ldg(&IQ3XXS_GRID[qs[2 * l]]), sg);
        q[2 * l + 1] = signed4(__ldg(&IQ3XXS_GRID[qs[2 * l + 1]]), sg >> 4);
    }
}

template <>
__device__ __forceinline__ void iq_group32<FMT_IQ3_S>(const u8* blk, int ib, int (&q)[8],
                                                      int (&s)[2], float& unit) {
    unit = h2f(ld16(blk));
    u32 qh = blk[66 + ib];
    s[0] = s[1] = 2 * (int)((blk[106 + ib / 2] >> (4 * (ib & 1))) & 15u) + 1;
    #pragma unroll
    for (int l = 0; l < 4; l++) {
        int i = 4 * ib + l;
        u32 sg = blk[74 + i];
        #pragma unroll
        for (int m = 0; m < 2; m++) {
            int k = 2 * i + m;
            u32 idx = (u32)blk[2 + k] | (((qh >> (k & 7)) & 1u) << 8);
            q[2 * l + m] = signed4(__ldg(&IQ3S_GRID[idx]), sg >> (4 * m));
        }
    }
}

template <>
__device__ __forceinline__ void iq_group32<FMT_IQ1_S>(const u8* blk, int ib, int (&q)[8],
                                                      int (&s)[2], float& unit) {
    u32 qh = ld16(blk + 34 + 2 * ib);
    unit = h2f(ld16(blk)) * 0.125f;
    s[0] = s[1] = 2 * (int)((qh >> 12) & 7u) + 1;
    bool neg = (qh & 0x8000u) != 0;
    #pragma unroll
    for (int l = 0; l < 4; l++) {
        u32 idx = (u32)blk[2 + 4 * ib + l] | (((qh >> (3 * l)) & 7u) << 8);
        unsigned long long gr = __ldg(&IQ1S_GRID[idx]);
        q[2 * l] = iq1_4((u32)gr, neg);
        q[2 * l + 1] = iq1_4((u32)(gr >> 32), neg);
    }
}

template <>
__device__ __forceinline__ void iq_group32<FMT_IQ1_M>(const u8* blk, int ib, int (&q)[8],
                                                      int (&s)[2], float& unit) {
    u32 sc0 = ld16(blk + 48), sc1 = ld16(blk + 50), sc2 = ld16(blk + 52), sc3 = ld16(blk + 54);
    u32 bits = (sc0 >> 12) | ((sc1 >> 8) & 0x00F0u) | ((sc2 >> 4) & 0x0F00u) | (sc3 & 0xF000u);
    unit = h2f((u16)bits) * 0.125f;
    u32 sc = ld16(blk + 48 + 2 * (ib / 2));
    #pragma unroll
    for (int h = 0; h < 2; h++) s[h] = 2 * (int)((sc >> (3 * ((2 * ib + h) & 3))) & 7u) + 1;
    #pragma unroll
    for (int l = 0; l < 4; l++) {
        int i = 4 * ib + l;
        u32 hb = (u32)(blk[32 + i / 2] >> (4 * (i & 1)));
        u32 idx = (u32)blk[i] | ((hb & 7u) << 8);
        unsigned long long gr = __ldg(&IQ1S_GRID[idx]);
        q[2 * l] = iq1_4((u32)gr, (hb & 8u) != 0);
        q[2 * l + 1] = iq1_4((u32)(gr >> 32), (hb & 8u) != 0);
    }
}

// IQ4_XS: blocks are 136 bytes, so a block and a group's 16 bytes of codes are 8-byte aligned:
// the header (f16 d, the 16 bits of high scale bits, the four bytes of low ones) is one 8-byte
// load and the codes two. iq4xs_scale: group ib's integer scale (the 6-bit code minus 32) from
// the header h; iq4xs_unit: the block's d as f32; iq4xs_codes: the group's codes as four words
// (dot32_codes' c).
__device__ __forceinline__ int iq4xs_scale(uint2 h, int ib) {
    return (int)(((h.y >> (4 * ib)) & 15u) | (((h.x >> (16 + 2 * ib)) & 3u) << 4)) - 32;
}

__device__ __forceinline__ float iq4xs_unit(uint2 h) { return h2f((u16)(h.x & 0xffffu)); }

__device__ __forceinline__ void iq4xs_codes(const u8* blk, int ib, u32 (&c)[4]) {
    const uint2* qs = (const uint2*)(blk + 8 + 16 * ib);
    uint2 qa = qs[0], qb = qs[1];
    c[0] = qa.x;
    c[1] = qa.y;
    c[2] = qb.x;
    c[3] = qb.y;
}

template <>
__device__ __forceinline__ void iq_group32<FMT_IQ4_XS>(const u8* blk, int ib, int (&q)[8],
                                                       int (&s)[2], float& unit) {
    uint2 h = *(const uint2*)blk;
    unit = iq4xs_unit(h);
    s[0] = s[1] = iq4xs_scale(h, ib);
    u32 c[4];
    iq4xs_codes(blk, ib, c);
    #pragma unroll
    for (int i = 0; i < 4; i++) {
        int2 v = IQ4NL_X8(c[i]);
        q[i] = v.x;
        q[4 + i] = v.y;
    }
}

template <>
__device__ __forceinline__ void iq_group32<FMT_TQ1_0>(const u8* blk, int ib, int (&q)[8],
                                                      int (&s)[2], float& unit) {
    unit = h2f(ld16(blk + 52));
    s[0] = s[1] = 1;
    #pragma unroll
    for (int i = 0; i < 8; i++) {
        int e = 32 * ib + 16 * (i >> 2), j0 = 4 * (i & 3);
        u32 w = 0;
        #pragma unroll
        for (int j = 0; j < 4; j++) w |= ((u32)tq1_q(blk, e, j0 + j) & 0xffu) << (8 * j);
        q[i] = (int)w;
    }
}

template <>
__device__ __forceinline__ void iq_group32<FMT_TQ2_0>(const u8* blk, int ib, int (&q)[8],
                                                      int (&s)[2], float& unit) {
    unit = h2f(ld16(blk + 64));
    s[0] = s[1] = 1;
    const u8* b = blk + 32 * (ib >> 2);
    int sh = 2 * (ib & 3);
    #pragma unroll
    for (int i = 0; i < 8; i++)
        q[i] = (int)__vsub4((ld32_a1(b + 4 * i) >> sh) & 0x03030303u, 0x01010101u);
}

// A 256-weight IQ/TQ format on int8 activations in blocks of 256 (xd: one scale per 256):
// eight lanes per super-block (a warp takes four, the block's warps interleaved), lane j
// decoding 32-weight group j (iq_group32) against its 32 int8 activations.
template <int F, int T, int R>
__device__ __forceinline__ void iq_i8_rows(const u8* __restrict__ w0, long row_bytes,
                                           const i8* __restrict__ xq,
                                           const float* __restrict__ xd, int cols, int t,
                                           int lane, int share, int split, float (&accs)[R][T]) {
    int nb = cols >> 8;
    int ib = lane & 7;
    #pragma unroll 2
    for (int b = (lane >> 3) + 4 * share; b < nb; b += 4 * split) {
      #pragma unroll
      for (int rr = 0; rr < R; rr++) {
        float (&acc)[T] = accs[rr];
        const u8* blk = w0 + rr * row_bytes + (long)b * Fmt<F>::BYTES;
        int k0 = b * 256 + ib * 32;
        if constexpr (F == FMT_IQ4_XS && T == 1) {
            // One activation row: IQ4_XS's table dot without decoding (iq4nl_dot32), the same
            // integer sum as the decoded one below, the same f32 steps.
            uint2 h = *(const uint2*)blk;
            int ls = iq4xs_scale(h, ib);
            float unit = iq4xs_unit(h);
            u32 c[4];
            iq4xs_codes(blk, ib, c);
            const int4* xr = (const int4*)(xq + k0);
            int4 x0 = xr[0], x1 = xr[1];
            int x[8] = {x0.x, x0.y, x0.z, x0.w, x1.x, x1.y, x1.z, x1.w};
            acc[0] += xd[b] * (unit * (float)(ls * iq4nl_dot32(c, x)));
            continue;
        }
        int q[8], s[2];
        float unit;
        iq_group32<F>(blk, ib, q, s, unit);
        #pragma unroll
        for (int r = 0; r < T; r++) {
            if (T == 1 || r < t) {
                const int4* xr = (const int4*)(xq + (long)r * cols + k0);
                int4 x0 = xr[0], x1 = xr[1];
                int d0 = dp4a(q[0], x0.x, dp4a(q[1], x0.y, dp4a(q[2], x0.z, dp4a(q[3], x0.w, 0))));
                int d1 = dp4a(q[4], x1.x, dp4a(q[5], x1.y, dp4a(q[6], x1.z, dp4a(q[7], x1.w, 0))));
                acc[r] += xd[(long)r * nb + b] * (unit * (float)(s[0] * d0 + s[1] * d1));
            }
        }
      }
    }
}

// IQ4_XS at one activation row with four lanes per super-block (a warp takes eight, the
// block's warps interleaved), the kernels of FMT_IQ4_XS_W (OXINFER_CUDA_IQ4_GEMV=wide): lane c
// takes groups c and c + 4 (iq4nl_dot32 each, activations 128 bytes apart), sharing the block's
// header, activation scale and loop step between the two; their scaled integer sums (each
// below 2^24) are added and converted once (rounded only past 2^24). As iq_i8_rows otherwise
// (T = 1).
template <int R>
__device__ __forceinline__ void iq4xs_wide_rows(const u8* __restrict__ w0, long row_bytes,
                                                const i8* __restrict__ xq,
                                                const float* __restrict__ xd, int cols, int lane,
                                                int share, int split, float (&accs)[R][1]) {
    int nb = cols >> 8;
    int c = lane & 3;
    #pragma unroll 2
    for (int b = (lane >> 2) + 8 * share; b < nb; b += 8 * split) {
        const int4* xr = (const int4*)(xq + b * 256 + 32 * c);
        int4 a0 = xr[0], a1 = xr[1], b0 = xr[8], b1 = xr[9];
        int xa[8] = {a0.x, a0.y, a0.z, a0.w, a1.x, a1.y, a1.z, a1.w};
        int xb[8] = {b0.x, b0.y, b0.z, b0.w, b1.x, b1.y, b1.z, b1.w};
        float dx = xd[b];
        #pragma unroll
        for (int rr = 0; rr < R; rr++) {
            const u8* blk = w0 + rr * row_bytes + (long)b * Fmt<FMT_IQ4_XS>::BYTES;
            uint2 h = *(const uint2*)blk;
            u32 ca[4], cb[4];
            iq4xs_codes(blk, c, ca);
            iq4xs_codes(blk, c + 4, cb);
            int sum = iq4xs_scale(h, c) * iq4nl_dot32(ca, xa) +
                      iq4xs_scale(h, c + 4) * iq4nl_dot32(cb, xb);
            accs[rr][0] += dx * (iq4xs_unit(h) * (float)sum);
        }
    }
}

template <> struct Fmt<FMT_IQ4_XS_W> : Fmt<FMT_IQ4_XS> {};

// FMT_IQ4_XS_W at several activation rows: IQ4_XS's group decoding.
template <>
__device__ __forceinline__ void iq_group32<FMT_IQ4_XS_W>(const u8* blk, int ib, int (&q)[8],
                                                         int (&s)[2], float& unit) {
    iq_group32<FMT_IQ4_XS>(blk, ib, q, s, unit);
}

// The session-10 decoding of IQ4_NL and IQ4_XS (a byte load per scale byte, 2-byte loads of
// IQ4_NL's codes, lut16_x4 per nibble half), kept under their own format ids as the kernels
// `OXINFER_CUDA_IQ4_GEMV=old` selects (A/B on the device). Same integer sums, same results.
template <> struct Fmt<FMT_IQ4_NL_V0> : Fmt<FMT_IQ4_NL> {};
template <> struct Fmt<FMT_IQ4_XS_V0> : Fmt<FMT_IQ4_XS> {};

template <>
__device__ __forceinline__ float dot32_i8<FMT_IQ4_NL_V0>(const u8* blk, const int* x, int sx,
                                                         float dx) {
    int dot = 0;
    #pragma unroll
    for (int i = 0; i < 4; i++) {
        u32 w = (u32)ld32_a2(blk + 2 + 4 * i);
        dot = dp4a(IQ4NL_X4(w & 0x0F0F0F0Fu), x[i], dot);
        dot = dp4a(IQ4NL_X4((w >> 4) & 0x0F0F0F0Fu), x[4 + i], dot);
    }
    return dx * h2f(ld16(blk)) * (float)dot;
}

template <>
__device__ __forceinline__ void iq_group32<FMT_IQ4_XS_V0>(const u8* blk, int ib, int (&q)[8],
                                                          int (&s)[2], float& unit) {
    unit = h2f(ld16(blk));
    u32 sh = ld16(blk + 2);
    s[0] = s[1] = (int)(((blk[4 + ib / 2] >> (4 * (ib & 1))) & 15u) | (((sh >> (2 * ib)) & 3u) << 4)) - 32;
    const uint2* qs = (const uint2*)(blk + 8 + 16 * ib);
    uint2 qa = qs[0], qb = qs[1];
    u32 qw[4] = {qa.x, qa.y, qb.x, qb.y};
    #pragma unroll
    for (int i = 0; i < 4; i++) {
        q[i] = IQ4NL_X4(qw[i] & 0x0F0F0F0Fu);
        q[4 + i] = IQ4NL_X4((qw[i] >> 4) & 0x0F0F0F0Fu);
    }
}

#endif  // OXINFER_IQ_GEMV_CUH
