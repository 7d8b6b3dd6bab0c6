"""examples/smollm2_tools: the tool, the tool-call convention and the reward; and ``run.py`` end to end (one GRPO step
on 3 tasks x 2 conversations) on the ChatML/BPE stand-in (tests/examples/chatml_stand_in.py), with the checks
tests/smollm2/test_tools_example.py makes on SmolLM2 itself: every conversation had two or more turns, the recorded
ids decode to the replies, the trained tokens are exactly the sampled ones and the rest (turn separators, tool output)
have mask 0, and the reported prefix-mismatch count is the one a projection rebuilt from the log holds."""

from __future__ import annotations

import asyncio
from collections import defaultdict
from itertools import pairwise
from pathlib import Path
from types import ModuleType
from typing import Any

import msgspec
import pytest

from voltbus.model import load_model_dir
from voltbus.schemas.spans import ModelCalled
from voltbus.services.ops.natsserver import NatsServer
from voltbus.services.projector.client import rebuild, run_sql
from voltbus.services.projector.quality import QUALITY_SQL
from voltbus.services.settings import NatsSettings, Settings
from voltbus.trainer.example import load_module

from .chatml_stand_in import build_stand_in
from .test_smollm2_format import recorded_calls

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "smollm2_tools"
TINY = ["--tasks-per-step", "3", "--group-size", "2"]
"""One GRPO step on 3 tasks x 2 conversations."""


def load(name: str) -> ModuleType:
    return load_module(EXAMPLE / f"{name}.py", f"voltbus_example_smollm2_tools_{name}")


def test_the_tool_and_its_call_convention() -> None:
    agent = load("agent")
    assert agent.calc("17*23") == "391" and agent.calc("1+2*3-4") == "3" and agent.calc("import os") == "error"
    assert agent.tool_call("Sure: calc(17 * 23)") == "17 * 23" and agent.tool_call("It is 391.") is None
    task = {"id": "t", "question": "17*23", "answer": 391}
    assert agent.observation("calc(2*3)", task) == {"role": "tool", "content": "6"}  # the model's call, run
    assert agent.observation("It is 400.", task)["role"] == "user"  # no call: the agent brings the result
    assert "17*23 = 391" in agent.observation("It is 400.", task)["content"]
    assert agent.reward("The answer is 391.", 391) == 1.0 and agent.reward("391 or 392", 391) == 0.0
    assert all(t["answer"] == int(agent.calc(t["question"])) for t in agent.tasks(20))


def run_example(argv: list[str], model_dir: Path, nats_url: str, monkeypatch: Any) -> dict[str, Any]:
    """``run.main`` as a user runs it, on the test's bus."""
    monkeypatch.setenv("VOLTBUS_NATS__URL", nats_url)
    monkeypatch.setenv("VOLTBUS_NATS__REQUEST_TIMEOUT_S", "30")
    return load("run").main(argv, model_dir=model_dir)


def content(call: ModelCalled) -> str:
    return msgspec.json.decode(call.response)["choices"][0]["message"]["content"] or ""


def assert_conversations(calls: list[ModelCalled], tok: Any, conversations: int) -> dict[str, list[ModelCalled]]:
    """Every conversation ran 2-3 turns, each next prompt after an observation; the ids decode to the replies."""
    by_attempt: dict[str, list[ModelCalled]] = defaultdict(list)
    for call in calls:
        assert call.status == "ok", call.error
        assert tok.decode(call.response_ids, skip_special_tokens=True) == content(call)  # what the agent read
        assert len(call.logprobs) == len(call.response_ids) > 0
        by_attempt[call.attempt_id].append(call)
    assert len(by_attempt) == conversations
    for chat in by_attempt.values():
        assert 2 <= len(chat) <= 3
        for later in chat[1:]:
            last = msgspec.json.decode(later.request)["messages"][-1]
            assert last["role"] == "tool" or (last["role"] == "user" and "calculator says" in last["content"])
    return by_attempt


def rebuilt(nats_url: str, namespace: str, db: Path) -> Settings:
    """A projection built from the log alone, into ``db`` (what ``voltbus replay`` does)."""
    settings = Settings(nats=NatsSettings(url=nats_url, namespace=namespace))
    asyncio.run(rebuild(settings, db, say=lambda line: None))
    return settings


