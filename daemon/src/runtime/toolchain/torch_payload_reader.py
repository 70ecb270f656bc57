"""What a torch graph's payload may hold, and how kilnd's torch worker reads it: the one place
where the worker touches a client's bytes before its box (the child) compiles them.

A payload is a u32 length, a JSON header and torch's graph pickle, as kiln.torch's
``_payload`` module writes it. The header's keys and its ambient state are checked against what this
reader knows (a key it does not read would be a client's setting silently dropped from the compile),
the pickle is read by torch's graph unpickler refusing every global outside a short allowlist
(which narrows what a hostile payload can reach; the box is the child that reads it), and the
inputs are rebuilt from their metadata. Shipped inside kilnd beside ``torch_worker.py``, which
imports it; both are hashed into every graph's key.
"""

import io
import json
import pickle
import re
import struct

#: The payload's format; kiln.torch writes the same number.
PAYLOAD_VERSION = 1
#: What a payload's header holds, and its "ambient" state: exactly what kiln.torch._payload
#: writes (a test runs its payloads through decode_payload). A key this worker does not read
#: would be a setting silently dropped from the compile, so it is refused.
HEADER_KEYS = frozenset(
    ("version", "inputs", "config_patches", "inductor_config", "functorch_config", "grad_enabled", "ambient")
)
AMBIENT_KEYS = frozenset(
    (
        "autocast",
        "autocast_cache",
        "deterministic",
        "fill_uninitialized_memory",
        "float32_matmul_precision",
        "matmul",
        "cuda_device",
    )
)

#: Globals a payload may name. A graph's pickle names torch's classes and the graph pickler's
#: own functions; nothing else. This narrows what a hostile payload can reach, and is not the
#: box: the child that reads it is (see the README's security model).
ALLOWED_ROOTS = ("torch", "sympy", "collections", "copyreg", "_codecs", "enum", "functools", "typing")
DENIED_PREFIXES = (
    "torch.hub",
    "torch.utils.cpp_extension",
    "torch.package",
    "torch.serialization",
    "torch.storage",
    "torch._utils",
    "torch.jit",
    "torch.load",
    "torch.save",
    "torch._inductor.codecache",
    "torch.utils._import_utils",
    "torch._dynamo.eval_frame",
    "torch.multiprocessing",
    "torch.distributed",
    "functools.reduce",
)
#: Denied modules' names a graph does need: a layout (torch.strided) pickles as its name.
ALLOWED_EXCEPTIONS = frozenset({"torch.serialization._get_layout"})
ALLOWED_BUILTINS = frozenset(
    {"getattr", "set", "frozenset", "slice", "range", "complex", "tuple", "list", "dict", "bytearray", "object", "bool",
     "int", "float", "str", "bytes", "type", "NoneType", "Ellipsis"}
)


def allowed_global(module, name):
    qualified = f"{module}.{name}"
    if qualified in ALLOWED_EXCEPTIONS:
        return True
    if module == "builtins":
        return name in ALLOWED_BUILTINS
    if not module.split(".")[0] in ALLOWED_ROOTS:
        return False
    return not qualified.startswith(DENIED_PREFIXES) and not module.startswith(DENIED_PREFIXES)


class MissingOperator(Exception):
    """The graph calls an operator this worker's torch does not have: one the job registered
    itself (``torch.library``), or a package's that only the job imported. The worker imports
    torch alone, and never a job's code, so no retry compiles it: the client names the fallback
    (``job_operator``) from this class's name on the log's last line."""


def restricted_loads(data, fake_mode):
    """torch's graph unpickler, refusing globals outside ALLOWED_ROOTS."""
    from torch.fx import _graph_pickler as gp

    class Unpickler(gp._GraphUnpickler):
        def find_class(self, module, name):
            if not allowed_global(module, name):
                raise pickle.UnpicklingError(f"the graph names {module}.{name}, which a graph never needs")
            return super().find_class(module, name)

    state = gp._UnpickleState(fake_mode)
    with io.BytesIO(data) as stream:
        try:
            return Unpickler(stream, state).load()
        except AttributeError as e:
            # torch.ops.<namespace> always exists; an operator it lacks raises this.
            found = re.fullmatch(r"'_OpNamespace' '(\w+)' object has no attribute '(\w+)'", str(e))
            if found is None:
                raise
            raise MissingOperator(f"the graph calls {found[1]}::{found[2]}, an operator kilnd's torch does not have") from None


