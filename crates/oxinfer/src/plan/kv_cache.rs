//! Key/value cache of a decoder: per layer, the rotated keys and the values of the positions
//! its queries can still see, and, for recurrent layers (Gated DeltaNet), their fixed-size
//! state. Global layers keep every position. Sliding-window layers keep a ring buffer of
//! exactly their window (position `p` in row `p % ring`), widened only while a chunk longer
//! than one token is being prefilled (`window − 1 + chunk` rows, what its first query still
//! needs) and narrowed back to the window once the chunk is stored.
//!
//! A backend that runs whole plans may keep the newest positions in a device mirror instead
//! ([`DeviceKv`], [`KvCache::set_device`]); the host layers then lag behind [`KvCache::len`]
//! until [`KvCache::sync_host`] copies the missing rows down (the ownership rule is in
//! [`super::kv_mirror`]).
//!
//! Keys and values are stored in the cache's [`KvTypes`] ([`KvCache::with_types`]; f32 unless
//! asked): a row of another type is converted as it is appended (a block type's rows rotated
//! first, [`KvCache::store`]), and the attention kernels read it in place ([`super::kv_rows`]).
//! A device mirror holds the host's type when its backend can
//! ([`Backend::holds_kv`](crate::backend::Backend::holds_kv)); otherwise the backend declines
//! the cache and the CPU runs it. Recurrent state is always f32.

use super::kv_mirror::DeviceKv;
use super::kv_rows::{KvRows, KvTypes};
use oxinfer_kernels::attention::KvView;

/// Keys and values of one attention layer, each `[rows, kv_heads * head_dim]` row-major in
/// the cache's storage types. Global layers: row `i` holds position `i`. Sliding layers: a ring of [`LayerCache::ring`]
/// rows, position `p` in row `p % ring` (rows fill in order until the ring first wraps).
#[derive(Clone, Debug, Default)]
pub struct LayerCache {
    pub k: KvRows,
    pub v: KvRows,
    /// Oldest position still stored (0 until a sliding layer's ring first overwrites a row).
    pub start: usize,
    /// The layer's sliding window (a query at q sees keys k with q − k < window), if any.
    pub window: Option<usize>,
    /// Width of this layer's rows when it differs from the cache-wide one (0: the cache-wide
    /// width), for models whose layers have different head dims or kv head counts.
    pub width: usize,
    /// Rows of the ring for a sliding layer (0: not a ring; row `i` is position `i`).
    pub ring: usize,
}

impl LayerCache {
    /// Whether the layer can serve a query at position `pos` (it still holds every key that
    /// query sees).
    fn serves(&self, pos: usize) -> bool {
        match self.window {
            Some(w) => self.start <= (pos + 1).saturating_sub(w),
            None => self.start == 0,
        }
    }

    /// Re-lays a sliding layer's ring to `ring` rows, keeping the stored positions
    /// `keep_from .. len` (at least `start`).
    fn relayout(&mut self, ring: usize, len: usize, keep_from: usize, row: usize) {
        let keep_from = keep_from.max(self.start);
        if ring == self.ring {
            return;
        }
        let old = self.ring;
        let at = |p: usize| if old == 0 { p } else { p % old };
        let rows = len.min(ring);
        let mut k = KvRows::zeroed(self.k.ty(), rows, row);
        let mut v = KvRows::zeroed(self.v.ty(), rows, row);
        for p in keep_from..len {
            k.copy_row(p % ring, &self.k, at(p));
            v.copy_row(p % ring, &self.v, at(p));
        }
        self.k = k;
        self.v = v;
        self.ring = ring;
        self.start = keep_from;
    }

    /// Rows of keys (or values) stored.
    pub fn stored_rows(&self, row: usize) -> usize {
        let _ = row;
        self.k.rows()
    }
}

/// Fixed-size state of one recurrent layer: the last inputs of its causal convolution and its
/// recurrent matrix state. Both are empty for attention layers.
#[derive(Clone, Debug, Default)]
pub struct RecurrentState {
    pub conv: Vec<f32>,
    pub state: Vec<f32>,
}

