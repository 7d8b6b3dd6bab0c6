"""The learner's update, data parallel over several ranks (``torchrun --nproc-per-node N``): rank 0 runs the one
loop (``loop.py``) and is the only rank on the bus; it broadcasts each batch, every rank trains on its share of
the rows, and the gradients are summed over the ranks (CPU policy: gloo all_reduce here; verl: its FSDP engine),
so every rank steps to the same weights. Each save is collective too (verl gathers its shards); rank 0 writes.
"""

from __future__ import annotations

import datetime
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any, Protocol

import torch
import torch.distributed as dist
from transformers import PreTrainedModel

from voltbus.services.settings import LearnerSettings, TorchrunEnvironment

from .objective import Row, token_weights, update
from .policy import Policy

LOAD, UPDATE, SAVE, STOP = "load", "update", "save", "stop"
BUCKET = 1 << 24
"""Gradient elements summed per collective call (64 MB of float32)."""


def start(env: TorchrunEnvironment, settings: LearnerSettings) -> None:
    """Join the ranks' process group when ``torchrun`` started several (``WORLD_SIZE`` > 1); torch reads
    ``MASTER_ADDR`` and ``MASTER_PORT`` (or torchrun's own rendezvous) itself."""
    if env.world_size == 1 or dist.is_initialized():
        return
    dist.init_process_group(
        "cpu:gloo,cuda:nccl" if torch.cuda.is_available() else "gloo",
        init_method="env://",
        rank=env.rank,
        world_size=env.world_size,
        timeout=datetime.timedelta(seconds=settings.ranks_timeout_s),
    )


def world_size() -> int:
    """How many ranks share each update (1 without a process group)."""
    return dist.get_world_size() if dist.is_initialized() else 1


def _broadcast(message: tuple[Any, ...] | None) -> tuple[Any, ...]:
    box = [message]
    dist.broadcast_object_list(box, src=0)
    return box[0]  # type: ignore[return-value]


def stop() -> None:
    """Rank 0, after the run: release the other ranks (they return from ``follow``) and leave the group."""
    if world_size() > 1:
        _broadcast((STOP,))
        dist.destroy_process_group()


def follow(settings: LearnerSettings, make: MakeMember) -> Member | None:
    """Ranks > 0: load the actor (``make``: ``backend.rank_actor``) when rank 0 does, take their share of each update
    and save; when rank 0 stops, return the actor (the same weights as rank 0's)."""
    actor: Member | None = None
    while (message := _broadcast(None))[0] != STOP:
        if message[0] == LOAD:
            actor = make(settings, message[1])
        elif message[0] == UPDATE and actor is not None:
            actor.update(message[1], message[2])
        elif message[0] == SAVE and actor is not None:
            actor.save(message[1], message[2])
    dist.destroy_process_group()
    return actor


class Member(Protocol):
    """A backend's actor on one rank: its share of each update (returning the whole batch's statistics), and the
    save every rank takes part in (rank 0 writes the files and returns them; the others return None)."""

    def update(self, rows: Sequence[Row], advantages: Mapping[str, float]) -> dict[str, float]: ...

    def save(self, run_id: str, step: int) -> tuple[Path, str] | None: ...


MakeMember = Callable[[LearnerSettings, Path | None], Member]
"""Builds this rank's actor from the settings and rank 0's checkpoint (``backend.rank_actor``)."""


class TorchShare:
    """The CPU policy on one rank: rank 0 loads the checkpoint and gives the others its state."""

    def __init__(self, settings: LearnerSettings, checkpoint: Path | None) -> None:
        self.policy = Policy.load(settings, checkpoint if dist.get_rank() == 0 else None)
        share_state(self.policy)

    def update(self, rows: Sequence[Row], advantages: Mapping[str, float]) -> dict[str, float]:
        return shard_update(self.policy, rows, advantages)

    def save(self, run_id: str, step: int) -> tuple[Path, str] | None:
        return self.policy.save(run_id, step) if dist.get_rank() == 0 else None


