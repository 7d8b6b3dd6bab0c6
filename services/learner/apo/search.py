"""The pure parts of APO's beam search over prompt templates: drawing batches, choosing parents, keeping
the best candidates, checking an edit against the seed's names, and rendering rollouts for the critic.
Nothing here does I/O; ``voltbus.trainer.apo`` runs the search against the bus.
"""

from __future__ import annotations

import json
import random
import re
import string
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar

from voltbus.schemas.resources import PromptTemplate

T = TypeVar("T")

TRACE_CHARS = 1500
"""How much of one rollout's trace the critic sees."""


@dataclass(kw_only=True)
class SearchSettings:
    """The beam search's shape (Agent Lightning's defaults)."""

    beam_width: int = 4
    """Templates kept after each round."""
    branch_factor: int = 4
    """Children (critique + edit) written per parent."""
    rounds: int = 3
    """Rounds of the search; each is a step of the run."""
    val_batch_size: int = 16
    """Validation tasks every candidate of a round is scored on (one batch per round, shared)."""
    gradient_batch_size: int = 4
    """Training tasks a parent runs before each critique."""
    prompt_resource: str = "prompt_template"
    """The name of the ``PromptTemplate`` in the trainer's initial resources."""
    rollout_timeout_s: float = 600.0
    """How long one batch of rollouts may take."""
    seed: int = 0
    """Seeds batch draws and parent sampling."""
    run_initial_validation: bool = True
    """Score the seed template on the whole validation set before the search (the run's ``before``); False: the
    seed is first scored with the round's candidates on one validation batch, and ``before`` is None."""

    def __post_init__(self) -> None:
        sizes = ("beam_width", "branch_factor", "rounds", "val_batch_size", "gradient_batch_size")
        if bad := [n for n in sizes if getattr(self, n) < 1]:
            raise ValueError(f"APO: {', '.join(bad)} must be at least 1")


@dataclass(frozen=True)
class Candidate:
    """A prompt template published as a resources version, and its score on the latest validation batch."""

    template: PromptTemplate
    resources_id: str
    score: float = float("-inf")


@dataclass(frozen=True)
class Example:
    """One rollout of a template, as the critic sees it."""

    input: Any
    status: str
    reward: float
    trace: str


def batches(items: Sequence[T], size: int, rng: random.Random) -> Iterator[list[T]]:
    """Endless batches of ``size`` distinct items (Agent Lightning's ``batch_iter_over_dataset``): each pass
    reshuffles; a batch as large as the data is the whole data reshuffled.

    >>> it = batches([1, 2, 3], 2, random.Random(0))
    >>> drawn = [next(it) for _ in range(3)]
    >>> all(len(set(b)) == 2 for b in drawn), sorted(sum(drawn, []))
    (True, [1, 1, 2, 2, 3, 3])
    """
    if not items:
        raise ValueError("cannot draw batches from an empty dataset")
    if size >= len(items):
        while True:
            yield rng.sample(list(items), len(items))
    batch: list[int] = []
    while True:
        order = rng.sample(range(len(items)), len(items))
        for i in order:
            if i not in batch:
                batch.append(i)
            if len(batch) == size:
                yield [items[j] for j in batch]
                batch = []


def parents(beam: Sequence[Candidate], width: int, rng: random.Random) -> list[Candidate]:
    """``width`` parents: a beam smaller than that is repeated cyclically, a full one is sampled without
    replacement.

    >>> seed = Candidate(PromptTemplate(template="{q}"), "run:1")
    >>> [p.resources_id for p in parents([seed], 3, random.Random(0))]
    ['run:1', 'run:1', 'run:1']
    """
    if len(beam) < width:
        return [beam[i % len(beam)] for i in range(width)]
    return rng.sample(list(beam), width)


def select(candidates: Sequence[Candidate], width: int) -> list[Candidate]:
    """The ``width`` best by score; ties keep their order (the older candidate first)."""
    return sorted(candidates, key=lambda c: -c.score)[:width]


