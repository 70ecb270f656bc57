"""Dry-run self-test of the launch code of kernels_e2e.py (launching.py), with no GPU.

The launch paths only run on the GPU machine, where a mistake (arguments in the wrong order, a
wrong grid, an int where the kernel takes an int32) costs a whole run. Here CuPy and Triton's
CompiledKernel are replaced by stand-ins that compute each kernel's semantics in NumPy (and
torch on the CPU, for Triton) from exactly the grid, block and arguments the launch code passes,
and check the argument types a real launch needs. The results must then match the float64
references within the same tolerances as on the GPU, and a wrong result must fail them.

Usage: launch_selftest.py   (exit 1 on a failure; the Triton half needs torch, and fails without it)
"""

from __future__ import annotations

import sys
import types
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))

import common  # noqa: E402
import kernel_sources as ks  # noqa: E402
import launching as e2e  # noqa: E402

F32, I32 = np.float32, np.int32


def _dev_f32(a) -> np.ndarray:
    assert isinstance(a, np.ndarray) and a.dtype == F32 and a.flags.c_contiguous, f"not a float32 device array: {type(a)} {getattr(a, 'dtype', '')}"
    return a.ravel()


def _scalar(v, t):
    assert type(v) is t, f"scalar {v!r} is {type(v).__name__}, the kernel takes {t.__name__}"
    return v.item()


