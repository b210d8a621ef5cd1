// Shared helpers: integer types, f16/bf16 conversions by PTX (no headers needed under NVRTC).
#ifndef OXINFER_COMMON_CUH
#define OXINFER_COMMON_CUH

typedef unsigned char u8;
typedef signed char i8;
typedef unsigned short u16;
typedef short i16;
typedef unsigned int u32;

// Programmatic dependent launch (compute 9.0+; a no-op when the kernel was launched without the
// attribute, and on older devices): let the next kernel in the stream be scheduled now, then
// wait until the previous kernel has completed and its writes are visible. Every kernel of a
// decode step starts with it, before it reads anything, so a launch with the attribute
// (`OXINFER_CUDA_PDL`, gpu.rs) overlaps only the next kernel's launch with this one's tail.
//
// PDL_LAUNCH / PDL_WAIT are the two halves, for a kernel that has work which reads nothing the
// previous kernels write (a GEMV's weight rows) and starts it in between, so that work overlaps
// the previous kernel instead of following it.
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
#define PDL_ENTER() asm volatile("griddepcontrol.launch_dependents;\n\tgriddepcontrol.wait;" ::: "memory")
#define PDL_LAUNCH() asm volatile("griddepcontrol.launch_dependents;" ::: "memory")
#define PDL_WAIT() asm volatile("griddepcontrol.wait;" ::: "memory")
#else
#define PDL_ENTER() do {} while (0)
#define PDL_LAUNCH() do {} while (0)
#define PDL_WAIT() do {} while (0)
#endif

__device__ __forceinline__ float h2f(u16 h) {
    float f;
    asm("{.reg .b16 t; mov.b16 t, %1; cvt.f32.f16 %0, t;}" : "=f"(f) : "h"(h));
    return f;
}

__device__ __forceinline__ u16 f2h(float f) {
    u16 h;
    asm("{.reg .b16 t; cvt.rn.f16.f32 t, %1; mov.b16 %0, t;}" : "=h"(h) : "f"(f));
    return h;
}

// float -> bfloat16, round to nearest even (NaN stays NaN).
__device__ __forceinline__ u32 f2bf(float f) {
    u32 u = __float_as_uint(f);
    if ((u & 0x7fffffffu) > 0x7f800000u) return 0x7fc0u;
    u += 0x7fffu + ((u >> 16) & 1u);
    return u >> 16;
}

// Two floats -> packed bf16x2 (lo in the low half), one hardware conversion (sm_80+).
__device__ __forceinline__ u32 pack_bf2(float lo, float hi) {
    u32 r;
    asm("cvt.rn.bf16x2.f32 %0, %1, %2;" : "=r"(r) : "f"(hi), "f"(lo));
    return r;
}

// Two floats -> packed f16x2 (lo in the low half), round to nearest.
__device__ __forceinline__ u32 pack_h2(float lo, float hi) {
    u32 r;
    asm("cvt.rn.f16x2.f32 %0, %1, %2;" : "=r"(r) : "f"(hi), "f"(lo));
    return r;
}

__device__ __forceinline__ u16 ld16(const u8* p) {
    return (u16)p[0] | ((u16)p[1] << 8);
}

__device__ __forceinline__ u32 smem_addr(const void* p) {
    u32 a;
    asm("{.reg .u64 t; cvta.to.shared.u64 t, %1; cvt.u32.u64 %0, t;}" : "=r"(a) : "l"(p));
    return a;
}

// Element types of a device KV cache (the host cache's KvType): f32, f16 or bf16 values, or
// GGUF's Q8_0 / Q4_0 blocks of 32 (an f16 scale d, then 32 int8 quants x = d q, or 16 bytes of
// nibbles x = d (q - 8): value j in the low nibble of byte j, value j + 16 in its high nibble),
// read as f32 and written as the CPU writes them (round to nearest even; the blocks as
// llama.cpp's reference quantizers make them). Values are addressed by their index i in the
// whole buffer (row r, column c: i = r * kv_row + c; rows of a block type hold kv_row / 32
// whole blocks). The attention kernels are templates over these; `CODE` is the type's place in
// the host's KvType::ALL (crate::kv::kernel_index).
struct KvF32 {
    typedef float T;
    static constexpr int CODE = 0;
    static __device__ __forceinline__ float ld(const T* p, long i) { return p[i]; }
};
struct KvF16 {
    typedef u16 T;
    static constexpr int CODE = 1;
    static __device__ __forceinline__ float bits(u16 b) { return h2f(b); }
    static __device__ __forceinline__ float ld(const T* p, long i) { return bits(p[i]); }
};
struct KvBf16 {
    typedef u16 T;
    static constexpr int CODE = 2;
    static __device__ __forceinline__ float bits(u16 b) { return __uint_as_float((u32)b << 16); }
    static __device__ __forceinline__ float ld(const T* p, long i) { return bits(p[i]); }
};
struct KvQ8_0 {
    typedef u8 T;
    static constexpr int CODE = 3;
    static __device__ __forceinline__ float ld(const T* p, long i) {
        const u8* b = p + (i >> 5) * 34;
        return h2f(ld16(b)) * (float)(i8)b[2 + (i & 31)];
    }
};
struct KvQ4_0 {
    typedef u8 T;
    static constexpr int CODE = 4;
    static __device__ __forceinline__ float ld(const T* p, long i) {
        const u8* b = p + (i >> 5) * 18;
        int j = (int)(i & 31);
        u8 byte = b[2 + (j & 15)];
        int q = j < 16 ? (byte & 15) : (byte >> 4);
        return h2f(ld16(b)) * (float)(q - 8);
    }
};

