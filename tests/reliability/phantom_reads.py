"""The experiment behind finding 5 of docs/reliability.md: ``python -m tests.reliability.phantom_reads``.

A consumer follows the spans stream while a client publishes; nats-server is killed with -9 and
restarted, ``TRIALS`` times. Printed per trial: messages the consumer read whose sequence no longer
holds the same event in the log (phantom reads), and acknowledged event ids missing from the log.
"""

from __future__ import annotations

import asyncio
import tempfile
import time
from pathlib import Path

from tests.conftest import start_server
from tests.projections.workload import telemetry
from voltbus.services.eventlog import EventLog
from voltbus.services.projector.rewind import check
from voltbus.services.settings import NatsSettings

TRIALS = 6


async def trial(server: object, log: EventLog, feed: object, n: int, seen: dict[int, str]) -> tuple[int, int, str]:
    stop, acked, times = asyncio.Event(), set(), {}

    async def read() -> None:
        while not stop.is_set():
            for item in await feed.batch(500, 0.05):  # type: ignore[attr-defined]
                seen[item.seq] = item.event.event_id
                times[item.seq] = item.time

    async def publish() -> None:
        i = 0
        while not stop.is_set():
            events = [e for k in range(i * 50, i * 50 + 50) for e in telemetry(f"r{n}", "a", k)]
            try:
                await log.publish_spans(events)
                acked.update(e.event_id for e in events)
            except Exception:  # noqa: BLE001 - the bus is down: the outcome is unknown, not acknowledged
                pass
            i += 1

    tasks = [asyncio.create_task(read()), asyncio.create_task(publish())]
    await asyncio.sleep(0.8)  # a random instant of the burst
    killed = time.time()
    server.kill()  # type: ignore[attr-defined]
    server.start()  # type: ignore[attr-defined]
    await asyncio.sleep(1.5)  # publishing and reading go on after the restart
    stop.set()
    await asyncio.gather(*tasks)
    stored = {e.seq: e.event.event_id async for e in log.replay("spans")}  # type: ignore[union-attr]
    phantom = sum(1 for seq, event_id in seen.items() if stored.get(seq) != event_id)
    before = [seq for seq, at in times.items() if at <= killed]  # read from the server that died
    applied = (max(before), times[max(before)]) if before else (0, 0.0)  # a projector's checkpoint then
    found = await check(log, "spans", *applied)
    verdict = f"detected, good to {found.good_to} of {applied[0]}" if found else f"not detected at {applied[0]}"
    first = min((seq for seq, event_id in seen.items() if stored.get(seq) != event_id), default=None)
    return phantom, len(acked - set(stored.values())), f"{verdict} (first phantom seq {first})"


async def main() -> None:
    with tempfile.TemporaryDirectory(prefix="voltbus-phantom-") as store:
        await trials(Path(store))


async def trials(store: Path) -> None:
    server = start_server(store / "nats")
    settings = NatsSettings(url=server.url, namespace="ph", request_timeout_s=1.0, publish_retries=0)
    log, reader = await EventLog.connect(settings), await EventLog.connect(settings)
    feed = await reader.feed("spans").open(1)
    seen: dict[int, str] = {}
    try:
        for n in range(TRIALS):
            phantom, lost, verdict = await trial(server, log, feed, n, seen)
            print(f"trial {n}: read {len(seen)} messages so far, {phantom} phantom reads, {verdict}; {lost} acked lost")
    finally:
        await feed.close()
        await reader.close()
        await log.close()
        server.stop()


if __name__ == "__main__":
    asyncio.run(main())