class FakeFunction:
    """One CUDA entry point, emulated from its launch configuration and arguments."""

    def __init__(self, name: str) -> None:
        self.name = name

    def __call__(self, grid, block, args, shared_mem=0):
        gx = grid[0]
        gy = grid[1] if len(grid) > 1 else 1
        bx = block[0]
        by = block[1] if len(block) > 1 else 1
        n = self.name
        if n == "vector_add":
            a, b, c, cnt = _dev_f32(args[0]), _dev_f32(args[1]), _dev_f32(args[2]), _scalar(args[3], I32)
            m = min(cnt, gx * bx)
            c[:m] = a[:m] + b[:m]
        elif n.startswith("_Z10reduce_sum"):
            x, out, cnt = _dev_f32(args[0]), _dev_f32(args[1]), _scalar(args[2], I32)
            assert bx == 256, "reduce_sum<256> needs 256 threads"
            idx = np.arange(cnt)
            for j in range(gx):
                out[j] = x[idx[(idx // 256) % gx == j]].sum(dtype=F32)
        elif n == "softmax_rows":
            x, y, cols = _dev_f32(args[0]), _dev_f32(args[1]), _scalar(args[2], I32)
            assert bx == 256
            xr = x[: gx * cols].reshape(gx, cols)
            e = np.exp(xr - xr.max(axis=1, keepdims=True))
            y[: gx * cols] = (e / e.sum(axis=1, keepdims=True)).ravel()
        elif n == "layer_norm":
            x, w, b, y = (_dev_f32(a) for a in args[:4])
            cols, eps = _scalar(args[4], I32), _scalar(args[5], F32)
            assert bx == 256
            xr = x[: gx * cols].reshape(gx, cols)
            mean = xr.mean(axis=1, keepdims=True)
            var = ((xr - mean) ** 2).mean(axis=1, keepdims=True)
            y[: gx * cols] = ((xr - mean) / np.sqrt(var + eps) * w[:cols] + b[:cols]).ravel()
        elif n.startswith("_Z12matmul_tiled"):
            A, B, C = (_dev_f32(a) for a in args[:3])
            M, N, K = (_scalar(v, I32) for v in args[3:6])
            assert (bx, by) == (16, 16) and gx * 16 >= N and gy * 16 >= M, f"grid {grid} block {block} does not cover {M}x{N}"
            C[: M * N] = (A[: M * K].reshape(M, K) @ B[: K * N].reshape(K, N)).ravel()
        elif n in TRITON_NAMES:
            kid = TRITON_NAMES[n]
            *args, g_scratch, p_scratch = args
            assert type(g_scratch) is np.uint64 and type(p_scratch) is np.uint64 and g_scratch == 0 == p_scratch, "the two hidden scratch pointers"
            _, sig, consts, _, warps = ks.TRITON[kid]
            params = [(p, t) for p, t in sig if t != "constexpr"]
            assert len(args) == len(params), f"{kid}: {len(args)} arguments for {len(params)} parameters"
            assert bx == 32 * warps, f"{kid}: {bx} threads for {warps} warps"
            v = {}
            for (pname, ptype), a in zip(params, args):
                if ptype.startswith("*"):
                    want = np.float16 if ptype == "*fp16" else F32
                    assert isinstance(a, np.ndarray) and a.dtype == want, f"{pname}: {getattr(a, 'dtype', type(a))}"
                    v[pname] = a.ravel()
                else:
                    v[pname] = _scalar(a, I32 if ptype == "i32" else F32)
            v.update(consts)
            _emulate_triton(kid, v, (gx, gy))
        else:
            raise AssertionError(f"unknown entry {n}")


TRITON_NAMES = {name: kid for kid, (name, *_rest) in ks.TRITON.items()}


def _emulate_triton(kid: str, v: dict, grid) -> None:
    """A Triton kernel's effect on NumPy arrays (flat), given its arguments by name."""
    g0, g1 = grid
    if kid == "add":
        m = min(v["n"], g0 * v["BLOCK"])
        v["out_ptr"][:m] = v["x_ptr"][:m] + v["y_ptr"][:m]
    elif kid == "sum":
        B, n = v["BLOCK"], v["n"]
        for pid in range(g0):
            v["out_ptr"][pid] = v["x_ptr"][pid * B : min((pid + 1) * B, n)].sum(dtype=F32)
    elif kid == "softmax":
        cols, stride = v["n_cols"], v["row_stride"]
        x = v["in_ptr"][: g0 * stride].reshape(g0, stride)[:, :cols]
        e = np.exp(x - x.max(axis=1, keepdims=True))
        v["out_ptr"][: g0 * stride].reshape(g0, stride)[:, :cols] = e / e.sum(axis=1, keepdims=True)
    elif kid == "layer_norm":
        cols, stride = v["n_cols"], v["stride"]
        x = v["x_ptr"][: g0 * stride].reshape(g0, stride)[:, :cols]
        mean = x.mean(axis=1, keepdims=True)
        var = ((x - mean) ** 2).mean(axis=1, keepdims=True)
        v["y_ptr"][: g0 * stride].reshape(g0, stride)[:, :cols] = (x - mean) / np.sqrt(var + v["eps"]) * v["w_ptr"][:cols] + v["b_ptr"][:cols]
    elif kid == "matmul":
        M, N, K = v["M"], v["N"], v["K"]
        assert g0 * v["BM"] == M and g1 * v["BN"] == N, f"grid {grid} does not tile {M}x{N}"
        a = v["a_ptr"][: M * K].reshape(M, K).astype(F32)
        b = v["b_ptr"][: K * N].reshape(K, N).astype(F32)
        v["c_ptr"][: M * N] = (a @ b).ravel()
    else:
        raise AssertionError(kid)


def fake_cupy() -> types.ModuleType:
    cp = types.ModuleType("cupy")
    cp.full = lambda shape, value, dtype: np.full(shape, value, dtype=dtype)
    cp.asarray = lambda a: np.array(a, copy=True)
    cp.asnumpy = lambda a: np.array(a, copy=True)

    class RawModule:
        def __init__(self, path: str) -> None:
            assert Path(path).read_bytes(), "empty cubin file"

        def get_function(self, name: str) -> FakeFunction:
            return FakeFunction(name)

    cp.RawModule = RawModule
    cp.cuda = types.SimpleNamespace(runtime=types.SimpleNamespace(deviceSynchronize=lambda: None))
    cp.float16 = np.float16
    return cp


class FakeTriton:
    """A Triton kernel's ``kernel[grid](*args)``, emulated with torch on the CPU."""

    def __init__(self, kid: str) -> None:
        self.kid = kid
        name, sig, consts, _, _ = ks.TRITON[kid]
        self.sig = sig
        self.consts = consts

    def __getitem__(self, grid):
        import torch

        assert len(grid) == 3, "CompiledKernel runs grid[0], grid[1], grid[2]"

        def run(*args):
            assert len(args) == len(self.sig), f"{self.kid}: {len(args)} arguments for {len(self.sig)} parameters"
            for (pname, ptype), a in zip(self.sig, args):
                if ptype.startswith("*"):
                    want = torch.float16 if ptype == "*fp16" else torch.float32
                    assert isinstance(a, torch.Tensor) and a.dtype == want and a.is_contiguous(), f"{pname}: {a!r}"
                elif ptype == "i32":
                    assert type(a) is int, f"{pname}: {type(a).__name__}"
                elif ptype == "fp32":
                    assert type(a) is float, f"{pname}: {type(a).__name__}"
                elif ptype == "constexpr":
                    assert a == self.consts[pname], f"{pname}: {a} != {self.consts[pname]}"
            v = dict(zip((p for p, _ in self.sig), args))
            g0, g1 = grid[0], grid[1]
            if self.kid == "add":
                B = v["BLOCK"]
                m = min(v["n"], g0 * B)
                v["out_ptr"].view(-1)[:m] = v["x_ptr"].view(-1)[:m] + v["y_ptr"].view(-1)[:m]
            elif self.kid == "sum":
                B, x, n = v["BLOCK"], v["x_ptr"].view(-1), v["n"]
                for pid in range(g0):
                    v["out_ptr"].view(-1)[pid] = x[pid * B : min((pid + 1) * B, n)].sum()
            elif self.kid == "softmax":
                cols, stride = v["n_cols"], v["row_stride"]
                x = v["in_ptr"].view(-1)[: g0 * stride].view(g0, stride)[:, :cols]
                v["out_ptr"].view(-1)[: g0 * stride].view(g0, stride)[:, :cols] = torch.softmax(x, dim=1)
            elif self.kid == "layer_norm":
                cols, stride = v["n_cols"], v["stride"]
                x = v["x_ptr"].view(-1)[: g0 * stride].view(g0, stride)[:, :cols]
                y = torch.nn.functional.layer_norm(x, (cols,), v["w_ptr"][:cols], v["b_ptr"][:cols], v["eps"])
                v["y_ptr"].view(-1)[: g0 * stride].view(g0, stride)[:, :cols] = y
            elif self.kid == "matmul":
                M, N, K = v["M"], v["N"], v["K"]
                assert g0 * v["BM"] == M and g1 * v["BN"] == N, f"grid {grid} does not tile {M}x{N}"
                a = v["a_ptr"].view(-1)[: M * K].view(M, K).float()
                b = v["b_ptr"].view(-1)[: K * N].view(K, N).float()
                v["c_ptr"].view(-1)[: M * N] = (a @ b).view(-1)
            else:
                raise AssertionError(self.kid)

        return run


def main() -> int:
    checks = common.Checks("launch code self-test (stand-ins for CuPy and Triton, CPU)")
    work = Path(sys.argv[1]) if len(sys.argv) > 1 else Path("/tmp/kiln-launch-selftest")
    work.mkdir(parents=True, exist_ok=True)
    d = e2e.Data(12345)
    sys.modules["cupy"] = fake_cupy()
    cl = e2e.CupyLauncher(work)
    entries = {
        "vector_add": "vector_add",
        "reduce_sum": "_Z10reduce_sumILi256EEvPKfPfi",
        "softmax": "softmax_rows",
        "layer_norm": "layer_norm",
        "matmul": "_Z12matmul_tiledILi16EEvPKfS1_Pfiii",
    }
    for family, entry in entries.items():
        with checks.guard(f"CuPy path: {family}"):
            fn = cl.function(f"selftest_{family}", b"\x7fELF stand-in", entry)
            err = e2e.rel_err(cl.run(family, fn, d), d.ref(family))
            checks.record(f"CuPy path: {family} ({entry})", e2e.passes(err, e2e.tol_for(family)), f"rel err {err:.2e}")
    for kid, (name, *_rest) in ks.TRITON.items():
        with checks.guard(f"CuPy path for Triton cubins: {kid}"):
            meta = {"name": name, "num_warps": ks.TRITON[kid][4], "shared": 0, "global_scratch_size": 0, "profile_scratch_size": 0}
            fp16 = kid == "matmul"
            err = e2e.rel_err(e2e.run_triton_cupy(cl, kid, FakeFunction(name), meta, d), d.ref(kid, fp16))
            checks.record(f"CuPy path for Triton cubins: {kid} (+2 scratch pointers)", e2e.passes(err, e2e.tol_for(kid, fp16)), f"rel err {err:.2e}")
    with checks.guard("a wrong result fails the comparison"):
        err = e2e.rel_err(cl.run("softmax", FakeFunction("softmax_rows"), d), d.ref("layer_norm"))
        checks.record("a wrong result fails the comparison", not e2e.passes(err, e2e.tol_for("layer_norm")), f"rel err {err:.2e}")
    try:
        import torch  # noqa: F401
    except ImportError:
        checks.record("Triton path", False, "no torch in this interpreter: run it with the pinned torch (scripts/lib/setup.sh)")
    else:
        e2e.TRITON_DEVICE = "cpu"
        for kid in ks.TRITON:
            with checks.guard(f"Triton path: {kid}"):
                fp16 = kid == "matmul"
                err = e2e.rel_err(e2e.run_triton(kid, FakeTriton(kid), d), d.ref(kid, fp16))
                checks.record(f"Triton path: {kid}", e2e.passes(err, e2e.tol_for(kid, fp16)), f"rel err {err:.2e}")
    print("\n" + checks.summary(), flush=True)
    return 1 if checks.failed else 0


if __name__ == "__main__":
    sys.exit(main())
