"""``--isolate``: each rollout in its own process group, killed whole when the rollout's timeout passes.

The child gets no bus credentials and no bus connection: its environment has no ``VOLTBUS_*``
variable, and its job (on stdin) holds the agent, the rollout, its resources (resolved here) and two
pipe descriptors. It runs the rollout as an in-process slot would, with a tracer whose store is a
``PipeStore``: every write goes to this runner as a request frame, which ``PipeServer`` carries out
for the child's own attempt only (see ``pipe.py``). The agent's stdout and stdin stay its own.
The runner's heartbeat thread keeps beating for the attempt while the child runs; a kill at the
timeout expires the attempt as ``timeout`` (so the retry policy applies), a child that dies
without ending its attempt fails it with the exit status, and one still running when the runner stops
(past ``shutdown_grace_s``) is killed and its attempt fails as ``Cancelled``.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import pwd
import signal
import sys
from collections.abc import Mapping

import msgspec

from voltbus.schemas.errors import InvalidCommand
from voltbus.schemas.resources import Resource
from voltbus.schemas.rollouts import ErrorInfo
from voltbus.services.clients.store import AttemptedRollout, Store
from voltbus.services.keys import NO_KEY

from .envmap import EnvMapError, env_from_map
from .execute import CANCELLED, MissingResources, error_info, resources_for, with_key
from .pipe import PipeServer, SpanLimits

log = logging.getLogger(__name__)


class ChildJob(msgspec.Struct, kw_only=True):
    """What the child process needs, sent on its stdin."""

    agent: str
    rollout: AttemptedRollout
    resources: dict[str, Resource]
    """The rollout's resources, resolved by the runner (ProxyLLMs carry the agent key)."""
    requests_fd: int
    """The pipe the child writes its store requests to."""
    replies_fd: int
    """The pipe the runner answers on."""
    limits: SpanLimits
    key: str | None = None
    """The agent key its ProxyLLM resources carry."""


def child_environment(parent: Mapping[str, str], extra: Mapping[str, str] | None = None) -> dict[str, str]:
    """The agent process's environment: the runner's less every ``VOLTBUS_*`` variable (bus credentials,
    gateway secrets: an agent gets none), plus ``extra`` (the attempt's ``AGL_*`` variables).

    >>> child_environment({"PATH": "/bin", "VOLTBUS_NATS__PASSWORD": "pw"}, {"AGL_KEY": "k"})
    {'PATH': '/bin', 'AGL_KEY': 'k'}
    """
    kept = {k: v for k, v in parent.items() if not k.startswith("VOLTBUS_")}
    return kept | dict(extra or {})


def as_user(user: str | None) -> dict[str, object]:
    """``create_subprocess_exec`` arguments that start an agent process as ``user`` (with its group and no other):
    none when ``user`` is None. A user that does not exist, or a runner that may not switch to it, fails here.

    >>> as_user(None)
    {}
    """
    if user is None:
        return {}
    try:
        entry = pwd.getpwuid(int(user)) if user.isdigit() else pwd.getpwnam(user)
    except KeyError:
        raise InvalidCommand(f"runner.agent_user {user!r}: no such user on this machine") from None
    if os.geteuid() != 0 and entry.pw_uid != os.geteuid():
        raise InvalidCommand(
            f"runner.agent_user {user!r}: only a runner started as root can run agents as another user"
        )
    return {"user": entry.pw_uid, "group": entry.pw_gid, "extra_groups": []}


def exit_reason(code: int) -> str:
    """Why an agent process ended, from its exit status."""
    if code < 0:
        return f"the agent process was killed by signal {-code} ({signal.Signals(-code).name})"
    return f"the agent process exited with code {code} without ending its attempt"


def agl_environment(gateway_url: str, rollout: AttemptedRollout, key: str | None) -> dict[str, str]:
    """Agent Lightning 1.0's agent variables for one attempt, pointing at the gateway.

    >>> from voltbus.services.clients.store import Attempt, AttemptedRollout
    >>> r = AttemptedRollout(rollout_id="ro-1", input=None, start_time=0, mode="val",
    ...     attempt=Attempt(rollout_id="ro-1", attempt_id="at-1", sequence_id=1, start_time=0))
    >>> agl_environment("http://gw:8766/", r, None)["AGL_OPENAI_BASE_URL"]
    'http://gw:8766/proxy/rollout/ro-1/attempt/at-1/mode/val/openai/v1'
    >>> agl_environment("http://gw:8766/", r, None)["AGL_KEY"]  # no key required: still one the client takes
    'voltbus-no-key'
    """
    base, rid, aid = gateway_url.rstrip("/"), rollout.rollout_id, rollout.attempt.attempt_id
    mode = "train" if rollout.mode == "train" else "val"
    return {
        "AGL_OPENAI_BASE_URL": f"{base}/proxy/rollout/{rid}/attempt/{aid}/mode/{mode}/openai/v1",
        "AGL_EVENT_URL": f"{base}/api/rollouts/{rid}/attempt/{aid}/events",
        "AGL_KEY": NO_KEY if key is None else key,
    }


