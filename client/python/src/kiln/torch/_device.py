"""One compile per graph across a host's GPUs: the CUDA device index taken out of a graph before
it travels, and put back where it lands.

A graph names its device. Rank 1's reads ``cuda:1`` where rank 0's reads ``cuda:0``: in its nodes,
in its inputs' metadata, and so in every key torch and kiln make of it, which is why ranks on
different GPUs compiled what is one graph once each. The code Inductor generates for one index
differs from another index's only in that index (the device guard, the stream, the tensors it
makes, each Triton kernel's device), and a cubin does not depend on it. So:

- the payload of a graph on ``cuda:k`` is the payload of the same graph on ``cuda:0``
  (:func:`normalizing`, which kiln's graph pickler reads), and kilnd compiles it once for every
  rank of the host, and the fleet's hosts share it;
- a process on ``cuda:k`` whose own FX graph cache entry is missing looks under the key the graph
  has on ``cuda:0`` too (:func:`install`). An entry found there (kilnd's answer, loaded) is written
  again under the process's own key, its code moved to ``cuda:k`` (:func:`move_graph`), and torch
  finds it there. Nothing is ever written under a ``cuda:0`` key but ``cuda:0`` code, so a process
  without kiln that shares the cache reads only what it would have written itself.

A graph whose tensors are on more than one device, or that names a device by a spelling the
rewrite does not know, keeps its index and its own keys: it compiles once per device, as before.
"""

from __future__ import annotations

import contextlib
import contextvars
import dataclasses
import logging
import os
import pickle
import re
from collections.abc import Iterator
from typing import Any

log = logging.getLogger("kiln")

#: The CUDA index that reads as 0 while a payload or a key is made (:func:`normalizing`).
_FROM: contextvars.ContextVar[int | None] = contextvars.ContextVar("kiln_device_from", default=None)

#: Every way Inductor's generated Python (the wrapper and its Triton kernels' metadata) and a
#: traced graph's code name a CUDA device index: (before, index, after).
_NAMED_INDEX = tuple(
    re.compile(p)
    for p in (
        r"(torch\.cuda\._DeviceGuard\()(\d+)(\))",
        r"(torch\.cuda\.set_device\()(\d+)(\))",
        r"(get_raw_stream\()(\d+)(\))",
        r"(\bstream)(\d+)(\b)",
        r"(device\(type='cuda', index=)(\d+)(\))",
        r"(DeviceProperties\(type='cuda', index=)(\d+)(,)",
        r"(['\"]cuda:)(\d+)(['\"])",
    )
)

_INDEX_STRING = re.compile(r"cuda:\d+")
#: A comment line, and a device as the comments of Inductor's code print it.
_COMMENT = re.compile(r"^[ \t]*#.*$", re.M)
_COMMENT_INDEX = re.compile(r"(cuda:)(\d+)(\b)")


def indices(code: str) -> set[int]:
    """The CUDA device indices ``code`` names."""
    found = {int(m.group(2)) for pattern in _NAMED_INDEX for m in pattern.finditer(code)}
    for comment in _COMMENT.finditer(code):
        found.update(int(m.group(2)) for m in _COMMENT_INDEX.finditer(comment.group(0)))
    return found


def move_code(code: str, old: int, new: int) -> str:
    """``code`` with every CUDA device index ``old`` it names changed to ``new``, in its comments
    too (Inductor's show each node's tensors, ``f32[4][1]cuda:0``): the moved code is then the
    very code torch generates on the other device, which the GPU run checks."""

    def moved(m: re.Match[str]) -> str:
        return f"{m.group(1)}{new}{m.group(3)}" if int(m.group(2)) == old else m.group(0)

    for pattern in _NAMED_INDEX:
        code = pattern.sub(moved, code)
    return _COMMENT.sub(lambda c: _COMMENT_INDEX.sub(moved, c.group(0)), code)


def graph_device(values: Any) -> int | None:
    """The one CUDA index of the tensors among ``values``; None when none is on a GPU, or when
    they are on several."""
    found = {v.device.index for v in values if getattr(getattr(v, "device", None), "type", None) == "cuda"}
    if len(found) != 1:
        return None
    (index,) = found
    return index if isinstance(index, int) else None


def moved_index(gm: Any, example_inputs: Any) -> int | None:
    """The CUDA index a graph's payload and key read as 0 (:func:`normalizing`): its one device,
    unless that is already 0 or the graph names it by a spelling the rewrite does not know (then
    None: the payload is the graph as it is). A process whose graph is moved cannot share its own
    compile: its code names its device, where the key promises ``cuda:0``'s."""
    index = graph_device(example_inputs)
    if index and graph_names_only(gm, index):
        return index
    return None


def graph_names_only(gm: Any, index: int) -> bool:
    """Whether the only CUDA device ``gm``'s nodes name is ``index``, by the spellings the rewrite
    knows: a ``torch.device``. A string of ``cuda:N`` would not be moved, so a graph that has one
    keeps its index (``'cuda'`` alone, as autocast names its device type, is no index)."""
    import torch

    ok = True

    def look(value: Any) -> Any:
        nonlocal ok
        if isinstance(value, torch.device) and value.type == "cuda" and value.index != index:
            ok = False
        elif isinstance(value, str) and _INDEX_STRING.fullmatch(value):
            ok = False
        return value

    for node in gm.graph.nodes:
        torch.fx.node.map_aggregate((node.args, node.kwargs), look)
    return ok


