"""APO's search loop against the bus (Agent Lightning 0.3's ``APO.run``): each round, the parents of the
beam run training batches, the critic critiques and edits them, every candidate is published as a
version of the run's bundle and scored by rollouts pinned to it on one validation batch, and the best
``beam_width`` stay. Each round is a step of the run; the best template is published last. After each round the search's
state (beam, best, curve) is saved inline in a ``CheckpointSaved``, so a run that stopped continues.
"""

from __future__ import annotations

import asyncio
import base64
import dataclasses
import hashlib
import json
import random
import time
from collections.abc import Callable
from pathlib import Path
from statistics import fmean
from typing import Any

from voltbus.schemas.resources import PromptTemplate
from voltbus.services.clients.store import EnqueueRolloutRequest

from ..session import History, LearnerError, Session
from .critic import Critic
from .search import Candidate, Example, SearchSettings, batches, parents, placeholders, select, unusable

ROLLOUTS_SQL = (Path(__file__).parent / "rollouts.sql").read_text()


class Search:
    """One APO run."""

    def __init__(
        self,
        settings: SearchSettings,
        session: Session,
        critic: Critic,
        resources: dict[str, Any],
        train: list[Any],
        val: list[Any],
        say: Callable[[str], None],
    ) -> None:
        self.settings, self.session, self.critic, self.say = settings, session, critic, say
        self.resources, self.train, self.val = dict(resources), list(train), list(val)
        self.rng = random.Random(settings.seed)
        self.grad_batches = batches(self.train, settings.gradient_batch_size, self.rng)
        self.val_batches = batches(self.val, settings.val_batch_size, self.rng)
        self.published: set[str] = set()
        self.rerun: set[int] = set()
        """Rounds begun before a restart and not completed: run again without recording another batch."""
        self.fields: frozenset[str] = frozenset()
        """The names the seed template fills: an edit may fill only these (the agent is known to supply them)."""

    async def run(self, seed: PromptTemplate, history: History | None = None) -> dict[str, Any]:
        """Score ``seed`` on the whole validation set, search, publish the best; the run's result.
        With the ``history`` of a run that stopped after some rounds, continue from its last checkpoint."""
        self.fields = placeholders(seed)
        state = self.resume(history) if history is not None and history.next_step > 0 else None
        if state is None:
            start = await self.publish(seed)
            before = await self.score_full(start) if self.settings.run_initial_validation else None
            if before is not None:
                run, n = self.session.run_id, len(self.val)
                self.say(f"APO {run}: initial template scores {before:.3f} on {n} validation tasks")
            score = before if before is not None else float("-inf")
            beam, best, curve = [dataclasses.replace(start, score=score)], (score, start), []
        else:
            before, beam, best, curve = state
        for step in range(len(curve), self.settings.rounds):
            beam, metrics = await self.round(step, beam)
            full = beam[0].score if self.settings.val_batch_size >= len(self.val) else await self.score_full(beam[0])
            best = (full, beam[0]) if full > best[0] else best
            metrics |= {"leader_val_reward_full": full, "best_val_reward_full": best[0]}
            if before is not None:  # None: the seed was not scored on the whole validation set
                metrics["initial_val_reward_full"] = before
            curve.append(metrics)
            await self.save(step, before, beam, best, curve)
            await self.session.complete_step(step, metrics, beam[0].resources_id)
            self.say(
                f"APO round {step}: val best {metrics['val_reward_best']:.3f} mean {metrics['val_reward_mean']:.3f} "
                f"over {int(metrics['candidates_scored'])} candidates; critic errors {int(metrics['critic_errors'])}"
            )
        final = await self.publish(best[1].template)  # the run's latest version is the best template
        return {
            "run_id": self.session.run_id,
            "template": best[1].template.template,
            "engine": best[1].template.engine,
            "resources_id": final.resources_id,
            "before": before,
            "after": best[0],
            "steps": curve,
            "critic_errors": dict(self.critic.errors),
        }

    async def save(
        self, step: int, before: float | None, beam: list[Candidate], best: tuple[float, Candidate], curve: list[dict]
    ) -> None:
        """Record the search's state after ``step`` (beam, best, curve) inline in a ``CheckpointSaved``."""
        state = {"before": before, "beam": [_dump(c) for c in beam], "best": [best[0], _dump(best[1])], "curve": curve}
        data = json.dumps(state, sort_keys=True).encode()
        uri = "data:application/json;base64," + base64.b64encode(data).decode()
        await self.session.checkpoint(step, uri, hashlib.sha256(data).hexdigest())

    def resume(self, history: History) -> tuple[float | None, list[Candidate], tuple[float, Candidate], list[dict]]:
        """The state saved after the run's last completed round; the rounds after it run again (their
        random draws reseeded from the seed and the round, so not those an uninterrupted run makes)."""
        last = history.next_step - 1
        saved = history.checkpoints.get(last)
        if saved is None or not saved.uri.startswith("data:application/json;base64,"):
            raise LearnerError(f"APO run {self.session.run_id} has {last + 1} rounds but no saved search state")
        data = base64.b64decode(saved.uri.partition(",")[2])
        if hashlib.sha256(data).hexdigest() != saved.sha256:
            raise LearnerError(f"APO run {self.session.run_id}: the state saved after round {last} is corrupt")
        state = json.loads(data)
        beam = [_load(c) for c in state["beam"]]
        best = (state["best"][0], _load(state["best"][1]))
        self.published |= {c.template.template for c in [*beam, best[1]]}
        self.rerun = set(history.begun) - set(history.completed)
        self.rng = random.Random(f"{self.settings.seed}:{last + 1}")
        self.grad_batches = batches(self.train, self.settings.gradient_batch_size, self.rng)
        self.val_batches = batches(self.val, self.settings.val_batch_size, self.rng)
        self.say(f"APO {self.session.run_id}: resuming after round {last}, best so far {best[0]:.3f}")
        return state["before"], beam, best, state["curve"]

    async def round(self, step: int, beam: list[Candidate]) -> tuple[list[Candidate], dict[str, float]]:
        """Critique and edit each parent, score the beam and the children on one validation batch."""
        started, errors_before = time.monotonic(), self.critic.errors.total()
        chosen = parents(beam, self.settings.beam_width, self.rng)
        jobs = [(p, next(self.grad_batches)) for p in chosen for _ in range(self.settings.branch_factor)]
        grads = await self.rollouts(jobs, "train", step, beam[0].resources_id)
        edits = await asyncio.gather(
            *(self.child(parent, examples) for (parent, _), examples in zip(jobs, grads, strict=True))
        )
        children, skipped = [], {"edits_unformattable": 0, "edits_duplicate": 0}
        for edit in edits:
            if isinstance(edit, str):
                skipped[edit] += 1
            elif edit is not None and edit.template in self.published:
                skipped["edits_duplicate"] += 1
            elif edit is not None:
                children.append(await self.publish(edit))
        pool, batch = beam + children, next(self.val_batches)
        scored = await self.rollouts([(c, batch) for c in pool], "val")
        pool = [dataclasses.replace(c, score=fmean(e.reward for e in ex)) for c, ex in zip(pool, scored, strict=True)]
        metrics = {
            "val_reward_best": max(c.score for c in pool),
            "val_reward_mean": fmean(c.score for c in pool),
            "gradient_reward_mean": fmean(e.reward for ex in grads for e in ex),
            "candidates_scored": len(pool),
            "children": len(children),
            "critic_errors": self.critic.errors.total() - errors_before,
            **skipped,
            "time_s": time.monotonic() - started,
        }
        return select(pool, self.settings.beam_width), metrics

    async def child(self, parent: Candidate, examples: list[Example]) -> PromptTemplate | str | None:
        """An edited template, or why there is none: None for a failed critic call, else the metric's name."""
        critique = await self.critic.critique(parent.template.template, examples)
        text = await self.critic.edit(parent.template.template, critique) if critique is not None else None
        if text is None:
            return None
        edited = PromptTemplate(template=text, engine=parent.template.engine)
        return "edits_unformattable" if unusable(edited, self.fields) else edited

    async def publish(self, template: PromptTemplate) -> Candidate:
        """The run's next resources version, with ``template`` as the prompt resource."""
        update = await self.session.store.update_resources(
            self.session.run_id, {**self.resources, self.settings.prompt_resource: template}
        )
        self.published.add(template.template)
        return Candidate(template, f"{update.resources_id}:{update.version}")

    async def score_full(self, candidate: Candidate) -> float:
        """Mean reward of ``candidate`` on the whole validation set."""
        [examples] = await self.rollouts([(candidate, self.val)], "val")
        return fmean(e.reward for e in examples)

    async def rollouts(
        self, jobs: list[tuple[Candidate, list[Any]]], mode: str, step: int | None = None, leader: str | None = None
    ) -> list[list[Example]]:
        """Run each candidate on its tasks (pinned to its version); the examples of each job, in order."""
        meta = {"run_id": self.session.run_id, "step": step}
        requests = [
            EnqueueRolloutRequest(input=t, mode=mode, resources_id=c.resources_id, metadata=meta)
            for c, tasks in jobs
            for t in tasks
        ]
        if step is not None and step not in self.rerun:  # a round's gradient batch is the step's recorded batch
            ids = (await self.session.begin_step(step, leader, requests)).rollout_ids
        else:
            ids = [r.rollout_id for r in await self.session.store.enqueue_many_rollouts(requests)]
        done = await self.session.store.wait_for_rollouts(rollout_ids=ids, timeout=self.settings.rollout_timeout_s)
        if len(done) < len(ids):
            raise LearnerError(f"APO: {len(ids) - len(done)} of {len(ids)} rollouts unfinished after the timeout")
        rows = {r["rollout_id"]: r for r in (await self.session.query(ROLLOUTS_SQL, {"rollouts": ids})).to_pylist()}
        examples = iter(
            Example(json.loads(rows[i]["input"]), rows[i]["status"], float(rows[i]["reward"]), rows[i]["trace"] or "")
            for i in ids
        )
        return [[next(examples) for _ in tasks] for _, tasks in jobs]


def _dump(candidate: Candidate) -> dict[str, Any]:
    t = candidate.template
    return {
        "template": t.template,
        "engine": t.engine,
        "resources_id": candidate.resources_id,
        "score": candidate.score,
    }


def _load(data: dict[str, Any]) -> Candidate:
    template = PromptTemplate(template=data["template"], engine=data["engine"])
    return Candidate(template, data["resources_id"], data["score"])
