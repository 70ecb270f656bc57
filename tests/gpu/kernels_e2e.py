"""End to end on a GPU: compile CUDA C++, PTX and Triton kernels through kilnd host A, fetch them
warm through host B (an empty cache directory, so every kernel must come from the fleet), then
launch every kernel from B's bytes on random data and compare with a float64 NumPy reference.

- CUDA and PTX cubins are launched with CuPy (RawModule on the cubin file), by the lowered names
  kilnd returned for name expressions, or the extern "C" / PTX entry names.
- Triton cubins are launched through Triton's own machinery: a ``CompiledKernel`` built from the
  metadata JSON and cubin kilnd returned (written as ``<name>.json`` and ``<name>.cubin``), so
  Triton's launcher passes the hidden global and profile scratch parameters of Triton 3.6.
- A cubin compiled for another capability (sm_80) must be refused cleanly by the driver, and
  the context must still work afterwards.
- kilnd's GPU validation: per-kernel attributes and a validation note (KernelResult fields 15
  and 16), read from the raw messages so this works with stubs older than those fields.

``--cpu-dry-run`` does everything but the launches (no GPU, no CuPy, no torch): it compiles,
fetches, checks tiers and bytes, builds the Triton CompiledKernels and their launcher source,
and checks the references against float32 NumPy emulations of each kernel.
"""

from __future__ import annotations

import argparse
import hashlib
import importlib.util
import json
import math
import os
import re
import subprocess
import sys
import time
import traceback
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))

import common  # noqa: E402
import kernel_sources as ks  # noqa: E402

import kiln  # noqa: E402
from kiln import Graph, Tier, cuda_kernel, ptx_kernel, triton_kernel  # noqa: E402

TARGET = "sm_90"
WRONG_TARGET = "sm_80"

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


# -- the graph --


def ptx_entries(ptx: str) -> list[str]:
    return re.findall(r"\.entry\s+([A-Za-z_$][\w$]*)\s*\(", ptx)


def nvcc_ptx(nvcc: str, work: Path) -> dict[str, str]:
    """PTX of each CUDA kernel from nvcc (templates instantiated); {} when nvcc fails."""
    out: dict[str, str] = {}
    d = work / "nvcc"
    d.mkdir(parents=True, exist_ok=True)
    for kid, (src, _, _, inst) in ks.CUDA.items():
        cu, ptx = d / f"{kid}.cu", d / f"{kid}.ptx"
        cu.write_text(src + inst)
        r = subprocess.run([nvcc, "-ptx", f"-arch={TARGET}", "-o", str(ptx), str(cu)], capture_output=True, text=True, timeout=120)
        if r.returncode != 0:
            print(f"warning: nvcc -ptx {kid} failed ({r.returncode}): {r.stderr[-2000:]}", flush=True)
            return {}
        out[kid] = ptx.read_text()
    return out


def build_kernels(example_ptx: Path, nvcc: str, work: Path) -> tuple[list, dict[str, dict]]:
    """The kernels, and per kernel id what a launch needs to know."""
    kernels, spec = [], {}
    for kid, (src, exprs, entry, _) in ks.CUDA.items():
        k = f"cuda_{kid}"
        kernels.append(cuda_kernel(k, src, name_expressions=exprs))
        spec[k] = {"toolchain": "nvrtc", "family": kid, "entry": entry, "expr": exprs[0] if exprs else ""}
    ptx = example_ptx.read_text()
    kernels.append(ptx_kernel("ptx_vector_add_example", ptx))
    spec["ptx_vector_add_example"] = {"toolchain": "ptxas", "family": "vector_add", "entry": ptx_entries(ptx)[0], "expr": ""}
    if nvcc:
        for kid, text in nvcc_ptx(nvcc, work).items():
            k = f"ptx_{kid}"
            kernels.append(ptx_kernel(k, text, options=["-O3"]))
            spec[k] = {"toolchain": "ptxas", "family": kid, "entry": ptx_entries(text)[0], "expr": ""}
    for kid, (name, sig, consts, ptr_args, warps) in ks.TRITON.items():
        k = f"triton_{kid}"
        kernels.append(
            triton_kernel(
                k,
                ks.TRITON_MODULE,
                name,
                sig,
                consts,
                attributes=[(i, "tt.divisibility", 16) for i in ptr_args],
                num_warps=warps,
            )
        )
        spec[k] = {"toolchain": "triton", "family": kid, "entry": name, "expr": ""}
    return kernels, spec


