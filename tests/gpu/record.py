"""The record of the corpus on the GPU: one row per job shape and layout (header ``| shape |
layout |``), each group of columns taken from the latest run that measured it, and the run named
in every cell.

Every GPU run of the layouts harness leaves ``results/runN-layouts.json`` (``torch_layouts.py``'s
summaries). No single run measures every shape, layout and variant (a run has ten minutes of a
device), so the record reads them all and, per row, takes:

- the cold start (plain and kiln's default, their fallbacks, losses and rank skew) from the latest
  run with both (the latest with three repeats of each, the targets' medians, where one has);
- the fresh host against the warm host from the latest run with both;
- async against eager and plain from the latest run with all three.

Each ratio is within one run, as the cells of ``layouts_tables`` compute it; the columns of one row
may come from different runs, and so from different commits and cards, which the cell says. A row
or column no run measured reads "not run on the GPU".

    python3 tests/gpu/record.py            # prints the table
    python3 tests/gpu/record.py --write    # replaces the table in tests/gpu/RESULTS.md
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from collections.abc import Callable
from pathlib import Path

import layouts_tables as tables

HERE = Path(__file__).resolve().parent
RESULTS = HERE / "results"
CORPUS = HERE.parent.parent / "client" / "python" / "tests" / "corpus"
LAYOUTS = ("single", "ddp", "fsdp2")
#: Markers around the generated table in RESULTS.md.
BEGIN = "<!-- record.py: begin -->"
END = "<!-- record.py: end -->"
#: A probe that measured kiln's default: ``lazy`` is ``KILN_TORCH=1`` on a kilnd as deployed (its
#: torch workers not started ahead), which runs 83 and 84 measured under that name.
DEFAULT_PROBES = ("lazy",)
#: The repeats a target's median is taken over: a run with that many is preferred to a newer one.
REPEATS = 3

Run = tuple[int, dict[str, dict]]


def shapes() -> list[str]:
    """The corpus's job shapes: every job file but the shared code."""
    return sorted(p.stem for p in CORPUS.glob("*.py") if p.stem not in ("common", "runner", "__init__"))


def row_shapes(record: list[Run]) -> list[str]:
    """The table's shapes: the corpus's, and each one run in another torch.compile mode
    (``--corpus-mode``), which a run records as ``shape (mode)``, after it."""
    base = shapes()
    modes = {k for _, data in record for k in data if re.fullmatch(r"(\w+) \(([\w-]+)\)", k) and k.split(" ")[0] in base}
    return sorted([*base, *modes])


def card(n: int) -> str:
    """The GPU a run had, from its machine record or its log; "" when neither names one."""
    machine = RESULTS / f"run{n}-machine.json"
    if machine.exists():
        gpu = next((v for k, v in json.loads(machine.read_text()).items() if k.startswith("GPU")), "")
        return gpu.split(",")[0].removeprefix("NVIDIA ").split(" ")[0]
    log = RESULTS / f"run{n}.log"
    found = re.search(r"NVIDIA (H\d+)", log.read_text(errors="replace")) if log.exists() else None
    return found.group(1) if found else ""


def runs() -> list[Run]:
    """Every layouts run on record, newest first, each as {shape: {layout: variants}}; a probe
    that measured kiln's default stands for it where the run has no ``default``."""
    found = []
    for path in RESULTS.glob("run*-layouts.json"):
        n = int(re.match(r"run(\d+)-", path.name).group(1))  # type: ignore[union-attr]
        data = json.loads(path.read_text())
        for layouts in data.values():
            for layout, variants in list(layouts.items()):
                if not isinstance(variants, dict):
                    continue
                probe = next((p for p in DEFAULT_PROBES if p in variants), None)
                if "default" not in variants and probe is not None:
                    layouts[layout] = dict(variants, default=variants[probe])
        found.append((n, data))
    return sorted(found, key=lambda r: -r[0])


def latest(record: list[Run], shape: str, layout: str, needs: tuple[str, ...]) -> tuple[int, dict[str, dict]] | None:
    """The newest run in which every variant of ``needs`` ran for ``shape`` in ``layout`` three
    times or more (the targets' medians of three), else the newest in which each ran at all."""
    ran = []
    for n, data in record:
        v = data.get(shape, {}).get(layout)
        if isinstance(v, dict) and tables.ran(*(v.get(x) for x in needs)):
            ran.append((n, v))
    thrice = [(n, v) for n, v in ran if all(len(v[x].get("runs_first_s", [])) >= REPEATS for x in needs)]
    return (thrice or ran or [None])[0]


