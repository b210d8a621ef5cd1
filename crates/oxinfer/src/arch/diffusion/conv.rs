//! The 2-D convolution layer of the UNet and the VAE ([`Conv2d`]) and the kernel it keeps: the
//! unfolded `[n_out][ky][kx][cin]` matrix of [`crate::nn::conv2d`], or, where the CPU's packed
//! f32 GEMM runs, the kernel packed into its panels or transformed for Winograd F(4×4, 3×3) or
//! F(2×2, 3×3).
//!
//! An f32 kernel stored `[cout, cin, k, k]` (every convolution of an f32 diffusers or
//! single-file checkpoint) is packed or transformed straight from the file's bytes, with no
//! unfolded copy in between, and its mapped pages are dropped once that is done. It is
//! prepared at load, except inside [`lazy_kernels`] (the VAE encoder, which text to image never
//! runs): there on its first forward pass, once, whichever thread gets there first.

use super::layers::{add_rows, FeatureMap, Norm, Weights};
use super::DiffusionError;
use crate::backend::cpu_ref::conv::conv2d_cpu_images_packed;
use crate::backend::cpu_ref::winograd::{conv2d_winograd_images, Variant, WinogradWeight};
use crate::backend::{self, ConvGeom, DeviceWeight};
use crate::loader::TensorView;
use crate::nn::{conv_geom, ConvError};
use oxinfer_kernels::packed::float::{float_packing_pays, PackedFloatMatrix, NR};
use oxinfer_kernels::WeightFormat;
use std::cell::Cell;
use std::sync::{Mutex, OnceLock};

/// A `k × k` convolution with padding `k / 2` and a bias, its weight rearranged to the unfolded
/// layout `[n_out][ky][kx][cin]` of [`crate::nn::conv2d`] (f32, f16 or bf16 as stored), or an
/// f32 one packed for the CPU's packed GEMM when that is the path it takes ([`Kernel`]).
///
/// Where the packed GEMM runs, an f32 `3 × 3` convolution of stride 1 with `cin ≥`
/// [`WINOGRAD_MIN_CIN`] keeps its weight in the Winograd domain instead ([`WinogradWeight`]):
/// F(4×4, 3×3) (a quarter of the multiplies, four times the kernel's memory) where
/// `cin · cout ≤` [`WINOGRAD_MAX_CHANNEL_PAIRS`], F(2×2, 3×3) (2.25 times fewer multiplies,
/// 1.78 times the memory) above it ([`winograd_variant`]). `OXINFER_WINOGRAD` (read once)
/// changes the rule for A/B runs and as a fallback ([`WinogradMode`]): `0` keeps every weight
/// packed for the direct convolution.
pub struct Conv2d {
    /// The kernel the products read, made at load or on first use (see the module doc); an
    /// error there is kept and returned by every forward pass.
    kernel: OnceLock<Result<Kernel, ConvError>>,
    /// The stored f32 `[cout, cin, k, k]` tensor and what to make of it, until the kernel is
    /// made (then taken, so that an in-memory tensor, a fused LoRA's, is freed).
    stored: Mutex<Option<(TensorView, Plan)>>,
    bias: Vec<f32>,
    /// Input channels.
    pub cin: usize,
    /// Output channels.
    pub cout: usize,
    /// Kernel size.
    pub k: usize,
    /// Stride.
    pub stride: usize,
}

