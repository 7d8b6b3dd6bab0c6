"""docs/migration.md: the code blocks marked ``<!-- tested -->`` run as written, against a real nats-server."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from .conftest import start_server

PAGE = Path(__file__).parent.parent / "docs" / "migration.md"
DOC_URL = "nats://127.0.0.1:4222"


def marked_blocks() -> list[str]:
    """The python blocks right after a ``<!-- tested -->`` line, in page order."""
    return re.findall(r"^<!-- tested -->\n```python\n(.*?)^```", PAGE.read_text(), re.M | re.S)


def test_the_page_marks_blocks_and_names_only_real_links() -> None:
    text = PAGE.read_text()
    assert len(marked_blocks()) == 3
    for target in re.findall(r"\]\(([^)#]+)", text):
        assert (PAGE.parent / target).exists(), f"migration.md links to missing {target}"


@pytest.mark.parametrize("index", [0, 1, 2])
def test_block_runs(index: int, tmp_path: Path) -> None:
    code = marked_blocks()[index]
    if DOC_URL not in code:
        exec(compile(code, f"migration.md block {index}", "exec"), {"__name__": "migration_doc"})
        return
    server = start_server(tmp_path / "nats")  # its own server: the block uses the default namespace
    try:
        code = code.replace(DOC_URL, server.url)
        exec(compile(code, f"migration.md block {index}", "exec"), {"__name__": "migration_doc"})
    finally:
        server.stop()
