"""The torch warm-start run's report: the warm-start targets computed from torch.json, the markdown
tables of torch.md, and the merge of several runs' torch.json into one report. Kept apart from
torch_warmstart.py, which runs the processes, so a report can be rendered or merged here with no
GPU and no torch.
"""

from __future__ import annotations

import json
import math
import os
import statistics
from pathlib import Path

import common

#: The warm-start targets: reported, never part of the exit status.
TARGET_D_OVER_B = 1.05
TARGET_D_OVER_C = 0.80
TARGET_SUCCESSOR_OVER_D = 1.05

#: Variants with N runs: key in torch.json -> label.
MULTI = {"b_local_warm": "(b)", "d_kiln": "(d)", "c_redis": "(c)"}


def median(xs: list) -> float | None:
    xs = [x for x in xs if isinstance(x, (int, float)) and math.isfinite(x)]
    return statistics.median(xs) if xs else None


#: Keys in kiln.torch.snapshot_stats()["restore"] (kiln/torch/snapshot.py: files and bytes
#: written, files already present, seconds of the restore, seconds the first compile
#: waited for it), and other names a later version might use.
SNAP_KEYS = {
    "seconds": ("seconds", "restore_s", "restore_seconds"),
    "wait": ("waited_s", "wait_s", "join_wait_s"),
    "files": ("files", "files_restored", "restored_files"),
    "bytes": ("bytes", "bytes_restored", "restored_bytes"),
    "present": ("present", "files_present"),
}


def snap_value(stats, what: str):
    """A restore figure from kiln.torch's snapshot stats (its ``restore`` part first, then the
    top level), or None."""
    if not isinstance(stats, dict):
        return None
    restore = [v for k, v in stats.items() if isinstance(v, dict) and "restor" in k]
    for d in restore + [stats]:
        for k in SNAP_KEYS[what]:
            v = d.get(k)
            if isinstance(v, (int, float)) and not isinstance(v, bool):
                return v
    return None


# -- the report --


def compute_targets(results: dict) -> None:
    """The warm-start targets per model, into ``results["targets"]`` and ``results["targets_missed"]``."""
    targets, missed = {}, []
    for model, res in results.get("models", {}).items():
        d = res.get("d_kiln", {})
        b, c, dd = res.get("b_local_warm", {}).get("first_call_s"), res.get("c_redis", {}).get("first_call_s"), d.get("first_call_s")
        succ = res.get("successor", {}).get("first_call_s") if res.get("successor", {}).get("rc") == 0 else None
        t = {
            "d_over_b": (dd / b if dd and b else None, TARGET_D_OVER_B, "le"),
            "d_over_c": (dd / c if dd and c else None, TARGET_D_OVER_C, "le"),
            "d_triton_compiles": (d.get("compiles") if d.get("runs") else None, 0, "eq"),
            "d_cc_runs": (d.get("cc_runs") if d.get("runs") else None, 0, "eq"),
            "successor_over_d": (succ / dd if succ and dd else None, TARGET_SUCCESSOR_OVER_D, "le"),
        }
        targets[model] = {}
        for name, (value, bound, op) in t.items():
            met = None if value is None else (value <= bound if op == "le" else value == bound)
            targets[model][name] = {"value": value, "bound": bound, "met": met}
            if met is False:
                missed.append(f"{model} {name} = {value:.3g} (target {'≤' if op == 'le' else '='} {bound:g})")
    results["targets"], results["targets_missed"] = targets, missed


