"""Print the fault-injection results per fault type: ``python -m tests.reliability.summary [--all]``.

By default each fault type shows the rows of its latest session (the last time its test ran);
``--all`` adds up every row ever recorded in the file.
"""

from __future__ import annotations

import sys
from collections import defaultdict
from typing import Any

from .results import results_path, rows

COLUMNS = ("fault", "runs", "operations", "lost", "duplicated", "recovered_s")


def latest(found: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Per fault type, only the rows of its most recent session."""
    last = {}
    for row in found:
        last[row["fault"]] = max(last.get(row["fault"], ""), row["session"])
    return [r for r in found if r["session"] == last[r["fault"]]]


def table(found: list[dict[str, Any]]) -> list[tuple[str, int, int, int, int, str]]:
    """One line per fault type: runs, operations, lost and duplicated summed; worst recovery time."""
    groups: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for row in found:
        groups[row["fault"]].append(row)
    lines = []
    for fault, group in sorted(groups.items()):
        times = [r["recovered_s"] for r in group if r.get("recovered_s") is not None]
        worst = f"{max(times):.2f}" if times else "-"
        total = [sum(r[c] for r in group) for c in ("runs", "operations", "lost", "duplicated")]
        lines.append((fault, *total, worst))
    return lines


def render(lines: list[tuple[str, int, int, int, int, str]]) -> str:
    """A Markdown table."""
    out = ["| " + " | ".join(COLUMNS) + " |", "|" + "---|" * len(COLUMNS)]
    out += ["| " + " | ".join(str(v) for v in line) + " |" for line in lines]
    return "\n".join(out)


def main(argv: list[str]) -> int:
    found = rows()
    if not found:
        print(f"no results in {results_path()}: run `pytest -m reliability tests/reliability` first")
        return 1
    print(render(table(found if "--all" in argv else latest(found))))
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
