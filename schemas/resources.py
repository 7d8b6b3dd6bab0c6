"""Resource versions: immutable, named bundles of what is being optimized (control stream).

Resource kinds and their ``resource_type`` tags are Agent Lightning's (``types/resources.py``), and so are
their pure helpers: ``get_base_url``, ``with_attempted_rollout`` and ``PromptTemplate.format``.
"""

from __future__ import annotations

import functools
from typing import TYPE_CHECKING, Annotated, Any, Literal

import msgspec

from .base import Event, Id, Json, Timestamp

Sha256 = Annotated[str, msgspec.Meta(pattern="^[0-9a-f]{64}$")]
"""A SHA-256 digest: 64 lower-case hex digits."""

SamplingValue = float | int | str | bool
"""One sampling parameter value (temperature, top_p, max_tokens, stop, ...)."""

if TYPE_CHECKING:
    import jinja2


class WeightsRef(msgspec.Struct, frozen=True, kw_only=True):
    """Where a model's weights are stored, and their digest."""

    uri: str
    """Location: a file path, ``file://``, ``s3://`` or ``hf://`` URI."""
    sha256: Sha256
    """Digest of the weights file (or of the manifest for a sharded checkpoint)."""
    format: str = "safetensors"
    """Storage format: ``safetensors`` (full weights) or ``peft-lora`` (a LoRA adapter's tensors, in peft's names)."""
    base_sha256: Sha256 | None = None
    """For an adapter: the digest of the base weights it was trained on (servers merge it into that base)."""


class LLM(msgspec.Struct, frozen=True, kw_only=True, tag="llm", tag_field="resource_type"):
    """An OpenAI-compatible endpoint serving a model (Agent Lightning's ``LLM``)."""

    endpoint: str
    """Base URL of the endpoint."""
    model: str
    """Model name to request."""
    sampling_parameters: dict[str, SamplingValue] = {}
    """Default sampling parameters for calls to this model."""
    api_key: str | None = None
    """Key to send, if the endpoint needs one."""
    weights: WeightsRef | None = None
    """The weights the endpoint serves, when voltbus trained them."""

    def get_base_url(self, *args: object, **kwargs: object) -> str:
        """The endpoint, unchanged; the arguments are accepted and ignored, as in Agent Lightning.

        >>> LLM(endpoint="http://h:1/v1", model="m").get_base_url("ro-1", "at-1")
        'http://h:1/v1'
        """
        return self.endpoint


class ProxyLLM(LLM, frozen=True, kw_only=True, tag="proxy_llm", tag_field="resource_type"):
    """An LLM reached through the voltbus gateway, which attributes each call to its attempt."""

    def get_base_url(  # pyright: ignore[reportIncompatibleMethodOverride]
        self, rollout_id: str | None = None, attempt_id: str | None = None
    ) -> str:
        """The endpoint scoped to one attempt: ``.../rollout/<rollout_id>/attempt/<attempt_id>[/v1]``.

        With neither id it is the raw endpoint; one trailing ``/`` is dropped and a final ``/v1`` stays last.

        >>> proxy = ProxyLLM(endpoint="http://h:1/v1/", model="m")
        >>> proxy.get_base_url("ro-1", "at-1")
        'http://h:1/rollout/ro-1/attempt/at-1/v1'
        >>> ProxyLLM(endpoint="http://h:1", model="m").get_base_url("ro-1", "at-1")
        'http://h:1/rollout/ro-1/attempt/at-1'
        >>> proxy.get_base_url()
        'http://h:1/v1/'
        >>> proxy.get_base_url("ro-1")
        Traceback (most recent call last):
        ...
        ValueError: rollout_id and attempt_id must be strings or all be empty
        """
        if rollout_id is None and attempt_id is None:
            return self.endpoint
        if not (isinstance(rollout_id, str) and isinstance(attempt_id, str)):
            raise ValueError("rollout_id and attempt_id must be strings or all be empty")
        prefix = self.endpoint.removesuffix("/")
        has_v1 = prefix.endswith("/v1")
        prefix = f"{prefix.removesuffix('/v1')}/rollout/{rollout_id}/attempt/{attempt_id}"
        return f"{prefix}/v1" if has_v1 else prefix

    def with_attempted_rollout(self, rollout: Any) -> LLM:
        """A plain ``LLM`` whose endpoint is scoped to the rollout's current attempt.

        ``rollout`` is the store's ``AttemptedRollout`` (the contract does not import the store, which is built on
        it): only its ``rollout_id`` and ``attempt.attempt_id`` are read.

        >>> from types import SimpleNamespace as NS
        >>> proxy = ProxyLLM(endpoint="http://h:1/v1", model="m", api_key="k")
        >>> llm = proxy.with_attempted_rollout(NS(rollout_id="ro-1", attempt=NS(attempt_id="at-1")))
        >>> type(llm).__name__, llm.endpoint, llm.model, llm.api_key
        ('LLM', 'http://h:1/rollout/ro-1/attempt/at-1/v1', 'm', 'k')
        """
        return LLM(
            endpoint=self.get_base_url(rollout.rollout_id, rollout.attempt.attempt_id),
            model=self.model,
            sampling_parameters=self.sampling_parameters,
            api_key=self.api_key,
            weights=self.weights,
        )


