"""``voltbus up`` as a user runs it: a real subprocess on free ports, real nats-server, real HTTP.

Readiness is read from up's own summary line (with a deadline); every process it started is
collected from /proc while it runs and must be gone after it stops.
"""

from __future__ import annotations

import os
import queue
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import httpx
import pytest

from tests.conftest import free_port
from voltbus.services.ops.compose import read_env_file

ROOT = Path(__file__).resolve().parents[1]
VOLTBUS = [sys.executable, "-c", "from voltbus.cli import main; main()"]


class UpProcess:
    """``voltbus up`` running in the background, its output lines in a queue."""

    def __init__(self, tmp: Path, services: str, cwd: Path = ROOT, **ports: int) -> None:
        self.ports = ports
        env = {k: v for k, v in os.environ.items() if not k.startswith(("VOLTBUS_", "VB_"))}
        env |= {f"VB_{k.upper()}_PORT": str(v) for k, v in ports.items()} | {"NO_COLOR": "1"}
        cmd = VOLTBUS + ["up", "--services", services, "--data-dir", str(tmp / "up"), "--timeout-s", "40"]
        self.proc = subprocess.Popen(cmd, cwd=cwd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
        self.lines: queue.Queue[str | None] = queue.Queue()
        self.seen: list[str] = []
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for raw in self.proc.stdout:
            self.lines.put(raw.decode(errors="replace").rstrip())
        self.lines.put(None)

    def wait_for(self, text: str, timeout: float = 50.0) -> str:
        """The first line containing ``text``, or fail (with everything seen) at the deadline or exit."""
        deadline = time.monotonic() + timeout
        while (left := deadline - time.monotonic()) > 0:
            try:
                line = self.lines.get(timeout=left)
            except queue.Empty:
                break
            if line is None:
                break
            self.seen.append(line)
            if text in line:
                return line
        raise AssertionError(f"no {text!r} from voltbus up; output:\n" + "\n".join(self.seen))

    def finish(self, timeout: float = 30.0) -> tuple[int, str]:
        code = self.proc.wait(timeout)
        while (line := self.lines.get(timeout=5)) is not None:
            self.seen.append(line)
        return code, "\n".join(self.seen)


def descendants(pid: int) -> set[int]:
    """Every live process below ``pid`` (from /proc)."""
    children: dict[int, list[int]] = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                ppid = int((entry / "stat").read_text().rsplit(")", 1)[1].split()[1])
            except (OSError, IndexError, ValueError):
                continue
            children.setdefault(ppid, []).append(int(entry.name))
    found, todo = set(), [pid]
    while todo:
        for child in children.get(todo.pop(), []):
            found.add(child)
            todo.append(child)
    return found


def alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return False
    return state != "Z"


def assert_all_gone(pids: set[int]) -> None:
    left = [p for p in pids if alive(p)]
    assert not left, f"processes left behind: {left}"


@pytest.mark.timeout(60)
@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM])
def test_up_bus_coordinator_projector_answers_sql_and_stops_clean(tmp_path: Path, sig: signal.Signals) -> None:
    ports = {"nats": free_port(), "nats_monitor": free_port(), "projector": free_port()}
    up = UpProcess(tmp_path, "nats,coordinator,projector", cwd=tmp_path, **ports)  # any folder: the repository's file
    summary = up.wait_for("up: 3 services")
    assert f"SQL at http://127.0.0.1:{ports['projector']}/sql" in summary and "Ctrl-C to stop" in summary
    pids = descendants(up.proc.pid)
    assert len(pids) >= 3, pids  # nats-server, coordinator, projector
    admin = read_env_file(tmp_path / "up/auth/admin.env", {})  # what up tells the operator to source
    assert admin["VOLTBUS_NATS__URL"] == f"nats://127.0.0.1:{ports['nats']}"
    assert admin["VOLTBUS_PROJECTOR__URL"] == f"http://127.0.0.1:{ports['projector']}"
    env = {k: v for k, v in os.environ.items() if not k.startswith("VOLTBUS_")} | admin
    sql = VOLTBUS + ["sql", "SELECT 41 + 1 AS answer"]
    out = subprocess.run(sql, env=env, capture_output=True, text=True, cwd=tmp_path)
    assert out.returncode == 0 and "42" in out.stdout, out.stderr
    assert f"projector http://127.0.0.1:{ports['projector']} (bus nats://127.0.0.1:{ports['nats']}" in out.stderr
    with pytest.raises(httpx.TransportError):  # no monitor: nats-server's lists every connection's user
        httpx.get(f"http://127.0.0.1:{ports['nats_monitor']}/healthz")
    up.proc.send_signal(sig)
    code, text = up.finish()
    assert code == 0, text
    assert "up: stopped" in text
    assert_all_gone(pids)
    assert (tmp_path / "up/projector-data/projection.duckdb").is_file()


