"""``VERL(config)``: the verl config Agent Lightning 0.3's examples pass (calc_x, spider) read into the GRPO
learner's and the adapter's settings, other keys listed in one warning; one fit on the tiny CPU model, where
``trainer.total_epochs`` becomes steps."""

from __future__ import annotations

import asyncio
import copy
import logging
from pathlib import Path
from typing import Any

import pytest

from voltbus.algorithm.verl import VERL
from voltbus.projections.adapter import AdapterSettings
from voltbus.schemas.training import StepCompleted
from voltbus.services.settings import LearnerSettings, NatsSettings, Settings
from voltbus.trainer import Trainer

from .agents import text_agent
from .runs import run_events

CALC_X = {  # AL v0.3.0 examples/calc_x/train_calc_agent.py, verl_default_config()
    "algorithm": {"adv_estimator": "grpo", "use_kl_in_reward": False},
    "data": {"train_batch_size": 32, "max_prompt_length": 4096, "max_response_length": 2048},
    "actor_rollout_ref": {
        "rollout": {
            "tensor_model_parallel_size": 1,
            "n": 4,
            "log_prob_micro_batch_size_per_gpu": 4,
            "multi_turn": {"format": "hermes"},
            "name": "vllm",
            "gpu_memory_utilization": 0.6,
            "engine_kwargs": {"vllm": {"enable_auto_tool_choice": True, "tool_call_parser": "hermes"}},
        },
        "actor": {
            "ppo_mini_batch_size": 32,
            "ppo_micro_batch_size_per_gpu": 4,
            "optim": {"lr": 1e-6},
            "use_kl_loss": False,
            "kl_loss_coef": 0.0,
            "entropy_coeff": 0,
            "clip_ratio_low": 0.2,
            "clip_ratio_high": 0.3,
            "fsdp_config": {"param_offload": True, "optimizer_offload": True},
        },
        "ref": {"log_prob_micro_batch_size_per_gpu": 8, "fsdp_config": {"param_offload": True}},
        "model": {
            "path": "Qwen/Qwen2.5-1.5B-Instruct",
            "use_remove_padding": True,
            "enable_gradient_checkpointing": True,
        },
    },
    "trainer": {
        "n_gpus_per_node": 1,
        "val_before_train": True,
        "critic_warmup": 0,
        "logger": ["console", "wandb"],
        "project_name": "AgentLightning",
        "experiment_name": "calc_x",
        "nnodes": 1,
        "save_freq": 64,
        "test_freq": 32,
        "total_epochs": 2,
    },
}


def config_with(model: Path, **changes: Any) -> dict[str, Any]:
    """The calc_x config with the model at ``model`` (as ``--model`` gives it) and dotted keys changed."""
    config = copy.deepcopy(CALC_X)
    config["actor_rollout_ref"]["model"]["path"] = str(model)
    for dotted, value in changes.items():
        *path, last = dotted.split(".")
        node = config
        for key in path:
            node = node.setdefault(key, {})
        node[last] = value
    return config


def test_the_calc_x_config_maps_onto_learner_and_adapter_settings(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    algo = VERL(config_with(tmp_path, **{"trainer.total_training_steps": None}), backend="torch")  # None: absent
    settings = LearnerSettings(**algo.overrides)
    assert settings.model_dir == tmp_path and settings.backend == "torch"
    assert (settings.tasks_per_step, settings.group_size, settings.lr) == (32, 4, 1e-6)
    assert settings.clip == 0.2 and settings.kl_coef == 0.0 and settings.micro_batch_size == 4
    assert algo.total_epochs == 2 and algo.validate_before
    assert algo.adapter_fields == {"max_prompt_length": 4096, "max_response_length": 2048}
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    [unused] = [w for w in warnings if "config keys have no effect" in w]
    for key in ("actor_rollout_ref.rollout.gpu_memory_utilization", "trainer.logger", "algorithm.use_kl_in_reward"):
        assert key in unused
    assert "data.train_batch_size" not in unused and "trainer.total_epochs" not in unused
    assert any("clip_ratio_high=0.3 is not used" in w for w in warnings)


def test_spider_style_keys_steps_kl_and_trajectory_lengths(tmp_path: Path) -> None:
    algo = VERL(
        config_with(
            tmp_path,
            **{
                "trainer.total_training_steps": 3,
                "actor_rollout_ref.actor.use_kl_loss": True,
                "actor_rollout_ref.actor.kl_loss_coef": 0.01,
                "trainer.val_before_train": False,
                "agentlightning.trace_aggregator": {
                    "level": "transition",
                    "trajectory_max_prompt_length": 2048,
                    "trajectory_max_response_length": 8192,
                },
            },
        ),
        backend="torch",
    )
    assert algo.overrides["steps"] == 3 and algo.total_epochs is None and algo.overrides["kl_coef"] == 0.01
    assert algo.adapter_fields == {"max_prompt_length": 4096, "max_response_length": 2048, "aggregation": "call"}
    assert not algo.validate_before
    trajectory = VERL(config_with(tmp_path, **{"agentlightning.trace_aggregator.level": "trajectory"}), backend="torch")
    assert trajectory.adapter_fields == {
        "aggregation": "trajectory",
        "max_prompt_length": 2048,
        "max_response_length": 8192,
    }
    # the config's lengths join the Trainer's adapter settings (spider: adapter={"agent_match": ...})
    merged = trajectory.adapter_for(Trainer(algorithm=trajectory, adapter={"agent_match": "write"}))
    assert merged == AdapterSettings(agent_match="write", aggregation="trajectory", max_prompt_length=2048,
                                     max_response_length=8192)  # fmt: skip


def test_what_voltbus_cannot_train_is_refused(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="model.path='Qwen/Qwen2.5-1.5B-Instruct' is not a local directory"):
        VERL(CALC_X, backend="torch")
    with pytest.raises(ValueError, match="adv_estimator='gae'.*GRPO advantages only"):
        VERL(config_with(tmp_path, **{"algorithm.adv_estimator": "gae"}), backend="torch")
    with pytest.raises(ValueError, match="trace_aggregator.level='turn'"):
        VERL(config_with(tmp_path, **{"agentlightning.trace_aggregator.level": "turn"}), backend="torch")
    with pytest.raises(Exception, match="verl"):  # AL's VERL is verl on a GPU: a CPU machine is told what it needs
        VERL(config_with(tmp_path))


@pytest.mark.timeout(300)
def test_verl_fit_turns_epochs_into_steps(nats_settings: NatsSettings, policy_dir: Path, tmp_path: Path) -> None:
    tasks = [{"id": f"t{i}", "a": i, "b": 1} for i in range(5)]
    config = config_with(
        policy_dir,
        **{"data.train_batch_size": 2, "actor_rollout_ref.rollout.n": 2, "actor_rollout_ref.actor.optim.lr": 1e-4},
    )
    config["trainer"]["total_epochs"] = 1
    config["trainer"]["val_before_train"] = False
    algo = VERL(config, backend="torch")
    algo.overrides["weights_dir"] = tmp_path / "w"
    result = Trainer(algorithm=algo, n_runners=4, settings=Settings(nats=nats_settings), say=print).fit(
        text_agent, tasks, val_dataset=tasks[:2]
    )
    assert result["before"] is None and result["after"]["rollouts"] == 2  # val_before_train: False
    events = asyncio.run(run_events(nats_settings, result["run_id"]))
    completed = [e for e in events if isinstance(e, StepCompleted)]
    assert [e.step for e in completed] == [0, 1]  # 5 tasks // batch 2 = 2 steps in the one epoch
    assert all(e.metrics["rollouts_trained"] == 4 for e in completed)
