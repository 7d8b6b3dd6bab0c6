"""APO takes the seed template as the agent fills it, wherever the values come from (Agent Lightning's room
selector formats from ``task["task_input"]``), and keeps an edit only if it fills the seed's names."""

from __future__ import annotations

import pytest

import voltbus as agl
from voltbus.services.learner.apo.search import unusable
from voltbus.trainer import APO

ROOM_SEED = agl.PromptTemplate(  # AL 0.3 examples/apo/room_selector.py: prompt_template_baseline()
    template="Find a room on {date} at {time} for {duration_min} minutes, {attendees} attendees. "
    "Needs: {needs}. Accessible required: {accessible_required}"
)
ROOM_TASKS = [  # examples/apo/room_tasks.jsonl's shape: the fields are one level down
    {
        "id": f"s0{i}",
        "task_input": {
            "date": "2025-10-13",
            "time": "16:30",
            "duration_min": 30,
            "attendees": 12,
            "needs": ["projector"],
            "accessible_required": True,
        },
        "expected_choice": "Nova",
    }
    for i in range(3)
]


def test_apo_accepts_the_room_selector_seed_that_the_agent_fills_from_task_input() -> None:
    apo = APO(critic="http://127.0.0.1:9/v1")
    assert apo.check({"prompt_template": ROOM_SEED}, ROOM_TASKS, ROOM_TASKS) == ROOM_SEED
    assert ROOM_SEED.format(**ROOM_TASKS[0]["task_input"])  # as the agent fills it


@pytest.mark.parametrize(
    ("edit", "why"),
    [
        ("Think step by step. Room for {attendees} on {date} at {time}, {duration_min} min; {needs}.", None),
        ("Room on {date}; pick {expected_choice}", "fills names the seed template does not: ['expected_choice']"),
        ("Room on {date", "does not parse: expected '}' before end of string"),
        ("Room on {0}", "does not parse: positional field {0}: templates are filled by name"),
        ("  ", "empty template"),
    ],
)
def test_an_edit_is_kept_only_if_it_fills_the_seeds_names(edit: str, why: str | None) -> None:
    fields = frozenset({"date", "time", "duration_min", "attendees", "needs", "accessible_required"})
    assert unusable(agl.PromptTemplate(template=edit), fields) == why
