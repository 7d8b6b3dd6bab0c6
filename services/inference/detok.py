"""Incremental text of one sequence: stop strings, and text held back while it may still become one."""

from __future__ import annotations

from collections.abc import Callable, Sequence


class TextTracker:
    """Feed token ids one at a time; ``add`` returns the new text that is safe to show and whether a stop hit.

    The stop string itself is never shown; text that could be the start of a stop string waits.

    >>> t = TextTracker(lambda ids: "".join(chr(i) for i in ids), ["\\n\\n"])
    >>> [t.add(ord(c)) for c in "a\\nb\\n\\nc"]
    [('a', False), ('', False), ('\\nb', False), ('', False), ('', True), ('', True)]
    >>> t.text
    'a\\nb'
    """

    def __init__(self, decode: Callable[[list[int]], str], stop: Sequence[str]) -> None:
        self.decode = decode
        self.stop = [s for s in stop if s]
        self.ids: list[int] = []
        self.text = ""
        """The text shown so far (after a stop: the final text)."""
        self.stopped = False
        self._full = ""

    def add(self, token_id: int) -> tuple[str, bool]:
        if self.stopped:
            return "", True
        self.ids.append(token_id)
        full = self._full = self.decode(self.ids)
        cut = min((i for i in (full.find(s) for s in self.stop) if i >= 0), default=-1)
        if cut >= 0:
            self.stopped = True
            return self._show(full[:cut]), True
        hold = max((k for s in self.stop for k in range(1, len(s)) if full.endswith(s[:k])), default=0)
        if full.endswith("\ufffd"):
            hold = max(hold, 1)  # an incomplete character: wait for the rest of it
        return self._show(full[: len(full) - hold]), False

    def flush(self) -> str:
        """The held-back text, when the sequence ends without a stop string."""
        return "" if self.stopped else self._show(self._full)

    def _show(self, upto: str) -> str:
        delta = upto[len(self.text) :]
        self.text = upto
        return delta
