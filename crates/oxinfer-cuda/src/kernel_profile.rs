//! `--profile` (or `OXINFER_CUDA_PROFILE=kernels`): the device time of every kernel launch,
//! summed per kernel, with the weight bandwidth of the GEMVs and the peak device memory in use:
//! a table in the backend's `stats()` (printed by the CLI's `--profile`), or on stderr when the
//! device closes if nobody asked for it.
//!
//! Each launch is bracketed by two CUDA events (graphs are off in this mode, so launches are
//! issued one by one); the pairs are read back at the next stream synchronisation. Each row
//! also gives the kernel's registers per thread and local (spilled) bytes per thread. An event
//! pair measures the kernel plus the gap before the next event, so the times are upper bounds
//! of each kernel's own duration; their sum is the stream's busy time.

use cudarc::driver::{result, sys};
use std::collections::HashMap;

/// Whether kernels are timed: `--profile` (the kernels crate's profile switch, set before a
/// device opens) or `OXINFER_CUDA_PROFILE=kernels`.
pub(crate) fn enabled() -> bool {
    oxinfer_kernels::profile::enabled()
        || std::env::var("OXINFER_CUDA_PROFILE").is_ok_and(|v| v == "kernels")
}

/// One kernel's totals.
#[derive(Default, Clone, Copy)]
struct Total {
    calls: u64,
    ms: f64,
    /// Weight bytes read by the calls that declared them (GEMVs), and those calls' time.
    bytes: u64,
    bytes_ms: f64,
}

/// Launch timings of one device, per kernel.
#[derive(Default)]
pub(crate) struct KernelProfile {
    /// Launches not yet read back: kernel, declared bytes, start and end events.
    pending: Vec<(usize, u64, sys::CUevent, sys::CUevent)>,
    /// Events ready for reuse.
    free: Vec<sys::CUevent>,
    totals: HashMap<usize, Total>,
    /// Peak of (total − free) device memory seen at the synchronisations, bytes.
    peak_used: usize,
    total_mem: usize,
    /// Whether the table was handed out (then it is not printed again when the device closes).
    pub(crate) reported: bool,
}

impl KernelProfile {
    fn event(&mut self) -> Result<sys::CUevent, String> {
        match self.free.pop() {
            Some(e) => Ok(e),
            None => result::event::create(sys::CUevent_flags::CU_EVENT_DEFAULT)
                .map_err(|e| format!("cuEventCreate: {e:?}")),
        }
    }

    /// Records the start event of a launch of `f` on `stream`; returns the end event to pass
    /// to [`Self::after`] once the launch is queued.
    pub(crate) fn before(
        &mut self,
        stream: sys::CUstream,
    ) -> Result<(sys::CUevent, sys::CUevent), String> {
        let (a, b) = (self.event()?, self.event()?);
        // SAFETY: a live event of the bound context and a live stream.
        unsafe { result::event::record(a, stream) }.map_err(|e| format!("{e:?}"))?;
        Ok((a, b))
    }

    /// Records the end event of a launch of `f` that read `bytes` weight bytes (0: unknown).
    pub(crate) fn after(
        &mut self,
        stream: sys::CUstream,
        f: sys::CUfunction,
        bytes: u64,
        (a, b): (sys::CUevent, sys::CUevent),
    ) -> Result<(), String> {
        // SAFETY: as in `before`.
        unsafe { result::event::record(b, stream) }.map_err(|e| format!("{e:?}"))?;
        self.pending.push((f as usize, bytes, a, b));
        Ok(())
    }

    /// Reads back every pending pair; the stream must be idle (called after a synchronisation).
    pub(crate) fn collect(&mut self) {
        for (f, bytes, a, b) in std::mem::take(&mut self.pending) {
            // SAFETY: both events were recorded on the stream, which has completed.
            if let Ok(ms) = unsafe { result::event::elapsed(a, b) } {
                let t = self.totals.entry(f).or_default();
                t.calls += 1;
                t.ms += f64::from(ms);
                if bytes > 0 {
                    t.bytes += bytes;
                    t.bytes_ms += f64::from(ms);
                }
            }
            self.free.extend([a, b]);
        }
        let (mut free, mut total) = (0usize, 0usize);
        // SAFETY: valid out-pointers; the context is bound.
        if unsafe { sys::cuMemGetInfo_v2(&mut free, &mut total) }
            .result()
            .is_ok()
        {
            self.peak_used = self.peak_used.max(total - free);
            self.total_mem = total;
        }
    }

    /// The table, kernels by total time (names from `names`); empty when nothing ran.
    pub(crate) fn report(&self, names: &HashMap<usize, String>) -> String {
        let mut rows: Vec<(&usize, &Total)> = self.totals.iter().collect();
        rows.sort_by(|a, b| b.1.ms.total_cmp(&a.1.ms));
        let all: f64 = rows.iter().map(|r| r.1.ms).sum();
        if rows.is_empty() {
            return String::new();
        }
        let mut s = format!(
            "[cuda kernels: {all:.2} ms of device time in {} launches; peak device memory in use \
             {:.0} MiB of {:.0} MiB]\n{:<28} {:>8} {:>10} {:>6} {:>9} {:>8} {:>5} {:>6}\n",
            rows.iter().map(|r| r.1.calls).sum::<u64>(),
            self.peak_used as f64 / (1 << 20) as f64,
            self.total_mem as f64 / (1 << 20) as f64,
            "kernel",
            "calls",
            "total ms",
            "share",
            "mean µs",
            "GB/s",
            "regs",
            "spill"
        );
        for (f, t) in rows {
            let name = names.get(f).map_or("?", String::as_str);
            let gbs = if t.bytes_ms > 0.0 {
                format!("{:.0}", t.bytes as f64 / t.bytes_ms / 1e6)
            } else {
                String::new()
            };
            let attr = |a: sys::CUfunction_attribute| {
                let mut v = 0i32;
                // SAFETY: `f` is a live kernel of the loaded module; `v` a valid out-pointer.
                unsafe { sys::cuFuncGetAttribute(&mut v, a, *f as sys::CUfunction) };
                v
            };
            let regs = attr(sys::CUfunction_attribute::CU_FUNC_ATTRIBUTE_NUM_REGS);
            let local = attr(sys::CUfunction_attribute::CU_FUNC_ATTRIBUTE_LOCAL_SIZE_BYTES);
            s += &format!(
                "{name:<28} {:>8} {:>10.3} {:>5.1}% {:>9.2} {gbs:>8} {regs:>5} {local:>6}\n",
                t.calls,
                t.ms,
                100.0 * t.ms / all,
                1e3 * t.ms / t.calls as f64
            );
        }
        s
    }

    /// Destroys the events (the context must be bound and the stream idle).
    pub(crate) fn clear(&mut self) {
        self.collect();
        for e in self.free.drain(..) {
            // SAFETY: events created by `event`, destroyed once.
            let _ = unsafe { result::event::destroy(e) };
        }
    }
}
