"""Inputs, float64 references and launchers for the kernels of kernels_e2e.py: CuPy for cubins
(Triton's too, with its two hidden scratch pointers) and Triton's own ``CompiledKernel``.
launch_selftest.py runs the same code against stand-ins on a machine with no GPU."""

from __future__ import annotations

import importlib.util
import json
import math
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))

import kernel_sources as ks  # noqa: E402

#: Relative error bounds, ||out - ref|| / ||ref|| against float64.
TOL = {
    "add": 1e-5,
    "sum": 1e-5,
    "softmax": 2e-5,  # exp
    "layer_norm": 1e-4,  # rsqrt / Triton's sqrt
    "matmul": 1e-5,  # fp32 FMA
    "matmul_fp16": 1e-4,  # fp16 inputs (exact products), fp32 accumulation on tensor cores
}


def rel_err(out: np.ndarray, ref: np.ndarray) -> float:
    out = np.asarray(out, dtype=np.float64)
    ref = np.asarray(ref, dtype=np.float64)
    if out.shape != ref.shape:
        return math.inf
    if not np.all(np.isfinite(out)):
        return math.nan
    denom = float(np.linalg.norm(ref.ravel()))
    return float(np.linalg.norm((out - ref).ravel())) / (denom if denom > 0 else 1.0)


def passes(err: float, tol: float) -> bool:
    return math.isfinite(err) and err < tol  # NaN never passes


# -- inputs and references --


