"""The payload of a torch.compile graph that kiln.torch sends kilnd: a u32 length, a JSON header
(the inputs' metadata, the Inductor and functorch settings torch's cache keys read, the
process-wide state a compile reads) and torch's graph pickle of the graph module with each
placeholder's Dynamo source. kilnd's torch worker (``torch_worker.py``) reads it back and must
compute the same AOTAutograd key as this process, so everything here is about that key.
Deterministic: processes tracing the same code send the same bytes, so they share one key.
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import json
import struct
from collections.abc import Iterator
from typing import Any

from . import _device

#: The payload's format; the worker reads the same number.
PAYLOAD_VERSION = 1

#: Node metadata that travels: the values Inductor and AOTAutograd read. Stack traces stay home
#: (they name the user's paths, which would split the key between hosts).
_META_KEYS = frozenset({"val", "example_value", "tensor_dict"})
#: GraphModule attributes that differ between processes compiling the same graph and that
#: neither a compile nor AOTAutograd's cache key reads (torch clears it before keying).
_VOLATILE_ATTRS = ("compile_subgraph_reason",)


class Unserializable(Exception):
    """The graph or its inputs cannot be sent to kilnd."""


#: Tensor bytes a graph may hold as its own constants (``get_attr``) and still travel. A model's
#: parameters reach a graph as inputs, described by their metadata alone; a graph that holds
#: this much as constants carries the job's live state (a compiled optimizer step holds every
#: moment of its optimizer), which the pickle would copy off the GPU whole (4 s of a 2-H200 job's
#: first step, on the record) to make a payload past kilnd's limit (``max_artifact_mb``, 128 MiB
#: by default).
MAX_CONSTANT_BYTES = 64 << 20


def _constant_bytes(torch: Any, gm: Any) -> int:
    """The bytes of the distinct tensors ``gm``'s ``get_attr`` nodes read."""
    seen: set[int] = set()
    total = 0
    for node in gm.graph.find_nodes(op="get_attr"):
        value = gm
        for part in str(node.target).split("."):
            value = getattr(value, part, None)
        if isinstance(value, torch.Tensor) and id(value) not in seen:
            seen.add(id(value))
            total += value.numel() * value.element_size()
    return total



def _input_spec(torch: Any, value: Any) -> dict[str, Any]:
    if isinstance(value, torch.Tensor):
        from torch._subclasses.fake_tensor import FakeTensor

        # A fake tensor travels as its metadata, as every tensor does: Dynamo's DDP optimizer
        # hands the backend each bucket's piece with fake example inputs, and the worker makes
        # inputs of the metadata either way. A fake parameter answers isinstance(Parameter).
        if type(value) not in (torch.Tensor, torch.nn.Parameter, FakeTensor) or value.is_sparse or value.is_quantized:
            raise Unserializable(f"an input of type {type(value).__name__} (only dense tensors, real or fake, travel)")
        if any(isinstance(s, torch.SymInt) for s in (*value.shape, *value.stride())):
            raise Unserializable("an input with symbolic (dynamic) shape")
        spec: dict[str, Any] = {
            "kind": "tensor",
            "shape": list(value.shape),
            "stride": list(value.stride()),
            "dtype": str(value.dtype),
            "device": str(_device.moved_device(torch, value.device)),
            "requires_grad": bool(value.requires_grad),
            "parameter": isinstance(value, torch.nn.Parameter),
            # AOTAutograd's cache key records whether the inputs were fake (a DDP piece's are):
            # the worker makes them fake too, so that the key it saves under is this one.
            "fake": isinstance(value, FakeTensor),
        }
        # A slice of a batch (``b[:, 1:]``) starts inside its storage: its offset is part of the
        # metadata torch keys the graph by, so the worker makes an input that starts there too.
        # Only where it is not 0, so that every other graph's payload reads as it always did.
        if value.storage_offset() != 0:
            spec["storage_offset"] = int(value.storage_offset())
        return spec
    for kind, cls in (("bool", bool), ("int", int), ("float", float)):
        if type(value) is cls:
            return {"kind": kind, "value": value}
    raise Unserializable(f"an input of type {type(value).__name__}")


