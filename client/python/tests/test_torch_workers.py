"""kilnd's torch workers, with a real torch 2.11 on the CPU: started in the background when asked,
the payload a process writes is what a worker reads (and holds nothing torch's keys leave out),
an answer bundles alike from a worker and from a claim, and a spare's compile pool starts at the
lowest priority.
"""

from __future__ import annotations

import contextlib
import json
import os
import struct
import subprocess
import sys
import textwrap
import time
from pathlib import Path
from typing import Any

import pytest
from graph_job import run_job
from harness import Kilnd, free_port, require

import kiln

torch = require("torch")


def torch_workers(pid: int) -> list[str]:
    """The command lines of ``pid``'s children that run torch workers (Linux)."""
    lines = []
    for task in Path(f"/proc/{pid}/task").iterdir():
        for child in (task / "children").read_text().split():
            with contextlib.suppress(OSError):
                lines.append(Path(f"/proc/{child}/cmdline").read_text().replace("\0", " "))
    return [line for line in lines if "torch_worker" in line]


def test_warm_starts_the_workers_in_the_background_and_answers_at_once(tmp_path: Path) -> None:

    k = Kilnd(tmp_path / "warm")
    try:
        with kiln.Client(k.uri) as c:
            # Asking only starts nothing: a process that would not use them must not pay for them.
            assert c.warm_torch_workers(start=False) is None
            time.sleep(1.0)
            assert c.warm_torch_workers(start=False) is None and not torch_workers(k.proc.pid), "asking started the workers"
            started = time.monotonic()
            assert c.warm_torch_workers() is None  # not up yet: starting now
            assert time.monotonic() - started < 2.0, "the call waited for the workers"
            deadline = time.monotonic() + 30
            while not torch_workers(k.proc.pid) and time.monotonic() < deadline:
                time.sleep(0.2)
            assert torch_workers(k.proc.pid), "warming started no worker"
            deadline = time.monotonic() + 300
            while (version := c.warm_torch_workers()) is None and time.monotonic() < deadline:
                time.sleep(0.5)
            assert version == torch.__version__
            assert c.warm_torch_workers(start=False) == version
    finally:
        k.stop()


def test_a_worker_whose_host_sets_another_cxx_still_answers_with_the_process_key(tmp_path: Path) -> None:
    # Inductor's cpp.cxx (a tuple) comes from CXX and is in torch's key: the process's value must
    # reach the worker as a tuple, or every graph misses on a host where kilnd's CXX differs.
    k = Kilnd(tmp_path / "cxx", extra_env={"CXX": "/usr/bin/g++"})
    try:
        k.warm_torch_workers()
        with pytest.MonkeyPatch.context() as mp:
            mp.delenv("CXX", raising=False)  # run_job's process inherits this environment
            # The worker compiles it: the process claims nothing.
            r = run_job(k.uri, tmp_path / "job", WIDTH="40", KILN_TORCH_CLAIM="0")
        assert r["graphs"]["fallbacks"] == {}, r["stderr"][-3000:]
        assert r["aot"].get("autograd_cache_hit") == 1, r["aot"]
    finally:
        k.stop()


def test_the_payload_leaves_out_what_torchs_keys_leave_out() -> None:
    # This process's compile threads, cache switches and absolute paths stay home: torch's own
    # keys skip them, and sending them would split one graph's key between hosts.
    import torch._inductor.config as inductor_config

    from kiln.torch._payload import _changed_config

    sent = _changed_config(inductor_config)
    assert "compile_threads" not in sent and "fx_graph_remote_cache" not in sent
    assert not any(name.startswith(("trace.", "cuda.cutlass_dir")) for name in sent)
    assert "max_autotune" in sent and "cpp.cxx" in sent  # what torch keys on does travel


#: kilnd's torch worker scripts, shipped inside kilnd and written side by side for the worker.
WORKER_DIR = Path(__file__).parents[3] / "daemon" / "src" / "runtime" / "toolchain"


