"""A 3-node NATS cluster from docs/cluster/: voltbus streams with 3 replicas survive kill -9 of a node.

The three nodes run the shipped configs (ports and store dirs swapped for free ones), so the files
a user copies are the files tested.
"""

from __future__ import annotations

import asyncio
import contextlib
import re
import subprocess
import threading
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import TypeVar

import nats.errors
import pytest

import voltbus
from voltbus.schemas.errors import StreamConfigMismatch, VoltbusError
from voltbus.services.eventlog import Envelope, EventLog
from voltbus.services.ops.natsserver import find_binary
from voltbus.services.settings import NatsSettings

from .conftest import free_port, wait_for
from .services.test_eventlog import queued

CONFIGS = Path(__file__).parent.parent / "docs" / "cluster"
NODES = ("n1", "n2", "n3")
T = TypeVar("T")


class Node:
    """One nats-server of the cluster, started from a shipped config with its ports remapped."""

    def __init__(self, name: str, config: str, ports: dict[str, int], tmp: Path) -> None:
        self.name = name
        self.client_port = ports[re.search(r"^listen: 127\.0\.0\.1:(\d+)", config, re.M)[1]]  # type: ignore[index]
        for old, new in ports.items():
            config = config.replace(f"127.0.0.1:{old}", f"127.0.0.1:{new}")
        config = config.replace(f'"./data/{name}"', f'"{tmp / name}"')
        self.config_path = tmp / f"{name}.conf"
        self.config_path.write_text(config)
        self.ready = threading.Event()
        self.proc: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"nats://127.0.0.1:{self.client_port}"

    def start(self) -> None:
        self.proc = subprocess.Popen(
            [str(find_binary()), "-c", str(self.config_path)], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE
        )
        threading.Thread(target=self._watch, args=(self.proc,), daemon=True).start()

    def _watch(self, proc: subprocess.Popen[bytes]) -> None:
        assert proc.stderr is not None
        for line in proc.stderr:
            if b"Server is ready" in line:
                self.ready.set()

    def kill(self) -> None:
        if self.proc and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()


def start_cluster(tmp: Path) -> dict[str, Node]:
    """The three shipped nodes on free loopback ports, each ready to serve clients."""
    texts = {name: (CONFIGS / f"{name}.conf").read_text() for name in NODES}
    shipped = sorted({p for text in texts.values() for p in re.findall(r"127\.0\.0\.1:(\d+)", text)})
    ports = {p: free_port() for p in shipped}
    nodes = {name: Node(name, text, ports, tmp) for name, text in texts.items()}
    for node in nodes.values():
        node.start()
    for node in nodes.values():
        assert node.ready.wait(20), f"{node.name} did not start"
    return nodes


async def retried(connect: Callable[[], Awaitable[T]], timeout: float = 30.0) -> T:
    """Connect and check the streams, again while the cluster elects a JetStream leader (the stream
    API does not answer during an election; a service's restart policy does the same)."""

    async def connected() -> T | None:
        with contextlib.suppress(VoltbusError, nats.errors.Error, TimeoutError):
            return await connect()
        return None

    return await wait_for(connected, timeout, "the cluster to elect a JetStream leader and answer", every=0.2)


async def check_replica_changes(settings: NatsSettings) -> None:
    """A client with the default of 1 replica leaves replicated streams alone; a higher setting scales a
    single-replica deployment up, except its spans stream, which is refused by name."""
    plain = await EventLog.connect(settings.model_copy(update={"replicas": 1}))
    try:
        assert (await plain.js.stream_info(plain.topology.spans_stream)).config.num_replicas == 3
    finally:
        await plain.close()
    single = settings.model_copy(update={"replicas": 1, "namespace": "one"})
    await (await EventLog.connect(single)).close()
    with pytest.raises(StreamConfigMismatch, match="ONE_SPANS exists with num_replicas=1"):
        await EventLog.connect(single.model_copy(update={"replicas": 3}))
    log = await EventLog.connect(single)
    try:
        assert (await log.js.stream_info(log.topology.control_stream)).config.num_replicas == 3
    finally:
        await log.close()


@pytest.mark.slow
@pytest.mark.timeout(180)
async def test_three_replicas_survive_kill9_of_the_stream_leader(tmp_path: Path) -> None:
    nodes = start_cluster(tmp_path)
    urls = ",".join(n.url for n in nodes.values())
    settings = NatsSettings(url=urls, namespace="cl", replicas=3, request_timeout_s=2.0, publish_retries=10)
    acked: dict[str, int] = {}
    stop = asyncio.Event()
    log = await retried(lambda: EventLog.connect(settings))

    async def writer(w: int) -> None:
        i = 0
        while not stop.is_set():
            event = queued(f"w{w}-{i}")
            try:
                acked[event.event_id] = (await log.append([event], expected_seq=0)).seq
            except (VoltbusError, nats.errors.Error, TimeoutError):
                await asyncio.sleep(0.05)  # the outcome is settled below by appending the same id again
                continue
            i += 1

    try:
        control = log.topology.control_stream
        info = await log.js.stream_info(control)
        assert info.config.num_replicas == 3 and len(info.cluster.replicas or []) == 2
        for name in (log.topology.spans_stream, log.topology.counters_stream, log.topology.advisories_stream):
            assert (await log.js.stream_info(name)).config.num_replicas == 3
        await check_replica_changes(settings)
        tasks = [asyncio.create_task(writer(w)) for w in range(4)]
        await wait_for(lambda: len(acked) >= 200, timeout=60, what="200 appends on 3 replicas")
        leader = info.cluster.leader
        nodes[leader].kill()
        killed_at, before_kill = time.monotonic(), dict(acked)
        await wait_for(lambda: len(acked) >= len(before_kill) + 200, timeout=90, what="appends after the kill")
        after_s = time.monotonic() - killed_at
        stop.set()
        await asyncio.gather(*tasks)
        stored = [e async for e in log.replay()]
        info = await log.js.stream_info(control)
    finally:
        stop.set()
        await log.close()
    print(f"leader {leader} killed after {len(before_kill)} appends; 200 more took {after_s:.1f}s")
    try:
        ids = [e.event.event_id for e in stored if isinstance(e, Envelope)]
        assert len(ids) == len(stored) == len(set(ids)), "an event is undecodable or stored twice"
        assert set(before_kill) <= set(ids), "an acknowledged event was lost with the node"
        assert set(acked) <= set(ids)
        assert info.cluster.leader != leader and info.cluster.leader in nodes
        assert [r.name for r in info.cluster.replicas or [] if r.offline or not r.current] == [leader]
        # a client whose first URL is the dead node connects to the others and runs the control plane
        dead_first = ",".join([nodes[leader].url] + [n.url for n in nodes.values() if n.name != leader])
        store = await retried(lambda: voltbus.connect(settings=settings.model_copy(update={"url": dead_first})))
        try:
            claimed = await store.dequeue_rollout(worker_id="Worker-0")  # the oldest queued: w0-0
            assert claimed is not None and claimed.rollout_id == "w0-0"
            started = await store.start_rollout({"question": "2+2"}, mode="train", worker_id="Worker-1")
            for ro in (claimed, started):
                await store.update_attempt(ro.rollout_id, ro.attempt.attempt_id, status="succeeded")
            ids = [claimed.rollout_id, started.rollout_id]
            done = await store.wait_for_rollouts(rollout_ids=ids, timeout=10)
            assert [r.status for r in done] == ["succeeded", "succeeded"]
        finally:
            await store.close()
    finally:
        for node in nodes.values():
            node.kill()
