"""torch.compile through kilnd on the layouts training runs, with a real torch 2.11 on the CPU
(gloo, Inductor's C++ backend): DDP, whose optimizer splits the graph into pieces with fake
example inputs, and FSDP2. Every piece goes through kilnd with no fallback, each distinct piece
is compiled once across the ranks, kilnd's answer is all a process needs (it builds no C++
itself), and the losses are plain torch's.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from harness import Kilnd, free_port, metric, require

torch = require("torch")

JOB = Path(__file__).with_name("layout_job.py")


def run_ranks(layout: str, tmp: Path, world: int, uri: str | None, **extra: str) -> list[dict[str, Any]]:
    """Runs the layout's job as ``world`` ranks at once; each rank's JSON line and its stderr.
    ``uri`` None runs plain torch (no kiln)."""
    base = {k: v for k, v in os.environ.items() if not k.startswith(("TORCHINDUCTOR_", "TRITON_", "KILN_TORCH", "KILN_DAEMON"))}
    base.update(LAYOUT=layout, WORLD_SIZE=str(world), MASTER_ADDR="127.0.0.1", MASTER_PORT=str(free_port()))
    if uri is not None:
        base.update(KILN_TORCH="1", KILN_TORCH_GRAPHS="1", KILN_TORCH_SNAPSHOT="0", KILN_DAEMON=uri)
        base.update(TORCHINDUCTOR_FX_GRAPH_REMOTE_CACHE="0", TORCHINDUCTOR_AUTOGRAD_REMOTE_CACHE="0")
    else:
        base.update(KILN_TORCH="0")
    base.update(extra)
    procs = []
    for rank in range(world):
        env = dict(base, RANK=str(rank), TORCHINDUCTOR_CACHE_DIR=str(tmp / f"inductor-{rank}"))
        procs.append(
            subprocess.Popen([sys.executable, str(JOB)], env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        )
    ended = [p.communicate(timeout=900) for p in procs]
    # Every rank's error: the first rank's is often its peer's connection closing.
    failed = [f"rank {rank}:\n{err[-4000:]}" for rank, (p, (_, err)) in enumerate(zip(procs, ended, strict=True)) if p.returncode != 0]
    assert not failed, "\n".join(failed)
    results = []
    for rank, (out, err) in enumerate(ended):
        r: dict[str, Any] = json.loads(out.strip().splitlines()[-1])
        r["stderr"] = err
        r["cache"] = tmp / f"inductor-{rank}"
        results.append(r)
    return results


def built_here(cache: Path, placed: set[str]) -> list[str]:
    """Shared objects in a process's Inductor cache that kilnd's answer did not place there: C++
    the process compiled itself. Inductor's probes of the CPU's instructions (``__*_chk_kernel``)
    are no graph's code: a process waiting for kilnd builds them meanwhile."""

    def probe(so: Path) -> bool:
        source = so.with_name(so.name.split(".")[0] + ".cpp")
        return source.is_file() and re.search(r"\b__\w*_chk_kernel\w*\(", source.read_text(errors="replace")) is not None

    built = [p for p in cache.rglob("*.so") if str(p.relative_to(cache)) not in placed and not probe(p)]
    return sorted(str(p.relative_to(cache)) for p in built)


@pytest.fixture(scope="module")
def layout_kilnd(tmp_path_factory: pytest.TempPathFactory) -> Any:
    k = Kilnd(tmp_path_factory.mktemp("layout-kilnd"))
    yield k
    k.stop()


