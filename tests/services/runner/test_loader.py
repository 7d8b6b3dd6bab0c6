"""Loading the agent from ``module:attr`` or ``file.py:attr``: whatever goes wrong is one clear line
(AgentLoadError naming the module and the error), and the runner's command prints it and exits 1."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from voltbus.services.runner.loader import AgentLoadError, load_agent

AGENTS = "tests.services.runner.calc_agent"

BROKEN = {
    "syntax": ("def agent(task:\n", "SyntaxError: '(' was never closed (broken_agent.py, line 1)"),
    "raises": ("import os\nraise RuntimeError('no GPU here')\n", "RuntimeError: no GPU here (at {file}:2)"),
    "missing dependency": ("import no_such_dependency\n", "No module named 'no_such_dependency'"),
}


def test_an_agent_path_that_does_not_resolve_is_one_clear_error() -> None:
    with pytest.raises(AgentLoadError, match="cannot import agent module 'no_such_module'"):
        load_agent("no_such_module:agent")
    with pytest.raises(AgentLoadError, match="has no attribute 'missing'"):
        load_agent(f"{AGENTS}:missing")
    with pytest.raises(AgentLoadError, match="must look like"):
        load_agent("just_a_module")
    with pytest.raises(AgentLoadError, match="must look like"):
        load_agent("agent.py")  # a file needs its ':name'
    with pytest.raises(AgentLoadError, match="has no attribute 'Missing'"):
        load_agent(f"{AGENTS}.Missing")  # AL 1.0's module.Class form
    with pytest.raises(AgentLoadError, match="agent file 'nowhere.py' does not exist"):
        load_agent("nowhere.py:agent")


@pytest.mark.parametrize("as_file", [False, True], ids=["module", "file"])
@pytest.mark.parametrize("case", list(BROKEN))
def test_a_module_that_fails_while_it_is_imported_is_one_clear_error(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, case: str, as_file: bool
) -> None:
    source, reason = BROKEN[case]
    file = tmp_path / "broken_agent.py"
    file.write_text(source)
    monkeypatch.syspath_prepend(str(tmp_path))
    name = str(file) if as_file else "broken_agent"
    with pytest.raises(AgentLoadError) as failed:
        load_agent(f"{name}:agent")
    assert str(failed.value) == f"cannot import agent module {name!r}: {reason.format(file=file)}"


def run_runner(*argv: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, *argv], capture_output=True, text=True, timeout=60)


@pytest.mark.parametrize(
    "command",
    [["-m", "voltbus.services.runner"], ["-c", "from voltbus.cli import main; main()", "runner", "--agent"]],
    ids=["python -m voltbus.services.runner", "voltbus runner"],
)
def test_the_runner_command_prints_one_line_and_exits_1_for_a_bad_agent(tmp_path: Path, command: list[str]) -> None:
    file = tmp_path / "broken_agent.py"
    file.write_text("def agent(task:\n")
    missing = run_runner(*command, "tests.services.runner.no_such:agent")
    broken = run_runner(*command, f"{file}:agent")
    assert (missing.returncode, missing.stdout) == (1, "")
    assert missing.stderr.splitlines() == [
        "voltbus: error: cannot import agent module 'tests.services.runner.no_such': "
        "No module named 'tests.services.runner.no_such'"
    ]
    assert (broken.returncode, broken.stdout) == (1, "")
    assert broken.stderr.splitlines() == [
        f"voltbus: error: cannot import agent module '{file}': "
        "SyntaxError: '(' was never closed (broken_agent.py, line 1)"
    ]


def test_a_function_with_a_signature_no_agent_pattern_matches_is_one_clear_error(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "odd_agent.py").write_text("def agent(question, model):\n    return 1.0\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    with pytest.raises(AgentLoadError) as failed:
        load_agent("odd_agent:agent")
    assert str(failed.value).startswith("'odd_agent:agent' is not a usable rollout function: Function signature")
    assert "(task, llm[, rollout])" in str(failed.value)


@pytest.mark.parametrize("where", [[], ["--in-process"]], ids=["agent host", "in-process"])
def test_the_runner_command_prints_one_line_for_an_agent_with_an_unknown_signature(
    tmp_path: Path, where: list[str]
) -> None:
    file = tmp_path / "odd_agent.py"
    file.write_text("def agent(question, model):\n    return 1.0\n")
    done = run_runner("-c", "from voltbus.cli import main; main()", "runner", *where, "--agent", f"{file}:agent")
    assert (done.returncode, done.stdout) == (1, "")
    [line] = done.stderr.splitlines()
    assert line.startswith(f"voltbus: error: '{file}:agent' is not a usable rollout function: Function signature")


def test_an_agent_file_that_defines_a_dataclass_loads(tmp_path: Path) -> None:
    """``file.py:name`` registers the module as an import does: ``dataclasses`` looks its module up by name."""
    file = tmp_path / "typed_agent.py"
    file.write_text(
        "from __future__ import annotations\n"
        "import dataclasses\n"
        "@dataclasses.dataclass\n"
        "class Answer:\n"
        "    value: int\n"
        "def agent(task, resources):\n"
        "    return float(Answer(value=task['x']).value)\n"
    )
    agent = load_agent(f"{file}:agent")
    assert agent.rollout({"x": 3}, {}, None) == 3.0  # type: ignore[arg-type]
    assert agent.__module__ in sys.modules and sys.modules[agent.__module__].Answer(value=1).value == 1