def _worker_module(name: str = "torch_worker") -> Any:
    """One of kilnd's torch worker scripts, imported here as a module, with its directory on the
    path as the worker has it (the worker imports the payload reader beside it)."""
    import importlib.util

    if str(WORKER_DIR) not in sys.path:
        sys.path.insert(0, str(WORKER_DIR))
    spec = importlib.util.spec_from_file_location(f"kiln_{name}", WORKER_DIR / f"{name}.py")
    assert spec is not None and spec.loader is not None
    worker = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(worker)
    return worker


def test_an_answer_bundles_alike_from_a_worker_and_from_a_claim() -> None:
    # A worker's answer and a claiming process's publish are one format, written on both sides.
    from kiln.torch import _answer

    worker = _worker_module()
    files = [("ab/kernel.so", b"ELF"), ("cd/header.gch", b"GCH")]
    assert worker.BUNDLE_MAGIC == _answer.MAGIC
    assert worker.bundle(b"artifacts", files) == _answer.bundle(b"artifacts", files)
    parsed = _answer.parse(worker.bundle(b"artifacts", files))
    assert (parsed.artifacts, parsed.files) == (b"artifacts", files)
    # The files a worker sends are the files a process places.
    assert all(name.endswith(worker.NATIVE_SUFFIXES) for name, _ in files)


def test_the_payload_kiln_writes_is_what_the_worker_reads() -> None:
    # The two sides of the payload ship apart (the worker inside kilnd): a key or a version that
    # one side changes alone fails here, not as a setting silently dropped from every compile.
    import torch

    from kiln.torch import _payload

    worker = _worker_module("torch_payload_reader")
    assert worker.PAYLOAD_VERSION == _payload.PAYLOAD_VERSION

    captured: list[bytes] = []

    def backend(gm: Any, inputs: list[Any]) -> Any:
        captured.append(_payload.serialize(gm, inputs, {"max_autotune": False}))
        return gm

    net = torch.nn.Sequential(torch.nn.Linear(8, 8), torch.nn.GELU())
    x = torch.randn(2, 8)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        torch.compile(net, backend=backend)(x)
    torch._dynamo.reset()
    header, graph = worker.decode_payload(captured[0])
    assert set(header) == worker.HEADER_KEYS
    assert set(header["ambient"]) == worker.AMBIENT_KEYS
    assert worker.apply_ambient(torch, header["ambient"]) == [("cpu", torch.bfloat16)]
    torch.set_autocast_cache_enabled(True)
    made = [worker.example_input(torch, s) for s in header["inputs"]]
    sent = [*net.parameters(), x]
    assert sorted((tuple(t.shape), t.dtype) for t in made) == sorted((tuple(t.shape), t.dtype) for t in sent)
    from torch._subclasses.fake_tensor import FakeTensorMode

    gm, sources = worker.restricted_loads(graph, FakeTensorMode())
    assert isinstance(gm, torch.fx.GraphModule) and len(sources) == len(made)
    # A key one side adds alone is refused by name, as a client newer than its kilnd would be.
    n = struct.unpack("<I", captured[0][:4])[0]
    extra = json.dumps(dict(header, ambient=dict(header["ambient"], new_state=1))).encode()
    with pytest.raises(ValueError, match=r"ambient\.new_state"):
        worker.decode_payload(struct.pack("<I", len(extra)) + extra + captured[0][4 + n :])


def test_a_module_compiled_again_after_a_backward_travels() -> None:
    # A GAN's discriminator is traced on inputs that need no grad, trained a step, then traced
    # again on the generator's output, which needs grad. By then its parameters hold gradients,
    # whose descriptions in the graph kept their fake mode: "Can't pickle local object
    # WeakValueDictionary", and the graph compiled in the process (or ran eagerly, async).
    import torch
    from torch._subclasses.fake_tensor import FakeTensorMode

    from kiln.torch import _payload

    worker = _worker_module("torch_payload_reader")
    captured: list[bytes] = []

    def backend(gm: Any, inputs: list[Any]) -> Any:
        captured.append(_payload.serialize(gm, inputs, {}))
        return gm

    torch.manual_seed(0)
    net = torch.nn.Sequential(torch.nn.Linear(8, 8), torch.nn.LeakyReLU(0.2), torch.nn.Linear(8, 1))
    compiled = torch.compile(net, backend=backend)
    compiled(torch.randn(2, 8)).sum().backward()
    assert all(p.grad is not None for p in net.parameters())
    compiled(torch.randn(2, 8, requires_grad=True))
    torch._dynamo.reset()
    assert len(captured) == 2, "the second call must trace a graph of its own"
    _, graph = worker.decode_payload(captured[1])
    gm, sources = worker.restricted_loads(graph, FakeTensorMode())
    placeholders = list(gm.graph.find_nodes(op="placeholder"))
    assert len(placeholders) == len(sources) == 5
    # The parameters' descriptions came back with their gradients, in the worker's fake mode.
    values = [n.meta["example_value"] for n in placeholders]
    shapes = sorted(tuple(v.grad.shape) for v in values if v.grad is not None)
    assert shapes == sorted(tuple(p.shape) for p in net.parameters()), shapes


