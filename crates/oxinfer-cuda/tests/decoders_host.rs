//! The device decoders (`dq16<F>` of kernels/dequant.cuh and kernels/iq_dequant.cuh) and the
//! int8 table lookups of kernels/iq_gemv.cuh, compiled for the host with the system C++
//! compiler (a small shim replaces common.cuh: CUDA qualifiers defined away, the intrinsics
//! emulated as the CUDA documentation specifies them) and compared bit for bit with the CPU
//! reference dequantizer on random valid blocks, extreme scales included. This proves the
//! decoders without a GPU. Skipped, with one line, where `g++` is missing.

#[path = "common/blocks.rs"]
mod blocks;
#[path = "common/rng.rs"]
mod rng;
use rng::Rng;

use oxinfer_kernels::WeightFormat;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

/// The kernel headers the driver includes, by name (common.cuh is the shim's).
const HEADERS: [(&str, &str); 5] = [
    ("dequant.cuh", include_str!("../src/kernels/dequant.cuh")),
    ("dot32.cuh", include_str!("../src/kernels/dot32.cuh")),
    ("iq_grids.cuh", include_str!("../src/kernels/iq_grids.cuh")),
    (
        "iq_dequant.cuh",
        include_str!("../src/kernels/iq_dequant.cuh"),
    ),
    ("iq_gemv.cuh", include_str!("../src/kernels/iq_gemv.cuh")),
];

/// Host stand-ins for what the kernels take from common.cuh and from CUDA.
const SHIM: &str = r#"
#pragma once
#include <cstdint>
#include <cstring>
#define __device__
#define __host__
#define __global__
#define __constant__
#define __forceinline__ inline
#define __restrict__
typedef unsigned char u8;
typedef signed char i8;
typedef unsigned short u16;
typedef short i16;
typedef unsigned int u32;
struct uint2 { u32 x, y; };
struct uint4 { u32 x, y, z, w; };
struct int4 { int x, y, z, w; };
struct int2 { int x, y; };
inline int2 make_int2(int a, int b) { return int2{a, b}; }
struct float4 { float x, y, z, w; };
struct idx3 { unsigned x, y, z; };
static idx3 blockIdx, blockDim, threadIdx;
inline uint4 make_uint4(u32 a, u32 b, u32 c, u32 d) { return uint4{a, b, c, d}; }
inline float4 make_float4(float a, float b, float c, float d) { return float4{a, b, c, d}; }
inline float __uint_as_float(u32 u) { float f; std::memcpy(&f, &u, 4); return f; }
inline u32 __float_as_uint(float f) { u32 u; std::memcpy(&u, &f, 4); return u; }
template <class T> inline T __ldg(const T* p) { return *p; }
// CUDA: per-byte subtraction, no borrow between bytes.
inline u32 __vsub4(u32 a, u32 b) {
    u32 r = 0;
    for (int n = 0; n < 4; n++) r |= ((((a >> (8 * n)) & 0xff) - ((b >> (8 * n)) & 0xff)) & 0xff) << (8 * n);
    return r;
}
// CUDA: result byte n = byte (s >> 4n) & 7 of {y, x} (x bytes 0..3, y bytes 4..7).
inline u32 __byte_perm(u32 x, u32 y, u32 s) {
    unsigned long long v = (unsigned long long)x | ((unsigned long long)y << 32);
    u32 r = 0;
    for (int n = 0; n < 4; n++) r |= (u32)((v >> (8 * ((s >> (4 * n)) & 7))) & 0xff) << (8 * n);
    return r;
}
// IEEE half -> float, exact (subnormals included).
inline float h2f(u16 h) {
    u32 s = (u32)(h >> 15) << 31, e = (h >> 10) & 31, m = h & 1023, bits;
    if (e == 0 && m == 0) bits = s;
    else if (e == 0) {
        int sh = 0;
        while (!(m & 0x400)) { m <<= 1; sh++; }
        bits = s | ((u32)(113 - sh) << 23) | ((m & 0x3ff) << 13);
    } else if (e == 31) bits = s | 0x7f800000u | (m << 13);
    else bits = s | ((e + 112) << 23) | (m << 13);
    return __uint_as_float(bits);
}
inline u16 f2h(float) { return 0; }
inline u32 pack_bf2(float, float) { return 0; }
inline u16 ld16(const u8* p) { return (u16)(p[0] | (p[1] << 8)); }
// gemv.cu's helpers that iq_gemv.cuh uses.
inline int dp4a(int a, int b, int c) {
    for (int i = 0; i < 4; i++) c += (int)(i8)(a >> (8 * i)) * (int)(i8)(b >> (8 * i));
    return c;
}
// PTX prmt.b32, default mode: byte n = byte (s >> 4n) & 7 of {b, a}, its sign replicated when
// bit 4n + 3 of s is set.
inline u32 prmt(u32 a, u32 b, u32 s) {
    unsigned long long v = (unsigned long long)a | ((unsigned long long)b << 32);
    u32 r = 0;
    for (int n = 0; n < 4; n++) {
        u32 sel = (s >> (4 * n)) & 15, byte = (u32)(v >> (8 * (sel & 7))) & 0xff;
        if (sel & 8) byte = (byte & 0x80) ? 0xff : 0;
        r |= byte << (8 * n);
    }
    return r;
}
inline int ld32_a2(const u8* p) { return (int)((u32)ld16(p) | ((u32)ld16(p + 2) << 16)); }
template <int F> float dot32_i8(const u8* blk, const int* x, int sx, float dx);
template <int F, int T, int R>
void iq_i8_rows(const u8* w0, long row_bytes, const i8* xq, const float* xd, int cols, int t,
                int lane, int share, int split, float (&accs)[R][T]);
