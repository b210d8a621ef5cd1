//! A persistent thread pool for the many small parallel regions of a forward pass (a decode
//! step issues hundreds). Workers spin briefly on a generation counter, then sleep on a
//! condition variable, so a region costs about a microsecond when they are hot and nothing
//! when the process is idle.
//!
//! [`parallel_for`] runs `f(i)` for `i in 0..n`, the caller taking part; tasks are claimed with
//! an atomic counter, so uneven tasks balance themselves.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Condvar, Mutex, OnceLock};

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
        let workers = crate::matmul::num_threads().saturating_sub(1);
        let shared: &'static Shared = Box::leak(Box::new(Shared {
            generation: AtomicUsize::new(0),
            next: AtomicUsize::new(0),
            done: AtomicUsize::new(0),
            active: AtomicUsize::new(0),
            job_ptr: AtomicUsize::new(0),
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
/// starts (first use), from [`crate::num_threads`].
pub fn pool_threads() -> usize {
    pool().shared.workers + 1
}

fn run_tasks(s: &Shared, f: &(dyn Fn(usize) + Sync), n: usize) {
    loop {
        let i = s.next.fetch_add(1, Ordering::SeqCst);
        if i >= n {
            break;
        }
        f(i);
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
                let guard = s.sleep.lock().unwrap_or_else(|e| e.into_inner());
                if s.generation.load(Ordering::SeqCst) == seen {
                    drop(s.wake.wait(guard).unwrap_or_else(|e| e.into_inner()));
                }
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

/// Runs `f(i)` for every `i in 0..n` on the pool (the calling thread included) and returns
/// when all are done. Calls from inside a task run inline. Panics in `f` abort the process
/// (a half-finished region cannot be unwound safely).
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
    let _region = p.region.lock().unwrap_or_else(|e| e.into_inner());
    struct AbortOnUnwind;
    impl Drop for AbortOnUnwind {
        fn drop(&mut self) {
            if std::thread::panicking() {
                eprintln!("oxinfer: a kernel task panicked; aborting");
                std::process::abort();
            }
        }
    }
    let _guard = AbortOnUnwind;
    // SAFETY: erases the closure's lifetime; it is used only until this call returns (we wait
    // for `done == n` and `active == 0` below).
    let f_static: *const (dyn Fn(usize) + Sync) = unsafe { std::mem::transmute(f) };
    let job = Job { f: f_static, n };
    s.next.store(0, Ordering::SeqCst);
    s.done.store(0, Ordering::SeqCst);
    s.job_ptr
        .store(&job as *const Job as usize, Ordering::SeqCst);
    {
        let _g = s.sleep.lock().unwrap_or_else(|e| e.into_inner());
        s.generation.fetch_add(1, Ordering::SeqCst);
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
}

#[cfg(test)]
mod tests {
    use super::*;

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
