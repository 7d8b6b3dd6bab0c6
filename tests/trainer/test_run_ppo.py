"""``voltbus.verl.entrypoint.run_ppo``: AL 1.0's verl entry. The config mapping (pure, on AL 1.0's own gsm8k
config), the configs it refuses, and one tiny GRPO step on the CPU with an AL 1.0 agent class and ``env_map``."""

from __future__ import annotations

import copy
import logging
from pathlib import Path
from typing import Any

import pytest

from voltbus.schemas.spans import ModelCalled, RewardReported
from voltbus.services.eventlog import Envelope
from voltbus.services.settings import LearnerSettings, NatsSettings, Settings
from voltbus.store import connect
from voltbus.verl.entrypoint import as_dict, plan, run_ppo

MODEL = Path(__file__).resolve().parents[2] / "examples" / "arith_rl" / "model"


def gsm8k_config() -> dict[str, Any]:
    """``verl_default_config()`` of AL 1.0's ``examples/gsm8k/train_gsm8k_agent.py`` (v1.0.0), verbatim."""
    return {
        "algorithm": {"adv_estimator": "grpo", "use_kl_in_reward": False},
        "data": {"train_batch_size": 8, "max_prompt_length": 2048, "max_response_length": 1024},
        "actor_rollout_ref": {
            "rollout": {"tensor_model_parallel_size": 1, "n": 4, "log_prob_micro_batch_size_per_gpu": 1,
                        "multi_turn": {"format": "hermes"}, "name": "vllm", "gpu_memory_utilization": 0.6},
            "actor": {"ppo_mini_batch_size": 8, "ppo_micro_batch_size_per_gpu": 1, "optim": {"lr": 1e-6},
                      "use_kl_loss": False, "kl_loss_coef": 0.0, "entropy_coeff": 0, "clip_ratio_low": 0.2,
                      "clip_ratio_high": 0.28, "fsdp_config": {"param_offload": True, "optimizer_offload": True}},
            "ref": {"log_prob_micro_batch_size_per_gpu": 1, "fsdp_config": {"param_offload": True}},
            "model": {"path": "Qwen/Qwen2.5-1.5B-Instruct", "use_remove_padding": True,
                      "enable_gradient_checkpointing": True},
        },
        "trainer": {"n_gpus_per_node": 1, "val_before_train": False, "critic_warmup": 0, "logger": ["console", "wandb"],
                    "project_name": "agentlightning", "experiment_name": "gsm8k", "nnodes": 1, "save_freq": -1,
                    "test_freq": 10, "total_epochs": 2},
        "agentlightning": {
            "agl_base_url": "http://localhost:8181", "agl_key": "gsm8k-dev-key", "rollout_timeout_seconds": 300,
            "trace_aggregator": {"level": "trajectory", "trajectory_max_prompt_length": 1024,
                                 "trajectory_max_response_length": 1024},
            "async_rollout": {"enabled": False, "async_train_batch_size": 64},
            "local": {"agent_class": "examples.gsm8k.gsm8k_agent.ChatAgent",
                      "env_map": {"QUESTION": "input.question", "ANSWER": "input.answer"}},
        },
    }  # fmt: skip


def test_al_1_0_gsm8k_config_maps_to_learner_settings_runner_env_map_and_a_list_of_unused_keys(tmp_path: Path) -> None:
    config = gsm8k_config()
    config["actor_rollout_ref"]["model"]["path"] = str(tmp_path)  # a local model directory
    p = plan(config, n_train=7473)  # GSM8K's training split
    assert p.agent == "examples.gsm8k.gsm8k_agent.ChatAgent"
    assert p.env_map == {"QUESTION": "input.question", "ANSWER": "input.answer"}
    assert p.learner == {
        "model_dir": tmp_path,
        "tasks_per_step": 8,
        "group_size": 4,
        "lr": 1e-6,
        "clip": 0.2,
        "micro_batch_size": 1,
        "rollout_timeout_s": 300,
        "overlap": False,
        "steps": 934 * 2,  # whole batches of 8 per epoch, 2 epochs
    }
    LearnerSettings(**p.learner)  # valid settings
    assert "agentlightning.agl_key" in p.unused and "trainer.logger" in p.unused
    assert "data.train_batch_size" not in p.unused and "agentlightning.trace_aggregator.level" not in p.unused
    assert p.adapter == {"aggregation": "trajectory", "max_prompt_length": 1024, "max_response_length": 1024}
    assert not {"agentlightning.local.agent_class", "agentlightning.local.env_map", "trainer.total_epochs"} & set(
        p.unused
    )


