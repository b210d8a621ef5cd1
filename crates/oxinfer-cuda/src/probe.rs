//! Platform detection for CUDA: is a driver there, which GPUs does it see.

use crate::backend::CudaBackend;
use crate::gpu::driver_present;
use cudarc::driver::{result, sys};
use oxinfer::backend::{Backend, DeviceKind, GpuInfo, Provider};

fn driver_version() -> Option<String> {
    let mut v = 0i32;
    // SAFETY: the driver library is loaded (checked by the caller); `v` is a valid out-pointer.
    let r = unsafe { sys::cuDriverGetVersion(&mut v) };
    (r == sys::CUresult::CUDA_SUCCESS).then(|| format!("{}.{}", v / 1000, (v % 1000) / 10))
}

/// Lists the CUDA GPUs the driver sees.
///
/// # Errors
/// A sentence saying why none can be listed: no driver library, or the driver's error.
pub fn probe() -> Result<Vec<GpuInfo>, String> {
    if !driver_present() {
        return Err("the CUDA driver library (libcuda) was not found".to_string());
    }
    result::init().map_err(|e| format!("cuInit failed: {e:?}"))?;
    let n = result::device::get_count().map_err(|e| format!("cuDeviceGetCount: {e:?}"))?;
    let driver = driver_version().unwrap_or_else(|| "?".to_string());
    let mut out = Vec::new();
    for i in 0..n {
        let dev = result::device::get(i).map_err(|e| format!("cuDeviceGet({i}): {e:?}"))?;
        let name = result::device::get_name(dev).unwrap_or_else(|_| "unknown GPU".to_string());
        // SAFETY: `dev` came from cuDeviceGet.
        let mem = unsafe { result::device::total_mem(dev) }.unwrap_or(0);
        let attr = |a| {
            // SAFETY: `dev` came from cuDeviceGet; `a` is a valid attribute.
            unsafe { result::device::get_attribute(dev, a) }.unwrap_or(0)
        };
        let major = attr(sys::CUdevice_attribute::CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR);
        let minor = attr(sys::CUdevice_attribute::CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR);
        out.push(GpuInfo {
            kind: DeviceKind::Cuda,
            index: i as usize,
            name,
            memory_bytes: mem as u64,
            compute: format!("{major}.{minor}"),
            driver: driver.clone(),
        });
    }
    Ok(out)
}

/// The CUDA [`Provider`] front ends register.
pub struct CudaProvider;

impl Provider for CudaProvider {
    fn kind(&self) -> DeviceKind {
        DeviceKind::Cuda
    }

    fn probe(&self) -> Result<Vec<GpuInfo>, String> {
        probe()
    }

    fn open(&self, index: usize) -> Result<Box<dyn Backend>, String> {
        CudaBackend::new(index).map(|b| Box::new(b) as Box<dyn Backend>)
    }
}
