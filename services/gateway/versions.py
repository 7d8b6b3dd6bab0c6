"""Which resources version each engine serves, as the weight-swap protocol told the gateway.

An engine that does not follow the bus (vLLM) does not say on its answers which policy sampled a
call (vLLM 0.24 has no such field; newer ones only with ``return_weight_versions``). The learner
pushes weights to it between steps with the gateway paused and drained, then resumes the gateway
with ``{"versions": {engine: resources_id}}``: from then on calls served by that engine are
labelled with that version. A call admitted before a change and recorded after it (which the
drain rules out, unless someone resumed without draining) is labelled unknown (None), never with
a version that may not have sampled it. Until a version is set, an engine's calls are unknown.
"""

from __future__ import annotations

from collections.abc import Mapping

from voltbus.services.urls import engine_root


class ServedVersions:
    """The version each engine serves, and an epoch that moves with every change.

    >>> v = ServedVersions(["http://a/v1", "http://b/v1"])
    >>> epoch = v.epoch
    >>> v.label("http://a/v1", epoch) is None  # nothing known yet
    True
    >>> v.set({"http://a": "run:2"})
    >>> v.label("http://a/v1", v.epoch), v.label("http://a/v1", epoch)  # admitted before the change: unknown
    ('run:2', None)
    >>> v.set({"http://c": "run:2"})
    Traceback (most recent call last):
    ...
    KeyError: "no engine http://c (engines: ['http://a', 'http://b'])"
    """

    def __init__(self, engines: list[str]) -> None:
        self.served: dict[str, str | None] = {engine_root(e): None for e in engines}
        self.epoch = 0

    def check(self, versions: Mapping[str, str | None]) -> dict[str, str | None]:
        """``versions`` keyed by engine root; KeyError naming an engine the gateway does not have."""
        out = {}
        for url, version in versions.items():
            root = engine_root(url)
            if root not in self.served:
                raise KeyError(f"no engine {root} (engines: {sorted(self.served)})")
            out[root] = version
        return out

    def set(self, versions: Mapping[str, str | None]) -> None:
        """Engines now serve these versions (None: unknown, e.g. after a failed reload)."""
        checked = self.check(versions)
        if checked:
            self.served.update(checked)
            self.epoch += 1

    def label(self, upstream: str, epoch: int) -> str | None:
        """The version that served a call admitted at ``epoch`` on ``upstream``; None when unknown."""
        if epoch != self.epoch or not upstream:
            return None
        return self.served.get(engine_root(upstream))

    def snapshot(self) -> dict[str, str | None]:
        """Engine root → version served (None: unknown)."""
        return dict(self.served)
