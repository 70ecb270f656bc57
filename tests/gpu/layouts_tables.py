"""The tables of ``torch_layouts.py``'s ``layouts.md``: one row per shape and layout (header
``| shape | layout |``), and ``layout_job``'s table of every variant. Each cell reads one run's
summary (``torch_layouts.summary``); a ratio is always within one run."""

from __future__ import annotations

import statistics

#: The shape name of ``layout_job.py``, the job the harness measured before the corpus.
LAYOUT_JOB = "layout_job"
#: The variants that start a kilnd of their own; the others run without kiln, or on a kept one.
OWN_KILND = ("default", "cold", "async")


def cell(r: dict | None, base: dict | None = None) -> str:
    if r is None:
        return "not run"
    if "skipped" in r:
        return "not run (time)"
    if "error" in r:
        return "failed"
    notes = []
    if base is not None and "first_s" in base and base["first_s"] > 0:
        notes.append(f"{r['first_s'] / base['first_s']:.2f}×")
    if len(r.get("runs_first_s", [])) > 1:
        notes.append("median of " + ", ".join(f"{x:.2f}" for x in r["runs_first_s"]))
    text = f"{r['first_s']:.2f} s" + (f" ({'; '.join(notes)})" if notes else "")
    return text


def cold_cell(cold: dict | None, plain: dict | None) -> str:
    """A kiln cold start, with the median of its ratios to plain taken within each repeat when there
    are several (the medians of the two columns need not come from one run)."""
    if cold is None or "paired_ratios" not in cold:
        return cell(cold, plain)
    ratios = cold["paired_ratios"]
    listed = ", ".join(f"{x:.2f}" for x in ratios)
    return f"{cold['first_s']:.2f} s ({statistics.median(ratios):.2f}× plain, the median of each run's {listed})"


def loss_gap(a: dict | None, b: dict | None) -> str:
    if not a or not b or "losses" not in a or "losses" not in b:
        return "n/a"
    gap = max(abs(x - y) / max(abs(y), 1e-6) for x, y in zip(a["losses"], b["losses"], strict=False))
    return f"{gap:.1e}"


