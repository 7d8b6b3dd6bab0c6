"""Rollout states for ``wait_for_rollouts`` from the projection: one query for a wave of rollouts this client has not
seen finished, instead of one history read from the log each (issue 25: on a long log nats-server reads an old
rollout's message blocks from disk, 1-3 s for a wave of 128 old rollouts).

The projection's folds are exact as of its control checkpoint S, read in the same snapshot. What came after S is
read from the log: the subjects of the rollout messages stored after S (the stream's end, which the projector follows
closely). A rollout with a message there, or missing from the projection, is read from the log as before; so is every
rollout when the projector does not answer, follows another bus or namespace, or is far behind. A state answered here
is the one the log's own fold gives, with the same last sequence (``wave_states`` counts quarantined messages too).
"""

from __future__ import annotations

import logging
import time

import msgspec

from voltbus.services.lifecycle import RolloutState

from .queries import _QUERIES, QueryMethods

log = logging.getLogger(__name__)

TAIL_AT_MOST = 10_000
"""Control messages after the projection's checkpoint beyond which a wave is read from the log (the projector is
behind: reading what it has not applied would cost more than it saves)."""
ASK_WITHIN_S = 2.0
"""How long the projector has to answer a wave (the log answers it otherwise)."""
RETRY_AFTER_S = 30.0
"""How long a client reads waves from the log alone after the projector did not answer or could not be used (not
after one that was only far behind)."""

_state = msgspec.json.Decoder(RolloutState)


class ProjectedStates(QueryMethods):
    """Rollout states read from the projection, checked against the log's end."""

    _projection_off_until: float = 0.0
    """Until when (``time.monotonic``) waves are read from the log alone."""
    _projection_checked: bool = False
    """Whether the projector was found to follow this client's bus and namespace (asked once)."""

    async def _projected_states(self, rollout_ids: list[str]) -> dict[str, tuple[RolloutState, int]]:
        """The current state and last sequence of those of ``rollout_ids`` the projection answers exactly (the others,
        and all of them when it cannot be used, are left to the log)."""
        if not rollout_ids or time.monotonic() < self._projection_off_until:
            return {}
        try:
            return await self._from_projection(rollout_ids)
        except ProjectionBehind as exc:  # this wave only: a projector catches up
            log.debug("wave of %d rollouts read from the log: %s", len(rollout_ids), exc)
        except Exception as exc:  # any failure here only costs the reads it meant to save
            log.info("wave of %d rollouts read from the log: projection not used (%s)", len(rollout_ids), exc)
            self._projection_off_until = time.monotonic() + RETRY_AFTER_S
        return {}

    async def _from_projection(self, rollout_ids: list[str]) -> dict[str, tuple[RolloutState, int]]:
        rows = await self._ask(rollout_ids)
        info = await self.log.js.stream_info(self.topology.control_stream)  # after: the projection cannot be past it
        await self._check_projector(str(info.created or ""))
        checkpoint, end = rows[0]["checkpoint"] if rows else None, info.state.last_seq
        if checkpoint is None or checkpoint > end:
            raise ProjectionNotUsed(f"the projection's control checkpoint {checkpoint} is not in the log (at {end})")
        changed = None if end - checkpoint > TAIL_AT_MOST else await self.log.rollouts_after(checkpoint, TAIL_AT_MOST)
        if changed is None:
            raise ProjectionBehind(f"more than {TAIL_AT_MOST} messages after the projection's checkpoint {checkpoint}")
        return {
            r["rollout_id"]: (_state.decode(r["state"]), r["last_seq"])
            for r in rows
            if r["rollout_id"] is not None and r["rollout_id"] not in changed
        }

    async def _ask(self, rollout_ids: list[str]) -> list[dict[str, object]]:
        """The ``wave_states`` rows of ``rollout_ids``, as the projection stands (no wait for this client's writes:
        what it has not applied is read from the log)."""
        params = {"rollout_ids": rollout_ids, "rollout_prefix": f"{self.settings.namespace}.ro."}
        return await self._rows(_QUERIES["wave_states"], params, wait_for_writes=False, timeout=ASK_WITHIN_S)

    async def _check_projector(self, bus_id: str) -> None:
        """Refuse a projector of another bus or namespace (its folds would be another log's); asked once."""
        if self._projection_checked:
            return
        response = await self._http().get(self._projector("/identity"), headers=self._auth(), timeout=ASK_WITHIN_S)
        found = response.json() if response.status_code == 200 else {}
        if found.get("namespace") != self.settings.namespace or found.get("bus_id") != bus_id:
            raise ProjectionNotUsed(f"the projector follows {found or response.status_code}, not this bus or namespace")
        self._projection_checked = True


class ProjectionNotUsed(Exception):
    """Why the projection is not used (for ``RETRY_AFTER_S``; the log answers)."""


class ProjectionBehind(ProjectionNotUsed):
    """The projection is too far behind the log to answer this wave (the log does)."""