@pytest.mark.parametrize("layout", ["ddp", "fsdp2"])
def test_a_split_cold_compile_sends_every_piece_through_kilnd_once(layout_kilnd: Kilnd, tmp_path: Path, layout: str) -> None:
    before = metric(layout_kilnd.metrics(), 'kiln_torch_graphs_total{result="compiled"}')
    # Each rank waits as long as the other's compile takes: on CI's 2 busy cores a piece's compile
    # can take far longer than the waiting rank's own did, and the wait's budget is tested by
    # itself (test_a_piece_waits_no_longer_than_its_budget_then_compiles_itself).
    ranks = run_ranks(layout, tmp_path / "kiln", 2, layout_kilnd.uri, KILN_TORCH_SPLIT="1", KILN_TORCH_GRAPH_WAIT_SECS="1800")
    compiled = metric(layout_kilnd.metrics(), 'kiln_torch_graphs_total{result="compiled"}') - before
    ranks_claims = 0
    for rank, r in enumerate(ranks):
        stats = r["graphs"]
        assert stats["fallbacks"] == {}, (rank, stats, r["stderr"][-3000:])
        assert stats["graphs"] and all(g["how"] == "kilnd" for g in stats["graphs"]), (rank, stats)
        # Each piece is named by its function (DDP's is its wrapper's, `inner`), compile id and,
        # under DDP, its bucket.
        names = [g["name"] for g in stats["graphs"]]
        assert all(n.split(":")[0] in ("forward", "inner") and ":0/" in n for n in names), names
        if layout == "ddp":
            assert [n.rsplit(" bucket ", 1)[-1] for n in names] == [str(i + 1) for i in range(len(names))], names
        # Each piece was compiled by the first rank to claim it, in its own process, and loaded
        # by the other from kilnd.
        claimed = [g for g in stats["graphs"] if g["tier"] == "compiled"]
        loaded = len(stats["graphs"]) - len(claimed)
        # On the CPU every kernel is C++: a claimed piece's publish carried what its compile
        # built, and a loaded piece's answer placed it...
        files = {f for g in stats["graphs"] for f in g["native_files"]}
        assert files, (rank, stats)
        # ...so the process built C++ only for the pieces it claimed...
        assert built_here(r["cache"], files) == [], f"rank {rank} compiled C++ after kilnd's answer"
        # ...and generated code only for them: each loaded piece hit the FX graph cache (forward
        # and backward), and, where AOTAutograd caches at all, its cache too. Dynamo's DDP
        # optimizer has AOTAutograd bypass its cache (its pieces fakify their first call), as
        # plain torch's pieces do.
        assert r["caches"].get("fxgraph_cache_miss", 0) <= 2 * len(claimed), (rank, r["caches"], stats)
        assert r["caches"].get("fxgraph_cache_hit", 0) >= 2 * loaded, (rank, r["caches"], stats)
        if layout == "fsdp2":
            assert r["caches"].get("autograd_cache_hit", 0) == loaded, (rank, r["caches"])
        ranks_claims += len(claimed)
    # One compile per distinct piece across the ranks (identical pieces share one key), each
    # claimed by one rank.
    assert 1 <= compiled <= len(ranks[0]["graphs"]["graphs"]), (compiled, ranks[0]["graphs"])
    assert ranks_claims == compiled, (ranks_claims, compiled)
    plain = run_ranks(layout, tmp_path / "plain", 2, None)
    for r, p in zip(ranks, plain, strict=True):
        assert r["losses"] == p["losses"], (r["losses"], p["losses"])


