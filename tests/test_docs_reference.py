"""The committed references in ``docs/reference/`` match what ``voltbus docs export`` generates."""

from __future__ import annotations

import re
from pathlib import Path

import typer

from voltbus.cli import app
from voltbus.schemas.catalog import EVENT_TYPES
from voltbus.services.ops.docgen import cli_commands, reference_docs, settings_env_vars

REFERENCE = Path(__file__).resolve().parents[1] / "docs" / "reference"
HINT = "docs/reference is out of date: run `voltbus docs export`"
CLI = typer.main.get_command(app)


def test_files_on_disk_match() -> None:
    expected = reference_docs(CLI)
    on_disk = {path.name: path.read_text() for path in REFERENCE.glob("*.md")}
    assert sorted(on_disk) == sorted(expected), HINT
    stale = sorted(name for name, text in expected.items() if on_disk[name] != text)
    assert stale == [], f"{HINT} ({', '.join(stale)} differ)"


def test_references_are_deterministic() -> None:
    assert reference_docs(CLI) == reference_docs(CLI)


def test_every_command_is_in_the_cli_reference() -> None:
    text = (REFERENCE / "cli.md").read_text()
    headings = set(re.findall(r"^#+ `(voltbus[^`]*)`$", text, re.M))
    assert {"voltbus schemas export", "voltbus docs export", "voltbus demo"} <= set(cli_commands(CLI))
    assert sorted(set(cli_commands(CLI)) - headings) == []


def test_every_setting_is_in_the_configuration_reference() -> None:
    text = (REFERENCE / "configuration.md").read_text()
    variables = settings_env_vars()
    assert {"VOLTBUS_NATS__URL", "VOLTBUS_LOG_LEVEL", "VOLTBUS_BUS__DATA_DIR"} <= set(variables)
    assert sorted(v for v in variables if f"| `{v}` |" not in text) == []
    undocumented = [line for line in text.splitlines() if line.startswith("| `VOLTBUS_") and line.endswith("|  |")]
    assert undocumented == [], "every setting needs a docstring"


def test_every_event_is_in_the_catalogue_with_a_subject() -> None:
    text = (REFERENCE / "events.md").read_text()
    missing = [cls.__name__ for cls in EVENT_TYPES if not re.search(rf"^## {cls.__name__}\n", text, re.M)]
    assert missing == []
    assert text.count("\nStream `<NS>_") == len(EVENT_TYPES)


def test_no_machine_specific_paths() -> None:
    text = "".join(reference_docs(CLI).values())
    assert str(Path.home()) not in text
