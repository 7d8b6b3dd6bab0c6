"""The GPU path's actor: verl 0.9.1's training engine (FSDP2 on one CUDA GPU, or over ``torchrun``'s ranks; no Ray).

verl 0.9.1 has no ``DataParallelPPOActor`` any more: its PPO trainer drives a ``TrainingWorker``
(``verl/workers/engine_workers.py``) whose engine is picked by strategy (``fsdp2`` here) and whose
loss is ``verl.workers.utils.losses.ppo_loss``; ``train_mini_batch`` takes a TensorDict in verl's
no-padding layout (``left_right_2_no_padding`` of the padded batch). This module builds that worker
from the learner settings, turns training rows + GRPO advantages into the fields ``ppo_loss`` reads,
and saves each version as a model directory like ``Policy.save`` (``model.safetensors`` + config +
tokenizer + ``optimizer.pt``), so publishing and checkpoints work unchanged. With ``lora_rank`` verl wraps the
model with peft (``lora_config``) and a version is the CPU learner's adapter directory (``grpo/lora.save``).

Same math as ``grpo/objective.py``: advantages once per rollout, spread over its sampled tokens; PPO-clip
against the logprobs recorded at sampling time (``old_log_probs``); per-rollout normalization (each
rollout weighs the same however many rows and tokens it has) through ``loss_agg_mode='token-sum'``
and per-token weights passed as ``rollout_is_weights`` (which verl's vanilla loss multiplies into the
per-token loss); one optimizer step per epoch on the whole batch (``mini_batch_size`` = batch),
gradients accumulated over micro-batches of about ``learner.micro_batch_size`` rows. Differences: verl's loss adds
dual-clip (ratio bound 3 for negative advantages), and its ``pg_clipfrac`` counts tokens where the
clipped term won, not ``|ratio - 1| > clip``. Training keeps fp32 master weights with bf16 compute
(verl's default mixed precision); versions are written in the model's own dtype (bf16 for Qwen2.5).

Everything above ``VerlActor`` needs only torch and is tested on CPU; ``VerlActor`` needs verl and CUDA.
"""

from __future__ import annotations

import importlib.util
import json
import logging
import shutil
from collections.abc import Iterable, Mapping, Sequence
from functools import partial
from pathlib import Path
from typing import Any

import torch

from voltbus.services.clients.model import shards, weights_sha256
from voltbus.services.settings import LearnerSettings

from ..grpo import lora
from ..grpo.objective import Row, token_weights
from ..grpo.policy import OPTIMIZER, keep_optimizers
from .batch import to_verl_batch

MODEL_FILES = (".safetensors", ".bin", ".pt", ".pth", ".gguf", ".safetensors.index.json", ".bin.index.json")
"""Suffixes of weight and optimizer files, not copied from the source directory into a version."""
METRICS = {
    "loss": "loss",
    "actor/pg_loss": "pg_loss",
    "actor/pg_clipfrac": "clip_fraction",
    "actor/pg_clipfrac_lower": "clip_fraction_lower",
    "actor/ppo_kl": "approx_kl_old",
    "grad_norm": "grad_norm",
    "lr": "lr",
}
"""verl's metric names → the names ``objective.update`` reports (the rest of verl's metrics are not kept)."""

log = logging.getLogger(__name__)