def decode_payload(payload):
    """(header, graph pickle) of a payload: a u32 length, a JSON header, the pickle."""
    if len(payload) < 4:
        raise ValueError("payload shorter than its header length")
    (n,) = struct.unpack("<I", payload[:4])
    header = json.loads(payload[4 : 4 + n])
    if header.get("version") != PAYLOAD_VERSION:
        raise ValueError(f"payload version {header.get('version')!r}, this worker reads {PAYLOAD_VERSION}")
    unknown = sorted(set(header) - HEADER_KEYS) + [f"ambient.{k}" for k in sorted(set(header.get("ambient", {})) - AMBIENT_KEYS)]
    if unknown:
        raise ValueError(f"the payload's header names what this worker does not read: {', '.join(unknown)}")
    return header, payload[4 + n :]


def example_input(torch, spec):
    """A real input of the graph's metadata: contents do not matter to a compile."""
    kind = spec["kind"]
    if kind == "tensor":
        dtype = getattr(torch, spec["dtype"].removeprefix("torch."))
        if not isinstance(dtype, torch.dtype):
            raise ValueError(f"inputs: {spec['dtype']!r} is not a dtype")
        t = strided(torch, spec, dtype)
        if dtype.is_floating_point or dtype.is_complex:
            t.zero_()
        else:
            t.fill_(0)
        if spec.get("parameter"):
            return torch.nn.Parameter(t, requires_grad=spec["requires_grad"])
        return t.requires_grad_(spec["requires_grad"])
    if kind in ("int", "float", "bool"):
        return {"int": int, "float": float, "bool": bool}[kind](spec["value"])
    raise ValueError(f"inputs: unsupported input kind {kind!r}")


def strided(torch, spec, dtype):
    """An uninitialised tensor of the spec's shape and strides; where the client's input was a view
    starting inside its storage (``storage_offset``), a view of a larger buffer starting there."""
    offset = spec.get("storage_offset", 0)
    if not isinstance(offset, int) or offset < 0:
        raise ValueError(f"inputs: storage_offset {offset!r} is not a count of elements")
    if offset == 0:
        return torch.empty_strided(spec["shape"], spec["stride"], dtype=dtype, device=spec["device"])
    span = 1 + sum((size - 1) * stride for size, stride in zip(spec["shape"], spec["stride"]) if size > 0)
    base = torch.empty(offset + span, dtype=dtype, device=spec["device"])
    return base.as_strided(spec["shape"], spec["stride"], offset)


def typed_like(module, settings):
    """The client's settings with JSON's lists turned back into tuples where this config module
    holds a tuple (``cpp.cxx``, say): the value, not only its items, is in torch's cache keys."""
    out = {}
    for name, value in settings.items():
        current = getattr(module, name, None)
        out[name] = tuple(value) if isinstance(current, tuple) and isinstance(value, list) else value
    return out


def apply_ambient(torch, ambient):
    """Sets the client's process-wide torch state in this child (it is the child's alone) and
    returns the autocast contexts to enter, as (device type, dtype) pairs: see kiln.torch._payload's
    ``_ambient`` for why each matters."""
    det, warn_only = ambient.get("deterministic", [False, False])
    torch.use_deterministic_algorithms(bool(det), warn_only=bool(warn_only))
    torch.utils.deterministic.fill_uninitialized_memory = bool(ambient.get("fill_uninitialized_memory", True))
    if "float32_matmul_precision" in ambient:
        torch.set_float32_matmul_precision(str(ambient["float32_matmul_precision"]))
    if "matmul" in ambient:
        precision, fp16, bf16 = ambient["matmul"]
        matmul = torch.backends.cuda.matmul
        matmul.fp32_precision = str(precision)
        matmul.allow_fp16_reduced_precision_reduction = fp16
        matmul.allow_bf16_reduced_precision_reduction = bf16
    torch.set_autocast_cache_enabled(bool(ambient.get("autocast_cache", True)))
    device = ambient.get("cuda_device")
    if device is not None:
        if not torch.cuda.is_available() or int(device) >= torch.cuda.device_count():
            raise ValueError(f"the client compiles on cuda:{device}, which this worker does not see")
        torch.cuda.set_device(int(device))
    autocast = []
    for device_type, dtype_name in ambient.get("autocast", {}).items():
        if device_type not in ("cpu", "cuda"):
            raise ValueError(f"ambient: autocast on {device_type!r}")
        dtype = getattr(torch, str(dtype_name))
        if not isinstance(dtype, torch.dtype):
            raise ValueError(f"ambient: {dtype_name!r} is not a dtype")
        autocast.append((device_type, dtype))
    return autocast
