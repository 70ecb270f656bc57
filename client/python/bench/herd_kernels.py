"""Twenty distinct Triton kernels for the fleet-herd test and benchmark: small elementwise and
row kernels at several block sizes, each compiled for sm_90 with no GPU.

Every process imports this file from the same path, so the file name Triton writes into each
cubin's line information is the same everywhere and the cubins are byte-identical.
"""

from __future__ import annotations

import triton
import triton.language as tl


@triton.jit
def add_kernel(x_ptr, y_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    tl.store(out_ptr + offs, tl.load(x_ptr + offs, mask=mask) + tl.load(y_ptr + offs, mask=mask), mask=mask)


@triton.jit
def axpy_kernel(x_ptr, y_ptr, a, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    y = tl.load(y_ptr + offs, mask=mask)
    tl.store(y_ptr + offs, a * tl.load(x_ptr + offs, mask=mask) + y, mask=mask)


@triton.jit
def relu_kernel(x_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    tl.store(out_ptr + offs, tl.maximum(tl.load(x_ptr + offs, mask=mask), 0.0), mask=mask)


@triton.jit
def softmax_kernel(out_ptr, in_ptr, row_stride, n_cols, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    cols = tl.arange(0, BLOCK)
    mask = cols < n_cols
    x = tl.load(in_ptr + row * row_stride + cols, mask=mask, other=-float("inf"))
    x = x - tl.max(x, axis=0)
    num = tl.exp(x)
    tl.store(out_ptr + row * row_stride + cols, num / tl.sum(num, axis=0), mask=mask)


@triton.jit
def layer_norm_kernel(x_ptr, y_ptr, w_ptr, b_ptr, stride, n_cols, eps, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    cols = tl.arange(0, BLOCK)
    mask = cols < n_cols
    x = tl.load(x_ptr + row * stride + cols, mask=mask, other=0.0).to(tl.float32)
    mean = tl.sum(x, axis=0) / n_cols
    diff = tl.where(mask, x - mean, 0.0)
    rstd = 1.0 / tl.sqrt(tl.sum(diff * diff, axis=0) / n_cols + eps)
    w = tl.load(w_ptr + cols, mask=mask)
    b = tl.load(b_ptr + cols, mask=mask)
    tl.store(y_ptr + row * stride + cols, diff * rstd * w + b, mask=mask)


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