@pytest.mark.parametrize("layout", ["ddp", "fsdp2"])
def test_by_default_a_rank_compiles_as_torch_would_and_the_next_run_loads_every_piece(tmp_path: Path, layout: str) -> None:
    kilnd = Kilnd(tmp_path / "kilnd")
    try:
        # The default: every layout goes, and a rank waits for nobody's compile.
        cold = run_ranks(layout, tmp_path / "cold", 2, kilnd.uri, KILN_TORCH_GRAPHS="", KILN_TORCH_SPLIT="")
        compiled = metric(kilnd.metrics(), 'kiln_torch_graphs_total{result="compiled"}')
        claims = 0
        for rank, r in enumerate(cold):
            stats = r["graphs"]
            where = (rank, stats, r["stderr"][-3000:])
            # A piece another rank was compiling is compiled here too (unshared), never waited for.
            assert set(stats["fallbacks"]) <= {"unshared"}, where
            assert all(g["how"] in ("kilnd", "in-process") for g in stats["graphs"]), where
            if layout == "ddp":
                # A step a call: Dynamo's DDP optimizer also runs each compiled piece on fake
                # tensors while it traces, which is no step (it made each piece one call too many).
                assert all(sum(g["calls"].values()) == len(r["losses"]) for g in stats["graphs"]), where
            claims += sum(g["tier"] == "compiled" for g in stats["graphs"])
        # Each claim was granted once, and shared: kilnd counted it when its process published it,
        # after the piece's first backward.
        assert claims >= 1 and compiled == claims, (compiled, claims)
        # A second run on this host (new processes, empty Inductor caches) loads every piece,
        # its backward too: the claims were published with the backward's compile.
        warm = run_ranks(layout, tmp_path / "warm", 2, kilnd.uri, KILN_TORCH_GRAPHS="", KILN_TORCH_SPLIT="")
        for rank, r in enumerate(warm):
            stats = r["graphs"]
            where = (rank, stats, r["caches"], r["stderr"][-3000:])
            assert stats["fallbacks"] == {}, where
            assert all(g["how"] == "kilnd" and g["tier"] != "compiled" for g in stats["graphs"]), where
            assert r["caches"].get("fxgraph_cache_miss", 0) == 0, where
            assert r["caches"].get("fxgraph_cache_hit", 0) >= 2 * len(stats["graphs"]), where
            assert built_here(r["cache"], {f for g in stats["graphs"] for f in g["native_files"]}) == [], where
        assert metric(kilnd.metrics(), 'kiln_torch_graphs_total{result="compiled"}') == compiled
        plain = run_ranks(layout, tmp_path / "plain", 2, None)
        for c, w, p in zip(cold, warm, plain, strict=True):
            assert c["losses"] == p["losses"] == w["losses"], (c["losses"], w["losses"], p["losses"])
    finally:
        kilnd.stop()


def test_an_async_ddp_job_swaps_each_piece_in_and_trains_on(layout_kilnd: Kilnd, tmp_path: Path) -> None:
    # Each piece's backward is compiled at its first backward, from forward metadata that Dynamo's
    # DDP optimizer stacks only for the pieces it compiled itself: a piece swapped in later must
    # bring its own, or the first backward after the swap fails.
    if metric(layout_kilnd.metrics(), 'kiln_torch_graphs_total{result="compiled"}') == 0:
        run_ranks("ddp", tmp_path / "first", 2, layout_kilnd.uri)  # kilnd holds every piece now
    # The job runs until every rank ran every piece compiled.
    ranks = run_ranks("ddp", tmp_path / "async", 2, layout_kilnd.uri, KILN_TORCH_ASYNC="1", STEPS="300", STOP_WHEN_SWAPPED="1", SLEEP="0.1")
    for rank, r in enumerate(ranks):
        stats = r["graphs"]
        assert stats["fallbacks"] == {}, (rank, stats, r["stderr"][-3000:])
        assert all(g["how"] == "kilnd" and g["calls"]["compiled"] > 0 for g in stats["graphs"]), (rank, stats)
        # A piece's load traces it again (torch bypasses AOTAutograd's cache for DDP's pieces),
        # which patches torch's module calls process-wide: done beside the eager steps, it broke
        # them. It runs on the training thread, at the piece's call, and every call counted.
        assert all(sum(g["calls"].values()) == len(r["losses"]) for g in stats["graphs"]), (rank, stats)
        assert "could not replace its eager run" not in r["stderr"], r["stderr"][-3000:]
        assert r["losses"][-1] < r["losses"][0], r["losses"]
        # The first step ran eagerly, and neither it nor torch.compile() before it imported
        # Inductor's compile_fx (seconds): kiln imported it afterwards, off the training thread.
        assert r["inductor_at_first"] is False, r["stderr"][-3000:]


