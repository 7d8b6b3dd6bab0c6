"""Train the format agent of ``agent.py`` on SmolLM2-135M-Instruct with GRPO through voltbus, on the CPU.

The whole system runs in this process (a bus if none answers at ``VOLTBUS_NATS__URL``, coordinator,
projector, CPU inference serving the model, gateway, runner, learner). The 40 validation tasks are
scored before and after training, sampled with the same seed per task.

    voltbus model fetch smollm2                                       # once: converts the model (~1 min)
    .venv/bin/python examples/smollm2_format/run.py                   # LoRA, up to 30 steps of 4 tasks x 8 in 7 min
    .venv/bin/python examples/smollm2_format/run.py --steps 2 --val 8
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from voltbus.services.settings import Settings
from voltbus.trainer.example import example_settings, load_module, run_grpo_example

HERE = Path(__file__).resolve().parent
DEFAULTS = {"steps": 30, "budget_s": 420.0, "tasks_per_step": 4, "group_size": 8, "val": 40}
"""4 tasks x 8 rollouts per step (a step takes 20-60 s on 2 cores), training stops after 7 minutes."""
LR = 2e-4
"""For the LoRA adapter (full weights want about 2e-5: ../../../shared/research/cpu-learner.md §3b)."""
LORA_RANK = 16
"""LoRA adapters on every linear layer unless ``VOLTBUS_LEARNER__LORA_RANK`` says otherwise (0: full weights): a
version is a 20 MB adapter that the inference server merges in about a second, where full weights are 538 MB."""


PASS_TOKENS = 1024
"""The update goes through the model in passes of at most this many padded tokens (about 14 rows of a 72-token
chat): the same update in less memory (``VOLTBUS_LEARNER__MAX_TOKENS_PER_PASS``, 0: the whole batch at once)."""


def settings(namespace: str | None = None) -> Settings:
    s = example_settings("smollm2fmt", namespace)
    if "lora_rank" not in s.learner.model_fields_set:
        s.learner.lora_rank = LORA_RANK
    if "max_tokens_per_pass" not in s.learner.model_fields_set:
        s.learner.max_tokens_per_pass = PASS_TOKENS
    return s


def main(argv: list[str] | None = None, model_dir: Path | None = None) -> dict[str, Any]:
    """Train from ``model_dir`` (default: SmolLM2-135M-Instruct, converted by ``voltbus model fetch smollm2``)."""
    if model_dir is None:
        from voltbus.model import fetch_model

        model_dir = fetch_model("smollm2")
    agent = load_module(HERE / "agent.py", "voltbus_example_smollm2_format_agent")
    return run_grpo_example(
        "smollm2_format", __doc__, model_dir, agent.format_agent, agent.tasks, settings(), LR, argv, 400, DEFAULTS
    )


if __name__ == "__main__":
    main()
