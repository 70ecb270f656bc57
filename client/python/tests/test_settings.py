"""kiln.settings is the one list of the variables the Python client reads: every ``KILN_*`` name
in the package's code is on it, ``kiln doctor`` shows each, and both READMEs' tables are it."""

from __future__ import annotations

import ast
import re
from pathlib import Path

from kiln import doctor, settings

PACKAGE = Path(settings.__file__).parent
#: The READMEs that list the variables: the repository's and the Python package's.
READMES = (Path(__file__).resolve().parents[3] / "README.md", Path(__file__).resolve().parents[1] / "README.md")


def names_in_code() -> dict[str, list[str]]:
    """Each string constant of the package's code that is a variable's name (``KILN_TORCH``),
    with the files it is in; docstrings and comments mention names, they do not read them."""
    found: dict[str, list[str]] = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        if path.name == "settings.py" or "_proto" in path.parts:
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Constant) and isinstance(node.value, str) and re.fullmatch(r"KILN_[A-Z0-9_]+", node.value):
                found.setdefault(node.value, []).append(path.name)
    return found


def test_every_variable_the_code_reads_is_on_the_list() -> None:
    listed = {s.name for s in settings.SETTINGS}
    unlisted = {name: files for name, files in names_in_code().items() if name not in listed}
    assert not unlisted, f"add these to kiln.settings (and the README): {unlisted}"
    assert len(listed) == len(settings.SETTINGS), "a variable is listed twice"


def test_kiln_doctor_shows_every_variable(monkeypatch, tmp_path) -> None:
    """Each variable set to a value of its own comes out of doctor's report as ``NAME=value``:
    what a user reads, not the list doctor is built from."""
    values = {s.name: f"value-{i}" for i, s in enumerate(settings.SETTINGS)}
    # A socket nobody listens on, and the torch path off: the report needs neither kilnd nor torch.
    values.update({settings.DAEMON.name: f"unix://{tmp_path}/none.sock", settings.TORCH.name: "0"})
    # The files are read when the client connects: they exist, and the path is the value shown.
    for setting in (settings.TOKEN_FILE, settings.CA_FILE):
        (tmp_path / setting.name).write_text("a-token-of-this-test\n")
        values[setting.name] = str(tmp_path / setting.name)
    for name, value in values.items():
        monkeypatch.setenv(name, value)
    monkeypatch.setattr(doctor, "_probe_import", lambda module: {"importable": False, "error": "not asked"})
    shown = doctor.render(doctor.gather(timeout=1.0)).splitlines()
    missing = [name for name, value in values.items() if f"  {name}={value}" not in shown]
    assert not missing, f"kiln doctor does not show {missing}"


def test_the_readme_tables_are_the_list() -> None:
    expected = settings.readme_table()
    for readme in READMES:
        lines = readme.read_text().splitlines()
        start = lines.index(expected[0])
        rows = lines[start : start + next(i for i, line in enumerate(lines[start:]) if not line.startswith("|"))]
        assert rows == expected, f"{readme}'s table of the variables differs from kiln.settings (python -m kiln.settings prints it)"


def test_a_default_in_seconds_is_the_one_the_code_uses() -> None:
    """The modules take their defaults in seconds from here (``float(setting.default)``), so a
    default that does not read as a number would fail them at import."""
    from kiln import triton
    from kiln.torch import snapshot

    assert triton.DEFAULT_WAIT_SECS == float(settings.TRITON_WAIT_SECS.default) == 60.0
    assert snapshot.DEFAULT_WAIT_SECS == float(settings.TORCH_RESTORE_WAIT_SECS.default) == 120.0


def test_a_switch_reads_as_the_modules_always_read_it(monkeypatch) -> None:
    """Off by default (``0`` or unset): on unless unset, empty or ``0``. On by default (``1``):
    off only at ``0``. Values count as written."""
    off_by_default, on_by_default = settings.TORCH_QUIET, settings.TORCH_SNAPSHOT
    assert (off_by_default.default, on_by_default.default) == ("0", "1")
    for setting in (off_by_default, on_by_default):
        monkeypatch.delenv(setting.name, raising=False)
    assert not off_by_default.switch() and on_by_default.switch()
    expected = {"": (False, True), "0": (False, False), "1": (True, True), "yes": (True, True), " 0": (True, True)}
    for value, (off_reads, on_reads) in expected.items():
        monkeypatch.setenv(off_by_default.name, value)
        monkeypatch.setenv(on_by_default.name, value)
        assert (off_by_default.switch(), on_by_default.switch()) == (off_reads, on_reads), repr(value)
    # KILN_TORCH's default reads "unset" in the table: off by default.
    monkeypatch.delenv(settings.TORCH.name, raising=False)
    assert not settings.TORCH.switch()


def test_a_number_reads_as_the_modules_read_it(monkeypatch, caplog) -> None:
    """Unset or blank: the caller's default. A number: itself, never below 0. Anything else: the
    default, with one warning that names the variable. Every module reads its numbers this way."""
    from kiln import triton
    from kiln.torch import _ledger, snapshot

    wait = settings.TRITON_WAIT_SECS
    for value, want in [(None, 60.0), ("", 60.0), ("  ", 60.0), ("2.5", 2.5), (" 7 ", 7.0), ("-3", 0.0)]:
        if value is None:
            monkeypatch.delenv(wait.name, raising=False)
        else:
            monkeypatch.setenv(wait.name, value)
        assert wait.number(60.0) == triton.wait_secs() == want, repr(value)
    monkeypatch.setenv(wait.name, "soon")
    with caplog.at_level("WARNING", logger="kiln"):
        assert triton.wait_secs() == 60.0 and triton.wait_secs() == 60.0
    assert [r.getMessage() for r in caplog.records if wait.name in r.getMessage()] == [
        f"kiln: {wait.name}='soon' is not a number; using 60.0"
    ]
    # The hold defaults to the wait; the others to their declared defaults.
    monkeypatch.setenv(wait.name, "9")
    monkeypatch.delenv(settings.TRITON_HOLD_SECS.name, raising=False)
    assert triton.hold_secs() == 9.0
    monkeypatch.setenv(settings.TORCH_RESTORE_WAIT_SECS.name, "x")
    assert snapshot.wait_secs() == 120.0
    monkeypatch.setenv(settings.TORCH_MEASURE.name, "3")
    assert _ledger.measure_calls() == 3
