"""Checks kiln's device move (kiln.torch._device) against torch itself, on a host with two GPUs.

Three fresh processes compile one small training step (layer norm, matmuls, GELU, softmax,
dropout, a tensor made in the graph) with torch.compile:

1. ``first``: on cuda:0, into Inductor cache A (what kilnd's worker leaves);
2. ``moved``: on cuda:1, on cache A, with kiln's move installed: every FX graph must hit (no
   Inductor compile), and its code is the cuda:0 code moved;
3. ``own``: on cuda:1, into an empty cache B, without kiln: torch's own code for cuda:1.

``moved`` must compile no Triton kernel: cubins do not depend on the device index, and the
cuda:0 entry carries them.

It prints one JSON line: the FX graph cache hits and misses of ``moved``, whether each moved
graph's code equals ``own``'s (less the comment that names a kernel's file), and the largest
difference between the two processes' losses and gradients over 20 steps (the same seed, so
the same dropout masks: they must agree exactly or to rounding), and each process's first step
(compile included). Exits 1 when a check fails.

Usage: python tests/gpu/device_move.py [--steps N]   (client/python/src on PYTHONPATH)
"""

from __future__ import annotations

import argparse
import glob
import json
import os
import re
import subprocess
import sys
import tempfile
import time

STEPS = 20


def model_step(torch, device):
    torch.manual_seed(0)
    layers = torch.nn.Sequential(
        torch.nn.LayerNorm(256), torch.nn.Linear(256, 1024), torch.nn.GELU(), torch.nn.Dropout(0.1), torch.nn.Linear(1024, 256)
    ).to(device)

    def step(x):
        h = layers(x) + torch.ones(256, device=x.device)
        return torch.softmax(h, dim=-1).square().mean()

    return layers, torch.compile(step)


def count_triton_compiles():
    """The names of the Triton kernels this process really compiles (a cache hit returns from
    ``triton.compile`` before ``ASTSource.make_ir``)."""
    from triton.compiler import compiler

    names = []
    make_ir = compiler.ASTSource.make_ir

    def counting(self, *args, **kwargs):
        names.append(getattr(self.fn, "__name__", "?"))
        return make_ir(self, *args, **kwargs)

    compiler.ASTSource.make_ir = counting
    return names


def record_triton_keys():
    """Each kernel's Triton cache key, by its parts (kernel name -> parts), for a report of what
    made two devices' keys differ."""
    import hashlib

    from triton.compiler import compiler

    parts = {}
    get_cache_key = compiler.get_cache_key

    def recording(src, backend, options, env_vars):
        fn = getattr(src, "fn", None)
        if fn is not None:
            digest = lambda text: hashlib.sha256(str(text).encode()).hexdigest()[:12]  # noqa: E731
            parts.setdefault(fn.__name__, []).append(
                {
                    "src": src.hash()[:12],
                    "fn.cache_key": fn.cache_key[:12],
                    "fn.src": digest(fn.src),
                    "fn.line": fn.starting_line_number,
                    "fn.globals_used": str(sorted((k[0], str(v[0])[:80]) for k, v in fn.used_global_vals.items()))[:600],
                    "attrs": str(src.attrs)[:300],
                    "signature": str(sorted(src.signature.items()))[:300],
                    "constants": str(sorted((k, str(v)[:60]) for k, v in src.constants.items()))[:300],
                    "backend": backend.hash(),
                    "options": options.hash()[:12],
                    "env": digest(sorted(env_vars.items())),
                }
            )
        return get_cache_key(src, backend, options, env_vars)

    compiler.get_cache_key = recording
    return parts


