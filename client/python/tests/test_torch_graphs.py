"""torch.compile graphs compiled by kilnd, with a real torch 2.11 on the CPU (Inductor's C++
backend goes through the same graph path as CUDA's): the graph leaves the process, kilnd's torch
worker compiles it once for every process that asks, torch loads the answer as its own cache
hit, async runs eagerly until then, and every fallback compiles in-process, counted by reason.
"""

from __future__ import annotations

import json
import os
import pickle
import struct
import sys
import threading
from pathlib import Path
from typing import Any

import pytest
from graph_job import run_job
from harness import Kilnd, metric, require

import kiln
from kiln._torch_calls import TorchGraphRequest

torch = require("torch")

def graphs_count(kilnd: Kilnd, result: str) -> float:
    return metric(kilnd.metrics(), f'kiln_torch_graphs_total{{result="{result}"}}')


@pytest.fixture(scope="module")
def graph_kilnd(tmp_path_factory: pytest.TempPathFactory) -> Any:
    """A kilnd of its own, so the counts below are this module's alone."""
    k = Kilnd(tmp_path_factory.mktemp("graph-kilnd"))
    yield k
    k.stop()


def test_a_herd_of_two_processes_pays_one_compile_and_the_other_gets_torchs_own_hit(graph_kilnd: Kilnd, tmp_path: Path) -> None:
    results: dict[str, dict[str, Any]] = {}

    def one(name: str) -> None:
        results[name] = run_job(graph_kilnd.uri, tmp_path / name)

    herd = [threading.Thread(target=one, args=(n,)) for n in ("a", "b")]
    for t in herd:
        t.start()
    for t in herd:
        t.join()
    claimed = []
    for name in ("a", "b"):
        r = results[name]
        assert r["graphs"]["fallbacks"] == {}, r["stderr"][-3000:]
        (graph,) = r["graphs"]["graphs"]
        assert graph["how"] == "kilnd", graph
        if graph["tier"] == "compiled":
            # The first to ask claimed the graph and compiled it in its own process, as torch would...
            claimed.append(name)
            assert r["aot"].get("autograd_cache_miss") == 1, r["aot"]
            # Its own work, step by step: where a cold start through kilnd would lose time.
            assert graph["phases"]["compile"] > 0 and graph["phases"]["save"] > 0, graph
        else:
            # ...and the other waited for its publish, which torch found as its own AOTAutograd
            # cache entry: nothing compiled there.
            assert r["aot"].get("autograd_cache_hit") == 1 and "autograd_cache_miss" not in r["aot"], r["aot"]
    assert len(claimed) == 1, results
    assert graphs_count(graph_kilnd, "compiled") == 1, graph_kilnd.metrics()
    assert graphs_count(graph_kilnd, "hit") == 1
    # The same compiled code as torch's own in-process compile: the same losses, bit for bit.
    plain = run_job(graph_kilnd.uri, tmp_path / "plain", KILN_TORCH_GRAPHS="0")
    assert plain["graphs"]["graphs"] == [] and plain["aot"].get("autograd_cache_miss") == 1
    assert results["a"]["losses"] == results["b"]["losses"] == plain["losses"]


def test_async_runs_eagerly_until_kilnds_compile_is_ready_then_compiled(graph_kilnd: Kilnd, tmp_path: Path) -> None:
    # A graph kilnd has not seen (another width), so its compile is cold and the first calls eager.
    # The job steps once a second until three calls have run compiled (at most 300 steps), so a
    # loaded machine's slower compile still ends in a swap.
    job = dict(KILN_TORCH_ASYNC="1", STEPS="300", SLEEP="1", STOP_WHEN_COMPILED="3", WIDTH="48")
    r = run_job(graph_kilnd.uri, tmp_path / "async", **job)
    (graph,) = r["graphs"]["graphs"]
    assert r["graphs"]["fallbacks"] == {}, r["stderr"][-3000:]
    assert graph["how"] == "kilnd" and graph["calls"]["eager"] >= 1 and graph["calls"]["compiled"] >= 1, graph
    assert r["aot"].get("autograd_cache_hit") == 1, r["aot"]
    blocking = run_job(graph_kilnd.uri, tmp_path / "blocking", STEPS=str(len(r["losses"])), WIDTH="48")
    # Eager and compiled float arithmetic differ in the last bits; a training step does not.
    for a, b in zip(r["losses"], blocking["losses"], strict=True):
        assert abs(a - b) <= 1e-5 * max(1.0, abs(b)), (r["losses"], blocking["losses"])
    # The job's return: measured both ways and reported to kilnd at exit, which exports it.
    assert "kiln_torch_job_compile_seconds{" in graph_kilnd.metrics()