@contextlib.contextmanager
def normalizing(index: int | None) -> Iterator[None]:
    """Within it, what kiln serializes or keys of a graph reads CUDA index ``index`` as 0."""
    token = _FROM.set(index or None)
    try:
        yield
    finally:
        _FROM.reset(token)


def moved_device(torch: Any, device: Any) -> Any:
    """``device`` as a payload or key made under :func:`normalizing` names it, as one object for
    each device: a pickle refers to an object it has written before by identity, so which tensors
    shared a device object decided the bytes. That sharing differed between a graph pickled on two
    GPUs, and, on any device, between a graph traced before and after ``torch._dynamo.reset()``
    in one process (a sweep's trials), which then took another key."""
    if not isinstance(device, torch.device):
        return device
    index = 0 if device.type == "cuda" and device.index is not None and device.index == _FROM.get() else device.index
    return _DEVICES.setdefault((device.type, index), torch.device(device.type, index) if index is not None else torch.device(device.type))


_DEVICES: dict[tuple[str, int | None], Any] = {}


def moved_metadata(torch: Any, metadata: Any) -> Any:
    """A tensor's metadata (torch's ``TensorMetadata``, or the graph pickler's ``MetaTensorDesc``
    with the descriptions it holds of other tensors: a view's base, a gradient, a subclass's
    inner tensors) as a payload or key made under :func:`normalizing` names it."""
    if metadata is None or not dataclasses.is_dataclass(metadata) or isinstance(metadata, type):
        return metadata
    changes: dict[str, Any] = {}
    for f in dataclasses.fields(metadata):
        value = getattr(metadata, f.name)
        if isinstance(value, torch.device):
            moved = moved_device(torch, value)
        elif dataclasses.is_dataclass(value) and hasattr(value, "device"):
            moved = moved_metadata(torch, value)
        elif isinstance(value, dict) and any(dataclasses.is_dataclass(v) and hasattr(v, "device") for v in value.values()):
            moved = {k: moved_metadata(torch, v) for k, v in value.items()}
            moved = value if all(moved[k] is value[k] for k in value) else moved
        else:
            continue
        if moved is not value:
            changes[f.name] = moved
    return dataclasses.replace(metadata, **changes) if changes else metadata


def moved_graph_state(state: dict[str, Any]) -> dict[str, Any]:
    """A graph module's state (its ``__dict__``, as torch's graph pickler writes it) as it reads
    under :func:`normalizing`: its generated code names the device too."""
    index = _FROM.get()
    code = state.get("_code")
    if index is None or not isinstance(code, str):
        return state
    return {**state, "_code": move_code(code, index, 0)}


# -- torch's FX graph cache ---------------------------------------------------------------------


def fx_graph_key(torch: Any, gm: Any, example_inputs: Any, fx_kwargs: Any, inputs_to_check: Any) -> str:
    """The FX graph cache key torch gives this graph (Inductor's input, after AOTAutograd) on
    ``cuda:0``, made under :func:`normalizing`: torch's own hash, its pickler told to read the
    index as 0 in the graph's code, its tensors' metadata and its devices."""
    pickler, details = _fx_graph_pickler(torch, gm, example_inputs, fx_kwargs, inputs_to_check)
    return "f" + str(pickler.get_hash(details))


def _fx_graph_pickler(torch: Any, gm: Any, example_inputs: Any, fx_kwargs: Any, inputs_to_check: Any) -> tuple[Any, Any]:
    from torch._inductor import codecache
    from torch._inductor.cudagraph_utils import BoxedDeviceIndex
    from torch._subclasses.fake_tensor import FakeTensor

    index = _FROM.get()
    assert index is not None, "fx_graph_key outside normalizing()"
    boxed = fx_kwargs.get("boxed_forward_device_index")
    if isinstance(boxed, BoxedDeviceIndex) and boxed.value == index:
        # The forward's device, which a backward graph's key reads (with CUDA graphs).
        fx_kwargs = {**fx_kwargs, "boxed_forward_device_index": BoxedDeviceIndex(0)}
    details = codecache.FxGraphHashDetails(gm, example_inputs, fx_kwargs, inputs_to_check)
    pickler = codecache.FxGraphCachePickler(gm, bool(details.user_defined_triton_source))
    table: dict[Any, Any] = pickler.dispatch_table  # type: ignore[assignment]

    def tensor(reduce: Any) -> Any:
        def reduce_moved(t: Any) -> Any:
            fn, (data,) = reduce(t)
            if isinstance(data, codecache.TensorMetadataAndValues):
                return fn, (dataclasses.replace(data, tensor_metadata=moved_metadata(torch, data.tensor_metadata)),)
            return fn, (moved_metadata(torch, data),)

        return reduce_moved

    for cls in (FakeTensor, torch.Tensor, torch.nn.parameter.Parameter):
        table[cls] = tensor(table[cls])
    table[torch.device] = lambda d: moved_device(torch, d).__reduce__()
    graph_reduce: Any = table.get(type(gm))

    def reduce_graph(g: Any) -> Any:
        reduced: Any = graph_reduce(g) if graph_reduce is not None else g.__reduce__()
        fn, (data, imports) = reduced
        return fn, ({**data, "_code": move_code(data["_code"], index, 0)}, imports)

    table[type(gm)] = reduce_graph
    return pickler, details


