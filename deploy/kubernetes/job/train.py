"""The example Job of deploy/kubernetes/job: a small GPU job whose kernels come from the node's
kilnd, over the Unix socket the kilnd DaemonSet puts in the node's /run/kiln.

1. It compiles one graph through kilnd (``KILN_DAEMON``): a CUDA C++ kernel (``vector_add``,
   NVRTC) and a Triton kernel (``add_kernel``, kilnd's Triton workers), and prints where each
   came from: ``compiled`` on a cold fleet, ``remote`` when another node compiled it first,
   ``memory`` or ``disk`` when this node has it. No GPU is needed for this part.
2. With a GPU (the CUDA driver, ``libcuda.so.1``, which the NVIDIA container runtime mounts into
   the pod), it loads the CUDA kernel's cubin with the driver API and runs ``--steps`` steps of
   ``x = x + y`` over ``--n`` floats, checking every value. Launching kernels needs a GPU: without
   one it says so and exits 0, unless ``--require-gpu`` (the Job passes it, so a pod that lands
   without a GPU fails instead of passing silently).

It needs the kiln Python package (and so grpcio, protobuf, blake3) and nothing else: no torch,
and no local Triton (kilnd compiles the Triton kernel). The image ``kiln/train-example``
(``scripts/images``) holds it at /opt/kiln/example/train.py.
"""

from __future__ import annotations

import argparse
import ctypes
import sys
import time

import kiln

# examples/cuda/vector_add.cu, as one kernel of the graph.
VECTOR_ADD = """\
extern "C" __global__ void vector_add(const float* a, const float* b, float* c, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) c[i] = a[i] + b[i];
}
"""

# A Triton kernel, compiled by kilnd's Triton workers; this job only reports it (launching a
# Triton cubin by hand takes Triton's launcher, which the job does not need to carry).
TRITON_ADD = """\
import triton
import triton.language as tl


@triton.jit
def add_kernel(x_ptr, y_ptr, out_ptr, n, BLOCK: tl.constexpr):
    pid = tl.program_id(0)
    offs = pid * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    tl.store(out_ptr + offs, tl.load(x_ptr + offs, mask=mask) + tl.load(y_ptr + offs, mask=mask), mask=mask)
"""

BLOCK = 256


class NoGpu(Exception):
    """The CUDA driver is missing or sees no device."""


def graph(target: str) -> kiln.Graph:
    g = kiln.Graph(name="kiln-train-example", target=target)
    g.add(kiln.cuda_kernel("vector_add", VECTOR_ADD))
    g.add(
        kiln.triton_kernel(
            "add_kernel",
            TRITON_ADD,
            "add_kernel",
            {"x_ptr": "*fp32", "y_ptr": "*fp32", "out_ptr": "*fp32", "n": "i32", "BLOCK": "constexpr"},
            {"BLOCK": 1024},
            num_warps=4,
        )
    )
    return g


def compile_through_kilnd(target: str) -> kiln.CompileResult:
    started = time.monotonic()
    with kiln.Client() as client:
        result = client.compile(graph(target))
    took = time.monotonic() - started
    for k in result.kernels:
        status = "ok" if k.ok else f"FAILED:\n{k.log}"
        print(
            f"kilnd: {k.id:<11} {k.toolchain:<7} {k.target:<7} {k.tier!s:<8} "
            f"{k.artifact_bytes:>7} bytes  {status}"
        )
    print(f"kilnd: {len(result.kernels)} kernels in {took:.2f} s (graph {result.graph_key[:16]})")
    if not result.all_ok:
        raise SystemExit("kilnd did not compile every kernel (its logs are above)")
    return result


