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

// Element types of a device KV cache (the host cache's KvType): f32, f16 or bf16 values, read
// widened to f32 and written rounded to nearest even (the CPU's `half` conversions). The
// attention kernels are templates over these; `KvElem::CODE` is the host's `KvElem` index.
struct KvF32 {
    typedef float T;
    static constexpr int CODE = 0;
    static __device__ __forceinline__ float ld(const T* p, long i) { return p[i]; }
    static __device__ __forceinline__ void st(T* p, long i, float v) { p[i] = v; }
};
struct KvF16 {
    typedef u16 T;
    static constexpr int CODE = 1;
    static __device__ __forceinline__ float bits(u16 b) { return h2f(b); }
    static __device__ __forceinline__ float ld(const T* p, long i) { return bits(p[i]); }
    static __device__ __forceinline__ void st(T* p, long i, float v) { p[i] = f2h(v); }
};
struct KvBf16 {
    typedef u16 T;
    static constexpr int CODE = 2;
    static __device__ __forceinline__ float bits(u16 b) { return __uint_as_float((u32)b << 16); }
    static __device__ __forceinline__ float ld(const T* p, long i) { return bits(p[i]); }
    static __device__ __forceinline__ void st(T* p, long i, float v) { p[i] = (u16)f2bf(v); }
};

// Stores v at element i of a cache row of element type `code` (KvF32 / KvF16 / KvBf16::CODE).
__device__ __forceinline__ void kv_store(void* p, long i, float v, int code) {
    if (code == KvF16::CODE) KvF16::st((u16*)p, i, v);
    else if (code == KvBf16::CODE) KvBf16::st((u16*)p, i, v);
    else KvF32::st((float*)p, i, v);
}

// One block of the int8 activation quantization (the CPU kernels' q8 quantization): d = amax /
// 127, q = round(x / d) clamped to ±127. The warp's lane holds v[i] = element lane + 32 i of a
// block of B (32 or 256) values (i < B / 32); writes q and, from lane 0, the scale d and (when
// s_out is not null) the integer sum of each run of 32 values (B / 32 of them: the int8 GEMV
// reads these instead of summing the activations for every weight row).
__device__ __forceinline__ void warp_quant_block(const float (&v)[8], int B, i8* __restrict__ q,
                                                 float* __restrict__ d_out,
                                                 int* __restrict__ s_out) {
    int lane = threadIdx.x & 31, per = B >> 5;
    float amax = 0.f;
    #pragma unroll
    for (int i = 0; i < 8; i++)
        if (i < per) amax = fmaxf(amax, fabsf(v[i]));
    #pragma unroll
    for (int o = 16; o > 0; o >>= 1) amax = fmaxf(amax, __shfl_xor_sync(0xffffffffu, amax, o));
    float d = amax / 127.f;
    float id = amax == 0.f ? 0.f : 1.f / d;
    #pragma unroll
    for (int i = 0; i < 8; i++) {
        if (i < per) {
            int qi = (int)fminf(fmaxf(roundf(v[i] * id), -127.f), 127.f);
            q[lane + 32 * i] = (i8)qi;
            if (s_out) {
                int sum = __reduce_add_sync(0xffffffffu, qi);
                if (lane == 0) s_out[i] = sum;
            }
        }
    }
    if (lane == 0) *d_out = d;
}

#endif  // OXINFER_COMMON_CUH
