"""``voltbus nats auth init`` and ``voltbus nats --auth`` as a user runs them, and the bus over TLS."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.security.certs import self_signed
from voltbus.schemas.errors import BusAuthRefused, BusUnavailable
from voltbus.schemas.subjects import Topology
from voltbus.services.eventlog import EventLog
from voltbus.services.eventlog.connection import connect
from voltbus.services.ops.natsauth import init_auth, read_credentials
from voltbus.services.ops.natsserver import NatsServer
from voltbus.services.settings import BusSettings, NatsSettings

from .test_bus_permissions import NS

VOLTBUS = [sys.executable, "-c", "from voltbus.cli import main; main()"]


def voltbus(*args: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("VOLTBUS_")}
    return subprocess.run([*VOLTBUS, *args], capture_output=True, text=True, timeout=60, env=env)


def test_auth_init_writes_credentials_and_refuses_to_overwrite_them(tmp_path: Path) -> None:
    out = tmp_path / "auth"
    first = voltbus("nats", "auth", "init", "--out", str(out), "--namespace", NS, "--rounds", "4")
    assert first.returncode == 0, first.stderr
    assert "wrote" in first.stdout and (out / "runner.env").is_file()
    password = read_credentials(out, "runner")["VOLTBUS_NATS__PASSWORD"]
    again = voltbus("nats", "auth", "init", "--out", str(out), "--rounds", "4")
    assert again.returncode == 1 and "--force" in again.stderr
    assert read_credentials(out, "runner")["VOLTBUS_NATS__PASSWORD"] == password


async def test_nats_with_auth_requires_a_role(tmp_path: Path) -> None:
    out = tmp_path / "auth"
    init_auth(out, Topology(namespace=NS), rounds=4)
    args = ["nats", "--auth", str(out), "--port", "0", "--monitor-port", "0", "--data-dir", str(tmp_path / "d")]
    env = {k: v for k, v in os.environ.items() if not k.startswith("VOLTBUS_")}
    proc = await asyncio.create_subprocess_exec(
        *VOLTBUS, *args, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, env=env
    )
    assert proc.stdout is not None
    try:
        ready = (await asyncio.wait_for(proc.stdout.readline(), timeout=30)).decode()
        assert "ready at nats://" in ready, ready
        url = ready.split("ready at ")[1].split()[0]
        creds = read_credentials(out, "projector")
        settings = NatsSettings(url=url, namespace=NS, connect_timeout_s=0.5)
        log = await EventLog.connect(
            settings.model_copy(update={"user": "projector", "password": creds["VOLTBUS_NATS__PASSWORD"]})
        )
        assert log.nc.is_connected
        await log.close()
        with pytest.raises(BusAuthRefused):
            await connect(settings)
    finally:
        proc.terminate()
        await asyncio.wait_for(proc.wait(), timeout=10)


async def test_the_bus_over_tls_with_auth(tmp_path: Path) -> None:
    cert, key = self_signed(tmp_path)
    init_auth(tmp_path / "auth", Topology(namespace=NS), rounds=4)
    bus = BusSettings(
        data_dir=tmp_path / "d", port=0, monitor_port=0, auth_dir=tmp_path / "auth", tls_cert=cert, tls_key=key
    )
    server = NatsServer(bus, max_payload=1024 * 1024).start()
    try:
        creds = read_credentials(tmp_path / "auth", "runner")
        settings = NatsSettings(url=server.url, namespace=NS, connect_timeout_s=0.5, user="runner")
        settings.password = creds["VOLTBUS_NATS__PASSWORD"]
        log = await EventLog.connect(settings.model_copy(update={"tls_ca": cert}))
        assert log.nc.is_connected and log.nc._server_info.get("tls_required")
        await log.close()
        with pytest.raises(BusUnavailable):  # no TLS: the server will not talk
            await connect(settings)
    finally:
        server.stop()