impl Conv2d {
    /// Loads `{name}.weight` (`[cout, cin, k, k]`, `[cout, cin]` for a linear layer used as a
    /// 1 × 1 convolution, or already unfolded `[cout, k · k · cin]` in any format, as an
    /// on-load quantizing store gives it) and `{name}.bias` (`[cout]`).
    pub fn load(
        w: Weights,
        name: &str,
        cin: usize,
        cout: usize,
        k: usize,
        stride: usize,
    ) -> Result<Self, DiffusionError> {
        let full = w.name(&format!("{name}.weight"));
        let t = w.store.require(&full)?;
        let bias = w.vector(&format!("{name}.bias"), &[cout])?;
        let conv = |kernel: OnceLock<_>, stored| Conv2d {
            kernel,
            stored: Mutex::new(stored),
            bias,
            cin,
            cout,
            k,
            stride,
        };
        // An f32 kernel as stored that the CPU keeps packed or transformed: made from the
        // file's bytes, now or on first use.
        if t.shape == [cout, cin, k, k] && t.format == WeightFormat::F32 {
            if let Some(plan) = cpu_plan(WeightFormat::F32, cin, cout, k, stride) {
                let conv = conv(OnceLock::new(), Some((t, plan)));
                if !LAZY.with(Cell::get) {
                    conv.kernel()?;
                }
                return Ok(conv);
            }
        }
        let weight = if t.shape == [cout, k * k * cin] {
            t
        } else if t.shape == [cout, cin, k, k] {
            // The unfolded copy replaces the file's bytes: drop their pages from resident
            // memory (a mapped file's pages fault back in if anything reads them again).
            let unfolded = unfold_conv_weight(&t)?;
            t.release_rows(0..cout);
            unfolded
        } else {
            return Err(crate::error::LoadError::tensor(
                w.store.path(),
                &full,
                format!("shape {:?}, expected {:?}", t.shape, [cout, cin, k, k]),
            )
            .into());
        };
        let kernel = match cpu_kernel(&weight.matrix()?, cin, k, stride)? {
            Some(kernel) => {
                // Only the transformed or packed copy is read from now on.
                weight.release_rows(0..cout);
                kernel
            }
            None => Kernel::Unfolded {
                weight,
                device: OnceLock::new(),
            },
        };
        Ok(conv(OnceLock::from(Ok(kernel)), None))
    }

    /// The kernel, made from the stored tensor by the first caller (the others wait for it).
    fn kernel(&self) -> Result<&Kernel, ConvError> {
        let made = self.kernel.get_or_init(|| {
            let stored = self.stored.lock().map(|mut s| s.take());
            let Ok(Some((t, plan))) = stored else {
                return Err(ConvError("convolution kernel has no stored weight".into()));
            };
            let taps = self.k * self.k;
            let kernel = match plan {
                Plan::Packed => Kernel::Packed(pack_stored(t.bytes(), self.cout, self.cin, taps)?),
                Plan::Winograd(v) => Kernel::Winograd(WinogradWeight::from_stored(
                    t.bytes(),
                    self.cout,
                    self.cin,
                    v,
                )?),
            };
            // Only the packed or transformed copy is read from now on.
            t.release_rows(0..self.cout);
            Ok(kernel)
        });
        made.as_ref().map_err(Clone::clone)
    }

    /// The geometry of this convolution over an `h × w` input.
    pub fn geom(&self, h: usize, w: usize) -> Result<ConvGeom, DiffusionError> {
        Ok(conv_geom(h, w, self.cin, self.k, self.stride)?)
    }

    /// `conv(norm(x)) + bias` for every image of `x`, the norm (with its SiLU, each image's own
    /// statistics) fused into the convolution's input. The first pass of a kernel left for
    /// first use ([`lazy_kernels`]) makes it first.
    pub fn forward(
        &self,
        x: &FeatureMap,
        norm: Option<&Norm>,
    ) -> Result<FeatureMap, DiffusionError> {
        let g = self.geom(x.h, x.w)?;
        let mut y = vec![0f32; x.images * g.oh * g.ow * self.cout];
        let spec = norm.map(Norm::spec);
        match self.kernel()? {
            Kernel::Packed(p) => {
                conv2d_cpu_images_packed(&x.data, x.images, &g, spec.as_ref(), p, &mut y)?
            }
            Kernel::Winograd(u) => {
                conv2d_winograd_images(&x.data, x.images, &g, spec.as_ref(), u, &mut y)?
            }
            Kernel::Unfolded { weight, device } => {
                let m = weight.matrix()?;
                let dev =
                    backend::active().and_then(|b| device.get_or_init(|| b.upload(&m)).as_ref());
                crate::nn::conv2d_images(&x.data, x.images, &g, spec.as_ref(), &m, dev, &mut y)?;
            }
        }
        add_rows(&mut y, &self.bias);
        Ok(FeatureMap {
            h: g.oh,
            w: g.ow,
            c: self.cout,
            images: x.images,
            data: y,
        })
    }
}