def move_graph(graph: Any, index: int) -> Any | None:
    """A ``cuda:0`` FX graph cache entry (a ``CompiledFxGraph``, as torch unpickles it) moved to
    ``cuda:index``: its code, its code's key, its device indices and its Triton kernels' cache
    places; None when its code names another index than 0, which this cannot tell apart."""
    from torch._inductor.codecache import get_hash
    from torch.utils._ordered_set import OrderedSet

    source = graph.source_code
    if indices(source) - {0}:
        return None
    graph.source_code = move_code(source, 0, index)
    # The code's key names the file Python loads it from: the moved code is another file.
    graph.cache_key = get_hash(graph.source_code.strip(), "", "code")
    graph.device_idxs = OrderedSet(index if i == 0 else i for i in graph.device_idxs)
    bundle = getattr(graph, "_triton_bundle", None)
    if bundle is not None:
        # Each kernel's cubin goes to this device's Triton cache, where the moved kernel looks.
        # Kernels ready to launch were made for cuda:0 and are keyed by its code: dropped, the
        # moved kernels load from the cubins instead.
        graph._triton_bundle = dataclasses.replace(
            bundle,
            kernel_artifacts=[dataclasses.replace(a, device=index) for a in bundle.kernel_artifacts],
            static_autotuners=[],
        )
    return graph


def _entries(cache: Any, key: str) -> list[str]:
    directory = cache._get_tmp_dir_for_key(key)
    if not os.path.isdir(directory):
        return []
    return [os.path.join(directory, n) for n in sorted(os.listdir(directory)) if not n.startswith(".")]


def _adopt(torch: Any, cache: Any, gm: Any, example_inputs: Any, fx_kwargs: Any, inputs_to_check: Any, key: str) -> str:
    """Writes under ``key`` (this process's, on ``cuda:k``) each entry the graph has on
    ``cuda:0``, moved to ``cuda:k``; what happened, which torch's counters keep under ``kiln``
    (``device_moved``, ``device_no_entry``...), for a job's log when a graph compiles anyway."""
    index = graph_device(example_inputs)
    if not index:
        return "first_gpu"
    if _entries(cache, key):
        return "own_entry"
    if not graph_names_only(gm, index):
        return "names_another_device"
    with normalizing(index):
        normalized = fx_graph_key(torch, gm, example_inputs, fx_kwargs, inputs_to_check)
    entries = _entries(cache, normalized)
    if not entries:
        return "no_entry"
    written = 0
    for path in entries:
        with open(path, "rb") as f:
            graph = move_graph(pickle.loads(f.read()), index)
        if graph is not None:
            cache._write_to_local_cache(key, pickle.dumps(graph))
            written += 1
    if not written:
        return "code_names_another_device"
    log.debug("kiln: FX graph %s on cuda:%d is %s on cuda:0, moved", key, index, normalized)
    return "moved"


_installed = False


def install(torch: Any) -> None:
    """Has torch's FX graph cache take a graph's ``cuda:0`` entry, moved, where the graph on
    another GPU has none of its own (see the module's doc). Idempotent, and called at each graph:
    it must come after torch._inductor imports whole. A torch whose cache does not have the parts
    this wraps is left as it is."""
    global _installed
    if _installed:
        return
    try:
        from torch._inductor.codecache import FxGraphCache
    except ImportError:
        log.debug("kiln: torch's FX graph cache does not import; graphs keep their device index", exc_info=True)
        return
    original = getattr(FxGraphCache, "prepare_key", None)
    if original is None or not hasattr(FxGraphCache, "_write_to_local_cache"):
        return

    def prepare_key(gm: Any, example_inputs: Any, fx_kwargs: Any, inputs_to_check: Any, remote: bool) -> Any:
        key_info, cache_info = original(gm, example_inputs, fx_kwargs, inputs_to_check, remote)
        if key_info is not None:
            try:
                outcome = _adopt(torch, FxGraphCache, gm, example_inputs, fx_kwargs, inputs_to_check, key_info[0])
            except Exception:  # noqa: BLE001 - the graph compiles here, under its own key, as it would
                log.debug("kiln: no cuda:0 FX graph entry moved", exc_info=True)
                outcome = "failed"
            if outcome != "first_gpu":
                from torch._dynamo.utils import counters

                counters["kiln"][f"device_{outcome}"] += 1
        return key_info, cache_info

    FxGraphCache.prepare_key = staticmethod(prepare_key)  # type: ignore[method-assign]
    _installed = True