def test_the_layouts_sent_to_kilnd_follow_the_setting_and_default_to_every_layout(monkeypatch: pytest.MonkeyPatch) -> None:
    from kiln.torch import _layout as layout

    monkeypatch.delenv(layout.GRAPHS_ENV, raising=False)
    monkeypatch.delenv("KILN_TORCH_ASYNC", raising=False)
    default = layout.chosen()
    # By default every layout's graphs go: a rank waits for nobody (see the split test below),
    # so sending a graph cannot make its cold start slower than torch's.
    assert default == layout.Choice(frozenset(layout.LAYOUTS))
    assert all(default.sends(name) for name in layout.LAYOUTS)
    monkeypatch.setenv("KILN_TORCH_ASYNC", "1")
    assert layout.chosen() == default
    monkeypatch.setenv(layout.GRAPHS_ENV, "0")
    assert layout.chosen().layouts == frozenset()
    monkeypatch.delenv("KILN_TORCH_ASYNC")
    for value, want in [("0", set()), ("1", set(layout.LAYOUTS)), (" ddp, single ", {"ddp", "single"})]:
        monkeypatch.setenv(layout.GRAPHS_ENV, value)
        assert layout.chosen() == layout.Choice(frozenset(want)), value
        assert all(layout.chosen().sends(name) == (name in want) for name in layout.LAYOUTS), value
    monkeypatch.setenv(layout.GRAPHS_ENV, "")
    assert layout.chosen() == default
    # A layout the setting leaves out says so.
    monkeypatch.setenv(layout.GRAPHS_ENV, "single")
    assert "KILN_TORCH_GRAPHS='single' leaves out ddp graphs" in (layout.chosen().refusal("ddp") or "")
    assert layout.chosen().refusal("single") is None
    monkeypatch.setenv(layout.GRAPHS_ENV, "ddp,fsdp")
    with pytest.raises(layout.BadSetting, match="fsdp"):
        layout.chosen()
    # Outside any compile, in a process that is no rank: one process's layout.
    assert layout.of_graph(torch) == "single"