thread_local! {
    /// Whether [`Conv2d::load`] on this thread leaves stored f32 kernels for first use.
    static LAZY: Cell<bool> = const { Cell::new(false) };
}

/// `f()`, with the f32 kernels of the convolutions it loads on this thread made on their first
/// forward pass instead of at load (see the module doc): for a component that may never run
/// (the VAE encoder, which only image to image and inpainting use), so that loading it costs
/// no preparation and no memory for its kernels until then.
pub fn lazy_kernels<T>(f: impl FnOnce() -> T) -> T {
    /// Puts the previous setting back, also when `f` panics.
    struct Restore(bool);
    impl Drop for Restore {
        fn drop(&mut self) {
            LAZY.with(|l| l.set(self.0));
        }
    }
    let _restore = Restore(LAZY.with(|l| l.replace(true)));
    f()
}

/// What the CPU keeps of an f32 kernel stored `[cout, cin, k, k]`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Plan {
    /// Panels for the packed GEMM ([`Kernel::Packed`]).
    Packed,
    /// The Winograd transform of this variant ([`Kernel::Winograd`]).
    Winograd(Variant),
}

/// What the CPU keeps instead of the unfolded matrix of a `format` kernel, if anything. Only
/// the packed panels are kept where the CPU's packed GEMM will multiply them: the same floats
/// as the unfolded f32 copy (plus a ragged last panel's zero rows), packed once instead of on
/// every call; or the Winograd transform ([`Conv2d`] says where). f16 / bf16 stay unfolded
/// (packed panels are f32, twice their size) and so does every weight a GPU backend may upload
/// (`None`).
fn cpu_plan(
    format: WeightFormat,
    cin: usize,
    cout: usize,
    k: usize,
    stride: usize,
) -> Option<Plan> {
    let cpu_packed =
        backend::active().is_none() && format == WeightFormat::F32 && float_packing_pays(format);
    if !cpu_packed {
        return None;
    }
    let winograd = (k == 3 && stride == 1)
        .then(|| winograd_variant(WinogradMode::from_env(), cin, cout))
        .flatten();
    Some(winograd.map_or(Plan::Packed, Plan::Winograd))
}

/// The kernel [`cpu_plan`] keeps for the unfolded `[cout, k · k · cin]` matrix `m`, if any.
fn cpu_kernel(
    m: &oxinfer_kernels::WeightMatrix,
    cin: usize,
    k: usize,
    stride: usize,
) -> Result<Option<Kernel>, DiffusionError> {
    Ok(match cpu_plan(m.format, cin, m.rows, k, stride) {
        Some(Plan::Winograd(v)) => Some(Kernel::Winograd(WinogradWeight::new(m, cin, v)?)),
        Some(Plan::Packed) => PackedFloatMatrix::pack(m).map(Kernel::Packed),
        None => None,
    })
}

/// The f32 kernel `src` stored `[cout][cin][taps]` (little-endian, any alignment) packed as
/// its unfolded matrix `[cout][taps][cin]` would be ([`PackedFloatMatrix::pack`]: the same
/// floats in the same places), read in place: one panel per pool task; per input channel, the
/// panel's rows' taps are gathered (16 sequential read streams) and each tap's 16 values
/// stored as one group (`taps` sequential write streams).
///
/// # Errors
/// `src` is not `cout · cin · taps` f32 values.
fn pack_stored(
    src: &[u8],
    cout: usize,
    cin: usize,
    taps: usize,
) -> Result<PackedFloatMatrix, ConvError> {
    if src.len() != cout * cin * taps * 4 {
        return Err(ConvError(format!(
            "convolution kernel of {} bytes, expected {cout} * {cin} * {taps} f32",
            src.len()
        )));
    }
    let mut m = PackedFloatMatrix::zeroed(cout, taps * cin);
    let mut panels: Vec<&mut [f32]> = m.panels_mut().collect();
    let row_bytes = cin * taps * 4;
    oxinfer_kernels::pool::for_each_mut(&mut panels, |p, panel| {
        let rows = &src[p * NR * row_bytes..cout.min((p + 1) * NR) * row_bytes];
        // group[tap][r]: tap `tap` of channel c of the panel's row r (zero past its rows).
        let mut group = vec![[0f32; NR]; taps];
        for c in 0..cin {
            for (r, row) in rows.chunks_exact(row_bytes).enumerate() {
                let pair = &row[c * taps * 4..(c + 1) * taps * 4];
                for (g, v) in group.iter_mut().zip(pair.chunks_exact(4)) {
                    g[r] = f32::from_le_bytes([v[0], v[1], v[2], v[3]]);
                }
            }
            for (tap, g) in group.iter().enumerate() {
                panel[(tap * cin + c) * NR..(tap * cin + c + 1) * NR].copy_from_slice(g);
            }
        }
    });
    Ok(m)
}