# -- KernelResult fields 15 (attributes) and 16 (validation), from the wire --


def _varint(b: bytes, i: int) -> tuple[int, int]:
    shift = result = 0
    while True:
        byte = b[i]
        i += 1
        result |= (byte & 0x7F) << shift
        if not byte & 0x80:
            return result, i
        shift += 7


def _fields(b: bytes):
    i = 0
    while i < len(b):
        key, i = _varint(b, i)
        num, wt = key >> 3, key & 7
        if wt == 0:
            v, i = _varint(b, i)
        elif wt == 2:
            n, i = _varint(b, i)
            v, i = b[i : i + n], i + n
        elif wt == 1:
            v, i = b[i : i + 8], i + 8
        elif wt == 5:
            v, i = b[i : i + 4], i + 4
        else:
            raise ValueError(f"wire type {wt}")
        yield num, wt, v


ATTR_NAMES = {2: "registers", 3: "static_shared_bytes", 4: "max_threads_per_block", 5: "local_bytes", 6: "const_bytes"}


def decode_validation(raw: bytes) -> tuple[list[dict], str]:
    attrs, validation = [], ""
    for num, wt, v in _fields(raw):
        if num == 15 and wt == 2:
            a: dict = {"name": ""}
            for n2, w2, v2 in _fields(v):
                if n2 == 1 and w2 == 2:
                    a["name"] = v2.decode(errors="replace")
                elif n2 in ATTR_NAMES and w2 == 0:
                    a[ATTR_NAMES[n2]] = v2
            for name in ATTR_NAMES.values():
                a.setdefault(name, 0)
            attrs.append(a)
        elif num == 16 and wt == 2:
            validation = v.decode(errors="replace")
    return attrs, validation


def raw_results(client: kiln.Client, graph: Graph) -> dict[str, tuple[list[dict], str]]:
    """Lookup through the raw stub: each kernel's attributes and validation note."""
    from kiln._proto import kiln_pb2 as pb
    from kiln._proto import kiln_pb2_grpc

    stub = kiln_pb2_grpc.CompilerStub(client._channel)
    request = pb.CompileRequest(graph=graph.to_proto(), omit_artifacts=True)
    out = {}
    for ev in stub.Lookup(request, timeout=120):
        if ev.WhichOneof("event") == "kernel":
            out[ev.kernel.id] = decode_validation(ev.kernel.SerializeToString())
    return out


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


# -- the run --


