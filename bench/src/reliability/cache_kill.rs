//! Scenario 5: kiln-cache killed with SIGKILL while a fleet herds on one cold graph, then
//! restarted on the same address. kilnd treats a fleet that does not answer as a miss, never as
//! a failed compile, so every client must get every kernel, right; the fleet may compile a
//! kernel more than once while kiln-cache is down, and the count says how often.

use super::graphs;
use super::herd;
use super::report::Outcome;
use super::{Run, blocking};
use crate::bench::fleet::Fleet;
use anyhow::Result;
use std::time::{Duration, Instant};

pub const TITLE: &str = "kiln-cache killed under a herd";
const TAG: &str = "kiln-reliability scenario 5";
const HOSTS: usize = 4;
const KERNELS: usize = 48;
/// How long kiln-cache stays down.
const DOWN: Duration = Duration::from_secs(1);

pub async fn run(run: &Run, out: &mut Outcome) -> Result<()> {
    out.method = vec![
        format!(
            "A kiln-cache over a private Redis, and {HOSTS} kilnd hosts (each `--concurrency {}`, own empty cache) \
             with it as their fleet tier. A barrier releases one client per host, all asking for the same cold \
             {KERNELS}-kernel graph. At a random moment 50–300 ms in, kiln-cache is killed with SIGKILL; {} s later \
             it is started again on the same address (Redis keeps what was published). A failed call would be \
             retried once on a new connection and counted.",
            run.bench.cores,
            DOWN.as_secs()
        ),
        "Every answer is compared byte for byte with a compile of the same graph by a separate kilnd with no \
         fleet. Compiles are the sum of `kiln_compiles_total` over the hosts. After the restart a fresh host asks \
         for the graph once more, to show the fleet serves again."
            .into(),
    ];
    let Fleet { redis, cache } = Fleet::start(&run.bench).await?;
    let uri = cache.uri();
    let daemons = herd::hosts(run, "cache-kill", HOSTS, &uri).await?;
    let req = graphs::graph(TAG, 0..KERNELS);
    let reference = graphs::reference(run, "cache-kill", &req).await?;
    let before = herd::compiles(&daemons)?;
    let (struck, chaos) = herd::under_chaos(&daemons, &req, async move {
        let mut cache = cache;
        cache.kill9();
        tokio::time::sleep(DOWN).await;
        let cache = blocking(move || {
            cache.restart();
            cache
        })
        .await?;
        Ok((cache, Instant::now()))
    })
    .await;
    let (cache, back) = chaos?;
    let h = &struck.herd;
    let compiles = herd::compiles(&daemons)? - before;
    let ms = |d: Duration| d.as_secs_f64() * 1e3;
    let back = back - struck.started;
    out.figure(
        "kiln-cache killed / back",
        format!("{:.0} ms / {:.0} ms after the release", ms(struck.struck), ms(back)),
    );
    let wrong = herd::figures(out, "herd", h, compiles, &reference);
    let fresh = herd::hosts(run, "cache-kill-after", 1, &uri).await?;
    let after = herd::herd(&fresh, &req, 0).await;
    out.figure("after the restart, a fresh host: results by tier", after.tiers_text());

    out.check(
        "every host gets every kernel, no call fails",
        format!("{} failed calls, {} hosts without the graph", h.errors.len(), h.failed_hosts()),
        h.errors.is_empty() && h.failed_hosts() == 0,
    );
    out.check("wrong bytes = 0", wrong, wrong == 0);
    struck.check_landed(out);
    drop((fresh, daemons, cache, redis));
    Ok(())
}
