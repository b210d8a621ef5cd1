//! Buffers for weights that are streamed every decode step (bytes) or kept for every product
//! (f32 panels), backed by transparent huge pages where the OS offers them.
//!
//! A decode step reads every weight byte once. On 4 KiB pages that is one TLB miss (a page
//! walk) per 4 KiB, which the hardware prefetchers cannot hide and which costs a measurable share
//! of the bandwidth; on 2 MiB pages it is one per 2 MiB. Linux hands out huge pages for
//! anonymous memory only where asked (`transparent_hugepage=madvise`, a common default), so a
//! [`HugeBuf`] of at least [`HUGE_MIN`] bytes is an anonymous mapping advised with
//! `MADV_HUGEPAGE` before its first touch. Smaller buffers, other platforms and a refused
//! mapping fall back to a plain `Vec`: the advice is a speed hint, never needed for
//! correctness. [`HugeBuf::zeroed_parts`] carves several buffers out of one such mapping, so
//! that buffers each too small for a huge page (a Winograd kernel's 36 matrices) still get them.

use std::ops::{Deref, DerefMut};

/// Buffers from this size on (in bytes) are mapped with the huge-page advice (smaller ones would
/// not hold a single aligned 2 MiB page).
pub const HUGE_MIN: usize = 4 << 20;

/// Element types a [`HugeBuf`] holds: plain numbers for which all-zero bytes are zero and every
/// bit pattern is a value (so an anonymous mapping's zeroed pages are a valid buffer).
pub trait HugeElem: Copy + Default + 'static + private::Sealed {}
impl HugeElem for u8 {}
impl HugeElem for f32 {}

mod private {
    pub trait Sealed {}
    impl Sealed for u8 {}
    impl Sealed for f32 {}
}

/// A zero-initialized, fixed-length buffer of `T` (see the module doc).
pub struct HugeBuf<T: HugeElem> {
    inner: Inner<T>,
}

/// Bytes: quantized weights and their packed panels.
pub type HugeBytes = HugeBuf<u8>;
/// Floats: f32 weight panels kept for the float GEMM (Stable Diffusion's convolution kernels).
pub type HugeF32 = HugeBuf<f32>;

enum Inner<T> {
    Vec(Vec<T>),
    #[cfg(target_os = "linux")]
    Map(memmap2::MmapMut, usize),
    /// `len` elements from element `start` of a mapping shared with the other buffers of one
    /// [`HugeBuf::zeroed_parts`] call, whose ranges are disjoint.
    #[cfg(target_os = "linux")]
    Part {
        map: std::sync::Arc<memmap2::MmapRaw>,
        start: usize,
        len: usize,
        _elem: std::marker::PhantomData<T>,
    },
}

impl<T: HugeElem> HugeBuf<T> {
    /// `len` zero elements, on huge pages where possible.
    pub fn zeroed(len: usize) -> Self {
        #[cfg(target_os = "linux")]
        {
            let bytes = len * std::mem::size_of::<T>();
            if bytes >= HUGE_MIN && crate::dispatch::huge_pages_enabled() {
                if let Ok(map) = memmap2::MmapOptions::new().len(bytes).map_anon() {
                    // Advice only: a kernel without transparent huge pages refuses it, and the
                    // mapping then works on ordinary pages.
                    let _ = map.advise(memmap2::Advice::HugePage);
                    return Self {
                        inner: Inner::Map(map, len),
                    };
                }
            }
        }
        Self {
            inner: Inner::Vec(vec![T::default(); len]),
        }
    }

    /// Zero buffers of the lengths `lens`, carved one after another from one mapping advised
    /// for huge pages when together they take at least [`HUGE_MIN`] bytes (else each as
    /// [`Self::zeroed`] makes it): many buffers each too small for a huge page share them.
    pub fn zeroed_parts(lens: &[usize]) -> Vec<Self> {
        #[cfg(target_os = "linux")]
        {
            let bytes = lens.iter().sum::<usize>() * std::mem::size_of::<T>();
            if lens.len() > 1 && bytes >= HUGE_MIN && crate::dispatch::huge_pages_enabled() {
                if let Ok(map) = memmap2::MmapOptions::new().len(bytes).map_anon() {
                    // Advice only, as in zeroed.
                    let _ = map.advise(memmap2::Advice::HugePage);
                    let map = std::sync::Arc::new(memmap2::MmapRaw::from(map));
                    let mut start = 0;
                    return lens
                        .iter()
                        .map(|&len| {
                            let part = Inner::Part {
                                map: map.clone(),
                                start,
                                len,
                                _elem: std::marker::PhantomData,
                            };
                            start += len;
                            Self { inner: part }
                        })
                        .collect();
                }
            }
        }
        lens.iter().map(|&len| Self::zeroed(len)).collect()
    }