def main() -> int:
    p = argparse.ArgumentParser()
    p.add_argument("--host-a", required=True)
    p.add_argument("--host-b", required=True)
    p.add_argument("--metrics-a", type=int, required=True)
    p.add_argument("--metrics-b", type=int, required=True)
    p.add_argument("--work", type=Path, required=True)
    p.add_argument("--out", type=Path, required=True)
    p.add_argument("--example-ptx", type=Path, required=True)
    p.add_argument("--nvcc", default="")
    p.add_argument("--cpu-dry-run", action="store_true")
    args = p.parse_args()
    gpu = not args.cpu_dry_run
    args.work.mkdir(parents=True, exist_ok=True)
    checks = common.Checks("kernels end to end" + ("" if gpu else " (CPU DRY RUN: no launches)"))
    report: dict = {"mode": "gpu" if gpu else "cpu-dry-run", "kernels": {}}
    if not gpu:
        print("\n" + "!" * 78 + "\n!! CPU DRY RUN: compiles and fetches only; NO kernel is launched, no GPU is used\n" + "!" * 78 + "\n", flush=True)

    kernels, spec = build_kernels(args.example_ptx, args.nvcc, args.work)
    if args.nvcc and not any(k.startswith("ptx_") and k != "ptx_vector_add_example" for k in spec):
        checks.info("nvcc PTX", f"{args.nvcc} gave no PTX; only the example's vector_add.ptx is tested as PTX")
    elif not args.nvcc:
        checks.info("nvcc PTX", "no nvcc; only the example's vector_add.ptx is tested as PTX")
    graph = Graph(kernels=kernels, target=TARGET, name="gpu-e2e")
    print(f"graph: {len(kernels)} kernels: {', '.join(spec)}", flush=True)
    a, b = kiln.Client(args.host_a, timeout=120), kiln.Client(args.host_b, timeout=120)

    # 1. Host A compiles everything.
    res_a = None
    with checks.guard("host A compiles every kernel"):
        t0 = time.perf_counter()
        res_a = a.compile(graph, timeout=900)
        wall = time.perf_counter() - t0
        bad = [f"{k.id}: {k.outcome} {k.log[-1500:]}" for k in res_a.kernels if not k.ok]
        checks.record("host A compiles every kernel", res_a.all_ok and len(res_a.kernels) == len(kernels) and not bad,
                      f"{len(res_a.kernels)} kernels in {wall:.2f} s, tiers {sorted({str(k.tier) for k in res_a.kernels})}" + ("; " + " | ".join(bad) if bad else ""))
        report["host_a_wall_s"] = wall
        for k in res_a.kernels:
            report["kernels"][k.id] = {
                "toolchain": k.toolchain, "target": k.target, "tier_a": str(k.tier), "bytes": k.artifact_bytes,
                "compile_ms": k.compile_micros / 1000, "sha256": hashlib.sha256(k.artifact).hexdigest(),
                "lowered_names": k.lowered_names,
            }

    # 2. Stats: the GPU and its target.
    with checks.guard("stats lists the GPU"):
        st = a.stats()
        gpus = [(g.index, g.name, g.target) for g in st.gpus]
        report["stats"] = {"gpus": gpus, "default_target": st.default_target, "toolchains": [(t.name, t.version) for t in st.toolchains]}
        if gpu:
            ok = any("H100" in name and target == "sm_90" for _, name, target in gpus)
            checks.record("stats lists the H100 with target sm_90", ok, f"gpus={gpus} default_target={st.default_target!r}")
            checks.record("default target is the local GPU's", st.default_target == "sm_90", repr(st.default_target))
        else:
            checks.info("stats (no GPU here)", f"gpus={gpus} default_target={st.default_target!r}")

    # 3. Host B, empty directory: every kernel from the fleet, byte for byte.
    res_b = None
    with checks.guard("host B fetches every kernel from the fleet"):
        before = common.metric_sum(common.http_get(args.metrics_b), "kiln_cache_lookups_total", tier="remote", result="hit")
        t0 = time.perf_counter()
        res_b = b.compile(graph, timeout=300)
        wall = time.perf_counter() - t0
        report["host_b_wall_s"] = wall
        tiers = {k.id: k.tier for k in res_b.kernels}
        not_remote = {k: str(t) for k, t in tiers.items() if t != Tier.REMOTE}
        checks.record("host B: every kernel ok", res_b.all_ok and len(res_b.kernels) == len(kernels))
        checks.record("host B: every kernel's tier is remote", not not_remote and len(tiers) == len(kernels),
                      f"{len(tiers)} kernels in {wall * 1000:.0f} ms" + (f"; not remote: {not_remote}" if not_remote else ""))
        if res_a is not None:
            da = {k.id: k for k in res_a.kernels}
            diff = [k.id for k in res_b.kernels if k.id not in da or k.artifact != da[k.id].artifact or k.key != da[k.id].key]
            checks.record("host B's bytes and keys are host A's", not diff, f"differ: {diff}" if diff else "")
            lowered = [k.id for k in res_b.kernels if k.id in da and k.lowered_names != da[k.id].lowered_names]
            checks.record("host B returns the lowered names", not lowered and all(
                res_b[k].lowered_names.get(s["expr"]) for k, s in spec.items() if s["expr"]), f"differ: {lowered}" if lowered else "")
        text = common.http_get(args.metrics_b)
        (args.work / "metrics-B-after-fetch.txt").write_text(text)
        after = common.metric_sum(text, "kiln_cache_lookups_total", tier="remote", result="hit")
        read = common.metric_sum(text, "kiln_artifact_bytes_total", tier="remote", direction="read")
        checks.record("host B's metrics count the remote hits", after - before >= len(kernels),
                      f"kiln_cache_lookups_total{{tier=remote,result=hit}} +{after - before:.0f} for {len(kernels)} kernels; "
                      f"kiln_artifact_bytes_total{{tier=remote,direction=read}} {read:.0f}")
        for k in res_b.kernels:
            report["kernels"].setdefault(k.id, {})["tier_b"] = str(k.tier)
        # The names a launch will ask the cubin for are in it (CuPy's get_function, Triton's load).
        missing = {}
        for k in res_b.kernels:
            s = spec[k.id]
            name = k.lowered_names.get(s["expr"], "") if s["expr"] else s["entry"]
            if s["toolchain"] == "triton":
                name = json.loads(k.metadata_json or "{}").get("name", "")
            report["kernels"][k.id]["entry"] = name
            if not name or (name.encode() + b"\0") not in k.artifact:
                missing[k.id] = name
        checks.record("every entry name a launch uses is in its cubin", not missing, f"missing: {missing}" if missing else "")

    # 4. Validation on host A: attributes for sm_90 kernels (GPU), the note everywhere.
    with checks.guard("kilnd's validation metadata"):
        raw = raw_results(a, graph)
        report["validation"] = {k: {"attributes": v[0], "validation": v[1]} for k, v in raw.items()}
        for kid in spec:
            attrs, note = raw.get(kid, ([], ""))
            print(f"  validation {kid:28} {note!r} " + "; ".join(
                f"{x['name']}: regs={x['registers']} smem={x['static_shared_bytes']} maxthr={x['max_threads_per_block']} local={x['local_bytes']}" for x in attrs), flush=True)
        if gpu:
            bad = [k for k in spec if not (raw.get(k, ([], ""))[1].lower().startswith("loaded")
                                          and raw[k][0] and all(x["registers"] > 0 and x["max_threads_per_block"] > 0 for x in raw[k][0]))]
            checks.record("sm_90 kernels on host A: validated on the GPU, attributes with registers > 0", not bad, f"failing: {bad}" if bad else "")
        else:
            checks.info("validation notes (no GPU here)", repr(sorted({v[1] for v in raw.values()})))

    # 5. The wrong capability: compiled fine, not validated, refused by the driver.
    wrong = None
    wrong_graph = Graph(kernels=[k for k in kernels if k.id in ("cuda_vector_add", "triton_add")], target=WRONG_TARGET, name="gpu-e2e-wrong")
    with checks.guard(f"{WRONG_TARGET} compiles"):
        wrong = a.compile(wrong_graph, timeout=600)
        checks.record(f"{WRONG_TARGET} kernels compile (cross-target)", wrong.all_ok, ", ".join(f"{k.id}:{k.outcome}" for k in wrong.kernels))
        rawv = raw_results(a, wrong_graph)
        notes = {k: v[1] for k, v in rawv.items()}
        report["wrong_target"] = {"validation": notes, "attributes": {k: v[0] for k, v in rawv.items()}}
        print(f"  {WRONG_TARGET} validation notes: {notes}", flush=True)
        if gpu:
            ok = all(n and not n.lower().startswith("loaded") for n in notes.values()) and not any(v[0] for v in rawv.values())
            checks.record(f"{WRONG_TARGET}: validation says skipped, no attributes", ok, repr(notes))

    d = Data(int.from_bytes(os.urandom(4), "little"))
    report["seed"] = d.seed
    print(f"random inputs: seed {d.seed}", flush=True)

    if not gpu:
        # The references against float32 emulations: the tolerances are met by honest fp32 work.
        for k, s in spec.items():
            fam, fp16 = s["family"], s["toolchain"] == "triton" and s["family"] == "matmul"
            err = rel_err(d.emulate32(fam, fp16), d.ref(fam, fp16))
            checks.record(f"dry run: fp32 emulation of {k} meets its tolerance", passes(err, tol_for(fam, fp16)), f"rel err {err:.2e} < {tol_for(fam, fp16):.0e}")
        bad_nan = rel_err(np.full(3, np.nan), np.ones(3))
        checks.record("dry run: NaN output never passes", not passes(bad_nan, 1.0))
        # Triton: CompiledKernel from host B's metadata and cubin, and its launcher's source.
        if res_b is not None:
            module = load_triton_module(args.work)
            from triton.backends.nvidia.driver import make_launcher

            for k in res_b.kernels:
                if spec[k.id]["toolchain"] != "triton":
                    continue
                with checks.guard(f"dry run: CompiledKernel for {k.id}"):
                    ck, src, meta = compiled_kernel(module, spec[k.id]["family"], k, args.work)
                    ok = ck.kernel == k.artifact and ck.name == meta["name"] and ck.metadata.target.arch == 90
                    # What CudaLauncher does first (ASTSource already keys constants by index).
                    launcher_src = make_launcher(dict(src.constants), dict(src.signature), getattr(ck.metadata, "tensordesc_meta", None))
                    ok = ok and "global_scratch" in launcher_src and "profile_scratch" in launcher_src
                    checks.record(f"dry run: CompiledKernel for {k.id}", ok,
                                  f"name={ck.name} packed={ck.packed_metadata} scratch={meta.get('global_scratch_size')}/{meta.get('profile_scratch_size')}")
        checks.skip("launches", "CPU DRY RUN: no GPU here; every launch, the wrong-capability load and CuPy/torch are skipped")
    else:
        launch(args, checks, report, spec, res_b, wrong, d)

    report["checks"] = checks.to_json()
    common.write_json(args.out / "e2e.json", report)
    print("\n" + checks.summary(), flush=True)
    return 1 if checks.failed else 0


