"""Bad input to the store is refused with a typed error that says what and why; nothing is appended."""

from __future__ import annotations

import pytest

from voltbus.schemas.errors import InvalidCommand, InvalidId, PayloadTooLarge, UnknownRollout
from voltbus.schemas.rollouts import RolloutConfig
from voltbus.store import Store


async def control_messages(store: Store) -> int:
    return (await store.log.js.stream_info(store.topology.control_stream)).state.messages


@pytest.mark.parametrize(
    ("config", "says"),
    [
        ({"max_attempts": 0}, "max_attempts"),
        ({"retry_condition": ["exploded"]}, "retry_condition"),
        ({"timeout_seconds": "soon"}, "timeout_seconds"),
        (RolloutConfig(max_attempts=-2), "max_attempts"),
    ],
)
async def test_malformed_config_is_refused(store: Store, config: object, says: str) -> None:
    with pytest.raises(InvalidCommand, match=f"invalid rollout config.*{says}"):
        await store.enqueue_rollout("task", config=config)  # type: ignore[arg-type]
    assert await control_messages(store) == 0


async def test_input_that_is_not_json_is_refused(store: Store) -> None:
    with pytest.raises(InvalidCommand, match="rollout input is not JSON-serializable"):
        await store.enqueue_rollout({"f": object()})
    with pytest.raises(InvalidCommand, match="metadata\\['k'\\]"):
        await store.enqueue_rollout("ok", metadata={"k": 1j})
    assert await control_messages(store) == 0


async def test_oversized_input_is_refused_before_sending(store: Store) -> None:
    with pytest.raises(PayloadTooLarge, match="over the 1048576-byte limit"):
        await store.enqueue_rollout("x" * (1024 * 1024 + 10))
    assert await control_messages(store) == 0


async def test_ids_that_cannot_be_subjects_are_refused(store: Store) -> None:
    with pytest.raises(InvalidId, match="rollout id 'a.b'"):
        await store.get_rollout_by_id("a.b")
    with pytest.raises(UnknownRollout, match="ro-nothing"):
        await store.cancel_rollout("ro-nothing")
    assert await control_messages(store) == 0