def test_a_graph_that_generates_no_code_compiles_here_quietly_sync_or_async(graph_kilnd: Kilnd, tmp_path: Path) -> None:
    # A compiled train step: the model's graph, then the resume function after the backward's
    # graph break, which only detaches the loss. Async, kilnd's worker compiles each graph; the
    # second leaves torch nothing to cache, and kilnd's answer says so (once a failure, warned).
    job = dict(TRAIN_STEP="1", WIDTH="44")
    failed = graphs_count(graph_kilnd, "failed")
    r = run_job(graph_kilnd.uri, tmp_path / "async", KILN_TORCH_ASYNC="1", STEPS="300", SLEEP="1", STOP_WHEN_COMPILED="2", **job)
    # An async graph kilnd does not answer with a compile stays eager, which for this one is
    # all its compile would run.
    hows = sorted(g["how"] for g in r["graphs"]["graphs"])
    assert r["graphs"]["fallbacks"] == {"unshared": 1} and hows == ["eager", "kilnd"], (r["graphs"], r["stderr"][-3000:])
    assert "instead of by kilnd" not in r["stderr"], r["stderr"][-3000:]
    # The empty answer is stored like any other: the next process, blocking, is told at once to
    # compile that graph itself, and loads the other.
    again = run_job(graph_kilnd.uri, tmp_path / "again", STEPS=str(len(r["losses"])), **job)
    hows = sorted((g["how"], g["tier"]) for g in again["graphs"]["graphs"])
    assert again["graphs"]["fallbacks"] == {"unshared": 1} and hows[0] == ("in-process", "") and hows[1][0] == "kilnd", again["graphs"]
    assert hows[1][1] != "compiled" and graphs_count(graph_kilnd, "failed") == failed, (hows, graph_kilnd.metrics())
    for a, b in zip(r["losses"], again["losses"], strict=True):
        assert abs(a - b) <= 1e-5 * max(1.0, abs(b)), (r["losses"], again["losses"])


def test_kilnd_unreachable_compiles_in_process_with_one_warning(tmp_path: Path) -> None:
    r = run_job(f"unix://{tmp_path}/nobody.sock", tmp_path / "down")
    assert r["graphs"]["fallbacks"] == {"kilnd_unreachable": 1}, r["graphs"]
    assert r["aot"].get("autograd_cache_miss") == 1
    assert r["stderr"].count("instead of by kilnd") == 1, r["stderr"][-3000:]


def graph_requests(kilnd: Kilnd) -> float:
    return sum(graphs_count(kilnd, result) for result in ("compiled", "hit", "failed", "refused"))


def test_dynamic_shapes_do_not_travel_and_compile_in_process(graph_kilnd: Kilnd, tmp_path: Path) -> None:
    before = graph_requests(graph_kilnd)
    r = run_job(graph_kilnd.uri, tmp_path / "dynamic", DYNAMIC="1")
    assert r["graphs"]["fallbacks"] == {"unserializable": 1}, r["graphs"]
    assert len(r["losses"]) == 3
    # Decided before any round trip: kilnd never saw the graph.
    assert graph_requests(graph_kilnd) == before
    # Async, the graph runs eagerly for the rest of the process, as an async graph whose compile
    # failed does: compiled here, its first call's step would have waited for the whole compile.
    a = run_job(graph_kilnd.uri, tmp_path / "async", DYNAMIC="1", KILN_TORCH_ASYNC="1")
    (graph,) = a["graphs"]["graphs"]
    assert a["graphs"]["fallbacks"] == {"unserializable": 1} and graph_requests(graph_kilnd) == before, a["graphs"]
    assert graph["how"] == "eager" and graph["calls"] == {"eager": 3, "compiled": 0} and "compile" not in graph["phases"], graph
    assert "runs eagerly for the rest of this process" in a["stderr"], a["stderr"][-2000:]
    # torch compiled nothing: no AOTAutograd trace ran.
    assert not a["aot"], a["aot"]
    for x, y in zip(a["losses"], r["losses"], strict=True):
        assert abs(x - y) <= 1e-5 * max(1.0, abs(y)), (a["losses"], r["losses"])


