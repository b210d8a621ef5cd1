//! Driving the engine's batch generator in tests.

use oxinfer::engine::batch::{BatchGenerator, Finished, SeqEvent};

/// One step of `batch`, keeping each tag's [`Finished`] in `done` (tags index `done`).
pub fn step_once(batch: &mut BatchGenerator<'_, usize>, done: &mut [Option<Finished>]) {
    batch
        .step(|&mut i, ev| {
            if let SeqEvent::Finished(f) = ev {
                done[i] = Some(f);
            }
            true
        })
        .map_err(|f| f.error)
        .expect("step");
}

/// Steps `batch` until idle, keeping each tag's [`Finished`] in `done`.
pub fn run_all(batch: &mut BatchGenerator<'_, usize>, done: &mut [Option<Finished>]) {
    while !batch.is_idle() {
        step_once(batch, done);
    }
}
