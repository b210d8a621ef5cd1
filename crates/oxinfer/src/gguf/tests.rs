//! GGUF reader tests on files built in memory: every value type, nested arrays, alignment,
//! and corrupt inputs (each must give an error naming the problem, never a panic).

use super::*;

/// Minimal GGUF writer for tests.
struct Writer {
    buf: Vec<u8>,
}

impl Writer {
    fn new(version: u32, n_tensors: u64, n_kv: u64) -> Self {
        let mut w = Writer { buf: Vec::new() };
        w.buf.extend_from_slice(b"GGUF");
        w.u32(version);
        w.u64(n_tensors);
        w.u64(n_kv);
        w
    }
    fn u32(&mut self, v: u32) {
        self.buf.extend_from_slice(&v.to_le_bytes());
    }
    fn u64(&mut self, v: u64) {
        self.buf.extend_from_slice(&v.to_le_bytes());
    }
    fn str(&mut self, s: &str) {
        self.u64(s.len() as u64);
        self.buf.extend_from_slice(s.as_bytes());
    }
    fn kv(&mut self, key: &str, ty: u32, payload: &[u8]) {
        self.str(key);
        self.u32(ty);
        self.buf.extend_from_slice(payload);
    }
    fn tensor(&mut self, name: &str, dims: &[u64], ty: u32, offset: u64) {
        self.str(name);
        self.u32(dims.len() as u32);
        for &d in dims {
            self.u64(d);
        }
        self.u32(ty);
        self.u64(offset);
    }
    fn pad(&mut self, align: usize) {
        while !self.buf.len().is_multiple_of(align) {
            self.buf.push(0);
        }
    }
}

fn parse(bytes: Vec<u8>) -> Result<GgufFile, LoadError> {
    GgufFile::parse(
        Path::new("test.gguf"),
        Arc::new(MappedFile::from_bytes("test.gguf", bytes)),
    )
}

fn le<T: Copy, const N: usize>(v: T, f: impl Fn(T) -> [u8; N]) -> Vec<u8> {
    f(v).to_vec()
}

/// A file with one key of every type, a nested array, and two F32 tensors.
fn sample(version: u32) -> Vec<u8> {
    let mut w = Writer::new(version, 2, 15);
    w.kv("u8", 0, &[200]);
    w.kv("i8", 1, &[0xfe]);
    w.kv("u16", 2, &le(60000u16, u16::to_le_bytes));
    w.kv("i16", 3, &le(-300i16, i16::to_le_bytes));
    w.kv("u32", 4, &le(4_000_000_000u32, u32::to_le_bytes));
    w.kv("i32", 5, &le(-70000i32, i32::to_le_bytes));
    w.kv("f32", 6, &le(1.5f32, f32::to_le_bytes));
    w.kv("bool", 7, &[1]);
    let mut s = Vec::new();
    s.extend_from_slice(&5u64.to_le_bytes());
    s.extend_from_slice(b"llama");
    w.kv("general.architecture", 8, &s);
    w.kv("u64", 10, &le(u64::MAX, u64::to_le_bytes));
    w.kv("i64", 11, &le(-5i64, i64::to_le_bytes));
    w.kv("f64", 12, &le(0.25f64, f64::to_le_bytes));
    // array of i32
    let mut a = Vec::new();
    a.extend_from_slice(&5u32.to_le_bytes());
    a.extend_from_slice(&3u64.to_le_bytes());
    for v in [1i32, -2, 3] {
        a.extend_from_slice(&v.to_le_bytes());
    }
    w.kv("ints", 9, &a);
    // array of strings
    let mut a = Vec::new();
    a.extend_from_slice(&8u32.to_le_bytes());
    a.extend_from_slice(&2u64.to_le_bytes());
    for v in ["a", "héllo"] {
        a.extend_from_slice(&(v.len() as u64).to_le_bytes());
        a.extend_from_slice(v.as_bytes());
    }
    w.kv("strings", 9, &a);
    // array of arrays of u8
    let mut a = Vec::new();
    a.extend_from_slice(&9u32.to_le_bytes());
    a.extend_from_slice(&2u64.to_le_bytes());
    for inner in [&[1u8, 2][..], &[3u8][..]] {
        a.extend_from_slice(&0u32.to_le_bytes());
        a.extend_from_slice(&(inner.len() as u64).to_le_bytes());
        a.extend_from_slice(inner);
    }
    w.kv("nested", 9, &a);
    w.tensor("a", &[4, 2], 0, 0);
    w.tensor("b", &[3], 0, 32);
    w.pad(32);
    for i in 0..8 {
        w.buf.extend_from_slice(&(i as f32).to_le_bytes());
    }
    for i in 0..3 {
        w.buf.extend_from_slice(&(10.0 + i as f32).to_le_bytes());
    }
    w.buf
}

