"""The device index taken out of a graph and put back (kiln.torch._device), with a real torch on
the CPU: its fake tensors stand on GPUs this machine does not have, so graphs traced for
``cuda:1`` and ``cuda:0`` are made here and compared as kilnd and torch's FX graph cache see them.
The GPU run checks the moved code against the code torch generates on the second GPU itself.
"""

from __future__ import annotations

import os
import pickle
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from harness import require

torch = require("torch")

from kiln.torch import _device  # noqa: E402
from kiln.torch._payload import serialize  # noqa: E402


# Unannotated: the traced graph's code would carry the annotations (strings, here) as globals.
def step(x, w):  # type: ignore[no-untyped-def]
    return torch.nn.functional.linear(x, w).relu() + torch.ones(4, device=x.device)


def step_to_first_gpu(x, w):  # type: ignore[no-untyped-def]
    return step(x, w).to("cuda:0")


def traced(fn: Any, device: str) -> tuple[Any, list[Any]]:
    """``fn``'s graph for inputs on ``device``, with fake inputs as Dynamo hands a backend."""
    from torch._subclasses.fake_tensor import FakeTensorMode
    from torch.fx.experimental.proxy_tensor import make_fx

    mode = FakeTensorMode()
    with mode:
        inputs = [torch.empty(2, 4, device=device), torch.empty(4, 4, device=device, requires_grad=True)]
        return make_fx(fn)(*inputs), inputs


def test_a_graph_on_another_gpu_travels_as_the_same_graph_on_the_first() -> None:
    first, second = traced(step, "cuda:0"), traced(step, "cuda:1")
    assert "index=1" in second[0].code, "the traced graph names its device"
    assert serialize(*second, {}) == serialize(*first, {})
    assert b'"device": "cuda:0"' in serialize(*second, {})
    # A graph on cuda:2 is the same graph too: every GPU of a host shares one compile.
    assert serialize(*traced(step, "cuda:2"), {}) == serialize(*first, {})


def test_only_a_graph_whose_payload_is_its_own_code_can_be_shared() -> None:
    # A process claims (compiles for everyone) only a graph whose payload names its own device:
    # one on cuda:1 travels as cuda:0's, which its own code is not.
    assert _device.moved_index(*traced(step, "cuda:1")) == 1
    assert _device.moved_index(*traced(step, "cuda:0")) is None
    assert _device.moved_index(*traced(step, "cpu")) is None
    # A graph that keeps its index travels as itself: its key is its own device's.
    assert _device.moved_index(*traced(step_to_first_gpu, "cuda:1")) is None


def test_a_graph_that_names_another_gpu_than_its_inputs_keeps_its_index() -> None:
    gm, inputs = traced(step_to_first_gpu, "cuda:1")
    assert not _device.graph_names_only(gm, 1)
    assert serialize(gm, inputs, {}) != serialize(*traced(step_to_first_gpu, "cuda:0"), {})
    # Inputs on two GPUs have no one index to take out.
    with_cpu = [torch.empty(1), *inputs]
    assert _device.graph_device(with_cpu) == 1
    assert _device.graph_device([*inputs, torch.empty(1, device="meta")]) == 1
    from torch._subclasses.fake_tensor import FakeTensorMode

    with FakeTensorMode():
        other = torch.empty(1, device="cuda:0")
    assert _device.graph_device([*inputs, other]) is None
    assert _device.graph_device([torch.empty(1)]) is None


def test_the_fx_graph_key_on_another_gpu_reads_as_the_key_on_the_first() -> None:
    from torch._inductor.codecache import compiled_fx_graph_hash

    (gm0, in0), (gm1, in1) = traced(step, "cuda:0"), traced(step, "cuda:1")
    natural0 = compiled_fx_graph_hash(gm0, in0, {}, [])[0]
    natural1 = compiled_fx_graph_hash(gm1, in1, {}, [])[0]
    assert natural0 != natural1, "torch's own key names the device"
    with _device.normalizing(1):
        assert _device.fx_graph_key(torch, gm1, in1, {}, []) == natural0


