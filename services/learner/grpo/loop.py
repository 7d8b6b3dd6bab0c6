"""The GRPO training loop against the bus, one step at a time:

publish version v → enqueue the step's batch (``group_size`` rollouts per task) → wait until it
finished → read its training rows by SQL → GRPO update (the actor of ``learner.backend``: CPU torch
or verl) → save version v+1 → publish it (inference servers following the bus swap to it) → record
the step. With ``overlap`` the next step's batch is enqueued before the update, so runners keep
sampling with v while the learner trains (staleness 1, bounded by ``max_staleness``). A learner
started again on the same run continues where it stopped.
"""

from __future__ import annotations

import asyncio
import logging
import random
import statistics
import time
from collections.abc import Awaitable, Callable, Sequence
from pathlib import Path
from typing import Any

import httpx

from voltbus.schemas.resources import ProxyLLM, WeightsRef
from voltbus.schemas.rollouts import RolloutConfig
from voltbus.schemas.training import StepStarted
from voltbus.services.clients.model import shards, weights_sha256
from voltbus.services.clients.store import EnqueueRolloutRequest
from voltbus.services.settings import LearnerSettings

from .. import checkpoints
from ..backend import check_backend, load_actor
from ..session import History, LearnerError, Session
from ..vllm import lora as vllm_lora
from ..vllm import push as vllm_push
from .actor import Actor
from .batch import prepare, version_number
from .lora import ref_fields
from .objective import group_advantages
from .policy import initial_weights, version_file
from .rows import batch_rows

log = logging.getLogger(__name__)


