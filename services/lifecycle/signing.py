"""The rollout decider as one holder uses it: its commands carry the holder's key, its events its signature."""

from __future__ import annotations

import msgspec

from voltbus.schemas.commands import RolloutCommand
from voltbus.schemas.rollouts import RolloutEvent

from . import decider
from .authority import HOLDER_ENDS, HOLDER_EVENTS, Holder
from .state import RolloutState


class SigningDecider:
    """``decider`` for commands from ``holder``: each command is decided as sent by that key, and the attempt
    events it yields are signed (a Decider for ``EventLog.transact``; pure, as Ed25519 is deterministic)."""

    def __init__(self, holder: Holder) -> None:
        self.holder = holder

    initial_state = staticmethod(decider.initial_state)
    evolve = staticmethod(decider.evolve)
    fold = staticmethod(decider.fold)
    is_terminal = staticmethod(decider.is_terminal)

    def keyed(self, command: RolloutCommand) -> RolloutCommand:
        """``command`` with this holder's key, where it has a key field the caller left empty."""
        if getattr(command, "holder_key", self.holder.public) is None:
            return msgspec.structs.replace(command, holder_key=self.holder.public)  # type: ignore[call-arg]
        return command

    def decide(self, command: RolloutCommand, state: RolloutState) -> list[RolloutEvent]:
        """The events ``decider.decide`` yields for the keyed command; the attempt events, and the ends (timeout,
        unresponsive, final failure) of an attempt this holder holds, signed."""
        return [self._signed(e, state) for e in decider.decide(self.keyed(command), state)]

    def _signed(self, event: RolloutEvent, state: RolloutState) -> RolloutEvent:
        if isinstance(event, HOLDER_EVENTS):
            return self.holder.sign(event)
        if isinstance(event, HOLDER_ENDS) and event.attempt_id is not None:
            attempt = state.attempt(event.attempt_id)
            if attempt is not None and attempt.holder_key == self.holder.public:
                return self.holder.sign(event)
        return event