#: Inductor's generated Python for a small CUDA graph, as torch 2.11 writes it (shortened): the
#: device's index in the wrapper, its stream, a tensor it makes, and a Triton kernel's metadata.
WRAPPER = '''
from torch._C import _cuda_getCurrentRawStream as get_raw_stream
empty_strided_cuda = torch._C._dynamo.guards._empty_strided_cuda

# kernel path: /tmp/torchinductor_root/ab/cabcdef.py
triton_poi_fused_add_relu_0 = async_compile.triton('triton_poi_fused_add_relu_0', """
@triton_heuristics.pointwise(
    size_hints={'x': 16},
    triton_meta={'signature': {'in_out_ptr0': '*fp32', 'xnumel': 'i32'}, 'device': DeviceProperties(type='cuda', index=0, multi_processor_count=132, cc=90, major=9, regs_per_multiprocessor=65536, max_threads_per_multi_processor=2048, warp_size=32), 'constants': {}},
    inductor_meta={'kernel_name': 'triton_poi_fused_add_relu_0', 'num_load': 2},
)
@triton.jit
def triton_poi_fused_add_relu_0(in_out_ptr0, xnumel, XBLOCK : tl.constexpr):
    xindex = xoffset + tl.arange(0, XBLOCK)[:]
    tmp0 = tl.load(in_out_ptr0 + (x0), xmask)
""", device_str='cuda')

# Topologically Sorted Source Nodes: [full_default]
# Graph fragment:
#   %full_default : Tensor "f32[4][1]cuda:0"[num_users=1] = call_function[target=torch.ops.aten.full.default](args = ([4], 1), kwargs = {device: cuda:0})
def call(args):
    primals_1, primals_2 = args
    args.clear()
    with torch.cuda._DeviceGuard(0):
        torch.cuda.set_device(0)
        buf0 = empty_strided_cuda((2, 4), (4, 1), torch.float32)
        stream0 = get_raw_stream(0)
        triton_poi_fused_add_relu_0.run(buf0, 8, stream=stream0)
        buf1 = torch.ops.aten.full.default([4], 1.0, device=device(type='cuda', index=0), pin_memory=False)
    return (buf0, buf1, )

def benchmark_compiled_module(times=10, repeat=10):
    primals_1 = rand_strided((2, 4), (4, 1), device='cuda:0', dtype=torch.float32)
'''


@dataclass
class Entry:
    """The parts of torch's ``CompiledFxGraph`` that name a device."""

    source_code: str
    cache_key: str = "cabcdef"
    device_idxs: Any = field(default_factory=lambda: {0})
    _triton_bundle: Any = None


def bundle() -> Any:
    from torch._inductor.triton_bundler import TritonBundle, TritonKernelArtifact, TritonKernelArtifacts

    cubin = TritonKernelArtifact("triton_poi_fused_add_relu_0.cubin", b"\x7fELF")
    return TritonBundle([TritonKernelArtifacts("k3y", 0, [cubin])], static_autotuners=["made for cuda:0"])


def test_generated_code_moves_to_another_gpu_whole() -> None:
    assert _device.indices(WRAPPER) == {0}
    moved = _device.move_code(WRAPPER, 0, 3)
    assert _device.indices(moved) == {3}
    expected = WRAPPER
    for before, after in (("_DeviceGuard(0)", "_DeviceGuard(3)"), ("set_device(0)", "set_device(3)"),
                          ("get_raw_stream(0)", "get_raw_stream(3)"), ("stream0", "stream3"), ("index=0", "index=3"), ("'cuda:0'", "'cuda:3'"), ("]cuda:0", "]cuda:3"),
                          ("device: cuda:0", "device: cuda:3")):
        assert before in expected
        expected = expected.replace(before, after)
    assert moved == expected, "each place that names the device, and nothing else"

    entry = _device.move_graph(Entry(WRAPPER, _triton_bundle=bundle()), 3)
    assert entry is not None
    assert _device.indices(entry.source_code) == {3}
    assert entry.cache_key != "cabcdef", "the moved code is another file"
    assert list(entry.device_idxs) == [3]
    assert [a.device for a in entry._triton_bundle.kernel_artifacts] == [3]
    assert entry._triton_bundle.static_autotuners == []
    # Code that names two devices cannot be told apart: not moved.
    assert _device.move_graph(Entry(WRAPPER + "\nstream1 = get_raw_stream(1)\n"), 3) is None