template <int T, int R>
void iq4nl_rows(const u8* w0, long row_bytes, const i8* xq, const float* xd, int cols, int t,
                int lane, int share, int split, float (&accs)[R][T]);
template <int R>
void iq4xs_wide_rows(const u8* w0, long row_bytes, const i8* xq, const float* xd, int cols,
                     int lane, int share, int split, float (&accs)[R][1]);
"#;

/// Reads records `[u32 ggml id][u32 cols][u32 n][n bytes of a row]` from stdin and writes each row
/// decoded with dq16 (f32, little endian) to stdout; with argument `group`, reads records
/// `[u32 ggml id][u32 n][n bytes of one 256-weight block]` and writes iq_group32 of each of its
/// eight groups (8 i32 words of int8 quants, 2 i32 scales, f32 unit); with argument `lut`, writes instead
/// lut16_x4 of every four-code word for IQ4_NL's and MXFP4's tables, then dot32_i8 of the
/// blocks on stdin (IQ4_NL: 18 bytes + 32 int8 activations; MXFP4: 17 + 32) with dx = 1; with
/// `dot32`, reads `[u32 ggml id][one Q4_0 / Q4_1 / Q5_0 / Q5_1 / Q8_0 block][32 int8
/// activations]` and writes dot32_i8 of each with dx = 1.
const DRIVER: &str = r#"
#include "common.cuh"
#include "dequant.cuh"
#include "iq_dequant.cuh"
#include "iq_gemv.cuh"
#include "dot32.cuh"
#include <cstdio>
#include <vector>

template <int F> void row(const u8* r, int cols, float* y) {
    for (int k = 0; k < cols; k += 16) dq16<F>(r, k, y + k);
}

// Reads one block of F and its 32 int8 activations from stdin into *v as dot32_i8 with dx = 1
// and the activations' sum (the block 2-byte aligned, readable bytes after it).
template <int F> static bool dot32_record(float* v) {
    alignas(16) u8 buf[48] = {};
    u8* blk = buf + 2;
    int x[8];
    if (std::fread(blk, 1, Fmt<F>::BYTES, stdin) != (size_t)Fmt<F>::BYTES ||
        std::fread(x, 4, 8, stdin) != 8)
        return false;
    int sx = 0;
    for (int i = 0; i < 32; i++) sx += (int)((const i8*)x)[i];
    *v = dot32_i8<F>(blk, x, sx, 1.f);
    return true;
}

static bool decode(u32 id, const u8* r, int cols, float* y) {
    switch (id) {
#define CASE(F) case F: row<F>(r, cols, y); return true;
    CASE(FMT_Q4_0) CASE(FMT_Q4_1) CASE(FMT_Q5_0) CASE(FMT_Q5_1) CASE(FMT_Q8_0)
    CASE(FMT_Q2_K) CASE(FMT_Q3_K) CASE(FMT_Q4_K) CASE(FMT_Q5_K) CASE(FMT_Q6_K) CASE(FMT_Q8_K)
    CASE(FMT_IQ2_XXS) CASE(FMT_IQ2_XS) CASE(FMT_IQ3_XXS) CASE(FMT_IQ1_S) CASE(FMT_IQ4_NL)
    CASE(FMT_IQ3_S) CASE(FMT_IQ2_S) CASE(FMT_IQ4_XS) CASE(FMT_IQ1_M) CASE(FMT_TQ1_0)
    CASE(FMT_TQ2_0) CASE(FMT_MXFP4)
    default: return false;
    }
}

template <int F> void groups(const u8* blk) {
    for (int ib = 0; ib < 8; ib++) {
        int q[8], s[2];
        float unit;
        iq_group32<F>(blk, ib, q, s, unit);
        std::fwrite(q, 4, 8, stdout);
        std::fwrite(s, 4, 2, stdout);
        std::fwrite(&unit, 4, 1, stdout);
    }
}

static bool group(u32 id, const u8* blk) {
    switch (id) {
#define GROUPS(F) case F: groups<F>(blk); return true;
    GROUPS(FMT_IQ2_XXS) GROUPS(FMT_IQ2_XS) GROUPS(FMT_IQ3_XXS) GROUPS(FMT_IQ1_S)
    GROUPS(FMT_IQ3_S) GROUPS(FMT_IQ2_S) GROUPS(FMT_IQ4_XS) GROUPS(FMT_IQ1_M) GROUPS(FMT_TQ1_0)
    GROUPS(FMT_TQ2_0) GROUPS(FMT_IQ4_XS_V0)
    default: return false;
    }
}

