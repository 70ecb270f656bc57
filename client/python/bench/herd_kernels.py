"""Twenty distinct Triton kernels for the fleet-herd test and benchmark: the elementwise and row
kernels of examples/triton/kernels.py at several block sizes, each compiled for sm_90 with no GPU.

Every process loads the kernels from the same path, so the file name Triton writes into each
cubin's line information is the same everywhere and the cubins are byte-identical.
"""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

_PATH = Path(__file__).resolve().parents[3] / "examples" / "triton" / "kernels.py"


def _load_kernels():  # type: ignore[no-untyped-def]
    """examples/triton/kernels.py, loaded by its path: it is not a package, and Triton reads each
    function's source from the file it was defined in."""
    name = "kiln_examples_triton_kernels"
    if name in sys.modules:
        return sys.modules[name]
    spec = importlib.util.spec_from_file_location(name, _PATH)
    assert spec is not None and spec.loader is not None, _PATH
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


_k = _load_kernels()
add_kernel, axpy_kernel, relu_kernel = _k.add_kernel, _k.axpy_kernel, _k.relu_kernel
softmax_kernel, layer_norm_kernel = _k.softmax_kernel, _k.layer_norm_kernel

_ADD = {"x_ptr": "*fp32", "y_ptr": "*fp32", "out_ptr": "*fp32", "n": "i32", "BLOCK": "constexpr"}
_AXPY = {"x_ptr": "*fp32", "y_ptr": "*fp32", "a": "fp32", "n": "i32", "BLOCK": "constexpr"}
_RELU = {"x_ptr": "*fp32", "out_ptr": "*fp32", "n": "i32", "BLOCK": "constexpr"}
_SOFTMAX = {"out_ptr": "*fp32", "in_ptr": "*fp32", "row_stride": "i32", "n_cols": "i32", "BLOCK": "constexpr"}
_LAYER_NORM = {
    "x_ptr": "*fp32",
    "y_ptr": "*fp32",
    "w_ptr": "*fp32",
    "b_ptr": "*fp32",
    "stride": "i32",
    "n_cols": "i32",
    "eps": "fp32",
    "BLOCK": "constexpr",
}

#: (name, jit function, signature, constexprs, options), 20 distinct kernels.
KERNELS = (
    [(f"add_{b}", add_kernel, _ADD, {"BLOCK": b}, {"num_warps": 4}) for b in (64, 128, 256, 512, 1024, 2048)]
    + [(f"axpy_{b}", axpy_kernel, _AXPY, {"BLOCK": b}, {"num_warps": 4}) for b in (128, 512, 2048)]
    + [(f"relu_{b}", relu_kernel, _RELU, {"BLOCK": b}, {"num_warps": 4}) for b in (256, 1024, 4096)]
    + [(f"softmax_{b}", softmax_kernel, _SOFTMAX, {"BLOCK": b}, {"num_warps": 4}) for b in (128, 256, 512, 1024)]
    + [(f"layer_norm_{b}", layer_norm_kernel, _LAYER_NORM, {"BLOCK": b}, {"num_warps": 4}) for b in (256, 512, 1024, 2048)]
)
assert len(KERNELS) == 20 and len({k[0] for k in KERNELS}) == 20