class Driver:
    """The few CUDA driver API calls this job makes, through ctypes: no CUDA toolkit needed."""

    def __init__(self) -> None:
        try:
            self.lib = ctypes.CDLL("libcuda.so.1")
        except OSError as e:
            raise NoGpu(f"no CUDA driver ({e})") from e
        self.call("cuInit", 0)
        count = ctypes.c_int()
        self.call("cuDeviceGetCount", ctypes.byref(count))
        if count.value == 0:
            raise NoGpu("the CUDA driver sees no device")

    def call(self, name: str, *args: object) -> None:
        rc = getattr(self.lib, name)(*args)
        if rc != 0:
            text = ctypes.c_char_p()
            self.lib.cuGetErrorString(rc, ctypes.byref(text))
            raise RuntimeError(f"{name}: CUDA error {rc} ({(text.value or b'?').decode()})")


def run_on_gpu(cubin: bytes, n: int, steps: int) -> None:
    """Runs ``steps`` steps of x = x + y on device 0 with the cubin's ``vector_add`` and checks x."""
    cuda = Driver()
    device, ctx = ctypes.c_int(), ctypes.c_void_p()
    cuda.call("cuDeviceGet", ctypes.byref(device), 0)
    name = ctypes.create_string_buffer(256)
    cuda.call("cuDeviceGetName", name, 256, device)
    cuda.call("cuDevicePrimaryCtxRetain", ctypes.byref(ctx), device)
    cuda.call("cuCtxSetCurrent", ctx)
    module, function = ctypes.c_void_p(), ctypes.c_void_p()
    cuda.call("cuModuleLoadData", ctypes.byref(module), ctypes.c_char_p(cubin))
    cuda.call("cuModuleGetFunction", ctypes.byref(function), module, b"vector_add")

    size = ctypes.c_size_t(4 * n)
    x_host = (ctypes.c_float * n)(*[float(i % 1000) for i in range(n)])
    y_host = (ctypes.c_float * n)(*[0.5] * n)
    x, y = ctypes.c_uint64(), ctypes.c_uint64()
    for ptr, host in ((x, x_host), (y, y_host)):
        cuda.call("cuMemAlloc_v2", ctypes.byref(ptr), size)
        cuda.call("cuMemcpyHtoD_v2", ptr, host, size)
    count = ctypes.c_int(n)
    # vector_add(a, b, c, n) with c = a: each step adds y to x in place.
    params = (ctypes.c_void_p * 4)(*[ctypes.cast(ctypes.byref(a), ctypes.c_void_p) for a in (x, y, x, count)])
    grid = (n + BLOCK - 1) // BLOCK
    started = time.monotonic()
    for _ in range(steps):
        cuda.call("cuLaunchKernel", function, grid, 1, 1, BLOCK, 1, 1, 0, None, params, None)
    cuda.call("cuCtxSynchronize")
    took = time.monotonic() - started
    out = (ctypes.c_float * n)()
    cuda.call("cuMemcpyDtoH_v2", out, x, size)
    wrong = sum(1 for i in range(n) if out[i] != x_host[i] + 0.5 * steps)
    for ptr in (x, y):
        cuda.call("cuMemFree_v2", ptr)
    cuda.call("cuModuleUnload", module)
    cuda.call("cuDevicePrimaryCtxRelease", device)
    print(f"gpu: {name.value.decode()}: {steps} steps over {n} floats in {took * 1e3:.1f} ms, {wrong} wrong values")
    if wrong:
        raise SystemExit(f"{wrong} of {n} values are wrong")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    parser.add_argument("--target", default="", help="sm_XX to compile for (default: kilnd's, its GPU's)")
    parser.add_argument("--n", type=int, default=1 << 20, help="floats per step")
    parser.add_argument("--steps", type=int, default=100)
    parser.add_argument("--require-gpu", action="store_true", help="fail when there is no GPU to launch on")
    args = parser.parse_args(argv)

    result = compile_through_kilnd(args.target)
    try:
        run_on_gpu(result["vector_add"].artifact, args.n, args.steps)
    except NoGpu as e:
        print(f"gpu: not run: {e}. Compiling needs no GPU (done above); launching kernels needs one.")
        return 1 if args.require_gpu else 0
    return 0


if __name__ == "__main__":
    sys.exit(main())
