//! Sample messages for the tests of what shows them. `kiln stats` and kilnd's status page render
//! the same torch.compile figures, so their tests start from one sample.

use crate::pb;

/// torch.compile graph stats as kilnd reports them: 3 graphs compiled, 1 failed, 5 answered from
/// a tier or another's compile, 2 fallbacks for one reason (another reason never taken), and one
/// job, named `job`, whose compile has not paid for itself yet: 15 ms a step eager against 9 ms
/// compiled, 24 s of compile (20 s cold, 4 s paid by its one process) that pays after 4000
/// steps, and 120 steps run.
pub fn torch_graph_stats(job: &str) -> pb::TorchGraphStats {
    pb::TorchGraphStats {
        compiled: 3,
        failed: 1,
        hits: 5,
        fallbacks: [("not_reused".to_owned(), 2), ("unserializable".to_owned(), 0)].into(),
        jobs: vec![pb::TorchJobReturn {
            job: job.into(),
            eager_step_s: 0.015,
            compiled_step_s: 0.009,
            speedup: 15.0 / 9.0,
            compile_s: 24.0,
            break_even_steps: 4000.0,
            steps: 120,
            verdict: "the compile has not paid for itself yet: 120 steps of the 4000 it needs".into(),
            cold_compile_s: 20.0,
            process_compile_s: 4.0,
            processes: 1,
            ..Default::default()
        }],
    }
}
