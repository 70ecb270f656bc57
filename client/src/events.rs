//! The stream of job events that `Compile`, `Lookup` and `Watch` answer with.

use crate::error::ClientError;
use kiln_proto::pb;
use kiln_proto::pb::job_event::Event;
use std::pin::Pin;
use std::task::{Context, Poll};
use tokio_stream::Stream;

/// A job's events, in the order the daemon emitted them: `Queued`, `Started`, one `KernelResult`
/// per kernel, then `JobDone` (or `JobFailed` when the job as a whole could not finish). A named type rather than `impl Stream`, so callers can store it.
///
/// Use [`EventStream::next_event`] in a loop, or the [`Stream`] impl, or
/// [`EventStream::collect`] to wait for the whole job.
#[derive(Debug)]
pub struct EventStream {
    inner: tonic::Streaming<pb::JobEvent>,
}

impl EventStream {
    pub(crate) fn new(inner: tonic::Streaming<pb::JobEvent>) -> Self {
        Self { inner }
    }

    /// The next event, or `None` once the daemon has closed the stream.
    pub async fn next_event(&mut self) -> Result<Option<pb::JobEvent>, ClientError> {
        Ok(self.inner.message().await?)
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
                Some(Event::Done(done)) => {
                    job.done = done;
                    return Ok(job);
                }
                Some(Event::Failed(failed)) => {
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
        Pin::new(&mut self.inner).poll_next(cx).map(|item| item.map(|r| r.map_err(ClientError::from)))
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
