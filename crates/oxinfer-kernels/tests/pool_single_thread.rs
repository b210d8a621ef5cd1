//! The pool with no worker threads (`set_num_threads(1)` before its first region): regions run
//! on the caller, in order, and a panicking task still reaches the caller and leaves the pool
//! usable. Its own test binary, because the pool's size is fixed by the first region of the
//! process.

use oxinfer_kernels::pool::{parallel_for, pool_threads};
use oxinfer_kernels::set_num_threads;
use std::panic::catch_unwind;
use std::sync::Mutex;

#[test]
fn one_thread_pool_runs_inline_and_reports_panics() {
    set_num_threads(1);
    assert_eq!(pool_threads(), 1);
    let order = Mutex::new(Vec::new());
    parallel_for(5, &|i| order.lock().unwrap().push(i));
    assert_eq!(*order.lock().unwrap(), vec![0, 1, 2, 3, 4]);
    let caught = catch_unwind(|| parallel_for(3, &|i| assert!(i != 1, "task {i}")));
    assert!(caught.is_err(), "the task's panic reaches the caller");
    let total = std::sync::atomic::AtomicUsize::new(0);
    parallel_for(10, &|i| {
        total.fetch_add(i, std::sync::atomic::Ordering::Relaxed);
    });
    assert_eq!(total.into_inner(), 45);
    // Setting the count later does not resize a started pool.
    set_num_threads(4);
    assert_eq!(pool_threads(), 1);
}
