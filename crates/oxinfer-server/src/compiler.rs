//! A small fixed set of threads for grammar compilation (JSON `response_format`, forced tool
//! calls). One compilation within its work budget can allocate hundreds of MiB (a 16⁸-merge
//! `allOf` over `anyOf` took about 500 MiB); on tokio's blocking pool, 32 at once would take
//! gigabytes, and every pool thread's allocator arena would keep its peak afterwards. Here at
//! most [`COMPILER_THREADS`] run at once (others wait their turn), so the peak is bounded by
//! that many compilations, and after each one the freed memory is handed back to the system.

use crate::error::ApiError;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::{mpsc, Arc, Mutex};
use tokio::sync::oneshot;

/// Compilations run at once.
pub const COMPILER_THREADS: usize = 2;

type Job = Box<dyn FnOnce() + Send>;

/// Handle to the compiler threads (they end when it is dropped).
pub struct Compiler {
    tx: mpsc::Sender<Job>,
}

impl Compiler {
    /// Starts [`COMPILER_THREADS`] threads.
    pub fn start() -> Self {
        let (tx, rx) = mpsc::channel::<Job>();
        let rx = Arc::new(Mutex::new(rx));
        for i in 0..COMPILER_THREADS {
            let rx = rx.clone();
            std::thread::Builder::new()
                .name(format!("oxinfer-compile-{i}"))
                .spawn(move || loop {
                    let job = match rx.lock() {
                        Ok(r) => r.recv(),
                        Err(_) => return,
                    };
                    let Ok(job) = job else { return };
                    // A panic drops the job's reply sender: the caller gets a 500.
                    let _ = catch_unwind(AssertUnwindSafe(job));
                    release_free_memory();
                })
                .expect("spawning a grammar compiler thread");
        }
        Compiler { tx }
    }

    /// Runs `f` on a compiler thread when one is free; a panic in `f` becomes a 500.
    pub async fn run<T: Send + 'static>(
        &self,
        f: impl FnOnce() -> T + Send + 'static,
    ) -> Result<T, ApiError> {
        let (reply, answer) = oneshot::channel();
        let job: Job = Box::new(move || {
            let _ = reply.send(f());
        });
        if self.tx.send(job).is_err() {
            return Err(ApiError::internal(
                "the grammar compiler threads have stopped",
            ));
        }
        answer
            .await
            .map_err(|_| ApiError::internal("compiling the request's grammar failed"))
    }
}

/// Gives the memory a compilation freed back to the system. glibc keeps freed memory in the
/// thread's arena (a budget-sized compilation left ~500 MiB resident per thread); other
/// allocators return it themselves.
#[cfg(all(target_os = "linux", target_env = "gnu"))]
fn release_free_memory() {
    extern "C" {
        fn malloc_trim(pad: usize) -> std::ffi::c_int;
    }
    // SAFETY: glibc's malloc_trim only releases free pages of the malloc arenas; it takes no
    // pointers and is safe to call from any thread at any time.
    unsafe {
        malloc_trim(0);
    }
}

#[cfg(not(all(target_os = "linux", target_env = "gnu")))]
fn release_free_memory() {}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn runs_jobs_and_survives_a_panic() {
        let c = Compiler::start();
        assert_eq!(c.run(|| 6 * 7).await.unwrap(), 42);
        let err = c
            .run(|| -> u32 { panic!("simulated compiler bug") })
            .await
            .unwrap_err();
        assert_eq!(err.status, axum::http::StatusCode::INTERNAL_SERVER_ERROR);
        // Both threads still serve.
        for _ in 0..4 {
            assert_eq!(c.run(|| 1).await.unwrap(), 1);
        }
    }
}
