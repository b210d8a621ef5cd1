//! A persistent thread pool for the many small parallel regions of a forward pass (a decode
//! step issues hundreds). Workers spin briefly on a generation counter, then sleep on a
//! condition variable, so a region costs about a microsecond when they are hot and nothing
//! when the process is idle.
//!
//! [`parallel_for`] runs `f(i)` for `i in 0..n`, the caller taking part; tasks are claimed with
//! an atomic counter, so uneven tasks balance themselves. A task that panics does not take its
//! thread down: the panic is caught, the region's remaining tasks are skipped, and the caller
//! gets the panic when the region ends (the pool stays usable).
//!
//! The number of threads is the pool's too: [`set_num_threads`] / [`num_threads`] (the scalar
//! reference matmul, which runs on scoped threads of its own, reads the same value).

use std::any::Any;
use std::panic::{catch_unwind, resume_unwind, AssertUnwindSafe};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Condvar, Mutex, OnceLock};

/// Thread count set by [`set_num_threads`]; 0 = default.
static NUM_THREADS: AtomicUsize = AtomicUsize::new(0);

/// Sets how many threads the kernels use at most; `0` restores the default
/// (`std::thread::available_parallelism`). Process-wide. The pool takes its size from this
/// value when it starts (its first parallel region) and keeps it, so set it before.
pub fn set_num_threads(n: usize) {
    NUM_THREADS.store(n, Ordering::Relaxed);
}

/// How many threads the kernels use at most: the value of [`set_num_threads`], else
/// `std::thread::available_parallelism()` (1 if unknown).
pub fn num_threads() -> usize {
    match NUM_THREADS.load(Ordering::Relaxed) {
        0 => std::thread::available_parallelism().map_or(1, |n| n.get()),
        n => n,
    }
}

/// How long a worker spins for new work before sleeping.
const SPIN_ITERS: u32 = 1 << 16;

/// The job currently published to the workers.
struct Job {
    /// Type-erased `&(dyn Fn(usize) + Sync)` valid while the job runs.
    f: *const (dyn Fn(usize) + Sync),
    n: usize,
}

// SAFETY: the pointer is only dereferenced while the publishing `parallel_for` call is blocked
// waiting for the job to finish, so the closure it points to outlives every use.
unsafe impl Send for Job {}
unsafe impl Sync for Job {}

struct Shared {
    /// Incremented for each published job; workers wait for it to change.
    generation: AtomicUsize,
    /// Next task index to claim.
    next: AtomicUsize,
    /// Tasks finished in the current job.
    done: AtomicUsize,
    /// Workers still inside the current job (the caller waits for zero before returning).
    active: AtomicUsize,
    job_ptr: AtomicUsize,
    /// Set when a task of the current region panicked: tasks not yet started are skipped.
    failed: AtomicBool,
    /// The first panic of the current region, re-raised by its caller when the region ends.
    panic: Mutex<Option<Box<dyn Any + Send>>>,
    /// Workers asleep on `wake` (or about to be): a region rings the condition variable only
    /// when this is non-zero, so hot regions make no system call.
    sleepers: AtomicUsize,
    sleep: Mutex<()>,
    wake: Condvar,
    workers: usize,
}

struct Pool {
    shared: &'static Shared,
    /// Serializes callers: one parallel region at a time (nested calls run inline).
    region: Mutex<()>,
}

thread_local! {
    static IN_POOL: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
}

fn pool() -> &'static Pool {
    static POOL: OnceLock<Pool> = OnceLock::new();
    POOL.get_or_init(|| {
        let workers = num_threads().saturating_sub(1);
        let shared: &'static Shared = Box::leak(Box::new(Shared {
            generation: AtomicUsize::new(0),
            next: AtomicUsize::new(0),
            done: AtomicUsize::new(0),
            active: AtomicUsize::new(0),
            job_ptr: AtomicUsize::new(0),
            failed: AtomicBool::new(false),
            panic: Mutex::new(None),
            sleepers: AtomicUsize::new(0),
            sleep: Mutex::new(()),
            wake: Condvar::new(),
            workers,
        }));
        for i in 0..workers {
            std::thread::Builder::new()
                .name(format!("oxinfer-worker-{i}"))
                .spawn(move || worker(shared))
                .expect("spawning a kernel worker thread");
        }
        Pool {
            shared,
            region: Mutex::new(()),
        }
    })
}

/// Number of threads that run a parallel region (workers plus the caller). Fixed when the pool
/// starts (first use), from [`num_threads`].
pub fn pool_threads() -> usize {
    pool().shared.workers + 1
}

