"""The verl actor's CPU-side pieces (no verl needed): the fields its PPO loss reads, the config and
metric mappings, the saved version's files, and the backend choice with its clear error."""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from voltbus.services.learner.backend import check_backend, load_actor
from voltbus.services.learner.grpo.actor import TorchActor
from voltbus.services.learner.grpo.objective import Row, collate
from voltbus.services.learner.session import LearnerError
from voltbus.services.learner.verl.actor import (
    config_dtype,
    copy_model_files,
    export_state,
    our_metrics,
    update_fields,
    verl_config,
)
from voltbus.services.settings import LearnerSettings

ROWS = [
    Row("a", [1, 2, 3], [4, 5, 6], [1, 1, 1], [-0.1, -0.2, -0.3]),
    Row("b", [1, 2], [7, 8], [1, 0], [-0.5, 0.0]),  # 8 is a tool token stitched in: not sampled
    Row("b", [1, 2, 7, 8], [9], [1], [-0.7]),  # rollout b's second row
    Row("c", [1], [], [], []),  # no response: skipped
]
ADV = {"a": 1.0, "b": -1.0, "c": 0.0}
HAS_VERL = importlib.util.find_spec("verl") is not None


def test_fields_have_verl_padding_and_shapes() -> None:
    fields, skipped = update_fields(ROWS, ADV, pad_id=0)
    assert skipped == 1
    assert fields["prompts"].shape == (3, 4) and fields["responses"].shape == (3, 3)
    assert fields["input_ids"].shape == fields["attention_mask"].shape == fields["position_ids"].shape == (3, 7)
    for name in ("response_mask", "old_log_probs", "advantages", "rollout_is_weights"):
        assert fields[name].shape == (3, 3), name
    assert fields["prompts"][1].tolist() == [0, 0, 1, 2]  # left-padded
    assert fields["responses"][1].tolist() == [7, 8, 0]  # right-padded
    assert fields["attention_mask"][1].tolist() == [0, 0, 1, 1, 1, 1, 0]
    assert fields["position_ids"][1].tolist()[2:6] == [0, 1, 2, 3]


def test_advantages_and_old_logprobs_only_on_sampled_response_tokens() -> None:
    fields, _ = update_fields(ROWS, ADV, pad_id=0)
    assert fields["response_mask"].tolist() == [[1, 1, 1], [1, 0, 0], [1, 0, 0]]
    assert fields["advantages"].tolist() == [[1.0, 1.0, 1.0], [-1.0, 0.0, 0.0], [-1.0, 0.0, 0.0]]
    assert fields["old_log_probs"][0].tolist() == pytest.approx([-0.1, -0.2, -0.3])  # recorded at sampling
    assert fields["old_log_probs"][1].tolist() == pytest.approx([-0.5, 0.0, 0.0])


def test_token_weights_count_rollouts_not_rows_as_grpo_does() -> None:
    fields, _ = update_fields(ROWS, ADV, pad_id=0)
    weights = fields["rollout_is_weights"]
    assert float(weights[0].sum()) == pytest.approx(0.5)  # rollout a: one row
    assert float(weights[1:].sum()) == pytest.approx(0.5)  # rollout b: two rows, same total
    batch = collate(ROWS[:3], ADV, pad_id=0)  # the CPU update's weights: same weighted advantage sum
    ours = float((batch.weights * batch.advantages[:, None]).sum())
    assert float((weights * fields["advantages"]).sum()) == pytest.approx(ours)


def test_no_trainable_row_is_an_error() -> None:
    with pytest.raises(ValueError, match="no row"):
        update_fields([Row("c", [1], [], [], [])], {"c": 0.0}, pad_id=0)


def test_config_maps_the_learner_settings() -> None:
    s = LearnerSettings(lr=3e-6, clip=0.25, epochs=2, micro_batch_size=4, group_size=5, tasks_per_step=3, seed=7)
    config = verl_config(s, Path("/models/qwen"), flash_attn=False)
    actor, optim, engine, model = config["actor"], config["optim"], config["engine"], config["model"]
    assert (actor["clip_ratio"], actor["clip_ratio_low"], actor["clip_ratio_high"]) == (0.25, 0.25, 0.25)
    assert actor["ppo_epochs"] == 2 and actor["rollout_n"] == 5 and actor["ppo_mini_batch_size"] == 15
    assert actor["ppo_micro_batch_size_per_gpu"] == engine["micro_batch_size_per_gpu"] == 4
    assert actor["loss_agg_mode"] == "token-sum" and actor["use_kl_loss"] is False
    kl = verl_config(s.model_copy(update={"kl_coef": 0.05}), Path("/m"), flash_attn=False)["actor"]
    assert kl["use_kl_loss"] is True and kl["kl_loss_coef"] == 0.05 and kl["kl_loss_type"] == "low_var_kl"
    assert optim["lr"] == 3e-6 and optim["weight_decay"] == 0.0 and optim["clip_grad"] == 1.0
    assert engine["strategy"] == "fsdp2" and engine["seed"] == 7 and engine["use_dynamic_bsz"] is True
    assert model["path"] == "/models/qwen" and model["override_config"]["attn_implementation"] == "sdpa"
    assert model["use_remove_padding"] is False
    packed = verl_config(s, Path("/m"), flash_attn=True)
    assert packed["model"]["use_remove_padding"] and packed["model"]["override_config"]["attn_implementation"] == (
        "flash_attention_2"
    )


