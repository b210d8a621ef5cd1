//! Splitting independent work items over the kernel threads.

/// Runs `f(i, item)` for every item of `items`, spread over up to `oxinfer_kernels::num_threads()`
/// threads in contiguous ranges. Runs inline when there is one item or one thread.
pub fn for_each_mut<T: Send, F>(items: &mut [T], f: F)
where
    F: Fn(usize, &mut T) + Sync,
{
    let threads = oxinfer_kernels::num_threads().min(items.len());
    if threads <= 1 {
        for (i, it) in items.iter_mut().enumerate() {
            f(i, it);
        }
        return;
    }
    let per = items.len().div_ceil(threads);
    std::thread::scope(|s| {
        for (c, chunk) in items.chunks_mut(per).enumerate() {
            let f = &f;
            s.spawn(move || {
                for (j, it) in chunk.iter_mut().enumerate() {
                    f(c * per + j, it);
                }
            });
        }
    });
}