def table(results: dict[str, dict[str, dict]]) -> str:
    """``layout_job``'s table of every variant (its ``cold``, ``twin`` and kilnd's compiles)."""
    rows = [
        "| layout | plain cold | kiln default (`KILN_TORCH=1`) | kiln cold (graphs through kilnd) | kiln fresh host | warm host "
        "| eager first step | async first step | compiles / distinct graphs | fallbacks | losses, max relative gap |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for layout, v in results.items():
        plain, cold = v.get("plain"), v.get("cold")
        ratio = "n/a"
        if cold and "kilnd_compiled" in cold and cold.get("graphs"):
            ratio = f"{cold['kilnd_compiled']:.0f} / {cold['graphs']} = {cold['kilnd_compiled'] / cold['graphs']:.2f}"
        fallbacks = {k: n for r in v.values() for k, n in r.get("fallbacks", {}).items()}
        rows.append(
            f"| {layout} | {cell(plain)} | {cell(v.get('default'), plain)} | {cold_cell(cold, plain)} "
            f"| {cell(v.get('fresh'), v.get('warm'))} | {cell(v.get('warm'))} | {cell(v.get('eager'))} "
            f"| {cell(v.get('async'), v.get('eager'))} | {ratio} | {sum(fallbacks.values())} {fallbacks or ''} "
            f"| {loss_gap(cold, plain)} |"
        )
    return "\n".join(rows)


def ran(*runs: dict | None) -> bool:
    return all(r is not None and "first_s" in r for r in runs)


def against(value: float, target: float, what: str) -> str:
    """A figure, its ratio to its target, and what the target is made of."""
    return f"{value:.2f} s ({value / target:.2f}× {what})" if target > 0 else f"{value:.2f} s"


def async_first(v: dict[str, dict]) -> str:
    """Async's first step against eager's plus plain's Dynamo trace: an async process traces every
    frame as plain does, then runs it eagerly while kilnd compiles."""
    eager, plain, run = v.get("eager"), v.get("plain"), v.get("async")
    if not ran(eager, plain, run):
        return cell(run)
    return against(run["first_s"], eager["first_s"] + plain["trace_s"], f"eager {eager['first_s']:.2f} + trace {plain['trace_s']:.2f}")


def async_later(v: dict[str, dict]) -> str:
    """Async's longest step after the first (its swap to the compiled graph, or a recompile)
    against ``max(3 × eager's median step, 0.5 s)``: a hiccup a job should not notice."""
    eager, run = v.get("eager"), v.get("async")
    if not ran(eager, run):
        return cell(run)
    bound = max(3 * eager["median_s"], 0.5)
    return against(run["longest_later_s"], bound, f"max(3 × eager median {eager['median_s'] * 1e3:.0f} ms, 0.5 s)")


def steps_sum(r: dict, n: int) -> float:
    """The seconds of a run's first ``n`` steps, its slowest rank's."""
    return max(sum(t[:n]) for t in r["times"])


def async_steps(v: dict[str, dict]) -> str:
    """Async's first N steps in all (N: the steps every one of the three ran) against the better of
    eager's and plain's over the same steps: what async saves or costs a short job."""
    eager, plain, run = v.get("eager"), v.get("plain"), v.get("async")
    if not ran(eager, plain, run):
        return cell(run)
    n = min(len(t) for r in (eager, plain, run) for t in r["times"])
    best, name = min((steps_sum(eager, n), "eager"), (steps_sum(plain, n), "plain"))
    return f"N={n}: " + against(steps_sum(run, n), best, f"{name} {best:.2f} s")


def kiln_fallbacks(v: dict[str, dict]) -> str:
    """kiln's fallbacks by reason, summed over the ranks of every kiln variant that ran."""
    total: dict[str, int] = {}
    for variant in OWN_KILND + ("fresh",):
        for reason, count in (v.get(variant) or {}).get("fallbacks", {}).items():
            total[reason] = total.get(reason, 0) + count
    return ", ".join(f"{k} {n}" for k, n in sorted(total.items())) or "0"


def same_losses(a: dict | None, b: dict | None) -> str:
    """``equal`` when every rank's losses of ``a`` are exactly ``b``'s, else the largest relative gap."""
    if not ran(a, b):
        return "n/a"
    pairs = [(x, y) for ra, rb in zip(a["rank_losses"], b["rank_losses"], strict=True) for x, y in zip(ra, rb, strict=False)]
    if all(x == y for x, y in pairs) and [len(x) for x in a["rank_losses"]] == [len(x) for x in b["rank_losses"]]:
        return "equal"
    return f"max rel. {max(abs(x - y) / max(abs(y), 1e-6) for x, y in pairs):.1e}"


def skew(v: dict[str, dict]) -> str:
    return " / ".join(f"{r['skew_s']:.2f} s" if ran(r) else "n/a" for r in (v.get("plain"), v.get("default")))


def shape_table(results: dict[str, dict[str, dict[str, dict]]]) -> str:
    """One row per shape and layout: kiln's default cold start against plain torch.compile's, the
    fresh host against the warm one, async against eager, kiln's fallbacks and the losses."""
    rows = [
        (
            "| shape | layout | plain cold | kiln cold (`KILN_TORCH=1`, new kilnd) | graphs on (`KILN_TORCH_GRAPHS=1`, new kilnd) | fresh host / warm host "
            "| async first step (vs eager + plain's Dynamo trace) | async longest later step | async N steps (vs the better of eager and plain) "
            "| fallbacks (kiln, all ranks) | losses, kiln default vs plain | rank skew, plain / kiln |"
        ),
        "|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for shape, layouts in results.items():
        for layout, v in layouts.items():
            plain, default, fresh, warm = v.get("plain"), v.get("default"), v.get("fresh"), v.get("warm")
            hosts = f"{fresh['first_s'] / warm['first_s']:.2f} ({fresh['first_s']:.2f} s / {warm['first_s']:.2f} s)" if ran(fresh, warm) else cell(fresh)
            rows.append(
                f"| {shape} | {layout} | {cell(plain)} | {cold_cell(default, plain)} | {cold_cell(v.get('cold'), plain)} | {hosts} "
                f"| {async_first(v)} | {async_later(v)} "
                f"| {async_steps(v)} | {kiln_fallbacks(v)} | {same_losses(default, plain)} | {skew(v)} |"
            )
    return "\n".join(rows)


def twins(results: dict[str, dict[str, dict]]) -> str:
    """The second device's compile of one process's graph (cuda:1 after cuda:0 on one kilnd): a
    graph bakes in its device index, so it is compiled again, with the first's Triton kernels."""
    v = results.get("single", {})
    cold, twin = v.get("cold"), v.get("twin")
    if not ran(cold, twin):
        return ""
    return (
        f"\n\nSecond device: one process on cuda:1 after one on cuda:0, on the same kilnd: first step "
        f"{twin['first_s']:.2f} s against {cold['first_s']:.2f} s; the graph cost it {twin['compile_s']:.2f} s "
        f"(kilnd's compile and the load) against {cold['compile_s']:.2f} s.\n"
    )


def report(results: dict[str, dict[str, dict[str, dict]]]) -> str:
    md = shape_table(results)
    if LAYOUT_JOB in results:
        md += "\n\n" + table(results[LAYOUT_JOB]) + twins(results[LAYOUT_JOB])
    return md
