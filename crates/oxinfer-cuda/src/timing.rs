//! `OXINFER_CUDA_PROFILE=1`: device time of one stack pass (CUDA events) against the host's
//! wall time, on stderr.

use crate::gpu::Gpu;
use cudarc::driver::{result, sys};

/// `OXINFER_CUDA_PROFILE=1`: per stack call, the device time from the first upload to the last
/// kernel (CUDA events) against the host's wall time, on stderr.
pub(crate) struct Timing {
    wall: std::time::Instant,
    launch: std::cell::Cell<f64>,
    ev: [sys::CUevent; 2],
}

impl Timing {
    pub(crate) fn start(g: &Gpu) -> Result<Option<Self>, String> {
        if !std::env::var("OXINFER_CUDA_PROFILE").is_ok_and(|v| v == "1") {
            return Ok(None);
        }
        let mk = || {
            result::event::create(sys::CUevent_flags::CU_EVENT_DEFAULT)
                .map_err(|e| format!("{e:?}"))
        };
        let ev = [mk()?, mk()?];
        // SAFETY: live event and stream.
        unsafe { result::event::record(ev[0], g.stream) }.map_err(|e| format!("{e:?}"))?;
        Ok(Some(Timing {
            wall: std::time::Instant::now(),
            launch: std::cell::Cell::new(0.0),
            ev,
        }))
    }

    pub(crate) fn launched(&self, g: &Gpu) -> Result<(), String> {
        self.launch.set(self.wall.elapsed().as_secs_f64() * 1e3);
        // SAFETY: live event and stream.
        unsafe { result::event::record(self.ev[1], g.stream) }.map_err(|e| format!("{e:?}"))
    }

    pub(crate) fn report(self, g: &Gpu, t: usize) -> Result<(), String> {
        g.sync()?;
        // SAFETY: both events were recorded on the stream, which is idle now.
        let dev = unsafe { result::event::elapsed(self.ev[0], self.ev[1]) }
            .map_err(|e| format!("{e:?}"))?;
        eprintln!(
            "[cuda stack: t={t}, device {dev:.2} ms, host wall {:.2} ms, launches {:.2} ms, \
             graphs captured {} replayed {}]",
            self.wall.elapsed().as_secs_f64() * 1e3,
            self.launch.get(),
            g.graphs.captured,
            g.graphs.replayed
        );
        // SAFETY: events created above, destroyed once.
        unsafe {
            let _ = result::event::destroy(self.ev[0]);
            let _ = result::event::destroy(self.ev[1]);
        }
        Ok(())
    }
}