def test_by_default_every_graph_goes_through_kilnd_and_a_setting_keeps_some_home(graph_kilnd: Kilnd, tmp_path: Path) -> None:
    # KILN_TORCH=1 as a new user sets it, with no KILN_TORCH_GRAPHS and no KILN_TORCH_CLAIM: the
    # process claims its graph, compiles it as torch would, and shares it.
    # A width of its own: a graph no earlier test of this kilnd compiled.
    r = run_job(graph_kilnd.uri, tmp_path / "default", KILN_TORCH_GRAPHS="", KILN_TORCH_CLAIM="", WIDTH="36")
    assert r["graphs"]["fallbacks"] == {}, r["graphs"]
    (graph,) = r["graphs"]["graphs"]
    assert graph["how"] == "kilnd" and graph["tier"] == "compiled" and len(r["losses"]) == 3, graph
    # What the process paid is its own compile, and its steps count as compiled ones.
    assert graph["phases"].get("compile", 0) > 0 and graph["calls"]["compiled"] == 3, graph
    assert "kiln: torch.compile cost this job" in r["stderr"], r["stderr"][-2000:]
    # The next process loads it.
    again = run_job(graph_kilnd.uri, tmp_path / "again", KILN_TORCH_GRAPHS="", KILN_TORCH_CLAIM="", WIDTH="36")
    (loaded,) = again["graphs"]["graphs"]
    assert again["graphs"]["fallbacks"] == {} and loaded["how"] == "kilnd" and loaded["tier"] != "compiled", loaded
    assert "compile" not in loaded["phases"] and again["losses"] == r["losses"], (loaded, again["losses"], r["losses"])
    # The claim was published at the first backward, with AOTAutograd's entry (the backward too).
    assert again["aot"].get("autograd_cache_hit") == 1 and not again["aot"].get("autograd_cache_miss"), again["aot"]
    # A named layout sends it.
    sent = run_job(graph_kilnd.uri, tmp_path / "named", KILN_TORCH_GRAPHS="single", WIDTH="40")
    assert sent["graphs"]["fallbacks"] == {} and sent["graphs"]["graphs"][0]["how"] == "kilnd", sent["graphs"]
    # A setting that names other layouts keeps it home, counted apart, with no warning; and kiln
    # explain says the graph stayed in the process, where it has no key to explain.
    other = run_job(graph_kilnd.uri, tmp_path / "other", KILN_TORCH_GRAPHS="ddp", KILN_TORCH_JOB="stayed-home")
    assert other["graphs"]["fallbacks"] == {"not_chosen": 1}, other["graphs"]
    assert "instead of by kilnd" not in other["stderr"], other["stderr"][-2000:]
    with kiln.Client(graph_kilnd.uri) as c:
        (home,) = c.explain(torch_graphs=[("stayed-home", other["graphs"]["graphs"][0]["name"])])
    assert home.reason == "in_process" and "stayed in the process" in home.verdict, home


def test_a_waiter_stops_waiting_at_its_bound_and_a_rank_that_cannot_share_is_told_to_compile(graph_kilnd: Kilnd) -> None:
    import time

    from kiln.torch._answer import bundle

    with kiln.Client(graph_kilnd.uri) as c:
        held = _claim(c, payload(b"a graph held by a slow process"))
        assert held.answer.compile_here
        # Another process's compile that does not land within the bound: the waiter hears so at
        # the bound (and compiles the graph itself), not when the holder is done.
        began = time.monotonic()
        with pytest.raises(kiln.DeadlineExceeded):
            _claim(c, payload(b"a graph held by a slow process"), answer_within=1.0)
        assert time.monotonic() - began < 10
        # A rank that waits for a twin's claim before claiming itself gets the twin's compile.
        waiter: dict[str, Any] = {}
        t = threading.Thread(target=lambda: waiter.update(claim=_claim(c, payload(b"a piece of another rank's"), wait_for_claim=5.0)))
        t.start()
        twin = _claim(c, payload(b"a piece of another rank's"))
        assert twin.answer.compile_here
        c.publish_torch_graph(twin.answer.key, bundle(b"torch's artifacts", []), 1.0)
        t.join(30)
        assert waiter["claim"].answer.ok and not waiter["claim"].answer.compile_here, waiter["claim"].answer
        twin.close()
        waiter["claim"].close()
        # A process that cannot share its compile, where nobody has the graph or claims it: it
        # is told to compile it itself, with nothing to publish, and no worker starts.
        answer = _unshared(c, payload(b"a graph on a rank's own GPU"), wait_for_claim=0.2)
        assert answer.compile_here and answer.key == "", answer
        # Nor does it wait for another process's compile of it: that process traced the graph
        # beside it, and waiting would only add the publish and the load to its own compile.
        began = time.monotonic()
        beside = _unshared(c, payload(b"a graph held by a slow process"))
        assert beside.compile_here and beside.key == "", beside
        assert time.monotonic() - began < 10
        held.close()


