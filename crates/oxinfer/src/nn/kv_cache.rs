//! Key/value cache of a decoder: per layer, the rotated keys and the values of every position
//! seen so far, grown as tokens arrive; and, for recurrent layers (Gated DeltaNet), their
//! fixed-size state. Layers with a sliding window keep only the rows their queries can still
//! see (plus one window of slack so short rewinds work), dropped in batches so each row is
//! moved at most once on average.

/// Keys and values of one attention layer, `[len - start, kv_heads * head_dim]` each,
/// row-major: row `i` holds position `start + i`.
#[derive(Clone, Debug, Default)]
pub struct LayerCache {
    pub k: Vec<f32>,
    pub v: Vec<f32>,
    /// Position of the first stored row (0 unless a windowed layer dropped old rows). Attention
    /// over `k`/`v` sees the new queries at positions `pos0 - start ..`.
    pub start: usize,
    /// The layer's sliding window (a query at q sees keys k with q − k < window), if any.
    pub window: Option<usize>,
    /// Width of this layer's rows when it differs from the cache-wide one (0: the cache-wide
    /// width), for models whose layers have different head dims or kv head counts.
    pub width: usize,
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

    /// Gives each layer its sliding window (`None`: keep every position); windowed layers then
    /// hold about two windows of rows instead of the whole context.
    pub fn with_windows(mut self, windows: &[Option<usize>]) -> Self {
        for (l, &w) in self.layers.iter_mut().zip(windows) {
            l.window = w.filter(|&w| w > 0);
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

    /// Appends `t` rows of keys and values to `layer`. Call for every layer, then
    /// [`KvCache::advance`] once.
    pub fn append(&mut self, layer: usize, k: &[f32], v: &[f32]) {
        let (pos0, row) = (self.len, self.row_width(layer));
        let c = &mut self.layers[layer];
        if let Some(w) = c.window {
            // The first new query sees positions ≥ pos0 + 1 − w; keep one more window for
            // rewinds, and drop only once a whole window is dead (amortized moves).
            let keep_from = (pos0 + 1).saturating_sub(2 * w);
            if keep_from >= c.start + w {
                let n = (keep_from - c.start) * row;
                c.k.drain(..n);
                c.v.drain(..n);
                c.start = keep_from;
            }
        }
        c.k.extend_from_slice(k);
        c.v.extend_from_slice(v);
    }

    /// Records that `t` positions were appended to every layer.
    pub fn advance(&mut self, t: usize) {
        self.len += t;
        debug_assert!((0..self.layers.len()).all(|i| {
            let l = &self.layers[i];
            l.k.len() == (self.len - l.start) * self.row_width(i) || l.k.is_empty()
        }));
    }

    /// Drops every position at or after `len` (to rewind to a shared prefix). A cache with
    /// recurrent state, or a windowed layer that already dropped rows a query at `len` would
    /// see, cannot rewind part-way: it empties instead; check [`KvCache::len`].
    pub fn truncate(&mut self, len: usize) {
        if len < self.len && !self.layers.iter().all(|l| l.serves(len)) {
            for l in &mut self.layers {
                l.k.clear();
                l.v.clear();
                l.start = 0;
            }
            for r in &mut self.recurrent {
                r.conv.fill(0.0);
                r.state.fill(0.0);
            }
            self.len = 0;
            return;
        }
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
            for i in 0..self.layers.len() {
                let row = self.row_width(i);
                let l = &mut self.layers[i];
                l.k.truncate((len - l.start) * row);
                l.v.truncate((len - l.start) * row);
            }
            self.len = len;
        }
    }

    /// Empties the cache, keeping its allocation.
    pub fn clear(&mut self) {
        self.truncate(0);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A windowed layer keeps at most about three windows of rows, knows where they start, and
    /// rewinds within its slack; a deeper rewind empties the cache.
    #[test]
    fn windowed_layer_drops_old_rows() {
        let mut c = KvCache::new(2, 1, 1000).with_windows(&[Some(4), None]);
        for p in 0..50 {
            let x = [p as f32];
            c.append(0, &x, &x);
            c.append(1, &x, &x);
            c.advance(1);
            let l = &c.layers[0];
            assert!(l.k.len() <= 3 * 4 + 1, "{} rows at {p}", l.k.len());
            assert_eq!(l.k[0], l.start as f32);
            assert!(l.serves(p + 1));
            assert_eq!(c.layers[1].k.len(), p + 1);
        }
        c.truncate(47);
        assert_eq!(c.len(), 47);
        assert_eq!(*c.layers[0].k.last().unwrap(), 46.0);
        c.truncate(20);
        assert_eq!(c.len(), 0);
        assert!(c.layers.iter().all(|l| l.k.is_empty() && l.start == 0));
    }
}
