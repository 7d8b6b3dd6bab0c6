"""``voltbus up``: docker-compose.yml's topology as local processes, supervised.

The ``nats`` service is the embedded nats-server; every other service runs its compose command
(``compose.py`` beside this module localizes it) in its own process group, logs prefixed with its name. Each
service is started once what it depends on is ready (bus up, or its health URL answering 200), within
a deadline. Ctrl-C or SIGTERM stops everything (SIGTERM to each group, SIGKILL after a grace period);
a service that dies is reported with its exit code and last lines, and the rest are stopped.

Credentials come from the compose file's one-shot ``credentials`` service, run first like compose runs it
(its dependents start once it exited 0): it creates what is missing in ``<data dir>/auth`` (or ``VB_AUTH_DIR``),
each service reads its role's file, and the embedded server includes the ``auth.conf`` mounted at ``AUTH_MOUNT``.
"""

from __future__ import annotations

import collections
import os
import re
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path

import httpx

from voltbus.schemas.errors import BusStartFailed, VoltbusError
from voltbus.services.settings import BusSettings

from .compose import AUTH_MOUNT, VOLTBUS, Service, start_order
from .natsauth import read_env_file
from .natsserver import NatsServer

_COLORS = [36, 33, 35, 32, 34, 91, 96, 93, 95, 92]
_REFUSED = re.compile(r"Violation|authentication error")
"""What nats-server logs when it refuses a permission or a login."""


class ServiceFailed(VoltbusError):
    """A service did not come up, or died."""


class Child:
    """One process of a service: its process group, its log tail, its prefixed output."""

    def __init__(self, label: str, service: Service, cwd: Path, color: int | None, wake: threading.Event) -> None:
        self.label, self.service, self.tail = label, service, collections.deque[str](maxlen=20)
        self.prefix = f"\x1b[{color}m{label:<12}|\x1b[0m " if color else f"{label:<12}| "
        env = os.environ | service.env | {"PYTHONUNBUFFERED": "1"}
        self.proc = subprocess.Popen(
            service.argv, cwd=cwd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, start_new_session=True
        )
        self._wake = wake
        threading.Thread(target=self._drain, daemon=True).start()

    def _drain(self) -> None:
        assert self.proc.stdout is not None
        for raw in self.proc.stdout:
            line = raw.decode(errors="replace").rstrip()
            self.tail.append(line)
            sys.stdout.write(self.prefix + line + "\n")
            sys.stdout.flush()
        self.proc.wait()
        self._wake.set()

    def signal(self, sig: int) -> None:
        """Send ``sig`` to the whole process group."""
        try:
            os.killpg(self.proc.pid, sig)
        except ProcessLookupError:
            pass

    def last_lines(self) -> str:
        return "\n".join(f"    {line}" for line in self.tail) or "    (no output)"


