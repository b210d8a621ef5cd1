//! `oxinfer devices`: the CPU (architecture, model, features, cores, memory), the kernel set
//! chosen for it, and accelerators; choosing the compute device (`--device`).

use anyhow::Result;
use oxinfer::backend::{DeviceChoice, DevicePref, Provider};

/// The GPU backends compiled into this binary.
pub fn providers() -> Vec<&'static dyn Provider> {
    vec![
        #[cfg(feature = "cuda")]
        &oxinfer_cuda::CudaProvider,
        #[cfg(feature = "wgpu")]
        &oxinfer_wgpu::WgpuProvider,
    ]
}

/// Installs the backend for `pref` and says on stderr, in one line, which device runs the
/// model when it is a GPU, or when `announce` (the user asked for a GPU, or `--verbose`) also
/// when it is the CPU and why. An explicit `--device cuda` that cannot start is an error.
pub fn select(pref: DevicePref, announce: bool) -> Result<()> {
    let choice = oxinfer::backend::init(&providers(), pref)?;
    if announce || matches!(choice, DeviceChoice::Gpu { .. }) {
        eprintln!("{}", choice.describe());
    }
    Ok(())
}

/// [`select`] for an encoder model (embeddings, reranking): `auto` means the first CUDA GPU
/// when one works, else the CPU. CUDA and wgpu run an encoder plan whole on the device
/// (`Backend::run_encoder`), but wgpu's products are not tiled for throughput yet (on
/// lavapipe, a CPU rasterizer, 86× slower than the CPU kernels; docs/wgpu.md), so `auto`
/// never picks it: `--device wgpu` does.
pub fn select_for_encoder(pref: DevicePref, announce: bool) -> Result<()> {
    if pref != DevicePref::Auto {
        return select(pref, announce);
    }
    select(DevicePref::Cuda, announce).or_else(|e| {
        if announce {
            eprintln!("encoder on the CPU ({e})");
        }
        select(DevicePref::Cpu, false)
    })
}

fn memory_gib() -> Option<f64> {
    let info = std::fs::read_to_string("/proc/meminfo").ok()?;
    let kb: f64 = info
        .lines()
        .find(|l| l.starts_with("MemTotal:"))?
        .split_whitespace()
        .nth(1)?
        .parse()
        .ok()?;
    Some(kb / 1048576.0)
}

#[cfg(target_arch = "x86_64")]
fn features() -> Vec<&'static str> {
    let mut f = Vec::new();
    macro_rules! probe {
        ($($name:tt),* $(,)?) => {$(
            if std::is_x86_feature_detected!($name) {
                f.push($name);
            }
        )*};
    }
    probe!(
        "sse4.2",
        "avx",
        "avx2",
        "fma",
        "f16c",
        "avx512f",
        "avx512bw",
        "avx512vl",
        "avx512dq",
        "avx512vnni",
        "avx512bf16",
        "avx512fp16",
        "avxvnni",
    );
    // AMX detection is not stable in std: read the kernel's flags.
    if let Ok(info) = std::fs::read_to_string("/proc/cpuinfo") {
        if let Some(flags) = info.lines().find(|l| l.starts_with("flags")) {
            for amx in ["amx_tile", "amx_int8", "amx_bf16"] {
                if flags.split_whitespace().any(|w| w == amx) {
                    f.push(amx);
                }
            }
        }
    }
    f
}

#[cfg(target_arch = "aarch64")]
fn features() -> Vec<&'static str> {
    let mut f = Vec::new();
    macro_rules! probe {
        ($($name:tt),* $(,)?) => {$(
            if std::arch::is_aarch64_feature_detected!($name) {
                f.push($name);
            }
        )*};
    }
    probe!("neon", "fp16", "dotprod", "i8mm", "bf16", "sve", "sve2");
    f
}

#[cfg(not(any(target_arch = "x86_64", target_arch = "aarch64")))]
fn features() -> Vec<&'static str> {
    Vec::new()
}

pub fn run() -> Result<()> {
    println!("CPU");
    println!("  architecture: {}", std::env::consts::ARCH);
    println!("  model:        {}", oxinfer::tuning::cpu_name());
    println!(
        "  threads:      {}",
        std::thread::available_parallelism().map_or(1, |n| n.get())
    );
    if let Some(g) = memory_gib() {
        println!("  memory:       {g:.1} GiB");
    }
    println!("  features:     {}", features().join(" "));
    let set = oxinfer_kernels::kernel_set();
    let isa = oxinfer_kernels::vecdot::detected_isa();
    println!(
        "  kernels:      {} ({}; OXINFER_KERNELS={})",
        match set {
            oxinfer_kernels::KernelSet::Scalar => "scalar reference",
            oxinfer_kernels::KernelSet::Auto => "int8 activations, SIMD dot products",
        },
        if set == oxinfer_kernels::KernelSet::Scalar {
            "scalar"
        } else {
            isa.name()
        },
        set.name()
    );
    if set == oxinfer_kernels::KernelSet::Auto && isa.has_vnni() {
        println!("  decode:       {}", oxinfer::tuning::ensure().describe());
    }
    println!("GPU");
    let providers = providers();
    if providers.is_empty() {
        println!("  none: this build has no GPU backend");
    }
    for p in providers {
        match p.probe() {
            Err(e) => println!("  {}: none ({e})", p.kind().as_str()),
            Ok(list) if list.is_empty() => println!("  {}: none (no device)", p.kind().as_str()),
            Ok(list) => {
                for g in list {
                    println!("  {}:{}  {}", g.kind.as_str(), g.index, g.name);
                    println!(
                        "    memory:  {:.1} GiB",
                        g.memory_bytes as f64 / (1u64 << 30) as f64
                    );
                    println!("    compute: {}", g.compute);
                    println!("    driver:  {}", g.driver);
                }
            }
        }
    }
    Ok(())
}