// Every cache element type with its kernels' name suffix, in the host's KvType::ALL order (the
// CODEs above): X(type, suffix) for each, to instantiate a kernel template once per type.
#define KV_TYPES(X) \
    X(KvF32, ) X(KvF16, _kv_f16) X(KvBf16, _kv_bf16) X(KvQ8_0, _kv_q8_0) X(KvQ4_0, _kv_q4_0)

// Stores one head's values (lane holds v[e] = value lane + 32 e of the head, e < per; the head
// starts at index `at`, a multiple of 32) into a cache of element type `code` (the block types
// quantize each run of 32, one per e, across the warp). Every lane of the warp calls it.
__device__ __forceinline__ void kv_store_head(void* p, long at, const float (&v)[8], int per,
                                              int code) {
    int lane = threadIdx.x & 31;
    #pragma unroll
    for (int e = 0; e < 8; e++) {
        if (e >= per) break;
        long i = at + lane + 32 * e;
        float x = v[e];
        if (code == KvF32::CODE) {
            ((float*)p)[i] = x;
        } else if (code == KvF16::CODE) {
            ((u16*)p)[i] = f2h(x);
        } else if (code == KvBf16::CODE) {
            ((u16*)p)[i] = (u16)f2bf(x);
        } else if (code == KvQ8_0::CODE) {
            // quantize_row_q8_0_ref: d = max|x| / 127, q = round(x / d).
            float amax = fabsf(x);
            #pragma unroll
            for (int o = 16; o > 0; o >>= 1) amax = fmaxf(amax, __shfl_xor_sync(0xffffffffu, amax, o));
            float d = amax / 127.f;
            float id = d != 0.f ? 1.f / d : 0.f;
            u8* b = (u8*)p + (i >> 5) * 34;
            if (lane == 0) {
                u16 h = f2h(d);
                b[0] = (u8)h;
                b[1] = (u8)(h >> 8);
            }
            b[2 + lane] = (u8)(i8)roundf(x * id);
        } else {
            // quantize_row_q4_0_ref: the value of largest magnitude (the first of equals), its
            // sign kept, d = max / -8, q = min(15, trunc(x / d + 8.5)).
            float am = fabsf(x), mx = x;
            int at_l = lane;
            #pragma unroll
            for (int o = 16; o > 0; o >>= 1) {
                float am2 = __shfl_xor_sync(0xffffffffu, am, o);
                float mx2 = __shfl_xor_sync(0xffffffffu, mx, o);
                int l2 = __shfl_xor_sync(0xffffffffu, at_l, o);
                if (am2 > am || (am2 == am && l2 < at_l)) {
                    am = am2;
                    mx = mx2;
                    at_l = l2;
                }
            }
            float d = mx / -8.f;
            float id = d != 0.f ? 1.f / d : 0.f;
            int q = min(15, (int)(x * id + 8.5f));
            int hi = __shfl_down_sync(0xffffffffu, q, 16);
            u8* b = (u8*)p + (i >> 5) * 18;
            if (lane == 0) {
                u16 h = f2h(d);
                b[0] = (u8)h;
                b[1] = (u8)(h >> 8);
            }
            if (lane < 16) b[2 + lane] = (u8)(q | (hi << 4));
        }
    }
}

// Multiplies every n-value chunk of one head (lane holds v[e] = value lane + 32 e, e < per;
// n a power of two from 64 to 32 per) by the orthonormal Hadamard matrix H_n, as the CPU's
// rotate_chunks does (kv_rotation.rs): butterfly stages 1, 2, 4, ... n / 2 apart, each pair
// (u, v) becoming (u + v, u - v) in the same f32 operations, then the scale 1 / sqrt(n), so
// the results are the CPU's bit for bit. Stages under 32 pair lanes, the others a lane's
// values. n = 0: no rotation.
__device__ __forceinline__ void warp_hadamard(float (&v)[8], int per, int n) {
    if (n == 0) return;
    int lane = threadIdx.x & 31;
    #pragma unroll
    for (int h = 1; h < 32; h <<= 1) {
        #pragma unroll
        for (int e = 0; e < 8; e++) {
            if (e >= per) break;
            float o = __shfl_xor_sync(0xffffffffu, v[e], h);
            v[e] = (lane & h) ? o - v[e] : v[e] + o;
        }
    }
    #pragma unroll
    for (int s = 1; s < 8; s <<= 1) {
        if (32 * s >= n) break;
        #pragma unroll
        for (int e = 0; e < 8; e++) {
            if (e + s >= per || (e & s)) continue;
            float a = v[e], b = v[e + s];
            v[e] = a + b;
            v[e + s] = a - b;
        }
    }
    float scale = 1.f / sqrtf((float)n);
    #pragma unroll
    for (int e = 0; e < 8; e++)
        if (e < per) v[e] *= scale;
}

