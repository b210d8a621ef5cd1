//! The fused decode attention (`kernels/decode_attention.cu`): for passes whose sequences each
//! bring one new row (plain and batched decode), the queries' and keys' post-processing, the
//! cache append, the split attention and its merge (with the output projection's int8 input)
//! in one launch per layer instead of three ([`crate::ops::qkv_post`], [`crate::ops::attention_split`]),
//! with the same arithmetic in the same order.

use crate::gpu::Gpu;
use crate::kernels::VALUE_KV_TYPES;
use crate::kv::kernel_index;
use crate::ops::{arg, Int8Out, KvRows, QkvPost};
use cudarc::driver::sys::CUdeviceptr;
use oxinfer::backend::AttnShape;
use oxinfer::plan::KvType;

/// Most warps per block (`DA_MAX_WARPS` in the kernel).
const MAX_WARPS: usize = 16;

/// Most dynamic shared memory a block takes without the opt-in attribute.
const MAX_SMEM: usize = 48 * 1024;

/// How one launch of the fused kernel is cut: `heads` query heads per block (the int8 block's
/// span over heads), `warps` per head, `smem` bytes of dynamic shared memory.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct FusedLayout {
    pub heads: usize,
    pub warps: usize,
    pub smem: usize,
}

/// The most key slices the fused decode attention takes (`OXINFER_CUDA_FUSED_ATTN`: `0` off,
/// `N` up to N slices, more than the block's warps running several slices each in turn);
/// `None` (the default): as many as the block has warps, one slice each. On an H100 (synthetic
/// 7B, docs/gpu.md) the fused kernel won at up to a slice per warp (tg128 +3-4 %) and lost
/// with four slices per warp (a 512-deep cache: 269 against 277 tok/s).
fn max_slices() -> Option<usize> {
    static MAX: std::sync::OnceLock<Option<usize>> = std::sync::OnceLock::new();
    *MAX.get_or_init(|| {
        std::env::var("OXINFER_CUDA_FUSED_ATTN")
            .ok()
            .and_then(|v| v.parse().ok())
    })
}

/// The cut of the fused kernel for heads `shape` over a cache of `elem` with `splits` key
/// slices, quantizing its output to int8 blocks of `block` (when given); `None` when it does
/// not apply (switched off, a block-type cache, heads wider than 256 or not a multiple of 32,
/// too many slices for its shared memory).
pub(crate) fn fused_layout(
    shape: &AttnShape,
    elem: KvType,
    block: Option<usize>,
    splits: usize,
) -> Option<FusedLayout> {
    let hd = shape.head_dim;
    if splits == 0
        || max_slices().is_some_and(|most| splits > most)
        || kernel_index(elem) >= VALUE_KV_TYPES
        || hd > 256
        || !hd.is_multiple_of(32)
    {
        return None;
    }
    let span = block.map_or(hd, |b| b.max(hd));
    let heads = span / hd;
    if !shape.n_heads.is_multiple_of(heads) || !shape.n_heads.is_multiple_of(shape.n_kv_heads) {
        return None;
    }
    // A warp per slice, and at least three: the key's, the value's and the query's
    // post-processing run on three warps of the head in parallel.
    let most = (MAX_WARPS / heads).max(1);
    if max_slices().is_none() && splits > most {
        return None;
    }
    let warps = splits.max(3).min(most);
    // Partials, the new key and value per head, the merged heads, RoPE scratch per warp.
    let floats = heads * splits * (hd + 2) + heads * 512 + span + heads * warps * 256;
    let smem = floats * 4;
    (smem <= MAX_SMEM && heads * warps <= MAX_WARPS).then_some(FusedLayout { heads, warps, smem })
}

/// One new row per sequence (`t` rows; row r's cache and position in `post.kv` / `post.pos`):
/// `q`, `kn`, `vn` are the rows' raw projections (`[t, n_heads·hd]`, `[t, n_kv_heads·hd]`;
/// `q` is read only), post-processed as [`crate::ops::qkv_post`] does (the keys and values appended
/// to the caches), attended over `splits` slices as [`crate::ops::attention_split`] does, merged into
/// `out` `[t, n_heads·hd]` and, with `quant`, quantized there; `lay` from [`fused_layout`].
#[allow(clippy::too_many_arguments)]
pub(crate) fn decode_attention(
    g: &Gpu,
    q: CUdeviceptr,
    kn: CUdeviceptr,
    vn: CUdeviceptr,
    post: &QkvPost,
    out: CUdeviceptr,
    quant: Option<Int8Out>,
    t: usize,
    shape: &AttnShape,
    splits: usize,
    lay: FusedLayout,
) -> Result<(), String> {
    let z = |o: Option<CUdeviceptr>| o.unwrap_or(0);
    let [qb, kb, vb, qn, kw] = [
        post.q_bias,
        post.k_bias,
        post.v_bias,
        post.q_norm,
        post.k_norm,
    ]
    .map(z);
    let kv: KvRows = post.kv;
    let (q8, dq, qs, b, gnb) = match quant {
        Some(o) => (
            o.q,
            o.d,
            o.s,
            o.layout.block as i32,
            o.layout.gnb(shape.n_heads * shape.head_dim),
        ),
        None => (0, 0, 0, 32, 0),
    };
    let [half, il, h, kvh, hd, s, nh] = [
        post.half,
        usize::from(post.interleaved),
        shape.n_heads,
        shape.n_kv_heads,
        shape.head_dim,
        splits,
        lay.heads,
    ]
    .map(|v| v as i32);
    let window = shape.window.map_or(0, |w| w.min(i32::MAX as usize) as i32);
    let softcap = shape.softcap.unwrap_or(0.0);
    let elem = kernel_index(kv.layout.elem);
    let f = if shape.head_dim <= 128 {
        g.k.decode_attention_h128[elem]
    } else {
        g.k.decode_attention[elem]
    };
    let blocks = t * shape.n_heads / lay.heads;
    let early = i32::from(loads_early());
    g.launch_smem(
        f,
        (blocks as u32, 1, 1),
        ((32 * lay.heads * lay.warps) as u32, 1, 1),
        lay.smem as u32,
        &mut [
            arg(&q),
            arg(&kn),
            arg(&vn),
            arg(&kv.table),
            arg(&kv.rseq),
            arg(&post.pos),
            arg(&qb),
            arg(&kb),
            arg(&vb),
            arg(&qn),
            arg(&kw),
            arg(&post.cos),
            arg(&post.sin),
            arg(&half),
            arg(&il),
            arg(&post.eps),
            arg(&kv.layout.krot),
            arg(&kv.layout.vrot),
            arg(&out),
            arg(&q8),
            arg(&dq),
            arg(&qs),
            arg(&b),
            arg(&gnb),
            arg(&h),
            arg(&kvh),
            arg(&hd),
            arg(&shape.scale),
            arg(&window),
            arg(&softcap),
            arg(&s),
            arg(&nh),
            arg(&early),
        ],
    )
}