// One IQ4_XS row (nb blocks) times activations xq with scales xd per 256 as a warp's 32 lanes
// compute it (each lane's partial sum, added in lane order as the warp's shuffles would not:
// the layout is what is checked): the default one-row body, session 10's and the four-lane one.
template <int F> float iq4xs_row(const u8* w, const i8* xq, const float* xd, int nb) {
    float total = 0.f;
    for (int lane = 0; lane < 32; lane++) {
        float acc[1][1] = {{0.f}};
        if constexpr (F == FMT_IQ4_XS_W) iq4xs_wide_rows<1>(w, 0, xq, xd, nb * 256, lane, 0, 1, acc);
        else iq_i8_rows<F, 1, 1>(w, 0, xq, xd, nb * 256, 1, lane, 0, 1, acc);
        total += acc[0][0];
    }
    return total;
}

int main(int argc, char** argv) {
    if (argc > 1 && std::strcmp(argv[1], "nlrows") == 0) {
        // Three activation rows of an IQ4_NL row (nb blocks): per row, the lanes' sums of
        // iq4nl_rows and of dot32_i8 per lane and block (b32_i8_rows' order).
        u32 nb;
        while (std::fread(&nb, 4, 1, stdin) == 1) {
            std::vector<u8> w(18 * nb + 16);
            std::vector<i8> x(3 * 32 * nb);
            std::vector<float> d(3 * nb);
            if (std::fread(w.data(), 1, 18 * nb, stdin) != 18 * nb ||
                std::fread(x.data(), 1, x.size(), stdin) != x.size() ||
                std::fread(d.data(), 4, d.size(), stdin) != d.size()) return 2;
            int cols = 32 * (int)nb;
            float got[3] = {0.f, 0.f, 0.f}, per_block[3] = {0.f, 0.f, 0.f};
            for (int lane = 0; lane < 32; lane++) {
                float acc[1][3] = {{0.f, 0.f, 0.f}};
                iq4nl_rows<3, 1>(w.data(), 0, x.data(), d.data(), cols, 3, lane, 0, 1, acc);
                for (int r = 0; r < 3; r++) {
                    float a = 0.f;
                    for (int b = lane; b < (int)nb; b += 32)
                        a += dot32_i8<FMT_IQ4_NL>(w.data() + 18 * b,
                                                   (const int*)(x.data() + r * cols + 32 * b), 0,
                                                   d[r * nb + b]);
                    got[r] += acc[0][r];
                    per_block[r] += a;
                }
            }
            std::fwrite(got, 4, 3, stdout);
            std::fwrite(per_block, 4, 3, stdout);
        }
        return 0;
    }
    if (argc > 1 && std::strcmp(argv[1], "rows") == 0) {
        u32 nb;
        while (std::fread(&nb, 4, 1, stdin) == 1) {
            std::vector<u8> w(136 * nb + 16);
            std::vector<i8> x(256 * nb);
            std::vector<float> d(nb);
            if (std::fread(w.data(), 1, 136 * nb, stdin) != 136 * nb ||
                std::fread(x.data(), 1, x.size(), stdin) != x.size() ||
                std::fread(d.data(), 4, nb, stdin) != nb) return 2;
            float v[3] = {iq4xs_row<FMT_IQ4_XS>(w.data(), x.data(), d.data(), (int)nb),
                          iq4xs_row<FMT_IQ4_XS_V0>(w.data(), x.data(), d.data(), (int)nb),
                          iq4xs_row<FMT_IQ4_XS_W>(w.data(), x.data(), d.data(), (int)nb)};
            std::fwrite(v, 4, 3, stdout);
        }
        return 0;
    }
    if (argc > 1 && std::strcmp(argv[1], "group") == 0) {
        u32 hdr[2];
        while (std::fread(hdr, 4, 2, stdin) == 2) {
            std::vector<u8> blk(hdr[1]);
            if (std::fread(blk.data(), 1, blk.size(), stdin) != blk.size()) return 2;
            if (!group(hdr[0], blk.data())) return 3;
        }
        return 0;
    }
    if (argc > 1 && std::strcmp(argv[1], "dot32") == 0) {
        // Records [u32 ggml id][the block][32 int8 activations]: dot32_i8 with dx = 1 and the
        // activations' sum, the block at a 2-byte aligned address (as in a row of 22-byte
        // blocks) with readable bytes after it.
        u32 id;
        while (std::fread(&id, 4, 1, stdin) == 1) {
            float v;
            bool ok;
            switch (id) {
#define DOT32(F) case F: ok = dot32_record<F>(&v); break;
            DOT32(FMT_Q4_0) DOT32(FMT_Q4_1) DOT32(FMT_Q5_0) DOT32(FMT_Q5_1) DOT32(FMT_Q8_0)
#undef DOT32
            default: return 3;
            }
            if (!ok) return 2;
            std::fwrite(&v, 4, 1, stdout);
        }
        return 0;
    }
    if (argc > 1 && std::strcmp(argv[1], "lut") == 0) {
        for (u32 c = 0; c < 65536; c++) {
            u32 codes = (c & 15) | ((c >> 4 & 15) << 8) | ((c >> 8 & 15) << 16) | ((c >> 12) << 24);
            int a = IQ4NL_X4(codes), b = MXFP4_X4(codes);
            std::fwrite(&a, 4, 1, stdout);
            std::fwrite(&b, 4, 1, stdout);
        }
        // lut16_x8: every 16-bit pattern in both halves of a word.
        for (u32 c = 0; c < 65536; c++) {
            u32 q = c | ((c * 40503u + 7919u) & 0xffffu) << 16;
            int2 v[2] = {IQ4NL_X8(q), MXFP4_X8(q)};
            std::fwrite(&q, 4, 1, stdout);
            std::fwrite(v, 4, 4, stdout);
        }
        u32 id;
        while (std::fread(&id, 4, 1, stdin) == 1) {
            if (id == 0xffffffffu) {
                // iq4nl_dot32 of four code words and eight activation words.
                u32 c[4];
                int x[8];
                if (std::fread(c, 4, 4, stdin) != 4 || std::fread(x, 4, 8, stdin) != 8) return 2;
                int v = iq4nl_dot32(c, x);
                std::fwrite(&v, 4, 1, stdout);
                continue;
            }
            // The block at a 4-byte aligned address or 2 past one (IQ4_NL's two cases), with
            // readable bytes after it (as device buffers have).
            alignas(16) u8 buf[32] = {};
            u8* blk = buf + (id >> 16);
            id &= 0xffffu;
            int x[8];
            int n = id == FMT_MXFP4 ? 17 : 18;
            if (std::fread(blk, 1, n, stdin) != (size_t)n || std::fread(x, 4, 8, stdin) != 8) return 2;
            float v = id == FMT_IQ4_NL      ? dot32_i8<FMT_IQ4_NL>(blk, x, 0, 1.f)
                      : id == FMT_IQ4_NL_V0 ? dot32_i8<FMT_IQ4_NL_V0>(blk, x, 0, 1.f)
                                            : dot32_i8<FMT_MXFP4>(blk, x, 0, 1.f);
            std::fwrite(&v, 4, 1, stdout);
        }
        return 0;
    }
    u32 hdr[3];
    while (std::fread(hdr, 4, 3, stdin) == 3) {
        std::vector<u8> r(hdr[2]);
        if (std::fread(r.data(), 1, r.size(), stdin) != r.size()) return 2;
        std::vector<float> y(hdr[1]);
        if (!decode(hdr[0], r.data(), (int)hdr[1], y.data())) return 3;
        std::fwrite(y.data(), 4, y.size(), stdout);
    }
    return 0;
}
"#;

