"""The sections of the one Settings object (``services/settings.py``) that belong to one service each: runner, gateway,
inference and learner (the coordinator's, projector's, dashboard's and store server's: ``plane_sections``). Import them
from ``settings``."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Literal

import platformdirs
from pydantic import BaseModel, Field, field_validator, model_validator
from pydantic_settings import NoDecode

from .urls import url_list as _url_list


class RunnerSettings(BaseModel):
    """Runners: how many rollouts at once, heartbeats, isolation, shutdown."""

    slots: int = 1
    """Rollouts run concurrently by one runner process (``-n``)."""
    worker_prefix: str = "Worker"
    """Worker ids are ``<prefix>-<n>`` (Agent Lightning's ``Worker-<n>``). Left unset, each runner takes the next
    free numbers from a counter on the bus, so two runners never share a worker id (the first runner of a bus gets
    ``Worker-0`` to ``Worker-<slots - 1>``); set, they are ``<prefix>-0`` to ``<prefix>-<slots - 1>``, and a runner
    restarted with them ends what its previous process left running (two live runners need two prefixes)."""
    heartbeat_s: float = 5.0
    """Seconds between heartbeats (sent from a thread a busy agent cannot block)."""
    claim_wait_s: float = 1.0
    """How long an idle slot waits for a queued rollout per fetch."""
    busy_report_s: float = Field(default=1.0, ge=0)
    """A slot's worker is reported busy once its attempt has run this long (0: at the claim). An attempt
    that ends sooner writes no worker status at all: its claim and end already name the worker, and
    fast agents then cost two appends per rollout fewer. Heartbeats are not affected."""
    agents: Literal["host", "isolate", "in-process"] = "host"
    """Where agent code runs. ``host``: one agent host process per runner, started with no ``VOLTBUS_*`` variable,
    no bus connection and no secret, runs every slot; its writes go through the runner for its own attempts only.
    ``isolate``: one such process per rollout, killed at the rollout's timeout (a Python start per rollout).
    ``in-process``: in the runner's process, which holds the bus credentials: for trusted agents only (it warns).
    An agent object given to ``Runner`` (``Trainer.fit``) already lives in its caller's process and runs there."""
    key_dir: Path = Field(default_factory=lambda: Path(platformdirs.user_data_dir("voltbus")) / "runner-keys")
    """Where a runner with fixed worker ids (``worker_prefix`` set) keeps its signing key, one file (mode 0600) per
    namespace and prefix: its next process holds the same key, so it can end what this one left running. A runner
    numbered by the bus keeps its key in memory only."""
    agent_user: str | None = None
    """OS user (a name or a uid) that agent processes (the agent host, isolated rollouts) run as, when the runner
    runs as root (compose's image does): they can then not read the runner's credentials file (mode 0600), which
    the scrubbed environment does not hide (``VOLTBUS_RUNNER__AGENT_USER``; compose sets ``nobody``). None: the
    runner's own user."""
    isolate: bool = False
    """Run each rollout in its own process, killed (whole process group) at the rollout's timeout: ``agents =
    "isolate"``, whatever ``agents`` says (``--isolate``)."""
    shutdown_grace_s: float = 30.0
    """On SIGTERM, how long running rollouts may finish before they are ended as failed."""
    group: str = ""
    """The runner group this runner serves (``--group``): it claims only rollouts whose ``RolloutConfig.runner_group``
    names it, from the group's own dispatch consumer. ``""``: the default group (rollouts that name none).
    ``Trainer.fit`` / ``dev`` give their runs' rollouts and runners a group of their own, so runners already on the
    bus never serve them."""
    gateway_url: str | None = None
    """The gateway's base URL; isolated (``agents = "isolate"``), each rollout's process gets Agent Lightning 1.0's
    ``AGL_OPENAI_BASE_URL`` / ``AGL_EVENT_URL`` / ``AGL_KEY`` pointing at it for that attempt."""
    env_map: dict[str, str] = Field(default_factory=dict)
    """Isolated only: environment variable -> task field (``input.question``) or literal, set in every rollout's
    process as a rollout's ``RolloutConfig.env_map`` is (which wins for the names it has): Agent Lightning 1.0's
    ``agentlightning.local.env_map``. ``VOLTBUS_RUNNER__ENV_MAP='{"QUESTION": "input.question"}'``."""

    @property
    def mode(self) -> str:
        """Where agents run: ``isolate`` when ``isolate`` is set, else ``agents``."""
        return "isolate" if self.isolate else self.agents


class GatewaySettings(BaseModel):
    """The OpenAI-compatible gateway that attributes, rewrites and records every model call."""

    host: str = "127.0.0.1"
    """Interface the gateway listens on."""
    port: int = 8766
    """Port of the gateway (``VOLTBUS_GATEWAY__PORT``)."""
    upstream_url: str = "http://127.0.0.1:8000/v1"
    """Base URL of the engine, including ``/v1`` (``VOLTBUS_GATEWAY__UPSTREAM_URL``): the one engine
    when ``upstream_urls`` is empty."""
    upstream_urls: Annotated[list[str], NoDecode] = Field(default_factory=list)
    """Base URLs of several engines, each including ``/v1``; when set, ``upstream_url`` is ignored.
    ``VOLTBUS_GATEWAY__UPSTREAM_URLS='["http://a:8000/v1","http://b:8000/v1"]'`` (a JSON list) or a
    comma-separated string. A call of a rollout always goes to the same engine while that engine is up
    (prefix-cache reuse); unattributed calls go round robin."""
    engine_cooldown_s: float = Field(default=5.0, ge=0)
    """Seconds an engine that failed (transport error, timeout, 408, 429, 5xx) is skipped (tried last)."""
    health_check_s: float = Field(default=0.0, ge=0)
    """Seconds between active health checks (``GET /models`` on every engine); 0: only calls tell."""
    upstream_api_key: str | None = None
    """Bearer key sent to the engine; the agent's own key is never forwarded."""
    timeout_s: float = 300.0
    """Seconds one upstream call may take (read timeout between streamed chunks too) before a 504."""
    connect_timeout_s: float = 5.0
    """Seconds to wait for a connection to the engine."""
    retries: int | None = Field(default=None, ge=0)
    """Extra tries of a call after a transport error, timeout, 408, 429 or 5xx, each on the next engine
    (a streamed call only before its first byte); None: one try per engine (0 with one engine)."""
    retry_backoff_s: float = 0.5
    """Delay before a retry on an engine already tried or down (a fresh engine that is up is tried at
    once); doubled each retry, capped at 8 s."""
    max_body_bytes: int = 2 * 1024 * 1024
    """Largest request body accepted (413 past it); keep it below ``nats.max_payload``."""
    max_messages: int = Field(default=2048, ge=1)
    """Most ``messages`` in one chat call (400 past it)."""
    max_n: int = Field(default=64, ge=1)
    """Most choices (``n``) one call may ask for (400 past it)."""
    max_prompt_tokens: int = Field(default=131_072, ge=1)
    """Most token ids in a completions ``prompt`` given as token ids (400 past it)."""
    max_event_bytes: int = Field(default=256 * 1024, ge=1)
    """Largest body of an agent event post (``/api/rollouts/.../events``; 413 past it)."""
    max_event_fields: int = Field(default=1000, ge=1)
    """Most fields in an agent event's data (with a reward's dimensions; 400 past it)."""
    refuse_ended_attempts: bool = True
    """Refuse (403 ``attempt_ended``) calls and events naming an attempt that has ended (succeeded,
    failed, timed out, superseded by a retry, or its rollout ended): its key stops working with it."""
    tls_cert: Path | None = None
    """Certificate (PEM) to serve HTTPS with (with ``tls_key``); None: plain HTTP."""
    tls_key: Path | None = None
    """Private key (PEM) of ``tls_cert``."""
    agent_key: str | None = None
    """Key agents send (``Authorization: Bearer`` or ``x-api-key``) on model and event routes; None: open."""
    key_secret: str | None = None
    """Secret from which each rollout's own agent key is derived (HMAC-SHA256 of the rollout id; see
    ``services/keys.py``). When set, a call or event attributed to a rollout must present that rollout's
    key (or the admin key): an agent cannot write to another rollout. The runner hands each attempt its
    key (``AGL_KEY``, and the ``api_key`` of its ProxyLLM). Unattributed calls then need ``agent_key``."""
    admin_key: str | None = None
    """Key for ``/admin/*`` and ``/proxy/pause|resume|state`` (401 without it, 403 with an agent key);
    None: open, unless agent keys are set (then closed). Also accepted on agent routes."""
    gateway_id: str | None = None
    """This gateway's id in its pause/resume events (a subject token); None: ``gw-<port>``."""
    pause_retry_after_s: int = 5
    """Default ``Retry-After`` seconds answered while paused."""
    record_unattributed: bool = True
    """Record calls that name no rollout under rollout and attempt id ``unattributed``."""
    model_name: str | None = None
    """Model name sent to the engine on attributed calls, whatever the agent asked for (Agent
    Lightning 1.0's ``default_proxy.model_name``; agents may then send ``model="auto"``); None: the agent's."""
    train_temperature: float | None = Field(default=1.0, ge=0)
    """Temperature forced on calls of ``train`` rollouts: 1.0 by default, so the recorded logprobs are
    those of the distribution the learner trains (ratios against other temperatures are biased); None: the agent's."""
    val_temperature: float | None = Field(default=None, ge=0)
    """Temperature forced on calls of ``val`` and ``test`` rollouts; None (the default): the agent's own,
    so a greedy validation stays greedy (Agent Lightning forces 0.7)."""

    @field_validator("upstream_urls", mode="before")
    @classmethod
    def _split_urls(cls, value: object) -> object:
        return _url_list(value)

    @property
    def engines(self) -> list[str]:
        """The engines' base URLs: ``upstream_urls``, or ``[upstream_url]``.

        >>> GatewaySettings(upstream_url="http://e/v1").engines
        ['http://e/v1']
        >>> GatewaySettings(upstream_urls="http://a/v1, http://b/v1").engines
        ['http://a/v1', 'http://b/v1']
        """
        return list(self.upstream_urls) or [self.upstream_url]


class InferenceSettings(BaseModel):
    """The CPU inference server (``voltbus inference``): a torch model behind an OpenAI-compatible API."""

    model_dir: Path | None = None
    """Model directory to serve (``config.json``, ``model.safetensors``, ``tokenizer.json``); made by
    ``voltbus model init`` (``VOLTBUS_INFERENCE__MODEL_DIR``)."""
    served_model_name: str | None = None
    """Name clients put in ``model``; default: the model directory's name."""
    host: str = "127.0.0.1"
    """Interface the server listens on."""
    admin_key: str | None = None
    """Bearer token required by ``/update_weights``, ``/pause`` and ``/resume`` (401 without it); ``voltbus up`` and
    compose generate it (``inference.env``, ``admin.env``). None: those routes need none (loopback callers)."""
    allowed_hosts: list[str] = Field(default_factory=list)
    """Host names the server answers besides loopback ones and ``host`` (400 for any other ``Host``: no web page
    reaches it through DNS rebinding), e.g. ``["inference"]`` in compose; ``*.domain`` patterns allowed."""
    port: int = 8000
    """Port of the server (vLLM's default, which is also the gateway's default upstream)."""
    device: str = "cpu"
    """torch device (``cpu``, or ``cuda`` where there is one)."""
    torch_threads: int = Field(default=1, ge=0)
    """torch intra-op threads (``torch.set_num_threads``; 0: torch's default). On 2 cores, 1 thread leaves
    a core to the HTTP side and was measured faster and far steadier than 2 (2 threads collapse to a
    fraction of their speed whenever the other core is busy)."""
    max_batch_rows: int = Field(default=64, ge=1)
    """Most sequences generated in one batch (all ``n`` samples of a request always share a batch)."""
    batch_quiet_ms: float = Field(default=10.0, ge=0)
    """A batch starts once no request has arrived for this long ..."""
    batch_max_wait_ms: float = Field(default=50.0, ge=0)
    """... or this long after its first request arrived."""
    max_model_len: int | None = None
    """Most prompt + generated tokens per sequence; default: the model's ``max_position_embeddings``."""
    default_max_tokens: int = Field(default=64, ge=1)
    """Tokens generated when a request sets no ``max_tokens`` (capped by what fits the context)."""
    max_n: int = Field(default=64, ge=1)
    """Largest ``n`` (samples per request) accepted."""
    max_logprobs: int = Field(default=20, ge=0)
    """Largest number of alternatives per position (completions ``logprobs``, chat ``top_logprobs``)."""
    max_body_bytes: int = 2 * 1024 * 1024
    """Largest request body accepted (413 past it)."""
    seed: int | None = None
    """Seed of the sampler for requests without their own ``seed``; None: a fresh one each start."""
    weight_version: str | None = None
    """Label of the weights loaded at start; default ``local:<first 12 hex of their sha256>``."""
    follow_resources: bool = False
    """Follow resources versions on the bus and serve the weights of each one that names this model."""
    restart_delay_s: float = 1.0
    """Seconds before the resources follower starts again after a failure."""


class LearnerSettings(BaseModel):
    """The learner (``voltbus learner``): the training loop, run as one more consumer of the log."""

    run_id: str | None = None
    """The run to start or resume (a subject token); None: a fresh ``run-<hex>``. A learner started
    again with the same id continues after the run's last completed step."""
    model_dir: Path | None = None
    """The policy's starting model directory (``voltbus model init``); its weights are version 1."""
    served_model_name: str = "policy"
    """The model name inference servers serve the policy under (their ``served_model_name``)."""
    gateway_url: str = "http://127.0.0.1:8766/v1"
    """The gateway agents call; published as the policy's ``ProxyLLM`` endpoint."""
    weights_dir: Path = Field(default_factory=lambda: Path(platformdirs.user_data_dir("voltbus")) / "weights")
    """Where each version's weights and the optimizer state are written (a path inference servers can read)."""
    inference_urls: Annotated[list[str], NoDecode] = Field(default_factory=list)
    """Inference servers (without ``/v1``) to wait for until they serve a new version; empty: don't wait."""
    vllm_urls: Annotated[list[str], NoDecode] = Field(default_factory=list)
    """vLLM OpenAI servers (without ``/v1``, started with ``VLLM_SERVER_DEV_MODE=1``) to push each new
    version to, with the gateway paused and drained (``voltbus.services.learner.vllm.push``); they must
    read the version's directory under ``weights_dir``. Empty: none."""
    vllm_timeout_s: float = Field(default=300.0, gt=0)
    """Longest wait for a vLLM server's answer to each request of a weight push (a reload included)."""
    drain_timeout_s: float = Field(default=60.0, gt=0)
    """Longest wait for the gateway's calls in flight to finish before a weight push; past it the push
    fails and the gateway is resumed unchanged."""
    gateway_admin_key: str | None = None
    """The gateway's ``admin_key``, sent to pause and resume it around a weight push."""
    weights_in_bus_mb: float = Field(default=256.0, ge=0)
    """Weights files up to this size are also stored in the bus's object store (``<ns>-weights``) and
    referenced there (``nats-obj://``), so inference servers on other machines can load them; larger
    ones (and all, with 0) are referenced by their path under ``weights_dir``. Checkpoints (weights,
    optimizer state, config) up to this size go there too, so a learner resumes on any machine."""
    steps: int = Field(default=20, ge=1)
    """Learner steps of the run."""
    val_tasks: Path | None = None
    """Validation tasks (JSON Lines): run once in ``val`` mode with the starting weights before the
    first step and with the last version after the last step; the run ends with before -> after."""
    tasks_per_step: int = Field(default=16, ge=1)
    """Distinct tasks per step's batch."""
    group_size: int = Field(default=8, ge=1)
    """Rollouts per task (the GRPO group)."""
    lr: float = Field(default=1e-4, gt=0)
    """AdamW learning rate (1e-3 collapses the tiny model's policy; measured)."""
    epochs: int = Field(default=1, ge=1)
    """Optimizer steps per batch (PPO epochs)."""
    clip: float = Field(default=0.2, gt=0)
    """PPO clip range."""
    kl_coef: float = Field(default=0.0, ge=0)
    """Weight of the KL to the starting policy; 0 skips the reference model."""
    max_staleness: int = Field(default=1, ge=0)
    """Rows sampled more than this many versions before the one being trained are dropped (and counted)."""
    overlap: bool = False
    """Async mode: enqueue the next step's batch before training on this one, so runners keep sampling
    (with the previous version: staleness 1) while the learner trains."""
    rollout_timeout_s: float = Field(default=600.0, gt=0)
    """Longest wait for one step's batch to finish."""
    unclaimed_warn_s: float = Field(default=30.0, gt=0)
    """A step whose rollouts no runner has claimed after this long prints a warning (is a runner attached to the
    namespace?) and goes on waiting up to ``rollout_timeout_s``."""
    rows_wait_s: float = Field(default=30.0, ge=0)
    """Once a step's batch finished, how long the learner waits for the training rows the projector is still
    computing (rollouts whose model calls carry token ids but have no trajectory row yet); the rollouts still
    without rows then are left out of the step, counted and named in a warning."""
    attempt_unresponsive_s: float | None = Field(default=60.0, gt=0)
    """A batch rollout's attempt silent this long (no heartbeat or span: its runner died) is ended by the
    coordinator and the rollout retried; None: never (a dead runner's rollouts then hold the step)."""
    max_attempts: int = Field(default=3, ge=1)
    """Attempts per batch rollout, the first included (retried after an unresponsive or timed-out one)."""
    time_budget_s: float | None = Field(default=None, gt=0)
    """Stop after the step that ends past this many seconds of training (the run still ends
    ``succeeded``, with fewer steps, and says so); None: run every step."""
    seed: int = 0
    """Seed of task order and of torch."""
    backend: Literal["torch", "verl"] = "torch"
    """The actor update: ``torch`` (the CPU model, services/learner/grpo/objective.py) or ``verl`` (verl 0.9.1's
    FSDP2 engine on one CUDA GPU, any Hugging Face causal LM in ``model_dir``; needs
    ``pip install 'voltbus[gpu]'``, see docs/learning.md "The GPU path")."""
    micro_batch_size: int = Field(default=8, ge=1)
    """verl backend: rows per forward/backward pass on the GPU, counted in tokens (a micro-batch holds up
    to this many times the batch's longest row); gradients accumulate over the whole batch."""
    max_tokens_per_pass: int = Field(default=0, ge=0)
    """torch backend: the most padded tokens (rows × their longest row) in one forward/backward pass; a larger
    batch goes through in several passes whose gradients add up to the same update (less memory: SmolLM2's LoRA
    update of 32 rows × 72 tokens peaked at 4.0 GB in one pass, 2.7 GB in passes of 600, in the same time); 0: the
    whole batch in one pass."""
    lora_rank: int = Field(default=0, ge=0)
    """Train LoRA adapters of this rank (peft) on a frozen base instead of every weight; 0: full weights. A
    version then holds only the adapter (published as one small ``adapter_model.safetensors``), and inference
    servers following the bus merge it into their copy of the base, vLLM servers (``vllm_urls``) load it through their
    runtime LoRA API (docs/learning.md "LoRA"). Both backends (torch, verl)."""
    lora_alpha: float = Field(default=16.0, gt=0)
    """LoRA scaling numerator: the adapter's update is scaled by ``lora_alpha / lora_rank``."""
    lora_target_modules: str = "all-linear"
    """Modules that get adapters: ``all-linear`` (every linear layer but the output head) or comma-separated
    module names (``q_proj,v_proj``)."""
    shard_mb: float = Field(default=5000.0, gt=0)
    """A version whose weights are larger than this is written as shards of at most this size
    (``model-0000k-of-0000n.safetensors`` + ``model.safetensors.index.json``, Hugging Face's layout), published
    as one digest over the set (docs/learning.md "Several devices")."""
    ranks_timeout_s: float = Field(default=86400.0, gt=0)
    """Data parallel over several ranks (``torchrun``): longest a rank waits for the others in a collective,
    e.g. for rank 0's next batch while the runners sample it."""

    @field_validator("inference_urls", "vllm_urls", mode="before")
    @classmethod
    def _split_urls(cls, value: object) -> object:
        return _url_list(value)

    @model_validator(mode="after")
    def _overlap_needs_staleness(self) -> LearnerSettings:
        if self.overlap and self.max_staleness < 1:
            raise ValueError("overlap samples the next batch with the previous version: it needs max_staleness >= 1")
        return self