def _changed_config(module: Any) -> dict[str, Any]:
    """Every entry of a torch config module that survives JSON and that torch's own cache keys
    read: what the worker must set to compile as this process would (a value from a TORCH*
    variable reads as the default here, so all are sent, not only those that differ). Entries
    torch leaves out of its keys stay home: they are this process's own (its compile threads,
    its cache switches, absolute paths such as CUTLASS's), and sending them would split one
    graph's key between hosts that differ only there."""
    ignored = set(getattr(module, "_save_config_ignore", ()))
    prefixes = tuple(getattr(module, "_cache_config_ignore_prefix", ()))
    out: dict[str, Any] = {}
    for name in getattr(module, "_config", {}):
        if name in ignored or (prefixes and name.startswith(prefixes)):
            continue
        try:
            value = getattr(module, name)
        except AttributeError:
            continue
        try:
            if json.loads(json.dumps(value)) == _as_lists(value):
                out[name] = value
        except (TypeError, ValueError):
            continue
    return out


def _as_lists(value: Any) -> Any:
    """``value`` as JSON reads it back: tuples become lists (the worker turns them back)."""
    if isinstance(value, (tuple, list)):
        return [_as_lists(v) for v in value]
    if isinstance(value, dict):
        return {k: _as_lists(v) for k, v in value.items()}
    return value


#: A shape environment's attributes that are this process's own, left out of the payload: the
#: ``id()`` of the symbolic value it last evaluated, a scratch value torch reads only right after
#: setting it (and leaves out of its own comparison of two environments). Sent, it gave each
#: process's graph bytes of its own, and so a key of its own: the ranks of a job compiled the
#: same graph once each.
_PROCESS_SHAPE_ENV = frozenset({"_expr_sym_node_id"})


def _without_fake_modes(metadata: Any) -> Any:
    """A tensor's description (the graph pickler's ``MetaTensorDesc``) without the fake modes of
    the tensors it describes besides itself: a view's base (a linear layer's output over 3-D
    inputs is a view of its 2-D product) and a gradient (a parameter's, once a backward has run:
    a module compiled again after its first step, for inputs that now need grad, as a GAN's
    discriminator is). torch clears the described tensor's own fake mode, which does not
    pickle, but not theirs; the unpickler gives each of them its fake mode back."""
    changes: dict[str, Any] = {}
    for name in ("base", "grad"):
        inner = getattr(metadata, name, None)
        if inner is not None:
            changes[name] = dataclasses.replace(_without_fake_modes(inner), fake_mode=None)
    return dataclasses.replace(metadata, **changes) if changes else metadata


@functools.cache
def _pickler() -> Any:
    """torch's graph pickler, mended: a tensor's description keeps the fake modes of the other
    tensors it describes, which do not pickle (:func:`_without_fake_modes` clears them), and a
    shape environment leaves out what is this process's own (``_PROCESS_SHAPE_ENV``). Under
    :func:`kiln.torch._device.normalizing`, it also writes the graph's device as ``cuda:0``."""
    import torch
    from torch._subclasses.fake_tensor import FakeTensor
    from torch.fx._graph_pickler import GraphPickler
    from torch.fx.experimental.symbolic_shapes import ShapeEnv

    class Pickler(GraphPickler):
        def reducer_override(self, obj: object) -> Any:
            if isinstance(obj, torch.device):
                return _device.moved_device(torch, obj).__reduce__()
            reduced = super().reducer_override(obj)
            if isinstance(obj, FakeTensor) and reduced is not NotImplemented:
                data = reduced[1][0]
                data.metadata = _device.moved_metadata(torch, _without_fake_modes(data.metadata))
            if isinstance(obj, ShapeEnv) and reduced is not NotImplemented:
                data = reduced[1][0]
                data.data = {k: v for k, v in data.data.items() if k not in _PROCESS_SHAPE_ENV}
            if isinstance(obj, torch.fx.GraphModule) and reduced is not NotImplemented:
                data = reduced[1][0]
                data.gm_dict = _device.moved_graph_state(data.gm_dict)
            return reduced

    return Pickler


def _ambient(torch: Any) -> dict[str, Any]:
    """The process-wide torch state a compile reads besides its config: autocast (an outer
    ``torch.autocast`` puts its casts into the compiled graph), deterministic algorithms, the
    matmul precision Inductor generates code for, and the current CUDA device. All of it is in
    torch's own cache keys, so a worker without it would compile another graph."""
    autocast = {
        device: str(torch.get_autocast_dtype(device)).removeprefix("torch.")
        for device in ("cpu", "cuda")
        if torch.is_autocast_enabled(device)
    }
    matmul = torch.backends.cuda.matmul
    return {
        "autocast": autocast,
        "autocast_cache": torch.is_autocast_cache_enabled(),
        "deterministic": [torch.are_deterministic_algorithms_enabled(), torch.is_deterministic_algorithms_warn_only_enabled()],
        "fill_uninitialized_memory": bool(torch.utils.deterministic.fill_uninitialized_memory),
        "float32_matmul_precision": torch.get_float32_matmul_precision(),
        "matmul": [
            matmul.fp32_precision,
            matmul.allow_fp16_reduced_precision_reduction,
            matmul.allow_bf16_reduced_precision_reduction,
        ],
        "cuda_device": _current_device(torch),
    }