/// Every GGML block format: the legacy and K-quants (dequant.cuh) and the 12 IQ/TQ/MXFP4 ones.
const FORMATS: [WeightFormat; 23] = {
    use WeightFormat::*;
    [
        Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, Q2K, Q3K, Q4K, Q5K, Q6K, Q8K, IQ2_XXS, IQ2_XS, IQ3_XXS,
        IQ1_S, IQ4_NL, IQ3_S, IQ2_S, IQ4_XS, IQ1_M, TQ1_0, TQ2_0, MXFP4,
    ]
};

/// Writes the kernel headers, the shim and the driver into a directory of this process named
/// after `test` and compiles the driver; `None` (after the skip line) when there is no `g++`.
fn build_driver(test: &str) -> Option<PathBuf> {
    if Command::new("g++").arg("--version").output().is_err() {
        eprintln!("skipped: g++ not found (the host check of the device decoders needs it)");
        return None;
    }
    let dir = std::env::temp_dir().join(format!("oxinfer-{test}-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("temp dir");
    for (name, text) in HEADERS {
        std::fs::write(dir.join(name), text).expect("header");
    }
    std::fs::write(dir.join("common.cuh"), SHIM).expect("shim");
    std::fs::write(dir.join("driver.cpp"), DRIVER).expect("driver");
    let exe = dir.join("driver");
    let out = Command::new("g++")
        .args([
            "-std=c++17",
            "-O1",
            "-ffp-contract=off",
            "-Wno-unknown-pragmas",
            "-o",
        ])
        .arg(&exe)
        .arg(dir.join("driver.cpp"))
        .output()
        .expect("running g++");
    assert!(
        out.status.success(),
        "g++ failed on the device headers:\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    Some(exe)
}

/// Runs `exe` (with `args`) on `input`; returns its stdout.
fn run(exe: &Path, args: &[&str], input: &[u8]) -> Vec<u8> {
    let mut child = Command::new(exe)
        .args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .expect("driver starts");
    let mut stdin = child.stdin.take().expect("stdin");
    let data = input.to_vec();
    let writer = std::thread::spawn(move || stdin.write_all(&data));
    let out = child.wait_with_output().expect("driver output");
    writer
        .join()
        .expect("writer")
        .expect("writing the driver's input");
    assert!(out.status.success(), "driver failed: {:?}", out.status);
    out.stdout
}

fn f32s(bytes: &[u8]) -> Vec<f32> {
    bytes
        .chunks_exact(4)
        .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]))
        .collect()
}

