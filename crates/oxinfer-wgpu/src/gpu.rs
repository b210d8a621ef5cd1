//! One wgpu device: adapter discovery, the device and queue, compiled kernels, buffers, and
//! [`Gpu::run`], which records a list of [`Dispatch`]es into one compute pass, submits it and
//! reads results back.
//!
//! Every kernel takes its parameters as 16 `u32` words in a uniform buffer (floats as bits):
//! WebGPU has no push constants, so one uniform buffer per submission holds every dispatch's
//! words at 256-byte steps. Storage bindings follow one convention across the shaders
//! (`shaders/common.wgsl`): 1 the activations (`A`), 2 a second f32 buffer (`B`: a KV cache or
//! the activations again), 3 weight bytes, 4 split-format scales, 5 per-pass constants (norm
//! gains, biases, RoPE tables, row indices).

use crate::kernels::{Dispatch, Kernel};
use crate::profile::{self, Profile, Stamps};
use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use wgpu::util::DeviceExt;

/// Bytes between two dispatches' parameter words (the uniform offset alignment).
const PARAM_STEP: u64 = 256;
/// Most workgroups along one dispatch dimension.
const MAX_GROUPS_X: u32 = 65535;

/// A wgpu instance over every native API this build has.
pub(crate) fn instance() -> wgpu::Instance {
    wgpu::Instance::new(wgpu::InstanceDescriptor::new_without_display_handle_from_env())
}

/// Every adapter of every native API wgpu was built with, hardware first (discrete, then
/// integrated, virtual, software), narrowed to names containing `WGPU_ADAPTER_NAME` when set.
pub(crate) fn adapters() -> Vec<wgpu::Adapter> {
    let mut list = pollster::block_on(instance().enumerate_adapters(wgpu::Backends::all()));
    if let Ok(want) = std::env::var("WGPU_ADAPTER_NAME") {
        let want = want.to_lowercase();
        list.retain(|a| a.get_info().name.to_lowercase().contains(&want));
    }
    list.sort_by_key(|a| match a.get_info().device_type {
        wgpu::DeviceType::DiscreteGpu => 0,
        wgpu::DeviceType::IntegratedGpu => 1,
        wgpu::DeviceType::VirtualGpu => 2,
        wgpu::DeviceType::Other => 3,
        wgpu::DeviceType::Cpu => 4,
    });
    list
}

/// The last submission's bind groups and their keys (kernel, storage buffers) by position, and
/// the uniform buffer of parameter words they bind.
#[derive(Default)]
struct Bound {
    params: Option<wgpu::Buffer>,
    /// Dispatches `params` has room for.
    capacity: usize,
    keys: Vec<(Kernel, Vec<(u32, wgpu::Buffer)>)>,
    groups: Vec<wgpu::BindGroup>,
}

/// Dispatches per submission within one [`Gpu::run`] (`OXINFER_WGPU_SUBMIT_EVERY`, default 64;
/// `0`: the whole run in one submission).
fn submit_every() -> Option<usize> {
    static EVERY: std::sync::OnceLock<Option<usize>> = std::sync::OnceLock::new();
    *EVERY.get_or_init(|| {
        let v = std::env::var("OXINFER_WGPU_SUBMIT_EVERY").ok();
        match v.and_then(|v| v.parse::<usize>().ok()) {
            Some(0) => None,
            Some(n) => Some(n),
            None => Some(64),
        }
    })
}

/// An opened device with its kernels.
pub struct Gpu {
    pub(crate) device: wgpu::Device,
    pub(crate) queue: wgpu::Queue,
    pub(crate) info: wgpu::AdapterInfo,
    pub(crate) limits: wgpu::Limits,
    pipelines: Mutex<HashMap<Kernel, wgpu::ComputePipeline>>,
    bound: Mutex<Bound>,
    /// Totals under `OXINFER_WGPU_PROFILE=1` ([`crate::profile`]).
    profile: Option<Mutex<Profile>>,
    /// Whether dispatches are timed (profiling, and the adapter has timestamp queries).
    stamps: bool,
    /// Whether kernels may use subgroup operations (the adapter has them, and
    /// `OXINFER_WGPU_SUBGROUPS` is not `0`).
    pub(crate) subgroups: bool,
    /// The first device error since the last check (wgpu reports them out of band).
    error: Arc<Mutex<Option<String>>>,
}

impl std::fmt::Debug for Gpu {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Gpu")
            .field("adapter", &self.info.name)
            .finish()
    }
}