class PromptTemplate(msgspec.Struct, frozen=True, kw_only=True, tag="prompt_template", tag_field="resource_type"):
    """A prompt template being optimized (Agent Lightning's ``PromptTemplate``)."""

    template: str
    """The template text."""
    engine: Literal["f-string", "jinja", "poml"] = "f-string"
    """How placeholders are filled."""

    def format(self, **kwargs: object) -> str:
        """The template filled with ``kwargs``: ``str.format`` for f-string, a sandboxed Jinja render for jinja.

        A missing variable is an error with either engine (``KeyError``; ``jinja2.UndefinedError``).

        >>> PromptTemplate(template="Solve: {question}").format(question="1+1")
        'Solve: 1+1'
        >>> loop = "{% for s in xs %}{{ loop.index }}.{{ s | upper }} {% endfor %}"
        >>> steps = PromptTemplate(template=loop, engine="jinja")
        >>> steps.format(xs=["read", "answer"])
        '1.READ 2.ANSWER '
        >>> PromptTemplate(template="<p>{{ q }}</p>", engine="poml").format(q="x")
        Traceback (most recent call last):
        ...
        NotImplementedError: PromptTemplate engine 'poml' is not supported; use 'f-string' or 'jinja'
        """
        if self.engine == "f-string":
            return self.template.format(**kwargs)
        if self.engine == "jinja":
            return _jinja_template(self.template).render(**kwargs)
        raise NotImplementedError(f"PromptTemplate engine {self.engine!r} is not supported; use 'f-string' or 'jinja'")


class GenericResource(msgspec.Struct, frozen=True, kw_only=True, tag="generic", tag_field="resource_type"):
    """Any other resource an agent needs: a JSON value kept verbatim."""

    value: Json
    """The resource, as any JSON value."""


@functools.lru_cache(maxsize=256)
def _jinja_template(source: str) -> jinja2.Template:
    """The compiled template; sandboxed, since templates arrive from the optimizer, and strict about undefined names.

    jinja2 is imported here so that the contract itself does not load it.
    """
    import jinja2.sandbox

    env = jinja2.sandbox.SandboxedEnvironment(undefined=jinja2.StrictUndefined, keep_trailing_newline=True)
    return env.from_string(source)


Resource = LLM | ProxyLLM | PromptTemplate | GenericResource
"""One resource, tagged by its ``resource_type``."""


class ResourcesPublished(Event, frozen=True, kw_only=True):
    """A new immutable version of a named resources bundle (Agent Lightning's ``ResourcesUpdate``)."""

    resources_id: Id
    """Id of this version; rollouts and model calls refer to it."""
    name: Id = "default"
    """Bundle name; each name has its own subject and version sequence."""
    version: Annotated[int, msgspec.Meta(ge=1)]
    """Version number within the bundle, from 1."""
    resources: dict[str, Resource]
    """The resources by the name agents look them up with, e.g. ``main_llm``."""
    created_at: Timestamp
    """When the version was published."""