class Summed:
    """Stands for verl's Metric: aggregated on read."""

    def __init__(self, *values: float) -> None:
        self.values = values

    def aggregate(self) -> float:
        return sum(self.values)


def test_metrics_take_our_names_and_the_last_epoch() -> None:
    verl = {
        "loss": [0.5, 0.4],
        "actor/pg_loss": [0.5, 0.4],
        "actor/pg_clipfrac": [0.0, Summed(0.1, 0.05)],
        "actor/ppo_kl": [torch.tensor(0.01), torch.tensor(0.02)],
        "grad_norm": [1.5, 2.5],
        "perf/max_memory_allocated_gb": [3.0],
        "mfu": [0.2],
    }
    stats = our_metrics(verl)
    assert stats == pytest.approx(
        {"loss": 0.4, "pg_loss": 0.4, "clip_fraction": 0.15, "approx_kl_old": 0.02, "grad_norm": 2.5}
    )
    assert our_metrics({"loss": []}) == {}


def test_saved_version_has_the_policy_layout(tmp_path: Path) -> None:
    source = tmp_path / "src"
    source.mkdir()
    for name in ("config.json", "tokenizer.json", "model-00001-of-00002.safetensors", "model.safetensors.index.json"):
        (source / name).write_text("{}")
    copy_model_files(source, tmp_path / "v")
    assert sorted(p.name for p in (tmp_path / "v").iterdir()) == ["config.json", "tokenizer.json"]
    params = [("model.embed_tokens.weight", torch.ones(2, 2)), ("lm_head.weight", torch.ones(2, 2))]
    state = export_state(iter(params), torch.bfloat16, tied=True)
    assert list(state) == ["model.embed_tokens.weight"] and state["model.embed_tokens.weight"].dtype == torch.bfloat16
    assert list(export_state(iter(params), torch.float32, tied=False)) == [n for n, _ in params]
    assert config_dtype(json.loads('{"torch_dtype": "float16"}')) == torch.float16


def test_torch_is_the_default_backend(policy_dir: Path, tmp_path: Path) -> None:
    actor = load_actor(LearnerSettings(model_dir=policy_dir, weights_dir=tmp_path))
    assert isinstance(actor, TorchActor)
    stats = actor.update(ROWS[:3], ADV)
    assert stats["tokens"] == 5.0 and {"loss", "clip_fraction", "grad_norm"} <= set(stats)
    weights, sha = actor.save("run", 0)
    assert weights == tmp_path / "run" / "step-0" / "model.safetensors" and len(sha) == 64


@pytest.mark.skipif(HAS_VERL, reason="verl is installed here: the missing-verl message cannot show")
def test_verl_backend_without_verl_says_what_to_install() -> None:
    with pytest.raises(LearnerError, match=r"pip install 'voltbus\[gpu\]'"):
        check_backend(LearnerSettings(backend="verl"))


@pytest.mark.skipif(HAS_VERL, reason="verl is installed here: the missing-verl message cannot show")
def test_learner_command_with_verl_missing_fails_at_start(tmp_path: Path) -> None:
    tasks = tmp_path / "tasks.jsonl"
    tasks.write_text('{"a": 1}\n')
    env = {**os.environ, "VOLTBUS_LEARNER__BACKEND": "verl", "VOLTBUS_NATS__URL": "nats://127.0.0.1:9"}
    command = [str(Path(sys.executable).parent / "voltbus"), "learner", "--tasks", str(tasks)]
    done = subprocess.run(command, env=env, capture_output=True, text=True, timeout=60)
    assert done.returncode == 1, done.stderr
    [line] = [x for x in done.stderr.splitlines() if x.strip()]  # one line, before any connection attempt
    assert line.startswith("voltbus: error: learner.backend 'verl' needs verl") and "voltbus[gpu]" in line


@pytest.mark.skipif(HAS_VERL, reason="verl is installed here: the missing-verl message cannot show")
def test_trainer_api_refuses_the_verl_backend_when_it_is_built() -> None:
    from voltbus.trainer import GRPO

    with pytest.raises(LearnerError, match=r"pip install 'voltbus\[gpu\]'"):
        GRPO(backend="verl", steps=1)  # before Trainer.fit starts a bus and a system
