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
import logging
import os
from collections.abc import Callable
from typing import Any, Generic, TypeVar

from voltbus.schemas.resources import LLM, PromptTemplate
from voltbus.services.learner.apo.critic import Critic
from voltbus.services.learner.apo.loop import Search
from voltbus.services.learner.apo.search import SearchSettings, unusable
from voltbus.services.learner.session import Session, new_run_id
from voltbus.services.settings import Settings
from voltbus.store import connect

from .algorithms import TrainerView, bus, system

T = TypeVar("T")
DEFAULT_RESOURCE = SearchSettings.prompt_resource
log = logging.getLogger(__name__)


@dataclasses.dataclass(kw_only=True)
class APO(SearchSettings, Generic[T]):
    """Beam search over the ``PromptTemplate`` named ``prompt_resource`` in ``Trainer(initial_resources=...)``.
    ``critic``: an ``LLM`` or a base URL (with ``model``); None reads ``OPENAI_BASE_URL``/``OPENAI_API_KEY``.
    Agent Lightning's constructor works too: ``APO[T](async_openai_client, gradient_model=..., apply_edit_model=...,
    diversity_temperature=..., beam_rounds=..., rollout_batch_timeout=..., run_initial_validation=...)``."""

    async_openai_client: Any = dataclasses.field(default=None, kw_only=False)
    """AL's critic client (an ``openai.AsyncOpenAI``): its base URL, key, headers and query reach the critic."""
    critic: LLM | str | None = None
    """The critic model: an ``LLM``, an OpenAI-compatible base URL, or None for the OpenAI client's environment."""
    model: str = "gpt-4.1-mini"
    """The critic's model name when ``critic`` is not an ``LLM`` (AL: ``gradient_model``)."""
    edit_model: str | None = None
    """The model that applies a critique (AL: ``apply_edit_model``); None: the critic's model."""
    temperature: float = 1.0
    """The critic's sampling temperature (diversity of critiques and edits; AL: ``diversity_temperature``)."""
    max_retries: int = 2
    """Retries of one critic call by the OpenAI client (on connection errors, 408/409/429/5xx)."""
    run_id: str | None = None
    """The run's id (and the name of its resources bundle); a fresh one when None."""
    gradient_model: str | None = None
    """AL's name of ``model`` (AL's default with a client: ``gpt-5-mini``)."""
    apply_edit_model: str | None = None
    """AL's name of ``edit_model`` (AL's default with a client: ``gpt-4.1-mini``)."""
    diversity_temperature: float | None = None
    """AL's name of ``temperature``."""
    beam_rounds: int | None = None
    """AL's name of ``rounds``."""
    rollout_batch_timeout: float | None = None
    """AL's name of ``rollout_timeout_s`` (seconds one batch of rollouts may take)."""
    _poml_trace: bool = False
    """AL's POML tracing flag: accepted, no effect (voltbus's critic prompts are Markdown; every run is events)."""
    result: dict[str, Any] = dataclasses.field(default_factory=dict, repr=False)

    def __post_init__(self) -> None:
        if self.async_openai_client is not None:  # AL's constructor: AL's two default models
            if self.gradient_model is None and self.model == "gpt-4.1-mini":
                self.gradient_model = "gpt-5-mini"
            if self.apply_edit_model is None and self.edit_model is None:
                self.apply_edit_model = "gpt-4.1-mini"
        for al_name, name in ALIASES.items():
            _merge(self, al_name, name)
        if self._poml_trace:
            log.warning("APO(_poml_trace=True) is accepted and has no effect in voltbus: the critic's prompts and "
                        "replies are in the critic's logs, every rollout and step in the run's events")  # fmt: skip
        super().__post_init__()

    def critic_llm(self) -> LLM:
        """The critic model as an ``LLM`` resource."""
        if isinstance(self.critic, LLM):
            return self.critic
        client = self.async_openai_client
        if client is not None and self.critic is None:
            return LLM(endpoint=str(client.base_url).rstrip("/"), model=self.model, api_key=client.api_key)
        endpoint = self.critic or os.environ.get("OPENAI_BASE_URL", "https://api.openai.com/v1")
        return LLM(endpoint=endpoint, model=self.model, api_key=os.environ.get("OPENAI_API_KEY"))

    def critic_client(self) -> Critic:
        """The critic: the critique model, the edit model, and the given client's headers and query."""
        client, options = self.async_openai_client, {}
        if client is not None and self.critic is None:
            options = {k: v for k, v in (("default_headers", getattr(client, "_custom_headers", None)),
                                         ("default_query", getattr(client, "_custom_query", None))) if v}  # fmt: skip
        return Critic(
            self.critic_llm(), self.temperature, self.max_retries, edit_model=self.edit_model, options=options
        )

    def get_best_prompt(self) -> PromptTemplate:
        """The best template of the last ``fit`` (AL's ``get_best_prompt``)."""
        if "template" not in self.result:
            raise ValueError("No best prompt found: APO has not run")
        return PromptTemplate(template=self.result["template"], engine=self.result.get("engine", "f-string"))

    async def fit(self, trainer: TrainerView, agent: Any, train: list[Any], val: list[Any]) -> dict[str, Any]:
        """Search; returns the best template, its published version, the seed's and the best's full-val reward."""
        seed = self.check(trainer.initial_resources, train, val)  # before the system starts
        async with (
            bus(trainer.settings, trainer.say) as settings,
            system(trainer, settings, agent) as s,
        ):
            return await self._search(s, seed, trainer.initial_resources, train, val, trainer.say)

    def check(self, resources: dict[str, Any], train: list[Any], val: list[Any]) -> PromptTemplate:
        """The seed template, or a clear error about the inputs."""
        al_style = self.async_openai_client is not None and self.prompt_resource == DEFAULT_RESOURCE
        if al_style and self.prompt_resource not in resources:
            # AL's constructor, AL's rule: the first PromptTemplate of the resources, whatever its name
            named = [k for k, v in resources.items() if isinstance(v, PromptTemplate)]
            self.prompt_resource = named[0] if named else self.prompt_resource
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
        critic = self.critic_client()
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
        left_out = ("critic", "result", "async_openai_client", "_poml_trace", *ALIASES)
        plain = {f.name: getattr(self, f.name) for f in dataclasses.fields(self) if f.name not in left_out}
        return plain | {"critic_endpoint": llm.endpoint, "critic_model": llm.model}


ALIASES = {
    "gradient_model": "model",
    "apply_edit_model": "edit_model",
    "diversity_temperature": "temperature",
    "beam_rounds": "rounds",
    "rollout_batch_timeout": "rollout_timeout_s",
}
"""Agent Lightning's APO argument -> voltbus's."""


def _merge(apo: APO[Any], al_name: str, name: str) -> None:
    """Apply AL's argument ``al_name`` to voltbus's ``name``; both given with different values is an error."""
    value = getattr(apo, al_name)
    if value is None:
        return
    default = next(f.default for f in dataclasses.fields(apo) if f.name == name)
    if getattr(apo, name) not in (default, value):
        raise ValueError(f"APO: {al_name}={value!r} and {name}={getattr(apo, name)!r} name the same setting")
    setattr(apo, name, value)
