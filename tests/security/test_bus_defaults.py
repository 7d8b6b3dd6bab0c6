"""The bus's defaults (finding 9): ``voltbus nats`` without auth serves loopback only and says so; the
monitoring port is off by default and, when turned on, binds loopback only.

nats-server 2.15's monitoring port has no login and no way to hide ``/connz?auth=true``'s user names, so an
open monitor on a reachable interface tells anyone every role's user name (docs/security.md).
"""

from __future__ import annotations

import asyncio
import os
import socket
import subprocess
from pathlib import Path

import httpx
import pytest

from voltbus.schemas.subjects import Topology
from voltbus.services.ops.natsauth import init_auth
from voltbus.services.ops.natsserver import NatsServer
from voltbus.services.settings import BusSettings

from .test_bus_cli import VOLTBUS
from .test_bus_permissions import NS


def clean_env() -> dict[str, str]:
    return {k: v for k, v in os.environ.items() if not k.startswith("VOLTBUS_")}


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def reachable(host: str, port: int) -> bool:
    """Whether something accepts a TCP connection at ``host:port``."""
    try:
        with socket.create_connection((host, port), timeout=5):
            return True
    except OSError:
        return False


def public_address() -> str | None:
    """An address of this machine other than loopback (the source address of its default route), if any."""
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sock:
        try:
            sock.connect(("192.0.2.1", 9))  # a UDP connect sends nothing; it only picks the route
        except OSError:
            return None
        address = sock.getsockname()[0]
    return None if address.startswith("127.") or address == "0.0.0.0" else address


async def test_nats_without_auth_serves_loopback_only_and_warns(tmp_path: Path) -> None:
    args = ["nats", "--port", "0", "--data-dir", str(tmp_path / "d")]
    proc = await asyncio.create_subprocess_exec(
        *VOLTBUS, *args, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=clean_env()
    )
    assert proc.stdout is not None and proc.stderr is not None
    try:
        ready = (await asyncio.wait_for(proc.stdout.readline(), timeout=30)).decode()
    finally:
        proc.terminate()
        _, err = await asyncio.wait_for(proc.communicate(), timeout=30)
    stderr = err.decode()
    assert "ready at nats://127.0.0.1:" in ready, ready + stderr
    assert "Listening for client connections on 127.0.0.1:" in stderr
    warnings = [line for line in stderr.splitlines() if line.startswith("voltbus: warning:")]
    assert len(warnings) == 1, stderr  # no authentication; no monitor to warn about
    assert "no authentication" in warnings[0] and "voltbus nats auth init" in warnings[0] and "--auth" in warnings[0]
    assert "http monitor" not in stderr and "monitoring" not in ready
    assert "http:" not in (tmp_path / "d" / "nats-server.conf").read_text()
    port = int(ready.split("ready at nats://127.0.0.1:")[1].split()[0])
    assert not reachable("127.0.0.1", port)  # a SIGTERM right after "ready" stopped the server too (it once leaked)


@pytest.mark.parametrize("host", ["0.0.0.0", "::"])
def test_nats_refuses_a_reachable_interface_without_auth(tmp_path: Path, host: str) -> None:
    port = free_port()
    args = ["nats", "--host", host, "--port", str(port), "--data-dir", str(tmp_path / "d")]
    result = subprocess.run([*VOLTBUS, *args], capture_output=True, text=True, timeout=60, env=clean_env())
    assert result.returncode == 1, result.stdout + result.stderr
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("voltbus: error: refusing to serve the bus on"), result.stderr
    assert "voltbus nats auth init" in lines[0] and "--auth" in lines[0]
    assert not reachable("127.0.0.1", port)  # nothing was started
    assert not (tmp_path / "d" / "nats-server.conf").exists()


def test_with_auth_any_interface_is_allowed_and_the_monitor_stays_on_loopback(tmp_path: Path) -> None:
    init_auth(tmp_path / "auth", Topology(namespace=NS), rounds=4)
    monitor = free_port()
    bus = BusSettings(data_dir=tmp_path / "d", host="0.0.0.0", port=0, monitor_port=monitor, auth_dir=tmp_path / "auth")
    server = NatsServer(bus, max_payload=1024 * 1024).start()
    try:
        assert any(f"Starting http monitor on 127.0.0.1:{monitor}" in line for line in server.tail), list(server.tail)
        assert httpx.get(f"http://127.0.0.1:{monitor}/healthz", timeout=10).status_code == 200
        address = public_address()
        if address is not None:  # from another machine's point of view: the client port answers, the monitor not
            assert reachable(address, server.port or 0)
            assert not reachable(address, monitor)
    finally:
        server.stop()


def test_the_monitor_is_off_by_default(tmp_path: Path) -> None:
    init_auth(tmp_path / "auth", Topology(namespace=NS), rounds=4)
    assert BusSettings().monitor_port == 0
    server = NatsServer(BusSettings(data_dir=tmp_path / "d", port=0, auth_dir=tmp_path / "auth"), 1024 * 1024).start()
    try:
        assert server.monitor_port is None
        assert not any("http monitor" in line for line in server.tail), list(server.tail)
    finally:
        server.stop()
