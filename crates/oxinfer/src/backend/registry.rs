//! The process-wide backend: platform detection (which devices exist), the user's preference
//! (`--device auto|cpu|cuda`), and the one installed [`Backend`].
//!
//! Departure from the spec, whose `init` named each concrete backend behind `cfg`s: this crate
//! cannot depend on the backend crates (they depend on it for the trait), so front ends pass the
//! [`Provider`]s compiled into them. And where the spec fell back to the CPU whatever was asked,
//! here only `auto` falls back; an explicit `--device cuda` that cannot start is an error, so a
//! benchmark never measures the CPU while claiming the GPU.

use super::check::Checked;
use super::Backend;
use std::fmt;
use std::str::FromStr;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::OnceLock;

/// Which device the user asked for.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum DevicePref {
    /// A GPU when one works, else the CPU.
    #[default]
    Auto,
    /// The CPU only.
    Cpu,
    /// The first CUDA GPU; an error when none works.
    Cuda,
    /// The first wgpu adapter (Vulkan, Metal, DX12); an error when none works.
    Wgpu,
}

impl FromStr for DevicePref {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s.to_ascii_lowercase().as_str() {
            "auto" => Ok(Self::Auto),
            "cpu" => Ok(Self::Cpu),
            "cuda" | "gpu" => Ok(Self::Cuda),
            "wgpu" | "vulkan" | "metal" | "dx12" => Ok(Self::Wgpu),
            _ => Err(format!(
                "unknown device {s:?} (expected auto, cpu, cuda or wgpu/vulkan/metal)"
            )),
        }
    }
}

impl fmt::Display for DevicePref {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Self::Auto => "auto",
            Self::Cpu => "cpu",
            Self::Cuda => "cuda",
            Self::Wgpu => "wgpu",
        })
    }
}

impl DevicePref {
    /// Whether this names a GPU (the device line is then printed even on failure).
    pub fn is_gpu(self) -> bool {
        matches!(self, Self::Cuda | Self::Wgpu)
    }
}

/// Kind of accelerator a [`Provider`] drives.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum DeviceKind {
    /// NVIDIA GPUs through the CUDA driver API.
    Cuda,
    /// Any GPU through wgpu (Vulkan, Metal, DX12).
    Wgpu,
}

impl DeviceKind {
    /// Lower-case name (`"cuda"`).
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Cuda => "cuda",
            Self::Wgpu => "wgpu",
        }
    }
}

/// One GPU found by platform detection.
#[derive(Clone, Debug)]
pub struct GpuInfo {
    pub kind: DeviceKind,
    /// Ordinal within its kind.
    pub index: usize,
    pub name: String,
    /// Total device memory in bytes.
    pub memory_bytes: u64,
    /// Compute capability (`"9.0"`) or the API's equivalent.
    pub compute: String,
    /// Driver version as the driver reports it (`"13.0"`).
    pub driver: String,
}

/// A backend family compiled into the front end: lists its devices and opens one.
pub trait Provider: Send + Sync {
    /// The kind of device this provider drives.
    fn kind(&self) -> DeviceKind;
    /// Every device of this kind; `Err` says why none can be used (library not found, driver
    /// error), which `oxinfer devices` prints.
    fn probe(&self) -> Result<Vec<GpuInfo>, String>;
    /// Starts a backend on device `index` (loads libraries, compiles kernels).
    fn open(&self, index: usize) -> Result<Box<dyn Backend>, String>;
    /// Whether `--device auto` may pick this provider (else only its explicit name does).
    fn auto(&self) -> bool {
        true
    }
}

/// An explicitly requested device that could not be used.
#[derive(Debug, thiserror::Error)]
pub enum BackendError {
    #[error("--device {pref}: {reason}")]
    Unavailable { pref: DevicePref, reason: String },
}

/// What [`init`] chose.
pub enum DeviceChoice {
    /// The CPU kernels; `why` says why no GPU was taken when `auto` found none that works.
    Cpu { why: Option<String> },
    /// A GPU backend, installed.
    Gpu {
        info: GpuInfo,
        backend: &'static dyn Backend,
    },
}

impl DeviceChoice {
    /// One line for stderr (`device: cuda:0 NVIDIA H200, 139.8 GiB, compute 9.0`).
    pub fn describe(&self) -> String {
        match self {
            DeviceChoice::Cpu { why: None } => "device: cpu".to_string(),
            DeviceChoice::Cpu { why: Some(w) } => format!("device: cpu ({w})"),
            DeviceChoice::Gpu { info, .. } => format!(
                "device: {}:{} {}, {:.1} GiB, compute {}",
                info.kind.as_str(),
                info.index,
                info.name,
                info.memory_bytes as f64 / (1u64 << 30) as f64,
                info.compute
            ),
        }
    }
}

static ACTIVE: OnceLock<Option<Box<dyn Backend>>> = OnceLock::new();

/// Installs the backend for this process (the first call wins; later ones are ignored).
/// Call before loading models: layers upload their weights on first use.
pub fn install(b: Option<Box<dyn Backend>>) {
    let _ = ACTIVE.set(b);
}

