"""A stand-in runner process for crash tests: claims one rollout, heartbeats, and waits to be killed."""

from __future__ import annotations

import asyncio
import sys

from voltbus.services.settings import NatsSettings
from voltbus.store import connect


async def main(url: str, namespace: str) -> None:
    store = await connect(settings=NatsSettings(url=url, namespace=namespace))
    claimed = None
    while claimed is None:
        claimed = await store.dequeue_rollout(worker_id="doomed")
    await store.heartbeat(claimed.rollout_id, claimed.attempt.attempt_id, "doomed")
    print(claimed.rollout_id, claimed.attempt.attempt_id, flush=True)
    while True:  # a busy agent: heartbeats until SIGKILL
        await asyncio.sleep(0.05)  # the heartbeat period, not synchronization
        await store.heartbeat(claimed.rollout_id, claimed.attempt.attempt_id, "doomed")


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1], sys.argv[2]))
