//! Concurrent requests' inputs gathered into one model call: the embedding and rerank
//! endpoints submit their encoded inputs here, and one worker thread runs the inputs of every
//! request waiting at that moment (up to [`MAX_COMBINED`] of them) as one batch, then hands
//! each request its own outputs. Sixteen clients sending one text each so cost one pass over
//! sixteen texts, with whole sequences per thread, instead of sixteen one-text passes one after
//! another.
//!
//! A request whose client went away before its batch starts is dropped unrun. A panic in the
//! model call answers that batch's requests with a 500 and the worker goes on.

use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::mpsc::{self, Receiver, SyncSender, TrySendError};
use std::time::Duration;

use tokio::sync::oneshot;

use crate::error::ApiError;

/// Most inputs one call gathers from several requests; a request larger than this runs alone.
pub const MAX_COMBINED: usize = 256;

/// The outputs of one request's inputs, in order, or the model's error message.
type Reply<O> = oneshot::Sender<Result<Vec<O>, String>>;

/// The model call: one output per input, in order, or an error message.
type RunFn<I, O> = dyn Fn(&[I]) -> Result<Vec<O>, String>;

/// One request's inputs and where its outputs go.
struct Job<I, O> {
    items: Vec<I>,
    reply: Reply<O>,
}

/// A worker thread that runs gathered inputs through one function (see the module doc).
pub struct Batcher<I, O> {
    jobs: SyncSender<Job<I, O>>,
    queue: usize,
}

impl<I: Send + 'static, O: Send + 'static> Batcher<I, O> {
    /// Starts the worker thread `oxinfer-{name}`, which calls `run` on gathered inputs; `run`
    /// returns one output per input, in order. At most `queue` requests wait (more get a 503).
    pub fn start(
        name: &str,
        queue: usize,
        run: impl Fn(&[I]) -> Result<Vec<O>, String> + Send + 'static,
    ) -> std::io::Result<Self> {
        let queue = queue.max(1);
        let (jobs, rx) = mpsc::sync_channel(queue);
        std::thread::Builder::new()
            .name(format!("oxinfer-{name}"))
            .spawn(move || work(&rx, &run))?;
        Ok(Batcher { jobs, queue })
    }

    /// Runs `items` in the next batch and returns their outputs, in order: 503 when `queue`
    /// requests already wait, 500 when the model call fails.
    pub async fn submit(&self, items: Vec<I>) -> Result<Vec<O>, ApiError> {
        let (reply, answer) = oneshot::channel();
        match self.jobs.try_send(Job { items, reply }) {
            Ok(()) => {}
            Err(TrySendError::Full(_)) => {
                return Err(ApiError::busy(self.queue, Duration::from_secs(1)))
            }
            Err(TrySendError::Disconnected(_)) => {
                return Err(ApiError::internal("the model's worker thread has stopped"))
            }
        }
        match answer.await {
            Ok(Ok(out)) => Ok(out),
            Ok(Err(message)) => Err(ApiError::internal(message)),
            Err(_) => Err(ApiError::internal("the model's worker thread has stopped")),
        }
    }
}

