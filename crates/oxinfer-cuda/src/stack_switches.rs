//! The environment switches of the decoder stack's passes (read once): which fusions run, and
//! for measuring, which kernels are left out. docs/gpu.md ("Switches") lists them.

/// Whether the host prepares each pass as before session 30, unless `OXINFER_CUDA_STEP_HOST=new`:
/// the norm gains and biases packed and compared with the last pass's every time, and the input
/// upload waited for. The new preparation (packed offsets kept under a key, the upload queued)
/// has not run on a GPU yet, so it is opt-in until a device call has checked and measured it.
pub(crate) fn step_host_old() -> bool {
    static ON: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *ON.get_or_init(|| !std::env::var("OXINFER_CUDA_STEP_HOST").is_ok_and(|v| v == "new"))
}

/// Whether decode steps run as CUDA graphs: unless `OXINFER_CUDA_GRAPHS=0`, and never under
/// `OXINFER_GPU_CHECK` (the checked passes run as plain launches).
pub(crate) fn graphs_enabled() -> bool {
    static ON: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *ON.get_or_init(|| {
        let off = |k: &str, v: &str| std::env::var(k).is_ok_and(|x| x == v);
        !off("OXINFER_CUDA_GRAPHS", "0")
            && !std::env::var("OXINFER_GPU_CHECK").is_ok_and(|v| !v.is_empty() && v != "0")
    })
}

/// Whether the decode stack adds each block's output to the residual stream inside the
/// block's last GEMV (unless `OXINFER_CUDA_RESIDUAL_GEMV=0`: then in the next norm's kernel).
/// Either way the sum is the CPU's `x + y` in f32.
pub(crate) fn residual_in_gemv() -> bool {
    static ON: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *ON.get_or_init(|| !std::env::var("OXINFER_CUDA_RESIDUAL_GEMV").is_ok_and(|v| v == "0"))
}

/// Whether decode norms without a residual always take the sliced kernel
/// (`OXINFER_CUDA_NORM_SLICES=1`, the rule before session 22; for measuring), even when the
/// next GEMV takes int8 blocks of 32.
pub(crate) fn norm_slices_always() -> bool {
    static ON: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *ON.get_or_init(|| std::env::var("OXINFER_CUDA_NORM_SLICES").is_ok_and(|v| v == "1"))
}

/// Whether a post-norm (Gemma's post-attention and post-MLP norms) runs inside the next norm's
/// kernel (unless `OXINFER_CUDA_POST_NORM_FUSED=0`: then as its own kernel first). Either way
/// the same arithmetic in the same order.
pub(crate) fn post_norm_fused() -> bool {
    static ON: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *ON.get_or_init(|| !std::env::var("OXINFER_CUDA_POST_NORM_FUSED").is_ok_and(|v| v == "0"))
}

/// Whether the split attention's merge quantizes the output projection's input itself (unless
/// `OXINFER_CUDA_COMBINE_Q8=0`).
pub(crate) fn combine_quantizes() -> bool {
    static ON: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *ON.get_or_init(|| !std::env::var("OXINFER_CUDA_COMBINE_Q8").is_ok_and(|v| v == "0"))
}

/// The decode kernels `OXINFER_CUDA_SKIP` leaves out of every pass, for measuring what each
/// costs in place (between its neighbours, under PDL and graphs, where a kernel's isolated time
/// says little): a comma list of `attention` (the fused decode attention), `norm` (the layers'
/// RMSNorms), `act` (the gated activation). The outputs are then wrong; `oxinfer bench` warns.
#[derive(Clone, Copy, Default)]
pub(crate) struct Skip {
    pub attention: bool,
    pub norm: bool,
    pub act: bool,
}

/// [`Skip`] as the environment sets it (none when unset).
pub(crate) fn skipped() -> Skip {
    static SKIP: std::sync::OnceLock<Skip> = std::sync::OnceLock::new();
    *SKIP.get_or_init(|| {
        let v = std::env::var("OXINFER_CUDA_SKIP").unwrap_or_default();
        let has = |k: &str| v.split(',').any(|p| p.trim() == k);
        let s = Skip {
            attention: has("attention"),
            norm: has("norm"),
            act: has("act"),
        };
        if s.attention || s.norm || s.act {
            eprintln!("warning: OXINFER_CUDA_SKIP={v}: those kernels are left out, outputs are wrong (for timing only)");
        }
        s
    })
}