#[test]
fn reads_every_value_type_v2_and_v3() {
    for version in [2, 3] {
        let g = parse(sample(version)).expect("valid file");
        assert_eq!(g.version(), version);
        assert_eq!(g.get("u8"), Some(&MetaValue::U8(200)));
        assert_eq!(g.get("i8"), Some(&MetaValue::I8(-2)));
        assert_eq!(g.get("u16"), Some(&MetaValue::U16(60000)));
        assert_eq!(g.get("i16"), Some(&MetaValue::I16(-300)));
        assert_eq!(g.get_u64("u32").unwrap(), Some(4_000_000_000));
        assert_eq!(g.get("i32"), Some(&MetaValue::I32(-70000)));
        assert_eq!(g.get_f64("f32").unwrap(), Some(1.5));
        assert_eq!(g.get_bool("bool").unwrap(), Some(true));
        assert_eq!(g.architecture().unwrap(), "llama");
        assert_eq!(g.get_u64("u64").unwrap(), Some(u64::MAX));
        assert_eq!(g.get("i64").and_then(|v| v.as_i64()), Some(-5));
        assert_eq!(g.get_f64("f64").unwrap(), Some(0.25));
        assert_eq!(
            g.get("ints")
                .and_then(|v| v.as_array())
                .and_then(|a| a.to_ints()),
            Some(vec![1, -2, 3])
        );
        assert_eq!(
            g.get("strings").and_then(|v| v.as_strings()),
            Some(&["a".to_string(), "héllo".to_string()][..])
        );
        assert_eq!(
            g.get("nested"),
            Some(&MetaValue::Array(MetaArray::Array(vec![
                MetaArray::U8(vec![1, 2]),
                MetaArray::U8(vec![3])
            ])))
        );
        // wrong-type access is an error naming the key, not a panic
        let e = g.get_str("u32").unwrap_err().to_string();
        assert!(
            e.contains("'u32'") && e.contains("expected a string"),
            "{e}"
        );
        let a = g.tensor("a").unwrap();
        assert_eq!(a.shape, vec![2, 4]);
        assert_eq!(
            a.to_f32().unwrap(),
            (0..8).map(|i| i as f32).collect::<Vec<_>>()
        );
        assert_eq!(
            g.tensor("b").unwrap().to_f32().unwrap(),
            vec![10.0, 11.0, 12.0]
        );
        assert_eq!(g.data_offset() % 32, 0);
    }
}

#[test]
fn custom_alignment_is_honoured() {
    let mut w = Writer::new(3, 1, 1);
    w.kv("general.alignment", 4, &le(64u32, u32::to_le_bytes));
    w.tensor("t", &[2], 0, 0);
    w.pad(64);
    let start = w.buf.len();
    w.buf.extend_from_slice(&7f32.to_le_bytes());
    w.buf.extend_from_slice(&8f32.to_le_bytes());
    let g = parse(w.buf).unwrap();
    assert_eq!(g.alignment(), 64);
    assert_eq!(g.data_offset(), start);
    assert_eq!(g.tensor("t").unwrap().to_f32().unwrap(), vec![7.0, 8.0]);
}

fn err(bytes: Vec<u8>) -> String {
    match parse(bytes) {
        Ok(_) => panic!("corrupt file accepted"),
        Err(e) => e.to_string(),
    }
}

#[test]
fn bad_magic_and_version() {
    let mut b = sample(3);
    b[0] = b'X';
    assert!(err(b).contains("not a GGUF file"));
    let mut b = sample(3);
    b[4] = 9;
    assert!(err(b).contains("unsupported GGUF version 9"));
    assert!(err(b"GG".to_vec()).contains("truncated"));
}

#[test]
fn every_truncation_is_an_error() {
    let full = sample(3);
    for cut in 0..full.len() {
        let msg = err(full[..cut].to_vec());
        assert!(msg.starts_with("test.gguf: "), "{cut}: {msg}");
    }
}

#[test]
fn absurd_counts_do_not_allocate() {
    let mut w = Writer::new(3, 0, u64::MAX / 2);
    w.str("k");
    let e = err(w.buf);
    assert!(e.contains("metadata count"), "{e}");
    // a string claiming 2^60 bytes
    let mut w = Writer::new(3, 0, 1);
    w.u64(1 << 60);
    w.buf.extend_from_slice(&[0u8; 16]);
    assert!(err(w.buf).contains("string length"));
    // an array claiming 2^62 elements
    let mut w = Writer::new(3, 0, 1);
    w.str("arr");
    w.u32(9);
    w.u32(4);
    w.u64(1 << 62);
    assert!(err(w.buf).contains("array length"));
}

