//! Figure (q)'s report: its section (rows against the leases-off baseline, how it was measured,
//! each run described) and the model that scales the measured load to 64 hosts × 8 ranks.

use super::*;

/// `name n, name n, …`.
fn listed<K: std::fmt::Display, N: std::fmt::Display>(counts: impl IntoIterator<Item = (K, N)>) -> String {
    counts.into_iter().map(|(name, n)| format!("{name} {n}")).collect::<Vec<_>>().join(", ")
}

fn describe(r: &Run) -> String {
    let max_fetched = r.fetched.iter().copied().fold(0.0, f64::max) / 1e6;
    let hosts_fetching = r.fetched.iter().filter(|&&b| b > 0.0).count();
    format!(
        "{:.2} s; {} `compile_here` grants (at most {} by one rank), {} compiled by `/metrics`; every claim's stream \
         open {:.2} s after the barrier; publishes landed {:.2}-{:.2} s after it; answers loaded by tier: {}, at {} \
         after the barrier, the last {:.2} s after its graph's first publish in the fleet; fleet leases (kilnds' \
         `/metrics`): {}; kiln-cache calls for the graphs {}, {:.1} per host per graph, peak {:.0}/s, mean \
         {:.0}/s; kiln-cache calls by op over {:.1} s, the hosts' own included: {}; Redis commands {} ({}); fetched \
         from the fleet by {hosts_fetching} hosts, {:.1} MB a host on average, {:.1} MB at most, kiln-cache served \
         {:.1} MB (keys read: {}); CPU seconds: kiln-cache {:.2}, redis-server {:.2}, the 32 kilnds {:.2}, the \
         ranks {:.2}",
        r.wall.as_secs_f64(),
        r.grants,
        r.most_by_one_rank,
        r.compiled_metrics,
        r.last_asked.as_secs_f64(),
        r.publishes.0.as_secs_f64(),
        r.publishes.1.as_secs_f64(),
        listed(r.tiers.iter()),
        r.answers.summary(),
        r.after_publish.as_secs_f64(),
        match listed(r.leases.iter().filter(|(_, n)| **n > 0.0)) {
            none if none.is_empty() => "none".to_string(),
            some => some,
        },
        r.graph_calls(),
        r.graph_calls() / (HOSTS * GRAPHS) as f64,
        r.peak_rate,
        r.mean_rate(),
        r.span.as_secs_f64(),
        listed(r.calls.iter()),
        r.redis_commands(),
        listed(r.redis.iter()),
        r.mean_fetched_mb(),
        max_fetched,
        r.served / 1e6,
        listed(r.lookups.iter()),
        r.cache_cpu,
        r.redis_cpu,
        r.kilnds_cpu,
        r.ranks_cpu,
    )
}

/// A row of medians: what it measures, that quantity of one run, and its unit.
type MedianRow = (String, fn(&Run) -> f64, fn(f64) -> Value);

/// The median over `runs` of what `f` measures (of an even count, the upper middle).
fn median(runs: &[Run], f: impl Fn(&Run) -> f64) -> f64 {
    let mut values: Vec<f64> = runs.iter().map(f).collect();
    values.sort_by(f64::total_cmp);
    values.get(values.len() / 2).copied().unwrap_or(0.0)
}

