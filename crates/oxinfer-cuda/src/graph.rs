//! CUDA graphs for decode steps: a step's launches are recorded on the host instead of being
//! issued, compared with the steps replayed before, and replayed as one instantiated graph
//! (`cuGraphLaunch`) when an earlier step queued exactly the same launches; otherwise the
//! recording is captured into a new graph once (`cuStreamBeginCapture`) and kept.
//!
//! Why compare whole recordings instead of updating kernel nodes (llama.cpp's
//! `cudaGraphExecKernelNodeSetParams` / `cudaGraphExecUpdate`): the values that change from one
//! step to the next (the position, hence the cache row written and the keys attended; the
//! step's input row and RoPE rows) live in device buffers that the kernels read (see
//! `qkv_post` and `attention_split_f32`), so consecutive steps issue identical launches and the
//! graph needs no update at all. What still changes a launch (the attention's slice count when
//! the cache length crosses a power of two, a KV mirror that grew, a scratch buffer that was
//! reallocated, another batch layout) is caught by the comparison and makes a new graph, so no
//! launch parameter can go stale by being forgotten in a hand-written key. Recording costs a
//! copy of each launch's argument bytes (sizes from `cuFuncGetParamInfo`), a few µs per step.
//!
//! Capture failures fall back to plain launches for the rest of the process (and say so once).

use cudarc::driver::sys;
use std::collections::HashMap;
use std::ffi::c_void;

/// Instantiated graphs kept (the recent steps' shapes: cache-length buckets, batch layouts).
const KEPT_GRAPHS: usize = 16;

/// One queued operation of a recorded step.
#[derive(PartialEq)]
pub(crate) enum Op {
    /// A kernel launch with its argument bytes (`sizes[i]` bytes each, concatenated).
    Kernel {
        f: usize,
        grid: (u32, u32, u32),
        block: (u32, u32, u32),
        smem: u32,
        sizes: Vec<usize>,
        args: Vec<u8>,
        /// Launched as a programmatic dependent of the previous kernel (see [`launch_kernel`]).
        pdl: bool,
    },
    /// A device-to-device copy.
    Copy {
        dst: sys::CUdeviceptr,
        src: sys::CUdeviceptr,
        bytes: usize,
    },
}

impl Op {
    /// Queues the operation on `stream` (or into the graph `stream` is capturing).
    pub(crate) fn issue(&self, stream: sys::CUstream) -> Result<(), String> {
        match self {
            Op::Kernel {
                f,
                grid,
                block,
                smem,
                sizes,
                args,
                pdl,
            } => {
                let mut off = 0;
                let mut params: Vec<*mut c_void> = sizes
                    .iter()
                    .map(|n| {
                        let p = args[off..].as_ptr() as *mut c_void;
                        off += n;
                        p
                    })
                    .collect();
                // SAFETY: `f` is a live kernel of the module this recording was made for;
                // `params` point to copies of the argument values it was recorded with, in
                // the sizes the driver reported for its parameters, alive during the call.
                unsafe {
                    launch_kernel(
                        *f as sys::CUfunction,
                        (*grid, *block, *smem),
                        stream,
                        &mut params,
                        *pdl,
                    )
                }
            }
            Op::Copy { dst, src, bytes } => {
                // SAFETY: both ranges were live device buffers when recorded, and the caller
                // issues the recording before anything is freed.
                unsafe { sys::cuMemcpyDtoDAsync_v2(*dst, *src, *bytes, stream) }
                    .result()
                    .map_err(|e| format!("device copy of {bytes} bytes: {e:?}"))
            }
        }
    }
}