#[test]
fn tensor_problems_name_the_tensor() {
    // data past the end of the file
    let mut w = Writer::new(3, 1, 0);
    w.tensor("blk.0.attn_q.weight", &[1024, 1024], 0, 0);
    w.pad(32);
    let e = err(w.buf);
    assert!(
        e.contains("blk.0.attn_q.weight") && e.contains("past the end"),
        "{e}"
    );
    // unsupported type id
    let mut w = Writer::new(3, 1, 0);
    w.tensor("w", &[32], 99, 0);
    assert!(err(w.buf).contains("unsupported tensor type id 99"));
    // a GGML type this engine does not run is named
    let mut w = Writer::new(3, 1, 0);
    w.tensor("w", &[64], 40, 0);
    assert!(err(w.buf).contains("unsupported tensor type id 40 (NVFP4)"));
    // dims overflow
    let mut w = Writer::new(3, 1, 0);
    w.tensor("w", &[u64::MAX, 4], 0, 0);
    assert!(err(w.buf).contains("absurd dimensions"));
    // too many dims
    let mut w = Writer::new(3, 1, 0);
    w.tensor("w", &[1, 1, 1, 1, 1], 0, 0);
    assert!(err(w.buf).contains("5 dimensions"));
    // misaligned offset
    let mut w = Writer::new(3, 1, 0);
    w.tensor("w", &[1], 0, 3);
    w.pad(32);
    w.buf.extend_from_slice(&[0u8; 64]);
    assert!(err(w.buf).contains("not aligned"));
}

/// Tensors of every table-lookup / ternary / FP4 type load, are named by their GGUF type name,
/// and read back (through the loader's dequantization) exactly as the `gguf` Python package
/// decodes them (the kernels crate's dequant fixtures, made by
/// tools/ref/make_dequant_fixtures.py).
#[test]
fn iq_tq_mxfp4_tensors_load_and_dequantize_like_gguf_py() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../tests/fixtures/dequant");
    let read = |f: String| std::fs::read(dir.join(&f)).unwrap_or_else(|e| panic!("{f}: {e}"));
    let formats = WeightFormat::IQ;
    let raws: Vec<Vec<u8>> = formats.iter().map(|f| read(format!("{f}.bin"))).collect();
    let mut w = Writer::new(3, formats.len() as u64, 0);
    let mut offset = 0u64;
    for (f, raw) in formats.iter().zip(&raws) {
        let n = raw.len() / f.block_bytes() * f.block_size();
        w.tensor(
            &format!("t.{f}"),
            &[n as u64],
            f.ggml_type().unwrap(),
            offset,
        );
        offset += (raw.len() as u64).div_ceil(32) * 32;
    }
    w.pad(32);
    for raw in &raws {
        w.buf.extend_from_slice(raw);
        w.pad(32);
    }
    let g = parse(w.buf).expect("IQ/TQ/MXFP4 tensors load");
    for f in formats {
        let name = format!("t.{f}");
        let info = g.tensor_info(&name).unwrap();
        assert_eq!(info.format, f);
        assert_eq!(info.format.name(), f.to_string());
        let want: Vec<u32> = read(format!("{f}.f32"))
            .chunks_exact(4)
            .map(|b| u32::from_le_bytes([b[0], b[1], b[2], b[3]]))
            .collect();
        let got: Vec<u32> = g
            .tensor(&name)
            .unwrap()
            .to_f32()
            .unwrap()
            .iter()
            .map(|v| v.to_bits())
            .collect();
        assert_eq!(got, want, "{f}");
    }
}

/// `open` applies the memory rule to the whole model: a file with one IQ2_XS block among Q4_0
/// ones fits it packed, a file of IQ2_XS alone does not (`MappedFile::fits_packed`, read by
/// `Linear` to pack the growing formats).
#[test]
fn open_records_whether_the_model_fits_packed() {
    let dir = std::env::temp_dir().join(format!("oxinfer-fits-packed-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let write = |name: &str, tensors: &[(u32, usize, usize)]| {
        // (ggml type, elements, bytes) per tensor, zero bytes (valid blocks: scale 0).
        let mut w = Writer::new(3, tensors.len() as u64, 0);
        let mut offset = 0u64;
        for (i, &(ty, n, _)) in tensors.iter().enumerate() {
            w.tensor(&format!("t{i}"), &[n as u64], ty, offset);
            offset += tensors[i].2.div_ceil(32) as u64 * 32;
        }
        w.pad(32);
        for &(_, _, bytes) in tensors {
            w.buf
                .extend(std::iter::repeat_n(0u8, bytes.div_ceil(32) * 32));
        }
        let path = dir.join(name);
        std::fs::write(&path, &w.buf).unwrap();
        GgufFile::open(&path).unwrap()
    };
    let (iq2_xs, q4_0) = (17, 2);
    let mixed = write("mixed.gguf", &[(iq2_xs, 256, 74), (q4_0, 64 * 32, 64 * 18)]);
    assert!(mixed.parts.iter().all(|p| p.fits_packed()));
    let pure = write("pure.gguf", &[(iq2_xs, 4 * 256, 4 * 74)]);
    assert!(pure.parts.iter().all(|p| !p.fits_packed()));
    std::fs::remove_dir_all(&dir).ok();
}