#: What each job of the tests below runs first: a backend that keeps the digest of every graph's
#: payload, printed at the end.
_DIGESTS = """
import hashlib, os, torch
from kiln.torch import _payload
digests = []
def backend(gm, inputs):
    digests.append(hashlib.sha256(_payload.serialize(gm, inputs, {})).hexdigest())
    return gm
"""


def payload_digests(job: str, graphs: int) -> str:
    """Runs ``job`` (after :data:`_DIGESTS`) in two processes; asserts each sent ``graphs`` graphs
    and that both sent the same bytes; returns the first's digests."""
    runs = []
    for _ in range(2):
        script = _DIGESTS + textwrap.dedent(job) + '\nprint(" ".join(digests))\n'
        env = {**os.environ, "PORT": str(free_port())}
        out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=300, env=env)
        assert out.returncode == 0, out.stderr[-3000:]
        runs.append(out.stdout.split())
    assert len(runs[0]) == graphs, runs
    assert runs[0] == runs[1], runs
    return runs[0]


def test_a_recompiled_frame_sends_the_same_bytes_from_every_process() -> None:
    # One module class compiled for two shapes (a GAN's two MLPs) traces its forward twice, and
    # the second trace's shape environment kept the id() of the last symbolic value it evaluated.
    # Sent, that gave every process the graph's bytes of its own, so a key of its own: each rank
    # compiled it once, and no later process ever found it in the fleet.
    payload_digests(
        """
        class MLP(torch.nn.Module):
            def __init__(self, inputs, outputs):
                super().__init__()
                self.a, self.b = torch.nn.Linear(inputs, 16), torch.nn.Linear(16, outputs)
            def forward(self, x):
                return self.b(torch.relu(self.a(x)))
        first, second = torch.compile(MLP(4, 8), backend=backend), torch.compile(MLP(8, 1), backend=backend)
        second(first(torch.randn(2, 4)).detach())
        """,
        graphs=2,
    )


def test_a_graph_traced_again_after_a_dynamo_reset_sends_the_same_bytes() -> None:
    # A sweep in one process compiles a fresh model per trial and calls torch._dynamo.reset()
    # between them. The pickle writes an object it meets twice as a reference to the first, and
    # which fake tensors shared one torch.device object depended on what Dynamo had cached: the
    # second trial's graph had other bytes, so another key than the first trial's (and than a
    # restarted job's). Run in two processes: the bytes stay the same across processes too.
    first, second = payload_digests(
        """
        class Net(torch.nn.Module):
            def __init__(self):
                super().__init__()
                self.embed = torch.nn.Embedding(64, 16)
                self.a, self.b = torch.nn.Linear(16, 48), torch.nn.Linear(16, 64)
            def forward(self, tokens):
                q, k, v = self.a(self.embed(tokens)).view(2, 5, 3, 16).unbind(2)
                y = torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True)
                return self.b(torch.nn.functional.rms_norm(y, (16,)))
        for trial in range(2):
            net = torch.compile(Net(), backend=backend)
            net(torch.randint(0, 64, (2, 5))).sum().backward()
            torch._dynamo.reset()
        """,
        graphs=2,
    )
    assert first == second


