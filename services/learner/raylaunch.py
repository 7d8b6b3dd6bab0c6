"""The learner's ranks as Ray actors (``ray.ranks``; docs/learning.md "Several devices"): a placement group of one
bundle per rank, one actor per bundle given the variables ``torchrun`` gives each process it starts, each running
the same rank entry point as under ``torchrun`` (``app.run``, so ``grpo/ranks.py`` is the same code)."""

from __future__ import annotations

import os
import socket
from collections.abc import Callable, Sequence
from typing import Any

from voltbus.services.settings import RaySettings

from .session import LearnerError

HINT = "pip install 'voltbus[ray]' (ray 2.60.0), the same on every node"


class Rank:
    """One rank's actor: where it runs, a free port there (rank 0's is the ranks' meeting point), and the rank."""

    def place(self) -> tuple[str, str]:
        """This actor's node id and IP address."""
        import ray

        return ray.get_runtime_context().get_node_id(), ray.util.get_node_ip_address()

    def free_port(self) -> int:
        """A TCP port free on this node now (torch binds it as ``MASTER_PORT`` moments later, as torchrun does)."""
        with socket.socket() as sock:
            sock.bind(("", 0))
            return sock.getsockname()[1]

    def run(self, env: dict[str, str], entry: Callable[[], Any]) -> Any:
        """Set torchrun's variables in this process (torch's ``env://`` reads them), then run ``entry``."""
        os.environ.update(env)
        return entry()


def import_ray() -> Any:
    """Ray, or a LearnerError saying how to install it."""
    try:
        import ray
    except ImportError:
        raise LearnerError(f"ray.ranks starts the learner's ranks on Ray, which is not installed: {HINT}") from None
    return ray


def bundle(s: RaySettings, cluster: dict[str, float]) -> dict[str, float]:
    """One rank's bundle: its CPUs, and a GPU where the cluster has GPUs (unless ``gpus_per_rank`` says otherwise).

    >>> bundle(RaySettings(), {"CPU": 8.0}), bundle(RaySettings(cpus_per_rank=4), {"CPU": 8.0, "GPU": 2.0})
    ({'CPU': 1.0}, {'CPU': 4.0, 'GPU': 1.0})
    """
    gpus = s.gpus_per_rank if s.gpus_per_rank is not None else (1.0 if cluster.get("GPU", 0) > 0 else 0.0)
    return {"CPU": s.cpus_per_rank} | ({"GPU": gpus} if gpus else {})


def torchrun_env(places: Sequence[tuple[str, str]], port: int) -> list[dict[str, str]]:
    """Each rank's variables as ``torchrun`` sets them, from each rank's (node id, IP) in rank order: ``LOCAL_RANK``
    counts the ranks on the same node, ``MASTER_ADDR`` is rank 0's node.

    >>> [e["LOCAL_RANK"] + e["LOCAL_WORLD_SIZE"] + e["MASTER_ADDR"] for e in torchrun_env(
    ...     [("a", "10.0.0.1"), ("b", "10.0.0.2"), ("a", "10.0.0.1")], 29500)]
    ['0210.0.0.1', '0110.0.0.1', '1210.0.0.1']
    """
    nodes = [node for node, _ in places]
    return [
        {
            "RANK": str(rank),
            "WORLD_SIZE": str(len(places)),
            "LOCAL_RANK": str(nodes[:rank].count(node)),
            "LOCAL_WORLD_SIZE": str(nodes.count(node)),
            "MASTER_ADDR": places[0][1],
            "MASTER_PORT": str(port),
        }
        for rank, node in enumerate(nodes)
    ]


def run_ranks(s: RaySettings, entry: Callable[[], Any], say: Callable[[str], None]) -> list[Any]:
    """Run ``entry`` on ``s.ranks`` Ray actors (the ranks of one torch job) and return each rank's result; the first
    rank to fail stops the others and raises its error. Joins ``s.address`` (or starts a local Ray) unless this
    process is already connected; the placement group and its actors are gone when this returns or raises
    (Ctrl-C included)."""
    ray = import_ray()
    started = not ray.is_initialized()
    if started:
        join(ray, s)
    try:
        return _placed(ray, s, entry, say)
    finally:
        if started:
            ray.shutdown()


def join(ray: Any, s: RaySettings) -> None:
    """Connect to ``s.address`` (a ``HOST:PORT`` that does not answer within ``timeout_s`` is an error here: Ray
    itself retries for minutes), or start a local Ray when it is None."""
    host, _, port = (s.address or "").rpartition(":")
    if host and "://" not in s.address and port.isdigit():
        try:
            socket.create_connection((host, int(port)), timeout=s.timeout_s).close()
        except OSError as exc:
            raise LearnerError(f"no Ray cluster answers at {s.address} (ray.address): {exc}") from None
    try:
        ray.init(address=s.address)
    except ConnectionError as exc:
        raise LearnerError(f"cannot join the Ray cluster at {s.address} (ray.address): {exc}") from None


