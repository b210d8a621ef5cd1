//! `OXINFER_WGPU_PROFILE=1` (or `host`): where the time of a pass goes. Per submission, the host time
//! spent recording it (pipelines, bind groups, commands) and the time waiting for the device;
//! per kernel, the calls and the device time between timestamps written around each dispatch
//! (each dispatch then runs in its own compute pass), where the adapter has
//! `Features::TIMESTAMP_QUERY`. `--profile` prints it after the op table
//! ([`crate::WgpuBackend`]'s `stats`).

use std::collections::BTreeMap;
use std::fmt::Write;

/// Most dispatches of one submission that get timestamps (two queries each, within wgpu's
/// 4096 queries per set); later ones count in the host times only.
const MAX_STAMPED: usize = 2048;

/// `OXINFER_WGPU_PROFILE`: `1` times kernels and submissions, `host` only submissions (each
/// dispatch then stays in the one compute pass, as without profiling).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Mode {
    Off,
    Host,
    Kernels,
}

/// The profiling mode (read once).
pub(crate) fn mode() -> Mode {
    static MODE: std::sync::OnceLock<Mode> = std::sync::OnceLock::new();
    *MODE.get_or_init(|| match std::env::var("OXINFER_WGPU_PROFILE").as_deref() {
        Ok("1") => Mode::Kernels,
        Ok("host") => Mode::Host,
        _ => Mode::Off,
    })
}

/// Totals since the device was opened.
#[derive(Default)]
pub(crate) struct Profile {
    /// Per kernel: dispatches, device nanoseconds.
    kernels: BTreeMap<String, (u64, f64)>,
    submissions: u64,
    dispatches: u64,
    record_s: f64,
    wait_s: f64,
}

impl Profile {
    /// Adds one submission of `dispatches` that took `record_s` to record and `wait_s` to finish.
    pub(crate) fn submission(&mut self, dispatches: usize, record_s: f64, wait_s: f64) {
        self.submissions += 1;
        self.dispatches += dispatches as u64;
        self.record_s += record_s;
        self.wait_s += wait_s;
    }

    /// Adds the device time of each stamped kernel (by its label) from its `[begin, end]` ticks.
    pub(crate) fn kernels(&mut self, labels: &[String], ticks: &[u64], period_ns: f32) {
        for (k, t) in labels.iter().zip(ticks.chunks_exact(2)) {
            let e = self.kernels.entry(k.clone()).or_insert((0, 0.0));
            e.0 += 1;
            e.1 += t[1].saturating_sub(t[0]) as f64 * f64::from(period_ns);
        }
    }

    /// The report: submissions with their host times, then kernels by device time.
    pub(crate) fn report(&self) -> String {
        let n = self.submissions.max(1) as f64;
        let mut out = format!(
            "  profile: {} submissions, {:.1} dispatches each, recording {:.3} ms and waiting \
             {:.3} ms per submission\n",
            self.submissions,
            self.dispatches as f64 / n,
            self.record_s * 1e3 / n,
            self.wait_s * 1e3 / n
        );
        let total: f64 = self.kernels.values().map(|v| v.1).sum();
        let mut rows: Vec<_> = self.kernels.iter().collect();
        rows.sort_by(|a, b| b.1 .1.total_cmp(&a.1 .1));
        for (k, (calls, ns)) in rows {
            let _ = writeln!(
                out,
                "  {k:<28} {calls:>7} calls {:>10.3} ms {:>8.2} us/call {:>5.1} %",
                ns / 1e6,
                ns / 1e3 / (*calls).max(1) as f64,
                100.0 * ns / total.max(1.0)
            );
        }
        out
    }
}

/// Timestamp queries for one submission: two per dispatch, resolved and copied to a mappable
/// buffer after the passes.
pub(crate) struct Stamps {
    set: wgpu::QuerySet,
    resolve: wgpu::Buffer,
    read: wgpu::Buffer,
    /// Dispatches stamped.
    pub(crate) n: usize,
}

impl Stamps {
    /// Queries for the first [`MAX_STAMPED`] of `dispatches`.
    pub(crate) fn new(device: &wgpu::Device, dispatches: usize) -> Option<Stamps> {
        let n = dispatches.min(MAX_STAMPED);
        if n == 0 {
            return None;
        }
        let bytes = (16 * n) as u64;
        let set = device.create_query_set(&wgpu::QuerySetDescriptor {
            label: Some("profile"),
            ty: wgpu::QueryType::Timestamp,
            count: 2 * n as u32,
        });
        let buffer = |usage| {
            device.create_buffer(&wgpu::BufferDescriptor {
                label: Some("profile"),
                size: bytes,
                usage,
                mapped_at_creation: false,
            })
        };
        let resolve = buffer(wgpu::BufferUsages::QUERY_RESOLVE | wgpu::BufferUsages::COPY_SRC);
        let read = buffer(wgpu::BufferUsages::MAP_READ | wgpu::BufferUsages::COPY_DST);
        Some(Stamps {
            set,
            resolve,
            read,
            n,
        })
    }

    /// The timestamp writes around dispatch `i`'s pass (`None` past the stamped ones).
    pub(crate) fn writes(&self, i: usize) -> Option<wgpu::ComputePassTimestampWrites<'_>> {
        (i < self.n).then(|| wgpu::ComputePassTimestampWrites {
            query_set: &self.set,
            beginning_of_pass_write_index: Some(2 * i as u32),
            end_of_pass_write_index: Some(2 * i as u32 + 1),
        })
    }

    /// Records the resolve and the copy to the mappable buffer (after the passes).
    pub(crate) fn resolve(&self, enc: &mut wgpu::CommandEncoder) {
        enc.resolve_query_set(&self.set, 0..2 * self.n as u32, &self.resolve, 0);
        enc.copy_buffer_to_buffer(&self.resolve, 0, &self.read, 0, (16 * self.n) as u64);
    }

    /// The ticks, once the submission finished (maps and waits).
    pub(crate) fn ticks(&self, device: &wgpu::Device) -> Result<Vec<u64>, String> {
        let slice = self.read.slice(..);
        let (tx, rx) = std::sync::mpsc::channel();
        slice.map_async(wgpu::MapMode::Read, move |r| {
            let _ = tx.send(r);
        });
        device
            .poll(wgpu::PollType::wait_indefinitely())
            .map_err(|e| format!("device poll: {e}"))?;
        rx.recv()
            .map_err(|e| format!("profile: {e}"))?
            .map_err(|e| format!("profile: {e}"))?;
        let ticks = {
            let view = slice
                .get_mapped_range()
                .map_err(|e| format!("profile: {e}"))?;
            view.chunks_exact(8)
                .map(|b| u64::from_le_bytes(b.try_into().unwrap_or([0; 8])))
                .collect()
        };
        self.read.unmap();
        Ok(ticks)
    }
}
