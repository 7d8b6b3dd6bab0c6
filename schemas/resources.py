"""Resource versions: immutable, named bundles of what is being optimized (control stream).

Resource kinds and their ``resource_type`` tags are Agent Lightning's (``types/resources.py``).
"""

from __future__ import annotations

from typing import Annotated, Literal

import msgspec

from .base import Event, Id, Json, Timestamp

Sha256 = Annotated[str, msgspec.Meta(pattern="^[0-9a-f]{64}$")]
"""A SHA-256 digest: 64 lower-case hex digits."""

SamplingValue = float | int | str | bool
"""One sampling parameter value (temperature, top_p, max_tokens, stop, ...)."""


class WeightsRef(msgspec.Struct, frozen=True, kw_only=True):
    """Where a model's weights are stored, and their digest."""

    uri: str
    """Location: a file path, ``file://``, ``s3://`` or ``hf://`` URI."""
    sha256: Sha256
    """Digest of the weights file (or of the manifest for a sharded checkpoint)."""
    format: str = "safetensors"
    """Storage format."""


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


class ProxyLLM(LLM, frozen=True, kw_only=True, tag="proxy_llm", tag_field="resource_type"):
    """An LLM reached through the voltbus gateway, which attributes each call to its attempt."""


class PromptTemplate(msgspec.Struct, frozen=True, kw_only=True, tag="prompt_template", tag_field="resource_type"):
    """A prompt template being optimized (Agent Lightning's ``PromptTemplate``)."""

    template: str
    """The template text."""
    engine: Literal["f-string", "jinja", "poml"] = "f-string"
    """How placeholders are filled."""


class GenericResource(msgspec.Struct, frozen=True, kw_only=True, tag="generic", tag_field="resource_type"):
    """Any other resource an agent needs: a JSON value kept verbatim."""

    value: Json
    """The resource, as any JSON value."""


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
