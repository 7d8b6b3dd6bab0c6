"""Read the log of the bus at ``VOLTBUS_NATS__URL`` once with the metrics consumer, print its metrics, exit.

.venv/bin/python examples/metrics_consumer/run.py
"""

from __future__ import annotations

import asyncio
import json
import time
from typing import Any

from app import Metrics, build_app  # examples/metrics_consumer/app.py (this file's folder is on sys.path)

from voltbus.schemas.subjects import Topology
from voltbus.services.settings import NatsSettings, Settings


async def main(settings: NatsSettings | None = None, timeout: float = 60.0) -> dict[str, Any]:
    """Consume both streams up to where they ended when it started; returns (and prints) the metrics."""
    settings = settings or Settings().nats
    metrics = Metrics()
    app = build_app(settings, metrics)
    async with app.broker:
        await app.broker.start()
        js, topology = app.broker.connection.jetstream(), Topology(namespace=settings.namespace)
        names = {"control": topology.control_stream, "spans": topology.spans_stream}
        ends = {stream: (await js.stream_info(name)).state.last_seq for stream, name in names.items()}
        deadline = time.monotonic() + timeout
        while any(metrics.positions[s] < end for s, end in ends.items()):
            if time.monotonic() > deadline:
                raise TimeoutError(f"read {metrics.positions} of {ends} in {timeout} s")
            await asyncio.sleep(0.05)
    print(json.dumps(metrics.snapshot()))
    return metrics.snapshot()


if __name__ == "__main__":
    asyncio.run(main())
