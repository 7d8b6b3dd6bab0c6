"""``voltbus backup`` and ``voltbus restore``: a namespace's streams and weights to a directory and back.

The work is in ``services/ops/backup.py`` and ``restore.py``.
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Annotated

import typer

Url = Annotated[str | None, typer.Option("--nats-url", help="NATS URL [env: VOLTBUS_NATS__URL]")]
Namespace = Annotated[
    str | None, typer.Option("--namespace", help="the deployment's namespace [env: VOLTBUS_NATS__NAMESPACE]")
]


async def _run(nats_url: str | None, namespace: str | None, work: str, path: Path, force: bool = False) -> None:
    from voltbus.services.eventlog.connection import connect
    from voltbus.services.eventlog.streams import topology_of
    from voltbus.services.ops.backup import backup
    from voltbus.services.ops.restore import restore

    from .common import say, settings_for

    settings = settings_for(nats_url).nats
    if namespace:
        settings.namespace = namespace
    timeout = max(settings.request_timeout_s, 30.0)
    nc = await connect(settings, name=f"voltbus-{work}")
    try:
        if work == "backup":
            await backup(nc, topology_of(settings), path, say, timeout)
        else:
            replicas = settings.replicas if settings.replicas > 1 else None  # a cluster's copies; else as saved
            await restore(nc, topology_of(settings), path, say, force, timeout, replicas)
    finally:
        await nc.drain()


def backup_command(
    to: Annotated[Path, typer.Option("--to", help="an empty or new directory for the backup")],
    nats_url: Url = None,
    namespace: Namespace = None,
) -> None:
    """Back up every stream of a namespace (control, spans, counters, dead letters, weights) to a directory.

    Uses the server's stream snapshots: sequences, subjects, headers, payloads and timestamps are kept,
    so a restored log replays to the same projections. Safe while services run (each stream is a
    consistent snapshot of its own moment)."""
    asyncio.run(_run(nats_url, namespace, "backup", to))


def restore_command(
    source: Annotated[Path, typer.Option("--from", help="a directory written by voltbus backup")],
    force: Annotated[bool, typer.Option(help="replace streams that already hold messages")] = False,
    nats_url: Url = None,
    namespace: Namespace = None,
) -> None:
    """Restore a backup into a bus (stop the services first): checksums are verified before anything is
    written, and streams that hold messages are refused unless --force.

    With VOLTBUS_NATS__REPLICAS above 1 (a cluster), every stream is restored with that many copies."""
    asyncio.run(_run(nats_url, namespace, "restore", source, force))
