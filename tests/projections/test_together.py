"""Both streams' batches in one transaction (``Projector.apply_together``, used by the follower when both wait
for the writer): the same tables as each alone, one commit instead of two, and a refused batch lands nothing
together and is then applied alone (its poison quarantined)."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pyarrow as pa

from tests.benchmarks.bench_projector import read_all
from voltbus.services.eventlog import Envelope
from voltbus.services.projector.follow import Following
from voltbus.services.projector.projector import Projector
from voltbus.store import Store

from ..conftest import wait_for
from .conftest import dump
from .test_lean import call_with
from .workload import write


class Counting(Projector):
    """A projector that records the checkpoints of each transaction it commits."""

    def __init__(self, path: Path) -> None:
        super().__init__(path)
        self.transactions: list[list[str]] = []

    def _commit(self, blocks_: list[tuple[str, pa.Table]], checkpoints: list[tuple[str, int, float]], *rest) -> None:  # type: ignore[no-untyped-def]
        super()._commit(blocks_, checkpoints, *rest)
        self.transactions.append([stream for stream, _, _ in checkpoints])


async def stored(store: Store) -> dict[str, list[Envelope]]:
    """Every event of the mixed workload (every table gets rows, attempts end), per stream."""
    await write(store, 6)
    ends = {s: await store.log.feed(s).last_seq() for s in ("control", "spans")}
    return {s: await read_all(store.log, s, end) for s, end in ends.items()}


async def test_both_streams_in_one_transaction_make_the_tables_each_alone_makes(store: Store, tmp_path: Path) -> None:
    items = await stored(store)
    together, alone = Counting(tmp_path / "together.duckdb"), Counting(tmp_path / "alone.duckdb")
    try:
        assert together.apply_together({"control": items["control"], "spans": items["spans"]})
        alone.apply("spans", items["spans"])  # the other order: telemetry first, then the attempts end
        alone.apply("control", items["control"])
        assert together.transactions == [["control", "spans"]] and len(alone.transactions) == 2
        assert together.positions == alone.positions == {s: len(items[s]) for s in items}
        for projector in (together, alone):  # attempts that ended after the last span waited for more of it
            projector.release_held()  # (the follower releases them when the spans stream has nothing more)
        tables = dump(together.con)
        assert tables == dump(alone.con)
        assert tables["triplets"] and tables["training_attempts"] and tables["spans"]  # training rows were made
    finally:
        together.close()
        alone.close()


async def test_a_refused_batch_lands_nothing_together_and_then_alone_all_but_its_poison(
    store: Store, tmp_path: Path
) -> None:
    items = await stored(store)
    shard = store.topology.span_shard("ro-1")
    poison = call_with(prompt_ids=f"[1,{2**31}]")  # beyond the INTEGER[] column
    await store.log.js.publish(shard, poison)
    spans = await read_all(store.log, "spans", len(items["spans"]) + 1)
    projector = Counting(tmp_path / "p.duckdb")
    try:
        assert not projector.apply_together({"control": items["control"], "spans": spans})
        assert projector.positions == {"control": 0, "spans": 0} and projector.transactions == []
        assert dump(projector.con)["rollouts"] == []
        projector.apply("control", items["control"])
        projector.apply("spans", spans)
        tables = dump(projector.con)
        assert [(q[0], q[1], q[4]) for q in tables["quarantine"]] == [("spans", len(spans), poison)]
        assert projector.positions == {"control": len(items["control"]), "spans": len(spans)}
        assert len(tables["rollouts"]) > 0
    finally:
        projector.close()


async def test_the_follower_applies_both_waiting_batches_in_one_transaction(store: Store, tmp_path: Path) -> None:
    items = await stored(store)
    projector = Counting(tmp_path / "p.duckdb")
    following = Following(projector, store.log, None, None, None, 100, 0.01, 0)
    try:
        async with following.lock:  # the writer is busy: both streams' batches wait for it
            tasks = [asyncio.create_task(following.apply_waiting(s, items[s])) for s in ("control", "spans")]
            await wait_for(lambda: len(following.waiting) == 2)
        await asyncio.gather(*tasks)
        assert projector.transactions == [["control", "spans"]]
        assert projector.positions == {s: len(items[s]) for s in items} and following.waiting == {}
    finally:
        projector.close()