pub async fn run(bench: &Bench) -> Result<Section> {
    let rounds = bench.options.fleet_rounds.max(1);
    let mut s = Section::new(TITLE);
    s.method = vec![
        format!(
            "One redis-server (Unix socket) and one kiln-cache, started for this figure, and {HOSTS} kilnd processes, \
             the hosts: each its own empty cache directory, `--concurrency 1`, the kiln-cache as its remote tier \
             (read-write token), `/metrics` on, the shipped defaults otherwise; started fresh for every run (start-up \
             not timed). All share this machine's {} cores with the process that runs the ranks.",
            bench.cores
        ),
        format!(
            "Each host has {RANKS} simulated ranks: tasks of one process, each its own gRPC connection to its host's \
             kilnd socket. A barrier releases all {}; each asks for the job's {GRAPHS} graphs in order with \
             `ClaimTorchGraph`, as kiln.torch does on the CPU when a job on several hosts splits its cold compile \
             (its default): a claim, neither `no_worker` nor `prefer_workers`, declaring torch's, Triton's and \
             Python's versions (a CPU build: no CUDA), so that kilnd keys each graph by the rank's own environment \
             and starts no torch worker. Graph N falls to host (N − 1) mod {HOSTS}, and within it to rank \
             (N − 1) div {HOSTS}, as kiln.torch places DDP's pieces; every other rank leaves it to that one with \
             `wait_for_claim_ms`: {LEAVE_TO_RANK_MS} ms for a rank of its host, {LEAVE_TO_HOST_MS} ms for another \
             host's, a wait its kilnd ends at that host's publish (one fleet watch per key per host). A rank's \
             claims go out in graph order, each from a task of its own, none waiting for another's answer \
             (kiln.torch asks for DDP's pieces from a background thread as they are traced); the answers come on \
             the claims' streams.",
            HOSTS * RANKS
        ),
        format!(
            "A rank granted `compile_here` compiles the graph: a {} ms sleep, so the compiles take none of the cores \
             and the rest of the wall time is the claims, waits, publishes and bytes; one graph at a time per rank, as \
             one process compiles, while its last publish goes on. Then `PublishTorchGraph` with the graph's artifact: \
             {:.1} MB of seeded random bytes, which zstd cannot shrink ({GRAPHS} of them: the 22 MB a rank of README's \
             job loaded, run 76). Every other answer must carry exactly those bytes (length and blake3) or the run \
             fails. Every rank and host asks for the same {GRAPHS} payloads; a tag makes them new every run, so every \
             graph is cold everywhere.",
            COMPILE.as_millis(),
            ARTIFACT_BYTES as f64 / 1e6
        ),
        format!(
            "kiln: fleet leases on and the split (the defaults). Baseline: the same with `fleet_leases = false` in \
             every kilnd's config and no split (no `wait_for_claim_ms`): a host's ranks still share their kilnd (the first to ask compiles, the others wait for its \
             publish), but no host waits for another, so each compiles every graph for its own ranks (a rank whose \
             claim reads the fleet after another host stored the graph loads that copy; its host compiles it all the \
             same), as plain torch.compile would once per host (once per rank, in fact: {RANKS} times that). {rounds} \
             runs of each, alternating which goes first; the table gives the largest compile count and the medians of \
             the rest."
        ),
        format!(
            "Counted: the ranks' `compile_here` grants, and `kiln_torch_graphs_total{{result=\"compiled\"}}` summed \
             over the kilnds' `/metrics` (one per publish). kiln-cache's calls: \
             `kiln_server_requests_total{{op,code}}` read before the barrier and after the hosts stopped (so a lease \
             released after the last answer counts), the calls every kilnd makes on its own clock apart ({}: the \
             health probe every 5 s, the quarantine poll every second, the host report every 10 s). Peak calls per \
             second: the most between two reads of those counters {} ms apart from the barrier on; mean: the calls \
             over the wall time. Redis's commands: `INFO commandstats` over the same span, the INFO itself left out. \
             Bytes a host fetched: its kilnd's `kiln_artifact_bytes_total{{tier=\"remote\",direction=\"read\"}}` \
             (envelopes verified from the fleet, by Get or by watch), with kiln-cache's \
             `kiln_server_artifact_bytes_total{{direction=\"out\"}}` beside it. CPU seconds: `/proc/PID/stat` of \
             kiln-cache and redis-server over the same span as their calls, and of the kilnds and the ranks' process \
             from the barrier to the last answer.",
            BACKGROUND_OPS.join(", "),
            SAMPLE.as_millis()
        ),
    ];
    let fleet = Fleet::start(bench).await?;
    let (on, off) = leases_on_and_off(rounds, |leases, round| run_once(bench, &fleet, leases, round)).await?;
    s.rows.push(
        Row::new(
            "compiles across the fleet (`compile_here` grants)",
            Ok(Value::Count(most(&on, |r| r.grants as f64))),
            "leases off",
            Ok(Value::Count(most(&off, |r| r.grants as f64))),
        )
        .with_target(Target::CountEquals(GRAPHS as u64)),
    );
    s.rows.push(
        Row::new(
            "compiles across the fleet (kilnds' `/metrics`)",
            Ok(Value::Count(most(&on, |r| r.compiled_metrics))),
            "leases off",
            Ok(Value::Count(most(&off, |r| r.compiled_metrics))),
        )
        .with_target(Target::CountEquals(GRAPHS as u64)),
    );
    s.rows.push(
        Row::new(
            "kiln-cache `WatchPublish` streams opened, median",
            Ok(Value::Count(median(&on, Run::watches))),
            "the ranks' claims left to another host (one stream each when each request watched alone)",
            Ok(Value::Count(median(&on, |r| r.left_to_hosts as f64))),
        )
        // One watch per host per graph: every host's ranks leave most graphs to another host, and
        // the host the graph falls to may watch too while its own rank claims it.
        .with_target(Target::RatioAtMost((HOSTS * GRAPHS) as f64 / median(&on, |r| r.left_to_hosts as f64).max(1.0))),
    );
    let medians: [MedianRow; 7] = [
        (
            format!("wall time until all {} ranks have all {GRAPHS} graphs, median", HOSTS * RANKS),
            |r| r.wall.as_secs_f64(),
            Value::Seconds,
        ),
        ("kiln-cache calls for the graphs, median".into(), Run::graph_calls, Value::Count),
        (
            format!("kiln-cache calls per second, peak over {} ms, median", SAMPLE.as_millis()),
            |r| r.peak_rate,
            Value::PerSecond,
        ),
        ("Redis commands, median".into(), Run::redis_commands, Value::Count),
        ("kiln-cache CPU, median".into(), |r| r.cache_cpu, Value::Seconds),
        ("redis-server CPU, median".into(), |r| r.redis_cpu, Value::Seconds),
        ("MB each host fetched from the fleet (mean of the hosts), median".into(), Run::mean_fetched_mb, Value::Count),
    ];
    for (measurement, f, unit) in medians {
        s.rows.push(Row::new(measurement, Ok(unit(median(&on, f))), "leases off, median", Ok(unit(median(&off, f)))));
    }
    for (i, r) in on.iter().enumerate() {
        s.notes.push(format!("leases on, run {}: {}", i + 1, describe(r)));
    }
    for (i, r) in off.iter().enumerate() {
        s.notes.push(format!("leases off, run {}: {}", i + 1, describe(r)));
    }
    let busy = |r: &Run| (r.cache_cpu + r.redis_cpu + r.kilnds_cpu + r.ranks_cpu) / r.wall.as_secs_f64();
    let (busy_on, busy_off) = (median(&on, busy), median(&off, busy));
    // Saturated: the wall times are the cores' work, not waits (the compiles are sleeps).
    let saturated = busy_on.min(busy_off) >= 0.9 * bench.cores as f64;
    s.notes.push(format!(
        "Where the wall time goes: kiln-cache, redis-server, the {HOSTS} kilnds and the ranks kept {busy_on:.1} of \
         this machine's {} cores busy over the kiln runs and {busy_off:.1} over the baseline's (medians), moving \
         each graph to all {} ranks ({:.1} GB a run through the kilnds' sockets, every copy checked) and through the \
         fleet.{}",
        bench.cores,
        HOSTS * RANKS,
        (HOSTS * RANKS * GRAPHS * ARTIFACT_BYTES) as f64 / 1e9,
        if saturated {
            " The cores were saturated: both wall times are what they took for that work on this machine, not \
             waits on compiles, and they compare the two sides' work here rather than a fleet's cold start."
        } else {
            ""
        }
    ));
    s.appendix = model(&on);
    Ok(s)
}