impl Gpu {
    /// Opens adapter `index` of [`adapters`] with its best limits.
    pub(crate) fn open(index: usize) -> Result<Gpu, String> {
        let adapter = adapters()
            .into_iter()
            .nth(index)
            .ok_or_else(|| format!("no wgpu adapter {index}"))?;
        let info = adapter.get_info();
        let limits = adapter.limits();
        let profiling = profile::mode() != profile::Mode::Off;
        let has = adapter.features();
        let stamps = profile::mode() == profile::Mode::Kernels
            && has.contains(wgpu::Features::TIMESTAMP_QUERY);
        let subgroups = has.contains(wgpu::Features::SUBGROUP)
            && std::env::var("OXINFER_WGPU_SUBGROUPS").map_or(true, |v| v != "0");
        let mut features = wgpu::Features::empty();
        features.set(wgpu::Features::TIMESTAMP_QUERY, stamps);
        features.set(wgpu::Features::SUBGROUP, subgroups);
        let desc = wgpu::DeviceDescriptor {
            label: Some("oxinfer"),
            required_features: features,
            required_limits: limits.clone(),
            ..Default::default()
        };
        let (device, queue) = pollster::block_on(adapter.request_device(&desc))
            .map_err(|e| format!("{}: request_device: {e}", info.name))?;
        let error = Arc::new(Mutex::new(None));
        let slot = error.clone();
        device.on_uncaptured_error(Arc::new(move |e: wgpu::Error| {
            let mut s = slot.lock().unwrap_or_else(|p| p.into_inner());
            s.get_or_insert_with(|| e.to_string());
        }));
        Ok(Gpu {
            device,
            queue,
            info,
            limits,
            pipelines: Mutex::new(HashMap::new()),
            bound: Mutex::new(Bound::default()),
            profile: profiling.then(|| Mutex::new(Profile::default())),
            stamps,
            subgroups,
            error,
        })
    }

    /// The profile's report (`OXINFER_WGPU_PROFILE=1`), if profiling.
    pub(crate) fn profile_report(&self) -> Option<String> {
        let p = self.profile.as_ref()?;
        let mut r = p.lock().unwrap_or_else(|e| e.into_inner()).report();
        if !self.stamps {
            r.push_str("  (no per-kernel times: the adapter has no timestamp queries)\n");
        }
        Some(r)
    }

    /// The device error reported since the last call, if any.
    pub(crate) fn check(&self) -> Result<(), String> {
        match self.error.lock().unwrap_or_else(|p| p.into_inner()).take() {
            Some(e) => Err(e),
            None => Ok(()),
        }
    }

    /// The most bytes one storage buffer binding may hold on this device.
    pub(crate) fn max_binding(&self) -> u64 {
        self.limits
            .max_buffer_size
            .min(self.limits.max_storage_buffer_binding_size)
    }

    /// Whether a storage buffer of `bytes` can be bound.
    pub(crate) fn fits(&self, bytes: u64) -> bool {
        bytes <= self.limits.max_buffer_size && bytes <= self.limits.max_storage_buffer_binding_size
    }

    /// A storage buffer holding `data` (padded to 4 bytes).
    pub(crate) fn buffer_init(&self, label: &str, data: &[u8]) -> wgpu::Buffer {
        let mut padded;
        let contents = if data.len().is_multiple_of(4) && !data.is_empty() {
            data
        } else {
            padded = data.to_vec();
            padded.resize(data.len().next_multiple_of(4).max(4), 0);
            &padded
        };
        self.device
            .create_buffer_init(&wgpu::util::BufferInitDescriptor {
                label: Some(label),
                contents,
                usage: wgpu::BufferUsages::STORAGE
                    | wgpu::BufferUsages::COPY_DST
                    | wgpu::BufferUsages::COPY_SRC,
            })
    }

    /// An uninitialized storage buffer of `bytes` (at least 4).
    pub(crate) fn buffer(&self, label: &str, bytes: u64) -> wgpu::Buffer {
        self.device.create_buffer(&wgpu::BufferDescriptor {
            label: Some(label),
            size: bytes.max(4).next_multiple_of(4),
            usage: wgpu::BufferUsages::STORAGE
                | wgpu::BufferUsages::COPY_DST
                | wgpu::BufferUsages::COPY_SRC,
            mapped_at_creation: false,
        })
    }

    /// Queues `data` into `buf` at element `at` (written before the next submission runs).
    pub(crate) fn write(&self, buf: &wgpu::Buffer, at: usize, data: &[f32]) {
        if !data.is_empty() {
            let bytes: Vec<u8> = data.iter().flat_map(|v| v.to_le_bytes()).collect();
            self.queue.write_buffer(buf, (at * 4) as u64, &bytes);
        }
    }