class Up:
    """The running topology."""

    def __init__(self, services: dict[str, Service], cwd: Path, data_dir: Path, say: Callable[[str], None]) -> None:
        self.services, self.cwd, self.data_dir, self.say = services, cwd, data_dir, say
        self.children: list[Child] = []
        self.done: set[int] = set()
        """Process ids of the one-shot jobs that exited 0 during the start."""
        self.bus: NatsServer | None = None
        self.wake, self.stopping = threading.Event(), threading.Event()
        self.color = sys.stdout.isatty() and not os.environ.get("NO_COLOR")

    def start(self, deadline_s: float) -> None:
        """Start every service in dependency order, each once its dependencies are ready."""
        order = start_order(self.services)
        for n, name in enumerate(order, 1):
            service, began = self.services[name], time.monotonic()
            self.say(f"up: starting {name} ({n}/{len(order)})")
            for path in service.volumes.values():
                path.mkdir(parents=True, exist_ok=True)
            for port in service.host_ports:
                check_free(name, port)
            where = self._start_bus(service, deadline_s) if name == "nats" else self._start(service, n, deadline_s)
            self.say(f"up: {name} ready in {time.monotonic() - began:.1f}s{where}")

    def _start_bus(self, service: Service, deadline_s: float) -> str:
        port, monitor = (service.host_ports + [4222])[0], 0  # no monitor (compose publishes none): it lists users
        stores = [path for target, path in service.volumes.items() if target != AUTH_MOUNT]
        auth = service.volumes.get(AUTH_MOUNT)
        bus = BusSettings(data_dir=next(iter(stores), self.data_dir / "nats"), port=port, auth_dir=auth)
        self.bus = NatsServer(bus.model_copy(update={"monitor_port": monitor}), 4 * 1024 * 1024)
        try:
            self.bus.start(timeout=deadline_s)
        except BusStartFailed as exc:
            raise ServiceFailed(f"nats did not come up: {exc}") from None
        return f" at {self.bus.url}"

    def _start(self, service: Service, n: int, deadline_s: float) -> str:
        color = _COLORS[n % len(_COLORS)] if self.color else None
        for i in range(service.replicas):
            label = service.name if service.replicas == 1 else f"{service.name}.{i + 1}"
            self.children.append(Child(label, service, self.cwd, color, self.wake))
        if service.once:
            self._wait_done(self.children[-1], time.monotonic() + deadline_s)
            return " (done)"
        if service.health_url:
            self._wait_healthy(service, time.monotonic() + deadline_s)
            return f" ({service.health_url})"
        return f" ({service.replicas} processes)" if service.replicas > 1 else ""

    def _wait_healthy(self, service: Service, deadline: float) -> None:
        mine = [c for c in self.children if c.service is service]
        while time.monotonic() < deadline and not self.stopping.is_set():
            for child in mine:
                if child.proc.poll() is not None:
                    raise ServiceFailed(self._died(child))
            try:
                if httpx.get(service.health_url or "", timeout=1.0).status_code == 200:
                    return
            except httpx.HTTPError:
                pass
            self.wake.wait(0.2)  # a poll interval; a child's exit ends it early
        if self.stopping.is_set():
            raise ServiceFailed(f"interrupted while waiting for {service.name}")
        last = mine[0].last_lines() if mine else ""
        raise ServiceFailed(f"{service.name} did not become healthy at {service.health_url} in time:\n{last}")

    def _wait_done(self, child: Child, deadline: float) -> None:
        """Wait for a one-shot job to exit 0 (compose's ``service_completed_successfully``)."""
        while child.proc.poll() is None and time.monotonic() < deadline and not self.stopping.is_set():
            self.wake.wait(0.2)  # a poll interval; the child's exit ends it early
            self.wake.clear()
        if child.proc.returncode == 0:
            self.done.add(child.proc.pid)
            return
        if self.stopping.is_set():
            raise ServiceFailed(f"interrupted while waiting for {child.label}")
        if child.proc.returncode is None:
            raise ServiceFailed(f"{child.label} did not finish in time:\n{child.last_lines()}")
        raise ServiceFailed(self._died(child))

    def _died(self, child: Child) -> str:
        return f"{child.label} exited with code {child.proc.returncode}; last lines:\n{child.last_lines()}"

    def supervise(self, keep_going: bool, exit_from: str | None = None) -> int:
        """Wait until a stop is asked (return 0), a service dies (return 1, unless ``keep_going``), or
        the ``exit_from`` service exits (return its exit code, like ``docker compose up --exit-code-from``)."""
        reported = set(self.done)
        while not self.stopping.is_set():
            self.wake.wait(1.0)
            self.wake.clear()
            for child in self.children:
                code = child.proc.poll()
                if code is None or child.proc.pid in reported:
                    continue
                reported.add(child.proc.pid)
                if child.service.name == exit_from:
                    self.say(f"up: {child.label} exited with code {code}; stopping the rest")
                    return code
                if code == 0:
                    self.say(f"up: {child.label} finished (exit 0)")
                    continue
                self.say(f"up: {self._died(child)}")
                if not keep_going:
                    return 1
            if self.bus and self.bus.proc and self.bus.proc.poll() is not None:
                self.say(f"up: nats exited with code {self.bus.proc.returncode}: {self.bus._last_error()}")
                return 1
            if self.children and len(reported) == len(self.children) and not self.bus:
                return 1 if any(c.proc.returncode for c in self.children) else 0
        return 0

    def stop(self, grace_s: float = 10.0) -> None:
        """SIGTERM every process group (dependents first), SIGKILL what is left after ``grace_s``."""
        for child in reversed(self.children):
            child.signal(signal.SIGTERM)
        deadline = time.monotonic() + grace_s
        for child in reversed(self.children):
            try:
                child.proc.wait(max(0.0, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                self.say(f"up: {child.label} did not stop in {grace_s:.0f}s; killing it")
            child.signal(signal.SIGKILL)
            child.proc.wait()
        if self.bus:
            self.bus.stop(timeout=grace_s)
            refused = [line.split("] ", 1)[-1] for line in self.bus.tail if _REFUSED.search(line)]
            if refused:  # a role missing a permission its job needs, or a client without the right user
                self.say(f"up: the bus refused operations ({len(refused)} in its log tail); the last: {refused[-1]}")


def select(services: dict[str, Service], names: list[str] | None, profiles: list[str]) -> dict[str, Service]:
    """The services asked for (default: every one without a profile, plus those of ``profiles``) and the one-shot
    jobs they wait for; a service that runs another image than voltbus's (vLLM) is refused: it needs its container."""
    if names:
        unknown = [n for n in names if n not in services]
        if unknown:
            raise ServiceFailed(f"no service {', '.join(unknown)} in the compose file (it has {', '.join(services)})")
        chosen = {n: s for n, s in services.items() if n in names}
    else:
        chosen = {n: s for n, s in services.items() if not s.profiles or set(s.profiles) & set(profiles)}
    jobs = {d for s in chosen.values() for d in s.depends_on if d in services and services[d].once}
    chosen |= {n: s for n, s in services.items() if n in jobs}  # compose runs them too: they make the credentials
    foreign = [n for n, s in chosen.items() if n != "nats" and s.argv[: len(VOLTBUS)] != VOLTBUS]
    if foreign:
        raise ServiceFailed(
            f"{', '.join(foreign)} runs its own image, not a voltbus command: start it with docker compose "
            "(or by hand) and name the others with --services"
        )
    return chosen


def summary(up: Up, took_s: float) -> str:
    """The one line said once everything is ready."""
    procs = len([c for c in up.children if not c.service.once]) + (1 if up.bus else 0)
    running = [s for s in up.services.values() if not s.once]
    parts = [f"up: {len(running)} services ({procs} processes) ready in {took_s:.1f}s"]
    if up.bus:
        parts.append(f"bus at {up.bus.url}")
    for name, what, path in [
        ("projector", "SQL", "/sql"),
        ("dashboard", "dashboard", "/"),
        ("gateway", "gateway", "/v1"),
    ]:
        if name in up.services and up.services[name].host_ports:
            path += _sign_in(up) if name == "dashboard" else ""
            parts.append(f"{what} at http://127.0.0.1:{up.services[name].host_ports[0]}{path}")
    return "; ".join(parts) + "; Ctrl-C to stop"


def _sign_in(up: Up) -> str:
    """The dashboard's sign-in query (``?token=...``) when the deployment generated its token."""
    auth_dir = up.bus.bus.auth_dir if up.bus else None
    env = auth_dir / "dashboard.env" if auth_dir else None
    token = read_env_file(env).get("VOLTBUS_DASHBOARD__TOKEN") if env and env.is_file() else None
    return f"?token={token}" if token else ""


def check_free(name: str, port: int) -> None:
    """Refuse to start ``name`` on a port another process holds: its answers are not this service's readiness."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind(("127.0.0.1", port))
        except OSError:
            var = f"VB_{name.upper().replace('-', '_')}_PORT"
            raise ServiceFailed(
                f"{name}'s port {port} is in use by another process: stop it, or give {name} another port with "
                f"{var}=<port> (the VB_* variables: docs/deployment.md)"
            ) from None


def host_env(up: Up) -> dict[str, str]:
    """What a command on this machine needs to reach the topology: the bus URL, its namespace, the projector."""
    found = {"VOLTBUS_NATS__URL": up.bus.url} if up.bus else {}
    if namespace := next((s.env.get("VOLTBUS_NATS__NAMESPACE") for s in up.services.values()), None):
        found["VOLTBUS_NATS__NAMESPACE"] = namespace
    projector = up.services.get("projector")
    if projector is not None and projector.health_url:
        found["VOLTBUS_PROJECTOR__URL"] = projector.health_url.rsplit("/", 1)[0]
    return found


def write_host_env(path: Path, values: dict[str, str]) -> None:
    """Set ``values`` in the env file at ``path`` (replacing earlier lines of the same names, keeping the rest)."""
    keep = [line for line in path.read_text().splitlines() if line.split("=", 1)[0].strip() not in values]
    path.write_text("\n".join(keep + [f"{k}={v}" for k, v in values.items()]) + "\n")


def run_up(services: dict[str, Service], cwd: Path, data_dir: Path, deadline_s: float, keep_going: bool,
           say: Callable[[str], None], exit_from: str | None = None) -> int:  # fmt: skip
    """Start ``services``, supervise them until Ctrl-C / SIGTERM or a death, stop them all; the exit code."""
    up = Up(services, cwd, data_dir, say)

    def request_stop(*_: object) -> None:
        up.stopping.set()
        up.wake.set()

    previous = {sig: signal.signal(sig, request_stop) for sig in (signal.SIGINT, signal.SIGTERM)}
    began, code = time.monotonic(), 1
    try:
        up.start(deadline_s)
        admin = up.bus.bus.auth_dir / "admin.env" if up.bus and up.bus.bus.auth_dir else None
        if admin is not None and admin.is_file():  # written before the summary, which says the services are ready
            write_host_env(admin, host_env(up))  # the bus and projector of this machine, for voltbus commands
        say(summary(up, time.monotonic() - began))
        if admin is not None:
            needs = "the bus requires a user, the gateway a key, SQL and the dashboard a token"
            say(f"up: {needs}; yours (with the bus URL): set -a; . {admin}; set +a")
        code = up.supervise(keep_going, exit_from)
    except ServiceFailed as exc:
        code = 0 if up.stopping.is_set() else 1
        say(f"up: error: {exc}")
    finally:
        say("up: stopping")
        up.stop()
        for sig, handler in previous.items():
            signal.signal(sig, handler)
    if up.stopping.is_set() and code == 0:
        say("up: stopped")
    if db := projection_file(services):
        curve = "SELECT step, round((metrics->>'reward_mean')::DOUBLE, 2) AS reward FROM steps ORDER BY step"
        say(f'up: the projection stays in {db}; the reward curve: voltbus sql --db {db} "{curve}"')
    return code


def projection_file(services: dict[str, Service]) -> str | None:
    """The projector's DuckDB file (its ``--db`` argument), if a projector ran."""
    argv = services["projector"].argv if "projector" in services else []
    return argv[argv.index("--db") + 1] if "--db" in argv[:-1] else None