/// Claims and runs tasks of the current region until none is left. A panicking task is
/// caught here (so neither a worker nor the caller unwinds out of a region half done): its
/// payload is kept for the caller, and the tasks claimed after it are counted without running.
fn run_tasks(s: &Shared, f: &(dyn Fn(usize) + Sync), n: usize) {
    loop {
        let i = s.next.fetch_add(1, Ordering::SeqCst);
        if i >= n {
            break;
        }
        if !s.failed.load(Ordering::Relaxed) {
            if let Err(payload) = catch_unwind(AssertUnwindSafe(|| f(i))) {
                s.failed.store(true, Ordering::Relaxed);
                let mut first = s.panic.lock().unwrap_or_else(|e| e.into_inner());
                first.get_or_insert(payload);
            }
        }
        s.done.fetch_add(1, Ordering::SeqCst);
    }
}

fn worker(s: &'static Shared) {
    IN_POOL.with(|c| c.set(true));
    let mut seen = 0usize;
    loop {
        let mut spins = 0u32;
        loop {
            let g = s.generation.load(Ordering::SeqCst);
            if g != seen {
                seen = g;
                break;
            }
            spins += 1;
            if spins < SPIN_ITERS {
                std::hint::spin_loop();
            } else {
                let mut guard = s.sleep.lock().unwrap_or_else(|e| e.into_inner());
                s.sleepers.fetch_add(1, Ordering::SeqCst);
                while s.generation.load(Ordering::SeqCst) == seen {
                    guard = s.wake.wait(guard).unwrap_or_else(|e| e.into_inner());
                }
                s.sleepers.fetch_sub(1, Ordering::SeqCst);
                drop(guard);
                spins = 0;
            }
        }
        s.active.fetch_add(1, Ordering::SeqCst);
        let ptr = s.job_ptr.load(Ordering::SeqCst);
        if ptr != 0 {
            // SAFETY: job_ptr points at the `Job` owned by the `parallel_for` frame that bumped
            // the generation; that frame waits until `active` drops back to zero.
            let job = unsafe { &*(ptr as *const Job) };
            // SAFETY: see `Job`: the closure outlives the job.
            let f = unsafe { &*job.f };
            run_tasks(s, f, job.n);
        }
        s.active.fetch_sub(1, Ordering::SeqCst);
    }
}

/// Runs `f(i, item)` for every item of `items` on the pool (the calling thread included);
/// inline when there is one item.
pub fn for_each_mut<T: Send, F>(items: &mut [T], f: F)
where
    F: Fn(usize, &mut T) + Sync,
{
    if items.len() <= 1 {
        for (i, it) in items.iter_mut().enumerate() {
            f(i, it);
        }
        return;
    }
    let slots: Vec<Mutex<&mut T>> = items.iter_mut().map(Mutex::new).collect();
    parallel_for(slots.len(), &|i| {
        // Each index is claimed by exactly one task, so the lock is never contended.
        let mut item = slots[i].lock().unwrap_or_else(|e| e.into_inner());
        f(i, &mut item);
    });
}