def test_a_custom_autograd_function_sends_the_same_bytes_from_every_process() -> None:
    # Dynamo traces a custom autograd.Function into forward and backward bodies, graph modules of
    # their own; inside a DDP piece they carry a copy of the frame's metadata, Dynamo's backend
    # id (a uuid4 of the process) included. Sent with it, every process had a key of its own for
    # the piece: DDP's ranks split one piece between two keys, and no later process found it in
    # the fleet. One rank of DDP (gloo) is enough for Dynamo's DDP optimizer to cut the pieces.
    payload_digests(
        """
        import torch.distributed as dist
        dist.init_process_group("gloo", rank=0, world_size=1, init_method="tcp://127.0.0.1:" + os.environ["PORT"])
        class Halve(torch.autograd.Function):
            @staticmethod
            def forward(ctx, x):
                return x * 0.5
            @staticmethod
            def backward(ctx, grad):
                return grad * 0.5
        class Net(torch.nn.Module):
            def __init__(self):
                super().__init__()
                self.a, self.b = torch.nn.Linear(512, 512), torch.nn.Linear(512, 512)
            def forward(self, x):
                return self.b(Halve.apply(self.a(x)))
        net = torch.compile(torch.nn.parallel.DistributedDataParallel(Net(), bucket_cap_mb=1), backend=backend)
        net(torch.randn(2, 512)).sum().backward()
        dist.destroy_process_group()
        """,
        graphs=2,
    )


def test_a_spares_compile_pool_starts_at_the_lowest_priority_and_its_compile_keeps_its_own() -> None:
    # A spare starts its pool while the job that asked for the last compile runs its first steps:
    # the pool's processes (each imports torch) must take only cores the job leaves idle.
    path = WORKER_DIR / "torch_worker.py"
    script = textwrap.dedent(
        f"""
        import importlib.util, json, os, sys
        sys.path.insert(0, {str(WORKER_DIR)!r})
        spec = importlib.util.spec_from_file_location("kiln_torch_worker", {str(path)!r})
        worker = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(worker)
        worker.start_compile_pool()
        children = []
        for pid in filter(str.isdigit, os.listdir("/proc")):
            try:
                fields = open(f"/proc/{{pid}}/stat").read().rsplit(")", 1)[1].split()
            except OSError:
                continue
            if int(fields[1]) == os.getpid():
                children.append(int(fields[16]))  # the nice value
        print(json.dumps({{"own": os.getpriority(os.PRIO_PROCESS, 0), "pool": children, "nice": worker.POOL_NICE}}))
        """
    )
    env = dict(os.environ, TORCHINDUCTOR_COMPILE_THREADS="2", TORCH_WARM_POOL="1")
    out = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-3000:]
    seen = json.loads(out.stdout.strip().splitlines()[-1])
    assert seen["pool"], f"Inductor started no compile pool (is triton installed?): {out.stderr[-2000:]}"
    assert seen["own"] == 0 and set(seen["pool"]) == {seen["nice"]} and seen["nice"] == 19, seen


INSTALL_ONLY = """
    import time
    import torch._dynamo  # runs kiln's hook: kiln.torch._graph.install
    time.sleep(2)  # an async process's request to start the workers is on its way
    print("installed")
"""


def test_only_an_async_process_starts_the_workers(tmp_path: Path) -> None:
    # A blocking graph nobody has is compiled by its own process, so a blocking process leaves
    # the workers be: starting them would take the host's cores from the job's own compiles. An
    # async one needs them, and starts them.
    import time

    k = Kilnd(tmp_path / "ranks")
    try:
        env = {**os.environ, "KILN_TORCH": "1", "KILN_DAEMON": k.uri, "WORLD_SIZE": "2", "KILN_TORCH_SNAPSHOT": "0", "KILN_TORCH_GRAPHS": "1"}
        for asynchronous, starts in (("0", False), ("1", True)):
            run = subprocess.run(
                [sys.executable, "-c", textwrap.dedent(INSTALL_ONLY)], env={**env, "KILN_TORCH_ASYNC": asynchronous},
                capture_output=True, text=True, timeout=300,
            )
            assert run.returncode == 0 and run.stdout.strip() == "installed", run.stdout + run.stderr
            deadline = time.monotonic() + (30 if starts else 3)
            while not torch_workers(k.proc.pid) and time.monotonic() < deadline:
                time.sleep(0.2)
            assert bool(torch_workers(k.proc.pid)) == starts, f"KILN_TORCH_ASYNC={asynchronous}: workers started: {not starts}"
    finally:
        k.stop()