def _current_device(torch: Any) -> int | None:
    if not (torch.cuda.is_available() and torch.cuda.is_initialized()):
        return None
    return int(_device.moved_device(torch, torch.device("cuda", torch.cuda.current_device())).index)


@contextlib.contextmanager
def _steady(torch: Any, gm: Any, compile_id: Any) -> Iterator[None]:
    """``gm`` and every graph module inside it (a DDP piece's, a custom autograd.Function's
    bodies, which carry a copy of the frame's metadata) without what differs between processes
    tracing the same code: the volatile attributes, Dynamo's backend id (a uuid4 per process) and
    the frame's number (the job's order of frames). Put back on leaving."""
    saved = []
    for module in gm.modules():
        if not isinstance(module, torch.fx.GraphModule):
            continue
        attrs = {k: module.__dict__.pop(k) for k in _VOLATILE_ATTRS if k in module.__dict__}
        saved.append((module, module.meta, attrs))
        module.meta = {k: v for k, v in module.meta.items() if k != "backend_id"}
        if "dynamo_compile_id" in module.meta:
            module.meta["dynamo_compile_id"] = compile_id
    try:
        yield
    finally:
        for module, meta, attrs in saved:
            module.meta = meta
            module.__dict__.update(attrs)


def serialize(gm: Any, example_inputs: list[Any], config_patches: dict[str, Any]) -> bytes:
    """The payload kilnd compiles: a u32 length, a JSON header (the inputs' metadata and the
    config), then torch's graph pickle of (graph module, each placeholder's Dynamo source).
    Deterministic: processes tracing the same code send the same bytes, so they share one key, and
    a graph on one GPU of the host is sent as it reads on ``cuda:0`` (:mod:`kiln.torch._device`),
    so that the ranks on the host's GPUs share it too."""
    with _device.normalizing(_device.moved_index(gm, example_inputs)):
        return _serialize(gm, example_inputs, config_patches)


def _serialize(gm: Any, example_inputs: list[Any], config_patches: dict[str, Any]) -> bytes:
    import torch
    from torch._guards import CompileId
    from torch.fx._graph_pickler import Options

    inputs = [_input_spec(torch, v) for v in example_inputs]
    if getattr(gm, "_source_to_user_stacks", None):
        raise Unserializable("a graph with user stack summaries (an export graph)")
    constants = _constant_bytes(torch, gm)
    if constants > MAX_CONSTANT_BYTES:
        raise Unserializable(
            f"the graph holds {constants / 2**20:.0f} MiB of tensors as its own constants (the job's state, "
            f"such as an optimizer's): more than a payload carries ({MAX_CONSTANT_BYTES >> 20} MiB)"
        )
    placeholders = list(gm.graph.find_nodes(op="placeholder"))
    sources = [getattr(n, "_dynamo_source", None) for n in placeholders]
    header = {
        "version": PAYLOAD_VERSION,
        "inputs": inputs,
        "config_patches": {k: v for k, v in (config_patches or {}).items() if json.loads(json.dumps(v, default=str)) == v},
        "inductor_config": _changed_config(torch._inductor.config),
        "functorch_config": _changed_config(torch._functorch.config),
        "grad_enabled": torch.is_grad_enabled(),
        "ambient": _ambient(torch),
    }
    try:
        with _steady(torch, gm, CompileId(frame_id=0, frame_compile_id=0)):
            options = Options(ops_filter=None, node_metadata_key_filter=lambda k: k in _META_KEYS)
            graph: bytes = _pickler().dumps((gm, sources), options)
    except Exception as e:  # noqa: BLE001 - anything the pickler refuses means "does not travel"
        raise Unserializable(f"{type(e).__name__}: {e}") from e
    # Not sort_keys: a config value that is a dict is part of AOTAutograd's cache key in its own
    # order, and the header's own order is already fixed by the code that builds it.
    head = json.dumps(header).encode()
    return struct.pack("<I", len(head)) + head + graph