/// `src`, a `[cout, cin, taps]` kernel of `e`-byte elements (`e = src.len() / (cout · cin ·
/// taps)`), rearranged into `dst` (as long) as `[cout][taps][cin]`, one output channel per pool
/// task. Elements of 2 and 4 bytes are copied as fixed-size values (a copy of a run-time length
/// per element is a `memcpy` call).
fn unfold_bytes(src: &[u8], dst: &mut [u8], (cout, cin, taps): (usize, usize, usize)) {
    fn run<const E: usize>(src: &[u8], dst: &mut [u8], cin: usize, taps: usize, e: usize) {
        let per_out = (cin * taps * e).max(1);
        let mut outs: Vec<&mut [u8]> = dst.chunks_mut(per_out).collect();
        oxinfer_kernels::pool::for_each_mut(&mut outs, |o, d| {
            let src = &src[o * per_out..(o + 1) * per_out];
            for (tap, run) in d.chunks_exact_mut(cin * e).enumerate() {
                for (ci, v) in run.chunks_exact_mut(e).enumerate() {
                    let s = (ci * taps + tap) * e;
                    if E == 0 {
                        v.copy_from_slice(&src[s..s + e]);
                    } else {
                        v[..E].copy_from_slice(&src[s..s + E]);
                    }
                }
            }
        });
    }
    let e = src.len() / (cout * cin * taps).max(1);
    match e {
        4 => run::<4>(src, dst, cin, taps, e),
        2 => run::<2>(src, dst, cin, taps, e),
        _ => run::<0>(src, dst, cin, taps, e),
    }
}

/// How a [`Conv2d`] keeps its weight between calls.
enum Kernel {
    /// The unfolded `[cout, k · k · cin]` tensor in its stored format: what a GPU backend
    /// uploads (`device`, on first use), the row kernels read and the per-call packing of
    /// f16 / bf16 weights packs.
    Unfolded {
        weight: TensorView,
        device: OnceLock<Option<DeviceWeight>>,
    },
    /// f32 panels of the unfolded matrix, packed once: kept instead of the unfolded copy when
    /// no GPU backend is installed and the packed GEMM is on (not `OXINFER_PACKED=0`, not
    /// `OXINFER_KERNELS=scalar`).
    Packed(PackedFloatMatrix),
    /// The kernel in the Winograd domain (`U = G g Gᵀ`, 36 or 16 packed `[cout, cin]`
    /// matrices), transformed once: kept instead of the packed panels where [`Conv2d`] says.
    Winograd(WinogradWeight),
}

/// The largest `cin · cout` of a `3 × 3` convolution whose weight [`Conv2d`] keeps in the
/// Winograd F(4×4, 3×3) domain: `1920 · 640`, every convolution of the SD 1.5 UNet's 320- and
/// 640-channel levels (the up blocks' `1920 → 640` included) and every VAE convolution (≤ 512
/// channels): on SD 1.5 in f32, 23 UNet layers (0.29 GB of kernels, 1.15 GB transformed:
/// 0.86 GB more) and 53 VAE layers (0.31 GB, 0.94 GB more, the encoder's included). Above it
/// (the 1280-channel level, 1.8 GB of kernels: F(4×4) would add 5.4 GB) F(2×2, 3×3) is used
/// ([`winograd_variant`]).
pub const WINOGRAD_MAX_CHANNEL_PAIRS: usize = 1920 * 640;

