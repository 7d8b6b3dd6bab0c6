"""``voltbus.services.eventlog`` exports a sorted ``__all__`` whose names all resolve."""

from __future__ import annotations

import voltbus.services.eventlog as eventlog


def test_eventlog_all_is_sorted_and_resolves() -> None:
    assert eventlog.__all__ == sorted(eventlog.__all__)
    assert [n for n in eventlog.__all__ if not hasattr(eventlog, n)] == []
    assert {"EventLog", "Envelope", "BadEvent", "Appended"} <= set(eventlog.__all__)