/// The KV cache of a whole model for one sequence.
#[derive(Debug)]
pub struct KvCache {
    /// One entry per layer: the rows the host holds (positions before [`KvCache::host_len`]).
    pub layers: Vec<LayerCache>,
    /// Positions stored (on the host, in the device mirror, or both).
    len: usize,
    /// Positions stored in `layers` (`len` unless a device pass ran since the last sync).
    host_len: usize,
    /// The backend's copy of the keys/values, if a backend ran a pass over this cache.
    device: Option<Box<dyn DeviceKv>>,
    /// Width of a cached row (`kv_heads * head_dim`).
    row: usize,
    /// Positions the cache may hold.
    capacity: usize,
    /// Per layer, the state of recurrent layers (empty when the model has none). It cannot be
    /// rewound: [`KvCache::truncate`] to an earlier position then starts over from 0.
    pub recurrent: Vec<RecurrentState>,
    /// Extra rows sliding layers keep beyond their window, so that the last `rewind`
    /// positions can be dropped again ([`KvCache::keep_rewind`]).
    rewind: usize,
    /// Storage types of the keys and values.
    types: KvTypes,
}

impl KvCache {
    /// An empty cache for `n_layers` layers of width `row` holding at most `capacity` positions.
    pub fn new(n_layers: usize, row: usize, capacity: usize) -> Self {
        KvCache {
            layers: vec![LayerCache::default(); n_layers],
            len: 0,
            host_len: 0,
            device: None,
            row,
            capacity,
            recurrent: Vec::new(),
            rewind: 0,
            types: KvTypes::default(),
        }
    }

    /// Stores keys and values in `types` from now on (an empty cache; f32 by default).
    ///
    /// # Panics
    /// When the cache already holds positions.
    pub fn with_types(mut self, types: KvTypes) -> Self {
        assert!(
            self.is_empty(),
            "KV cache types are set before the first position"
        );
        for l in &mut self.layers {
            l.k = KvRows::new(types.k);
            l.v = KvRows::new(types.v);
        }
        self.types = types;
        self
    }

    /// Storage types of the keys and values.
    pub fn types(&self) -> KvTypes {
        self.types
    }

    /// Whether keys and values are stored as f32 (the only type device mirrors hold).
    pub fn is_f32(&self) -> bool {
        self.types.is_f32()
    }

    /// Bytes the host layers' keys and values take now (they grow with the positions stored,
    /// up to a sliding layer's ring).
    pub fn bytes_in_use(&self) -> usize {
        self.layers.iter().map(|l| l.k.bytes() + l.v.bytes()).sum()
    }

    /// Lets the cache drop up to its last `n` positions ([`KvCache::truncate`]) without
    /// emptying (speculative decoding rolls back rejected draft tokens): sliding layers keep
    /// `n` rows beyond their window from now on (the most asked for so far). Recurrent state
    /// still cannot rewind.
    pub fn keep_rewind(&mut self, n: usize) {
        self.rewind = self.rewind.max(n);
    }

    /// Gives each layer its sliding window (`None`: keep every position); windowed layers then
    /// hold a ring of their window's rows instead of the whole context.
    pub fn with_windows(mut self, windows: &[Option<usize>]) -> Self {
        for (l, &w) in self.layers.iter_mut().zip(windows) {
            l.window = w.filter(|&w| w > 0);
            l.ring = l.window.unwrap_or(0);
        }
        self
    }

    /// Gives each layer its own row width (`kv_heads * head_dim` of that layer; 0 keeps the
    /// cache-wide width). A layer that reads another layer's keys (KV sharing) is never
    /// appended to and stays empty.
    pub fn with_row_widths(mut self, widths: &[usize]) -> Self {
        for (l, &w) in self.layers.iter_mut().zip(widths) {
            l.width = w;
        }
        self
    }

    /// Row width of layer `layer`.
    pub fn row_width(&self, layer: usize) -> usize {
        match self.layers[layer].width {
            0 => self.row,
            w => w,
        }
    }

