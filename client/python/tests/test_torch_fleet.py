"""A cold fleet starting one job together, on the CPU with a real torch: kilnd hosts on one
kiln-cache, each running two gloo ranks of one DDP job, with nothing stored anywhere. By default
the hosts split the job's cold compile (three hosts, six ranks): each distinct graph is compiled
once in the whole fleet, by one rank; every other rank loads it; and the losses are eager
torch's. An FSDP2 job on two hosts compiles each of its graphs once too. With the split off (``KILN_TORCH_SPLIT=0``) a rank waits for nobody: a graph another
host compiles is compiled here too, each graph is claimed once in the fleet, and a fresh host
loads every graph. A host killed while it compiles a graph loses its claim within
the fleet lease's life, and a rank of another host compiles the graph instead.
"""

from __future__ import annotations

import json
import math
import os
import signal
import subprocess
import threading
import sys
import time
from pathlib import Path
from typing import Any

import pytest
from harness import CacheServer, Kilnd, Redis, metric, require

import kiln

sys.path.insert(0, str(Path(__file__).with_name("corpus")))
import runner  # noqa: E402 - the corpus's directory is put on the path first

torch = require("torch")

HOSTS = 3
RANKS_A_HOST = 2
#: A fleet lease's life here: a dead host's claim passes to another within it.
LEASE_TTL_MS = 4000


@pytest.fixture
def fleet(tmp_path: Path) -> Any:
    redis = Redis(tmp_path / "redis")
    cache = CacheServer(tmp_path / "kiln-cache", redis)
    hosts = [Kilnd(tmp_path / f"host-{i}", remote=cache, config=f"lease_ttl_ms = {LEASE_TTL_MS}\n") for i in range(HOSTS)]
    yield hosts
    for h in hosts:
        h.stop()
    cache.stop()
    redis.kill9()


