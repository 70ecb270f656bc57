//! What both daemons' Prometheus metrics share: the label sets they both use, and the per-job
//! torch.compile gauges, which kilnd exports for this host's processes and kiln-cache for the
//! fleet ledger's jobs, with the same names and the same rule for what is known; and [`set`],
//! which declares each daemon's metrics struct.

pub mod set;

use kiln_proto::pb::TorchJobReturn;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::registry::Registry;
use set::Register;
use std::sync::atomic::AtomicU64;

/// Declares Prometheus label sets: each a struct with the derives a [`Family`] key needs, so that
/// a daemon's metrics module states only the labels.
#[macro_export]
macro_rules! label_sets {
    ($($(#[$doc:meta])* $name:ident { $($(#[$field_doc:meta])* $field:ident: $ty:ty),+ $(,)? })+) => {
        $(
            $(#[$doc])*
            #[derive(Clone, Debug, Hash, PartialEq, Eq, prometheus_client::encoding::EncodeLabelSet)]
            pub struct $name {
                $($(#[$field_doc])* pub $field: $ty,)+
            }
        )+
    };
}

label_sets! {
    /// Who published an artifact: a host name.
    PublisherLabels { publisher: String }
    /// Bytes' way: `in` (stored) or `out` (served).
    DirectionLabels { direction: &'static str }
    /// A torch.compile job. Not `job`: Prometheus gives that label to the scrape job, and would
    /// rename ours to `exported_job`.
    JobLabels { torch_job: String }
}

/// One figure per torch.compile job.
pub type JobGauge = Family<JobLabels, Gauge<f64, AtomicU64>>;

/// The per-job torch.compile gauges (`<prefix>_torch_job_*`, labelled `torch_job`). Only what is
/// known has a series: a job not measured both ways has no speedup series, and one that never
/// pays (or is not measured) no break-even series, since a 0 would read as a measured figure.
#[derive(Debug, Default)]
pub struct TorchJobGauges {
    pub speedup: JobGauge,
    pub break_even_steps: JobGauge,
    pub compile_seconds: JobGauge,
    pub saved_seconds: JobGauge,
    /// The spread of the latest start's first-step ends across its processes (rank skew): no
    /// series with fewer than two processes.
    pub first_step_skew_seconds: JobGauge,
    /// Steps a job's processes ran; only kiln-cache exports it (kilnd's host page shows them).
    pub steps: Option<JobGauge>,
}

impl TorchJobGauges {
    /// The gauges, with the steps gauge where `with_steps`.
    pub fn new(with_steps: bool) -> Self {
        TorchJobGauges { steps: with_steps.then(JobGauge::default), ..Default::default() }
    }

    /// Every family, in the order [`TorchJobGauges::set`] gives their figures.
    fn families(&self) -> impl Iterator<Item = &JobGauge> {
        [
            &self.speedup,
            &self.break_even_steps,
            &self.compile_seconds,
            &self.saved_seconds,
            &self.first_step_skew_seconds,
        ]
        .into_iter()
        .chain(&self.steps)
    }

    /// Sets `job`'s series to its figures, removing those it does not know.
    pub fn set(&self, job: &TorchJobReturn) {
        let labels = JobLabels { torch_job: job.job.clone() };
        let figures = [
            (job.speedup > 0.0).then_some(job.speedup),
            (job.break_even_steps > 0.0).then_some(job.break_even_steps),
            Some(job.compile_s),
            Some(job.saved_s),
            (job.first_step_processes > 1).then_some(job.first_step_skew_s),
            Some(job.steps as f64),
        ];
        for (family, figure) in self.families().zip(figures) {
            match figure {
                Some(v) => {
                    family.get_or_create(&labels).set(v);
                }
                None => {
                    family.remove(&labels);
                }
            }
        }
    }

    /// Removes every series of the job named `job`.
    pub fn remove(&self, job: &str) {
        let labels = JobLabels { torch_job: job.to_owned() };
        for family in self.families() {
            family.remove(&labels);
        }
    }
}

/// The gauges register several families: `name` is their prefix (`<name>_speedup`, …), and
/// `help` the speedup's, which says whose jobs they are.
impl Register for TorchJobGauges {
    fn register(&self, registry: &mut Registry, name: &'static str, help: &'static str) {
        for (suffix, help, family) in [
            ("speedup", help, &self.speedup),
            (
                "break_even_steps",
                "Steps after which a job's compile pays for itself (no series while unknown or when it never does)",
                &self.break_even_steps,
            ),
            (
                "compile_seconds",
                "Compile seconds charged to a job: cold compiles once per graph, and its processes' own",
                &self.compile_seconds,
            ),
            (
                "saved_seconds",
                "Compile seconds the caches saved a job: the stored compile time of each graph taken warm",
                &self.saved_seconds,
            ),
            (
                "first_step_skew_seconds",
                "Rank skew: the spread of first-step ends across the processes of a job's latest start",
                &self.first_step_skew_seconds,
            ),
        ] {
            registry.register(format!("{name}_{suffix}"), help, family.clone());
        }
        if let Some(steps) = &self.steps {
            registry.register(format!("{name}_steps"), "Steps a job's processes ran, added up", steps.clone());
        }
    }
}