    /// Adds zeroed recurrent state per layer (`conv` and `state` lengths per layer; zero for
    /// attention layers).
    pub fn with_recurrent(mut self, sizes: &[(usize, usize)]) -> Self {
        self.recurrent = sizes
            .iter()
            .map(|&(c, s)| RecurrentState {
                conv: vec![0.0; c],
                state: vec![0.0; s],
            })
            .collect();
        self
    }

    /// Positions stored.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether nothing is stored.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Positions the cache may hold.
    pub fn capacity(&self) -> usize {
        self.capacity
    }

    /// Appends `t` rows of keys and values to `layer` (positions `len() .. len() + t`). Call for
    /// every layer, then [`KvCache::advance`] once. A sliding layer's ring widens to
    /// `window − 1 + t` rows first when `t` new rows would overwrite keys the first new query
    /// still sees (to `window + n` rows at least after [`KvCache::keep_rewind`]`(n)`).
    pub fn append(&mut self, layer: usize, k: &[f32], v: &[f32]) {
        let (pos0, row, rewind) = (self.host_len, self.row_width(layer), self.rewind);
        let c = &mut self.layers[layer];
        debug_assert_eq!(k.len() % row.max(1), 0);
        let t = k.len() / row.max(1);
        let Some(w) = c.window else {
            c.k.push(k, row);
            c.v.push(v, row);
            return;
        };
        let need = (w - 1 + t).max(w + rewind);
        if c.ring < need && pos0 + t > c.ring {
            c.relayout(need, pos0, (pos0 + 1).saturating_sub(w), row);
        }
        for i in 0..t {
            let p = pos0 + i;
            let r = p % c.ring;
            let src = i * row..(i + 1) * row;
            if r == c.k.rows() {
                c.k.push(&k[src.clone()], row);
                c.v.push(&v[src], row);
            } else {
                c.k.write(r, &k[src.clone()], row);
                c.v.write(r, &v[src], row);
            }
        }
        c.start = c.start.max((pos0 + t).saturating_sub(c.ring));
    }

    /// [`KvCache::append`] of the keys and values of heads of `head_dim` values as this cache
    /// stores them: rows of a block type rotated first where
    /// [`oxinfer_kernels::attention::kv_rotation`] says so (the attention over them rotates
    /// its queries and output to match: [`crate::nn::attention_cached`]).
    pub fn store(&mut self, layer: usize, k: &[f32], v: &[f32], head_dim: usize) {
        use oxinfer_kernels::attention::kv_rotation::rotated;
        use oxinfer_kernels::attention::{kv_rotation, KvRole};
        let k = rotated(k, kv_rotation(self.types.k, head_dim, KvRole::Key));
        let v = rotated(v, kv_rotation(self.types.v, head_dim, KvRole::Value));
        self.append(layer, &k, &v);
    }

    /// Records that `t` positions were stored for every layer: appended to the host layers
    /// ([`KvCache::append`]), or kept in the device mirror by a backend that already counted
    /// them (its length is then `len() + t`). Sliding layers' rings narrow back to their window.
    pub fn advance(&mut self, t: usize) {
        let on_device = self
            .device
            .as_ref()
            .is_some_and(|d| d.len() == self.len + t);
        debug_assert!(on_device || self.host_len == self.len);
        self.len += t;
        if !on_device {
            self.advance_host(t);
        }
    }

    /// Records that `t` positions were appended to the host layers.
    fn advance_host(&mut self, t: usize) {
        self.host_len += t;
        for i in 0..self.layers.len() {
            let row = self.row_width(i);
            let len = self.host_len;
            let l = &mut self.layers[i];
            if let Some(w) = l.window {
                let w = w + self.rewind;
                if l.ring > w && !l.k.is_empty() {
                    l.relayout(w, len, len.saturating_sub(w), row);
                } else if l.k.is_empty() {
                    l.ring = w;
                }
            }
        }
        debug_assert!((0..self.layers.len()).all(|i| {
            let l = &self.layers[i];
            let rows = if l.ring > 0 {
                self.host_len.min(l.ring)
            } else {
                self.host_len
            };
            l.k.len() == rows * self.row_width(i) || l.k.is_empty()
        }));
    }

