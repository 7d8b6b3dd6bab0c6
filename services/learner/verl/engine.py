"""verl 0.9.1 training engines in the learner's process: a process group of one, the actor's
``TrainingWorker`` built from ``actor.verl_config`` sections, and the frozen reference policy
that gives the KL term its logprobs. Needs verl (the ``gpu`` extra)."""

from __future__ import annotations

import os
import socket
from typing import Any

import torch


def join_process_group() -> None:
    """A process group of one (verl's worker reads these variables and needs ``torch.distributed``):
    NCCL for CUDA tensors, gloo for CPU ones (the ``verl``-marked tests run the engine on CPU)."""
    import torch.distributed as dist

    for key, value in {"RANK": "0", "LOCAL_RANK": "0", "WORLD_SIZE": "1", "LOCAL_WORLD_SIZE": "1"}.items():
        os.environ.setdefault(key, value)
    os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
    if "MASTER_PORT" not in os.environ:
        with socket.socket() as sock:
            sock.bind(("127.0.0.1", 0))
            os.environ["MASTER_PORT"] = str(sock.getsockname()[1])
    if not dist.is_initialized():
        backend = "cpu:gloo,cuda:nccl" if torch.cuda.is_available() else "gloo"
        dist.init_process_group(backend=backend, rank=0, world_size=1)


def build_worker(sections: dict[str, dict[str, Any]], total_steps: int = 1) -> tuple[Any, Any]:
    """verl's ``TrainingWorker`` for ``sections`` (model, FSDP2 engine, optimizer), built and ready;
    returns it and its ``HFModelConfig`` (which holds the tokenizer)."""
    from verl.workers.config import FSDPEngineConfig, FSDPOptimizerConfig, HFModelConfig, TrainingWorkerConfig
    from verl.workers.engine_workers import TrainingWorker

    model = HFModelConfig(**sections["model"])
    engine = FSDPEngineConfig(**sections["engine"])
    optim = FSDPOptimizerConfig(**sections["optim"], total_training_steps=total_steps)
    join_process_group()
    worker = TrainingWorker(
        TrainingWorkerConfig(
            model_type="language_model", model_config=model, engine_config=engine, optimizer_config=optim
        )
    )
    worker.reset()  # builds the model, FSDP2 wrapping, optimizer and scheduler
    return worker, model


class Reference:
    """The starting policy, frozen: a second engine that only runs forward passes (its optimizer is
    built by verl but never stepped, so it holds no state)."""

    def __init__(self, sections: dict[str, dict[str, Any]]) -> None:
        self.worker, _ = build_worker(sections)

    def log_probs(self, fields: dict[str, torch.Tensor], meta: dict[str, Any]) -> torch.Tensor:
        """``log p_ref`` of each response token, padded like ``fields["responses"]``."""
        from verl.utils import tensordict_utils as tu
        from verl.workers.utils.padding import left_right_2_no_padding, no_padding_2_padding

        data = left_right_2_no_padding(tu.get_tensordict(dict(fields), {**meta, "compute_loss": False}))
        output = self.worker.infer_batch(data)
        return no_padding_2_padding(tu.get(output, "log_probs"), data).float().cpu()