/// Whether the fused decode attention loads the row's position, cache and RoPE entries and the
/// QK-norm gains before waiting for the q/k/v products (unless `OXINFER_CUDA_ATTN_EARLY=0`).
fn loads_early() -> bool {
    static ON: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *ON.get_or_init(|| !std::env::var("OXINFER_CUDA_ATTN_EARLY").is_ok_and(|v| v == "0"))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sh(n_heads: usize, n_kv_heads: usize, head_dim: usize) -> AttnShape {
        AttnShape {
            n_heads,
            n_kv_heads,
            head_dim,
            scale: 1.0,
            window: None,
            softcap: None,
        }
    }

    #[test]
    fn layout_spans_the_int8_block() {
        // Qwen2-7B: 28 heads of 128, int8 blocks of 256 → two heads per block.
        let l = fused_layout(&sh(28, 4, 128), KvType::F32, Some(256), 4).unwrap();
        assert_eq!((l.heads, l.warps), (2, 4));
        // Never fewer than three warps a head (the three post-processing chains).
        let l = fused_layout(&sh(28, 4, 128), KvType::F32, Some(256), 1).unwrap();
        assert_eq!((l.heads, l.warps), (2, 3));
        // Eight heads of 32 in a block of 256: two warps each.
        let l = fused_layout(&sh(16, 4, 32), KvType::F32, Some(256), 1).unwrap();
        assert_eq!((l.heads, l.warps), (8, 2));
        // Blocks of 32 under heads of 64: one head per block, up to 16 warps, one slice each.
        let l = fused_layout(&sh(9, 3, 64), KvType::F32, Some(32), 16).unwrap();
        assert_eq!((l.heads, l.warps), (1, 16));
        assert_eq!(fused_layout(&sh(9, 3, 64), KvType::F32, Some(32), 17), None);
        assert_eq!(
            fused_layout(&sh(9, 3, 64), KvType::F32, None, 1)
                .unwrap()
                .heads,
            1
        );
        // Block-type caches keep the three kernels.
        assert_eq!(
            fused_layout(&sh(28, 4, 128), KvType::Q8_0, Some(256), 4),
            None
        );
        // Heads wider than the kernel's registers, or too many slices for shared memory.
        assert_eq!(fused_layout(&sh(8, 8, 512), KvType::F32, None, 1), None);
        assert_eq!(
            fused_layout(&sh(28, 4, 128), KvType::F32, Some(256), 9),
            None
        );
        // An odd head count cannot pair heads into blocks of 256.
        assert_eq!(
            fused_layout(&sh(7, 1, 128), KvType::F32, Some(256), 1),
            None
        );
    }

    #[test]
    fn few_heads_take_short_slices_within_the_fused_kernel() {
        use crate::ops::split_count;
        // Gemma 3 270M: 4 heads of 256 over one KV head; the output projection's int8 blocks
        // of 256 give one head per block, so the fused kernel takes up to 16 slices.
        let gemma = sh(4, 1, 256);
        assert_eq!(split_count(1, 100, &gemma, KvType::F32), 16);
        assert_eq!(split_count(1, 20, &gemma, KvType::F32), 4);
        assert!(fused_layout(&gemma, KvType::F32, Some(256), 16).is_some());
        // Past 512 keys the 32-key rule gives more slices than 16, as before.
        assert_eq!(split_count(1, 1000, &gemma, KvType::F32), 32);
        // Many heads keep 32 keys a slice (the 7B: 28 heads).
        assert_eq!(split_count(1, 128, &sh(28, 4, 128), KvType::F32), 4);
        // Four rows of Gemma are still few warps; five are not.
        assert_eq!(split_count(4, 128, &gemma, KvType::F32), 16);
        assert_eq!(split_count(5, 128, &gemma, KvType::F32), 4);
    }
}