    /// A copy of `items`, on huge pages where possible.
    pub fn copy_of(items: &[T]) -> Self {
        let mut b = Self::zeroed(items.len());
        b.copy_from_slice(items);
        b
    }

    /// Whether the buffer is a mapping advised for huge pages (not a plain allocation).
    pub fn is_mapped(&self) -> bool {
        !matches!(self.inner, Inner::Vec(_))
    }
}

impl<T: HugeElem> Deref for HugeBuf<T> {
    type Target = [T];
    fn deref(&self) -> &[T] {
        match &self.inner {
            Inner::Vec(v) => v,
            #[cfg(target_os = "linux")]
            // SAFETY: the mapping is page-aligned (so aligned for T), holds len · size_of::<T>()
            // bytes and lives as long as self; every bit pattern is a T (HugeElem).
            Inner::Map(m, len) => unsafe { std::slice::from_raw_parts(m.as_ptr().cast(), *len) },
            #[cfg(target_os = "linux")]
            // SAFETY: the mapping is page-aligned and holds the parts' elements back to back, so
            // elements start .. start + len are in bounds and aligned for T; it lives as long as
            // the Arc in self; every bit pattern is a T. Only this part reaches that range (the
            // parts' ranges are disjoint), and it is written only through &mut self.
            Inner::Part {
                map, start, len, ..
            } => unsafe { std::slice::from_raw_parts(map.as_ptr().cast::<T>().add(*start), *len) },
        }
    }
}

impl<T: HugeElem> DerefMut for HugeBuf<T> {
    fn deref_mut(&mut self) -> &mut [T] {
        match &mut self.inner {
            Inner::Vec(v) => v,
            #[cfg(target_os = "linux")]
            // SAFETY: as in deref, and the mapping is borrowed mutably through self.
            Inner::Map(m, len) => unsafe {
                std::slice::from_raw_parts_mut(m.as_mut_ptr().cast(), *len)
            },
            #[cfg(target_os = "linux")]
            // SAFETY: as in deref; the range is this part's alone (disjoint from every other
            // part of the mapping) and self is borrowed mutably, so the slice is unaliased.
            Inner::Part {
                map, start, len, ..
            } => unsafe {
                std::slice::from_raw_parts_mut(map.as_mut_ptr().cast::<T>().add(*start), *len)
            },
        }
    }
}

impl<T: HugeElem> Clone for HugeBuf<T> {
    fn clone(&self) -> Self {
        Self::copy_of(self)
    }
}

impl<T: HugeElem> std::fmt::Debug for HugeBuf<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "HugeBuf<{}>({} elements{})",
            std::any::type_name::<T>(),
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

    #[test]
    fn parts_are_disjoint_zeroed_and_writable() {
        let n = HUGE_MIN / 4 / 3 + 5;
        for lens in [vec![n, 0, n, n], vec![3, 4], vec![7]] {
            let mut parts = HugeF32::zeroed_parts(&lens);
            assert_eq!(parts.iter().map(|p| p.len()).collect::<Vec<_>>(), lens);
            for (i, p) in parts.iter_mut().enumerate() {
                assert!(p.iter().all(|&x| x == 0.0), "part {i}");
                p.fill(i as f32 + 1.0);
            }
            for (i, p) in parts.iter().enumerate() {
                assert!(
                    p.iter().all(|&x| x == i as f32 + 1.0),
                    "part {i} overwritten"
                );
                assert_eq!(&p.clone()[..], &p[..]);
            }
            #[cfg(target_os = "linux")]
            if lens.len() > 1 && crate::dispatch::huge_pages_enabled() {
                let big = lens.iter().sum::<usize>() * 4 >= HUGE_MIN;
                assert_eq!(parts[0].is_mapped(), big, "{lens:?}");
            }
        }
    }

    #[test]
    fn floats_zeroed_writable_and_cloned() {
        for len in [0usize, 3, HUGE_MIN / 4 - 1, HUGE_MIN / 4 + 777] {
            let mut b = HugeF32::zeroed(len);
            assert_eq!(b.len(), len);
            assert!(b.iter().all(|&x| x == 0.0), "len {len}");
            for (i, x) in b.iter_mut().enumerate() {
                *x = i as f32 * 0.5;
            }
            let c = b.clone();
            assert_eq!(&c[..], &b[..]);
            #[cfg(target_os = "linux")]
            if len * 4 >= HUGE_MIN && crate::dispatch::huge_pages_enabled() {
                assert!(b.is_mapped(), "len {len}");
            }
        }
    }
}
