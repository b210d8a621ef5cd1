//! A model file received in pieces: a browser reads a `File` by slices or a `fetch` response
//! as a stream, so the whole file never has to sit in one JS `ArrayBuffer` (nor twice in
//! memory: each piece is copied into the module's memory and dropped on the JS side).

use crate::error::{Result, WebError};

/// The bytes of one file, assembled piece by piece up to a size announced in advance.
#[derive(Debug)]
pub struct ChunkedFile {
    name: String,
    /// The announced size in bytes; `None` when the source did not tell (a stream without a
    /// `Content-Length`): the buffer then grows as pieces arrive.
    expected: Option<usize>,
    bytes: Vec<u8>,
}

impl ChunkedFile {
    /// An empty file called `name` (used in messages) of `expected_size` bytes when known; its
    /// memory is reserved at once, so a file too large for the module fails here, with the
    /// size, rather than half-way.
    pub fn new(name: &str, expected_size: Option<u64>) -> Result<Self> {
        let expected = match expected_size {
            Some(n) => Some(usize::try_from(n).map_err(|_| too_large(name, n))?),
            None => None,
        };
        let mut bytes = Vec::new();
        if let Some(n) = expected {
            bytes
                .try_reserve_exact(n)
                .map_err(|_| too_large(name, n as u64))?;
        }
        Ok(ChunkedFile {
            name: name.to_string(),
            expected,
            bytes,
        })
    }

    /// Appends the next piece.
    ///
    /// # Errors
    /// The pieces exceed the announced size, or memory runs out.
    pub fn push(&mut self, piece: &[u8]) -> Result<()> {
        let total = self.bytes.len() as u64 + piece.len() as u64;
        if let Some(n) = self.expected {
            if total > n as u64 {
                return Err(WebError::request(format!(
                    "{}: received {total} bytes, more than the announced {n}",
                    self.name
                )));
            }
        }
        self.bytes
            .try_reserve(piece.len())
            .map_err(|_| too_large(&self.name, total))?;
        self.bytes.extend_from_slice(piece);
        Ok(())
    }

    /// Bytes received so far.
    pub fn received(&self) -> usize {
        self.bytes.len()
    }

    /// The file's name and its bytes.
    ///
    /// # Errors
    /// Fewer bytes arrived than were announced (an interrupted download).
    pub fn finish(self) -> Result<(String, Vec<u8>)> {
        if let Some(n) = self.expected {
            if self.bytes.len() != n {
                return Err(WebError::request(format!(
                    "{}: received {} of the announced {n} bytes (the transfer was cut short)",
                    self.name,
                    self.bytes.len()
                )));
            }
        }
        Ok((self.name, self.bytes))
    }
}

fn too_large(name: &str, n: u64) -> WebError {
    WebError::request(format!(
        "{name}: {n} bytes do not fit in this WebAssembly module's memory (at most 4 GiB, \
         shared with the KV cache)"
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pieces_assemble_in_order() {
        let mut f = ChunkedFile::new("m.gguf", Some(5)).unwrap();
        f.push(b"GG").unwrap();
        f.push(b"").unwrap();
        f.push(b"UF!").unwrap();
        assert_eq!(f.received(), 5);
        assert_eq!(
            f.finish().unwrap(),
            ("m.gguf".to_string(), b"GGUF!".to_vec())
        );
    }

    #[test]
    fn unknown_size_grows() {
        let mut f = ChunkedFile::new("m.gguf", None).unwrap();
        f.push(b"abc").unwrap();
        f.push(b"de").unwrap();
        assert_eq!(f.finish().unwrap().1, b"abcde");
    }

    #[test]
    fn short_and_long_transfers_are_errors_naming_the_file() {
        let mut f = ChunkedFile::new("m.gguf", Some(4)).unwrap();
        f.push(b"GG").unwrap();
        let e = f.finish().unwrap_err().to_string();
        assert!(
            e.contains("m.gguf") && e.contains("2 of the announced 4"),
            "{e}"
        );
        let mut f = ChunkedFile::new("m.gguf", Some(2)).unwrap();
        let e = f.push(b"GGU").unwrap_err().to_string();
        assert!(
            e.contains("m.gguf") && e.contains("more than the announced 2"),
            "{e}"
        );
    }

    #[test]
    fn an_impossible_size_fails_at_once() {
        let e = ChunkedFile::new("big.gguf", Some(u64::MAX)).unwrap_err();
        assert!(e.to_string().contains("big.gguf"), "{e}");
    }
}