def render(results: dict) -> str:
    """torch.md: the tables."""

    def s(v, spec: str = ".2f") -> str:
        return format(v, spec) if isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v) else "—"

    def fc(res: dict, key: str):
        v = res.get(key, {})
        return v.get("first_call_s") if v.get("rc", 0) == 0 or "runs" in v else None

    compute_targets(results)
    cpu = results.get("device") == "cpu"
    n = results.get("runs_per_variant", 3)
    layout = results.get("cache_layout", {})
    models = results.get("models", {})
    lines = [
        f"### torch.compile first call on a fresh host ({'CPU, tiny models: NOT figures' if cpu else results.get('gpu') or 'GPU'})",
        "",
        "Seconds from the start of the first step (compile included) to its result on the host, each in a fresh process; "
        f"(b), (c) and (d): the median of {n} runs (each run below). Every variant ran at the same absolute cache paths, "
        f"as a real fresh host does: Inductor's directory {layout.get('TORCHINDUCTOR_CACHE_DIR', '?')}, Triton's cache dir unset, "
        f"`TRITON_HOME={layout.get('TRITON_HOME', '?')}`; emptied before every process but (b)'s.",
        "",
        "| model | cold, no kiln | cold, kiln (host A) | (b) local warm | (c) torch Redis | (d) kiln, fresh host | SIGKILL successor | (a) no caches |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for model, res in models.items():
        lines.append(f"| {model} | {s(fc(res, 'cold'))} | {s(fc(res, 'd_fill'))} | {s(fc(res, 'b_local_warm'))} | {s(fc(res, 'c_redis'))} | "
                     f"{s(fc(res, 'd_kiln'))} | {s(fc(res, 'successor'))} | {s(fc(res, 'a_nocache'))} |")

    def cell(t: dict, spec: str) -> str:
        if t["met"] is None:
            return "—"
        return f"{s(t['value'], spec)} met" if t["met"] else f"**{s(t['value'], spec)} NOT met**"

    lines += ["", "Targets (warm start" + ("; CPU: meaningless" if cpu else "") + "):", "",
              f"| model | (d)/(b) ≤ {TARGET_D_OVER_B} | (d)/(c) ≤ {TARGET_D_OVER_C} | Triton compiles in (d) = 0 | C compiler runs in (d) = 0 | "
              f"SIGKILL successor/(d) ≤ {TARGET_SUCCESSOR_OVER_D} |", "|---|---|---|---|---|---|"]
    for model, t in results["targets"].items():
        lines.append(f"| {model} | {cell(t['d_over_b'], '.2f')} | {cell(t['d_over_c'], '.2f')} | {cell(t['d_triton_compiles'], '.0f')} | "
                     f"{cell(t['d_cc_runs'], '.0f')} | {cell(t['successor_over_d'], '.2f')} |")
    lines += ["", ("**Targets missed:** " + "; ".join(results["targets_missed"]) + ".") if results["targets_missed"]
              else "Every target measured was met (— : not measured in this run)."]

    lines += ["", "Every run (first call, s):", "", "| model | (b) local warm | (c) torch Redis | (d) kiln, fresh host |", "|---|---|---|---|"]
    for model, res in models.items():
        lines.append(f"| {model} | " + " | ".join(", ".join(s(x) for x in res.get(k, {}).get("first_call_s_runs", [])) or "—"
                                                  for k in ("b_local_warm", "c_redis", "d_kiln")) + " |")

    lines += ["", "Where the time goes in (d) and the successor (each process; (b)'s median for comparison). Start-up: from the spawn to the "
              "script's first line (interpreter, site hooks, kiln's `.pth` starting the restore); restore: kiln.torch's figures "
              "(the restore runs in the background from start-up and is joined at the first compile).", "",
              "| model | process | start-up | import torch | model and device set-up | snapshot restore (s) | first compile waited (s) | files restored | already present | MB | restores kilnd saw | first call |",
              "|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for model, res in models.items():
        b = res.get("b_local_warm")
        if b:
            lines.append(f"| {model} | (b) median | {s(b.get('startup_s'))} | {s(b.get('import_s'))} | {s(b.get('setup_s'))} | — | — | — | — | — | — | "
                         f"{s(b.get('first_call_s'))} |")
        rows = [(f"(d) #{i + 1}", r) for i, r in enumerate(res.get("d_kiln", {}).get("runs", []))]
        if res.get("successor"):
            rows.append(("SIGKILL successor", res["successor"]))
        for name, r in rows:
            st = (r.get("snapshot") or {}).get("stats")
            mb = snap_value(st, "bytes")
            lines.append(f"| {model} | {name} | {s(r.get('startup_s'))} | {s(r.get('import_s'))} | {s(r.get('setup_s'))} | {s(snap_value(st, 'seconds'))} | "
                         f"{s(snap_value(st, 'wait'))} | {s(snap_value(st, 'files'), '.0f')} | {s(snap_value(st, 'present'), '.0f')} | "
                         f"{s(mb / 1e6 if isinstance(mb, (int, float)) else None, '.1f')} | {s((r.get('fresh_kilnd') or {}).get('restores_found'), '.0f')} | "
                         f"{s(r.get('first_call_s'))} |")
    for model, res in models.items():
        r = (res.get("d_kiln", {}).get("runs") or [{}])[0]
        if r.get("snapshot"):
            st = r["snapshot"].get("stats")
            if isinstance(st, dict):
                restore = st.get("restore") if isinstance(st.get("restore"), dict) else {}
                brief = {k: restore[k] for k in ("found", "files", "bytes", "present", "missing", "relocated", "roots_restored",
                                                  "timed_out", "skipped", "seconds", "waited_s") if k in restore}
                brief.update({"saver": st.get("saver"), "saves": len(st.get("saves") or [])})
            else:
                brief = r["snapshot"].get("error")
            fk = r.get("fresh_kilnd", {})
            fk_brief = {"restores_found": fk.get("restores_found"), "blob_remote_hits": fk.get("blob_remote_hits"), "blob_misses": fk.get("blob_misses"),
                        **{k.replace("kiln_snapshot_", ""): v for k, v in (fk.get("snapshot_metrics") or {}).items() if "seconds" not in k}}
            lines += ["", f"{model} (d) #1: kiln's snapshot stats ({r['snapshot'].get('source')}) `{json.dumps(brief, sort_keys=True, default=str)[:600]}`; "
                      f"the fresh kilnd's metrics `{json.dumps(fk_brief, sort_keys=True)[:400]}`"]
        saved = res.get("d_fill", {}).get("snapshot_saved")
        if saved:
            saves = (((res["d_fill"].get("snapshot") or {}).get("stats") or {}).get("saves")) or []
            lines += ["", f"{model} snapshot after (d)fill: {saved.get('files')} files, {s((saved.get('total_bytes') or 0) / 1e6, '.1f')} MB, "
                      f"roots {saved.get('roots')}" + (f" ({saved['error']})" if saved.get("error") else "")
                      + (f"; the fill's saves before its result (files, s): {[(x.get('files'), round(x.get('seconds') or 0, 2)) for x in saves]}" if saves else "")]
        pk = res.get("preempt_killed")
        if pk:
            w = pk.get("snapshot_wait", {})
            lines += ["", f"{model} preemption: the killed process's first call {s(pk.get('first_call_s'))} s (Triton compiles {pk.get('compiles')}); "
                      f"{w.get('outcome')} after {s(w.get('waited_s'), '.1f')} s; SIGKILL {s(pk.get('killed_s_after_first_step'), '.1f')} s after "
                      f"its first step (exit {pk.get('rc')}); its snapshot: {(w.get('snapshot') or {}).get('files')} files"]

    lines += ["", "Triton compiles / loads (triton.compile calls, hits included) / C compiler runs (the shims), per process:", "",
              "| model | cold | (b) | (d)fill | (d) | (c)fill | (c) | SIGKILLed | successor | (a) |", "|---|---|---|---|---|---|---|---|---|---|"]

    def counts(v: dict) -> str:
        if not v:
            return "—"
        rs = v.get("runs", [v])
        return ", ".join(f"{r.get('compiles', '?')}/{r.get('loads', '?')}/{r.get('cc_runs', '?')}" for r in rs)

    for model, res in models.items():
        lines.append(f"| {model} | " + " | ".join(counts(res.get(k, {})) for k in
                     ("cold", "b_local_warm", "d_fill", "d_kiln", "c_fill", "c_redis", "preempt_killed", "successor", "a_nocache")) + " |")
    h = results.get("herd") or {}
    if h.get("kiln") or h.get("redis"):
        lines += ["", f"Herd: {h['processes']} {h['model']} processes starting together on one GPU, each with directories of its own, fresh fleet:", "",
                  "| cache | Triton compiles | distinct kernels | wall until all done (s) | first calls (s) |", "|---|---|---|---|---|"]
        for mode, name in (("kiln", "kiln"), ("redis", "torch Redis (c)")):
            if mode in h:
                m = h[mode]
                lines.append(f"| {name} | {m['compiles']} | {m['distinct_kernels']} | {s(m['wall_s'])} | {', '.join(s(x) for x in m['first_call_s'])} |")
    if results.get("skipped"):
        lines += ["", "**Skipped for time:** " + "; ".join(results["skipped"])]
    return "\n".join(lines) + "\n"


def checks_text(title: str, checks: list[dict]) -> str:
    counts = {st: sum(1 for c in checks if c["status"] == st) for st in ("PASS", "FAIL", "SKIP")}
    lines = [f"## {title}: {counts['PASS']} passed, {counts['FAIL']} failed, {counts['SKIP']} skipped"]
    for c in checks:
        if c["status"] != "PASS" or os.environ.get("KILN_GPU_VERBOSE"):
            lines.append(f"  {c['status']:4}  {c['name']}{': ' + c['detail'] if c['detail'] else ''}")
    return "\n".join(lines)


def merge(out_md: Path, paths: list[Path]) -> int:
    """One torch.md from several runs' torch.json.

    Merged per variant: a later run's variant replaces an earlier run's (so a model's main variants
    can be measured again without losing its preemption case), and a "skipped" note of an earlier
    run is dropped once a later run measured that model's variants.
    """
    merged: dict = {"models": {}, "herd": {}, "skipped": [], "checks": []}
    for p in paths:
        r = json.loads(p.read_text())
        for k in ("device", "tiny", "runs_per_variant", "cache_layout", "gpu"):
            if r.get(k) is not None:
                merged.setdefault(k, r[k])
        measured = set(r.get("models", {}))
        merged["skipped"] = [s for s in merged["skipped"] if s.split(" ")[0] not in measured]
        merged["checks"] = [
            c for c in merged["checks"] if not (c["status"] == "SKIP" and c["name"].split(":")[0] in measured)
        ]
        for name, variants in r.get("models", {}).items():
            merged["models"].setdefault(name, {}).update(variants)
        if r.get("herd"):
            merged["herd"] = r["herd"]
        merged["skipped"] += r.get("skipped", [])
        merged["checks"] += r.get("checks", [])
    md = render(merged)
    out_md.write_text(md + "\n" + checks_text(f"torch.compile warm start, {len(paths)} runs merged", merged["checks"]) + "\n")
    out_json = out_md.with_name("torch.json")
    if out_json.resolve() not in [q.resolve() for q in paths]:
        common.write_json(out_json, merged)
    print(md)
    return 0
