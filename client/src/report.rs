//! Follows one job's event stream to its end: prints each kernel as it arrives (human lines or
//! NDJSON on stdout), writes cubins to `--out`, keeps the progress bar, and decides the exit code.
//! `compile`, `lookup` and `watch` all end here, so they print alike.

use crate::artifacts::ArtifactDir;
use crate::cli::OutputArgs;
use crate::output;
use crate::progress::Progress;
use anyhow::Context;
use kiln_client::{ClientError, EventStream, pb};
use kiln_proto::pb::job_event::Event;
use std::io::Write;
use std::process::ExitCode;
use std::time::Instant;

/// Exit code when every kernel was OK.
pub const EXIT_OK: u8 = 0;
/// Exit code when a kernel failed to compile, or missed in a lookup.
pub const EXIT_KERNELS_FAILED: u8 = 1;

/// The state of one job's report.
#[derive(Debug)]
pub struct Reporter {
    json: bool,
    out: Option<ArtifactDir>,
    progress: Progress,
    /// Width of the id column; the longest id known up front, 0 when none is (watch).
    id_width: usize,
    /// From the client's point of view: includes queueing and transfer, not connecting.
    started: Instant,
    /// Counted here rather than taken from `JobDone`, so the exit code follows what was printed.
    not_ok: usize,
    job_id: String,
    /// The user's files behind the compilers' names, so logs name them.
    names: kiln_client::graph::SourceNames,
}

impl Reporter {
    /// `kernel_ids` are the ids known before the job starts (none for `watch`).
    pub fn new(output: &OutputArgs, kernel_ids: &[&str]) -> anyhow::Result<Self> {
        let out = output.out.as_deref().map(ArtifactDir::create).transpose()?;
        let mut progress = Progress::default();
        if !kernel_ids.is_empty() {
            progress.start(kernel_ids.len());
        }
        Ok(Self {
            json: output.json,
            out,
            progress,
            id_width: kernel_ids.iter().map(|id| id.len()).max().unwrap_or(0),
            started: Instant::now(),
            not_ok: 0,
            job_id: String::new(),
            names: Default::default(),
        })
    }

    /// Logs name the user's files (`scale.cu(2): error`) instead of the compilers' names
    /// (`kernel.cu(2)`, a `kiln-up/` header).
    pub fn with_names(mut self, names: kiln_client::graph::SourceNames) -> Self {
        self.names = names;
        self
    }

    /// Consumes the stream until `JobDone` and returns the exit code. A `JobFailed` event, an
    /// error status, or a stream that ends early is an error.
    pub async fn follow(mut self, mut stream: EventStream) -> anyhow::Result<ExitCode> {
        let result = self.follow_inner(&mut stream).await;
        self.progress.finish();
        result
    }

    async fn follow_inner(&mut self, stream: &mut EventStream) -> anyhow::Result<ExitCode> {
        while let Some(event) = stream.next_event().await? {
            if self.job_id.is_empty() {
                self.job_id.clone_from(&event.job_id);
            }
            match event.event {
                Some(Event::Queued(queued)) => {
                    self.progress.start(queued.kernels as usize);
                    self.progress.set_message("queued");
                }
                Some(Event::Started(_)) => self.progress.set_message("running"),
                Some(Event::Kernel(result)) => self.kernel(&result)?,
                // The stream unbatches (see EventStream); a batch is taken whole all the same.
                Some(Event::Kernels(batch)) => {
                    for result in &batch.results {
                        self.kernel(result)?;
                    }
                }
                Some(Event::Done(done)) => return self.done(&done),
                Some(Event::Failed(failed)) => {
                    return Err(ClientError::JobFailed { job_id: self.job_id.clone(), reason: failed.reason }.into());
                }
                None => {}
            }
        }
        Err(ClientError::Incomplete { job_id: self.job_id.clone() }.into())
    }

    fn kernel(&mut self, result: &pb::KernelResult) -> anyhow::Result<()> {
        let renamed;
        let result = if result.log.is_empty() {
            result
        } else {
            renamed = pb::KernelResult { log: self.names.log_for(&result.id, &result.log), ..result.clone() };
            &renamed
        };
        let ok = result.outcome() == pb::Outcome::Ok;
        if !ok {
            self.not_ok += 1;
        }
        if let (Some(out), true) = (&self.out, ok) {
            if result.artifact.is_empty() {
                self.progress.suspend(|| {
                    eprintln!(
                        "warning: kernel `{}` came without its cubin (job submitted with --no-artifacts?); not written",
                        result.id
                    );
                });
            } else {
                out.write(&result.id, &result.artifact)?;
            }
        }
        let line = if self.json {
            output::kernel_json(result).to_string()
        } else {
            output::kernel_text(result, self.id_width)
        };
        self.progress.suspend(|| print_line(&line))?;
        self.progress.inc();
        Ok(())
    }

    fn done(&mut self, done: &pb::JobDone) -> anyhow::Result<ExitCode> {
        self.progress.finish();
        let line = if self.json {
            output::done_json(&self.job_id, done).to_string()
        } else {
            output::summary_text(done, self.started.elapsed())
        };
        print_line(&line)?;
        let all_ok = self.not_ok == 0 && done.failed == 0 && done.missed == 0;
        Ok(ExitCode::from(if all_ok { EXIT_OK } else { EXIT_KERNELS_FAILED }))
    }
}

/// Writes one line to stdout. An error (a closed pipe, say) ends the command instead of
/// panicking the way `println!` would.
pub fn print_line(line: &str) -> anyhow::Result<()> {
    let mut stdout = std::io::stdout().lock();
    writeln!(stdout, "{line}").context("writing to stdout")
}