def child(role, steps):
    import torch
    import torch._dynamo.utils
    from torch._inductor.graph import GraphLowering

    sources = []
    GraphLowering.save_output_code = sources.append
    keys = []  # (key, the lines torch hashed), for a report on a miss
    from torch._inductor import codecache

    # As kilnd's worker (first) and kiln.torch (moved) do: torch's ptxas from the start, so that
    # every process keys its Triton kernels alike. The code names the ptxas (its backend hash),
    # so own, torch's reference, takes the same.
    from kiln.torch import _inductor

    _inductor.same_ptxas()
    if role == "moved":
        from kiln.torch import _device

        _device.install(torch)
        prepare = codecache.FxGraphCache.prepare_key

        def prepare_key(gm, example_inputs, fx_kwargs, inputs_to_check, remote):
            index = _device.graph_device(example_inputs)
            if index:
                with _device.normalizing(index):
                    pickler, details = _device._fx_graph_pickler(torch, gm, example_inputs, fx_kwargs, inputs_to_check)
                    keys.append(("f" + pickler.get_hash(details), pickler.debug_lines(details)))
            else:
                keys.append((f"not moved: device {index}", []))
            return prepare(gm, example_inputs, fx_kwargs, inputs_to_check, remote)

        codecache.FxGraphCache.prepare_key = staticmethod(prepare_key)
    else:
        hash_graph = codecache.compiled_fx_graph_hash

        def compiled_fx_graph_hash(*a, **k):
            key, lines = hash_graph(*a, **k)
            keys.append((key, lines))
            return key, lines

        codecache.compiled_fx_graph_hash = compiled_fx_graph_hash
    device = torch.device("cuda", 0 if role == "first" else 1)
    torch.cuda.set_device(device)
    compiled = count_triton_compiles()
    triton_keys = record_triton_keys()
    layers, step = model_step(torch, device)
    torch.manual_seed(1)
    losses, grads = [], []
    started = time.perf_counter()
    for i in range(steps):
        x = torch.randn(64, 256, device=device)
        loss = step(x)
        loss.backward()
        losses.append(loss.item())
        if i == 0:
            first_step_s = time.perf_counter() - started
        grads.append(sum(p.grad.double().abs().sum().item() for p in layers.parameters()))
        layers.zero_grad()
    counters = torch._dynamo.utils.counters["inductor"]
    print(
        json.dumps(
            {
                "role": role,
                "first_step_s": first_step_s,
                "fx_hits": counters["fxgraph_cache_hit"],
                "fx_misses": counters["fxgraph_cache_miss"],
                "triton_compiles": compiled,
                "triton_keys": triton_keys,
                "inductor_counters": dict(counters),
                "losses": losses,
                "grads": grads,
                "sources": sources,
                "keys": keys,
            }
        )
    )


def run(role, cache, steps):
    env = dict(os.environ, TORCHINDUCTOR_CACHE_DIR=cache, TORCHINDUCTOR_FX_GRAPH_CACHE="1")
    env.pop("TRITON_CACHE_DIR", None)
    out = subprocess.run([sys.executable, __file__, "--child", role, "--steps", str(steps)], env=env, capture_output=True, text=True, check=False)
    if out.returncode != 0:
        raise SystemExit(f"{role}: exit {out.returncode}\n{out.stderr[-4000:]}")
    return json.loads(out.stdout.strip().splitlines()[-1])


def print_kernel_differences(cache, names):
    """For each kernel compiled again on cuda:1, the fields of its Triton cache metadata that
    differ from cuda:0's: what made Triton's key differ."""
    for name in names[:6]:
        found = {}
        for device in ("0", "1"):
            for path in sorted(glob.glob(os.path.join(cache, "triton", device, "*", name + ".json"))):
                with open(path) as f:
                    found.setdefault(device, []).append((os.path.basename(os.path.dirname(path)), json.load(f)))
        if "0" not in found or "1" not in found:
            print(f"  {name}: metadata on cuda:0 {len(found.get('0', []))}, on cuda:1 {len(found.get('1', []))}")
            continue
        (hash0, meta0), (hash1, meta1) = found["0"][0], found["1"][-1]
        differ = {k: (meta0.get(k), meta1.get(k)) for k in sorted(set(meta0) | set(meta1)) if meta0.get(k) != meta1.get(k)}
        print(f"  {name}: {len(found['0'])} on cuda:0, {len(found['1'])} on cuda:1; dirs {hash0} and {hash1}; differ: {str(differ)[:1500]}")


