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