def unfence(text: str) -> str:
    """The reply without surrounding whitespace or one enclosing Markdown code fence.

    >>> unfence("```text\\nAnswer: {q}\\n```"), unfence("```\\n```")
    ('Answer: {q}', '')
    """
    text = text.strip()
    fenced = re.fullmatch(r"```[\w-]*\n(.*?)\n?```", text, flags=re.DOTALL)
    return fenced.group(1).strip() if fenced else text


def placeholders(template: PromptTemplate) -> frozenset[str]:
    """The names a template fills (the root of ``{a.b}`` / ``{a[0]}``; jinja's undeclared variables);
    ValueError when it does not parse or has a positional field.

    >>> sorted(placeholders(PromptTemplate(template="Find {date} at {t.hour:{width}} {{literal}}")))
    ['date', 't', 'width']
    >>> loop = "{% for s in steps %}{{ s }} {{ goal }}{% endfor %}"
    >>> sorted(placeholders(PromptTemplate(template=loop, engine="jinja")))
    ['goal', 'steps']
    >>> placeholders(PromptTemplate(template="Answer {question"))
    Traceback (most recent call last):
    ...
    ValueError: expected '}' before end of string
    """
    if template.engine == "jinja":
        import jinja2.meta
        import jinja2.sandbox

        try:
            ast = jinja2.sandbox.SandboxedEnvironment().parse(template.template)
        except jinja2.TemplateSyntaxError as exc:
            raise ValueError(str(exc)) from None
        return frozenset(jinja2.meta.find_undeclared_variables(ast))
    if template.engine != "f-string":
        raise ValueError(f"engine {template.engine!r} is not supported")
    return frozenset(_fields(template.template))


def _fields(text: str) -> Iterator[str]:
    for _, field, spec, _ in string.Formatter().parse(text):
        if field is None:
            continue
        root = re.split(r"[.\[]", field, maxsplit=1)[0]
        if not root or root.isdigit():
            raise ValueError(f"positional field {{{field}}}: templates are filled by name")
        yield root
        yield from _fields(spec or "")


def unusable(template: PromptTemplate, fields: frozenset[str] | None = None) -> str | None:
    """Why ``template`` cannot be used (empty, does not parse, or fills a name outside ``fields``: those of the
    seed template, which the agent is known to supply), or None. Where the agent takes the values from (the
    task, a field of it, anything it computes) is the agent's business, as in Agent Lightning.

    >>> unusable(PromptTemplate(template="Solve {question} step by step"), frozenset({"question"})) is None
    True
    >>> unusable(PromptTemplate(template="Solve {problem}"), frozenset({"question"}))
    "fills names the seed template does not: ['problem']"
    >>> unusable(PromptTemplate(template="Find a room on {date}"))  # the seed: any names
    >>> unusable(PromptTemplate(template="Answer {question"))
    "does not parse: expected '}' before end of string"
    """
    if not template.template.strip():
        return "empty template"
    try:
        names = placeholders(template)
    except ValueError as exc:
        return f"does not parse: {exc}"
    if fields is not None and (extra := sorted(names - fields)):
        return f"fills names the seed template does not: {extra}"
    return None


def render_examples(examples: Sequence[Example]) -> str:
    """The rollouts as Markdown for the critic, lowest reward first."""
    parts = []
    for i, ex in enumerate(sorted(examples, key=lambda e: e.reward), 1):
        trace = ex.trace if len(ex.trace) <= TRACE_CHARS else ex.trace[:TRACE_CHARS] + " …"
        parts.append(
            f"### Example {i}: reward {ex.reward:.3f} ({ex.status})\n"
            f"Input: {json.dumps(ex.input, ensure_ascii=False, default=str)}\n"
            f"Trace:\n{trace or '(no spans recorded)'}\n"
        )
    return "\n".join(parts)
