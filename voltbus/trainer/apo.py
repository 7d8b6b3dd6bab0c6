"""``APO``: automatic prompt optimization as Agent Lightning 0.3 does it, a beam search over prompt
templates with textual gradients. Each round: every parent in the beam runs a training batch; a critic
model reads the runs and critiques the template, then edits it (``branch_factor`` children per parent);
every candidate is published as a resources version and scored by real rollouts pinned to it on one
validation batch; the best ``beam_width`` stay. The best template is published as the run's last
version. Each round is a step of the run (``StepStarted`` / ``StepCompleted`` with its metrics).

The search itself is ``voltbus.services.learner.apo.loop``; this class configures it and runs it with
the whole system in this process.
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Callable
from typing import Any

from voltbus.schemas.resources import LLM, PromptTemplate
from voltbus.services.learner.apo.critic import Critic
from voltbus.services.learner.apo.loop import Search
from voltbus.services.learner.apo.search import SearchSettings, unusable
from voltbus.services.learner.session import Session, new_run_id
from voltbus.services.settings import Settings
from voltbus.store import connect

from .algorithms import TrainerView, bus
from .system import local_system, run_group


@dataclasses.dataclass(kw_only=True)
class APO(SearchSettings):
    """Beam search over the ``PromptTemplate`` named ``prompt_resource`` in ``Trainer(initial_resources=...)``.
    ``critic``: an ``LLM`` or a base URL (with ``model``); None reads ``OPENAI_BASE_URL``/``OPENAI_API_KEY``."""

    critic: LLM | str | None = None
    """The critic model: an ``LLM``, an OpenAI-compatible base URL, or None for the OpenAI client's environment."""
    model: str = "gpt-4.1-mini"
    """The critic's model name when ``critic`` is not an ``LLM``."""
    temperature: float = 1.0
    """The critic's sampling temperature (diversity of critiques and edits)."""
    max_retries: int = 2
    """Retries of one critic call by the OpenAI client (on connection errors, 408/409/429/5xx)."""
    run_id: str | None = None
    """The run's id (and the name of its resources bundle); a fresh one when None."""
    result: dict[str, Any] = dataclasses.field(default_factory=dict, repr=False)

    def critic_llm(self) -> LLM:
        """The critic model as an ``LLM`` resource."""
        if isinstance(self.critic, LLM):
            return self.critic
        endpoint = self.critic or os.environ.get("OPENAI_BASE_URL", "https://api.openai.com/v1")
        return LLM(endpoint=endpoint, model=self.model, api_key=os.environ.get("OPENAI_API_KEY"))

    async def fit(self, trainer: TrainerView, agent: Any, train: list[Any], val: list[Any]) -> dict[str, Any]:
        """Search; returns the best template, its published version, the seed's and the best's full-val reward."""
        seed = self.check(trainer.initial_resources, train, val)  # before the system starts
        async with (
            bus(trainer.settings, trainer.say) as settings,
            local_system(settings, agent, trainer.n_runners, run_group(settings)) as s,
        ):
            return await self._search(s, seed, trainer.initial_resources, train, val, trainer.say)

    def check(self, resources: dict[str, Any], train: list[Any], val: list[Any]) -> PromptTemplate:
        """The seed template, or a clear error about the inputs."""
        seed = resources.get(self.prompt_resource)
        if not isinstance(seed, PromptTemplate):
            names = sorted(resources)
            raise ValueError(f"APO needs a PromptTemplate named {self.prompt_resource!r} in the resources ({names})")
        if not train or not val:
            raise ValueError("APO needs a training and a validation dataset")
        if why := unusable(seed):  # the agent fills it as it likes (AL's room selector: from task["task_input"])
            raise ValueError(f"APO: the initial template cannot be used: {why}")
        return seed

    async def search_on(
        self, s: Settings, resources: dict[str, Any], train: list[Any], val: list[Any], say: Callable[[str], None]
    ) -> dict[str, Any]:
        """Search against a running system (the bus and projector of ``s``; runners serving the agent
        elsewhere): what ``voltbus apo`` runs. A run id that stopped after some rounds continues."""
        return await self._search(s, self.check(resources, train, val), resources, train, val, say)

    async def _search(
        self, s: Settings, seed: PromptTemplate, resources: dict[str, Any], train: list[Any], val: list[Any],
        say: Callable[[str], None],
    ) -> dict[str, Any]:  # fmt: skip
        run_id = self.run_id or new_run_id()
        store = await connect(settings=s.nats, name="voltbus-apo")
        store.runner_group = s.runner.group  # the runners of its own local_system (Trainer), or the default group
        session = Session(store, run_id, s.projector)
        critic = Critic(self.critic_llm(), self.temperature, self.max_retries)
        try:
            history = await session.open("apo", self._config())
            search = Search(self, session, critic, resources, train, val, say)
            try:
                self.result = await search.run(seed, history)
            except Exception as exc:
                await session.finish("failed", repr(exc)[:500])
                raise
            await session.finish("succeeded")
            self.result["namespace"] = s.nats.namespace
        finally:
            await critic.close()
            await session.close()
            await store.close()
        return self.result

    def _config(self) -> dict[str, Any]:
        llm = self.critic_llm()
        plain = {f.name: getattr(self, f.name) for f in dataclasses.fields(self) if f.name not in ("critic", "result")}
        return plain | {"critic_endpoint": llm.endpoint, "critic_model": llm.model}