def start_rank(shape: str, host: Kilnd, rank: int, local_rank: int, world: int, local_world: int, port: int, tmp: Path, **extra: str) -> subprocess.Popen[str]:
    env = runner.clean_env()
    env.update(runner.kiln_env(host.uri), KILN_TORCH_SNAPSHOT="0", KILN_TORCH_JOB="fleet-job", KILN_TORCH_GRAPHS="1")
    # A 2-core machine under CI's other tests can take minutes over a compile: the wait bound is
    # tested by itself (test_torch_graphs.py); here a waiter waits as long as the compile takes.
    env.update(KILN_TORCH_GRAPH_WAIT_SECS="1800")
    env.update(LAYOUT="ddp" if world > 1 else "single", RANK=str(rank), WORLD_SIZE=str(world), LOCAL_RANK=str(local_rank))
    env.update(LOCAL_WORLD_SIZE=str(local_world), MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    env.update(TORCHINDUCTOR_CACHE_DIR=str(tmp / f"inductor-{rank}"), TRITON_CACHE_DIR=str(tmp / f"triton-{rank}"))
    env.update(extra)
    return subprocess.Popen(
        [sys.executable, "-c", AFTER_IMPORTS, str(runner.HERE / f"{shape}.py")],
        env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True,
    )


#: Runs a job (``sys.argv[1]``) once Dynamo and Inductor are imported, before the job's rendezvous.
#: On hosts of their own, ranks that meet at the rendezvous begin tracing together; six ranks on
#: this 2-core machine that import Dynamo after it (at ``torch.compile``) can finish seconds apart,
#: past the waits by which the split leaves a piece to the rank it falls to, and the rank ahead
#: then claims them all. kiln's hooks run at this import as at the job's own.
AFTER_IMPORTS = (
    "import os, runpy, sys; import torch._dynamo, torch._inductor.compile_fx; "
    "sys.argv = sys.argv[1:]; sys.path.insert(0, os.path.dirname(sys.argv[0])); "
    "runpy.run_path(sys.argv[0], run_name='__main__')"
)


def result(p: subprocess.Popen[str], what: str) -> dict[str, Any]:
    out, err = p.communicate(timeout=900)
    assert p.returncode == 0 and out.strip(), f"{what} exited {p.returncode}:\n{err[-4000:]}"
    line: dict[str, Any] = json.loads(out.strip().splitlines()[-1])
    line["stderr"] = err
    return line


def run_ranks(hosts: list[Kilnd], ranks_a_host: int, tmp: Path, label: str = "rank", **extra: str) -> list[dict[str, Any]]:
    """The job started at once on ``hosts``, ``ranks_a_host`` ranks on each (rank 0 on the first
    host), and each rank's result once all have exited."""
    world = len(hosts) * ranks_a_host
    port = runner.free_port()
    procs = [
        start_rank("model_compile", hosts[rank // ranks_a_host], rank, rank % ranks_a_host, world, ranks_a_host, port, tmp, **extra)
        for rank in range(world)
    ]
    return [result(p, f"{label} {rank}") for rank, p in enumerate(procs)]


def compiled(hosts: list[Kilnd]) -> float:
    return sum(metric(h.metrics(), 'kiln_torch_graphs_total{result="compiled"}') for h in hosts)


def test_a_cold_fleet_compiles_each_graph_once_and_every_rank_loads_it(fleet: list[Kilnd], tmp_path: Path) -> None:
    world = HOSTS * RANKS_A_HOST
    ranks = run_ranks(fleet, RANKS_A_HOST, tmp_path / "kiln")
    by_key: dict[str, int] = {}
    for rank, r in enumerate(ranks):
        stats = r["graphs"]
        where = f"rank {rank}: {stats}\n{r['stderr'][-3000:]}"
        assert set(stats["fallbacks"]) <= {"unshared"}, where
        assert stats["graphs"] and all(g["how"] == "kilnd" or stats["fallbacks"] for g in stats["graphs"]), where
        for g in stats["graphs"]:
            by_key.setdefault(g["key"], 0)
            by_key[g["key"]] += g["tier"] == "compiled"
    # Each distinct graph (every rank's pieces share their keys) compiled by exactly one rank of
    # the fleet, and the fleet's compiles are those: no rank compiled a graph another claimed.
    assert len(by_key) >= 2 and all(n == 1 for n in by_key.values()), by_key
    assert compiled(fleet) == len(by_key), (compiled(fleet), by_key)
    # More than one rank compiled: the compile was split, not left to one rank.
    compilers = {rank for rank, r in enumerate(ranks) for g in r["graphs"]["graphs"] if g["tier"] == "compiled"}
    assert len(compilers) >= 2, compilers
    # Rank skew, as the fleet ledger reckons it: the spread of the six ranks' first-step ends.
    ends = [r["graphs"]["first_step_unix_ms"] for r in ranks]
    with kiln.Client(fleet[0].uri) as c:
        answer = c.torch_jobs("fleet-job")
    (job,) = answer.jobs
    assert answer.source == "fleet" and job.first_step_processes == world, (answer.source, job)
    assert job.first_step_skew_s == pytest.approx((max(ends) - min(ends)) / 1e3), (ends, job)
    eager = runner.run("model_compile", "ddp", world, tmp_path / "eager", {"COMPILE": "0"})
    for r, e in zip(ranks, eager, strict=True):
        assert all(math.isclose(a, b, rel_tol=1e-4) for a, b in zip(r["losses"], e["losses"], strict=True)), (r["losses"], e["losses"])


def test_an_fsdp2_job_on_two_hosts_compiles_each_graph_once_by_default(fleet: list[Kilnd], tmp_path: Path) -> None:
    """FSDP2's graphs are traced one at a time, at their first call. By default, on several hosts,
    the first rank in the fleet to reach a graph claims it, and every other rank of every host
    waits for its compile and loads it: each graph is compiled once in the fleet."""
    world = 2 * RANKS_A_HOST
    ranks = run_ranks(fleet[:2], RANKS_A_HOST, tmp_path / "kiln", KILN_TORCH_GRAPHS="", LAYOUT="fsdp2")
    compiles: dict[str, int] = {}
    for rank, r in enumerate(ranks):
        stats = r["graphs"]
        where = f"rank {rank}: {stats}\n{r['stderr'][-3000:]}"
        assert stats["fallbacks"] == {} and stats["graphs"], where
        for g in stats["graphs"]:
            assert g["how"] == "kilnd", where
            compiles[g["key"]] = compiles.get(g["key"], 0) + (g["tier"] == "compiled")
    assert compiles and all(n == 1 for n in compiles.values()), compiles
    assert compiled(fleet) == len(compiles), (compiled(fleet), compiles)
    eager = runner.run("model_compile", "fsdp2", world, tmp_path / "eager", {"COMPILE": "0"})
    for r, e in zip(ranks, eager, strict=True):
        assert all(math.isclose(a, b, rel_tol=1e-4) for a, b in zip(r["losses"], e["losses"], strict=True)), (r["losses"], e["losses"])


def test_with_the_split_off_hosts_starting_together_wait_for_nobody_and_a_fresh_host_loads_every_graph(fleet: list[Kilnd], tmp_path: Path) -> None:
    default = {"KILN_TORCH_GRAPHS": "", "KILN_TORCH_SPLIT": "0"}
    ranks = run_ranks(fleet[:2], RANKS_A_HOST, tmp_path / "together", **default)
    claims: dict[str, int] = {}
    for rank, r in enumerate(ranks):
        stats = r["graphs"]
        where = f"rank {rank}: {stats}\n{r['stderr'][-3000:]}"
        # A graph another rank or host was compiling is compiled here too, as torch would, never
        # waited for (no `late`); each one claimed is claimed once in the whole fleet.
        assert set(stats["fallbacks"]) <= {"unshared"}, where
        for g in stats["graphs"]:
            claims[g["key"]] = claims.get(g["key"], 0) + (g["how"] == "kilnd" and g["tier"] == "compiled")
    assert claims and all(n <= 1 for n in claims.values()), claims
    shared = sum(claims.values())
    assert shared >= 1 and compiled(fleet) == shared, (compiled(fleet), claims)
    # A fresh host (its own kilnd and empty caches, the job's four ranks on it) loads every graph
    # the first two published, backward included, from the fleet: it compiles nothing.
    fresh = run_ranks(fleet[2:], len(ranks), tmp_path / "fresh", "fresh rank", **default)
    for rank, r in enumerate(fresh):
        stats = r["graphs"]
        where = f"fresh rank {rank}: {stats}\n{r['stderr'][-3000:]}"
        assert stats["fallbacks"] == {} and all(g["how"] == "kilnd" and g["tier"] != "compiled" for g in stats["graphs"]), where
    assert compiled(fleet) == shared, (compiled(fleet), shared)
    for r, f in zip(ranks, fresh, strict=True):
        assert all(math.isclose(a, b, rel_tol=1e-4) for a, b in zip(r["losses"], f["losses"], strict=True)), (r["losses"], f["losses"])


def test_a_host_killed_mid_compile_loses_its_claim_and_another_compiles_the_graph(fleet: list[Kilnd], tmp_path: Path) -> None:
    doomed, survivor = fleet[0], fleet[1]
    first = start_rank("model_compile", doomed, 0, 0, 1, 1, runner.free_port(), tmp_path / "doomed")
    # The doomed host's process holds the claim once it compiles: Inductor writes its C++ then.
    deadline = time.monotonic() + 300
    while not list((tmp_path / "doomed" / "inductor-0").rglob("*.cpp")):
        assert first.poll() is None and time.monotonic() < deadline, "the first process never started compiling"
        time.sleep(0.2)
    second = start_rank("model_compile", survivor, 0, 0, 1, 1, runner.free_port(), tmp_path / "survivor")
    time.sleep(3.0)  # the second asks, and waits for the first's compile
    os.killpg(first.pid, signal.SIGKILL)
    doomed.proc.send_signal(signal.SIGKILL)
    killed = time.monotonic()
    r = result(second, "the survivor")
    waited = time.monotonic() - killed
    stats = r["graphs"]
    where = f"{stats}\n{r['stderr'][-3000:]}"
    # It did not give up waiting (late), and its own process compiled the graph once the dead
    # host's lease expired: the graph was compiled once more, by it.
    assert stats["fallbacks"] == {}, where
    (graph,) = stats["graphs"]
    assert graph["how"] == "kilnd" and graph["tier"] == "compiled", where
    assert compiled([survivor]) == 1, where
    # Bounded: the lease's life plus its own compile (charged in its record), with slack for a
    # loaded 2-core machine.
    assert waited <= LEASE_TTL_MS / 1000 + graph["compile_s"] + 60, (waited, graph["compile_s"])


def test_a_piece_left_to_another_host_is_loaded_once_that_host_publishes_it(fleet: list[Kilnd]) -> None:
    """A rank leaves a DDP piece that falls to another host for that host to claim (its request's
    ``wait_for_claim``). Its own kilnd does not see the other host's claim, only its publish: it
    watches the fleet for it during the wait, and the rank loads the piece at the publish, not at
    the end of its wait."""
    from test_torch_graphs import _graph, payload

    from kiln.torch._answer import bundle

    here, there = fleet[0], fleet[1]
    piece = payload(b"a piece that falls to another host")
    left: dict[str, Any] = {}
    with kiln.Client(here.uri) as waiter, kiln.Client(there.uri) as owner:

        def leave() -> None:
            began = time.monotonic()
            left["claim"] = waiter.claim_torch_graph(_graph(piece, wait_for_claim=10.0), timeout=60)
            left["after"] = time.monotonic() - began

        t = threading.Thread(target=leave)
        t.start()
        time.sleep(0.5)
        claim = owner.claim_torch_graph(_graph(piece), timeout=60)
        assert claim.answer.compile_here, claim.answer
        owner.publish_torch_graph(claim.answer.key, bundle(b"torch's artifacts", []), 1.0)
        published = time.monotonic()
        claim.close()
        t.join(60)
        answer = left["claim"].answer
        left["claim"].close()
    assert answer.ok and not answer.compile_here and answer.key == claim.answer.key, answer
    # Loaded at the publish, where the wait alone would have ended 10 s after the request.
    assert left["after"] < 5.0, left["after"]
    assert time.monotonic() - published < 3.0
