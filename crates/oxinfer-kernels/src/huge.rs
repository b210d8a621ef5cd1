//! Byte buffers for weights that are streamed every decode step, backed by transparent huge
//! pages where the OS offers them.
//!
//! A decode step reads every weight byte once. On 4 KiB pages that is one TLB miss (a page
//! walk) per 4 KiB, which the hardware prefetchers cannot hide and which costs a measurable share
//! of the bandwidth; on 2 MiB pages it is one per 2 MiB. Linux hands out huge pages for
//! anonymous memory only where asked (`transparent_hugepage=madvise`, a common default), so a
//! [`HugeBytes`] of at least [`HUGE_MIN`] bytes is an anonymous mapping advised with
//! `MADV_HUGEPAGE` before its first touch. Smaller buffers, other platforms and a refused
//! mapping fall back to a plain `Vec<u8>`: the advice is a speed hint, never needed for
//! correctness.

use std::ops::{Deref, DerefMut};

/// Buffers from this size on are mapped with the huge-page advice (smaller ones would not hold
/// a single aligned 2 MiB page).
pub const HUGE_MIN: usize = 4 << 20;

/// A zero-initialized, fixed-length byte buffer (see the module doc).
pub struct HugeBytes {
    inner: Inner,
}

enum Inner {
    Vec(Vec<u8>),
    #[cfg(target_os = "linux")]
    Map(memmap2::MmapMut),
}

impl HugeBytes {
    /// `len` zero bytes, on huge pages where possible.
    pub fn zeroed(len: usize) -> Self {
        #[cfg(target_os = "linux")]
        if len >= HUGE_MIN && crate::dispatch::huge_pages_enabled() {
            if let Ok(map) = memmap2::MmapOptions::new().len(len).map_anon() {
                // Advice only: a kernel without transparent huge pages refuses it, and the
                // mapping then works on ordinary pages.
                let _ = map.advise(memmap2::Advice::HugePage);
                return Self {
                    inner: Inner::Map(map),
                };
            }
        }
        Self {
            inner: Inner::Vec(vec![0u8; len]),
        }
    }

    /// A copy of `bytes`, on huge pages where possible.
    pub fn copy_of(bytes: &[u8]) -> Self {
        let mut b = Self::zeroed(bytes.len());
        b.copy_from_slice(bytes);
        b
    }

    /// Whether the buffer is a mapping advised for huge pages (not a plain allocation).
    pub fn is_mapped(&self) -> bool {
        !matches!(self.inner, Inner::Vec(_))
    }
}

impl Deref for HugeBytes {
    type Target = [u8];
    fn deref(&self) -> &[u8] {
        match &self.inner {
            Inner::Vec(v) => v,
            #[cfg(target_os = "linux")]
            Inner::Map(m) => m,
        }
    }
}

impl DerefMut for HugeBytes {
    fn deref_mut(&mut self) -> &mut [u8] {
        match &mut self.inner {
            Inner::Vec(v) => v,
            #[cfg(target_os = "linux")]
            Inner::Map(m) => m,
        }
    }
}

impl Clone for HugeBytes {
    fn clone(&self) -> Self {
        Self::copy_of(self)
    }
}

impl std::fmt::Debug for HugeBytes {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "HugeBytes({} bytes{})",
            self.len(),
            if self.is_mapped() { ", mapped" } else { "" }
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn zeroed_writable_and_cloned() {
        for len in [0usize, 1, 4095, HUGE_MIN - 1, HUGE_MIN, HUGE_MIN + 12345] {
            let mut b = HugeBytes::zeroed(len);
            assert_eq!(b.len(), len);
            assert!(b.iter().all(|&x| x == 0), "len {len}");
            for (i, x) in b.iter_mut().enumerate() {
                *x = (i * 31 % 251) as u8;
            }
            let c = b.clone();
            assert_eq!(&c[..], &b[..]);
            #[cfg(target_os = "linux")]
            if len >= HUGE_MIN && crate::dispatch::huge_pages_enabled() {
                assert!(b.is_mapped(), "len {len}");
            }
            if len < HUGE_MIN {
                assert!(!b.is_mapped());
            }
        }
    }
}