def test_kl_steps_and_clip_high_rules() -> None:
    config = {"agentlightning": {"local": {"agent_class": "m:A"}}, "trainer": {"total_training_steps": 5,
              "total_epochs": 9}, "actor_rollout_ref": {"actor": {"use_kl_loss": True, "kl_loss_coef": 0.01,
              "clip_ratio_high": 0.3}}}  # fmt: skip
    assert plan(config, n_train=100).learner == {"steps": 5, "kl_coef": 0.01, "clip": 0.3}


@pytest.mark.parametrize(
    ("change", "message"),
    [
        (lambda c: c["agentlightning"].pop("local"), "agentlightning.local.agent_class is not set"),
        (lambda c: c["algorithm"].update(adv_estimator="gae"), "adv_estimator='gae'"),
        (lambda c: None, "'Qwen/Qwen2.5-1.5B-Instruct' is not a local directory"),
    ],
    ids=["no agent class", "not GRPO", "a hub model name"],
)
def test_configs_voltbus_cannot_run_are_refused_with_the_reason(change: Any, message: str) -> None:
    config = gsm8k_config()
    change(config)
    with pytest.raises(ValueError, match=message.replace("(", r"\(")):
        plan(config, n_train=10)


def test_empty_datasets_are_refused_before_anything_starts() -> None:
    with pytest.raises(ValueError, match="must be non-empty"):
        run_ppo(gsm8k_config(), [{"question": "q"}], [])


def test_an_omegaconf_config_is_read_resolved(tmp_path: Path) -> None:
    from omegaconf import OmegaConf

    config = copy.deepcopy(gsm8k_config())
    config["actor_rollout_ref"]["model"]["path"] = str(tmp_path)
    config["data"]["train_batch_size"] = "${actor_rollout_ref.rollout.n}"  # an interpolation
    assert plan(as_dict(OmegaConf.create(config)), n_train=8).learner["tasks_per_step"] == 4


@pytest.mark.timeout(600)
def test_one_grpo_step_of_an_al_1_0_agent_class_on_the_cpu(
    nats_settings: NatsSettings, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """AL 1.0's script shape: a config, a training and a validation set, ``run_ppo``; the agent class gets its task
    from ``env_map``; every rollout's call is recorded with token ids on the attempt its reward is on."""
    config = {
        "algorithm": {"adv_estimator": "grpo"},
        "data": {"train_batch_size": 2},
        "actor_rollout_ref": {"rollout": {"n": 2}, "model": {"path": str(MODEL)}, "actor": {"optim": {"lr": 5e-4}}},
        "trainer": {"total_training_steps": 1, "logger": ["console"]},
        "agentlightning": {"local": {"agent_class": "tests.trainer.al10_arith_agent.ArithAgent",
                                     "env_map": {"A": "input.a", "B": "input.b"}}},
    }  # fmt: skip
    settings = Settings(nats=nats_settings.model_copy(update={"request_timeout_s": 30.0}))
    settings.learner = settings.learner.model_copy(update={"weights_dir": tmp_path / "weights"})
    train, val = [{"a": 1, "b": 2}, {"a": 3, "b": 4}], [{"a": 2, "b": 2}]
    with caplog.at_level(logging.WARNING, logger="voltbus.verl.entrypoint"):
        result = run_ppo(config, train, val, backend="torch", settings=settings, n_runners=4)
    assert "1 config keys have no effect in voltbus: trainer.logger" in caplog.text
    [step] = result["steps"]
    assert 0.0 <= step["reward_mean"] <= 1.0 and "before" in result and "after" in result
    events = asyncio_run_telemetry(result["namespace"], nats_settings)
    calls = [e for e in events if isinstance(e, ModelCalled) and e.response_ids]
    rewards = [e for e in events if isinstance(e, RewardReported)]
    assert len(rewards) == 2 * 2 + 2  # the step's 2 tasks x 2, and the validation task before and after
    assert {c.attempt_id for c in calls} == {r.attempt_id for r in rewards}
    assert all(c.status == "ok" and c.prompt_ids for c in calls)


def asyncio_run_telemetry(namespace: str, nats: NatsSettings) -> list[Any]:
    """Every event of the spans stream of ``namespace``."""
    import asyncio

    async def read() -> list[Any]:
        store = await connect(settings=nats.model_copy(update={"namespace": namespace}))
        try:
            return [e.event async for e in store.log.telemetry() if isinstance(e, Envelope)]
        finally:
            await store.close()

    return asyncio.run(read())
