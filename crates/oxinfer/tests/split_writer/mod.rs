//! A test-side GGUF splitter laid out exactly as llama.cpp's `llama-gguf-split --split
//! --split-max-tensors N` writes (tools/gguf-split/gguf-split.cpp): part 1 carries the source's
//! metadata bytes verbatim followed by `split.no` (u16), `split.count` (u16) and
//! `split.tensors.count` (i32); the other parts carry only those three keys; N tensors per part
//! in source order; each part's tensor table padded to 32 bytes, every tensor padded to 32.
//!
//! It lets the tests split the real models at test time. `gguf_split.rs` checks that it writes
//! the tiny fixture byte for byte as tools/ref/split_gguf.py (the `gguf` package's writer, the
//! same layout) did.

use std::fs;
use std::path::{Path, PathBuf};

use oxinfer::gguf::GgufFile;

const ALIGN: usize = 32;

/// Little-endian cursor over a GGUF header (the tests' files are well formed: it panics on a
/// short read).
struct Cursor<'a> {
    b: &'a [u8],
    pos: usize,
}

impl Cursor<'_> {
    fn take(&mut self, n: usize) -> &[u8] {
        let s = &self.b[self.pos..self.pos + n];
        self.pos += n;
        s
    }
    fn u32(&mut self) -> u32 {
        u32::from_le_bytes(self.take(4).try_into().unwrap())
    }
    fn u64(&mut self) -> u64 {
        u64::from_le_bytes(self.take(8).try_into().unwrap())
    }
    fn string(&mut self) -> String {
        let n = self.u64() as usize;
        String::from_utf8_lossy(self.take(n)).into_owned()
    }
    /// Skips one metadata value of type `ty`.
    fn skip_value(&mut self, ty: u32) {
        match ty {
            0 | 1 | 7 => self.pos += 1,
            2 | 3 => self.pos += 2,
            4..=6 => self.pos += 4,
            10..=12 => self.pos += 8,
            8 => {
                self.string();
            }
            9 => {
                let inner = self.u32();
                for _ in 0..self.u64() {
                    self.skip_value(inner);
                }
            }
            _ => panic!("unknown GGUF value type {ty}"),
        }
    }
}

fn put_str(out: &mut Vec<u8>, s: &str) {
    out.extend_from_slice(&(s.len() as u64).to_le_bytes());
    out.extend_from_slice(s.as_bytes());
}

fn put_kv(out: &mut Vec<u8>, key: &str, ty: u32, value: &[u8]) {
    put_str(out, key);
    out.extend_from_slice(&ty.to_le_bytes());
    out.extend_from_slice(value);
}

fn pad(out: &mut Vec<u8>) {
    out.resize(out.len().div_ceil(ALIGN) * ALIGN, 0);
}

/// Splits `src` into `{prefix}-0000i-of-0000n.gguf` with at most `max_tensors` tensors per
/// part; returns the parts' paths in order.
pub fn split_gguf(src: &Path, prefix: &str, max_tensors: usize) -> Vec<PathBuf> {
    let bytes = fs::read(src).unwrap_or_else(|e| panic!("{}: {e}", src.display()));
    let g = GgufFile::open_single(src).unwrap_or_else(|e| panic!("{e}"));
    let mut c = Cursor { b: &bytes, pos: 8 };
    let n_tensors = c.u64() as usize;
    let n_kv = c.u64();
    let kv_start = c.pos;
    for _ in 0..n_kv {
        c.string();
        let ty = c.u32();
        c.skip_value(ty);
    }
    let kv = &bytes[kv_start..c.pos];
    // (name, dims, ggml type) in file order; offsets and sizes come from the reader.
    let infos: Vec<(String, Vec<u64>, u32)> = (0..n_tensors)
        .map(|_| {
            let name = c.string();
            let nd = c.u32();
            let dims = (0..nd).map(|_| c.u64()).collect();
            let ty = c.u32();
            c.u64();
            (name, dims, ty)
        })
        .collect();
    let chunks: Vec<_> = infos.chunks(max_tensors).collect();
    let count = chunks.len();
    let mut paths = Vec::new();
    for (i, chunk) in chunks.iter().enumerate() {
        let mut out = b"GGUF".to_vec();
        out.extend_from_slice(&3u32.to_le_bytes());
        out.extend_from_slice(&(chunk.len() as u64).to_le_bytes());
        let keys = if i == 0 { n_kv + 3 } else { 3 };
        out.extend_from_slice(&keys.to_le_bytes());
        if i == 0 {
            out.extend_from_slice(kv);
        }
        put_kv(&mut out, "split.no", 2, &(i as u16).to_le_bytes());
        put_kv(&mut out, "split.count", 2, &(count as u16).to_le_bytes());
        put_kv(
            &mut out,
            "split.tensors.count",
            5,
            &(n_tensors as i32).to_le_bytes(),
        );
        let mut offset = 0usize;
        for (name, dims, ty) in chunk.iter() {
            put_str(&mut out, name);
            out.extend_from_slice(&(dims.len() as u32).to_le_bytes());
            for d in dims {
                out.extend_from_slice(&d.to_le_bytes());
            }
            out.extend_from_slice(&ty.to_le_bytes());
            out.extend_from_slice(&(offset as u64).to_le_bytes());
            offset += g.tensor_info(name).unwrap().size.div_ceil(ALIGN) * ALIGN;
        }
        pad(&mut out);
        for (name, _, _) in chunk.iter() {
            let t = g.tensor_info(name).unwrap();
            out.extend_from_slice(&bytes[t.offset..t.offset + t.size]);
            pad(&mut out);
        }
        let path = PathBuf::from(format!("{prefix}-{:05}-of-{count:05}.gguf", i + 1));
        fs::write(&path, out).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
        paths.push(path);
    }
    paths
}