def update_fields(
    rows: Sequence[Row], advantages: Mapping[str, float], pad_id: int
) -> tuple[dict[str, torch.Tensor], int]:
    """The tensors ``ppo_loss`` reads, padded as verl's trainer pads them (prompts left, responses
    right, to the batch's longest), and how many rows were skipped (no prompt or no response).

    ``old_log_probs`` are the logprobs recorded at sampling time, ``advantages`` the rollout's
    advantage on its sampled tokens (0 elsewhere), ``rollout_is_weights`` the per-rollout
    normalization of ``grpo.token_weights`` on the same tokens."""
    kept = [r for r in rows if r.prompt_ids and r.response_ids]
    if not kept:
        raise ValueError("no row with both a prompt and a response to train on")
    ids = {r.rollout_id: r.rollout_id for r in kept}
    batch = to_verl_batch(
        kept, advantages, ids, pad_id, max(len(r.prompt_ids) for r in kept), max(len(r.response_ids) for r in kept)
    )
    t = batch.tensors
    mask = t["response_mask"].to(torch.float32)
    adv = torch.tensor([float(advantages[r.rollout_id]) for r in kept], dtype=torch.float32)
    weights = torch.tensor(token_weights(kept), dtype=torch.float32)
    fields = {k: t[k] for k in ("prompts", "responses", "input_ids", "attention_mask", "position_ids", "response_mask")}
    fields["old_log_probs"] = t["rollout_log_probs"] * mask
    fields["advantages"] = adv[:, None] * mask
    fields["rollout_is_weights"] = weights[:, None] * mask
    return fields, len(rows) - len(kept)


def update_meta(rows: int, longest: int, settings: LearnerSettings, pad_id: int) -> dict[str, Any]:
    """The non-tensor entries ``train_mini_batch`` and ``ppo_loss`` read: the whole batch is one
    mini-batch (one optimizer step per epoch); micro-batches are packed by tokens, up to
    ``micro_batch_size`` rows of the longest (verl's fixed-size micro-batches must divide the batch,
    and a step's row count is whatever the rollouts gave); sampling temperature 1 (raw logprobs).

    >>> meta = update_meta(12, 40, LearnerSettings(epochs=2, micro_batch_size=4), 0)
    >>> meta["mini_batch_size"], meta["global_batch_size"], meta["epochs"], meta["max_token_len_per_gpu"]
    (12, 12, 2, 160)
    """
    return {
        "temperature": 1.0,
        "calculate_entropy": False,
        "compute_loss": True,
        "global_batch_size": rows,
        "mini_batch_size": rows,
        "epochs": settings.epochs,
        "seed": settings.seed,
        "dataloader_kwargs": {"shuffle": False},
        "use_dynamic_bsz": True,
        "max_token_len_per_gpu": settings.micro_batch_size * longest,
        "pad_token_id": pad_id,
    }


def verl_config(settings: LearnerSettings, model_dir: Path, flash_attn: bool) -> dict[str, dict[str, Any]]:
    """The learner settings as verl's config sections (``HFModelConfig``, ``FSDPEngineConfig``,
    ``FSDPOptimizerConfig``, ``FSDPActorConfig`` keyword arguments). Without flash-attn (not in the
    ``gpu`` extra) the model runs SDPA on padded micro-batches instead of packed sequences."""
    s = settings
    engine = {
        "strategy": "fsdp2",
        "use_dynamic_bsz": True,  # micro-batches by tokens: see update_meta
        "micro_batch_size_per_gpu": s.micro_batch_size,
        "infer_micro_batch_size_per_gpu": s.micro_batch_size,
        "use_remove_padding": flash_attn,
        "use_torch_compile": False,
        "model_dtype": "fp32",
        "seed": s.seed,
    }
    return {
        "model": {
            "path": str(model_dir),
            "use_remove_padding": flash_attn,
            "enable_gradient_checkpointing": True,
            "override_config": {"attn_implementation": "flash_attention_2" if flash_attn else "sdpa"},
            **lora_config(s),
        },
        "engine": engine,
        "optim": {"lr": s.lr, "weight_decay": 0.0, "clip_grad": 1.0, "lr_scheduler_type": "constant"},
        "actor": {
            "strategy": "fsdp2",
            "rollout_n": s.group_size,
            "ppo_mini_batch_size": s.tasks_per_step * s.group_size,
            "ppo_micro_batch_size_per_gpu": s.micro_batch_size,
            "use_dynamic_bsz": True,
            "ppo_epochs": s.epochs,
            "clip_ratio": s.clip,
            "clip_ratio_low": s.clip,
            "clip_ratio_high": s.clip,
            "loss_agg_mode": "token-sum",
            "entropy_coeff": 0.0,
            "use_kl_loss": s.kl_coef > 0,
            "kl_loss_coef": s.kl_coef,  # per step: kl_coefficient
            "kl_loss_type": "low_var_kl",  # k3, as grpo/objective.py
            "use_torch_compile": False,
            "shuffle": False,
            "data_loader_seed": s.seed,
        },
    }