    /// Drops every position at or after `len` (to rewind to a shared prefix), on the host and
    /// in the device mirror. A cache with recurrent state, or a windowed layer that already
    /// dropped rows a query at `len` would see, cannot rewind part-way: it empties instead;
    /// check [`KvCache::len`].
    pub fn truncate(&mut self, len: usize) {
        if len >= self.len {
            return;
        }
        let host_cut = self.host_len > len;
        let stuck = host_cut && !self.layers.iter().all(|l| l.serves(len));
        if len == 0 || !self.recurrent.is_empty() || stuck {
            self.reset();
            return;
        }
        if host_cut {
            for l in &mut self.layers {
                // Rows of a ring that has wrapped stay (they are overwritten before being read).
                if l.ring == 0 || self.host_len <= l.ring {
                    l.k.truncate_rows(len);
                    l.v.truncate_rows(len);
                }
            }
            self.host_len = len;
        }
        if let Some(d) = self.device.as_mut() {
            d.truncate(len);
        }
        self.len = len;
    }

    /// Empties every layer and recurrent state unconditionally (also rows appended since the
    /// last [`KvCache::advance`]).
    pub fn reset(&mut self) {
        for l in &mut self.layers {
            l.k.clear();
            l.v.clear();
            l.start = 0;
            l.ring = l.window.unwrap_or(0);
        }
        self.clear_recurrent();
        if let Some(d) = self.device.as_mut() {
            d.truncate(0);
        }
        self.len = 0;
        self.host_len = 0;
    }

    /// Zeroes every recurrent (convolution and DeltaNet) state.
    fn clear_recurrent(&mut self) {
        for r in &mut self.recurrent {
            r.conv.fill(0.0);
            r.state.fill(0.0);
        }
    }

    /// Empties the cache, keeping its allocation.
    pub fn clear(&mut self) {
        self.truncate(0);
    }

    /// Positions stored in the host layers (the rest of [`KvCache::len`] is only in the
    /// device mirror).
    pub fn host_len(&self) -> usize {
        self.host_len
    }

    /// The device mirror, if a backend attached one.
    pub fn device(&self) -> Option<&dyn DeviceKv> {
        self.device.as_deref()
    }

    /// The device mirror, mutably (a backend appends to it during its pass).
    pub fn device_mut(&mut self) -> Option<&mut (dyn DeviceKv + 'static)> {
        self.device.as_deref_mut()
    }

    /// Attaches a backend's mirror (replacing any other), after copying down what only the
    /// old one held.
    ///
    /// # Errors
    /// Reading the old mirror failed.
    pub fn set_device(&mut self, d: Box<dyn DeviceKv>) -> Result<(), String> {
        self.sync_host()?;
        self.device = Some(d);
        Ok(())
    }

    /// Copies the rows only the device mirror holds to the host layers, so that the host
    /// holds every position (a no-op when it already does). Call before reading `layers` or
    /// [`KvCache::past`] after a device pass.
    ///
    /// # Errors
    /// Reading the mirror failed; the host then still lags behind.
    pub fn sync_host(&mut self) -> Result<(), String> {
        let (from, to) = (self.host_len, self.len);
        if from >= to {
            return Ok(());
        }
        let Some(d) = self.device.as_deref() else {
            return Err(format!(
                "positions {from}..{to} of the KV cache are on no device"
            ));
        };
        let mut rows = Vec::with_capacity(self.layers.len());
        for layer in 0..self.layers.len() {
            rows.push(d.read(layer, from, to)?);
        }
        for (layer, (k, v)) in rows.iter().enumerate() {
            self.append(layer, k, v);
        }
        self.advance_host(to - from);
        Ok(())
    }