async def run_isolated(
    store: Store,
    agent: str,
    rollout: AttemptedRollout,
    env: dict[str, str] | None = None,
    key: str | None = None,
    published: dict[str, float] | None = None,
    user: str | None = None,
    env_map: dict[str, str] | None = None,
) -> None:
    """Run one rollout in a child process (with ``env`` added, then the variables of ``env_map`` (the runner's)
    updated with the rollout's ``config.env_map``, which may override ``env``, as in AL 1.0); kill its process
    group at the rollout's timeout.
    ``published``: where the times of its stored spans are kept (the heartbeat's signs of life)."""
    rid, aid, worker = rollout.rollout_id, rollout.attempt.attempt_id, rollout.attempt.worker_id
    try:
        env = (env or {}) | env_from_map(rollout.input, (env_map or {}) | rollout.config.env_map)
        resources = with_key(await resources_for(store, rollout), key)
    except (MissingResources, EnvMapError) as exc:
        with contextlib.suppress(InvalidCommand):
            await store.finish_attempt(rid, aid, error_info(exc), worker_id=worker)
        return
    requests_r, requests_w = os.pipe()
    replies_r, replies_w = os.pipe()
    limits = SpanLimits(
        span_value_max_bytes=store.settings.span_value_max_bytes, span_max_bytes=store.settings.span_max_bytes
    )
    job = ChildJob(
        agent=agent, rollout=rollout, resources=resources, requests_fd=requests_w, replies_fd=replies_r,
        limits=limits, key=key,
    )  # fmt: skip
    try:
        proc = await asyncio.create_subprocess_exec(
            sys.executable,
            "-m",
            "voltbus.services.runner.child",
            stdin=asyncio.subprocess.PIPE,
            start_new_session=True,
            env=child_environment(os.environ, env),
            pass_fds=(requests_w, replies_r),
            **as_user(user),  # type: ignore[arg-type]
        )
    except BaseException:
        for fd in (requests_r, requests_w, replies_r, replies_w):
            os.close(fd)
        raise
    os.close(requests_w)
    os.close(replies_r)
    server = PipeServer(store, rollout, requests_r, replies_w)
    if published is not None:
        server.published = published
    serving = asyncio.create_task(server.serve())
    try:
        await _watch(store, proc, rollout, msgspec.json.encode(job))
    finally:
        serving.cancel()
        await asyncio.gather(serving, return_exceptions=True)


async def _watch(store: Store, proc: asyncio.subprocess.Process, rollout: AttemptedRollout, job: bytes) -> None:
    """Wait for the child; kill its group at the timeout (expired as ``timeout``) or when the runner stops
    (failed as ``Cancelled``); fail a dead child's attempt."""
    rid, aid = rollout.rollout_id, rollout.attempt.attempt_id
    try:
        await asyncio.wait_for(proc.communicate(job), timeout=rollout.config.timeout_seconds)
    except TimeoutError:
        log.warning("rollout_id=%s attempt_id=%s: timeout, killing the agent's process group", rid, aid)
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
        await proc.wait()
        await store.expire_attempt(rid, aid, "timeout")
        return
    except asyncio.CancelledError:  # the runner stopped: the attempt ends failed, as an in-process one does
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
        await proc.wait()
        with contextlib.suppress(InvalidCommand):  # the child may have ended the attempt before the kill
            await store.finish_attempt(rid, aid, CANCELLED, worker_id=rollout.attempt.worker_id)
        raise
    if proc.returncode:
        with contextlib.suppress(InvalidCommand):  # the child may have ended the attempt before dying
            died = ErrorInfo(type="AgentProcessDied", message=exit_reason(proc.returncode))
            await store.finish_attempt(rid, aid, died, worker_id=rollout.attempt.worker_id)