    fn pipeline(&self, k: Kernel) -> Result<wgpu::ComputePipeline, String> {
        let mut cache = self.pipelines.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(p) = cache.get(&k) {
            return Ok(p.clone());
        }
        let module = self
            .device
            .create_shader_module(wgpu::ShaderModuleDescriptor {
                label: Some(k.entry()),
                source: wgpu::ShaderSource::Wgsl(k.source(self.subgroups).into()),
            });
        let p = self
            .device
            .create_compute_pipeline(&wgpu::ComputePipelineDescriptor {
                label: Some(k.entry()),
                layout: None,
                module: &module,
                entry_point: Some(k.entry()),
                compilation_options: Default::default(),
                cache: None,
            });
        self.check()
            .map_err(|e| format!("compiling kernel {k:?}: {e}"))?;
        cache.insert(k, p.clone());
        Ok(p)
    }

    /// Runs `items` in order in one compute pass, then copies each `(buffer, first element,
    /// destination)` of `reads` back to the host (waiting for the device when there are any).
    pub(crate) fn run(
        &self,
        items: &[Dispatch],
        reads: &mut [(&wgpu::Buffer, usize, &mut [f32])],
    ) -> Result<(), String> {
        let start = std::time::Instant::now();
        let pipelines = items
            .iter()
            .map(|d| self.pipeline(d.kernel))
            .collect::<Result<Vec<_>, _>>()?;
        // Held until the submission: the parameter words it writes are this submission's.
        let mut bound = self.bound.lock().unwrap_or_else(|e| e.into_inner());
        let groups = self.bind_groups(&mut bound, items, &pipelines);
        let mut enc = self
            .device
            .create_command_encoder(&wgpu::CommandEncoderDescriptor { label: None });
        let launch = |pass: &mut wgpu::ComputePass, d: &Dispatch, p, g| {
            if d.groups > 0 {
                let x = d.groups.min(MAX_GROUPS_X);
                pass.set_pipeline(p);
                pass.set_bind_group(0, g, &[]);
                pass.dispatch_workgroups(x, d.groups.div_ceil(x), 1);
            }
        };
        let stamps = self
            .stamps
            .then(|| Stamps::new(&self.device, items.len()))
            .flatten();
        if let Some(st) = &stamps {
            // Profiling: each dispatch in its own pass, between two timestamps.
            for (i, ((d, p), g)) in items.iter().zip(&pipelines).zip(&groups).enumerate() {
                let mut pass = enc.begin_compute_pass(&wgpu::ComputePassDescriptor {
                    label: None,
                    timestamp_writes: st.writes(i),
                });
                launch(&mut pass, d, p, g);
            }
            st.resolve(&mut enc);
        } else {
            // Every `submit_every()` dispatches but the last ones go to the device as soon as
            // they are recorded, so it runs them while the host records the rest.
            let every = submit_every().unwrap_or(items.len()).max(1);
            let all: Vec<_> = items.iter().zip(&pipelines).zip(&groups).collect();
            let mut chunks = all.chunks(every).peekable();
            while let Some(chunk) = chunks.next() {
                {
                    let mut pass = enc.begin_compute_pass(&wgpu::ComputePassDescriptor::default());
                    for ((d, p), g) in chunk {
                        launch(&mut pass, d, p, g);
                    }
                }
                if chunks.peek().is_some() {
                    let next = self
                        .device
                        .create_command_encoder(&wgpu::CommandEncoderDescriptor { label: None });
                    self.queue
                        .submit([std::mem::replace(&mut enc, next).finish()]);
                }
            }
        }
        let total: u64 = reads.iter().map(|r| r.2.len() as u64 * 4).sum();
        let staging = (total > 0).then(|| {
            self.device.create_buffer(&wgpu::BufferDescriptor {
                label: Some("readback"),
                size: total,
                usage: wgpu::BufferUsages::MAP_READ | wgpu::BufferUsages::COPY_DST,
                mapped_at_creation: false,
            })
        });
        if let Some(st) = &staging {
            let mut at = 0u64;
            for (buf, first, dst) in reads.iter() {
                let n = dst.len() as u64 * 4;
                if n > 0 {
                    enc.copy_buffer_to_buffer(buf, *first as u64 * 4, st, at, n);
                }
                at += n;
            }
        }
        self.queue.submit([enc.finish()]);
        drop(bound);
        self.check()?;
        if let Some(prof) = &self.profile {
            let recorded = start.elapsed().as_secs_f64();
            self.wait()?;
            let waited = start.elapsed().as_secs_f64() - recorded;
            let ticks = match &stamps {
                Some(st) => st.ticks(&self.device)?,
                None => Vec::new(),
            };
            let labels: Vec<String> = items.iter().map(Dispatch::label).collect();
            let mut p = prof.lock().unwrap_or_else(|e| e.into_inner());
            p.submission(items.len(), recorded, waited);
            p.kernels(&labels, &ticks, self.queue.get_timestamp_period());
        }
        let Some(st) = staging else {
            return self.wait();
        };
        let slice = st.slice(..);
        let (tx, rx) = std::sync::mpsc::channel();
        slice.map_async(wgpu::MapMode::Read, move |r| {
            let _ = tx.send(r);
        });
        self.wait()?;
        rx.recv()
            .map_err(|e| format!("readback: {e}"))?
            .map_err(|e| format!("readback: {e}"))?;
        {
            let view = slice
                .get_mapped_range()
                .map_err(|e| format!("readback: {e}"))?;
            let mut at = 0usize;
            for (_, _, dst) in reads.iter_mut() {
                let n = dst.len() * 4;
                for (v, b) in dst.iter_mut().zip(view[at..at + n].chunks_exact(4)) {
                    *v = f32::from_le_bytes([b[0], b[1], b[2], b[3]]);
                }
                at += n;
            }
        }
        st.unmap();
        Ok(())
    }