def test_ddp_pieces_fall_to_the_hosts_and_ranks_in_turn(monkeypatch: pytest.MonkeyPatch) -> None:
    from kiln.torch import _graph

    def falls(ranks_share: bool = True) -> list[str]:
        return [_graph._falls_to(f"forward:0/0 bucket {n}", ranks_share=ranks_share) for n in (1, 2, 3, 4)]

    for name in ("GROUP_RANK", "GROUP_WORLD_SIZE", "RANK", "WORLD_SIZE"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("LOCAL_WORLD_SIZE", "2")
    monkeypatch.setenv("LOCAL_RANK", "1")
    assert falls() == ["host", "here", "host", "here"]
    monkeypatch.setenv("LOCAL_RANK", "0")
    assert falls() == ["here", "host", "here", "host"]
    # One rank a host, or a graph that is no piece: it is this process's.
    assert _graph._falls_to("forward:0/0", ranks_share=True) == "here"
    monkeypatch.setenv("LOCAL_WORLD_SIZE", "1")
    assert falls() == ["here"] * 4
    # Two hosts of two ranks (torchrun's GROUP_RANK of GROUP_WORLD_SIZE): on the CPU the pieces
    # go to the hosts in turn, and a host's to its ranks in turn; on GPUs each host's first GPU's
    # rank, one a host.
    monkeypatch.setenv("LOCAL_WORLD_SIZE", "2")
    monkeypatch.setenv("GROUP_WORLD_SIZE", "2")
    monkeypatch.setenv("GROUP_RANK", "1")
    monkeypatch.setenv("LOCAL_RANK", "1")
    assert falls() == ["fleet", "host", "fleet", "here"]
    monkeypatch.setenv("LOCAL_RANK", "0")
    assert falls() == ["fleet", "here", "fleet", "host"]
    assert falls(ranks_share=False) == ["fleet", "here", "fleet", "here"]
    monkeypatch.setenv("GROUP_RANK", "0")
    assert falls(ranks_share=False) == ["here", "fleet", "here", "fleet"]
    # Without torchrun's group variables, the host is RANK over LOCAL_WORLD_SIZE.
    for name in ("GROUP_RANK", "GROUP_WORLD_SIZE"):
        monkeypatch.delenv(name)
    monkeypatch.setenv("WORLD_SIZE", "4")
    monkeypatch.setenv("RANK", "2")
    assert falls(ranks_share=False) == ["fleet", "here", "fleet", "here"]


def test_a_job_of_several_ranks_on_several_hosts_splits_its_cold_compile_unless_told_not_to(monkeypatch: pytest.MonkeyPatch) -> None:
    from kiln.torch import _claim as claim

    for name in ("GROUP_RANK", "GROUP_WORLD_SIZE", "RANK", "WORLD_SIZE", "LOCAL_WORLD_SIZE", "KILN_TORCH_SPLIT"):
        monkeypatch.delenv(name, raising=False)
    # One host (torchrun on one node, or no launcher): nothing to split across.
    assert claim.hosts() == (1, 0)
    monkeypatch.setenv("WORLD_SIZE", "2")
    monkeypatch.setenv("LOCAL_WORLD_SIZE", "2")
    assert not claim.splits("ddp") and not claim.splits("single")
    assert not claim.splits("multi-rank")
    # Two nodes: DDP's pieces and FSDP2's graphs split across them (one process's graphs wait for
    # the fleet's claimant whatever this says).
    monkeypatch.setenv("GROUP_WORLD_SIZE", "2")
    monkeypatch.setenv("GROUP_RANK", "1")
    assert claim.hosts() == (2, 1)
    assert claim.splits("ddp") and claim.splits("multi-rank") and not claim.splits("single")
    # The setting decides where it is set, for every layout.
    monkeypatch.setenv("KILN_TORCH_SPLIT", "0")
    assert not claim.splits("ddp") and not claim.splits("multi-rank")
    monkeypatch.setenv("KILN_TORCH_SPLIT", "1")
    assert claim.splits("single")
    monkeypatch.delenv("GROUP_WORLD_SIZE")
    monkeypatch.delenv("GROUP_RANK")
    monkeypatch.delenv("KILN_TORCH_SPLIT")
    # Without torchrun's group variables: WORLD_SIZE over LOCAL_WORLD_SIZE.
    monkeypatch.setenv("WORLD_SIZE", "6")
    monkeypatch.setenv("RANK", "5")
    assert claim.hosts() == (3, 2) and claim.splits("ddp")


def test_a_piece_waits_for_another_compile_no_longer_than_its_own_would_take() -> None:
    from kiln.torch._budget import WaitBudget

    budget = WaitBudget()
    # Nothing compiled or loaded yet: no estimate (the caller's fixed bound applies).
    assert budget.bound(100) is None
    # This process compiled a 200-node piece in 4 s: 0.02 s a node.
    budget.compiled_here(4.0, 200)
    assert budget.bound(100) == pytest.approx(2.0)
    # A claimant's slower compile raises the rate: an estimate errs toward waiting.
    budget.compiled_elsewhere(9.0, 300)
    assert budget.rate() == pytest.approx(0.03)
    assert budget.bound(100) == pytest.approx(3.0)
    # A piece that arrived at once leaves its estimate to the next; one that waited past its
    # estimate takes from it, never below the piece's own.
    budget.waited(0.0, 100)
    assert budget.bound(100) == pytest.approx(6.0)
    budget.waited(10.0, 100)
    assert budget.bound(100) == pytest.approx(3.0)
    # A claimant whose answer carries no compile time teaches nothing.
    budget.compiled_elsewhere(0.0, 50)
    assert budget.rate() == pytest.approx(0.03)


def test_a_piece_waits_no_longer_than_its_budget_then_compiles_itself(monkeypatch: pytest.MonkeyPatch) -> None:
    import threading
    import time

    from kiln.torch._ask import Answer
    from kiln.torch._deferred import Pieces

    monkeypatch.delenv("KILN_TORCH_GRAPH_WAIT_SECS", raising=False)

    class Record:
        compile_s = 0.0
        how = "pending"

    class Piece:
        """What Pieces reads of a DDP piece: its size, its answer, and its swap."""

        def __init__(self, nodes: int) -> None:
            self.nodes, self.record = nodes, Record()
            self.compiled: Any = None
            self.answer: Any = None
            self.gave_up: float | None = None

        def give_up(self, bound: float) -> None:
            self.answer, self.gave_up = "late", bound

        def swap(self) -> None:
            loads = isinstance(self.answer, Answer)
            if not loads:
                time.sleep(0.3)  # a compile here, at the rate of this process's first
            self.record.how = "kilnd" if loads else "in-process"
            self.compiled = object()

    pieces = Pieces()
    # This process compiled a piece of 100 nodes in 0.3 s: another's piece of 100 nodes may wait
    # 0.3 s for its claimant, then it is compiled here.
    pieces.budget.compiled_here(0.3, 100)
    stuck = Piece(100)
    pieces.add(stuck)  # type: ignore[arg-type]
    began = time.perf_counter()
    pieces.prepare(stuck)  # type: ignore[arg-type]
    waited = time.perf_counter() - began
    assert stuck.gave_up == pytest.approx(0.3) and stuck.record.how == "in-process", vars(stuck)
    assert 0.3 <= waited < 2.0, waited
    # Its own compile is counted: the rate stays 3 ms a node, and the wait spent its estimate.
    assert len(pieces.budget.own) == 2 and pieces.budget.bound(100) == pytest.approx(0.3, abs=0.1)
    # A claimant that lands within the budget is loaded, and its compile teaches the rate.
    landing = Piece(100)
    pieces.add(landing)  # type: ignore[arg-type]

    def land() -> None:
        time.sleep(0.1)
        landing.answer = Answer(None, "remote", 0.6, "key")  # type: ignore[arg-type]
        pieces.answered()

    threading.Thread(target=land).start()
    pieces.prepare(landing)  # type: ignore[arg-type]
    assert landing.gave_up is None and landing.record.how == "kilnd", vars(landing)
    assert pieces.budget.rate() == pytest.approx(0.006)


def test_a_blocking_graph_waits_no_longer_than_the_process_budget(monkeypatch: pytest.MonkeyPatch) -> None:
    """One process's graph, or an FSDP2 rank's on several hosts, waits for another's compile of it
    within the same budget as DDP's pieces, and what it waited and compiled teaches the budget."""
    import time

    import torch

    from kiln.torch import _deferred, _graph
    from kiln.torch._ask import Answer, Request
    from kiln.torch._budget import WaitBudget
    from kiln.torch._ledger import GraphRecord

    monkeypatch.delenv("KILN_TORCH_GRAPH_WAIT_SECS", raising=False)
    monkeypatch.setattr(_deferred.pieces, "budget", WaitBudget())
    gm = torch.fx.symbolic_trace(torch.nn.Linear(4, 4))
    nodes = len(gm.graph.nodes)
    bounds: list[float] = []
    answers: list[Any] = ["late", Answer(None, "remote", 0.4, "key")]  # type: ignore[arg-type]

    def asked(record: GraphRecord, request: Request, *, bound: float | None = None) -> Any:
        assert bound is not None
        bounds.append(bound)
        record.phases["ask"] = 0.05
        return answers.pop(0)

    def finish(torch: Any, record: GraphRecord, *args: Any, **kwargs: Any) -> Any:
        record.how = "in-process" if record.name == "late" else "kilnd"
        if record.how == "in-process":
            time.sleep(0.2)  # its compile here, at this process's rate
        return record.name

    monkeypatch.setattr(_graph, "_asked", asked)
    monkeypatch.setattr(_graph, "_finish", finish)
    # This process compiled a graph of the same size in 1.5 s: another's may keep it 1.5 s.
    _deferred.pieces.budget.compiled_here(1.5, nodes)
    late = _graph._waited(torch, GraphRecord("late"), 0.0, gm, [], Request(b"", "late"), lambda: None, backward_now=False)
    assert late == "late" and bounds == [pytest.approx(1.5)]
    # The late graph's wait spent 0.05 s and it compiled here in 0.2 s: the rate is now 0.85 s a
    # graph this size, plus the 0.8 s its wait left unspent. A graph another process compiled in
    # 0.4 s is loaded; the slower rate, this process's own, stays.
    _graph._waited(torch, GraphRecord("loaded"), 0.0, gm, [], Request(b"", "loaded"), lambda: None, backward_now=False)
    assert len(_deferred.pieces.budget.own) == 2 and bounds[1] == pytest.approx(0.8 + 0.85, abs=0.05)
    assert _deferred.pieces.budget.loaded == [(0.4, nodes)]
    assert _deferred.pieces.budget.rate() == pytest.approx(0.85 / nodes, rel=0.1)
    # However fast its compiles, a graph's bound leaves room for kilnd's answer to the ask.
    monkeypatch.setattr(_deferred.pieces, "budget", WaitBudget())
    _deferred.pieces.budget.compiled_here(0.01, nodes)
    answers.append(Answer(None, "remote", 0.01, "key"))  # type: ignore[arg-type]
    _graph._waited(torch, GraphRecord("quick"), 0.0, gm, [], Request(b"", "quick"), lambda: None, backward_now=False)
    assert bounds[2] == _graph.ANSWER_FLOOR_SECS


def test_a_cold_graph_is_claimed_unless_the_setting_leaves_it_to_kilnds_workers(monkeypatch: pytest.MonkeyPatch) -> None:
    from kiln.torch import _claim as claim

    monkeypatch.delenv("KILN_TORCH_CLAIM", raising=False)
    assert claim.mode() == claim.CLAIM
    monkeypatch.setenv("KILN_TORCH_CLAIM", "1")
    assert claim.mode() == claim.CLAIM
    monkeypatch.setenv("KILN_TORCH_CLAIM", "0")
    assert claim.mode() == claim.WORKERS


def test_a_claim_shares_the_cxx_its_compile_built_and_nothing_older(tmp_path: Path) -> None:
    import time

    from kiln.torch._answer import native_files

    (tmp_path / "ab").mkdir()
    (tmp_path / "cd").mkdir()
    (tmp_path / "ab" / "old.so").write_bytes(b"built before")
    before = time.time() - 100
    for path in (tmp_path / "ab" / "old.so", tmp_path / "ab"):
        os.utime(path, (before, before))
    since = time.time() - 1
    (tmp_path / "cd" / "new.so").write_bytes(b"built now")
    (tmp_path / "cd" / "new.py").write_bytes(b"not C++")
    (tmp_path / "cd" / "deeper").mkdir()
    (tmp_path / "cd" / "deeper" / "x.so").write_bytes(b"not a place in the cache")
    assert native_files(str(tmp_path), since) == [("cd/new.so", b"built now")]
    assert native_files(str(tmp_path / "missing"), since) == []


def test_an_answer_bundle_reads_back_and_refuses_paths_outside_the_cache(tmp_path: Path) -> None:
    import struct

    from kiln.torch import _answer as answer

    def bundle(files: list[tuple[str, bytes]], artifacts: bytes = b"ART") -> bytes:
        index = json.dumps({"artifacts": len(artifacts), "files": [[p, len(d)] for p, d in files]}).encode()
        return answer.MAGIC + struct.pack("<I", len(index)) + index + artifacts + b"".join(d for _, d in files)

    assert answer.parse(b"plain torch artifacts") == answer.Bundle(b"plain torch artifacts")
    files = [("ab/cabc123.so", b"\x7fELF one"), ("cd/ccd.main.so", b"\x7fELF two")]
    got = answer.parse(bundle(files))
    assert got.artifacts == b"ART" and got.files == files
    for bad in ["../evil.so", "/etc/x.so", "ab/../../x.so", "ab/cd/ef/x.so", "ab/x.py", "ab/.hidden.so"]:
        with pytest.raises(answer.BadBundle):
            answer.parse(bundle([(bad, b"x")]))
    with pytest.raises(answer.BadBundle):
        answer.parse(bundle(files)[:-1])
    with pytest.raises(answer.BadBundle):
        answer.parse(answer.MAGIC + b"\x05\x00\x00\x00{oops")
    # Placed once, atomically, never over a file the process already has.
    (tmp_path / "cd").mkdir()
    (tmp_path / "cd" / "ccd.main.so").write_bytes(b"mine")
    assert answer.place(files, str(tmp_path)) == ["ab/cabc123.so"]
    assert (tmp_path / "ab" / "cabc123.so").read_bytes() == b"\x7fELF one"
    assert (tmp_path / "cd" / "ccd.main.so").read_bytes() == b"mine"
    assert not [p for p in tmp_path.rglob(".kiln-*")]


def test_loading_an_answer_starts_no_compile_pool_and_a_compile_here_gets_it_back(monkeypatch: pytest.MonkeyPatch) -> None:
    import torch._inductor.config as config

    from kiln.torch import _inductor

    # Outside torch's cache keys, or a process that loads with one compile thread would miss
    # the entries kilnd's workers saved with several.
    assert "compile_threads" in config._cache_config_ignore_prefix
    monkeypatch.setattr(_inductor, "own_threads", None)
    # torch's own patch, which puts the setting back as it was (monkeypatch's undo would delete
    # it from Inductor's config module, which then hides it from every later read).
    with config.patch(compile_threads=4):
        _inductor.pool_off()
        assert config.compile_threads == 1
        _inductor.pool_off()  # a second load keeps the process's own figure
        assert _inductor.own_threads == 4
        assert _inductor.in_process(lambda: config.compile_threads) == 4
        assert config.compile_threads == 1


def test_before_any_compile_a_wait_is_bounded_by_dynamo_s_trace_of_the_frame() -> None:
    """A rank whose first graph is another's compile (an FSDP2 rank's first block, a DDP rank with
    no share) has no rate yet: the bound is read off Dynamo's trace of the frame, at least the
    floor over the whole first step, where it used to be the fixed bound (at least 120 s)."""
    import time

    from kiln.torch._budget import TRACE_FLOOR_SECS, TRACE_TO_COMPILE, WaitBudget

    budget = WaitBudget()
    # No frame seen, no compile: no estimate (the caller's fixed bound).
    assert budget.bound(100) is None
    # A graph of a frame Dynamo did not announce teaches nothing.
    budget.graph_traced("9/0", 100, "cuda")
    assert budget.bound(100) is None
    # A GPU frame traced in 5 s whose graphs (two DDP pieces) hold 1,000 nodes.
    budget.frame_started("0/0")
    budget.frames["0/0"] -= 5.0
    budget.graph_traced("0/0", 600, "cuda")
    time.sleep(0.01)
    budget.graph_traced("0/0", 400, "cuda")
    trace_s, nodes = budget.traced["0/0"]
    assert 5.0 <= trace_s < 5.5 and nodes == 1000, budget.traced
    rate = TRACE_TO_COMPILE["cuda"] * trace_s / 1000
    assert budget.traced_rate() == rate and budget.rate() is None
    # The first piece may wait its estimated compile, 18 times 5 s times 0.6: about 54 s, not 120 s.
    assert budget.bound(600) == rate * 600
    # A small graph waits the floor, which is the first step's, not each piece's.
    assert budget.bound(10) == TRACE_FLOOR_SECS
    budget.waited(20.0, 10)
    assert budget.bound(1) == max(TRACE_FLOOR_SECS - 20.0, rate * 10 - 20.0 + rate)
    # Once a compile shows the rate, the trace no longer counts.
    budget.compiled_elsewhere(3.0, 1000)
    assert budget.rate() == 0.003 and budget.bound(1000) == max(0.0, 0.003 * 10 - 20.0) + 3.0
    # A CPU frame's compile is a larger multiple of its trace.
    cpu = WaitBudget()
    cpu.frame_started("0/0")
    cpu.graph_traced("0/0", 10, "cpu")
    assert cpu.trace_factor == TRACE_TO_COMPILE["cpu"]


def test_a_frame_s_trace_is_timed_from_dynamo_s_start_callback_after_a_reset_too() -> None:
    """kiln times each frame's trace from Dynamo's own start callback, which
    ``torch._dynamo.reset()`` clears: kiln registers it again."""
    import torch

    from kiln.torch import _callbacks, _graph

    _callbacks.keep(torch._dynamo, start=_graph._frame_started)
    torch._dynamo.reset()
    assert _graph._frame_started in torch._dynamo.callback.callback_handler.start_callbacks
    assert torch._dynamo.callback.callback_handler.start_callbacks.count(_graph._frame_started) == 1