def launch(args, checks: common.Checks, report: dict, spec: dict, res_b, wrong, d: Data) -> None:
    if res_b is None:
        checks.record("launches", False, "host B's results are missing")
        return
    cl = None
    with checks.guard("CuPy starts"):
        cl = CupyLauncher(args.work)
        import cupy

        dev = cupy.cuda.Device(0)
        props = cupy.cuda.runtime.getDeviceProperties(0)
        report["device"] = {"name": props["name"].decode() if isinstance(props["name"], bytes) else props["name"],
                            "cc": dev.compute_capability, "cupy": cupy.__version__}
        checks.info("device", str(report["device"]))
    launches = report.setdefault("launches", {})
    if cl is not None:
        for k in res_b.kernels:
            s = spec[k.id]
            if s["toolchain"] == "triton":
                continue
            name = k.lowered_names.get(s["expr"]) if s["expr"] else s["entry"]
            with checks.guard(f"launch {k.id}"):
                fn = cl.function(k.id, k.artifact, name)
                out = cl.run(s["family"], fn, d)
                err = rel_err(out, d.ref(s["family"]))
                tol = tol_for(s["family"])
                launches[k.id] = {"entry": name, "rel_err": err, "tol": tol}
                checks.record(f"launch {k.id} ({name}) matches float64", passes(err, tol), f"rel err {err:.2e} < {tol:.0e}")
    # Triton, through CompiledKernel.
    module = None
    with checks.guard("Triton kernels module"):
        import torch
        import triton

        module = load_triton_module(args.work)
        triton.set_allocator(lambda size, align, stream: torch.empty(size, dtype=torch.int8, device="cuda"))
        report["versions"] = {"torch": torch.__version__, "triton": triton.__version__}
    if module is not None:
        for k in res_b.kernels:
            s = spec[k.id]
            if s["toolchain"] != "triton":
                continue
            with checks.guard(f"launch {k.id}"):
                ck, _, meta = compiled_kernel(module, s["family"], k, args.work)
                out = run_triton(s["family"], ck, d)
                fp16 = s["family"] == "matmul"
                err = rel_err(out, d.ref(s["family"], fp16))
                tol = tol_for(s["family"], fp16)
                launches[k.id] = {"entry": ck.name, "rel_err": err, "tol": tol, "n_regs": getattr(ck, "n_regs", None),
                                  "global_scratch_size": meta.get("global_scratch_size"), "profile_scratch_size": meta.get("profile_scratch_size")}
                checks.record(f"launch {k.id} (CompiledKernel {ck.name}) matches float64", passes(err, tol), f"rel err {err:.2e} < {tol:.0e}, regs {getattr(ck, 'n_regs', '?')}")
    # The same Triton cubins by hand through CuPy, hidden scratch pointers included: a second
    # launcher for B's bytes, independent of Triton's (which needs a C compiler and Python.h).
    if cl is not None:
        for k in res_b.kernels:
            s = spec[k.id]
            if s["toolchain"] != "triton":
                continue
            with checks.guard(f"launch {k.id} through CuPy"):
                meta = json.loads(k.metadata_json)
                out = run_triton_cupy(cl, s["family"], cl.function(f"{k.id}_cupy", k.artifact, meta["name"]), meta, d)
                fp16 = s["family"] == "matmul"
                err = rel_err(out, d.ref(s["family"], fp16))
                tol = tol_for(s["family"], fp16)
                launches[f"{k.id}_cupy"] = {"entry": meta["name"], "rel_err": err, "tol": tol}
                checks.record(f"launch {k.id} through CuPy (+2 scratch pointers) matches float64", passes(err, tol), f"rel err {err:.2e} < {tol:.0e}")
    # The wrong capability: a clean driver error, and the context still works.
    if cl is not None and wrong is not None:
        import cupy

        refused = {}
        for k in wrong.kernels:
            if not k.ok:
                continue
            name = "vector_add" if k.id == "cuda_vector_add" else json.loads(k.metadata_json or "{}").get("name", "add_kernel")
            try:
                cl.function(f"wrong_{k.id}", k.artifact, name)
                refused[k.id] = "LOADED (not refused)"
            except cupy.cuda.driver.CUDADriverError as e:
                refused[k.id] = f"CUDADriverError: {e}"
            except Exception as e:  # noqa: BLE001
                refused[k.id] = f"{type(e).__name__}: {e}"
        report["wrong_target_load"] = refused
        ok = bool(refused) and all(v.startswith("CUDADriverError") for v in refused.values())
        checks.record(f"{WRONG_TARGET} cubins are refused by the driver with a CUDA error", ok, repr(refused))
        with checks.guard("the context works after the refusal"):
            k = res_b["cuda_vector_add"]
            out = cl.run("vector_add", cl.function("after_refusal", k.artifact, "vector_add"), d)
            err = rel_err(out, d.ref("vector_add"))
            checks.record("the context works after the refusal", passes(err, TOL["add"]), f"rel err {err:.2e}")


if __name__ == "__main__":
    try:
        sys.exit(main())
    except Exception:
        traceback.print_exc()
        sys.exit(1)