/// The fewest input channels of a convolution [`Conv2d`] keeps in the Winograd domain: with
/// 3 or 4 (the UNet's and the VAE's `conv_in`) the products have too short a sum to pay
/// for the tile transforms (measured for F(4×4): 2 × 32 × 32 × 4 → 320 took 1.3 ms against
/// 0.6 ms direct; 16 input channels are even).
pub const WINOGRAD_MIN_CIN: usize = 16;

/// Which Winograd variants [`Conv2d`] may use: `OXINFER_WINOGRAD`, read once.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum WinogradMode {
    /// `0`: none; every `3 × 3` weight is packed for the direct convolution.
    Off,
    /// `f4`: F(4×4, 3×3) where [`winograd_variant`] puts it, the direct convolution elsewhere
    /// (the rule before F(2×2) existed).
    F4Only,
    /// `f2`: F(2×2, 3×3) for every convolution that takes Winograd.
    F2Only,
    /// Unset or anything else: [`winograd_variant`]'s rule.
    Auto,
}

impl WinogradMode {
    /// The mode an `OXINFER_WINOGRAD` value names (`None`: unset).
    pub fn parse(value: Option<&str>) -> Self {
        match value.map(|v| v.trim().to_ascii_lowercase()).as_deref() {
            Some("0") => WinogradMode::Off,
            Some("f4") => WinogradMode::F4Only,
            Some("f2") => WinogradMode::F2Only,
            _ => WinogradMode::Auto,
        }
    }

    /// `OXINFER_WINOGRAD`'s mode, read once.
    fn from_env() -> Self {
        static MODE: OnceLock<WinogradMode> = OnceLock::new();
        *MODE.get_or_init(|| Self::parse(std::env::var("OXINFER_WINOGRAD").ok().as_deref()))
    }
}

/// The Winograd variant of a stride-1 `3 × 3` convolution of `cin → cout` channels under
/// `mode`, or `None` for the direct convolution: none below [`WINOGRAD_MIN_CIN`] input
/// channels; F(4×4, 3×3) up to [`WINOGRAD_MAX_CHANNEL_PAIRS`], F(2×2, 3×3) above (the SD 1.5
/// UNet's 1280-channel level: 1.3 GiB more than its packed kernels). Measured there on 2
/// images (`examples/conv_winograd.rs`, best of 5, 2 threads): F(2×2) about 2× the direct
/// convolution from 8 × 8 up (1280 → 1280 at 8 × 8 20.5 → 10.0 ms, 16 × 16 70.8 → 34.7 ms) and
/// even at 4 × 4 (6.6 / 6.4 ms), where F(4×4) took twice the direct time.
pub fn winograd_variant(mode: WinogradMode, cin: usize, cout: usize) -> Option<Variant> {
    if cin < WINOGRAD_MIN_CIN {
        return None;
    }
    let small = cin * cout <= WINOGRAD_MAX_CHANNEL_PAIRS;
    match mode {
        WinogradMode::Off => None,
        WinogradMode::F4Only => small.then_some(Variant::F4x4),
        WinogradMode::F2Only => Some(Variant::F2x2),
        WinogradMode::Auto if small => Some(Variant::F4x4),
        WinogradMode::Auto => Some(Variant::F2x2),
    }
}