/// Launches `f` with `(grid, block, dynamic shared bytes)` on `stream`. With `pdl`, as a
/// programmatic dependent launch (`CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION`): the
/// kernel may be scheduled while the previous kernel of the stream finishes, and waits for it
/// in its first instruction (`PDL_ENTER` in `kernels/common.cuh`, which every decode kernel
/// starts with), so only the launch latency overlaps.
///
/// # Safety
/// `f` must be a live kernel whose parameters `params` point to, in its declared order and
/// types, alive during the call; `stream` must be live.
pub(crate) unsafe fn launch_kernel(
    f: sys::CUfunction,
    (grid, block, smem): ((u32, u32, u32), (u32, u32, u32), u32),
    stream: sys::CUstream,
    params: &mut [*mut c_void],
    pdl: bool,
) -> Result<(), String> {
    if !pdl {
        // SAFETY: the caller's contract.
        return unsafe {
            cudarc::driver::result::launch_kernel(f, grid, block, smem, stream, params)
        }
        .map_err(|e| format!("kernel launch: {e:?}"));
    }
    // SAFETY: an all-zero attribute is a valid value of the C union; the fields set below are
    // the ones the driver reads for this attribute id.
    let mut attr: sys::CUlaunchAttribute = unsafe { std::mem::zeroed() };
    attr.id = sys::CUlaunchAttributeID::CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION;
    attr.value.programmaticStreamSerializationAllowed = 1;
    let config = sys::CUlaunchConfig {
        gridDimX: grid.0,
        gridDimY: grid.1,
        gridDimZ: grid.2,
        blockDimX: block.0,
        blockDimY: block.1,
        blockDimZ: block.2,
        sharedMemBytes: smem,
        hStream: stream,
        attrs: &mut attr,
        numAttrs: 1,
    };
    // SAFETY: the caller's contract; `config` and `attr` live during the call.
    unsafe { sys::cuLaunchKernelEx(&config, f, params.as_mut_ptr(), std::ptr::null_mut()) }
        .result()
        .map_err(|e| format!("kernel launch (programmatic dependent): {e:?}"))
}

/// The launches of the step being recorded (`None`: launches are issued as they come).
#[derive(Default)]
pub(crate) struct Recorder {
    pub(crate) ops: Option<Vec<Op>>,
    /// Parameter sizes per kernel, from the driver.
    sizes: HashMap<usize, Vec<usize>>,
}

impl Recorder {
    /// Records a kernel launch when recording (`Ok(false)`: not recording). An error means the
    /// driver could not say the parameters' sizes; the caller then stops recording.
    pub(crate) fn kernel(
        &mut self,
        f: sys::CUfunction,
        grid: (u32, u32, u32),
        block: (u32, u32, u32),
        smem: u32,
        params: &[*mut c_void],
        pdl: bool,
    ) -> Result<bool, String> {
        let Some(ops) = self.ops.as_mut() else {
            return Ok(false);
        };
        let key = f as usize;
        let sizes = match self.sizes.entry(key) {
            std::collections::hash_map::Entry::Occupied(e) => e.get().clone(),
            std::collections::hash_map::Entry::Vacant(e) => {
                let sizes = (0..params.len())
                    .map(|i| {
                        let (mut off, mut size) = (0usize, 0usize);
                        // SAFETY: `f` is a live kernel; the out-pointers are valid.
                        unsafe { sys::cuFuncGetParamInfo(f, i, &mut off, &mut size) }
                            .result()
                            .map(|_| size)
                            .map_err(|e| format!("cuFuncGetParamInfo: {e:?}"))
                    })
                    .collect::<Result<Vec<_>, _>>()?;
                e.insert(sizes).clone()
            }
        };
        let mut args = Vec::with_capacity(sizes.iter().sum());
        for (&p, &n) in params.iter().zip(&sizes) {
            // SAFETY: each parameter points to a live value of the kernel's parameter type,
            // which is `n` bytes as the driver reports.
            args.extend_from_slice(unsafe { std::slice::from_raw_parts(p as *const u8, n) });
        }
        ops.push(Op::Kernel {
            f: key,
            grid,
            block,
            smem,
            sizes,
            args,
            pdl,
        });
        Ok(true)
    }

    /// Records a device copy when recording; false when not recording.
    pub(crate) fn copy(
        &mut self,
        dst: sys::CUdeviceptr,
        src: sys::CUdeviceptr,
        bytes: usize,
    ) -> bool {
        match self.ops.as_mut() {
            Some(ops) => {
                ops.push(Op::Copy { dst, src, bytes });
                true
            }
            None => false,
        }
    }
}