def assert_masks(rows: list[dict[str, Any]], calls: dict[str, ModelCalled], tok: Any) -> int:
    """Each row trains exactly its calls' sampled ids (mask 1); everything between them is the next prompt's new
    part (mask 0), with the ChatML turn separators in it. Returns the rows that stitched two or more turns."""
    stitched = 0
    for row in rows:
        chat = [calls[c] for c in row["call_ids"]]
        mask, ids = row["response_mask"], row["response_ids"]
        assert [t for t, m in zip(ids, mask, strict=True) if m == 1] == [t for c in chat for t in c.response_ids]
        assert row["prompt_ids"] == chat[0].prompt_ids
        expected_mask: list[int] = []
        for before, after in pairwise(chat):
            gap = after.prompt_ids[len(before.prompt_ids) + len(before.response_ids) :]
            expected_mask += [1] * len(before.response_ids) + [0] * len(gap)
            observed, brought = tok.decode(gap), msgspec.json.decode(after.request)["messages"][-1]
            assert f"<|im_start|>{brought['role']}\n{brought['content']}<|im_end|>\n" in observed  # tool output: mask 0
            assert observed.endswith("<|im_start|>assistant\n")  # and the turn separators
        assert mask == expected_mask + [1] * len(chat[-1].response_ids)
        stitched += len(chat) > 1
    return stitched


def assert_report(result: dict[str, Any], calls: list[ModelCalled], tok: Any, nats_url: str, db: Path) -> int:
    """The run's report is what a projection rebuilt from the log says, and its masks are the sampled tokens; returns
    the training rows that stitched two or more turns."""
    report, conversations = result["inspected"], 6
    by_attempt = assert_conversations(calls, tok, conversations)
    settings = rebuilt(nats_url, result["namespace"], db)
    agent = load("agent")
    params = {"run": result["run_id"], "tool_call": agent.TOOL_CALL.pattern}
    [again] = run_sql(settings, load("run").REPORT_SQL, db, params).to_pylist()
    assert again == report
    assert report["conversations"] == conversations and report["turns"] == len(calls)
    assert report["tool_calls"] == sum(agent.tool_call(content(c)) is not None for c in calls)
    quality = [r for r in run_sql(settings, QUALITY_SQL, db).to_pylist() if r["mode"] == "train"]
    assert sum(r["prefix_mismatches"] for r in quality) == report["prefix_mismatches"]  # `voltbus data check`'s count
    rows = run_sql(settings, "SELECT call_ids, prompt_ids, response_ids, response_mask FROM trajectories", db)
    stitched = assert_masks(rows.to_pylist(), {c.call_id: c for c in calls}, tok)
    assert len(rows) == report["training_rows"] == conversations + report["prefix_mismatches"]
    assert report["sampled_tokens"] == sum(len(c.response_ids) for c in calls)
    split = sum(not extends(before, after) for chat in by_attempt.values() for before, after in pairwise(chat))
    assert split == report["prefix_mismatches"]  # a continuation whose prompt does not extend the last context
    return stitched


def extends(before: ModelCalled, after: ModelCalled) -> bool:
    """Whether ``after``'s prompt ids start with ``before``'s prompt and sampled reply ids."""
    context = before.prompt_ids + before.response_ids
    return after.prompt_ids[: len(context)] == context


def calls_of(nats_url: str, namespace: str) -> list[ModelCalled]:
    return asyncio.run(recorded_calls(nats_url, namespace))


@pytest.mark.timeout(300)
def test_run_py_reports_the_conversations_of_a_chatml_bpe_stand_in(
    nats_server: NatsServer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The example end to end on a stand-in with SmolLM2's tokenizer shape and template. It babbles: it never calls
    the tool (the calculator's result comes as a user message), and its replies mostly re-tokenize to other ids, so
    this run checks the counting of prefix mismatches more than the stitching (the SmolLM2 test checks both)."""
    model = build_stand_in(tmp_path / "model", load("agent").SYSTEM, warm_steps=10, positions=1024)
    result = run_example(TINY, model, nats_server.url, monkeypatch)
    calls = calls_of(nats_server.url, result["namespace"])
    assert_report(result, calls, load_model_dir(model)[1], nats_server.url, tmp_path / "rebuilt.duckdb")