/// A convolution kernel `t` `[cout, cin, k, k]` rearranged element by element to the unfolded
/// layout `[cout][ky][kx][cin]` (shape `[cout, k · k · cin]`) of [`crate::nn::conv2d`], in its
/// stored float format (f16 and bf16 stay half the size; the CPU kernels multiply them
/// directly); other formats are converted to f32.
///
/// # Errors
/// `t` is not 4-D, or cannot be read.
pub fn unfold_conv_weight(t: &TensorView) -> Result<TensorView, crate::error::LoadError> {
    let [cout, cin, k, k2] = t.shape[..] else {
        return Err(crate::error::LoadError::tensor(
            t.path(),
            &t.name,
            format!("shape {:?}, expected a [out, in, k, k] kernel", t.shape),
        ));
    };
    let (format, src): (WeightFormat, std::borrow::Cow<[u8]>) = match t.format {
        WeightFormat::F32 | WeightFormat::F16 | WeightFormat::BF16 => {
            (t.format, std::borrow::Cow::Borrowed(t.bytes()))
        }
        _ => (
            WeightFormat::F32,
            std::borrow::Cow::Owned(t.to_f32()?.iter().flat_map(|v| v.to_le_bytes()).collect()),
        ),
    };
    let mut bytes = vec![0u8; src.len()];
    unfold_bytes(&src, &mut bytes, (cout, cin, k * k2));
    Ok(TensorView::from_owned(
        t.path(),
        &t.name,
        format,
        vec![cout, k * k2 * cin],
        bytes,
        Vec::new(),
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The panels of `m`, all of them (padding rows included).
    fn panels(mut m: PackedFloatMatrix) -> Vec<f32> {
        m.panels_mut().flat_map(|p| p.to_vec()).collect()
    }

    /// `n` f32 values (bit patterns that vary in every byte), little-endian.
    fn values(n: usize) -> Vec<u8> {
        (0..n as u32)
            .flat_map(|i| (i.wrapping_mul(2_654_435_761) as f32 / 4e9 - 0.5).to_le_bytes())
            .collect()
    }

    #[test]
    fn winograd_rule_and_switch() {
        use Variant::{F2x2, F4x4};
        assert_eq!(WinogradMode::parse(None), WinogradMode::Auto);
        assert_eq!(WinogradMode::parse(Some("0")), WinogradMode::Off);
        assert_eq!(WinogradMode::parse(Some(" F4 ")), WinogradMode::F4Only);
        assert_eq!(WinogradMode::parse(Some("f2")), WinogradMode::F2Only);
        assert_eq!(WinogradMode::parse(Some("1")), WinogradMode::Auto);
        // (cin, cout, Auto, F4Only, F2Only): conv_in, the 320/640 levels, 1920 -> 640 (the
        // largest F(4x4) layer), 640 -> 1280 (the first of the 1280-channel level, within
        // F(4x4)'s bound), the rest of the 1280-channel level.
        let cases = [
            (4, 320, None, None, None),
            (320, 320, Some(F4x4), Some(F4x4), Some(F2x2)),
            (1920, 640, Some(F4x4), Some(F4x4), Some(F2x2)),
            (640, 1280, Some(F4x4), Some(F4x4), Some(F2x2)),
            (1280, 1280, Some(F2x2), None, Some(F2x2)),
            (2560, 1280, Some(F2x2), None, Some(F2x2)),
        ];
        for (cin, cout, auto, f4, f2) in cases {
            assert_eq!(winograd_variant(WinogradMode::Auto, cin, cout), auto);
            assert_eq!(winograd_variant(WinogradMode::F4Only, cin, cout), f4);
            assert_eq!(winograd_variant(WinogradMode::F2Only, cin, cout), f2);
            assert_eq!(winograd_variant(WinogradMode::Off, cin, cout), None);
        }
    }

    #[test]
    fn packing_the_stored_layout_equals_packing_the_unfolded_one() {
        // Ragged last panels, blocks of channels that do not divide cin, 1 × 1 and 3 × 3.
        for (cout, cin, taps) in [
            (1, 1, 1),
            (17, 3, 9),
            (40, 70, 9),
            (33, 130, 1),
            (16, 64, 9),
        ] {
            let src = values(cout * cin * taps);
            let mut unfolded = vec![0u8; src.len()];
            unfold_bytes(&src, &mut unfolded, (cout, cin, taps));
            let m =
                oxinfer_kernels::WeightMatrix::new(WeightFormat::F32, &unfolded, cout, taps * cin)
                    .unwrap();
            let want = panels(PackedFloatMatrix::pack(&m).unwrap());
            let got = panels(pack_stored(&src, cout, cin, taps).unwrap());
            assert!(
                want.iter()
                    .map(|v| v.to_bits())
                    .eq(got.iter().map(|v| v.to_bits())),
                "{cout}x{cin}x{taps}"
            );
        }
        let e = pack_stored(&values(5), 2, 1, 3).unwrap_err().0;
        assert!(e.contains("expected 2 * 1 * 3"), "{e}");
    }
}