def payload(graph: bytes, header: dict[str, Any] | None = None) -> bytes:
    head = json.dumps(header or {"version": 1, "inputs": []}).encode()
    return struct.pack("<I", len(head)) + head + graph


def test_another_torch_is_refused_naming_the_field(graph_kilnd: Kilnd) -> None:
    with kiln.Client(graph_kilnd.uri) as c, pytest.raises(kiln.FailedPrecondition, match="torch_version"):
        c.compile_torch_graph(TorchGraphRequest(payload(b"x"), "1.0.0"))
    with kiln.Client(graph_kilnd.uri) as c, pytest.raises(kiln.InvalidArgument, match="payload: must be"):
        c.compile_torch_graph(TorchGraphRequest(b"", torch.__version__))


def _graph(data: bytes, **fields: Any) -> TorchGraphRequest:
    """``data`` as this process asks for it: keyed by its Triton, Python and CUDA too."""
    return TorchGraphRequest(
        data, torch.__version__, triton_version=_triton_version(), python_version=sys.version.split()[0], cuda_version=torch.version.cuda or "", **fields
    )


def _claim(c: kiln.Client, data: bytes, wait_for_claim: float = 0.0, **kw: Any) -> Any:
    return c.claim_torch_graph(_graph(data, wait_for_claim=wait_for_claim), timeout=60, **kw)


def _unshared(c: kiln.Client, data: bytes, **fields: Any) -> Any:
    """A graph asked for by a process that cannot share its compile (``no_worker``)."""
    return c.compile_torch_graph(_graph(data, no_worker=True, **fields))


def test_a_claim_holds_the_others_until_its_publish_and_a_closed_one_hands_it_on(graph_kilnd: Kilnd) -> None:
    # No worker runs here: a claimed graph is compiled by the process that claimed it.
    from kiln.torch._answer import bundle, parse

    shared = bundle(b"torch's artifacts", [("ab/kernel.so", b"ELF")])
    with kiln.Client(graph_kilnd.uri) as c:
        first = _claim(c, payload(b"claimed graph"))
        assert first.answer.compile_here and len(first.answer.key) == 64, first.answer
        waiter: dict[str, Any] = {}
        t = threading.Thread(target=lambda: waiter.update(claim=_claim(c, payload(b"claimed graph"))))
        t.start()
        t.join(1.0)
        assert t.is_alive(), "a second claim of the graph waits for the first's publish"
        c.publish_torch_graph(first.answer.key, shared, 2.5)
        t.join(30)
        second = waiter["claim"].answer
        assert second.ok and not second.compile_here and second.key == first.answer.key, second
        assert parse(second.artifacts).files == [("ab/kernel.so", b"ELF")] and second.compile_seconds == 2.5
        first.close()
        waiter["claim"].close()

        # A claim closed without a publish releases its waiters at once, and the next claims it.
        gone = _claim(c, payload(b"abandoned graph"))
        assert gone.answer.compile_here
        t = threading.Thread(target=lambda: waiter.update(next=_claim(c, payload(b"abandoned graph"))))
        t.start()
        t.join(1.0)
        gone.close()
        t.join(30)
        assert waiter["next"].answer.compile_here, waiter["next"].answer
        waiter["next"].close()


