//! The job's return in words: counts as a person reads them, and the one sentence that says
//! whether the compile pays.

use super::MIN_COMPILED_SAMPLES;
use crate::pb::TorchJobReturn;

/// A count as a person reads it: 1,656.
pub fn thousands(n: u64) -> String {
    let digits = n.to_string();
    let mut out = String::with_capacity(digits.len() + digits.len() / 3);
    for (i, c) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i).is_multiple_of(3) {
            out.push(',');
        }
        out.push(c);
    }
    out
}

/// One sentence that says whether the compile pays, and what to do when it does not.
/// `measured_eager`: whether any graph has an eager figure.
pub fn verdict(r: &TorchJobReturn, measured_eager: bool) -> String {
    let steps = thousands(r.steps);
    let mut v = if r.eager_step_s <= 0.0 || r.compiled_step_s <= 0.0 {
        let missing = if measured_eager {
            format!("no graph has run both eagerly and compiled ({MIN_COMPILED_SAMPLES} steps) yet")
        } else {
            "no graph has run eagerly (KILN_TORCH_ASYNC=1 measures both ways for free; KILN_TORCH_MEASURE=N runs N \
             eager steps of each graph after its compile)"
                .into()
        };
        format!("not measured yet: {missing}")
    } else if r.compiled_step_s >= r.eager_step_s {
        format!(
            "the compile does not pay: a compiled step ({:.2} ms) is no faster than an eager one ({:.2} ms); run it \
             eagerly",
            r.compiled_step_s * 1e3,
            r.eager_step_s * 1e3
        )
    } else if (r.steps as f64) < r.break_even_steps {
        let needed = thousands(r.break_even_steps.ceil() as u64);
        if r.ended {
            format!(
                "this job compiled for {:.0} s and ran {steps} steps: run it eagerly, or with KILN_TORCH_ASYNC=1 \
                 (it needed {needed} steps to pay for its compile)",
                r.compile_s
            )
        } else {
            format!(
                "the compile has not paid for itself yet: {steps} steps of the {needed} it needs ({:.1} s of \
                 compile, {:.2} ms saved a step)",
                r.compile_s,
                (r.eager_step_s - r.compiled_step_s) * 1e3
            )
        }
    } else {
        format!(
            "the compile has paid for itself: {steps} steps, break-even at {} ({:.2}x a step)",
            thousands(r.break_even_steps.ceil() as u64),
            r.speedup
        )
    };
    if r.eager_basis == "contended" {
        v.push_str(
            " (eager steps timed while a compile of this job ran on the host, so slower than alone: \
             KILN_TORCH_MEASURE=N times them after the compile)",
        );
    }
    v
}