def _placed(ray: Any, s: RaySettings, entry: Callable[[], Any], say: Callable[[str], None]) -> list[Any]:
    from ray.util.placement_group import placement_group, remove_placement_group
    from ray.util.scheduling_strategies import PlacementGroupSchedulingStrategy

    one = bundle(s, ray.cluster_resources())
    group = placement_group([dict(one) for _ in range(s.ranks)], strategy=s.strategy)
    actors: list[Any] = []
    try:
        if not group.wait(timeout_seconds=s.timeout_s):
            raise LearnerError(unplaced(s, one, ray.cluster_resources(), ray.available_resources()))
        remote = ray.remote(Rank)
        for r in range(s.ranks):
            where = PlacementGroupSchedulingStrategy(group, placement_group_bundle_index=r)
            options = {"num_cpus": one["CPU"], "num_gpus": one.get("GPU", 0), "scheduling_strategy": where}
            actors.append(remote.options(**options).remote())
        places = _answers(ray, [a.place.remote() for a in actors], s.timeout_s)
        port = _answers(ray, [actors[0].free_port.remote()], s.timeout_s)[0]
        envs = torchrun_env(places, port)
        for r, (_, ip) in enumerate(places):
            say(f"ray: rank {r} of {s.ranks} on node {ip} ({one})")
        say(f"ray: the ranks meet at rank 0's {envs[0]['MASTER_ADDR']}:{port} (strategy {s.strategy})")
        return _results(ray, {a.run.remote(env, entry): r for r, (a, env) in enumerate(zip(actors, envs, strict=True))})
    finally:
        for actor in actors:
            ray.kill(actor, no_restart=True)
        remove_placement_group(group)


def _answers(ray: Any, refs: list[Any], timeout_s: float) -> list[Any]:
    try:
        return ray.get(refs, timeout=timeout_s)
    except ray.exceptions.GetTimeoutError:
        raise LearnerError(f"the learner's Ray actors did not start within {timeout_s:g} s (ray.timeout_s)") from None
    except ray.exceptions.RayError as exc:
        raise LearnerError(f"a learner rank's Ray actor could not start: {reason(exc)}") from None


def _results(ray: Any, refs: dict[Any, int]) -> list[Any]:
    results: list[Any] = [None] * len(refs)
    pending = list(refs)
    while pending:
        done, pending = ray.wait(pending, num_returns=1, timeout=1.0)  # Ctrl-C is seen between two waits
        if not done:
            continue
        try:
            results[refs[done[0]]] = ray.get(done[0])
        except ray.exceptions.RayError as exc:
            failed = f"learner rank {refs[done[0]]} of {len(refs)} failed: {reason(exc)}"
            raise LearnerError(f"{failed} (the other ranks were stopped)") from None
    return results


def reason(exc: BaseException) -> str:
    """A rank's error in one line: the exception its entry raised, or why its actor died."""
    cause = getattr(exc, "cause", None)
    if isinstance(cause, BaseException):
        return f"{type(cause).__name__}: {cause}"
    lines = [line.strip() for line in str(exc).splitlines() if line.strip()]
    return " ".join(lines)[:600]


def unplaced(s: RaySettings, one: dict[str, float], total: dict[str, float], free: dict[str, float]) -> str:
    """Why the ranks were not placed: what was asked, what the cluster has in all and free.

    >>> unplaced(RaySettings(ranks=3, timeout_s=5), {"CPU": 1.0}, {"CPU": 2.0, "memory": 9.0}, {})
    "the Ray cluster cannot place 3 learner ranks of {'CPU': 1.0} each (strategy PACK) within 5 s: it has \
{'CPU': 2.0} in all, {'CPU': 0.0} free (ask for fewer ranks or less per rank: ray.ranks, ray.cpus_per_rank, \
ray.gpus_per_rank, ray.strategy)"
    """
    keys = ("CPU", "GPU")
    has = {k: total.get(k, 0.0) for k in keys if k in total or k in one}
    left = {k: free.get(k, 0.0) for k in has}
    return (
        f"the Ray cluster cannot place {s.ranks} learner ranks of {one} each (strategy {s.strategy}) within "
        f"{s.timeout_s:g} s: it has {has} in all, {left} free (ask for fewer ranks or less per rank: ray.ranks, "
        "ray.cpus_per_rank, ray.gpus_per_rank, ray.strategy)"
    )