/// Block scales the rows take in turn: ordinary, the f16 extremes (largest, smallest normal,
/// subnormal), negative and zero.
const SCALES: [(f32, f32); 8] = [
    (0.0123, 0.004),
    (65504.0, -65504.0),
    (6.104e-5, 3.0e-5),
    (5.96e-8, -5.96e-8),
    (-0.75, 0.25),
    (0.0, 0.0),
    (1.0, -1.0),
    (-1234.5, 777.0),
];

#[test]
fn device_decoders_match_the_cpu_dequantizer_bit_for_bit() {
    let Some(exe) = build_driver("decoders") else {
        return;
    };
    let mut rng = Rng(0x1DDE_C0DE_5EED_0001);
    // Per format: 64 rows of 4 blocks, each row with its own scales.
    let mut input = Vec::new();
    let mut expect = Vec::new();
    for f in FORMATS {
        let cols = 4 * f.block_size();
        for r in 0..64 {
            let mut data: Vec<u8> = (0..f.row_bytes(cols).expect("whole blocks"))
                .map(|_| rng.next() as u8)
                .collect();
            for (i, blk) in data.chunks_exact_mut(f.block_bytes()).enumerate() {
                let (d, m) = SCALES[(r + i) % SCALES.len()];
                if f == WeightFormat::MXFP4 {
                    // Every E8M0 exponent, the subnormal ones (0, 1) and the largest included.
                    blk[0] = ((r * 4 + i) * 3 % 256) as u8;
                } else {
                    blocks::set_scales(f, blk, d, m);
                }
            }
            let mut want = vec![0f32; cols];
            oxinfer_kernels::dequantize_row(f, &data, &mut want).expect("CPU dequantizer");
            let id = f.ggml_type().expect("GGML format");
            input.extend(id.to_le_bytes());
            input.extend((cols as u32).to_le_bytes());
            input.extend((data.len() as u32).to_le_bytes());
            input.extend(&data);
            expect.push((f, r, want));
        }
    }
    let got = f32s(&run(&exe, &[], &input));
    let mut at = 0;
    let mut checked = std::collections::BTreeMap::new();
    for (f, r, want) in &expect {
        let g = &got[at..at + want.len()];
        at += want.len();
        for (i, (a, b)) in g.iter().zip(want).enumerate() {
            assert!(
                a.to_bits() == b.to_bits(),
                "{f} row {r} weight {i}: device decoder {a:e} ({:#010x}), CPU {b:e} ({:#010x})",
                a.to_bits(),
                b.to_bits()
            );
        }
        *checked.entry(f.to_string()).or_insert(0) += want.len();
    }
    assert_eq!(at, got.len(), "driver wrote more values than asked");
    println!("bit-exact: {checked:?}");
}