def failed(record: list[Run], shape: str, layout: str, needs: tuple[str, ...]) -> tuple[int, str] | None:
    """The newest run in which a variant of ``needs`` ran for ``shape`` in ``layout`` and failed,
    or was cut at the budget's deadline while it ran, with what happened to each: a variant that
    ran and did not finish is on the record, never "not run"."""
    for n, data in record:
        v = data.get(shape, {}).get(layout)
        if not isinstance(v, dict):
            continue
        broke = [x for x in needs if isinstance(v.get(x), dict) and "error" in v[x]]
        cut = [
            f"{x} {v[x]['skipped'].removeprefix('for time: ')}"
            for x in needs
            if isinstance(v.get(x), dict) and "cut at the deadline" in str(v[x].get("skipped", ""))
        ]
        said = ([f"failed: {', '.join(broke)} exited with an error"] if broke else []) + cut
        if said:
            return n, "; ".join(said)
    return None


def cells(
    found: tuple[int, dict[str, dict]] | None,
    show: Callable[[dict[str, dict]], list[str]],
    width: int,
    cards: dict[int, str],
    broke: tuple[int, str] | None = None,
) -> list[str]:
    """``show``'s cells of one run, each followed by the run that measured it; where none
    measured them, the newest failure of their variants, or that none ran."""
    def where(n: int) -> str:
        return f"run {n}" + (f", {cards[n]}" if cards.get(n) else "")

    if found is None and broke is not None:
        n, what = broke
        return [f"{what} ({where(n)})"] * width
    if found is None:
        return ["not run on the GPU"] * width
    n, v = found
    return [f"{text} ({where(n)})" for text in show(v)]


def fresh_cell(v: dict[str, dict]) -> list[str]:
    fresh, warm = v["fresh"], v["warm"]
    return [f"{fresh['first_s'] / warm['first_s']:.2f} ({fresh['first_s']:.2f} s / {warm['first_s']:.2f} s)"]


def cold_cells(v: dict[str, dict]) -> list[str]:
    plain, default = v["plain"], v["default"]
    return [
        tables.cell(plain),
        tables.cold_cell(default, plain),
        tables.kiln_fallbacks(v),
        tables.same_losses(default, plain),
        tables.skew(v),
    ]


def async_cells(v: dict[str, dict]) -> list[str]:
    return [tables.async_first(v), tables.async_later(v), tables.async_steps(v)]


def table(record: list[Run]) -> str:
    cards = {n: card(n) for n, _ in record}
    rows = [
        "| shape | layout | plain cold | kiln cold (`KILN_TORCH=1`) | fresh host / warm host | async first step (vs eager + plain's Dynamo trace) "
        "| async longest later step | async N steps (vs the better of eager and plain) | fallbacks (kiln, all ranks) | losses, kiln vs plain "
        "| rank skew, plain / kiln |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for shape in row_shapes(record):
        for layout in LAYOUTS:
            groups = (("plain", "default"), ("fresh", "warm"), ("async", "eager", "plain"))
            (plain, kiln, fallbacks, losses, skew), hosts, later = (
                cells(latest(record, shape, layout, needs), show, width, cards, failed(record, shape, layout, needs))
                for needs, show, width in zip(groups, (cold_cells, fresh_cell, async_cells), (5, 1, 3), strict=True)
            )
            rows.append("| " + " | ".join([shape, layout, plain, kiln, *hosts, *later, fallbacks, losses, skew]) + " |")
    return "\n".join(rows)


def write(path: Path, text: str) -> None:
    """Replaces the text between the markers in ``path``."""
    doc = path.read_text()
    begin, end = doc.find(BEGIN), doc.find(END)
    if begin < 0 or end < begin:
        raise SystemExit(f"{path}: no {BEGIN} … {END} markers to replace")
    path.write_text(doc[: begin + len(BEGIN)] + "\n" + text + "\n" + doc[end:])


def main(argv: list[str]) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--write", action="store_true", help="replace the table in tests/gpu/RESULTS.md")
    a = p.parse_args(argv)
    text = table(runs())
    if a.write:
        write(HERE / "RESULTS.md", text)
    else:
        print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
