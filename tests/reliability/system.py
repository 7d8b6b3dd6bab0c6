"""A small training system of real processes for fault tests: the embedded nats-server and every
service as its own `voltbus <service>` subprocess, on loopback ports, each killable and restartable.

Secure by default, as ``voltbus up`` runs it: the bus requires a user per role, the gateway checks
per-rollout agent keys and an admin key, the projector's SQL needs its token. Every process is started
by the test (its own process group) and stopped by it; logs go to one file per service.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

import httpx

from tests.conftest import wait_until
from voltbus.schemas.subjects import Topology
from voltbus.services.ops.credentials import ensure_credentials
from voltbus.services.ops.natsauth import read_credentials
from voltbus.services.ops.natsserver import NatsServer
from voltbus.services.serving import free_port
from voltbus.services.settings import BusSettings, NatsSettings

ROOT = Path(__file__).resolve().parents[2]
VOLTBUS = str(Path(sys.executable).parent / "voltbus")
EXAMPLE = ROOT / "examples" / "arith_rl"


@dataclass
class Service:
    """One service process: how to start it, and the current process."""

    name: str
    argv: list[str]
    env: dict[str, str]
    log: Path
    health: str | None = None
    health_headers: dict[str, str] | None = None
    proc: subprocess.Popen[bytes] | None = None
    starts: int = 0

    def start(self) -> None:
        """Start (or restart) the process in its own process group."""
        with self.log.open("ab") as out:
            out.write(f"--- start {self.starts + 1} at {time.time():.3f}\n".encode())
            out.flush()
            self.proc = subprocess.Popen(
                self.argv, cwd=ROOT, env=self.env, stdout=out, stderr=subprocess.STDOUT, start_new_session=True
            )
        self.starts += 1

    def kill(self) -> None:
        """SIGKILL the process group: no cleanup, no goodbye."""
        if self.proc is not None and self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait()

    def stop(self, grace_s: float = 20.0) -> int | None:
        """SIGTERM, then SIGKILL after ``grace_s``; the exit code."""
        if self.proc is None:
            return None
        if self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGTERM)
            try:
                self.proc.wait(grace_s)
            except subprocess.TimeoutExpired:
                self.kill()
        return self.proc.returncode

    def healthy(self) -> bool:
        """Its health URL answers 200 (True when it has none and is running)."""
        if self.proc is None or self.proc.poll() is not None:
            return False
        if self.health is None:
            return True
        try:
            return httpx.get(self.health, headers=self.health_headers, timeout=1.0).status_code == 200
        except httpx.HTTPError:
            return False

    def tail(self, lines: int = 30) -> str:
        return "\n".join(self.log.read_text(errors="replace").splitlines()[-lines:])


@dataclass
class System:
    """The bus plus the services, wired together."""

    work: Path
    namespace: str = "rel"
    server: NatsServer | None = None
    services: dict[str, Service] = field(default_factory=dict)
    ports: dict[str, int] = field(default_factory=dict)
    extra_env: dict[str, str] = field(default_factory=dict)
    url: str | None = None
    """Where clients connect, when not straight to the server (a proxy the test can cut)."""

    @property
    def auth(self) -> Path:
        """The credentials of every role (``voltbus up``'s auth directory)."""
        return self.work / "auth"

    def start_bus(self) -> NatsServer:
        """The embedded nats-server on a free port, its store in ``work/nats`` (fsync always), requiring
        the users that ``ensure_credentials`` made (bcrypt cost 4: quick connects) with their permissions."""
        ensure_credentials(self.auth, Topology(namespace=self.namespace), rounds=4)
        bus = BusSettings(data_dir=self.work / "nats", port=0, monitor_port=0, auth_dir=self.auth)
        self.server = NatsServer(bus, 1024 * 1024)
        return self.server.start()

    def secrets(self, role: str) -> dict[str, str]:
        """The variables of one role's env file (bus user and password, keys, the SQL token)."""
        return read_credentials(self.auth, role)

    def client(self, role: str = "admin") -> NatsSettings:
        """Settings of a test client connecting as ``role`` (the role it plays, or admin to check), with the
        bus settings every process gets (``extra_env``'s ``VOLTBUS_NATS__*``)."""
        assert self.server is not None
        env, prefix = self.secrets(role), "VOLTBUS_NATS__"
        shared = {k.removeprefix(prefix).lower(): v for k, v in self.extra_env.items() if k.startswith(prefix)}
        return NatsSettings.model_validate(
            shared
            | {
                "url": self.url or self.server.url,
                "namespace": self.namespace,
                "request_timeout_s": 2.0,
                "user": env[f"{prefix}USER"],
                "password": env[f"{prefix}PASSWORD"],
            }
        )

    @property
    def nats(self) -> NatsSettings:
        """The admin's client settings."""
        return self.client("admin")

    @property
    def token(self) -> str:
        """The projector's SQL token."""
        return self.secrets("admin")["VOLTBUS_PROJECTOR__TOKEN"]

    def base_env(self) -> dict[str, str]:
        env = {k: v for k, v in os.environ.items() if not k.startswith("VOLTBUS_")}
        return (
            env
            | {
                "VOLTBUS_NATS__URL": self.nats.url,
                "VOLTBUS_NATS__NAMESPACE": self.namespace,
                "VOLTBUS_PROJECTOR__URL": f"http://127.0.0.1:{self.port('projector')}",
                "VOLTBUS_LOG_LEVEL": "INFO",
                "PYTHONUNBUFFERED": "1",
            }
            | self.extra_env
        )

    def dashboard_auth(self) -> dict[str, str]:
        """The header that carries the dashboard's token (generated with the other credentials)."""
        return {"Authorization": f"Bearer {self.secrets('dashboard')['VOLTBUS_DASHBOARD__TOKEN']}"}

    def port(self, name: str) -> int:
        return self.ports.setdefault(name, free_port())

    def add(
        self, name: str, args: list[str], env: dict[str, str] | None = None, health: str | None = None, role: str = ""
    ) -> Service:
        """A service running as ``role`` (default: its name without digits), from that role's env file."""
        creds = {"VOLTBUS_CREDENTIALS_FILE": str(self.auth / f"{role or name.rstrip('0123456789')}.env")}
        env = self.base_env() | (env or {}) | creds
        service = Service(name, [VOLTBUS, *args], env, self.work / f"{name}.log", health)
        self.services[name] = service
        return service

    def start(self, name: str, deadline_s: float = 90.0) -> None:
        """Start a service and wait until it is healthy (or fail with its last log lines)."""
        service = self.services[name]
        service.start()

        def healthy() -> bool:  # another process's health endpoint, polled
            if service.proc is not None and service.proc.poll() is not None:
                raise AssertionError(f"{name} exited with {service.proc.returncode}")
            return service.healthy()

        try:
            wait_until(healthy, deadline_s, f"{name} to be healthy", every=0.1)
        except AssertionError as exc:  # either way, with the service's last log lines
            raise AssertionError(f"{exc}:\n{service.tail()}") from None

    def stop(self) -> None:
        """Stop every service (dependents first), then the bus."""
        for service in reversed(list(self.services.values())):
            service.stop()
        if self.server is not None:
            self.server.stop()


def training_system(work: Path, run_id: str, steps: int, runners: int = 2, env: dict[str, str] | None = None) -> System:
    """Coordinator, projector, CPU inference (following versions), gateway, runners, a learner and the
    dashboard of the arith_rl example: a small GRPO run (``steps`` steps of 2 tasks x 3 rollouts)."""
    s = System(work, extra_env=env or {})
    s.start_bus()
    inference, gateway, projector = s.port("inference"), s.port("gateway"), s.port("projector")
    s.add("coordinator", ["coordinator"], {"VOLTBUS_COORDINATOR__TICK_S": "0.2"})
    s.add(
        "projector",
        ["projector", "--db", str(work / "projection.duckdb")],
        {"VOLTBUS_PROJECTOR__PORT": str(projector)},
        health=f"http://127.0.0.1:{projector}/health",
    )
    s.add(
        "inference",
        ["inference", "--model", str(EXAMPLE / "model"), "--follow-resources"],
        {"VOLTBUS_INFERENCE__PORT": str(inference), "VOLTBUS_INFERENCE__SERVED_MODEL_NAME": "policy"},
        health=f"http://127.0.0.1:{inference}/healthz",
    )
    s.add(
        "gateway",
        ["gateway", "--upstream", f"http://127.0.0.1:{inference}/v1"],
        {"VOLTBUS_GATEWAY__PORT": str(gateway)},
        health=f"http://127.0.0.1:{gateway}/healthz",
    )
    for i in range(1, runners + 1):
        s.add(
            f"runner{i}",
            ["runner", "--agent", "tests/reliability/agents.py:slow_arith_agent", "-n", "4"],
            {"VOLTBUS_RUNNER__WORKER_PREFIX": f"r{i}", "VOLTBUS_RUNNER__HEARTBEAT_S": "0.5",
             "VOLTBUS_RUNNER__CLAIM_WAIT_S": "0.2"},
        )  # fmt: skip
    dashboard = s.port("dashboard")
    s.add(
        "dashboard",
        ["dashboard", "--port", str(dashboard)],
        health=f"http://127.0.0.1:{dashboard}/api/overview",  # it answers only with the projector's data
    ).health_headers = s.dashboard_auth()
    s.add(
        "learner",
        ["learner", "--tasks", str(EXAMPLE / "tasks.jsonl"), "--model", str(EXAMPLE / "model"),
         "--run-id", run_id, "--steps", str(steps)],
        {
            "VOLTBUS_LEARNER__GATEWAY_URL": f"http://127.0.0.1:{gateway}/v1",
            "VOLTBUS_LEARNER__INFERENCE_URLS": f"http://127.0.0.1:{inference}",
            "VOLTBUS_LEARNER__WEIGHTS_DIR": str(work / "weights"),
            "VOLTBUS_LEARNER__TASKS_PER_STEP": "2",
            "VOLTBUS_LEARNER__GROUP_SIZE": "3",
            "VOLTBUS_LEARNER__ROLLOUT_TIMEOUT_S": "120",
            "VOLTBUS_LEARNER__LR": "5e-4",
            "VOLTBUS_LEARNER__ATTEMPT_UNRESPONSIVE_S": "3",
        },
    )  # fmt: skip
    return s


async def sql(system: System, text: str, min_seq: dict[str, int] | None = None) -> list[dict[str, object]]:
    """Rows of a read-only query through the projector's /sql endpoint (after ``min_seq`` is applied)."""
    import pyarrow as pa

    body = {"sql": text, "min_seq": min_seq or {}, "timeout": 60}
    token = {"Authorization": f"Bearer {system.token}"}
    async with httpx.AsyncClient() as http:
        url = f"http://127.0.0.1:{system.port('projector')}/sql"
        response = await http.post(url, json=body, headers=token, timeout=90)
    assert response.status_code == 200, response.text
    return pa.ipc.open_stream(response.content).read_all().to_pylist()


def bus_system(work: Path, env: dict[str, str] | None = None, url: str | None = None) -> System:
    """The bus with a coordinator, a projector and one runner of the echo agent (4 slots); the services
    connect to ``url`` when given (a proxy in front of the server), else to the server."""
    s = System(work, extra_env=env or {}, url=url)
    s.start_bus()
    projector = s.port("projector")
    s.add("coordinator", ["coordinator"], {"VOLTBUS_COORDINATOR__TICK_S": "0.2"})
    s.add(
        "projector",
        ["projector", "--db", str(work / "projection.duckdb")],
        {"VOLTBUS_PROJECTOR__PORT": str(projector)},
        health=f"http://127.0.0.1:{projector}/health",
    )
    s.add(
        "runner1",
        ["runner", "--agent", "tests/reliability/agents.py:echo_agent", "-n", "4"],
        {"VOLTBUS_RUNNER__WORKER_PREFIX": "r1", "VOLTBUS_RUNNER__HEARTBEAT_S": "0.5",
         "VOLTBUS_RUNNER__CLAIM_WAIT_S": "0.2"},
    )  # fmt: skip
    return s