class GRPO:
    """Group-relative policy optimization of the served policy (the update by ``learner.backend``:
    CPU torch, or verl on a GPU; see ``actor.py`` and ``backend.load_actor``)."""

    name = "grpo"

    def __init__(self, settings: LearnerSettings, resources: dict[str, Any] | None = None) -> None:
        check_backend(settings)  # a missing verl or GPU fails here, before anything is published
        self.settings = settings
        self.extra = dict(resources or {})
        """Other resources published with every version (a prompt template, tools)."""
        self.curve: list[dict[str, float]] = []
        """The metrics of each step this learner ran, in order."""

    def requests(self, run_id: str, step: int, tasks: Sequence[Any], resources_id: str) -> list[EnqueueRolloutRequest]:
        """The step's batch: ``tasks_per_step`` tasks (seeded by step), each ``group_size`` times."""
        s = self.settings
        rng = random.Random(f"{s.seed}:{step}")
        chosen = rng.sample(list(tasks), s.tasks_per_step) if len(tasks) >= s.tasks_per_step else list(tasks)
        retries = RolloutConfig(
            unresponsive_seconds=s.attempt_unresponsive_s,
            max_attempts=s.max_attempts,
            retry_condition=["unresponsive", "timeout"],
        )  # a runner killed mid-rollout must not hold the step until rollout_timeout_s
        return [
            EnqueueRolloutRequest(
                input=task,
                mode="train",
                resources_id=resources_id,
                config=retries,
                metadata={"task_id": f"{run_id}:{step}:{i}"},
            )
            for i, task in enumerate(chosen)
            for _ in range(s.group_size)
        ]

    async def publish(self, session: Session, weights: Path, sha256: str) -> str:
        """Publish a version naming these weights (reusing the bundle's latest if it already names them),
        and push them to the vLLM servers of ``learner.vllm_urls`` with the gateway paused and drained
        (inference servers following the bus swap on their own); a LoRA version goes to vLLM as an adapter
        named by its ``ProxyLLM`` (``vllm/lora.py``)."""
        resources_id = await self._publish(session, weights, sha256)
        model = vllm_lora.served_name(self.settings, weights, sha256)  # LoRA on vLLM: the adapter's name
        adapter = model if vllm_lora.is_adapter(weights) else None
        await vllm_push.push_if_configured(self.settings, resources_id, weights, adapter)
        return resources_id

    async def _publish(self, session: Session, weights: Path, sha256: str) -> str:
        latest = await session.store.get_resources_by_id(session.run_id)
        if latest is not None:
            llm = latest.resources.get("main_llm")
            if isinstance(llm, ProxyLLM) and llm.weights is not None and llm.weights.sha256 == sha256:
                return f"{session.run_id}:{latest.version}"
        s = self.settings
        uri = str(weights)
        size = await asyncio.to_thread(shards.weights_size, weights)
        if size <= s.weights_in_bus_mb * 1024 * 1024:  # in the bus: servable from any machine
            name = f"{session.run_id}/{sha256[:16]}"
            if shards.is_sharded(weights):  # the shards as one tar, whose sha256 names the set
                uri = await session.store.log.put_weights(
                    f"{name}.tar", await asyncio.to_thread(shards.packed, weights)
                )
            else:
                uri = await session.store.log.put_weights(f"{name}.safetensors", weights)
        ref = WeightsRef(uri=uri, sha256=sha256, **await asyncio.to_thread(ref_fields, weights))  # LoRA: an adapter
        llm = ProxyLLM(endpoint=s.gateway_url, model=vllm_lora.served_name(s, weights, sha256), weights=ref)
        update_ = await session.store.update_resources(session.run_id, {**self.extra, "main_llm": llm})
        return f"{session.run_id}:{update_.version}"

    async def served(self, resources_id: str, timeout: float = 120.0) -> None:
        """Wait until every configured inference server reports ``resources_id`` (a warning at the deadline)."""
        deadline = time.monotonic() + timeout
        if not self.settings.inference_urls:
            return
        async with httpx.AsyncClient(timeout=5) as http:  # once per step: its ~50 ms do not matter here
            for url in self.settings.inference_urls:
                while True:
                    try:
                        serving = (await http.get(f"{url.rstrip('/')}/healthz")).json().get("weight_version")
                    except (httpx.HTTPError, ValueError):
                        serving = None
                    if serving == resources_id:
                        break
                    if time.monotonic() > deadline:
                        log.warning("learner: %s still serves %s, not %s", url, serving, resources_id)
                        break
                    await asyncio.sleep(0.05)

    async def run(self, session: Session, tasks: Sequence[Any], say: Callable[[str], None] = log.info) -> None:
        """Train for ``settings.steps`` steps (continuing a run that stopped), then finish the run."""
        s = self.settings
        if not tasks:
            raise LearnerError("the training dataset is empty")
        history = await session.open(self.name, s.model_dump(mode="json"))
        recovered = history.next_step in history.checkpoints
        if recovered:  # publishes (and pushes) the saved version
            history = await self.record_saved_step(session, history)
        first = history.next_step
        checkpoint = history.checkpoints.get(first - 1)
        saved = await checkpoints.local_copy(session, s, checkpoint) if checkpoint else None
        actor = await asyncio.to_thread(load_actor, s, saved)
        if first > 0:
            resources_id = history.completed[first - 1].resources_id or ""
            say(f"resuming run {session.run_id} at step {first} with {resources_id}")
            if not recovered:  # a vLLM restarted meanwhile serves its base model: load the run's version
                await self.push_again(resources_id, saved)
        else:
            resources_id = await self.publish(session, *initial_weights(s))
        await self.served(resources_id)
        pending: StepStarted | None = None

        async def begin(step: int, version: str) -> StepStarted:
            found = history.open_batch(step)
            return found or await session.begin_step(step, version, self.requests(session.run_id, step, tasks, version))

        started = time.monotonic()
        for step in range(first, s.steps):
            if s.time_budget_s is not None and time.monotonic() - started > s.time_budget_s:
                say(f"time budget of {s.time_budget_s:.0f}s spent after {step - first} steps; stopping at step {step}")
                break
            batch = pending or await begin(step, resources_id)
            ahead = (lambda n=step + 1, v=resources_id: begin(n, v)) if s.overlap and step + 1 < s.steps else None
            resources_id, metrics, pending = await self.step(session, actor, batch, resources_id, ahead, say)
            say(
                f"step {step} of {s.steps}: reward {metrics['reward_mean']:.3f} ± {metrics['reward_std']:.3f} "
                f"over {int(metrics['rollouts_trained'])} rollouts, {int(metrics['tokens'])} tokens, "
                f"published {resources_id} in {metrics['time_step_s']:.1f}s (sampling {metrics['time_sample_s']:.1f}, "
                f"rows {metrics['time_query_s']:.1f}, update {metrics['time_update_s']:.1f}, "
                f"swap {metrics['time_swap_s']:.1f}); "
                + eta(step + 1 - first, s.steps - step - 1, time.monotonic() - started, s.time_budget_s)
            )
        await session.finish("succeeded")

    async def push_again(self, resources_id: str, saved: Path | None) -> None:
        """Push the version a resumed run continues from to ``learner.vllm_urls`` (nothing when none)."""
        if not self.settings.vllm_urls:
            return
        if saved is None or not resources_id:
            log.warning("learner: no checkpoint of %s to push to vLLM; its servers keep what they serve", resources_id)
            return
        await vllm_push.push(self.settings, resources_id, version_file(saved))

    async def record_saved_step(self, session: Session, history: History) -> History:
        """A learner killed after saving a step's update but before recording the step: publish the
        saved weights (the version already published if it names them) and record the step, instead of
        training it again from older weights (its rows would then be stale against a newer version)."""
        step = history.next_step
        weights = version_file(await checkpoints.local_copy(session, self.settings, history.checkpoints[step]))
        resources_id = await self.publish(session, weights, await asyncio.to_thread(weights_sha256, weights))
        await self.served(resources_id)
        await session.complete_step(step, {"recovered_from_checkpoint": 1.0}, resources_id)
        log.warning("learner: step %d was saved but not recorded; recorded it with %s", step, resources_id)
        return await session.history()

    async def step(
        self,
        session: Session,
        actor: Actor,
        batch: StepStarted,
        resources_id: str,
        ahead: Callable[[], Awaitable[StepStarted]] | None = None,
        say: Callable[[str], None] = log.warning,
    ) -> tuple[str, dict[str, float], StepStarted | None]:
        """One step on ``batch`` (``ahead`` enqueues the next batch before the update); returns the
        version published, the step's metrics, and the next batch if it was enqueued."""
        s, started = self.settings, time.monotonic()
        await session.wait(batch, s.rollout_timeout_s, say, s.unclaimed_warn_s)
        sampled = time.monotonic()
        following = await ahead() if ahead is not None else None
        records, left_out = await batch_rows(session, batch.step, batch.rollout_ids, s.rows_wait_s, say)
        queried = time.monotonic()
        version = version_number(resources_id) or 0
        data = prepare(records, batch.rollout_ids, version, s.max_staleness)
        data.counts.update(left_out)
        if not data.rows:
            raise LearnerError(f"step {batch.step}: no trainable rows (see `voltbus data check`): {data.counts}")
        advantages = group_advantages(data.rewards, data.groups)
        stats = await asyncio.to_thread(actor.update, data.rows, advantages)
        updated = time.monotonic()
        weights, sha = await asyncio.to_thread(actor.save, session.run_id, batch.step)
        await checkpoints.save(session, s, weights.parent, batch.step, sha)
        published = await self.publish(session, weights, sha)
        await self.served(published)
        rewards, adv = list(data.rewards.values()), list(advantages.values())
        metrics = {
            **data.counts,
            **stats,
            "reward_mean": statistics.fmean(rewards),
            "reward_std": statistics.pstdev(rewards),
            "advantage_abs_mean": statistics.fmean(abs(a) for a in adv),
            "advantage_std": statistics.pstdev(adv),
            "time_sample_s": sampled - started,
            "time_query_s": queried - sampled,
            "time_update_s": updated - queried,
            "time_swap_s": time.monotonic() - updated,
            "time_step_s": time.monotonic() - started,
        }
        await session.complete_step(batch.step, metrics, published)
        self.curve.append({"step": float(batch.step), **metrics})
        return published, metrics, following


def eta(done: int, left: int, spent_s: float, budget_s: float | None) -> str:
    """How long the rest of the run should take, from the mean step time so far (and the time budget).

    >>> eta(4, 16, 40.0, None)
    'ETA 160s'
    >>> eta(4, 16, 40.0, 100.0)
    'ETA 60s (time budget)'
    """
    rest = left * spent_s / max(done, 1)
    if budget_s is not None and budget_s - spent_s < rest:
        return f"ETA {max(budget_s - spent_s, 0):.0f}s (time budget)"
    return f"ETA {rest:.0f}s"