def lora_config(settings: LearnerSettings) -> dict[str, Any]:
    """The LoRA keys of verl's ``HFModelConfig`` for ``learner.lora_rank`` (none without LoRA): verl wraps the model
    with peft itself (``lora_dropout`` 0, as ``grpo/lora.py``).

    >>> lora_config(LearnerSettings(lora_rank=8, lora_alpha=32, lora_target_modules="q_proj, v_proj"))
    {'lora_rank': 8, 'lora_alpha': 32, 'target_modules': ['q_proj', 'v_proj']}
    >>> lora_config(LearnerSettings())
    {}
    """
    if not settings.lora_rank:
        return {}
    alpha = settings.lora_alpha
    targets = settings.lora_target_modules.strip()
    config: dict[str, Any] = {
        "lora_rank": settings.lora_rank,
        "lora_alpha": int(alpha) if alpha.is_integer() else alpha,  # verl declares an int
        "target_modules": targets if targets == "all-linear" else [t.strip() for t in targets.split(",") if t.strip()],
    }
    return config


def kl_coefficient(settings: LearnerSettings, tokens: float) -> float:
    """verl's ``kl_loss_coef`` for a step: with ``token-sum`` its KL term is summed over the sampled
    tokens, so ``kl_coef / tokens`` makes it ``kl_coef`` times the token mean of the k3 estimator
    (``grpo/objective.py`` takes the per-rollout mean: equal when rollouts have equal token counts).

    >>> kl_coefficient(LearnerSettings(kl_coef=0.1), 50.0)
    0.002
    """
    return settings.kl_coef / max(tokens, 1.0)


def our_metrics(metrics: Mapping[str, Any]) -> dict[str, float]:
    """verl's update metrics under our names; a list (one value per mini-batch) gives its last value,
    as ``objective.update`` reports the last epoch.

    >>> our_metrics({"actor/pg_loss": [0.5, 0.25], "actor/pg_clipfrac": [0.0, 0.1], "grad_norm": 2.0, "mfu": 0.3})
    {'pg_loss': 0.25, 'clip_fraction': 0.1, 'grad_norm': 2.0}
    """
    out = {}
    for name, ours in METRICS.items():
        if name in metrics and (value := _last(metrics[name])) is not None:
            out[ours] = value
    return out


def _last(value: Any) -> float | None:
    while isinstance(value, list | tuple):
        if not value:
            return None
        value = value[-1]
    if hasattr(value, "aggregate"):  # verl.utils.metric.Metric
        value = value.aggregate()
    if isinstance(value, torch.Tensor):
        value = value.detach().float().mean().item()
    return float(value)


def export_state(params: Iterable[tuple[str, torch.Tensor]], dtype: torch.dtype, tied: bool) -> dict[str, torch.Tensor]:
    """Full parameters as a safetensors state dict on CPU in ``dtype``; a tied ``lm_head.weight`` is
    left out, as ``save_pretrained`` does."""
    state = {}
    for name, tensor in params:
        if tied and name == "lm_head.weight":
            continue
        value = tensor.detach().to("cpu")
        state[name] = (value.to(dtype) if value.is_floating_point() else value).contiguous()
    return state


def config_dtype(config: Mapping[str, Any]) -> torch.dtype:
    """The dtype a model directory declares (``dtype`` or ``torch_dtype``); bf16 when it declares none.

    >>> config_dtype({"torch_dtype": "float32"}), config_dtype({"dtype": "bfloat16"}), config_dtype({})
    (torch.float32, torch.bfloat16, torch.bfloat16)
    """
    name = config.get("dtype") or config.get("torch_dtype") or "bfloat16"
    value = getattr(torch, str(name), None)
    return value if isinstance(value, torch.dtype) and value.is_floating_point else torch.bfloat16