    /// Layer `layer`'s stored rows in position order, in the cache's storage types: the whole
    /// buffer, or, for a ring that has wrapped, its oldest rows (from `len % ring`) then the
    /// rest. Reads the host rows (positions before [`KvCache::host_len`]).
    pub fn past_views(&self, layer: usize) -> PastViews<'_> {
        let l = &self.layers[layer];
        let (k, v) = (l.k.view(), l.v.view());
        if l.ring == 0 || self.host_len <= l.ring {
            let (k_none, _) = k.split_at_row(0, 0);
            let (v_none, _) = v.split_at_row(0, 0);
            return PastViews {
                k: [k, k_none],
                v: [v, v_none],
            };
        }
        let (row, at) = (self.row_width(layer), self.host_len % l.ring);
        let ((k0, k1), (v0, v1)) = (k.split_at_row(at, row), v.split_at_row(at, row));
        PastViews {
            k: [k1, k0],
            v: [v1, v0],
        }
    }

    /// [`KvCache::past_views`] of an f32 cache, as f32 values.
    ///
    /// # Panics
    /// When the cache stores another type than f32.
    pub fn past<'a>(&'a self, layer: usize) -> Past<'a> {
        let p = self.past_views(layer);
        let types = self.types;
        let f32s = |v: KvView<'a>| -> &'a [f32] {
            v.as_f32()
                .unwrap_or_else(|| panic!("past() reads f32 caches only; this one stores {types}"))
        };
        Past {
            k: p.k.map(f32s),
            v: p.v.map(f32s),
        }
    }
}

/// Copies what the host holds (no device mirror): call [`KvCache::sync_host`] first to
/// include positions only the mirror holds, else the copy ends at [`KvCache::host_len`].
impl Clone for KvCache {
    fn clone(&self) -> Self {
        KvCache {
            layers: self.layers.clone(),
            len: self.host_len,
            host_len: self.host_len,
            device: None,
            row: self.row,
            capacity: self.capacity,
            recurrent: self.recurrent.clone(),
            rewind: self.rewind,
            types: self.types,
        }
    }
}

/// One layer's cached keys and values before a pass, in position order: `k[0]` then `k[1]`
/// (two pieces so a wrapped ring buffer needs no copy), `[n, row]` together. They are the `n`
/// positions just before the first new token (`n` may be 0; a sliding layer may hold only its
/// window). Attention only looks at position differences, so a backend may treat them as
/// positions `0 .. n` and the new tokens as `n ..` (the keys were rotated at their true
/// positions when stored).
#[derive(Clone, Copy, Default)]
pub struct Past<'a> {
    pub k: [&'a [f32]; 2],
    pub v: [&'a [f32]; 2],
}

impl Past<'_> {
    /// Rows stored, for rows of `row` values.
    pub fn rows(&self, row: usize) -> usize {
        (self.k[0].len() + self.k[1].len()) / row.max(1)
    }
}