/// README's fleet (64 hosts × 8 ranks, the 18-graph job, a 20 s cold start) from the medians of
/// the kiln runs: the calls and bytes per host per graph, and the hosts' own calls per second,
/// scale with the hosts; kiln-cache's and Redis's CPU per call are this run's (over its mix of
/// calls, the bytes served included).
fn model(on: &[Run]) -> String {
    let host_graphs = (HOSTS * GRAPHS) as f64;
    let per_host_graph = median(on, Run::graph_calls) / host_graphs;
    let ops: std::collections::BTreeSet<&String> =
        on.iter().flat_map(|r| r.calls.keys()).filter(|op| !background(op)).collect();
    let per_host_graph_of = |op: &str| median(on, |r| r.calls.get(op).copied().unwrap_or(0.0)) / host_graphs;
    let by_op = listed(ops.into_iter().map(|op| (op, format!("{:.2}", per_host_graph_of(op)))));
    let all_calls = |r: &Run| r.calls.values().sum::<f64>().max(1.0);
    let cache_cpu_per_k = median(on, |r| r.cache_cpu / all_calls(r) * 1e3);
    let redis_per_call = median(on, |r| r.redis_commands() / all_calls(r));
    let redis_cpu_per_k = median(on, |r| r.redis_cpu / r.redis_commands().max(1.0) * 1e3);
    let fetched_mb = median(on, Run::mean_fetched_mb);
    let most_fetched_mb = median(on, |r| r.fetched.iter().copied().fold(0.0, f64::max) / 1e6);
    let get_hits = median(on, |r| r.lookups.get("get hit").copied().unwrap_or(0.0)) / host_graphs;
    let (mean_rate, peak_rate) = (median(on, Run::mean_rate), median(on, |r| r.peak_rate));
    let own_per_host = median(on, Run::background_per_host_second);
    // Each graph's lease is acquired once, by the host it falls to (the others leave it to that
    // one and watch for its publish); a wait past the lease TTL would take it again.
    let lease_retries = per_host_graph_of("AcquireLease") - GRAPHS as f64 / host_graphs;
    let watches = per_host_graph_of("WatchPublish");
    let last_publish = median(on, |r| r.publishes.1.as_secs_f64());

    let calls = MODEL_HOSTS * GRAPHS as f64 * per_host_graph;
    let rate = calls / MODEL_COLD_START_S;
    let readme_calls = MODEL_HOSTS * GRAPHS as f64 * README_CALLS_PER_HOST_GRAPH;
    let own = own_per_host * MODEL_HOSTS;
    let burst = peak_rate * MODEL_HOSTS / HOSTS as f64;
    let cache_cores = (rate + own) * cache_cpu_per_k / 1e3;
    let redis_rate = (rate + own) * redis_per_call;
    let fleet_mb = MODEL_HOSTS * fetched_mb;
    format!(
        "### 64 hosts × 8 ranks starting the 18-graph job cold in 20 s: the model\n\n\
         README's figure was on paper; this one scales what the kiln runs above measured (medians of {} runs of \
         {HOSTS} hosts × {RANKS} ranks and the same {GRAPHS} graphs) to README's fleet: the calls and bytes per \
         host per graph stay as measured, the hosts double, and the job's calls spread over README's 20 s cold \
         start.\n\n\
         | quantity | value | from |\n|---|---|---|\n\
         | kiln-cache calls per host per graph | **{per_host_graph:.1}** (README: {README_CALLS_PER_HOST_GRAPH:.0}) | \
         measured, by op: {by_op} |\n\
         | of which watches | {watches:.2} WatchPublish | measured: 1 is one watch a host (the host's ranks that \
         leave a graph to another host share its kilnd's one watch, which brings the artifact itself), {RANKS} \
         would be one a waiting rank |\n\
         | of which Gets | {:.2}, {get_hits:.2} of them hits | measured: a host that waits takes the graph from its \
         watch and reads nothing; the Gets are the claimants' misses and the reads of a rank that asked after the \
         publish (one read a host at most: the request that holds the graph on its host reads the fleet, its \
         other ranks take its copy) |\n\
         | of which lease retries | {lease_retries:.2} AcquireLease beyond each graph's one | each graph's lease is \
         taken once, by the host it falls to; a wait past the lease TTL (`lease_ttl_ms`, 10 s) would take it \
         again: the publishes here landed up to {last_publish:.1} s after the barrier |\n\
         | the job's calls at 64 × 8 | {calls:.0} (README: {readme_calls:.0}) | 64 hosts × {GRAPHS} graphs × the \
         above |\n\
         | kiln-cache calls per second at 64 × 8 | **{rate:.0}/s** (README: {:.0}/s) | over 20 s |\n\
         | and the hosts' own calls beside them | {own:.0}/s | {own_per_host:.2} per host per second ({}), \
         measured, × 64 |\n\
         | the job's calls at this run's burst | {burst:.0}/s | this run's peak, {peak_rate:.0}/s over {} ms, × 64 \
         ÷ {HOSTS} hosts: a fleet whose every rank asks within the same {} ms, as these did; mostly the ranks' \
         Gets, misses that carry no bytes, which this kiln-cache answered at that rate on the cores it shared \
         with everything else |\n\
         | what this one kiln-cache served here | {mean_rate:.0}/s mean over the run, {peak_rate:.0}/s at the peak \
         | measured, the job's calls |\n\
         | kiln-cache CPU per 1,000 calls | {cache_cpu_per_k:.2} CPU-s | measured: its CPU over the run ÷ every \
         call it answered (the bytes it served included) |\n\
         | kiln-cache cores at 64 × 8 | **{cache_cores:.2}** over 20 s | the calls per second above (with the \
         hosts' own) × CPU per call, the bytes served included: calls and bytes both scale with the hosts |\n\
         | Redis commands per kiln-cache call | {redis_per_call:.2} | measured |\n\
         | Redis at 64 × 8 | {redis_rate:.0} commands/s, **{:.2} cores** | × {redis_cpu_per_k:.3} CPU-s per \
         1,000 commands, measured |\n\
         | MB a host fetched from the fleet | {fetched_mb:.1} MB, at most {most_fetched_mb:.1} MB | measured: \
         kilnd's remote reads, the mean and the most over the hosts (a host that compiled a graph fetches less, \
         one whose ranks fetched their own copies more than the job's {:.1} MB) |\n\
         | the fleet's bytes at 64 × 8 | {:.2} GB, **{:.0} MB/s** over 20 s | 64 × the above |\n\n",
        on.len(),
        per_host_graph_of("Get"),
        readme_calls / MODEL_COLD_START_S,
        BACKGROUND_OPS.join(", "),
        SAMPLE.as_millis(),
        SAMPLE.as_millis(),
        redis_rate * redis_cpu_per_k / 1e3,
        (GRAPHS * ARTIFACT_BYTES) as f64 / 1e6,
        fleet_mb / 1e3,
        fleet_mb / MODEL_COLD_START_S,
    )
}
