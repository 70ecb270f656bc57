"""RESULTS.md from one tests/gpu/run: the machine, the kernels launched with their errors and
attributes, and the torch.compile tables, ready to commit as tests/gpu/RESULTS.md (kiln-bench
copies that file into BENCHMARKS.md unchanged).

Usage: results_md.py OUT_DIR MACHINE_JSON STATUS   (writes OUT_DIR/RESULTS.md)

OUT_DIR's torch.md and torch.json may come from several runs: ``torch_warmstart.py --merge
OUT_DIR/torch.md RUN1/torch.json RUN2/torch.json ...`` writes both.
"""

from __future__ import annotations

import json
import math
import sys
from pathlib import Path


def fmt(v, spec: str = ".2e") -> str:
    if isinstance(v, (int, float)) and not isinstance(v, bool):
        return format(v, spec) if math.isfinite(v) else str(v)
    return "—" if v in (None, "") else str(v)


def main() -> int:
    out, machine_path, status = Path(sys.argv[1]), Path(sys.argv[2]), sys.argv[3]
    machine = json.loads(machine_path.read_text()) if machine_path.exists() else {}
    lines = [f"Run of `tests/gpu/run` on {machine.get('date', '?')}: **{status}**."]
    torch_json = out / "torch.json"
    if torch_json.exists():
        missed = json.loads(torch_json.read_text()).get("targets_missed")
        if missed:
            lines += ["", f"The warm-start targets: **{len(missed)} missed** ({'; '.join(missed)}); the torch tables below break the time down."]
        elif missed is not None:
            lines += ["", "The warm-start targets: every target measured was met."]
    lines += ["", "| | |", "|---|---|"]
    for k, v in machine.items():
        if k != "date":
            lines.append(f"| {k} | {v} |")
    e2e_path = out / "e2e.json"
    if e2e_path.exists():
        e = json.loads(e2e_path.read_text())
        launches = e.get("launches", {})
        val = e.get("validation", {})
        lines += [
            "",
            f"### Kernels: compiled through host A, fetched through host B (empty cache directory), launched from B's bytes ({e.get('mode')})",
            "",
            f"Random inputs (seed {e.get('seed')}), outputs poisoned with NaN before each launch, compared with float64 NumPy: "
            "relative error ‖out − ref‖ / ‖ref‖. Warm fetch of the whole graph through B: "
            f"{fmt(e.get('host_b_wall_s', float('nan')) * 1000, '.0f')} ms.",
            "",
            "| kernel | toolchain | tier A → B | entry | rel. error | bound | registers | validation (host A) |",
            "|---|---|---|---|---|---|---|---|",
        ]
        for kid, k in e.get("kernels", {}).items():
            lz = launches.get(kid, {})
            attrs, note = val.get(kid, {}).get("attributes", []), val.get(kid, {}).get("validation", "")
            regs = ", ".join(str(a.get("registers")) for a in attrs) or "—"
            lines.append(
                f"| {kid} | {k.get('toolchain', '')} | {k.get('tier_a', '')} → {k.get('tier_b', '')} | `{k.get('entry', '')}` | "
                f"{fmt(lz.get('rel_err'))} | {fmt(lz.get('tol'), '.0e')} | {regs} | {note} |"
            )
        wt = e.get("wrong_target_load")
        if wt:
            lines += ["", "Compiled for sm_80 and loaded on this GPU: " + "; ".join(f"{k}: {v}" for k, v in wt.items())]
        wv = e.get("wrong_target", {}).get("validation")
        if wv:
            lines += ["", "kilnd's validation note for them: " + "; ".join(f"{k}: {v!r}" for k, v in wv.items())]
        failed = [c for c in e.get("checks", []) if c["status"] == "FAIL"]
        if failed:
            lines += ["", "Failed kernel checks: " + "; ".join(f"{c['name']} ({c['detail']})" for c in failed)]
    md = out / "torch.md"
    if md.exists():
        lines += ["", md.read_text().rstrip()]
    lines += ["", "Raw figures: `e2e.json` and `torch.json` of the run."]
    (out / "RESULTS.md").write_text("\n".join(lines) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
