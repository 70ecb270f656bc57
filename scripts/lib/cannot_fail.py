"""Finds test assertions that cannot fail, so scripts/test refuses them before they hide a bug.

A test that passes whatever the code does is worse than none: it reads as coverage. This check
knows the shapes such assertions have taken in this repository:

- a value compared with itself (``assert x == x``, ``assert_eq!(a, a)``);
- an assertion that accepts either outcome (``assert a or not a``; in Rust
  ``assert!(x.is_none() || ...)`` and its ``is_some``/``is_ok``/``is_err`` kin, which pass on
  the absent outcome whatever the other side says);
- a bound that always holds: ``>= 0`` (a length, a count, a duration, an unsigned value).

A line that means one of these anyway (an implication written as ``!a || b``, the ``-1`` of a
failed ``fork``) says why with ``can fail:`` in a comment on the same line, and is let through.

It reads Python with ``ast`` and Rust line by line with regular expressions: Rust's asserts in
this repository fit on a line after ``cargo fmt``, and a missed one is a gap in a lint, not a
wrong answer. Usage: ``cannot_fail.py [ROOT]``; prints each finding and exits 1 when there is one.
"""

from __future__ import annotations

import ast
import re
import subprocess
import sys
from pathlib import Path

ALLOW = "can fail:"

#: Rust: the two sides of ``assert_eq!(a, b)`` when they are the same text.
RUST_SAME = re.compile(r"\b(?:prop_)?assert_eq!\(\s*([^,()]+(?:\([^()]*\))?)\s*,\s*\1\s*[,)]")
#: Rust: ``assert!(x == x)``.
RUST_SELF = re.compile(r"\b(?:prop_)?assert!\(\s*([\w.:\[\]()&*]+)\s*==\s*\1\s*[,)]")
#: Rust: an assert whose first alternative is an outcome, so it passes on that outcome alone.
RUST_EITHER = re.compile(r"\b(?:prop_)?assert!\(\s*[^;]*?\.is_(?:none|some|ok|err)\(\)\s*\|\|")
#: Rust: ``a || !a``.
RUST_OR_NOT = re.compile(r"\b(?:prop_)?assert!\(\s*([\w.:()]+)\s*\|\|\s*!\s*\1\b")
#: Rust: a lower bound of zero, or of an empty duration.
RUST_ZERO = re.compile(r"\b(?:prop_)?assert!\([^;]*>=\s*(?:0(?:\.0)?(?:_?[ui](?:8|16|32|64|size))?\b|Duration::ZERO)")


def rust_findings(path: Path, text: str) -> list[str]:
    found = []
    for n, line in enumerate(text.splitlines(), 1):
        if ALLOW in line or line.lstrip().startswith("//"):
            continue
        for pattern, what in (
            (RUST_SAME, "compares a value with itself"),
            (RUST_SELF, "compares a value with itself"),
            (RUST_EITHER, "accepts either outcome"),
            (RUST_OR_NOT, "accepts either outcome"),
            (RUST_ZERO, "asserts a bound that always holds (>= 0)"),
        ):
            if pattern.search(line):
                found.append(f"{path}:{n}: {what}: {line.strip()}")
                break
    return found


def _same(a: ast.AST, b: ast.AST) -> bool:
    return ast.dump(a) == ast.dump(b)


def _negation_of(a: ast.AST, b: ast.AST) -> bool:
    return isinstance(b, ast.UnaryOp) and isinstance(b.op, ast.Not) and _same(a, b.operand)


def _zero(node: ast.AST) -> bool:
    return isinstance(node, ast.Constant) and not isinstance(node.value, bool) and node.value == 0


def _why(test: ast.AST) -> str | None:
    """What makes ``test`` (an assert's condition, or one of its ``and`` parts) unable to fail."""
    if isinstance(test, ast.BoolOp) and isinstance(test.op, ast.And):
        return next((w for w in map(_why, test.values) if w), None)
    if isinstance(test, ast.BoolOp) and isinstance(test.op, ast.Or):
        values = test.values
        if any(_negation_of(a, b) or _negation_of(b, a) for a in values for b in values):
            return "accepts either outcome"
        first = values[0]
        if isinstance(first, ast.Compare) and len(first.ops) == 1 and isinstance(first.ops[0], ast.Is):
            if isinstance(first.comparators[0], ast.Constant) and first.comparators[0].value is None:
                return "accepts either outcome (None, or anything the rest allows)"
    if isinstance(test, ast.Compare):
        left = test.left
        for op, right in zip(test.ops, test.comparators, strict=True):
            if isinstance(op, (ast.Eq, ast.Is, ast.GtE, ast.LtE)) and _same(left, right):
                return "compares a value with itself"
            if isinstance(op, ast.GtE) and _zero(right):
                return "asserts a bound that always holds (>= 0)"
            if isinstance(op, ast.LtE) and _zero(left):
                return "asserts a bound that always holds (0 <=)"
            left = right
    return None


def python_findings(path: Path, text: str) -> list[str]:
    lines = text.splitlines()
    found = []
    for node in ast.walk(ast.parse(text, str(path))):
        if not isinstance(node, ast.Assert):
            continue
        why = _why(node.test)
        span = lines[node.lineno - 1 : (node.end_lineno or node.lineno)]
        if why and not any(ALLOW in line for line in span):
            found.append(f"{path}:{node.lineno}: {why}: {lines[node.lineno - 1].strip()}")
    return found


def tracked(root: Path) -> list[Path]:
    out = subprocess.run(["git", "ls-files", "*.rs", "*.py"], cwd=root, capture_output=True, text=True, check=True)
    return [Path(p) for p in out.stdout.splitlines() if "_proto/" not in p and "/generated/" not in p]


def main(argv: list[str]) -> int:
    root = Path(argv[1]) if len(argv) > 1 else Path(__file__).resolve().parents[2]
    found: list[str] = []
    for rel in tracked(root):
        text = (root / rel).read_text()
        if rel.suffix == ".rs":
            found += rust_findings(rel, text)
        elif "test" in rel.name or "tests" in rel.parts:
            found += python_findings(rel, text)
    for line in found:
        print(line)
    if found:
        print(f"{len(found)} assertion(s) that cannot fail; fix them, or say why one can with '{ALLOW}' on its line")
    return 1 if found else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
