//! Writing float32 `.npy` files (NumPy format 1.0, little-endian, C order).

use std::io::Write;
use std::path::Path;

/// Writes `data` (row-major `shape`) as a float32 `.npy` file.
pub fn write_f32(path: &Path, shape: &[usize], data: &[f32]) -> std::io::Result<()> {
    assert_eq!(shape.iter().product::<usize>(), data.len());
    let dims: Vec<String> = shape.iter().map(|d| d.to_string()).collect();
    let shape_txt = if dims.len() == 1 {
        format!("({},)", dims[0])
    } else {
        format!("({})", dims.join(", "))
    };
    let mut header = format!("{{'descr': '<f4', 'fortran_order': False, 'shape': {shape_txt}, }}");
    // Magic (6) + version (2) + header length (2) + header + '\n' must be a multiple of 64.
    let total = 10 + header.len() + 1;
    header.push_str(&" ".repeat(total.div_ceil(64) * 64 - total));
    header.push('\n');
    let mut out = std::io::BufWriter::new(std::fs::File::create(path)?);
    out.write_all(b"\x93NUMPY\x01\x00")?;
    out.write_all(&(header.len() as u16).to_le_bytes())?;
    out.write_all(header.as_bytes())?;
    for v in data {
        out.write_all(&v.to_le_bytes())?;
    }
    out.flush()
}

/// Reads a float32 little-endian C-order `.npy` file (format 1.x or 2.x): `(shape, data)`.
///
/// # Errors
/// An unreadable file, another dtype or order, a header or length that does not fit.
pub fn read_f32(path: &Path) -> anyhow::Result<(Vec<usize>, Vec<f32>)> {
    use anyhow::{bail, Context};
    let b = std::fs::read(path).with_context(|| format!("{}", path.display()))?;
    let bad = |what: &str| anyhow::anyhow!("{}: {what}", path.display());
    if b.len() < 10 || &b[..6] != b"\x93NUMPY" {
        return Err(bad("not a .npy file"));
    }
    let (hlen, start) = match b[6] {
        1 => (u16::from_le_bytes([b[8], b[9]]) as usize, 10),
        2 | 3 if b.len() >= 12 => (u32::from_le_bytes([b[8], b[9], b[10], b[11]]) as usize, 12),
        v => bail!("{}: unsupported .npy version {v}", path.display()),
    };
    let header = b
        .get(start..start + hlen)
        .and_then(|h| std::str::from_utf8(h).ok())
        .ok_or_else(|| bad("truncated header"))?;
    if !header.contains("'descr': '<f4'") || !header.contains("'fortran_order': False") {
        return Err(bad("not a little-endian float32 array in C order"));
    }
    let shape_txt = header
        .split("'shape': (")
        .nth(1)
        .and_then(|s| s.split(')').next())
        .ok_or_else(|| bad("no shape in the header"))?;
    let shape = shape_txt
        .split(',')
        .map(str::trim)
        .filter(|s| !s.is_empty())
        .map(|s| s.parse::<usize>().map_err(|_| bad("bad shape")))
        .collect::<anyhow::Result<Vec<usize>>>()?;
    let body = &b[start + hlen..];
    let n: usize = shape.iter().product();
    if body.len() != n * 4 {
        bail!(
            "{}: shape {shape:?} needs {} bytes of data, the file has {}",
            path.display(),
            n * 4,
            body.len()
        );
    }
    Ok((
        shape,
        body.chunks_exact(4)
            .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]))
            .collect(),
    ))
}