/// The int8 GEMVs' table lookup (four 4-bit codes -> four int8 table values by byte permutes)
/// for every one of the 65536 code words of both tables, and the 32-weight block dots of IQ4_NL
/// and MXFP4 on random blocks and activations, against the CPU's tables and dequantizer.
#[test]
fn int8_table_lookups_match_the_cpu_tables() {
    let Some(exe) = build_driver("lut") else {
        return;
    };
    let mut rng = Rng(0x7AB1_E5EE_D000_0002);
    // The tables as the CPU dequantizer sees them: code c of a block with scale 1 (MXFP4's
    // values are doubled, as in the kernels' table).
    let table = |f: WeightFormat| -> [i8; 16] {
        let mut blk = vec![0u8; f.block_bytes()];
        blocks::set_scales(f, &mut blk, 1.0, 0.0);
        let off = f.block_bytes() - 16;
        for j in 0..16 {
            blk[off + j] = j as u8;
        }
        let mut y = vec![0f32; 32];
        oxinfer_kernels::dequantize_row(f, &blk, &mut y).expect("dequantize");
        std::array::from_fn(|j| y[j] as i8)
    };
    let (t4, tm) = (table(WeightFormat::IQ4_NL), table(WeightFormat::MXFP4));
    let mut input = Vec::new();
    let mut want_dots = Vec::new();
    for n in 0..3000 {
        // IQ4_NL's kernel of today (at both alignments of its 18-byte blocks), its session-10
        // kernel (FMT_IQ4_NL_V0, id 120) and MXFP4.
        let (f, id) = match n % 3 {
            0 => (WeightFormat::IQ4_NL, 20 | (n / 3 % 2 * 2) << 16),
            1 => (WeightFormat::IQ4_NL, 120 | (n / 3 % 2 * 2) << 16),
            _ => (WeightFormat::MXFP4, 39),
        };
        let mut blk: Vec<u8> = (0..f.block_bytes()).map(|_| rng.next() as u8).collect();
        if f == WeightFormat::IQ4_NL {
            blocks::set_scales(f, &mut blk, SCALES[n / 2 % SCALES.len()].0, 0.0);
        } else {
            // Exponents that keep d * 12 finite.
            blk[0] = (rng.next() % 250) as u8;
        }
        let x: Vec<i8> = (0..32).map(|_| (rng.next() % 255) as i8).collect();
        let mut w = vec![0f32; 32];
        oxinfer_kernels::dequantize_row(f, &blk, &mut w).expect("dequantize");
        let (tab, off) = if f == WeightFormat::IQ4_NL {
            (&t4, 2)
        } else {
            (&tm, 1)
        };
        let q = |j: usize| (blk[off + j % 16] >> (4 * (j / 16)) & 15) as usize;
        let dot: i32 = (0..32)
            .map(|j| i32::from(tab[q(j)]) * i32::from(x[j]))
            .sum();
        // The block scale: the dequantized value of a non-zero code over its table value.
        let d = (0..32)
            .find(|&j| tab[q(j)] != 0)
            .map_or(0.0, |j| w[j] / f32::from(tab[q(j)]));
        want_dots.push((f, 1.0f32 * d * dot as f32));
        input.extend((id as u32).to_le_bytes());
        input.extend(&blk);
        input.extend(x.iter().map(|&v| v as u8));
    }
    // iq4nl_dot32 (IQ4_XS's one-row dot) on random codes and activations, extreme ones included.
    let mut want_fused = Vec::new();
    for n in 0..20000 {
        let codes: Vec<u8> = (0..16).map(|_| rng.next() as u8).collect();
        let x: Vec<i8> = (0..32)
            .map(|_| match n % 4 {
                0 => 127,
                1 => -127,
                _ => (rng.next() % 255) as i8,
            })
            .collect();
        let dot: i32 = (0..32)
            .map(|j| {
                i32::from(t4[(codes[j % 16] >> (4 * (j / 16)) & 15) as usize]) * i32::from(x[j])
            })
            .sum();
        want_fused.push(dot);
        input.extend(u32::MAX.to_le_bytes());
        input.extend(&codes);
        input.extend(x.iter().map(|&v| v as u8));
    }
    let out = run(&exe, &["lut"], &input);
    let words: Vec<i32> = out
        .chunks_exact(4)
        .map(|c| i32::from_le_bytes([c[0], c[1], c[2], c[3]]))
        .collect();
    for c in 0..65536usize {
        let codes = [c & 15, c >> 4 & 15, c >> 8 & 15, c >> 12];
        for (k, tab) in [&t4, &tm].into_iter().enumerate() {
            let want = i32::from_le_bytes(codes.map(|q| tab[q] as u8));
            let got = words[2 * c + k];
            assert_eq!(
                got, want,
                "table {k}, codes {codes:?}: {got:#010x} vs {want:#010x}"
            );
        }
    }
    // lut16_x8: each byte's low nibble's entry in x, its high nibble's in y.
    for c in 0..65536usize {
        let at = 2 * 65536 + 5 * c;
        let q = words[at] as u32;
        for (k, tab) in [&t4, &tm].into_iter().enumerate() {
            let nib = |h: u32| {
                i32::from_le_bytes(
                    [0, 1, 2, 3].map(|j| tab[(q >> (8 * j + 4 * h) & 15) as usize] as u8),
                )
            };
            let (x, y) = (words[at + 1 + 2 * k], words[at + 2 + 2 * k]);
            assert_eq!((x, y), (nib(0), nib(1)), "table {k}, codes {q:#010x}");
        }
    }
    let rest = &out[4 * 7 * 65536..];
    let (dots, fused) = rest.split_at(4 * want_dots.len());
    let dots = f32s(dots);
    assert_eq!(fused.len(), 4 * want_fused.len(), "driver output size");
    for (i, (g, w)) in fused.chunks_exact(4).zip(&want_fused).enumerate() {
        let g = i32::from_le_bytes([g[0], g[1], g[2], g[3]]);
        assert_eq!(g, *w, "iq4nl_dot32 case {i}");
    }
    for (i, (g, (f, w))) in dots.iter().zip(&want_dots).enumerate() {
        assert!(
            g.to_bits() == w.to_bits(),
            "{f} block {i}: dot {g:e} vs {w:e}"
        );
    }
}