def test_a_claim_that_prefers_the_workers_takes_an_idle_one_and_is_granted_where_none_is_up(tmp_path: Path) -> None:
    k = Kilnd(tmp_path / "prefer")
    try:
        with kiln.Client(k.uri) as c:
            # No worker is up: the process compiles the graph itself, as without the preference,
            # and asking starts none.
            cold = _claim(c, payload(b"a graph preferring workers"), prefer_workers=True)
            cold.close()
            assert cold.answer.compile_here, cold.answer
            assert c.warm_torch_workers(start=False) is None
            k.warm_torch_workers()
            # An idle worker compiles it instead (this payload fails there, which shows where it ran).
            warm = _claim(c, payload(b"another graph preferring workers"), prefer_workers=True)
            warm.close()
            assert not warm.answer.compile_here and not warm.answer.ok and warm.answer.log, warm.answer
    finally:
        k.stop()


def test_a_cold_graph_is_claimed_even_where_workers_are_up_and_the_setting_sends_it_to_them(tmp_path: Path) -> None:
    k = Kilnd(tmp_path / "workers-up")
    try:
        k.warm_torch_workers()
        # Workers up and idle: the process still compiles its graph itself (a worker's compile
        # costs the process its load on top), and shares it.
        r = run_job(k.uri, tmp_path / "claimed", KILN_TORCH_CLAIM="", WIDTH="24")
        (graph,) = r["graphs"]["graphs"]
        assert r["graphs"]["fallbacks"] == {} and graph["how"] == "kilnd" and graph["phases"].get("compile", 0) > 0, graph
        # Published at its first backward, and before the process ended.
        assert graphs_count(k, "compiled") == 1
        # KILN_TORCH_CLAIM=0: a worker compiles it, and the process only loads it.
        r = run_job(k.uri, tmp_path / "workers", KILN_TORCH_CLAIM="0", WIDTH="26")
        (graph,) = r["graphs"]["graphs"]
        assert r["graphs"]["fallbacks"] == {} and graph["how"] == "kilnd" and graph["tier"] == "compiled", graph
        assert "compile" not in graph["phases"], graph
        assert r["aot"].get("autograd_cache_hit") == 1, r["aot"]
        assert graphs_count(k, "compiled") == 2, "the claimed graph and the worker's"
    finally:
        k.stop()


def test_a_kilnd_that_takes_no_claims_compiles_every_graph_in_its_workers(tmp_path: Path) -> None:
    # An operator who does not trust every job on the host with code the others load turns claims
    # off: a claim is then answered by a worker's compile, in its box (this payload fails there).
    k = Kilnd(tmp_path / "no-claims", config="torch_claims = false\n")
    try:
        with kiln.Client(k.uri) as c:
            claim = _claim(c, payload(b"not a graph"))
            claim.close()
        assert not claim.answer.compile_here and not claim.answer.ok and claim.answer.log, claim.answer
    finally:
        k.stop()


def test_a_publish_needs_an_open_claim_and_a_bundle_that_reads(graph_kilnd: Kilnd) -> None:
    with kiln.Client(graph_kilnd.uri) as c:
        with pytest.raises(kiln.FailedPrecondition, match="key: no open claim"):
            c.publish_torch_graph("ab" * 32, b"artifacts", 1.0)
        with pytest.raises(kiln.InvalidArgument, match="key: must be 64"):
            c.publish_torch_graph("nope", b"artifacts", 1.0)
        claim = _claim(c, payload(b"a graph published badly"))
        with pytest.raises(kiln.InvalidArgument, match="artifacts: a file at"):
            index = b'{"artifacts": 0, "files": [["../x.so", 0]]}'
            c.publish_torch_graph(claim.answer.key, b"KILNGB1\n" + struct.pack("<I", len(index)) + index, 1.0)
        with pytest.raises(kiln.InvalidArgument, match="artifacts: must be 1 to"):
            c.publish_torch_graph(claim.answer.key, b"", 1.0)
        # The claim survives a refused publish.
        c.publish_torch_graph(claim.answer.key, b"artifacts", 1.0)
        claim.close()
        with pytest.raises(kiln.InvalidArgument, match="wait_for_claim_ms: at most"):
            c.compile_torch_graph(TorchGraphRequest(payload(b"x"), torch.__version__, wait_for_claim=11.0))


class Escape:
    """A pickle that runs a command when loaded."""

    def __init__(self, path: Path) -> None:
        self.path = path

    def __reduce__(self) -> tuple[Any, ...]:
        return (os.system, (f"touch {self.path}",))