def copy_model_files(source: Path, target: Path) -> None:
    """Config, generation config, tokenizer and chat template of ``source``, without weights or optimizer."""
    target.mkdir(parents=True, exist_ok=True)
    for file in source.iterdir():
        if file.is_file() and not file.name.endswith(MODEL_FILES):
            shutil.copy2(file, target / file.name)


def adapter_to_resume(checkpoint: Path, base_sha256: str) -> Path:
    """The adapter directory of a saved LoRA version; ValueError when it was trained on other base weights."""
    found = lora.base_of(checkpoint / lora.ADAPTER)
    if found != base_sha256:
        raise ValueError(f"the adapter in {checkpoint} was trained on base weights {found}, not on {base_sha256}")
    return checkpoint


def _rank() -> tuple[int, int]:
    """This process's rank and the number of ranks (0 of 1 without a process group)."""
    import torch.distributed as dist

    return (dist.get_rank(), dist.get_world_size()) if dist.is_initialized() else (0, 1)


def share_fields(fields: dict[str, torch.Tensor], rank: int, ranks: int) -> dict[str, torch.Tensor]:
    """This rank's rows of the padded batch (every ``ranks``-th), filled up to the same count on every rank (verl's
    mini-batch is split evenly) with copies of row 0 that train nothing (no response token, no weight).

    >>> fields = {"response_mask": torch.ones(3, 2), "advantages": torch.ones(3, 2), "input_ids": torch.arange(3)}
    >>> share_fields(fields, 1, 2)["input_ids"].tolist(), share_fields(fields, 1, 2)["response_mask"].tolist()
    ([1, 0], [[1.0, 1.0], [0.0, 0.0]])
    """
    n = next(iter(fields.values())).shape[0]
    index = list(range(rank, n, ranks))
    out = {k: v[index] for k, v in fields.items()}
    missing = -(-n // ranks) - len(index)
    if missing:
        filler = {k: v[:1].repeat(missing, *([1] * (v.dim() - 1))) for k, v in fields.items()}
        for key in ("response_mask", "advantages", "rollout_is_weights", "old_log_probs"):
            if key in filler:
                filler[key] = torch.zeros_like(filler[key])
        out = {k: torch.cat([out[k], filler[k]]) for k in out}
    return out


class VerlActor:
    """verl's FSDP2 training engine on one GPU, with verl's PPO loss (see the module docstring)."""

    def __init__(self, settings: LearnerSettings, checkpoint: Path | None = None) -> None:
        from verl.workers.config import FSDPActorConfig

        from .engine import Reference, build_worker

        source = checkpoint or settings.model_dir
        if source is None or (settings.lora_rank and settings.model_dir is None):
            raise ValueError("the learner needs a starting model: set learner.model_dir (a Hugging Face model dir)")
        self.settings, self.source, self.base_sha256 = settings, Path(source), ""
        flash = importlib.util.find_spec("flash_attn") is not None
        if settings.lora_rank:  # the base is the starting model; a version holds only the adapter (grpo/lora.py)
            self.source, self.base_sha256 = Path(str(settings.model_dir)), weights_sha256(str(settings.model_dir))
        self.sections = verl_config(settings, self.source, flash)
        if settings.lora_rank and checkpoint is not None:
            self.sections["model"]["lora_adapter_path"] = str(adapter_to_resume(checkpoint, self.base_sha256))
        with torch.random.fork_rng(devices=[]):  # peft's lora_A init: the same in every run (unseeded: each differed)
            torch.manual_seed(settings.seed)
            self.worker, model = build_worker(self.sections, total_steps=settings.steps * settings.epochs)
        self.actor_kwargs = self.sections["actor"]  # the loss's config (the engine has its own)
        self.loss_config = FSDPActorConfig(**self.actor_kwargs)
        self.reference = None
        if settings.kl_coef > 0 and settings.model_dir is not None:  # the KL is to the starting policy
            base = settings.model_copy(update={"lora_rank": 0})  # with LoRA too: the base, without adapters
            self.reference = Reference(verl_config(base, Path(settings.model_dir), flash))
        tok = model.tokenizer
        self.pad_id = int(tok.pad_token_id if tok.pad_token_id is not None else tok.eos_token_id or 0)
        self.config = json.loads((self.source / "config.json").read_text())
        if checkpoint is not None and (checkpoint / OPTIMIZER).is_file():
            self._load_optimizer(checkpoint / OPTIMIZER)
        elif checkpoint is not None:
            log.warning("verl actor: %s has no %s; resuming with a fresh optimizer state", checkpoint, OPTIMIZER)

    def update(self, rows: Sequence[Row], advantages: Mapping[str, float]) -> dict[str, float]:
        """One update on the whole batch; with several ranks (``grpo/ranks.py``) every rank passes the batch and
        trains its share of the rows (verl's FSDP engine sums the gradients)."""
        from verl.utils import tensordict_utils as tu
        from verl.workers.config import FSDPActorConfig
        from verl.workers.utils.losses import ppo_loss
        from verl.workers.utils.padding import left_right_2_no_padding

        fields, skipped = update_fields(rows, advantages, self.pad_id)
        tokens = float(fields["response_mask"].sum())  # the whole batch's
        rank, ranks = _rank()
        fields = share_fields(fields, rank, ranks)
        n, longest = fields["input_ids"].shape[0], int(fields["attention_mask"].sum(dim=1).max())
        meta = update_meta(n * ranks, longest, self.settings, self.pad_id)
        config = self.loss_config
        if self.reference is not None:
            fields["ref_log_prob"] = self.reference.log_probs(fields, meta)
            config = FSDPActorConfig(**{**self.actor_kwargs, "kl_loss_coef": kl_coefficient(self.settings, tokens)})
        self.worker.set_loss_fn(partial(ppo_loss, config=config))
        output = self.worker.train_mini_batch(left_right_2_no_padding(tu.get_tensordict(fields, meta)))
        verl = tu.get(output, "metrics")
        stats = our_metrics(verl)
        if self.reference is not None and (kl := _last(verl.get("kl_loss"))) is not None:
            stats["kl_ref"] = kl / max(tokens, 1.0)
        stats["tokens"] = tokens
        stats["rows_skipped"] = float(skipped)
        return stats

    def save(self, run_id: str, step: int) -> tuple[Path, str] | None:
        """Write the version (above ``shard_mb`` as shards); with several ranks every rank gathers the weights and
        optimizer state with the others, rank 0 writes them and the others return None."""
        from torch.distributed.checkpoint.state_dict import StateDictOptions, get_optimizer_state_dict

        engine = self.worker.engine
        first = _rank()[0] == 0
        if self.settings.lora_rank:  # the adapter only, as the CPU learner writes it; gathered on every rank
            state = lora.adapter_state(engine.module)
        else:
            params, _ = engine.get_per_tensor_param()  # FSDP: each full tensor is gathered from every rank
            tied = bool(self.config.get("tie_word_embeddings", False))
            state = export_state(params, config_dtype(self.config), tied) if first else {}
            if not first:
                for _ in params:  # take part in each gather
                    pass
        options = StateDictOptions(full_state_dict=True, cpu_offload=True)  # the full state on rank 0 only
        optimizer = get_optimizer_state_dict(engine.module, engine.optimizer, options=options)
        if not first:
            return None
        folder = Path(self.settings.weights_dir) / run_id / f"step-{step}"
        if self.settings.lora_rank:
            file = lora.save(engine.module, folder, self.base_sha256, state)
        else:
            copy_model_files(self.source, folder)
            file = shards.save_state(state, folder, int(self.settings.shard_mb * 1024 * 1024))
        torch.save(optimizer, folder / OPTIMIZER)
        keep_optimizers(folder)  # ~8 bytes per parameter each: the versions a resume may start from only
        return file, weights_sha256(file)

    def _load_optimizer(self, path: Path) -> None:
        from torch.distributed.checkpoint.state_dict import StateDictOptions, set_optimizer_state_dict

        engine = self.worker.engine
        state = torch.load(path, map_location="cpu", weights_only=True)  # may come from the bus: no pickles
        set_optimizer_state_dict(engine.module, engine.optimizer, state, options=StateDictOptions(full_state_dict=True))
