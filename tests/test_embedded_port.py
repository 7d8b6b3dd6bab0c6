"""An embedded bus (``Trainer``, ``voltbus demo`` without a running bus) starts where ``VOLTBUS_NATS__URL`` says
the clients look for it, not on 4222 (issue 28)."""

from __future__ import annotations

from pathlib import Path

from voltbus.services.ops.embedded import start_embedded
from voltbus.services.settings import BusSettings, NatsSettings, Settings

from .conftest import free_port


def test_the_embedded_bus_takes_the_port_of_the_nats_url(tmp_path: Path) -> None:
    port = free_port()
    settings = Settings(nats=NatsSettings(url=f"nats://127.0.0.1:{port}"), bus=BusSettings(data_dir=tmp_path))
    lines: list[str] = []
    server = start_embedded(settings, lines.append)
    try:
        assert server.url == f"nats://127.0.0.1:{port}"
    finally:
        server.stop()
    assert f"started an embedded NATS JetStream at nats://127.0.0.1:{port}" in lines[-1]


def test_an_explicit_bus_port_wins(tmp_path: Path) -> None:
    port, other = free_port(), free_port()
    bus = BusSettings(data_dir=tmp_path, port=other)
    server = start_embedded(Settings(nats=NatsSettings(url=f"nats://127.0.0.1:{port}"), bus=bus), lambda _: None)
    try:
        assert server.url == f"nats://127.0.0.1:{other}"
    finally:
        server.stop()
