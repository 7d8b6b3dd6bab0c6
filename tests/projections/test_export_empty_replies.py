"""The OpenAI fine-tuning JSONL export leaves out a call whose assistant reply is empty (issue 28: it wrote them and
counted them usable), and counts it among the rows without usable text."""

from __future__ import annotations

import json
from pathlib import Path

import msgspec

from voltbus.schemas.base import derive_id
from voltbus.schemas.spans import ModelCalled
from voltbus.services.ops.training_export import export_training
from voltbus.services.settings import Settings
from voltbus.store import Store

from .test_training import rebuild

CHAT = {"messages": [{"role": "user", "content": "2+2?"}]}


def reply(content: str) -> dict[str, object]:
    return {"choices": [{"message": {"role": "assistant", "content": content}}]}


async def test_empty_assistant_replies_are_not_written(store: Store, tmp_path: Path) -> None:
    for content in ("4", "", "  "):
        rollout = await store.enqueue_rollout({"q": content}, mode="train")
        claimed = await store.dequeue_rollout(worker_id="w")
        assert claimed is not None
        rid, aid = claimed.rollout_id, claimed.attempt.attempt_id
        call = ModelCalled(
            event_id=derive_id(rid, "call"), rollout_id=rid, attempt_id=aid, call_id=f"{rid}-c", model="tiny",
            request=msgspec.Raw(json.dumps(CHAT).encode()), response=msgspec.Raw(json.dumps(reply(content)).encode()),
            prompt_ids=[1, 2], response_ids=[3], logprobs=[-0.5], latency_s=0.01, at=1.0,
        )  # fmt: skip
        await store.log.publish_spans([call])
        await store.update_attempt(rollout.rollout_id, aid, status="succeeded")
    (await rebuild(store, tmp_path / "p.duckdb")).close()
    lines: list[str] = []
    to = tmp_path / "sft.jsonl"
    counts = export_training(Settings(), to, "jsonl", "triplets", "TRUE", {}, tmp_path / "p.duckdb", lines.append)
    written = [json.loads(line) for line in to.read_text().splitlines()]
    assert [w["messages"][-1] for w in written] == [{"role": "assistant", "content": "4"}]
    assert counts["written"] == 1 and counts["no_text"] == 2
