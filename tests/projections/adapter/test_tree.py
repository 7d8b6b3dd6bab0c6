"""Hierarchy repair: duplicates, orphans and cycles are fixed and counted, never by timestamps."""

from __future__ import annotations

from voltbus.projections.adapter import AdapterSettings, SpanRow, adapt
from voltbus.projections.adapter.tree import ROOT, build_tree, walk

from .trace import Trace


def test_orphans_hang_under_the_root_and_keep_their_agent_scope_from_it() -> None:
    t = Trace()
    agent = t.agent("solver")
    t.llm([1], [2], parent=agent)
    t.llm([3], [4], parent="00000000deadbeef")  # its parent span was never stored
    out = adapt(t.attempt(), AdapterSettings(agent_match="solver"))
    assert [r.prompt_ids for r in out.triplets] == [[1]]
    assert (out.summary.orphans, out.summary.outside_agent) == (1, 1)


def test_cycles_are_cut_at_their_earliest_span() -> None:
    spans = [
        SpanRow(seq=1, sequence_id=1, span_id="a", parent_id="c", name="x"),
        SpanRow(seq=2, sequence_id=2, span_id="b", parent_id="a", name="y"),
        SpanRow(seq=3, sequence_id=3, span_id="c", parent_id="b", name="z"),
        SpanRow(seq=4, sequence_id=4, span_id="d", parent_id="d", name="self"),
    ]
    tree = build_tree(spans)
    assert tree.cycles_broken == 2
    assert [n.span.span_id for n in tree.root.children if n.span] == ["a", "d"]
    assert [n.span.span_id for n in walk(tree.root) if n.span] == ["a", "b", "c", "d"]
    assert all(n.parent == ROOT for n in tree.root.children)


def test_children_follow_sequence_ids_not_input_order_and_duplicates_count_once() -> None:
    spans = [
        SpanRow(seq=5, sequence_id=3, span_id="late", parent_id=None, name="x"),
        SpanRow(seq=9, sequence_id=1, span_id="early", parent_id=None, name="x"),
        SpanRow(seq=10, sequence_id=2, span_id="early", parent_id=None, name="x"),
    ]
    tree = build_tree(spans)
    assert [n.span.span_id for n in tree.root.children if n.span] == ["early", "late"]
    assert tree.duplicate_spans == 1