    /// The bind groups of `items` (parameter words at 256-byte steps of one uniform buffer, then
    /// the storage buffers), reusing those of the previous submission where a dispatch at the
    /// same position has the same kernel and buffers: a decode step records the same dispatches
    /// as the last one with other parameter words, which are written into the kept uniform
    /// buffer. Only the last submission's groups are kept (they hold their buffers alive).
    fn bind_groups(
        &self,
        b: &mut Bound,
        items: &[Dispatch],
        pipelines: &[wgpu::ComputePipeline],
    ) -> Vec<wgpu::BindGroup> {
        let mut param_bytes = vec![0u8; items.len().max(1) * PARAM_STEP as usize];
        for (i, d) in items.iter().enumerate() {
            let at = i * PARAM_STEP as usize;
            for (j, w) in d.params.iter().enumerate() {
                param_bytes[at + 4 * j..at + 4 * j + 4].copy_from_slice(&w.to_le_bytes());
            }
        }
        if b.capacity < items.len().max(1) {
            let capacity = items.len().max(1).next_power_of_two();
            b.params = Some(self.device.create_buffer(&wgpu::BufferDescriptor {
                label: Some("params"),
                size: capacity as u64 * PARAM_STEP,
                usage: wgpu::BufferUsages::UNIFORM | wgpu::BufferUsages::COPY_DST,
                mapped_at_creation: false,
            }));
            b.capacity = capacity;
            b.keys.clear();
            b.groups.clear();
        }
        let Bound {
            params,
            keys,
            groups,
            ..
        } = b;
        let params = params.as_ref().expect("allocated above");
        self.queue.write_buffer(params, 0, &param_bytes);
        keys.truncate(items.len());
        groups.truncate(items.len());
        for (i, (d, p)) in items.iter().zip(pipelines).enumerate() {
            if keys
                .get(i)
                .is_some_and(|k| k.0 == d.kernel && k.1 == d.bufs)
            {
                continue;
            }
            let mut entries = vec![wgpu::BindGroupEntry {
                binding: 0,
                resource: wgpu::BindingResource::Buffer(wgpu::BufferBinding {
                    buffer: params,
                    offset: i as u64 * PARAM_STEP,
                    size: wgpu::BufferSize::new(64),
                }),
            }];
            entries.extend(d.bufs.iter().map(|(b, buf)| wgpu::BindGroupEntry {
                binding: *b,
                resource: buf.as_entire_binding(),
            }));
            let g = self.device.create_bind_group(&wgpu::BindGroupDescriptor {
                label: None,
                layout: &p.get_bind_group_layout(0),
                entries: &entries,
            });
            let key = (d.kernel, d.bufs.clone());
            if i < keys.len() {
                keys[i] = key;
                groups[i] = g;
            } else {
                keys.push(key);
                groups.push(g);
            }
        }
        groups.clone()
    }

    /// Blocks until the queue drained; reports any device error.
    pub(crate) fn wait(&self) -> Result<(), String> {
        self.device
            .poll(wgpu::PollType::wait_indefinitely())
            .map_err(|e| format!("device poll: {e}"))?;
        self.check()
    }

    /// Copies `bytes` from `src` at byte `from` to `dst` at byte `to` and waits.
    pub(crate) fn copy(
        &self,
        src: &wgpu::Buffer,
        from: u64,
        dst: &wgpu::Buffer,
        to: u64,
        bytes: u64,
    ) -> Result<(), String> {
        let mut enc = self
            .device
            .create_command_encoder(&wgpu::CommandEncoderDescriptor { label: None });
        enc.copy_buffer_to_buffer(src, from, dst, to, bytes);
        self.queue.submit([enc.finish()]);
        self.wait()
    }
}