/// The int8 GEMVs' 32-weight block dot products (dot32.cuh: Q4_0, Q4_1, Q5_0, Q5_1, Q8_0) against
/// the CPU dequantizer's weights times the activations, summed in f64: equal to f32 rounding
/// on random blocks with extreme scales and activations (the kernels' integer sums are exact;
/// the scale, minimum and offset terms are one or two f32 products).
#[test]
fn block32_int8_dots_match_the_cpu() {
    let Some(exe) = build_driver("dot32") else {
        return;
    };
    use WeightFormat::*;
    let mut rng = Rng(0xD0_7320_0000_0005);
    let mut input = Vec::new();
    let mut want = Vec::new();
    for n in 0..20000 {
        let f = [Q4_0, Q4_1, Q5_0, Q5_1, Q8_0][n % 5];
        let mut blk: Vec<u8> = (0..f.block_bytes()).map(|_| rng.next() as u8).collect();
        let (d, m) = SCALES[n / 5 % SCALES.len()];
        blocks::set_scales(f, &mut blk, d, m);
        let x: Vec<i8> = (0..32)
            .map(|_| match n / 5 % 4 {
                0 => 127,
                1 => -127,
                _ => (rng.next() % 255) as i8,
            })
            .collect();
        let mut w = vec![0f32; 32];
        oxinfer_kernels::dequantize_row(f, &blk, &mut w).expect("dequantize");
        let exact: f64 = w.iter().zip(&x).map(|(&a, &b)| a as f64 * b as f64).sum();
        let size: f64 = w
            .iter()
            .zip(&x)
            .map(|(&a, &b)| (a as f64 * b as f64).abs())
            .sum();
        want.push((f, exact, size));
        input.extend(f.ggml_type().expect("GGML format").to_le_bytes());
        input.extend(&blk);
        input.extend(x.iter().map(|&v| v as u8));
    }
    let got = f32s(&run(&exe, &["dot32"], &input));
    assert_eq!(got.len(), want.len(), "driver output size");
    for (i, (&g, &(f, exact, size))) in got.iter().zip(&want).enumerate() {
        assert!(
            (g as f64 - exact).abs() <= 4e-7 * size + f64::from(f32::MIN_POSITIVE),
            "{f} block {i}: dot {g:e} vs {exact:e} (terms {size:e})"
        );
    }
}

/// The int8 GEMVs' decoding of the 256-weight IQ/TQ formats (iq_group32: int8 quants, integer
/// scale per 16 weights, float unit) against the CPU dequantizer: unit * scale * quant, computed
/// in f64, equals the CPU's f32 weight exactly (both are exact products of the same factors: f16
/// scale, small integer codes and quants), on random blocks with extreme scales.
#[test]
fn int8_group_decoders_match_the_cpu_dequantizer() {
    let Some(exe) = build_driver("group") else {
        return;
    };
    use WeightFormat::*;
    // The last IQ4_XS is the kernels' session-10 decoding (FMT_IQ4_XS_V0, id 123).
    let formats = [
        IQ2_XXS, IQ2_XS, IQ3_XXS, IQ1_S, IQ3_S, IQ2_S, IQ4_XS, IQ1_M, TQ1_0, TQ2_0, IQ4_XS,
    ];
    let mut rng = Rng(0x6A0E_5EED_0000_0003);
    let mut input = Vec::new();
    let mut want = Vec::new();
    for (i, f) in formats.into_iter().enumerate() {
        let id = if i == formats.len() - 1 {
            123
        } else {
            f.ggml_type().expect("GGML format")
        };
        for n in 0..200 {
            let mut blk: Vec<u8> = (0..f.block_bytes()).map(|_| rng.next() as u8).collect();
            let (d, m) = SCALES[n % SCALES.len()];
            blocks::set_scales(f, &mut blk, d, m);
            let mut w = vec![0f32; 256];
            oxinfer_kernels::dequantize_row(f, &blk, &mut w).expect("CPU dequantizer");
            input.extend(id.to_le_bytes());
            input.extend((blk.len() as u32).to_le_bytes());
            input.extend(&blk);
            want.push((f, n, w));
        }
    }
    let out = run(&exe, &["group"], &input);
    let words: Vec<[u8; 4]> = out
        .chunks_exact(4)
        .map(|c| [c[0], c[1], c[2], c[3]])
        .collect();
    assert_eq!(words.len(), want.len() * 8 * 11, "driver output size");
    for (bi, (f, n, w)) in want.iter().enumerate() {
        for ib in 0..8 {
            let at = (bi * 8 + ib) * 11;
            let q: Vec<i8> = words[at..at + 8]
                .iter()
                .flatten()
                .map(|&b| b as i8)
                .collect();
            let s = [0, 1].map(|h| i32::from_le_bytes(words[at + 8 + h]));
            let unit = f32::from_le_bytes(words[at + 10]);
            for j in 0..32 {
                let dev = f64::from(unit) * f64::from(s[j / 16]) * f64::from(q[j]);
                let cpu = f64::from(w[32 * ib + j]);
                assert!(
                    dev == cpu,
                    "{f} block {n} weight {}: {unit:e} * {} * {} = {dev:e}, CPU {cpu:e}",
                    32 * ib + j,
                    s[j / 16],
                    q[j]
                );
            }
        }
    }
}

/// The f64 dot of dequantized weights `deq` with int8 activations `x` scaled per `block`
/// values by `xd`, and the sum of its terms' magnitudes (the scale of its rounding).
fn scaled_dot(deq: &[f32], x: &[i8], xd: &[f32], block: usize) -> (f64, f64) {
    let terms = deq
        .iter()
        .zip(x)
        .enumerate()
        .map(|(j, (&w, &a))| f64::from(w) * f64::from(a) * f64::from(xd[j / block]));
    (terms.clone().sum(), terms.map(f64::abs).sum())
}

/// One case of the row drivers' input: block count, weight blocks, int8 activations, scales.
fn push_case(input: &mut Vec<u8>, nb: usize, w: &[u8], x: &[i8], xd: &[f32]) {
    input.extend((nb as u32).to_le_bytes());
    input.extend(w);
    input.extend(x.iter().map(|&v| v as u8));
    input.extend(xd.iter().flat_map(|v| v.to_le_bytes()));
}