@pytest.mark.timeout(60)
def test_up_inference_and_gateway_serve_the_example_model(tmp_path: Path) -> None:
    ports = {"nats": free_port(), "nats_monitor": free_port(), "inference": free_port(), "gateway": free_port()}
    up = UpProcess(tmp_path, "nats,inference,gateway", **ports)
    up.wait_for("up: 3 services")
    pids = descendants(up.proc.pid)
    admin_key = read_env_file(tmp_path / "up/auth/admin.env", {})["VOLTBUS_GATEWAY__ADMIN_KEY"]
    reply = httpx.post(
        f"http://127.0.0.1:{ports['gateway']}/v1/completions",
        json={"model": "policy", "prompt": "2+3=", "max_tokens": 2, "temperature": 0},
        headers={"Authorization": f"Bearer {admin_key}"},  # the gateway is closed by default: the operator's key
        timeout=30,
    )
    assert reply.status_code == 200, reply.text
    assert reply.json()["choices"][0]["text"] is not None
    up.proc.send_signal(signal.SIGINT)
    code, text = up.finish()
    assert code == 0, text
    assert_all_gone(pids)


@pytest.mark.timeout(60)
def test_a_service_that_cannot_start_is_named_and_nothing_is_left(tmp_path: Path) -> None:
    ports = {"nats": free_port(), "nats_monitor": free_port(), "projector": free_port()}
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", ports["projector"]))
        taken.listen()
        up = UpProcess(tmp_path, "nats,projector", **ports)
        up.wait_for("up: nats ready")
        pids = descendants(up.proc.pid)
        code, text = up.finish()
    assert code == 1, text
    port = ports["projector"]
    assert f"up: error: projector's port {port} is in use by another process" in text  # not taken as its readiness
    assert "VB_PROJECTOR_PORT=<port>" in text and "--port" not in text
    assert_all_gone(pids)


@pytest.mark.timeout(60)
def test_a_service_that_dies_is_reported_and_the_rest_stopped(tmp_path: Path) -> None:
    up = UpProcess(tmp_path, "nats,coordinator", nats=free_port(), nats_monitor=free_port())
    up.wait_for("up: 2 services")
    pids = descendants(up.proc.pid)
    [coordinator] = [p for p in pids if b"coordinator" in Path(f"/proc/{p}/cmdline").read_bytes()]
    os.kill(coordinator, signal.SIGKILL)
    code, text = up.finish()
    assert code == 1, text
    assert "up: coordinator exited with code -9" in text
    assert_all_gone(pids)


@pytest.mark.timeout(240)
def test_the_main_command_trains_and_ends_with_the_learner(tmp_path: Path) -> None:
    """The README's main command (``voltbus up --exit-code-from learner``) with every service of the
    compose file, cut to 2 small steps: the learner validates, trains, validates, and up ends with its code."""
    names = ["nats", "nats_monitor", "projector", "dashboard", "inference", "gateway"]
    ports = {name: free_port() for name in names}
    env = {k: v for k, v in os.environ.items() if not k.startswith(("VOLTBUS_", "VB_"))} | {"NO_COLOR": "1"}
    env |= {f"VB_{k.upper()}_PORT": str(v) for k, v in ports.items()}
    env |= {"VB_STEPS": "2", "VB_RUNNERS": "1", "VB_RUNNER_SLOTS": "16", "VB_RUN_ID": "main-1"}
    env |= {"VOLTBUS_LEARNER__TASKS_PER_STEP": "4", "VOLTBUS_LEARNER__GROUP_SIZE": "4"}
    cmd = VOLTBUS + ["up", "--exit-code-from", "learner", "--data-dir", str(tmp_path / "up"), "--timeout-s", "60"]
    out = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=230)
    text = out.stdout + out.stderr
    assert out.returncode == 0, text[-4000:]
    assert "up: 8 services (8 processes) ready" in text
    assert "learner exited with code 0; stopping the rest" in text
    assert "up: the bus requires a user" in text and "up: the bus refused" not in text  # every role had enough
    [summary] = [line for line in text.splitlines() if "run main-1 finished: 2 steps" in line]
    assert "sampled reward" in summary and "validation 0." in summary, summary
    db = tmp_path / "up/projector-data/projection.duckdb"
    assert f"the projection stays in {db}" in text
    query = "SELECT count(*) FROM steps WHERE run_id = 'main-1'"
    rows = subprocess.run(VOLTBUS + ["sql", "--db", str(db), "--format", "csv", query], capture_output=True, text=True)
    assert rows.returncode == 0 and rows.stdout.strip().splitlines()[-1] == "2", rows.stdout + rows.stderr
