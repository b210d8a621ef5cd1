//! The device side of a [`super::KvCache`]: a backend that runs whole plans keeps each
//! sequence's keys and values where its kernels read them, in a mirror attached to the cache
//! ([`super::KvCache::set_device`]).
//!
//! Ownership rule (also in [`crate::backend::plan_run`]): positions `0 .. len()` of a cache are
//! stored on the host (`0 .. host_len()`), in the mirror (`0 .. DeviceKv::len()`), or both, and
//! at least one of the two holds all of them. A device pass appends to the mirror only; a CPU
//! pass first copies the rows only the mirror holds down to the host
//! ([`super::KvCache::sync_host`]) and then appends to the host only; a device pass after a CPU
//! pass first copies up the rows only the host holds. Rewinding trims both.

use std::any::Any;
use std::fmt::Debug;

/// Keys and values of one sequence held by a backend, per layer in position order (absolute
/// positions: position `p` of a layer is its row `p`, also for sliding-window layers).
pub trait DeviceKv: Send + Sync + Debug {
    /// Positions stored (`0 .. len()` of every layer the backend writes).
    fn len(&self) -> usize;

    /// Whether no position is stored.
    fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Forgets positions at or after `len` (no-op when fewer are stored).
    fn truncate(&mut self, len: usize);

    /// Layer `layer`'s keys and values of positions `from .. to` (`[to − from, row]` each),
    /// copied to the host.
    ///
    /// # Errors
    /// The device failed (the message says how).
    fn read(&self, layer: usize, from: usize, to: usize) -> Result<(Vec<f32>, Vec<f32>), String>;

    /// The backend's concrete type, to downcast.
    fn as_any_mut(&mut self) -> &mut dyn Any;
}

/// The bookkeeping every backend's [`DeviceKv`] mirror shares: its geometry, the rows
/// allocated per layer and the positions stored, with one growth rule and one bounds check for
/// reads. The backend owns the buffers; positions are absolute (row `p` of a layer holds
/// position `p`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MirrorRows {
    /// Layers mirrored.
    pub layers: usize,
    /// f32 values per position of one layer's keys (and of its values).
    pub kv_row: usize,
    /// Positions the cache may ever hold (the host cache's capacity).
    pub capacity: usize,
    /// Rows allocated per layer (0 before the first allocation).
    pub cap: usize,
    /// Positions stored (`0 .. len` of every layer).
    pub len: usize,
}

impl MirrorRows {
    /// Rows allocated per layer at the first allocation (unless fewer are ever possible).
    pub const FIRST_CAP: usize = 256;

    /// An empty mirror's bookkeeping: `layers` layers of rows of `kv_row` f32, at most
    /// `capacity` positions, nothing allocated.
    pub fn new(layers: usize, kv_row: usize, capacity: usize) -> Self {
        MirrorRows {
            layers,
            kv_row,
            capacity,
            cap: 0,
            len: 0,
        }
    }

    /// Whether the mirror has this geometry.
    pub fn fits(&self, layers: usize, kv_row: usize) -> bool {
        self.layers == layers && self.kv_row == kv_row
    }

    /// The rows per layer to allocate so that `rows` positions fit: `None` when the current
    /// allocation already holds them, else doubling (at least [`Self::FIRST_CAP`]) and capped at
    /// the capacity (or at `rows` where a caller asks for more).
    pub fn grown_cap(&self, rows: usize) -> Option<usize> {
        (rows > self.cap).then(|| {
            rows.max(2 * self.cap)
                .max(Self::FIRST_CAP)
                .min(self.capacity.max(rows))
        })
    }

    /// Forgets positions at or after `len` (no-op when fewer are stored).
    pub fn truncate(&mut self, len: usize) {
        self.len = self.len.min(len);
    }

    /// Checks a read of layer `layer`'s positions `from .. to` and returns the f32 values each
    /// of its keys and values takes (`(to − from) · kv_row`).
    ///
    /// # Errors
    /// The layer or a position is not stored (the message names the rows and what is held).
    pub fn read_len(&self, layer: usize, from: usize, to: usize) -> Result<usize, String> {
        if layer >= self.layers || from > to || to > self.len {
            return Err(format!(
                "rows {from}..{to} of layer {layer}: the device KV cache holds {} rows of {} layers",
                self.len, self.layers
            ));
        }
        Ok((to - from) * self.kv_row)
    }
}

#[cfg(test)]
mod tests {
    use super::MirrorRows;

    #[test]
    fn mirror_rows_grow_by_doubling_up_to_the_capacity() {
        let mut m = MirrorRows::new(2, 8, 1000);
        assert_eq!(m.grown_cap(1), Some(MirrorRows::FIRST_CAP));
        m.cap = 256;
        assert_eq!(m.grown_cap(256), None);
        assert_eq!(m.grown_cap(257), Some(512));
        m.cap = 512;
        assert_eq!(m.grown_cap(600), Some(1000));
        // A caller asking past the capacity gets what it asked for (the host cache errs first).
        assert_eq!(m.grown_cap(1200), Some(1200));
        assert_eq!(MirrorRows::new(1, 1, 10).grown_cap(3), Some(10));
    }

    #[test]
    fn mirror_rows_reads_only_stored_positions() {
        let mut m = MirrorRows::new(2, 8, 100);
        m.len = 10;
        assert_eq!(m.read_len(1, 2, 10), Ok(64));
        assert_eq!(m.read_len(0, 4, 4), Ok(0));
        assert!(m.read_len(2, 0, 1).is_err());
        assert!(m.read_len(0, 5, 4).is_err());
        let e = m.read_len(0, 0, 11).unwrap_err();
        assert!(e.contains("holds 10 rows of 2 layers"), "{e}");
        m.truncate(4);
        assert!(m.read_len(0, 0, 5).is_err());
        m.truncate(9);
        assert_eq!(m.len, 4);
    }
}