// The grouped layout of a one-row int8 GEMV input in blocks of 256 (Q4_K / Q6_K weights; the
// host asks for it, gemm.rs): a row of nb blocks is cut into groups of eight blocks (the last
// group keeps the rem = nb - 8 g blocks left), and in a group the 16-byte chunk m (values
// 16 m .. 16 m + 15) of its block j lies at chunk (m % 4) · 4 rem + 4 j + m / 4. A warp of the
// four-lane Q4_K GEMV (lane 4 j + c takes chunks 4 c .. 4 c + 3 of block j of its group) then
// reads 512 contiguous bytes per load, where the natural order spread them over 2 KiB of
// 16-byte pieces 64 bytes apart (four times the L1 wavefronts). Returns where value k (0..255)
// of block bb lies, counted from the row's start.
__device__ __forceinline__ int grouped_offset(int bb, int nb, int k) {
    int g = bb >> 3, rem = min(8, nb - (g << 3)), m = k >> 4;
    int chunk = (g << 7) + (m & 3) * 4 * rem + (bb & 7) * 4 + (m >> 2);
    return (chunk << 4) | (k & 15);
}

// One block of the int8 activation quantization (the CPU kernels' q8 quantization): d = amax /
// 127, q = round(x / d) clamped to ±127. The warp's lane holds v[i] = element lane + 32 i of a
// block of B (32 or 256) values (i < B / 32); writes q and, from lane 0, the scale d and (when
// s_out is not null) the integer sum of each run of 32 values (B / 32 of them: the int8 GEMV
// reads these instead of summing the activations for every weight row). q is the block's
// start in the natural layout; with gnb > 0 (B = 256, rows of gnb blocks) the values go to the
// grouped layout (grouped_offset) of the row holding block blk (the block's index counted
// over all rows; the scale and sums keep their natural places).
__device__ __forceinline__ void warp_quant_block(const float (&v)[8], int B, i8* __restrict__ q,
                                                 float* __restrict__ d_out,
                                                 int* __restrict__ s_out, int gnb = 0,
                                                 long blk = 0) {
    int lane = threadIdx.x & 31, per = B >> 5;
    float amax = 0.f;
    #pragma unroll
    for (int i = 0; i < 8; i++)
        if (i < per) amax = fmaxf(amax, fabsf(v[i]));
    #pragma unroll
    for (int o = 16; o > 0; o >>= 1) amax = fmaxf(amax, __shfl_xor_sync(0xffffffffu, amax, o));
    float d = amax / 127.f;
    float id = amax == 0.f ? 0.f : 1.f / d;
    int bb = gnb > 0 ? (int)(blk % gnb) : 0;
    // The row's start: grouped offsets count from there.
    i8* row = q - (long)bb * 256;
    #pragma unroll
    for (int i = 0; i < 8; i++) {
        if (i < per) {
            int qi = (int)fminf(fmaxf(roundf(v[i] * id), -127.f), 127.f);
            int k = lane + 32 * i;
            if (gnb > 0) row[grouped_offset(bb, gnb, k)] = (i8)qi;
            else q[k] = (i8)qi;
            if (s_out) {
                int sum = __reduce_add_sync(0xffffffffu, qi);
                if (lane == 0) s_out[i] = sum;
            }
        }
    }
    if (lane == 0) *d_out = d;
}

// SiLU, x · sigmoid(x).
__device__ __forceinline__ float silu_value(float x) { return x / (1.f + expf(-x)); }

// GELU's tanh form, 0.5 x (1 + tanh(√(2/π) (x + 0.044715 x³))).
__device__ __forceinline__ float gelu_tanh_value(float x) {
    return 0.5f * x * (1.f + tanhf(0.7978846f * (x + 0.044715f * x * x * x)));
}

// The gated MLP's middle for one value: act(x) · u (act 0: SiLU, 1: tanh-GELU), the arithmetic
// of every kernel that computes it (gated_act_f32, gated_act_q8).
__device__ __forceinline__ float gated_value(float x, float u, int act) {
    float a = act == 0 ? silu_value(x) : gelu_tanh_value(x);
    return a * u;
}

// One key of an online softmax (flash attention): a query row's running max m, sum l and output
// acc (this lane's values) take the key's score s (scaled) and its values v. FAST: the hardware
// exponential, as the prompt attention takes it; else expf, as the encoder pass takes it
// (closer to its CPU twin).
template <int ME, bool FAST>
__device__ __forceinline__ void online_softmax_add(float s, const float (&v)[ME], float& m,
                                                   float& l, float (&acc)[ME]) {
    float mn = fmaxf(m, s);
    float corr = FAST ? __expf(m - mn) : expf(m - mn);
    float p = FAST ? __expf(s - mn) : expf(s - mn);
    l = l * corr + p;
    #pragma unroll
    for (int e = 0; e < ME; e++) acc[e] = acc[e] * corr + p * v[e];
    m = mn;
}

#endif  // OXINFER_COMMON_CUH