/// The one-row IQ4_XS GEMV bodies' lane layouts (today's eight lanes per super-block, session
/// 10's, and the four-lane one of `OXINFER_CUDA_IQ4_GEMV=wide`), run for each of a warp's 32
/// lanes on the host, against the f64 dot of the CPU dequantizer's weights with the activations:
/// every weight is counted once, with its scale (rows of 1 to 19 blocks: ragged warp steps).
#[test]
fn iq4_xs_one_row_lane_layouts_match_the_cpu() {
    let Some(exe) = build_driver("rows") else {
        return;
    };
    let f = WeightFormat::IQ4_XS;
    let mut rng = Rng(0x1A4E_5EED_0000_0005);
    let mut input = Vec::new();
    let mut want = Vec::new();
    for n in 0..60usize {
        let nb = 1 + n % 19;
        let mut w: Vec<u8> = (0..136 * nb).map(|_| rng.next() as u8).collect();
        for (i, blk) in w.chunks_exact_mut(136).enumerate() {
            let (d, m) = SCALES[(n + i) % SCALES.len()];
            // Finite, non-zero scales (the f16 extremes overflow an f32 row sum).
            let d = if d.abs() > 1e3 || d == 0.0 { 0.03 } else { d };
            blocks::set_scales(f, blk, d, m);
        }
        let x: Vec<i8> = (0..256 * nb).map(|_| (rng.next() % 255) as i8).collect();
        let xd: Vec<f32> = (0..nb).map(|i| 0.001 * (1 + (i + n) % 7) as f32).collect();
        let mut deq = vec![0f32; 256 * nb];
        oxinfer_kernels::dequantize_row(f, &w, &mut deq).expect("CPU dequantizer");
        let (dot, mag) = scaled_dot(&deq, &x, &xd, 256);
        want.push((nb, dot, mag));
        push_case(&mut input, nb, &w, &x, &xd);
    }
    let got = f32s(&run(&exe, &["rows"], &input));
    assert_eq!(got.len(), 3 * want.len(), "driver output size");
    for (i, (nb, dot, mag)) in want.iter().enumerate() {
        for (k, name) in ["default", "session 10", "wide"].iter().enumerate() {
            let g = f64::from(got[3 * i + k]);
            assert!(
                (g - dot).abs() <= 1e-5 * mag.max(1e-30),
                "{name} row {i} ({nb} blocks): {g:e} vs CPU {dot:e}"
            );
        }
        // Today's body and session 10's add the same lanes' same sums.
        assert_eq!(got[3 * i].to_bits(), got[3 * i + 1].to_bits(), "row {i}");
    }
}

/// IQ4_NL's several-row body (weights looked up once per block for all activation rows) on the
/// host, lane by lane, for three rows: equal bit for bit to the one-row dot per block and row
/// in the same order, and to the CPU dequantizer's f64 dot within f32 rounding.
#[test]
fn iq4_nl_several_rows_match_the_cpu() {
    let Some(exe) = build_driver("nlrows") else {
        return;
    };
    let f = WeightFormat::IQ4_NL;
    let mut rng = Rng(0x1A4E_5EED_0000_0006);
    let mut input = Vec::new();
    let mut want = Vec::new();
    for n in 0..40usize {
        let nb = 1 + n * 7 % 75;
        let mut w: Vec<u8> = (0..18 * nb).map(|_| rng.next() as u8).collect();
        for blk in w.chunks_exact_mut(18) {
            blocks::set_scales(f, blk, 0.01 * (1 + n % 5) as f32, 0.0);
        }
        let x: Vec<i8> = (0..3 * 32 * nb).map(|_| (rng.next() % 255) as i8).collect();
        let xd: Vec<f32> = (0..3 * nb).map(|i| 0.001 * (1 + i % 9) as f32).collect();
        let mut deq = vec![0f32; 32 * nb];
        oxinfer_kernels::dequantize_row(f, &w, &mut deq).expect("CPU dequantizer");
        for r in 0..3 {
            let xr = &x[r * 32 * nb..(r + 1) * 32 * nb];
            let (dot, mag) = scaled_dot(&deq, xr, &xd[r * nb..(r + 1) * nb], 32);
            want.push((n, r, dot, mag));
        }
        push_case(&mut input, nb, &w, &x, &xd);
    }
    let got = f32s(&run(&exe, &["nlrows"], &input));
    assert_eq!(got.len(), 2 * want.len(), "driver output size");
    for (i, (n, r, dot, mag)) in want.iter().enumerate() {
        let (rows, per_block) = (got[6 * (i / 3) + r], got[6 * (i / 3) + 3 + r]);
        assert_eq!(rows.to_bits(), per_block.to_bits(), "case {n} row {r}");
        let g = f64::from(rows);
        assert!(
            (g - dot).abs() <= 1e-5 * mag.max(1e-30),
            "case {n} row {r}: {g:e} vs CPU {dot:e}"
        );
    }
}
