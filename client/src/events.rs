//! The stream of job events that `Compile`, `Lookup` and `Watch` answer with.

use crate::error::ClientError;
use kiln_proto::pb;
use kiln_proto::pb::job_event::Event;
use std::pin::Pin;
use std::task::{Context, Poll};
use tokio_stream::Stream;

/// How long [`EventStream::collect`] waits for the stream's end after the job's last event.
const DRAIN_WAIT: std::time::Duration = std::time::Duration::from_millis(250);

/// A job's events, in the order the daemon emitted them: `Queued`, `Started`, one `KernelResult`
/// per kernel, then `JobDone` (or `JobFailed` when the job as a whole could not finish). A named
/// type rather than `impl Stream`, so callers can store it.
///
/// The client asks for batches (`batch_results`): a warm graph's hits arrive in one message, and
/// this stream hands them on one `kernel` event at a time, so callers see one shape of stream.
///
/// Use [`EventStream::next_event`] in a loop, or the [`Stream`] impl, or
/// [`EventStream::collect`] to wait for the whole job.
#[derive(Debug)]
pub struct EventStream {
    inner: tonic::Streaming<pb::JobEvent>,
    /// The rest of a batch, handed on one kernel at a time.
    pending: std::collections::VecDeque<pb::JobEvent>,
}

impl EventStream {
    pub(crate) fn new(inner: tonic::Streaming<pb::JobEvent>) -> Self {
        Self { inner, pending: std::collections::VecDeque::new() }
    }

    /// Passes an event on, or queues a batch's results as `kernel` events and passes the first.
    fn unbatch(&mut self, event: pb::JobEvent) -> Option<pb::JobEvent> {
        match event.event {
            Some(Event::Kernels(batch)) => {
                let job_id = event.job_id;
                self.pending.extend(
                    batch
                        .results
                        .into_iter()
                        .map(|k| pb::JobEvent { job_id: job_id.clone(), event: Some(Event::Kernel(k)) }),
                );
                self.pending.pop_front()
            }
            _ => Some(event),
        }
    }

    /// The next event, or `None` once the daemon has closed the stream.
    pub async fn next_event(&mut self) -> Result<Option<pb::JobEvent>, ClientError> {
        loop {
            if let Some(event) = self.pending.pop_front() {
                return Ok(Some(event));
            }
            let Some(event) = self.inner.message().await? else { return Ok(None) };
            // An empty batch passes nothing on; read on.
            if let Some(event) = self.unbatch(event) {
                return Ok(Some(event));
            }
        }
    }

    /// Reads the stream to its end after the job's last event, so the call ends cleanly instead of
    /// being cancelled. The daemon closes the stream right behind that event. A stream dropped
    /// before its trailers arrive is reset by h2, and when they then arrive h2 answers with
    /// another reset of its own; after 1,024 of those it closes the whole connection with
    /// ENHANCE_YOUR_CALM. That is what ended a benchmark's connection after about a thousand
    /// warm compiles, and what would end a long-lived client's. Bounded by [`DRAIN_WAIT`] for a
    /// server that does not close.
    async fn finish(&mut self) {
        let drain = async { while let Ok(Some(_)) = self.inner.message().await {} };
        let _ = tokio::time::timeout(DRAIN_WAIT, drain).await;
    }

    /// Waits for the whole job and returns its kernel results and its `JobDone`.
    ///
    /// A `JobFailed` event is an error, and so is a stream that closes before `JobDone`: a
    /// healthy daemon always ends a job's stream with one of those events or an error status.
    pub async fn collect(mut self) -> Result<CompletedJob, ClientError> {
        let mut job = CompletedJob::default();
        while let Some(event) = self.next_event().await? {
            if job.job_id.is_empty() {
                job.job_id.clone_from(&event.job_id);
            }
            match event.event {
                Some(Event::Kernel(result)) => job.kernels.push(result),
                // next_event unbatches, so none reaches here; taken whole all the same.
                Some(Event::Kernels(batch)) => job.kernels.extend(batch.results),
                Some(Event::Done(done)) => {
                    job.done = done;
                    self.finish().await;
                    return Ok(job);
                }
                Some(Event::Failed(failed)) => {
                    self.finish().await;
                    return Err(ClientError::JobFailed { job_id: job.job_id, reason: failed.reason });
                }
                Some(Event::Queued(_) | Event::Started(_)) | None => {}
            }
        }
        Err(ClientError::Incomplete { job_id: job.job_id })
    }
}

impl Stream for EventStream {
    type Item = Result<pb::JobEvent, ClientError>;

    fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        loop {
            if let Some(event) = self.pending.pop_front() {
                return Poll::Ready(Some(Ok(event)));
            }
            match Pin::new(&mut self.inner).poll_next(cx) {
                Poll::Ready(Some(Ok(event))) => {
                    if let Some(event) = self.unbatch(event) {
                        return Poll::Ready(Some(Ok(event)));
                    }
                }
                Poll::Ready(Some(Err(status))) => return Poll::Ready(Some(Err(ClientError::from(status)))),
                Poll::Ready(None) => return Poll::Ready(None),
                Poll::Pending => return Poll::Pending,
            }
        }
    }
}

/// A finished job: every kernel's result, in arrival order, and the job's summary.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct CompletedJob {
    pub job_id: String,
    pub kernels: Vec<pb::KernelResult>,
    pub done: pb::JobDone,
}

impl CompletedJob {
    /// Whether every kernel came back with outcome OK.
    pub fn all_ok(&self) -> bool {
        self.kernels.iter().all(|k| k.outcome() == pb::Outcome::Ok)
    }

    /// The result of the kernel with this id.
    pub fn kernel(&self, id: &str) -> Option<&pb::KernelResult> {
        self.kernels.iter().find(|k| k.id == id)
    }
}