def share_state(policy: Policy) -> None:
    """Every rank takes rank 0's weights and optimizer state (rank 0 may have resumed from a checkpoint); with LoRA
    only the adapter's: every rank loaded the same frozen base (checked by its sha256), which is not sent."""
    tensors = list(policy.model.state_dict().values())
    if policy.settings.lora_rank:
        tensors = [p.data for p in policy.model.parameters() if p.requires_grad]
        base = _broadcast((policy.base_sha256,))[0]
        if base != policy.base_sha256:
            raise ValueError(f"rank {dist.get_rank()} loaded base weights {policy.base_sha256}, rank 0 {base}")
    for tensor in tensors:
        dist.broadcast(tensor, src=0)
    state = _broadcast((policy.optimizer.state_dict(),) if dist.get_rank() == 0 else None)[0]
    if dist.get_rank() > 0:
        policy.optimizer.load_state_dict(state)


def sum_gradients(model: PreTrainedModel) -> None:
    """Sum each trained parameter's gradient over the ranks (zeros where a rank had no rows)."""
    params = [p for p in model.parameters() if p.requires_grad]
    for p in params:
        if p.grad is None:
            p.grad = torch.zeros_like(p)
    start = 0
    while start < len(params):
        bucket, size = [], 0
        while start < len(params) and (not bucket or size + params[start].numel() <= BUCKET):
            bucket.append(params[start])
            size += params[start].numel()
            start += 1
        flat = torch.cat([p.grad.reshape(-1) for p in bucket])  # type: ignore[union-attr]
        dist.all_reduce(flat)
        offset = 0
        for p in bucket:
            p.grad.copy_(flat[offset : offset + p.numel()].view_as(p))  # type: ignore[union-attr]
            offset += p.numel()


def share(rows: Sequence[Row], rank: int, ranks: int) -> list[int]:
    """The indices of ``rows`` that ``rank`` trains on: longest first, dealt round-robin (similar token counts).

    >>> rows = [Row(str(n), [1] * n, [2], [1], [0.0]) for n in (1, 5, 3, 4)]
    >>> share(rows, 0, 2), share(rows, 1, 2), share(rows[:1], 1, 2)
    ([1, 2], [0, 3], [])
    """
    order = sorted(range(len(rows)), key=lambda i: -(len(rows[i].prompt_ids) + len(rows[i].response_ids)))
    return sorted(order[rank::ranks])


def shard_update(policy: Policy, rows: Sequence[Row], advantages: Mapping[str, float]) -> dict[str, float]:
    """This rank's part of one update on the whole batch ``rows``; returns the whole batch's statistics."""
    weights = token_weights(rows)
    mine = share(rows, dist.get_rank(), dist.get_world_size())
    p, s = policy, policy.settings
    stats = update(
        p.model, p.optimizer, [rows[i] for i in mine], advantages, p.tok.pad_token_id,
        epochs=s.epochs, clip=s.clip, ref_model=p.reference, kl_coef=s.kl_coef,
        weights=[weights[i] for i in mine], sync=sum_gradients, max_tokens_per_pass=s.max_tokens_per_pass,
    )  # fmt: skip
    tokens = stats["tokens"]
    names = ("loss", "kl_ref", "clip_fraction", "approx_kl_old")
    values = [stats.get(k, 0.0) * (tokens if k in names[2:] else 1.0) for k in names]
    sums = torch.tensor([*values, tokens], dtype=torch.float64)
    dist.all_reduce(sums)
    total = dict(zip((*names, "tokens"), sums.tolist(), strict=True))
    out = {"grad_norm": stats["grad_norm"], "loss": total["loss"], "tokens": total["tokens"]}
    for k in names[2:]:
        out[k] = total[k] / total["tokens"] if total["tokens"] else 0.0
    if p.reference is not None and s.kl_coef > 0:
        out["kl_ref"] = total["kl_ref"]
    return out


class DataParallelActor:
    """Rank 0's actor when there are several ranks: each update and save is sent to the other ranks first."""

    def __init__(self, settings: LearnerSettings, checkpoint: Path | None, make: MakeMember) -> None:
        _broadcast((LOAD, checkpoint))
        self.member = make(settings, checkpoint)

    def update(self, rows: Sequence[Row], advantages: Mapping[str, float]) -> dict[str, float]:
        _broadcast((UPDATE, list(rows), dict(advantages)))
        return self.member.update(rows, advantages)

    def save(self, run_id: str, step: int) -> tuple[Path, str]:
        _broadcast((SAVE, run_id, step))
        saved = self.member.save(run_id, step)
        assert saved is not None  # rank 0 writes the version
        return saved