/// The worker: waits for a request, adds every request already waiting (while the inputs stay
/// within [`MAX_COMBINED`]), runs them as one call and answers each; until the [`Batcher`] is
/// dropped.
fn work<I, O>(rx: &Receiver<Job<I, O>>, run: &RunFn<I, O>) {
    let mut carried: Option<Job<I, O>> = None;
    loop {
        let Some(first) = carried.take().or_else(|| rx.recv().ok()) else {
            return;
        };
        let mut batch = vec![first];
        let mut n = batch[0].items.len();
        while let Ok(job) = rx.try_recv() {
            if n + job.items.len() > MAX_COMBINED {
                carried = Some(job);
                break;
            }
            n += job.items.len();
            batch.push(job);
        }
        batch.retain(|job| !job.reply.is_closed());
        if batch.is_empty() {
            continue;
        }
        let counts: Vec<usize> = batch.iter().map(|job| job.items.len()).collect();
        let items: Vec<I> = batch
            .iter_mut()
            .flat_map(|job| std::mem::take(&mut job.items))
            .collect();
        let result = match catch_unwind(AssertUnwindSafe(|| run(&items))) {
            Ok(Ok(out)) if out.len() == items.len() => Ok(out),
            Ok(Ok(out)) => Err(format!(
                "the model gave {} outputs for {} inputs",
                out.len(),
                items.len()
            )),
            Ok(Err(message)) => Err(message),
            Err(_) => Err("the model panicked on this batch".to_string()),
        };
        match result {
            Ok(out) => {
                let mut out = out.into_iter();
                for (job, count) in batch.into_iter().zip(counts) {
                    // A client that left meanwhile drops its answer.
                    let _ = job.reply.send(Ok(out.by_ref().take(count).collect()));
                }
            }
            Err(message) => {
                for job in batch {
                    let _ = job.reply.send(Err(message.clone()));
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::sync::{Arc, Mutex};

    use super::*;

    /// A batcher doubling its inputs that records each call's size; its first call waits for
    /// a message on `gate`, so that the requests sent meanwhile gather. Input 666 panics.
    fn doubling(sizes: Arc<Mutex<Vec<usize>>>, gate: mpsc::Receiver<()>) -> Batcher<u32, u32> {
        let calls = AtomicUsize::new(0);
        Batcher::start("test-batch", 8, move |items: &[u32]| {
            if calls.fetch_add(1, Ordering::SeqCst) == 0 {
                sizes.lock().unwrap().push(0);
                let _ = gate.recv_timeout(Duration::from_secs(10));
            }
            sizes.lock().unwrap().push(items.len());
            if items.contains(&666) {
                panic!("bad input");
            }
            Ok(items.iter().map(|x| 2 * x).collect())
        })
        .unwrap()
    }

    #[tokio::test]
    async fn waiting_requests_share_one_call_and_get_their_own_outputs() {
        let sizes = Arc::new(Mutex::new(Vec::new()));
        let (open, gate) = mpsc::channel();
        let b = Arc::new(doubling(sizes.clone(), gate));
        let first = tokio::spawn({
            let b = b.clone();
            async move { b.submit(vec![1]).await.unwrap() }
        });
        // Wait until the worker is inside its first call.
        while sizes.lock().unwrap().is_empty() {
            tokio::time::sleep(Duration::from_millis(2)).await;
        }
        let rest: Vec<_> = (0..3u32)
            .map(|i| {
                let b = b.clone();
                tokio::spawn(async move { b.submit(vec![10 * i, 10 * i + 1]).await.unwrap() })
            })
            .collect();
        // Each task queues its job at its first poll, before its first await.
        tokio::time::sleep(Duration::from_millis(50)).await;
        open.send(()).unwrap();
        assert_eq!(first.await.unwrap(), vec![2]);
        for (i, r) in rest.into_iter().enumerate() {
            let i = i as u32;
            assert_eq!(r.await.unwrap(), vec![20 * i, 20 * i + 2]);
        }
        // The first call ran alone; the three requests sent while it ran shared the second.
        assert_eq!(*sizes.lock().unwrap(), vec![0, 1, 6]);
    }

    #[tokio::test]
    async fn a_panic_answers_its_batch_with_500_and_the_worker_goes_on() {
        let (open, gate) = mpsc::channel();
        open.send(()).unwrap();
        let b = doubling(Arc::default(), gate);
        let err = b.submit(vec![666]).await.unwrap_err();
        assert_eq!(err.status.as_u16(), 500);
        assert!(err.message.contains("panicked"), "{}", err.message);
        assert_eq!(b.submit(vec![4]).await.unwrap(), vec![8]);
    }
}