/// Runs `f(i)` for every `i in 0..n` on the pool (the calling thread included) and returns
/// when all are done. Calls from inside a task run inline.
///
/// # Panics
/// If a task panics: the region still ends (tasks not yet started are skipped, the others
/// finish), then the first task's panic is resumed on the calling thread. The pool stays
/// usable.
pub fn parallel_for(n: usize, f: &(dyn Fn(usize) + Sync)) {
    if n == 0 {
        return;
    }
    let p = pool();
    let s = p.shared;
    if n == 1 || s.workers == 0 || IN_POOL.with(|c| c.get()) {
        (0..n).for_each(f);
        return;
    }
    let region = p.region.lock().unwrap_or_else(|e| e.into_inner());
    // SAFETY: erases the closure's lifetime; it is used only until this call returns (we wait
    // for `done == n` and `active == 0` below, and nothing unwinds out of this frame before:
    // run_tasks catches the tasks' panics).
    let f_static: *const (dyn Fn(usize) + Sync) = unsafe { std::mem::transmute(f) };
    let job = Job { f: f_static, n };
    s.next.store(0, Ordering::SeqCst);
    s.done.store(0, Ordering::SeqCst);
    s.failed.store(false, Ordering::SeqCst);
    s.job_ptr
        .store(&job as *const Job as usize, Ordering::SeqCst);
    s.generation.fetch_add(1, Ordering::SeqCst);
    // A worker counts itself in `sleepers` (SeqCst, under `sleep`) before it re-reads the
    // generation and waits. So either it is counted before this load, and the notify below
    // (made under the lock it holds until it waits) wakes it, or its re-read comes after the
    // increment above and it does not wait.
    if s.sleepers.load(Ordering::SeqCst) != 0 {
        let _g = s.sleep.lock().unwrap_or_else(|e| e.into_inner());
        s.wake.notify_all();
    }
    IN_POOL.with(|c| c.set(true));
    run_tasks(s, f, n);
    IN_POOL.with(|c| c.set(false));
    while s.done.load(Ordering::SeqCst) < n {
        std::hint::spin_loop();
    }
    s.job_ptr.store(0, Ordering::SeqCst);
    while s.active.load(Ordering::SeqCst) != 0 {
        std::hint::spin_loop();
    }
    let panic = s.panic.lock().unwrap_or_else(|e| e.into_inner()).take();
    drop(region);
    if let Some(payload) = panic {
        resume_unwind(payload);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::test_util::payload_message;

    #[test]
    fn every_task_runs_once() {
        for n in [0usize, 1, 2, 3, 17, 1000] {
            let hits: Vec<AtomicUsize> = (0..n).map(|_| AtomicUsize::new(0)).collect();
            parallel_for(n, &|i| {
                hits[i].fetch_add(1, Ordering::Relaxed);
            });
            assert!(hits.iter().all(|h| h.load(Ordering::Relaxed) == 1));
        }
    }

    #[test]
    fn nested_regions_run_inline() {
        let total = AtomicUsize::new(0);
        parallel_for(4, &|_| {
            parallel_for(3, &|_| {
                total.fetch_add(1, Ordering::Relaxed);
            });
        });
        assert_eq!(total.load(Ordering::Relaxed), 12);
    }

    /// A task that panics (on a worker or on the caller, whichever claims it) ends its region
    /// with that panic on the calling thread; no thread dies, and the next regions run every
    /// task. Before, the region either spun forever (a worker died) or aborted the process.
    #[test]
    #[cfg_attr(
        panic = "abort",
        ignore = "catches a panic; panics abort on this target (wasm)"
    )]
    fn a_panicking_task_ends_its_region_and_the_pool_survives() {
        for bad in [0usize, 1, 7, 63] {
            let ran = AtomicUsize::new(0);
            let caught = catch_unwind(AssertUnwindSafe(|| {
                parallel_for(64, &|i| {
                    if i == bad {
                        panic!("task {i} failed");
                    }
                    ran.fetch_add(1, Ordering::Relaxed);
                });
            }));
            let payload = caught.expect_err("the region must re-raise the task's panic");
            assert_eq!(
                payload_message(payload.as_ref()),
                format!("task {bad} failed")
            );
            assert!(ran.load(Ordering::Relaxed) < 64);
            // Every thread of the pool is still there and takes part.
            for _ in 0..100 {
                let hits: Vec<AtomicUsize> = (0..257).map(|_| AtomicUsize::new(0)).collect();
                parallel_for(hits.len(), &|i| {
                    hits[i].fetch_add(1, Ordering::Relaxed);
                });
                assert!(hits.iter().all(|h| h.load(Ordering::Relaxed) == 1));
            }
        }
    }

    /// Every task panicking, and a panic inside a nested (inline) region: the caller gets one
    /// panic, the first caught.
    #[test]
    #[cfg_attr(
        panic = "abort",
        ignore = "catches a panic; panics abort on this target (wasm)"
    )]
    fn many_and_nested_panics_reach_the_caller() {
        let caught = catch_unwind(|| parallel_for(1000, &|i| panic!("all fail {i}")));
        let msg = payload_message(caught.expect_err("must panic").as_ref());
        assert!(msg.starts_with("all fail "), "{msg}");
        let caught = catch_unwind(|| {
            parallel_for(8, &|_| parallel_for(4, &|j| assert!(j != 3, "inner {j}")));
        });
        assert_eq!(
            payload_message(caught.expect_err("must panic").as_ref()),
            "inner 3"
        );
        let total = AtomicUsize::new(0);
        parallel_for(8, &|_| {
            total.fetch_add(1, Ordering::Relaxed);
        });
        assert_eq!(total.load(Ordering::Relaxed), 8);
    }

    /// Regions from several threads at once are serialized and each runs its own tasks, with
    /// panicking regions among them.
    #[test]
    #[cfg_attr(
        panic = "abort",
        ignore = "catches a panic; panics abort on this target (wasm)"
    )]
    fn concurrent_callers() {
        std::thread::scope(|sc| {
            for c in 0..4usize {
                sc.spawn(move || {
                    for round in 0..200usize {
                        let sum = AtomicUsize::new(0);
                        let r = catch_unwind(AssertUnwindSafe(|| {
                            parallel_for(33, &|i| {
                                assert!(!(c == 1 && round % 10 == 0 && i == 5), "planned");
                                sum.fetch_add(i, Ordering::Relaxed);
                            })
                        }));
                        if c == 1 && round % 10 == 0 {
                            assert_eq!(
                                payload_message(r.expect_err("planned panic").as_ref()),
                                "planned"
                            );
                        } else {
                            assert!(r.is_ok());
                            assert_eq!(sum.load(Ordering::Relaxed), 33 * 32 / 2);
                        }
                    }
                });
            }
        });
    }

    #[test]
    fn many_back_to_back_regions() {
        let total = AtomicUsize::new(0);
        for _ in 0..10_000 {
            parallel_for(2, &|i| {
                total.fetch_add(i + 1, Ordering::Relaxed);
            });
        }
        assert_eq!(total.load(Ordering::Relaxed), 30_000);
    }
}
