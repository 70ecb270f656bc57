"""kiln._warn: the one place kiln decides whether a warning was given already in this process."""

from __future__ import annotations

import pytest

from kiln import _warn


def test_a_topic_warns_once_until_forgotten(caplog: pytest.LogCaptureFixture) -> None:
    _warn.forget()
    with caplog.at_level("WARNING", logger="kiln"):
        for value in ("a", "b"):
            _warn.warn_once("topic-1", "kiln: first %s", value)
        _warn.warn_once("topic-2", "kiln: second")
        _warn.forget()
        _warn.warn_once("topic-1", "kiln: again")
    assert [r.getMessage() for r in caplog.records] == ["kiln: first a", "kiln: second", "kiln: again"]
