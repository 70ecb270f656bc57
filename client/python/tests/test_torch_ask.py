"""An async graph's ask of kilnd (:func:`kiln.torch._ask.ask_patiently`). The graph runs eagerly
meanwhile, so kilnd's absence is waited out and a worker's failed compile asked for again, not
counted at once as a fallback that would leave the graph eager for the rest of the job. kilnd's
absence with a real torch and a real gRPC channel to a socket nobody listens on; the retry
schedule after a worker's failure with kilnd's answers scripted."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from harness import require

require("torch")


@pytest.fixture
def nobody_at(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """kiln's connection pointed at a socket nobody listens on, with a short back-off; the
    process's connection and fallback counts as they were afterwards."""
    from kiln import _fleet
    from kiln.torch import _ask
    from kiln.torch._ledger import _ledger

    monkeypatch.setenv("KILN_DAEMON", f"unix://{tmp_path}/nobody.sock")
    monkeypatch.setattr(_fleet, "RETRY_SECS", 0.3)
    # A fallback's report to kilnd (and the line at exit) is another test's: none from pytest.
    monkeypatch.setattr(_ask, "_report_soon", lambda: None)
    with _ledger.lock:
        saved = _ledger.fallbacks, _ledger.unreported
        _ledger.fallbacks, _ledger.unreported = {}, {}
    fresh = _fleet._State()
    monkeypatch.setattr(_fleet, "_state", fresh)
    try:
        yield
    finally:
        if fresh.client is not None:
            fresh.client.close()
        with _ledger.lock:
            _ledger.fallbacks, _ledger.unreported = saved


def test_an_async_graph_asks_again_while_kilnd_is_away_then_counts_one_fallback(
    nobody_at: None, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    from kiln import _warn
    from kiln.torch import _ask
    from kiln.torch._ledger import _ledger

    asked: list[tuple[bool, Any]] = []
    real = _ask._ask

    def spy(request: _ask.Request, **kwargs: Any) -> Any:
        answer = real(request, **kwargs)
        asked.append((_ask.UNREACHABLE not in kwargs["again"], answer))
        return answer

    monkeypatch.setattr(_ask, "_ask", spy)
    _warn.forget()
    with caplog.at_level("WARNING", logger="kiln"):
        answer = _ask.ask_patiently(_ask.Request(b"graph", "inner:0/0"), patience=2.0)
    assert answer == _ask.UNREACHABLE
    # Within its patience every try was uncounted, and each found kilnd away; after it, one counted.
    assert len(asked) >= 3 and all(not counted for counted, _ in asked[:-1]) and asked[-1][0] is True, asked
    assert all(a == _ask.Again(_ask.UNREACHABLE, a.detail) for _, a in asked[:-1]) and asked[-1][1] == _ask.UNREACHABLE, asked
    assert _ledger.fallbacks.get("kilnd_unreachable") == 1, _ledger.fallbacks
    # The warning says what becomes of the graph: eager, not compiled in the process.
    said = [r.getMessage() for r in caplog.records if "torch.compile graph" in r.getMessage()]
    assert len(said) == 1 and "runs eagerly for the rest of this process" in said[0], said


def test_a_graph_that_waits_for_its_compile_falls_back_at_once(nobody_at: None) -> None:
    """A blocking graph's first call waits for the answer: kilnd away, it compiles in the process
    at once, as torch would."""
    from kiln.torch import _ask
    from kiln.torch._ledger import _ledger

    assert _ask.ask(_ask.Request(b"graph", "inner:0/0")) == _ask.UNREACHABLE
    assert _ledger.fallbacks.get("kilnd_unreachable") == 1, _ledger.fallbacks


def test_an_async_graph_whose_worker_failed_asks_twice_more_then_counts_the_failure(monkeypatch: pytest.MonkeyPatch) -> None:
    """kilnd's worker failed the compile (a crash, or a timeout on a loaded host): the graph runs
    eagerly and asks again after kilnd's memory of the failure ends, twice, before it gives up."""
    from kiln.torch import _ask

    tries: list[frozenset[str]] = []
    slept: list[float] = []

    def worker_fails(request: _ask.Request, **kwargs: Any) -> Any:
        tries.append(kwargs["again"])
        return _ask.Again("worker_failed", "killed") if "worker_failed" in kwargs["again"] else "worker_failed"

    monkeypatch.setattr(_ask, "_ask", worker_fails)
    monkeypatch.setattr(_ask.time, "sleep", slept.append)
    assert _ask.ask_patiently(_ask.Request(b"graph", "inner:0/0")) == "worker_failed"
    assert slept == list(_ask.RETRY_AFTER_SECS) and slept[0] > 60, slept
    assert [("worker_failed" in t) for t in tries] == [True, True, False], tries
    # A later try that kilnd's worker compiles ends the retries with its answer.
    tries.clear()
    answers = iter([_ask.Again("worker_failed", "killed"), "an answer"])
    monkeypatch.setattr(_ask, "_ask", lambda request, **kwargs: next(answers))
    assert _ask.ask_patiently(_ask.Request(b"graph", "inner:0/0")) == "an answer"
