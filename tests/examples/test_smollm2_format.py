"""examples/smollm2_format: the reward, and the example's ``run.py`` end to end through the whole system (bus,
runner, gateway, CPU inference, projector, LoRA learner) on a stand-in with SmolLM2's shape: a byte-level BPE
tokenizer and its ChatML template (tests/examples/chatml_stand_in.py). The run on SmolLM2 itself is
tests/smollm2/test_example.py."""

from __future__ import annotations

import asyncio
from collections import Counter
from pathlib import Path
from types import ModuleType
from typing import Any

import msgspec
import pytest

from voltbus.model import load_model_dir
from voltbus.schemas.spans import ModelCalled
from voltbus.services.eventlog import Envelope
from voltbus.services.ops.natsserver import NatsServer
from voltbus.services.settings import NatsSettings
from voltbus.store import connect
from voltbus.trainer.example import load_module

from .chatml_stand_in import build_stand_in

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "smollm2_format"
TINY = ["--steps", "1", "--tasks-per-step", "2", "--group-size", "4", "--val", "4"]
"""One GRPO step of 2 tasks x 4 rollouts, 4 validation tasks before and after."""


def load(name: str) -> ModuleType:
    return load_module(EXAMPLE / f"{name}.py", f"voltbus_example_smollm2_format_{name}")


def test_reward_gives_partial_credit_for_the_format_and_the_number() -> None:
    reward = load("agent").reward
    assert reward("The answer is 12.", 12) == 1.0
    assert reward("  The answer is 12.\n", 12) == 1.0
    assert reward("The answer is 11.", 12) == 0.5  # the format, a wrong number
    assert reward("7 + 5 = 12", 12) == reward("The answer is 12", 12) == 0.5  # the number, not the sentence
    assert reward("The answer is 12. Or 13.", 12) == 0.0
    assert reward("Twelve.", 12) == reward("", 12) == 0.0
    tasks = load("agent").tasks
    train, val = tasks(400, seed=0), tasks(400, seed=1)
    assert len(train) == 104 and len(val) == 40 and not {t["id"] for t in train} & {t["id"] for t in val}
    assert all(t["answer"] == sum(map(int, t["question"][:-1].split("+"))) for t in train + val)


def run_example(argv: list[str], model_dir: Path, nats_url: str, monkeypatch: pytest.MonkeyPatch) -> dict[str, Any]:
    """``run.main`` as a user runs it, on the test's bus (the model loads on the event loop: a longer timeout)."""
    monkeypatch.setenv("VOLTBUS_NATS__URL", nats_url)
    monkeypatch.setenv("VOLTBUS_NATS__REQUEST_TIMEOUT_S", "30")
    return load("run").main(argv, model_dir=model_dir)


async def recorded_calls(nats_url: str, namespace: str) -> list[ModelCalled]:
    store = await connect(settings=NatsSettings(url=nats_url, namespace=namespace))
    try:
        return [
            e.event async for e in store.log.telemetry() if isinstance(e, Envelope) and isinstance(e.event, ModelCalled)
        ]
    finally:
        await store.close()


def assert_loop_moved(result: dict[str, Any], calls: list[ModelCalled], tok: Any, weights: Path) -> None:
    """One step trained the batch's rows into a LoRA version, which was published and served the validation after
    it; every call went through the ChatML template, and its recorded ids are the text the agent read."""
    run = result["run_id"]
    [step] = result["steps"]
    assert step["rollouts_trained"] == 8 and step["rows"] >= 8
    assert result["before"]["rollouts"] == result["after"]["rollouts"] == 4
    ok = [c for c in calls if c.status == "ok"]
    served = Counter(c.resources_id for c in ok)
    assert set(served) == {f"{run}:1", f"{run}:2"}, served  # the starting weights, then the trained version
    assert served[f"{run}:1"] >= 12 and served[f"{run}:2"] >= 4  # validation + batch, then validation again
    assert (weights / run / "step-0" / "adapter_model.safetensors").is_file()  # LoRA: the version is an adapter
    system = load("agent").SYSTEM
    for call in ok:
        prompt = tok.decode(call.prompt_ids)
        assert prompt.startswith(f"<|im_start|>system\n{system}<|im_end|>\n<|im_start|>user\n")
        assert prompt.endswith("<|im_end|>\n<|im_start|>assistant\n")
        content = msgspec.json.decode(call.response)["choices"][0]["message"]["content"]
        assert tok.decode(call.response_ids, skip_special_tokens=True) == content
        assert len(call.logprobs) == len(call.response_ids) > 0


@pytest.fixture(scope="module")
def stand_in(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build_stand_in(tmp_path_factory.mktemp("chatml") / "model", load("agent").SYSTEM)


@pytest.mark.timeout(300)
def test_run_py_trains_a_chatml_bpe_stand_in_through_the_whole_system(
    stand_in: Path, nats_server: NatsServer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    weights = tmp_path / "weights"
    result = run_example([*TINY, "--weights-dir", str(weights)], stand_in, nats_server.url, monkeypatch)
    _, tok = load_model_dir(stand_in)
    calls = asyncio.run(recorded_calls(nats_server.url, result["namespace"]))
    assert_loop_moved(result, calls, tok, weights)
    [step] = result["steps"]
    assert (step["grad_norm"] > 0) == (step["advantage_abs_mean"] > 0)  # rewards differed in a group: a gradient