def test_a_process_on_another_gpu_takes_the_first_gpus_entry_moved(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from torch._inductor.codecache import FxGraphCache, compiled_fx_graph_hash
    from torch._subclasses.fake_tensor import FakeTensorMode
    from torch.fx.experimental.symbolic_shapes import ShapeEnv

    # torch keys a graph only inside a compile: its tracing context.
    context = torch._guards.TracingContext(FakeTensorMode(shape_env=ShapeEnv()))
    monkeypatch.setenv("TORCHINDUCTOR_CACHE_DIR", str(tmp_path))
    (gm0, in0), (gm1, in1) = traced(step, "cuda:0"), traced(step, "cuda:1")
    key0 = compiled_fx_graph_hash(gm0, in0, {}, [])[0]
    FxGraphCache._write_to_local_cache(key0, pickle.dumps(Entry(WRAPPER, _triton_bundle=bundle())))
    _device.install(torch)

    with torch._guards.tracing(context):
        (key1, _), _ = FxGraphCache.prepare_key(gm1, in1, {}, [], False)
    assert key1 == compiled_fx_graph_hash(gm1, in1, {}, [])[0], "torch looks the graph up under its own key"
    (path,) = (Path(FxGraphCache._get_tmp_dir_for_key(key1)) / n for n in os.listdir(FxGraphCache._get_tmp_dir_for_key(key1)))
    moved = pickle.loads(path.read_bytes())
    assert _device.indices(moved.source_code) == {1}
    assert [a.device for a in moved._triton_bundle.kernel_artifacts] == [1]
    # The first GPU's entry is as it was: only cuda:0 code is ever under a cuda:0 key.
    (original,) = os.listdir(FxGraphCache._get_tmp_dir_for_key(key0))
    entry0 = pickle.loads((Path(FxGraphCache._get_tmp_dir_for_key(key0)) / original).read_bytes())
    assert _device.indices(entry0.source_code) == {0}
    # A graph on the first GPU, and one whose key has an entry already, are left to torch.
    with torch._guards.tracing(context):
        FxGraphCache.prepare_key(gm0, in0, {}, [], False)
        FxGraphCache.prepare_key(gm1, in1, {}, [], False)
    assert len(os.listdir(FxGraphCache._get_tmp_dir_for_key(key1))) == 1
    assert len(os.listdir(FxGraphCache._get_tmp_dir_for_key(key0))) == 1


def test_a_job_with_kiln_takes_moved_entries_from_its_first_graph_on(tmp_path: Path) -> None:
    """kiln installs while torch._dynamo imports, when Inductor's cache module cannot be imported
    yet: the move must be in place by the time a graph compiles."""
    import subprocess
    import sys

    script = (
        "import torch\n"
        "torch.compile(lambda x: x + 1)(torch.ones(2))\n"
        "from torch._inductor.codecache import FxGraphCache\n"
        "from kiln.torch import _device\n"
        "print(_device._installed, FxGraphCache.prepare_key.__qualname__)\n"
    )
    env = {k: v for k, v in os.environ.items() if not k.startswith(("KILN_", "TORCHINDUCTOR_"))}
    env.update(KILN_TORCH="1", KILN_DAEMON=f"unix://{tmp_path}/none.sock", TORCHINDUCTOR_CACHE_DIR=str(tmp_path / "inductor"))
    out = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, text=True, timeout=300, check=True)
    assert out.stdout.split() == ["True", "install.<locals>.prepare_key"], out.stderr[-2000:]


def test_a_graph_holding_the_job_s_state_as_constants_is_refused_before_its_pickle() -> None:
    """A compiled optimizer step's graph holds the optimizer's moments as its own constants: the
    payload would carry them whole, so it is refused by their size, naming it, before the pickle
    copies them; a graph whose constants are small still travels."""
    import time

    from kiln.torch._payload import MAX_CONSTANT_BYTES, Unserializable

    def graph(numel: int) -> tuple[Any, list[Any]]:
        """``x + state``, ``state`` a constant of ``numel`` floats read by a ``get_attr`` node."""
        root = torch.nn.Module()
        root.state = torch.zeros(numel)
        g = torch.fx.Graph()
        g.output(g.call_function(torch.add, (g.placeholder("x"), g.get_attr("state"))))
        return torch.fx.GraphModule(root, g), [torch.zeros(numel)]

    assert serialize(*graph(16), {})
    big = MAX_CONSTANT_BYTES // 4 + 1
    began = time.perf_counter()
    with pytest.raises(Unserializable, match="64 MiB") as refused:
        serialize(*graph(big), {})
    assert "constants" in str(refused.value)
    # Refused by its size, not by the pickle: one pass over the graph's nodes.
    assert time.perf_counter() - began < 1.0


def test_a_split_jobs_rank_on_another_gpu_waits_for_its_twins_claim() -> None:
    from kiln.torch import _claim
    from kiln.torch._graph import HOST_SPLIT_WAIT_SECS, TWIN_WAIT_SECS, blocking_request

    def ask(shares: bool, waits: bool, splits: bool, how: str = _claim.CLAIM) -> tuple[bool, bool, float]:
        r = blocking_request(b"payload", "g", how=how, shares=shares, waits=waits, splits=splits)
        return r.claim, r.no_worker, r.wait_for_claim

    # By default a rank on another GPU waits for nobody: a stored answer, or its own compile now.
    assert ask(shares=False, waits=False, splits=False) == (False, True, 0.0)
    assert ask(shares=False, waits=True, splits=False) == (False, True, 0.0)
    # Splitting, it leaves the graph to its twin on the first GPU and loads the twin's compile:
    # one compile a graph in the fleet, not one more a GPU.
    assert ask(shares=False, waits=True, splits=True) == (False, False, TWIN_WAIT_SECS)
    # Longer than the twin's own wait for another host, within the 10 s kilnd accepts.
    assert HOST_SPLIT_WAIT_SECS < TWIN_WAIT_SECS <= 10.0
    # The first GPU's rank claims, and in a split job waits for whoever claimed first.
    assert ask(shares=True, waits=True, splits=True) == (True, False, 0.0)
    assert ask(shares=True, waits=False, splits=False) == (True, True, 0.0)
    # KILN_TORCH_CLAIM=0: kilnd's workers compile; nobody claims or compiles for itself.
    assert ask(shares=False, waits=True, splits=True, how="workers") == (False, False, 0.0)