/// Live [`cpu_only`] guards.
static CPU_ONLY: AtomicUsize = AtomicUsize::new(0);

thread_local! {
    /// Live [`cpu_only_here`] guards of this thread.
    static CPU_ONLY_HERE: std::cell::Cell<usize> = const { std::cell::Cell::new(0) };
}

/// The installed backend, if any (none while a [`cpu_only`] guard lives, nor on a thread
/// holding a [`cpu_only_here`] guard).
pub fn active() -> Option<&'static dyn Backend> {
    if CPU_ONLY.load(Ordering::Acquire) > 0 || CPU_ONLY_HERE.with(|c| c.get()) > 0 {
        return None;
    }
    ACTIVE.get().and_then(|b| b.as_deref())
}

/// While the returned guard lives, [`active`] answers `None` on every thread, so what runs
/// meanwhile runs on the CPU: the checker's CPU twin of a device run, and test backends that
/// answer with the CPU executor. Process-wide: other threads' work also stays on the CPU then.
pub fn cpu_only() -> CpuOnly {
    CPU_ONLY.fetch_add(1, Ordering::AcqRel);
    CpuOnly(())
}

/// Guard of [`cpu_only`].
pub struct CpuOnly(());

/// While the returned guard lives, [`active`] answers `None` on this thread only: work this
/// thread starts runs on the CPU (an encoder plan the device declined runs whole on the host
/// rather than op by op), while other threads keep the device.
pub fn cpu_only_here() -> CpuOnlyHere {
    CPU_ONLY_HERE.with(|c| c.set(c.get() + 1));
    CpuOnlyHere(std::marker::PhantomData)
}

/// Guard of [`cpu_only_here`] (bound to its thread: not `Send`).
pub struct CpuOnlyHere(std::marker::PhantomData<*const ()>);

impl Drop for CpuOnlyHere {
    fn drop(&mut self) {
        CPU_ONLY_HERE.with(|c| c.set(c.get() - 1));
    }
}

impl Drop for CpuOnly {
    fn drop(&mut self) {
        CPU_ONLY.fetch_sub(1, Ordering::AcqRel);
    }
}

/// Whether `OXINFER_GPU_CHECK` asks for every device op to be recomputed on the CPU.
fn check_enabled() -> bool {
    std::env::var("OXINFER_GPU_CHECK").is_ok_and(|v| !v.is_empty() && v != "0")
}

/// Picks a device from `providers` for `pref`, opens it and installs it (wrapped in the
/// CPU-recomputing checker when `OXINFER_GPU_CHECK=1`).
///
/// # Errors
/// [`BackendError::Unavailable`] when `pref` names a device kind that is not compiled in, has no
/// device, or fails to start. `Auto` never fails: it falls back to the CPU and says why.
pub fn init(providers: &[&dyn Provider], pref: DevicePref) -> Result<DeviceChoice, BackendError> {
    let want = match pref {
        DevicePref::Cpu => {
            install(None);
            return Ok(DeviceChoice::Cpu { why: None });
        }
        DevicePref::Auto => None,
        DevicePref::Cuda => Some(DeviceKind::Cuda),
        DevicePref::Wgpu => Some(DeviceKind::Wgpu),
    };
    let fail = |reason: String| BackendError::Unavailable { pref, reason };
    let mut why = Vec::new();
    let candidates = providers
        .iter()
        .filter(|p| want.map_or(p.auto(), |k| p.kind() == k));
    let mut tried = false;
    for p in candidates {
        tried = true;
        let devices = match p.probe() {
            Ok(d) if d.is_empty() => {
                why.push(format!("no {} device", p.kind().as_str()));
                continue;
            }
            Ok(d) => d,
            Err(e) => {
                why.push(format!("no {} device: {e}", p.kind().as_str()));
                continue;
            }
        };
        let info = devices[0].clone();
        match p.open(info.index) {
            Ok(b) => {
                let b: Box<dyn Backend> = if check_enabled() {
                    Box::new(Checked::new(b))
                } else {
                    b
                };
                install(Some(b));
                let backend = active().expect("just installed");
                return Ok(DeviceChoice::Gpu { info, backend });
            }
            Err(e) => why.push(format!(
                "{}:{} {} failed to start: {e}",
                info.kind.as_str(),
                info.index,
                info.name
            )),
        }
    }
    if !tried {
        why.push(match want {
            Some(k) => format!("this build has no {} backend", k.as_str()),
            None => "this build has no GPU backend".to_string(),
        });
    }
    let why = why.join("; ");
    if want.is_some() {
        return Err(fail(why));
    }
    install(None);
    Ok(DeviceChoice::Cpu { why: Some(why) })
}

/// The `OXINFER_GPU_CHECK` summary (worst relative error per op kind), when checking is on and
/// some device op ran; front ends print it at exit.
pub fn check_report() -> Option<String> {
    check_enabled().then(super::check::report).flatten()
}