/// [`Past`] in the cache's storage types: `k[0]` then `k[1]` in position order.
#[derive(Clone, Copy)]
pub struct PastViews<'a> {
    pub k: [KvView<'a>; 2],
    pub v: [KvView<'a>; 2],
}

impl PastViews<'_> {
    /// Rows stored, for rows of `row` values.
    pub fn rows(&self, row: usize) -> usize {
        self.k[0].rows(row) + self.k[1].rows(row)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use oxinfer_kernels::attention::KvView;

    /// The keys a windowed layer holds for a query at `pos`, in position order (read through
    /// the ring the way attention does).
    fn visible(c: &KvCache, layer: usize, pos: usize) -> Vec<f32> {
        let l = &c.layers[layer];
        let k = l.k.as_f32().unwrap();
        let first = (pos + 1).saturating_sub(l.window.unwrap());
        (first..=pos)
            .map(|p| k[if l.ring == 0 { p } else { p % l.ring }])
            .collect()
    }

    /// A windowed layer holds exactly its window (fewer rows before it fills), token by token
    /// and in chunks longer than the window; every position a query sees reads back right;
    /// a one-token rewind works, a deeper one empties the cache.
    #[test]
    fn windowed_layer_is_a_ring_of_its_window() {
        let w = 4;
        for chunk in [1usize, 3, 4, 9] {
            let mut c = KvCache::new(2, 1, 1000).with_windows(&[Some(w), None]);
            let mut p = 0;
            while p < 50 {
                let x: Vec<f32> = (p..p + chunk).map(|i| i as f32).collect();
                c.append(0, &x, &x);
                c.append(1, &x, &x);
                // While the chunk is stored, the ring holds what its first query needs.
                for q in p..p + chunk {
                    let want: Vec<f32> =
                        ((q + 1).saturating_sub(w)..=q).map(|i| i as f32).collect();
                    assert_eq!(visible(&c, 0, q), want, "chunk {chunk}, query {q}");
                }
                assert!(c.layers[0].k.len() <= w - 1 + chunk);
                c.advance(chunk);
                p += chunk;
                let l = &c.layers[0];
                assert_eq!(l.k.len(), p.min(w), "chunk {chunk} at {p}");
                assert_eq!(l.ring, w);
                assert_eq!(c.layers[1].k.len(), p);
            }
            let n = c.len();
            c.truncate(n - 1);
            assert_eq!(c.len(), n - 1);
            let x = [-1.0f32];
            c.append(0, &x, &x);
            c.append(1, &x, &x);
            c.advance(1);
            let mut want: Vec<f32> = (n - w..n - 1).map(|i| i as f32).collect();
            want.push(-1.0);
            assert_eq!(visible(&c, 0, n - 1), want);
            c.truncate(n - 3);
            assert_eq!(c.len(), 0);
            assert!(c.layers.iter().all(|l| l.k.is_empty() && l.start == 0));
        }
    }

    /// A sliding ring of q8_0 rows (widened for a chunk, narrowed back, rewound) holds, for
    /// every position a query sees, exactly the bytes that position's row quantized to: rows
    /// move as stored, never re-quantized; the global layer's bytes grow with the positions.
    #[test]
    fn stored_type_rings_keep_rows_as_stored() {
        use oxinfer_kernels::attention::KvType;
        let (w, width, ty) = (4, 32, KvType::Q8_0);
        let row = |p: usize| -> Vec<f32> {
            (0..width)
                .map(|i| ((p * 31 + i * 7) % 19) as f32 / 3.0 - 3.0)
                .collect()
        };
        let types = KvTypes { k: ty, v: ty };
        let mut c = KvCache::new(2, width, 100)
            .with_windows(&[Some(w), None])
            .with_types(types);
        let mut p = 0;
        for chunk in [1usize, 3, 6, 1, 9, 2] {
            let x: Vec<f32> = (p..p + chunk).flat_map(row).collect();
            c.append(0, &x, &x);
            c.append(1, &x, &x);
            c.advance(chunk);
            p += chunk;
            let l = &c.layers[0];
            let KvView::Packed { data, .. } = l.k.view() else {
                panic!("q8_0 rows")
            };
            let rb = ty.row_bytes(width);
            for q in p.saturating_sub(w)..p {
                let mut want = Vec::new();
                ty.quantize_row(&row(q), &mut want);
                let r = q % l.ring;
                assert_eq!(&data[r * rb..(r + 1) * rb], want.as_slice(), "position {q}");
            }
            assert_eq!(c.layers[1].k.bytes(), p * rb);
            assert_eq!(c.bytes_in_use(), 2 * (p + p.min(w)) * rb);
        }
        c.truncate(p - 1);
        assert_eq!(c.len(), p - 1);
    }

    /// A device mirror kept in host memory: rows by absolute position per layer.
    #[derive(Debug, Default)]
    struct FakeMirror {
        k: Vec<Vec<f32>>,
        len: usize,
    }

    impl DeviceKv for FakeMirror {
        fn len(&self) -> usize {
            self.len
        }
        fn truncate(&mut self, len: usize) {
            self.len = self.len.min(len);
        }
        fn read(
            &self,
            layer: usize,
            from: usize,
            to: usize,
        ) -> Result<(Vec<f32>, Vec<f32>), String> {
            let k = self.k[layer][from..to].to_vec();
            Ok((k.clone(), k))
        }
        fn as_any_mut(&mut self) -> &mut dyn std::any::Any {
            self
        }
    }

    /// A "device pass" over `c`: positions `len .. len + t` (value = position) stored in the
    /// mirror only, after uploading what only the host holds, then advanced.
    fn device_pass(c: &mut KvCache, t: usize) {
        let (len, host) = (c.len(), c.host_len());
        let m = c
            .device_mut()
            .unwrap()
            .as_any_mut()
            .downcast_mut::<FakeMirror>()
            .unwrap();
        for rows in m.k.iter_mut() {
            rows.resize(len + t, 0.0);
            let from = m.len.min(host);
            for (p, r) in rows.iter_mut().enumerate().skip(from) {
                *r = p as f32;
            }
        }
        m.len = len + t;
        c.advance(t);
    }

    /// The ownership rule: device passes leave the host behind, `sync_host` brings it level
    /// (sliding ring included), rewinds trim both sides (the mirror serves a rewind the host
    /// ring could not), a host pass after a device pass appends after the synced rows.
    #[test]
    fn device_mirror_and_host_stay_consistent() {
        let mut c = KvCache::new(2, 1, 100).with_windows(&[Some(4), None]);
        let host_pass = |c: &mut KvCache, t: usize| {
            c.sync_host().unwrap();
            let x: Vec<f32> = (c.len()..c.len() + t).map(|p| p as f32).collect();
            c.append(0, &x, &x);
            c.append(1, &x, &x);
            c.advance(t);
        };
        host_pass(&mut c, 6);
        c.set_device(Box::new(FakeMirror {
            k: vec![Vec::new(); 2],
            len: 0,
        }))
        .unwrap();
        device_pass(&mut c, 3);
        assert_eq!((c.len(), c.host_len()), (9, 6));
        assert_eq!(c.clone().len(), 6, "a clone copies the host part");
        c.sync_host().unwrap();
        assert_eq!(c.host_len(), 9);
        assert_eq!(visible(&c, 0, 8), vec![5.0, 6.0, 7.0, 8.0]);
        assert_eq!(
            c.layers[1].k.as_f32().unwrap(),
            (0..9).map(|p| p as f32).collect::<Vec<_>>()
        );
        device_pass(&mut c, 3);
        // The host ring cannot rewind into its window; the mirror can.
        c.truncate(10);
        assert_eq!(
            (c.len(), c.host_len(), c.device().unwrap().len()),
            (10, 9, 10)
        );
        host_pass(&mut c, 2);
        assert_eq!((c.len(), c.host_len()), (12, 12));
        assert_eq!(visible(&c, 0, 11), vec![8.0, 9.0, 10.0, 11.0]);
        device_pass(&mut c, 1);
        assert_eq!(c.device().unwrap().len(), 13);
        c.truncate(0);
        assert_eq!(
            (c.len(), c.host_len(), c.device().unwrap().len()),
            (0, 0, 0)
        );
    }

    /// Before the ring first wraps, rewinds of any depth keep the cache.
    #[test]
    fn short_windowed_cache_rewinds() {
        let mut c = KvCache::new(1, 2, 100).with_windows(&[Some(8)]);
        let x: Vec<f32> = (0..12).map(|i| i as f32).collect();
        c.append(0, &x, &x);
        c.advance(6);
        c.truncate(2);
        assert_eq!((c.len(), c.layers[0].k.len()), (2, 4));
        assert_eq!(c.layers[0].k.as_f32().unwrap(), [0.0, 1.0, 2.0, 3.0]);
    }

    /// With `keep_rewind(n)`, a wrapped sliding ring drops its last `n` positions and keeps
    /// serving the window (what speculative decoding's rollback needs); one more empties it.
    #[test]
    fn kept_rewind_lets_a_wrapped_ring_roll_back() {
        let (w, n) = (4, 3);
        let mut c = KvCache::new(1, 1, 100).with_windows(&[Some(w)]);
        c.keep_rewind(n);
        for p in 0..20 {
            let x = [p as f32];
            c.append(0, &x, &x);
            c.advance(1);
        }
        assert_eq!(c.layers[0].ring, w + n);
        c.truncate(20 - n);
        assert_eq!(c.len(), 20 - n);
        // Rewrite the dropped positions with new values and read the window back.
        for p in 20 - n..20 {
            let x = [-(p as f32)];
            c.append(0, &x, &x);
            c.advance(1);
        }
        assert_eq!(visible(&c, 0, 19), vec![16.0, -17.0, -18.0, -19.0]);
        c.truncate(20 - n - 2);
        assert_eq!(c.len(), 0, "deeper than kept: the cache empties");
    }
}
