//! Splitting independent work items over the kernel thread pool.

/// Runs `f(i, item)` for every item of `items` on the kernel thread pool (the caller takes
/// part); inline when there is one item.
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
    let slots: Vec<std::sync::Mutex<&mut T>> =
        items.iter_mut().map(std::sync::Mutex::new).collect();
    oxinfer_kernels::pool::parallel_for(slots.len(), &|i| {
        // Each index is claimed by exactly one task, so the lock is never contended.
        let mut item = slots[i].lock().unwrap_or_else(|e| e.into_inner());
        f(i, &mut item);
    });
}
