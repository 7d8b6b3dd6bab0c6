"""The voltbus command line, run as a user runs it: real processes, a real bus, one-line errors."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import free_port
from voltbus.schemas.catalog import json_schemas

VOLTBUS = [sys.executable, "-c", "from voltbus.cli import main; main()"]


def run(*args: str, env: dict[str, str] | None = None, timeout: float = 60) -> subprocess.CompletedProcess[str]:
    full_env = {**os.environ, **(env or {})}
    return subprocess.run([*VOLTBUS, *args], capture_output=True, text=True, timeout=timeout, env=full_env)


def one_line_error(result: subprocess.CompletedProcess[str]) -> str:
    assert result.returncode == 1, result.stdout + result.stderr
    assert "Traceback" not in result.stderr
    errors = [line for line in result.stderr.splitlines() if line.startswith("voltbus: error:")]
    assert len(errors) == 1, result.stderr
    return errors[0]


def test_nats_refuses_a_port_in_use(tmp_path: Path) -> None:
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        line = one_line_error(run("nats", "--port", str(port), "--monitor-port", "0", "--data-dir", str(tmp_path)))
    assert f"127.0.0.1:{port} is in use" in line


def test_nats_refuses_an_unwritable_data_dir(tmp_path: Path) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("not a directory")
    line = one_line_error(run("nats", "--port", "0", "--monitor-port", "0", "--data-dir", str(blocker / "store")))
    assert "not writable" in line and str(blocker) in line


def test_nats_reports_a_missing_binary(tmp_path: Path) -> None:
    env = {"VOLTBUS_BUS__BINARY": str(tmp_path / "no-such-nats-server")}
    line = one_line_error(run("nats", "--port", "0", "--data-dir", str(tmp_path), env=env))
    assert "nats-server binary not found" in line


def test_commands_report_an_unreachable_bus_with_the_url() -> None:
    line = one_line_error(run("check", "--nats-url", "nats://127.0.0.1:1"))
    assert "cannot reach NATS at nats://127.0.0.1:1" in line
    line = one_line_error(run("streams", env={"VOLTBUS_NATS__URL": "nats://127.0.0.1:1"}))
    assert "nats://127.0.0.1:1" in line


def test_nats_serves_a_bus_that_other_commands_use(tmp_path: Path) -> None:
    port = free_port()
    proc = subprocess.Popen(
        [*VOLTBUS, "nats", "--port", str(port), "--monitor-port", "0", "--data-dir", str(tmp_path)],
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
    )
    try:
        assert proc.stdout is not None
        ready = proc.stdout.readline()  # blocks until the bus prints its ready line (or exits)
        assert f"ready at nats://127.0.0.1:{port}" in ready
        url = f"nats://127.0.0.1:{port}"
        result = run("check", "--nats-url", url, "--rollouts", "50", "--spans", "200")
        assert result.returncode == 0, result.stderr
        assert "self-check passed" in result.stdout
        streams = run("streams", "--nats-url", url, "--help")
        assert streams.returncode == 0
        info = run("streams", env={"VOLTBUS_NATS__URL": url})
        assert "VB_CTRL: 0 messages" in info.stdout
        assert (tmp_path / "nats-server.conf").read_text().count("sync_interval: always") == 1
    finally:
        proc.terminate()
        assert proc.wait(timeout=20) == 0


@pytest.mark.timeout(300)
def test_demo_runs_on_embedded_defaults(tmp_path: Path) -> None:
    env = {
        "VOLTBUS_BUS__DATA_DIR": str(tmp_path),
        "VOLTBUS_BUS__PORT": "0",
        "VOLTBUS_BUS__MONITOR_PORT": "0",
        "VOLTBUS_NATS__URL": f"nats://127.0.0.1:{free_port()}",
    }
    result = run("demo", "--steps", "2", "--tasks-per-step", "2", "--group-size", "4", env=env, timeout=240)
    assert result.returncode == 0, result.stderr
    assert "started an embedded NATS JetStream" in result.stdout
    assert "step 1 of 2: reward" in result.stdout and "published run-" in result.stdout  # steps.step: 0, 1
    assert "greedy accuracy on the 100 problems" in result.stdout  # validation before and after
    assert "demo finished" in result.stdout


def test_schemas_export_writes_the_catalog(tmp_path: Path) -> None:
    (tmp_path / "Stale.json").write_text("{}")
    result = run("schemas", "export", "--out", str(tmp_path))
    assert result.returncode == 0, result.stderr
    files = json_schemas()
    assert {p.name: p.read_bytes() for p in tmp_path.iterdir()} == files


@pytest.mark.parametrize(
    "command",
    ["nats", "check", "demo", "streams", "schemas", "coordinator", "projector", "sql", "replay", "export", "runner"]
    + ["reproject", "data", "export-training", "learner", "train", "inference", "model", "gateway"],
)
def test_every_command_has_help(command: str) -> None:
    result = run(command, "--help")
    assert result.returncode == 0 and "Usage" in result.stdout


def test_train_without_offline_and_learner_without_tasks_say_what_to_do(tmp_path: Path) -> None:
    line = one_line_error(run("train"))
    assert "pass --offline" in line
    line = one_line_error(run("learner", "--tasks", str(tmp_path / "missing.jsonl")))
    assert "task file" in line and "not found" in line


def test_runner_reports_an_agent_that_does_not_import(nats_server: object) -> None:
    url = nats_server.url  # type: ignore[attr-defined]
    line = one_line_error(run("runner", "--agent", "no_such_module:agent", "--nats-url", url))
    assert "cannot import agent module 'no_such_module'" in line


def runner_start_line(url: str, *flags: str, env: dict[str, str]) -> str:
    """The start-up line of ``voltbus runner`` run with ``flags`` and ``env`` (stopped once it said it)."""
    args = ["runner", "--agent", "tests.services.runner.calc_agent:CalcAgent", "--nats-url", url, *flags]
    full_env = {**os.environ, "VOLTBUS_NATS__NAMESPACE": f"cli{free_port()}", **env}
    proc = subprocess.Popen([*VOLTBUS, *args], stderr=subprocess.PIPE, text=True, env=full_env)
    try:
        assert proc.stderr is not None
        for line in proc.stderr:  # ends when the process does: a runner that fails does not hang this
            if "runner with" in line:
                return line
        raise AssertionError(f"the runner exited ({proc.wait()}) without its start-up line")
    finally:
        proc.terminate()
        proc.wait(timeout=30)


@pytest.mark.timeout(120)
def test_runner_flags_override_the_settings_and_absent_ones_leave_them(nats_server: object) -> None:
    url = nats_server.url  # type: ignore[attr-defined]
    env = {"VOLTBUS_RUNNER__SLOTS": "3", "VOLTBUS_RUNNER__ISOLATE": "true"}
    assert "runner with 3 slot(s) (isolated)" in runner_start_line(url, env=env)
    assert "runner with 2 slot(s) (agent host)" in runner_start_line(url, "-n", "2", "--no-isolate", env=env)
    assert "runner with 1 slot(s) (agent host)" in runner_start_line(url, env={})  # the default: no credentials
    assert "runner with 1 slot(s) (in-process)" in runner_start_line(url, "--in-process", env={})
    in_process = {"VOLTBUS_RUNNER__AGENTS": "in-process"}
    assert "runner with 1 slot(s) (in-process)" in runner_start_line(url, env=in_process)
