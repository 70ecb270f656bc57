"""A torch.compile job's ledger in the fleet, with a real torch 2.11 on the CPU, real kilnds, a
real kiln-cache and a real redis-server: an async cold run, a blocking warm restart that measures
its eager step (KILN_TORCH_MEASURE), and two processes at once on another kilnd, all under one
job name, give one fleet row whose figures are the merge of the four processes'. A kilnd that
cannot reach the fleet keeps the accounts and sends them when it can.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from harness import CacheServer, Kilnd, Redis, http_get, metric
from test_torch_graphs import run_job

import kiln
from kiln.torch.results import TorchGraphCost

JOB = "ledger-e2e"


@dataclass
class Fleet:
    dir: Path
    redis: Redis
    cache: CacheServer
    a: Kilnd
    b: Kilnd


@pytest.fixture(scope="module")
def fleet(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Fleet]:
    d = tmp_path_factory.mktemp("ledger")
    redis = Redis(d / "redis")
    cache = CacheServer(d / "kiln-cache", redis)
    # Two kilnds with caches of their own: "hosts" that share only the fleet.
    f = Fleet(d, redis, cache, Kilnd(d / "kilnd-a", remote=cache, config="audit = false\n"), Kilnd(d / "kilnd-b", remote=cache, config="audit = false\n"))
    yield f
    for k in (f.a, f.b):
        k.stop()
    f.cache.stop()
    f.redis.kill9()


def eventually(what: str, check: Callable[[], Any], bound: float = 30.0) -> Any:
    deadline = time.monotonic() + bound
    while time.monotonic() < deadline:
        if value := check():
            return value
        time.sleep(0.25)
    raise AssertionError(f"{what}: not within {bound:.0f} s")


def fleet_row(kilnd: Kilnd, job: str = JOB) -> kiln.TorchJobReturn:
    with kiln.Client(kilnd.uri) as c:
        answer = c.torch_jobs(job)
    assert answer.source == "fleet", answer
    (row,) = answer.jobs
    return row


def steps_of(run: dict[str, Any]) -> int:
    (graph,) = run["graphs"]["graphs"]
    return int(graph["calls"]["eager"] + graph["calls"]["compiled"])


def test_three_runs_of_one_job_give_one_fleet_row_that_merges_them(fleet: Fleet, tmp_path: Path) -> None:
    cache, a, b = fleet.cache, fleet.a, fleet.b
    env = dict(KILN_TORCH_JOB=JOB, WIDTH="40")
    # 1. Async and cold: the graph runs eagerly while kilnd A compiles it on the same CPU, so its
    # eager samples are contended; the compile is the job's cold compile.
    # A fallback (kilnd refused or failed the compile) would leave the graph eager for good: the
    # job ends at once, and says why. A swap that never comes shows every thread's stack.
    cold = run_job(
        a.uri, tmp_path / "cold", KILN_TORCH_ASYNC="1", STEPS="1000000", STOP_WHEN_COMPILED="40", STOP_ON_FALLBACK="1",
        DUMP_STACKS_AFTER="300", STOP_AFTER_SECS="330", **env,
    )
    (graph,) = cold["graphs"]["graphs"]
    assert cold["graphs"]["fallbacks"] == {}, (cold["graphs"], cold["stderr"][-3000:], a.log_tail())
    assert graph["how"] == "kilnd" and graph["tier"] == "compiled" and graph["calls"]["eager"] > 1, (graph, cold["stderr"][-8000:], a.log_tail())
    stored = graph["stored_compile_s"]
    # Charged its serialization and its swap (the load), not the eager steps it ran meanwhile.
    # (It ran eagerly for at least the worker's compile, which it is not charged.)
    assert stored > 0 and 0 < graph["compile_s"] <= graph["ready_after_s"] - 0.9 * stored, graph
    assert "kiln: torch.compile cost this job" in cold["stderr"], cold["stderr"][-2000:]
    row = fleet_row(a)
    assert row.cold_compile_s == pytest.approx(stored) and row.saved_s == 0 and row.processes == 1, row
    assert row.eager_basis == "contended" and "KILN_TORCH_MEASURE" in row.verdict, (row, graph)

    # 2. The job again, blocking, on the same kilnd: the stored graph, compiled from the first
    # step. Its process is charged what it spent; the stored compile counts as saved; it
    # measures its eager step alone after the compile.
    warm = run_job(a.uri, tmp_path / "warm", KILN_TORCH_MEASURE="3", STEPS="60", **env)
    (graph,) = warm["graphs"]["graphs"]
    assert graph["how"] == "kilnd" and graph["tier"] in ("memory", "disk") and graph["measured"] == 3, graph
    assert graph["stored_compile_s"] == pytest.approx(stored)
    row = fleet_row(a)
    assert row.processes == 2 and row.saved_s == pytest.approx(stored) and row.cold_compile_s == pytest.approx(stored), row
    assert row.eager_basis == "uncontended" and row.speedup > 0, row
    assert row.steps == steps_of(cold) + steps_of(warm)

    # 3. Two processes at once on the other kilnd, whose own caches are empty: the fleet's.
    both: dict[str, dict[str, Any]] = {}

    def one(name: str) -> None:
        both[name] = run_job(b.uri, tmp_path / name, STEPS="20", **env)

    herd = [threading.Thread(target=one, args=(n,)) for n in ("rank0", "rank1")]
    for t in herd:
        t.start()
    for t in herd:
        t.join()
    runs = [cold, warm, both["rank0"], both["rank1"]]
    row = fleet_row(b)
    assert row.processes == 4 and row.ended, row
    assert row.steps == sum(steps_of(r) for r in runs), row
    # Rank skew: the two processes that started together, not the earlier runs' (whose first
    # steps ended before they started).
    ends = [both[n]["graphs"]["first_step_unix_ms"] for n in ("rank0", "rank1")]
    assert all(ends) and row.first_step_processes == 2, (ends, row)
    assert row.first_step_skew_s == pytest.approx(abs(ends[0] - ends[1]) / 1e3), (ends, row)
    # The cold compile counted once, whichever host compiled it; every stored answer saved it.
    assert row.cold_compile_s == pytest.approx(stored), row
    warm_hits = sum(1 for r in runs for g in r["graphs"]["graphs"] if g["tier"] in ("memory", "disk", "remote"))
    assert warm_hits >= 2 and row.saved_s == pytest.approx(warm_hits * stored), (warm_hits, row)
    paid = sum(g["compile_s"] for r in runs[1:] for g in r["graphs"]["graphs"])
    assert row.process_compile_s == pytest.approx(paid + cold["graphs"]["graphs"][0]["compile_s"], rel=1e-6), row
    # Each kilnd sees only its own processes; both show the one fleet row.
    assert fleet_row(a) == row
    with kiln.Client(b.uri) as c:
        here = c.stats().torch_graphs
    assert here is not None and [j.processes for j in here.jobs if j.job == JOB] == [2]

    # The fleet page and kiln-cache's /metrics show the same row.
    page = json.loads(http_get(cache.metrics_port, "/status.json"))
    (shown,) = [j for j in page["torch_jobs"] if j["job"] == JOB]
    # The proto3 JSON mapping: 64-bit integers as strings.
    assert int(shown["steps"]) == row.steps and int(shown["processes"]) == 4, shown
    def exported() -> str | None:
        text = http_get(cache.metrics_port, "/metrics")
        return text if f'kiln_server_torch_job_steps{{torch_job="{JOB}"}}' in text else None

    text = eventually("kiln-cache exports the job", exported, bound=30)
    assert metric(text, f'kiln_server_torch_job_steps{{torch_job="{JOB}"}}') == row.steps
    assert metric(text, f'kiln_server_torch_job_saved_seconds{{torch_job="{JOB}"}}') == pytest.approx(row.saved_s)


def report(kilnd: Kilnd, job: str, process: str, steps: int, **kw: Any) -> kiln.TorchJobReturn:
    cost = TorchGraphCost("g", 0, steps, 0.0, 0.004, 0.5, compiled_samples=steps)
    with kiln.Client(kilnd.uri) as c:
        return c.report_torch_graphs(job, {}, [cost], process=process, **kw)


def test_a_kilnd_keeps_accounts_while_the_fleet_is_down_and_sends_them_later(fleet: Fleet) -> None:
    a = fleet.a
    fleet.redis.kill9()
    try:
        # kilnd's breaker opens once it sees Redis gone (its probe, or this report's failure).
        for steps in (10, 20):
            ret = report(a, "offline-job", "offline-0001", steps)
            assert ret.steps == steps and ret.processes == 1
        with kiln.Client(a.uri) as c:
            answer = eventually("kilnd answers from its own ledger", lambda: (j := c.torch_jobs("offline-job")).source == "kilnd" and j)
        assert [j.steps for j in answer.jobs] == [20] and "this host's processes only" in answer.source_detail
    finally:
        # The same socket: kiln-cache reconnects, kilnd's probe closes its breaker, and the
        # forwarder sends what it kept (every 10 s).
        fleet.redis = Redis(fleet.dir / "redis")
    row = eventually("the kept account reaches the fleet", lambda: _fleet_or_none(a, "offline-job"), bound=60)
    assert (row.steps, row.processes) == (20, 1), row


def _fleet_or_none(kilnd: Kilnd, job: str) -> kiln.TorchJobReturn | None:
    with kiln.Client(kilnd.uri) as c:
        answer = c.torch_jobs(job)
    return answer.jobs[0] if answer.source == "fleet" and answer.jobs else None


def test_every_bad_field_of_a_report_is_named(fleet: Fleet) -> None:
    a = fleet.a
    with pytest.raises(kiln.InvalidArgument, match=r"process:"):
        report(a, "j", "short", 1)
    with pytest.raises(kiln.InvalidArgument, match=r"rank:"):
        report(a, "j", "process-0001", 1, rank=-5)
    with kiln.Client(a.uri) as c, pytest.raises(kiln.InvalidArgument, match=r"graphs\[0\]\.served"):
        c.report_torch_graphs("j", {}, [TorchGraphCost("g", served="sideways")], process="process-0001")
    with kiln.Client(a.uri) as c, pytest.raises(kiln.InvalidArgument, match=r"job:"):
        c.torch_jobs("j\n")


def test_the_exit_line_says_cost_saving_and_break_even() -> None:
    from kiln.torch._ledger import exit_line

    def ret(**kw: Any) -> kiln.TorchJobReturn:
        base: dict[str, Any] = dict(job="llama", eager_step_s=0.01704, compiled_step_s=0.00597, speedup=2.85, compile_s=18.3,
                                    break_even_steps=1655.2, steps=1500, verdict="", processes=1)
        return kiln.TorchJobReturn(**{**base, **kw})

    assert exit_line(ret()) == "kiln: torch.compile cost this job 18.3 s and has saved 16.6 s over 1,500 steps; it pays for itself after 1,656 steps"
    assert exit_line(ret(steps=2000)).endswith("; it paid for itself after 1,656 steps")
    ended = exit_line(ret(steps=40, ended=True, processes=2))
    assert ended.endswith("(job llama, 2 processes); it needed 1,656 steps to pay for itself: run it eagerly, or with KILN_TORCH_ASYNC=1"), ended
    slower = exit_line(ret(eager_step_s=0.005, speedup=0.84))
    assert "saves nothing" in slower and slower.endswith("run it eagerly"), slower
    unmeasured = exit_line(ret(speedup=0.0, verdict="not measured yet: no graph has run eagerly"))
    assert unmeasured == "kiln: torch.compile cost this job 18.3 s over 1,500 steps; not measured yet: no graph has run eagerly"


def test_eager_samples_during_a_compile_on_this_host_are_contended() -> None:
    from kiln.torch._ledger import GraphRecord

    g = GraphRecord("forward:0/0", how="kilnd", tier="compiled")
    # Samples (end, seconds): two inside the compile's window, three after it, the first of all
    # (the warm-up) left out.
    g.samples["eager"] = [(1.0, 9.0), (2.0, 0.5), (3.0, 0.5), (11.0, 0.2), (12.0, 0.2), (13.0, 0.3)]
    cost = g.cost([(0.0, 10.0)])
    assert (cost.eager_samples, cost.eager_contended_samples) == (3, 2), cost
    assert (cost.eager_median_s, cost.eager_contended_median_s) == (0.2, 0.5), cost
    assert cost.served == "cold"
    # A stored answer ran no compile here: its wait is no window.
    warm = GraphRecord("g", how="kilnd", tier="remote", created=0.0, answered_at=5.0)
    assert warm.window(20.0) is None and warm.served() == "remote"
    waiting = GraphRecord("g", how="eager", created=1.0)
    assert waiting.window(20.0) == (1.0, 20.0)


def test_a_sample_that_spans_a_swap_times_the_swap_and_counts_neither_way() -> None:
    from kiln.torch._ledger import GraphRecord

    # Two pieces of one job, swapped at consecutive steps (each swap's load, and its first
    # compiled call's autotuning, on the training thread): piece a at 10 s, piece b at 11 s.
    a, b = GraphRecord("bucket 1"), GraphRecord("bucket 2")
    a.swap_began(10.0)
    b.swap_began(11.0)
    # The warm-up lasts until the graph's second compiled call.
    a.called("compiled")
    assert a.warm_until is None and a.warm_up(10.5) == (10.0, 10.5)
    a.called("compiled")
    assert a.warm_until is not None
    a.warm_until, b.warm_until = 11.0, 12.0
    a.samples["compiled"] = [(11.0, 1.0), (12.0, 0.8)]
    warm_ups = [w for g in (a, b) if (w := g.warm_up(20.0)) is not None]
    # a's first interval is its own warm-up; its second spans b's swap: no compiled figure yet,
    # rather than b's swap read as a's compiled step.
    assert a.cost([], warm_ups).compiled_samples == 0
    # Later steps are figures again.
    a.samples["compiled"] += [(12.05, 0.05), (12.1, 0.05)]
    cost = a.cost([], warm_ups)
    assert (cost.compiled_samples, cost.compiled_median_s) == (2, 0.05), cost
    # A swap that failed leaves the graph eager: its window closes rather than hiding every
    # later sample of every graph.
    failed = GraphRecord("failed")
    failed.swap_began(30.0)
    failed.swap_failed(31.0)
    assert failed.warm_up(90.0) == (30.0, 31.0)
    # A graph's only compiled interval is its warm-up, not a figure.
    once = GraphRecord("once")
    once.samples["compiled"] = [(5.0, 3.4)]
    assert once.cost([]).compiled_samples == 0


def test_a_sample_overlaps_the_merged_spans_exactly_when_it_overlaps_one_of_them() -> None:
    import random

    from kiln.torch._ledger import Intervals

    rng = random.Random(7)
    for _ in range(200):
        spans = [(a, a + rng.uniform(0.0, 3.0)) for a in (rng.uniform(0.0, 20.0) for _ in range(rng.randint(0, 8)))]
        merged = Intervals(spans)
        for _ in range(50):
            end, seconds = rng.uniform(0.0, 25.0), rng.uniform(0.0, 2.0)
            one_by_one = any(start < end and end - seconds < stop for start, stop in spans)
            assert merged.overlap((end, seconds)) == one_by_one, (spans, end, seconds)