/// Instantiated graphs of recent recordings, the most recently used first.
#[derive(Default)]
pub(crate) struct Graphs {
    entries: Vec<(Vec<Op>, sys::CUgraphExec)>,
    /// Set after a capture failed: recordings are then issued as plain launches.
    pub(crate) disabled: bool,
    /// Graphs instantiated and replays, for `OXINFER_CUDA_PROFILE`.
    pub(crate) captured: usize,
    pub(crate) replayed: usize,
}

impl Graphs {
    /// Runs `ops` on `stream`: replays the graph of an identical earlier recording, or captures
    /// and keeps a new one; when capturing fails, issues them as plain launches and disables
    /// graphs.
    pub(crate) fn run(&mut self, ops: Vec<Op>, stream: sys::CUstream) -> Result<(), String> {
        if let Some(i) = self.entries.iter().position(|(o, _)| *o == ops) {
            let e = self.entries.remove(i);
            let exec = e.1;
            self.entries.insert(0, e);
            self.replayed += 1;
            return launch(exec, stream);
        }
        match capture(&ops, stream) {
            Ok(exec) => {
                self.captured += 1;
                launch(exec, stream)?;
                self.entries.insert(0, (ops, exec));
                while self.entries.len() > KEPT_GRAPHS {
                    if let Some((_, old)) = self.entries.pop() {
                        destroy(old);
                    }
                }
                Ok(())
            }
            Err(e) => {
                self.disabled = true;
                eprintln!("oxinfer-cuda: CUDA graph capture failed ({e}); using plain launches");
                ops.iter().try_for_each(|op| op.issue(stream))
            }
        }
    }

    /// Destroys every kept graph (the context must be bound).
    pub(crate) fn clear(&mut self) {
        for (_, exec) in self.entries.drain(..) {
            destroy(exec);
        }
    }
}

/// Captures `ops` issued on `stream` into an instantiated graph (nothing runs).
fn capture(ops: &[Op], stream: sys::CUstream) -> Result<sys::CUgraphExec, String> {
    let mode = sys::CUstreamCaptureMode::CU_STREAM_CAPTURE_MODE_THREAD_LOCAL;
    // SAFETY: the stream is live and not capturing.
    unsafe { sys::cuStreamBeginCapture_v2(stream, mode) }
        .result()
        .map_err(|e| format!("cuStreamBeginCapture: {e:?}"))?;
    let issued = ops.iter().try_for_each(|op| op.issue(stream));
    let mut graph: sys::CUgraph = std::ptr::null_mut();
    // SAFETY: ends the capture begun above; `graph` is a valid out-pointer.
    let ended = unsafe { sys::cuStreamEndCapture(stream, &mut graph) }
        .result()
        .map_err(|e| format!("cuStreamEndCapture: {e:?}"));
    if let Err(e) = issued.and(ended) {
        if !graph.is_null() {
            // SAFETY: a graph made by the capture, destroyed once.
            let _ = unsafe { sys::cuGraphDestroy(graph) };
        }
        return Err(e);
    }
    let mut exec: sys::CUgraphExec = std::ptr::null_mut();
    // SAFETY: `graph` is the captured graph; `exec` a valid out-pointer. The graph itself is
    // no longer needed once instantiated.
    let r = unsafe {
        let r = sys::cuGraphInstantiateWithFlags(&mut exec, graph, 0);
        let _ = sys::cuGraphDestroy(graph);
        r
    };
    r.result()
        .map_err(|e| format!("cuGraphInstantiate: {e:?}"))?;
    Ok(exec)
}

fn launch(exec: sys::CUgraphExec, stream: sys::CUstream) -> Result<(), String> {
    // SAFETY: a live instantiated graph whose kernels' buffers are those of the current step
    // (it is only replayed for an identical recording).
    unsafe { sys::cuGraphLaunch(exec, stream) }
        .result()
        .map_err(|e| format!("cuGraphLaunch: {e:?}"))
}

fn destroy(exec: sys::CUgraphExec) {
    // SAFETY: a live instantiated graph, destroyed once; the stream work using it is ordered
    // before any later launch, and the driver defers the release until it completes.
    let _ = unsafe { sys::cuGraphExecDestroy(exec) };
}
