//! Key/value cache of a decoder: per layer, the rotated keys and the values of every position
//! seen so far, grown as tokens arrive; and, for recurrent layers (Gated DeltaNet), their
//! fixed-size state.

/// Keys and values of one attention layer, `[len, kv_heads * head_dim]` each, row-major.
#[derive(Clone, Debug, Default)]
pub struct LayerCache {
    pub k: Vec<f32>,
    pub v: Vec<f32>,
}

/// Fixed-size state of one recurrent layer: the last inputs of its causal convolution and its
/// recurrent matrix state. Both are empty for attention layers.
#[derive(Clone, Debug, Default)]
pub struct RecurrentState {
    pub conv: Vec<f32>,
    pub state: Vec<f32>,
}

/// The KV cache of a whole model for one sequence.
#[derive(Clone, Debug)]
pub struct KvCache {
    /// One entry per layer.
    pub layers: Vec<LayerCache>,
    /// Positions stored.
    len: usize,
    /// Width of a cached row (`kv_heads * head_dim`).
    row: usize,
    /// Positions the cache may hold.
    capacity: usize,
    /// Per layer, the state of recurrent layers (empty when the model has none). It cannot be
    /// rewound: [`KvCache::truncate`] to an earlier position then starts over from 0.
    pub recurrent: Vec<RecurrentState>,
}

impl KvCache {
    /// An empty cache for `n_layers` layers of width `row` holding at most `capacity` positions.
    pub fn new(n_layers: usize, row: usize, capacity: usize) -> Self {
        KvCache {
            layers: vec![LayerCache::default(); n_layers],
            len: 0,
            row,
            capacity,
            recurrent: Vec::new(),
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

    /// Appends `t` rows of keys and values to `layer`. Call for every layer, then
    /// [`KvCache::advance`] once.
    pub fn append(&mut self, layer: usize, k: &[f32], v: &[f32]) {
        let c = &mut self.layers[layer];
        c.k.extend_from_slice(k);
        c.v.extend_from_slice(v);
    }

    /// Records that `t` positions were appended to every layer.
    pub fn advance(&mut self, t: usize) {
        self.len += t;
        debug_assert!(self
            .layers
            .iter()
            .all(|l| l.k.len() == self.len * self.row || l.k.is_empty()));
    }

    /// Drops every position at or after `len` (to rewind to a shared prefix). A cache with
    /// recurrent state cannot rewind part-way: it empties instead; check [`KvCache::len`].
    pub fn truncate(&mut self, len: usize) {
        let len = if len < self.len && !self.recurrent.is_empty() {
            for r in &mut self.recurrent {
                r.conv.fill(0.0);
                r.state.fill(0.0);
            }
            0
        } else {
            len
        };
        if len < self.len {
            for l in &mut self.layers {
                l.k.truncate(len * self.row);
                l.v.truncate(len * self.row);
            }
            self.len = len;
        }
    }

    /// Empties the cache, keeping its allocation.
    pub fn clear(&mut self) {
        self.truncate(0);
    }
}