def comparable(source):
    """The code less what names a file: a kernel's path in a comment is a hash of its code."""
    return re.sub(r"^# kernel path: .*$", "", source, flags=re.M)


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--child")
    parser.add_argument("--steps", type=int, default=STEPS)
    args = parser.parse_args()
    if args.child:
        child(args.child, args.steps)
        return 0
    a, b = tempfile.mkdtemp(prefix="move-a-"), tempfile.mkdtemp(prefix="move-b-")
    first = run("first", a, args.steps)
    moved = run("moved", a, args.steps)
    own = run("own", b, args.steps)
    same_code = [comparable(m) == comparable(o) for m, o in zip(moved["sources"], own["sources"])]
    loss_diff = max(abs(x - y) for x, y in zip(moved["losses"], own["losses"]))
    grad_diff = max(abs(x - y) / max(abs(y), 1e-12) for x, y in zip(moved["grads"], own["grads"]))
    report = {
        "graphs": len(own["sources"]),
        "first_fx_misses": first["fx_misses"],
        "moved_fx_hits": moved["fx_hits"],
        "moved_fx_misses": moved["fx_misses"],
        "moved_code_equals_own": same_code,
        "max_loss_diff": loss_diff,
        "max_grad_rel_diff": grad_diff,
        # The first step's time, compile included: on cuda:0 cold, on cuda:1 from the moved
        # cuda:0 entries, and on cuda:1 cold.
        "first_step_s": {"first": first["first_step_s"], "moved": moved["first_step_s"], "own": own["first_step_s"]},
        "first_vs_own_loss_diff": max(abs(x - y) for x, y in zip(first["losses"], own["losses"])),
        # Triton kernels compiled for real: the moved process's come from cuda:0's cubins.
        "triton_compiles": {role: len(r["triton_compiles"]) for role, r in (("first", first), ("moved", moved), ("own", own))},
        "moved_counters": moved["inductor_counters"],
    }
    print(json.dumps(report), flush=True)
    if moved["triton_compiles"]:
        print("kernels the moved process compiled again:", sorted(set(moved["triton_compiles"])))
        print_kernel_differences(a, sorted(set(moved["triton_compiles"])))
        for name in sorted(set(moved["triton_compiles"]))[:4]:
            ours, theirs = first["triton_keys"].get(name, [{}])[0], moved["triton_keys"].get(name, [{}])[0]
            print(f"  {name}: Triton key parts that differ: " + str({k: (ours.get(k), theirs.get(k)) for k in sorted(set(ours) | set(theirs)) if ours.get(k) != theirs.get(k)})[:3000])
    for m, o, same in zip(moved["sources"], own["sources"], same_code):
        if not same:
            import difflib

            print("\n".join(list(difflib.unified_diff(comparable(o).splitlines(), comparable(m).splitlines(), "own", "moved", lineterm=""))[:24]))
    for (k0, lines0), (k1, lines1) in zip(first["keys"], moved["keys"]):
        if k0 != k1:
            print(f"key on cuda:0 {k0}, moved key on cuda:1 {k1}; the lines that differ:")
            for x, y in zip(lines0, lines1):
                if x != y:
                    print("  cuda:0:", x[:600])
                    print("  moved: ", y[:600])
    ok = (
        moved["fx_misses"] == 0
        and moved["fx_hits"] >= 2
        and len(moved["sources"]) == len(own["sources"])
        and all(same_code)
        and loss_diff <= 1e-6
        and grad_diff <= 1e-6
        and not moved["triton_compiles"]
    )
    print(json.dumps(report))
    print("device move:", "PASS" if ok else "FAIL")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