def test_another_python_is_refused_at_compile_naming_the_field(graph_kilnd: Kilnd) -> None:
    import sys

    with kiln.Client(graph_kilnd.uri) as c, pytest.raises(kiln.FailedPrecondition, match="python_version"):
        c.compile_torch_graph(
            TorchGraphRequest(
                payload(b"another python"),
                torch.__version__,
                triton_version=_triton_version(),
                python_version="2.7.18",
                cuda_version=torch.version.cuda or "",
            )
        )
    assert sys.version.split()[0] != "2.7.18"


def _triton_version() -> str:
    try:
        import triton
    except ImportError:
        return ""
    return str(triton.__version__)


def test_a_hostile_payload_is_refused_by_the_worker_and_remembered(graph_kilnd: Kilnd, tmp_path: Path) -> None:
    witness = tmp_path / "escaped"
    evil = payload(pickle.dumps(Escape(witness)))
    failed = graphs_count(graph_kilnd, "failed")
    with kiln.Client(graph_kilnd.uri) as c:
        answer = c.compile_torch_graph(TorchGraphRequest(evil, torch.__version__), timeout=300)
        assert not answer.ok and "which a graph never needs" in answer.log, answer.log[-2000:]
        again = c.compile_torch_graph(TorchGraphRequest(evil, torch.__version__), timeout=300)
    assert not again.ok and again.tier == kiln.Tier.MEMORY, "a failed compile is remembered, not paid again"
    assert not witness.exists()
    assert graphs_count(graph_kilnd, "failed") == failed + 2


def test_a_report_of_bad_costs_names_the_field(graph_kilnd: Kilnd) -> None:
    from kiln.torch.results import TorchGraphCost

    with kiln.Client(graph_kilnd.uri) as c:
        ret = c.report_torch_graphs("j", {"not_reused": 1}, [TorchGraphCost("g", 10, 90, 0.015, 0.009, 18.0)])
        assert ret.break_even_steps == pytest.approx(3000.0) and "not paid for itself yet" in ret.verdict
        with pytest.raises(kiln.InvalidArgument, match=r"graphs\[0\]\.compile_s"):
            c.report_torch_graphs("j", {}, [TorchGraphCost("g", compile_s=-1.0)])
    assert metric(graph_kilnd.metrics(), 'kiln_torch_graph_fallbacks_total{reason="not_reused"}') >= 1


def test_kiln_explain_says_why_a_torch_graph_missed(graph_kilnd: Kilnd, tmp_path: Path) -> None:
    # The same job's graph, first as it was, then with one Inductor setting changed: the second
    # key is new to kilnd, and explain names the setting, where a key alone says only "new bytes".
    job = "explain-me"
    first = run_job(graph_kilnd.uri, tmp_path / "a", KILN_TORCH_JOB=job, WIDTH="24")
    second = run_job(graph_kilnd.uri, tmp_path / "b", KILN_TORCH_JOB=job, WIDTH="24", TORCHINDUCTOR_MAX_AUTOTUNE_POINTWISE="1")
    (g1,), (g2,) = first["graphs"]["graphs"], second["graphs"]["graphs"]
    assert g1["name"] == g2["name"] and g1["key"] != g2["key"], (g1, g2)
    with kiln.Client(graph_kilnd.uri) as c:
        (why,) = c.explain(keys=[g2["key"]])
        (new,) = c.explain(keys=[g1["key"]])
    assert (why.graph, why.kernel_id, why.reason) == (job, g2["name"], "options"), why
    assert why.verdict.startswith("torch graph: missed: inductor_config.max_autotune_pointwise true here, false before"), why
    assert why.cached and [d.reason for d in why.differences] == ["options"], why.differences
    assert new.reason == "new" and "was seen here before" in new.verdict, new
    # By name, as the process's report names the graph: its latest ask (the second run's miss).
    with kiln.Client(graph_kilnd.uri) as c:
        (by_name,) = c.explain(torch_graphs=[(job, g2["name"])])
        (unknown,) = c.explain(torch_graphs=[(job, "no-such-graph")])
    assert (by_name.key, by_name.reason, by_name.verdict) == (why.key, why.reason, why.verdict), by_name
    assert unknown.reason == "unknown" and not unknown.cached and "no graph named" in unknown.verdict, unknown
    # The miss's event names it too (kilnd's log and recent misses).
    with kiln.Client(graph_kilnd.uri) as c:
        events = [m for m in c.stats().recent_misses if m.key == g2["key"]]
    assert events and "max_autotune_pointwise" in events[0].detail, events
