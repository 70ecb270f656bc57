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
- kilnd's GPU validation: per-kernel attributes and a validation note, as kiln.Client returns
  them.

``--cpu-dry-run`` does everything but the launches (no GPU, no CuPy, no torch): it compiles,
fetches, checks tiers and bytes, builds the Triton CompiledKernels and their launcher source,
and checks the references against float32 NumPy emulations of each kernel.
"""

from __future__ import annotations

import argparse
import dataclasses
import hashlib
import json
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
from launching import (  # noqa: E402
    TOL,
    CupyLauncher,
    Data,
    compiled_kernel,
    load_triton_module,
    passes,
    rel_err,
    run_triton,
    run_triton_cupy,
    tol_for,
)

import kiln  # noqa: E402
from kiln import Graph, Tier, cuda_kernel, ptx_kernel, triton_kernel  # noqa: E402

TARGET = "sm_90"
WRONG_TARGET = "sm_80"

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


# -- kilnd's validation: attributes and note of each kernel --


def validation_results(client: kiln.Client, graph: Graph) -> dict[str, tuple[list[dict], str]]:
    """Lookup (caches only): each kernel's attributes (as dicts) and validation note."""
    result = client.lookup(graph, omit_artifacts=True, timeout=120)
    return {k.id: ([dataclasses.asdict(a) for a in k.attributes], k.validation) for k in result.kernels}


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
        raw = validation_results(a, graph)
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
        rawv = validation_results(a, wrong_graph)
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


def triton_error(d: Data, family: str, out) -> tuple[float, float]:
    """A Triton launch's relative error against the float64 reference, and its tolerance: the
    Triton matmuls take fp16 inputs, so theirs are measured and bounded as fp16."""
    fp16 = family == "matmul"
    return rel_err(out, d.ref(family, fp16)), tol_for(family, fp16)


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
    triton_results = [(k, spec[k.id]["family"]) for k in res_b.kernels if spec[k.id]["toolchain"] == "triton"]
    if module is not None:
        for k, family in triton_results:
            with checks.guard(f"launch {k.id}"):
                ck, _, meta = compiled_kernel(module, family, k, args.work)
                err, tol = triton_error(d, family, run_triton(family, ck, d))
                launches[k.id] = {"entry": ck.name, "rel_err": err, "tol": tol, "n_regs": getattr(ck, "n_regs", None),
                                  "global_scratch_size": meta.get("global_scratch_size"), "profile_scratch_size": meta.get("profile_scratch_size")}
                checks.record(f"launch {k.id} (CompiledKernel {ck.name}) matches float64", passes(err, tol), f"rel err {err:.2e} < {tol:.0e}, regs {getattr(ck, 'n_regs', '?')}")
    # The same Triton cubins by hand through CuPy, hidden scratch pointers included: a second
    # launcher for B's bytes, independent of Triton's (which needs a C compiler and Python.h).
    if cl is not None:
        for k, family in triton_results:
            with checks.guard(f"launch {k.id} through CuPy"):
                meta = json.loads(k.metadata_json)
                out = run_triton_cupy(cl, family, cl.function(f"{k.id}_cupy", k.artifact, meta["name"]), meta, d)
                err, tol = triton_error(d, family, out)
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
