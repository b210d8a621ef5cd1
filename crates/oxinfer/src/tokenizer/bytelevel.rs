//! GPT-2's byte-to-character table: byte-level BPE vocabularies spell every byte as one printable
//! character (`Ġ` for a space, `Ċ` for a newline).

use std::sync::OnceLock;

/// Character for each byte, as GPT-2's `bytes_to_unicode` defines it.
fn byte_to_char_table() -> &'static [char; 256] {
    static TABLE: OnceLock<[char; 256]> = OnceLock::new();
    TABLE.get_or_init(|| {
        let mut table = ['\0'; 256];
        let mut n = 0u32;
        for b in 0..=255u8 {
            let printable = (b'!'..=b'~').contains(&b) || (0xA1..=0xAC).contains(&b) || b >= 0xAE;
            table[b as usize] = if printable {
                char::from(b)
            } else {
                let c = char::from_u32(256 + n).unwrap_or('\u{FFFD}');
                n += 1;
                c
            };
        }
        table
    })
}

/// The byte a byte-level character stands for, `None` for a character outside the table.
pub(crate) fn char_to_byte(c: char) -> Option<u8> {
    let cp = c as u32;
    if cp < 256 {
        let b = cp as u8;
        let printable = (b'!'..=b'~').contains(&b) || (0xA1..=0xAC).contains(&b) || b >= 0xAE;
        return printable.then_some(b);
    }
    let table = byte_to_char_table();
    table.iter().position(|&t| t == c).map(|i| i as u8)
}

/// The bytes a byte-level token text stands for. Characters outside the table (never seen in a
/// well-formed vocabulary) are kept as their own UTF-8.
pub(crate) fn decode_token(text: &str) -> Vec<u8> {
    let mut out = Vec::with_capacity(text.len());
    for c in text.chars() {
        match char_to_byte(c) {
            Some(b) => out.push(b),
            None => {
                let mut buf = [0u8; 4];
                out.extend_from_slice(c.encode_utf8(&mut buf).as_bytes());
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn table_round_trips() {
        let table = byte_to_char_table();
        for b in 0..=255u8 {
            assert_eq!(char_to_byte(table[b as usize]), Some(b));
        }
        assert_eq!(table[b' ' as usize], 'Ġ');
        assert_eq!(table[b'\n' as usize], 'Ċ');
        assert_eq!(decode_token("Ġworld"), b" world");
    }
}
