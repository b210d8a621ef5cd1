//! Platform detection for wgpu: which adapters the native APIs (Vulkan, Metal, DX12) report.

use crate::backend::WgpuBackend;
use crate::gpu::adapters;
use oxinfer::backend::{Backend, DeviceKind, GpuInfo, Provider};

/// Lists the adapters wgpu finds, in the order `--device wgpu` indexes them. Software
/// adapters (Mesa's lavapipe) are listed too: they are how CI tests this backend.
///
/// # Errors
/// A sentence when no API is available at all (no Vulkan loader, no Metal).
pub fn probe() -> Result<Vec<GpuInfo>, String> {
    let list = adapters();
    if list.is_empty() {
        return Err("no Vulkan, Metal or DX12 adapter (is a Vulkan driver installed?)".into());
    }
    Ok(list
        .iter()
        .enumerate()
        .map(|(index, a)| {
            let info = a.get_info();
            GpuInfo {
                kind: DeviceKind::Wgpu,
                index,
                name: info.name.clone(),
                // wgpu does not report device memory; the largest buffer is the closest bound.
                memory_bytes: a.limits().max_buffer_size,
                compute: format!("{:?}, {:?}", info.backend, info.device_type),
                driver: format!("{} {}", info.driver, info.driver_info),
            }
        })
        .collect())
}

/// The wgpu [`Provider`] front ends register. It takes part in `--device auto` only for
/// hardware adapters: a software rasterizer is slower than the CPU kernels.
pub struct WgpuProvider;

impl Provider for WgpuProvider {
    fn kind(&self) -> DeviceKind {
        DeviceKind::Wgpu
    }

    fn probe(&self) -> Result<Vec<GpuInfo>, String> {
        probe()
    }

    fn open(&self, index: usize) -> Result<Box<dyn Backend>, String> {
        WgpuBackend::new(index).map(|b| Box::new(b) as Box<dyn Backend>)
    }

    fn auto(&self) -> bool {
        false
    }
}
