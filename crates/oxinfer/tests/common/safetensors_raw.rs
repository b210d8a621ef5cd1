//! Reading and writing safetensors files byte for byte, to make variants of a fixture (a tensor
//! reshaped, tensors added or left out) inside a test.

use serde_json::{json, Map, Value};
use std::path::Path;

/// One tensor: name, dtype (`F16`, `F32`, ...), shape, raw little-endian bytes.
pub type RawTensor = (String, String, Vec<usize>, Vec<u8>);

/// Every tensor of the safetensors file `path`, in header order (metadata dropped).
pub fn read_raw_tensors(path: &Path) -> Vec<RawTensor> {
    let bytes = std::fs::read(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    let n = u64::from_le_bytes(bytes[..8].try_into().unwrap()) as usize;
    let header: Map<String, Value> = serde_json::from_slice(&bytes[8..8 + n]).unwrap();
    let data = &bytes[8 + n..];
    header
        .into_iter()
        .filter(|(k, _)| k != "__metadata__")
        .map(|(k, v)| {
            let off: Vec<usize> = serde_json::from_value(v["data_offsets"].clone()).unwrap();
            let shape: Vec<usize> = serde_json::from_value(v["shape"].clone()).unwrap();
            let dtype = v["dtype"].as_str().unwrap().to_string();
            (k, dtype, shape, data[off[0]..off[1]].to_vec())
        })
        .collect()
}

/// Writes `tensors` as the safetensors file `path` (header padded to 8 bytes).
pub fn write_raw_tensors(path: &Path, tensors: &[RawTensor]) {
    let mut header = Map::new();
    let mut data = Vec::new();
    for (name, dtype, shape, bytes) in tensors {
        let start = data.len();
        data.extend_from_slice(bytes);
        header.insert(
            name.clone(),
            json!({"dtype": dtype, "shape": shape, "data_offsets": [start, data.len()]}),
        );
    }
    let mut h = serde_json::to_vec(&header).unwrap();
    while !h.len().is_multiple_of(8) {
        h.push(b' ');
    }
    let mut out = (h.len() as u64).to_le_bytes().to_vec();
    out.extend_from_slice(&h);
    out.extend_from_slice(&data);
    std::fs::write(path, out).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
}
