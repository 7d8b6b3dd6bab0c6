"""The SQL example's data: a 40-row SQLite table built in code, and templated questions with gold SQL.

The table is ``emp(name, dept, city, age, pay)`` (pay in thousands), the same rows on every machine.
Each question template has a twin that reads almost the same and asks the opposite (oldest and
youngest, total and average, over and under, how many and who); the warm start mixes twins up on
purpose, and GRPO has to learn which is which.
"""

from __future__ import annotations

import functools
import random
import sqlite3
from typing import Any

NAMES = (
    "ada bob cai dev eli fay gus hal ida jon kai lea max nia oto pia quin rae sol tom "
    "uma vic wes xia yan zoe abe bea cyd dot eve flo gil hana ike jax kit lou mia ned"
).split()
DEPTS = ("sales", "ops", "hr", "it", "legal")
CITIES = ("oslo", "rome", "lima", "kyiv", "pune")

TEMPLATES: list[tuple[str, str, str]] = [
    # (question, gold SQL, slot): consecutive pairs are twins
    ("how many in {v}?", "select count(*) from emp where dept='{v}'", "dept"),
    ("who is in {v}?", "select name from emp where dept='{v}'", "dept"),
    ("oldest in {v}?", "select max(age) from emp where dept='{v}'", "dept"),
    ("youngest in {v}?", "select min(age) from emp where dept='{v}'", "dept"),
    ("total pay in {v}?", "select sum(pay) from emp where dept='{v}'", "dept"),
    ("average pay in {v}?", "select avg(pay) from emp where dept='{v}'", "dept"),
    ("who earns over {v}?", "select name from emp where pay>{v}", "pay"),
    ("who earns under {v}?", "select name from emp where pay<{v}", "pay"),
    ("who is older than {v}?", "select name from emp where age>{v}", "age"),
    ("who is younger than {v}?", "select name from emp where age<{v}", "age"),
    ("how many live in {v}?", "select count(*) from emp where city='{v}'", "city"),
    ("who lives in {v}?", "select name from emp where city='{v}'", "city"),
]


def rows() -> list[tuple[str, str, str, int, int]]:
    """The table's rows: ``(name, dept, city, age, pay)``, the same every time."""
    rng = random.Random(7)
    return [(n, rng.choice(DEPTS), rng.choice(CITIES), rng.randint(21, 64), rng.randint(30, 99)) for n in NAMES]


@functools.cache
def database() -> sqlite3.Connection:
    """An in-memory copy of the table, read-only, one per process (queries run on the event loop's thread)."""
    con = sqlite3.connect(":memory:", check_same_thread=False)
    con.execute("create table emp (name text, dept text, city text, age integer, pay integer)")
    con.executemany("insert into emp values (?, ?, ?, ?, ?)", rows())
    con.commit()
    con.execute("pragma query_only = 1")
    return con


def slot_value(slot: str, rng: random.Random) -> str:
    if slot == "dept":
        return rng.choice(DEPTS)
    if slot == "city":
        return rng.choice(CITIES)
    return str(rng.randint(25, 60) if slot == "age" else rng.randint(35, 95))


def question(rng: random.Random) -> tuple[int, str]:
    """A template index and the value of its slot."""
    index = rng.randrange(len(TEMPLATES))
    return index, slot_value(TEMPLATES[index][2], rng)


def twin(index: int) -> int:
    """The template that reads almost the same and asks the opposite.

    >>> [twin(i) for i in range(4)]
    [1, 0, 3, 2]
    """
    return index ^ 1


def render(index: int, value: str) -> tuple[str, str]:
    """The question text and its SQL for template ``index``."""
    q, sql, _ = TEMPLATES[index]
    return q.format(v=value), sql.format(v=value)


def tasks(count: int, seed: int) -> list[dict[str, Any]]:
    """``count`` questions drawn with ``seed``: ``{"id", "question", "sql"}`` (the gold query)."""
    rng = random.Random(seed)
    out = []
    for i in range(count):
        text, sql = render(*question(rng))
        out.append({"id": f"{seed}-{i}", "question": text, "sql": sql})
    return out


def execute(sql: str, max_steps: int = 200_000) -> list[tuple[Any, ...]] | None:
    """The sorted result rows of ``sql``, or None if it fails, writes, or runs too long.

    >>> execute("select count(*) from emp"), execute("drop table emp"), execute("selec 1")
    ([(40,)], None, None)
    """
    con = database()
    steps = 0

    def budget() -> int:
        nonlocal steps
        steps += 1
        return steps > max_steps // 1000  # called every 1000 VM instructions; non-zero aborts

    con.set_progress_handler(budget, 1000)
    try:
        return sorted(con.execute(sql).fetchall(), key=repr)
    except (sqlite3.Error, sqlite3.Warning, OverflowError, ValueError):
        return None
    finally:
        con.set_progress_handler(None, 0)