class Data:
    """Fresh random inputs (never zeros) and float64 references, per kernel family."""

    def __init__(self, seed: int) -> None:
        self.seed = seed
        rng = np.random.default_rng(seed)
        f32 = np.float32
        self.a = rng.uniform(-1, 1, ks.N_VEC).astype(f32)
        self.b = rng.uniform(-1, 1, ks.N_VEC).astype(f32)
        self.pos = rng.uniform(0.5, 1.5, ks.N_VEC).astype(f32)  # a sum without cancellation
        self.x = (rng.standard_normal((ks.ROWS, ks.COLS)) * 3).astype(f32)
        self.lx = (rng.standard_normal((ks.ROWS, ks.COLS)) * 2 + 0.5).astype(f32)
        self.w = rng.standard_normal(ks.COLS).astype(f32)
        self.bias = rng.standard_normal(ks.COLS).astype(f32)
        self.A = rng.standard_normal((ks.MM_M, ks.MM_K)).astype(f32)
        self.B = rng.standard_normal((ks.MM_K, ks.MM_N)).astype(f32)
        self.A16 = rng.standard_normal((ks.TMM_M, ks.TMM_K)).astype(np.float16)
        self.B16 = rng.standard_normal((ks.TMM_K, ks.TMM_N)).astype(np.float16)

    def ref(self, family: str, fp16_matmul: bool = False) -> np.ndarray:
        d = np.float64
        if family in ("vector_add", "add"):
            return self.a.astype(d) + self.b.astype(d)
        if family in ("reduce_sum", "sum"):
            return np.array([self.pos.astype(d).sum()])
        if family == "softmax":
            x = self.x.astype(d)
            e = np.exp(x - x.max(axis=1, keepdims=True))
            return e / e.sum(axis=1, keepdims=True)
        if family == "layer_norm":
            x = self.lx.astype(d)
            mean = x.mean(axis=1, keepdims=True)
            var = ((x - mean) ** 2).mean(axis=1, keepdims=True)
            return (x - mean) / np.sqrt(var + ks.LN_EPS) * self.w.astype(d) + self.bias.astype(d)
        if family == "matmul":
            if fp16_matmul:
                return self.A16.astype(d) @ self.B16.astype(d)
            return self.A.astype(d) @ self.B.astype(d)
        raise KeyError(family)

    def emulate32(self, family: str, fp16_matmul: bool = False) -> np.ndarray:
        """The kernel's arithmetic in float32 NumPy (the dry run's stand-in for a launch)."""
        f = np.float32
        if family in ("vector_add", "add"):
            return self.a + self.b
        if family in ("reduce_sum", "sum"):
            parts = self.pos[: (ks.N_VEC // 1024) * 1024].reshape(-1, 1024).sum(axis=1, dtype=f)
            return np.array([parts.sum(dtype=f) + self.pos[(ks.N_VEC // 1024) * 1024 :].sum(dtype=f)], dtype=f)
        if family == "softmax":
            e = np.exp(self.x - self.x.max(axis=1, keepdims=True))
            return e / e.sum(axis=1, keepdims=True, dtype=f)
        if family == "layer_norm":
            mean = self.lx.mean(axis=1, keepdims=True, dtype=f)
            var = ((self.lx - mean) ** 2).mean(axis=1, keepdims=True, dtype=f)
            return (self.lx - mean) / np.sqrt(var + f(ks.LN_EPS)) * self.w + self.bias
        if family == "matmul":
            if fp16_matmul:
                return self.A16.astype(f) @ self.B16.astype(f)
            return self.A @ self.B
        raise KeyError(family)


def tol_for(family: str, fp16_matmul: bool = False) -> float:
    key = {"vector_add": "add", "reduce_sum": "sum"}.get(family, family)
    return TOL["matmul_fp16"] if (key == "matmul" and fp16_matmul) else TOL[key]


# -- launches (GPU only) --


def cdiv(a: int, b: int) -> int:
    return (a + b - 1) // b


class CupyLauncher:
    """CUDA and PTX cubins through CuPy."""

    def __init__(self, work: Path) -> None:
        import cupy

        self.cp = cupy
        self.work = work / "cubins"
        self.work.mkdir(parents=True, exist_ok=True)

    def function(self, kid: str, cubin: bytes, name: str):
        path = self.work / f"{kid}.cubin"
        path.write_bytes(cubin)
        module = self.cp.RawModule(path=str(path))
        return module.get_function(name)

    def nan(self, shape) -> object:
        return self.cp.full(shape, np.nan, dtype=np.float32)

    def run(self, family: str, fn, d: Data) -> np.ndarray:
        cp, i32, f32 = self.cp, np.int32, np.float32
        if family == "vector_add":
            a, b, c = cp.asarray(d.a), cp.asarray(d.b), self.nan(ks.N_VEC)
            fn((cdiv(ks.N_VEC, 256),), (256,), (a, b, c, i32(ks.N_VEC)))
        elif family == "reduce_sum":
            x, part, c = cp.asarray(d.pos), self.nan(1024), self.nan(1)
            fn((1024,), (256,), (x, part, i32(ks.N_VEC)))
            fn((1,), (256,), (part, c, i32(1024)))
        elif family == "softmax":
            x, c = cp.asarray(d.x), self.nan((ks.ROWS, ks.COLS))
            fn((ks.ROWS,), (256,), (x, c, i32(ks.COLS)))
        elif family == "layer_norm":
            x, w, b, c = cp.asarray(d.lx), cp.asarray(d.w), cp.asarray(d.bias), self.nan((ks.ROWS, ks.COLS))
            fn((ks.ROWS,), (256,), (x, w, b, c, i32(ks.COLS), f32(ks.LN_EPS)))
        elif family == "matmul":
            A, B, c = cp.asarray(d.A), cp.asarray(d.B), self.nan((ks.MM_M, ks.MM_N))
            fn((cdiv(ks.MM_N, 16), cdiv(ks.MM_M, 16)), (16, 16), (A, B, c, i32(ks.MM_M), i32(ks.MM_N), i32(ks.MM_K)))
        else:
            raise KeyError(family)
        cp.cuda.runtime.deviceSynchronize()
        return cp.asnumpy(c)


def run_triton_cupy(cl: CupyLauncher, kid: str, fn, meta: dict, d: Data) -> np.ndarray:
    """A Triton cubin launched by hand: the non-constexpr arguments, then the two hidden
    pointers Triton 3.6 appends (global and profile scratch; null when their size is 0), with
    num_warps * 32 threads and the metadata's shared memory."""
    cp, i32, f32, null = cl.cp, np.int32, np.float32, np.uint64(0)
    assert meta.get("global_scratch_size", 0) == 0 and meta.get("profile_scratch_size", 0) == 0, "needs scratch memory"
    block, shared = (32 * meta["num_warps"],), meta["shared"]

    def launch(grid, *args):
        fn(grid, block, args + (null, null), shared_mem=shared)

    if kid == "add":
        x, y, out = cp.asarray(d.a), cp.asarray(d.b), cl.nan(ks.N_VEC)
        launch((cdiv(ks.N_VEC, 1024),), x, y, out, i32(ks.N_VEC))
    elif kid == "sum":
        cur, n = cp.asarray(d.pos), ks.N_VEC
        while True:
            nxt = cl.nan(cdiv(n, 1024))
            launch((cdiv(n, 1024),), cur, nxt, i32(n))
            cur, n = nxt, cdiv(n, 1024)
            if n == 1:
                break
        out = cur
    elif kid == "softmax":
        x, out = cp.asarray(d.x), cl.nan((ks.ROWS, ks.COLS))
        launch((ks.ROWS,), out, x, i32(ks.COLS), i32(ks.COLS))
    elif kid == "layer_norm":
        x, w, b, out = cp.asarray(d.lx), cp.asarray(d.w), cp.asarray(d.bias), cl.nan((ks.ROWS, ks.COLS))
        launch((ks.ROWS,), x, out, w, b, i32(ks.COLS), i32(ks.COLS), f32(ks.LN_EPS))
    elif kid == "matmul":
        a, b, out = cp.asarray(d.A16), cp.asarray(d.B16), cl.nan((ks.TMM_M, ks.TMM_N))
        launch((ks.TMM_M // 64, ks.TMM_N // 64), a, b, out, i32(ks.TMM_M), i32(ks.TMM_N), i32(ks.TMM_K))
    else:
        raise KeyError(kid)
    cp.cuda.runtime.deviceSynchronize()
    return cp.asnumpy(out)


def load_triton_module(work: Path):
    """The Triton kernels' module, from a file (Triton's JIT reads its functions' source)."""
    path = work / "kiln_gpu_triton_kernels.py"
    path.write_text(ks.TRITON_MODULE)
    spec = importlib.util.spec_from_file_location("kiln_gpu_triton_kernels", path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


def compiled_kernel(module, kid: str, result, work: Path):
    """A ``triton.compiler.CompiledKernel`` from kilnd's metadata JSON and cubin."""
    from triton.compiler.compiler import ASTSource, CompiledKernel

    name, sig, consts, ptr_args, _ = ks.TRITON[kid]
    fn = getattr(module, name)
    attrs = {(i,): [["tt.divisibility", 16]] for i in ptr_args}
    src = ASTSource(fn, dict(sig), constexprs=dict(consts), attrs=attrs)
    meta = json.loads(result.metadata_json)
    d = work / "triton" / result.key
    d.mkdir(parents=True, exist_ok=True)
    kname = meta["name"]
    (d / f"{kname}.json").write_text(result.metadata_json)
    (d / f"{kname}.cubin").write_bytes(result.artifact)
    group = {f"{kname}.json": str(d / f"{kname}.json"), f"{kname}.cubin": str(d / f"{kname}.cubin")}
    return CompiledKernel(src, group, result.key), src, meta


#: Where run_triton puts its tensors; launch_selftest.py sets "cpu" for its stand-in kernels.
TRITON_DEVICE = "cuda"


def run_triton(kid: str, kernel, d: Data) -> np.ndarray:
    import torch

    dev = TRITON_DEVICE

    def t(a: np.ndarray):
        return torch.from_numpy(np.ascontiguousarray(a)).to(dev)

    def nan(*shape):
        return torch.full(shape, float("nan"), dtype=torch.float32, device=dev)

    if kid == "add":
        x, y, out = t(d.a), t(d.b), nan(ks.N_VEC)
        kernel[(cdiv(ks.N_VEC, 1024), 1, 1)](x, y, out, ks.N_VEC, 1024)
    elif kid == "sum":
        cur, n = t(d.pos), ks.N_VEC
        while True:
            nxt = nan(cdiv(n, 1024))
            kernel[(cdiv(n, 1024), 1, 1)](cur, nxt, n, 1024)
            cur, n = nxt, cdiv(n, 1024)
            if n == 1:
                break
        out = cur
    elif kid == "softmax":
        x, out = t(d.x), nan(ks.ROWS, ks.COLS)
        kernel[(ks.ROWS, 1, 1)](out, x, ks.COLS, ks.COLS, 1024)
    elif kid == "layer_norm":
        x, w, b, out = t(d.lx), t(d.w), t(d.bias), nan(ks.ROWS, ks.COLS)
        kernel[(ks.ROWS, 1, 1)](x, out, w, b, ks.COLS, ks.COLS, ks.LN_EPS, 1024)
    elif kid == "matmul":
        a, b, out = t(d.A16), t(d.B16), nan(ks.TMM_M, ks.TMM_N)
        kernel[(ks.TMM_M // 64, ks.TMM_N // 64, 1)](a, b, out, ks.TMM_M, ks.TMM_N, ks.TMM_K, 64, 64, 32)
    else:
        raise KeyError(kid)
    if dev == "cuda":
        torch.cuda.synchronize()
    return out.cpu().numpy()
