"""The span tree of one attempt, in sequence order (never by clocks), with its hierarchy repaired.

Repairs, each counted: a span id seen twice keeps its first row; a span whose parent is not in the
attempt (an orphan) hangs under the attempt root; a parent cycle is cut at its earliest member (by
sequence), which then hangs under the root. Agent names follow Agent Lightning 0.3's rules.
"""

from __future__ import annotations

from collections.abc import Iterator

import msgspec

from .inputs import SpanRow

ROOT = "attempt"
"""Id of the synthetic root every top-level span hangs under."""

Key = tuple[int, int, int, int]
"""Order of an item in the attempt: (sequence id, 0 for spans / 1 for gateway rows placed after it, stream seq,
place in its message)."""


class Node(msgspec.Struct, kw_only=True):
    """One span and its children in order."""

    key: Key
    """Its place in the attempt's order."""
    span: SpanRow | None
    """The span; None for the root."""
    parent: str | None
    """Parent node id after repair (``ROOT`` for top-level spans, None for the root)."""
    children: list[Node] = []
    """Child nodes, in order."""


class Tree(msgspec.Struct, kw_only=True):
    """The repaired tree and what repair had to do."""

    root: Node
    """The synthetic attempt root."""
    duplicate_spans: int = 0
    """Rows dropped because their span id was already seen."""
    orphans: int = 0
    """Spans whose parent was missing, moved under the root."""
    cycles_broken: int = 0
    """Parent cycles cut."""


def span_key(span: SpanRow) -> Key:
    """A span's order key."""
    return (span.sequence_id, 0, span.seq, span.seq_index)


def build_tree(spans: list[SpanRow]) -> Tree:
    """The attempt's tree: children in sequence order, orphans and cycles repaired."""
    nodes: dict[str, Node] = {}
    duplicates = 0
    for span in sorted(spans, key=lambda s: (*span_key(s), s.span_id)):
        if span.span_id in nodes or span.span_id == ROOT:
            duplicates += 1
            continue
        nodes[span.span_id] = Node(key=span_key(span), span=span, parent=span.parent_id)
    orphans = 0
    for node in nodes.values():
        if node.parent is not None and node.parent not in nodes:
            node.parent, orphans = None, orphans + 1
    broken = _break_cycles(nodes)
    root = Node(key=(0, 0, 0), span=None, parent=None)
    for node in nodes.values():
        node.parent = node.parent or ROOT
        (root if node.parent == ROOT else nodes[node.parent]).children.append(node)
    return Tree(root=root, duplicate_spans=duplicates, orphans=orphans, cycles_broken=broken)


def _break_cycles(nodes: dict[str, Node]) -> int:
    """Cut each parent cycle at its earliest member; return how many were cut."""
    broken, settled = 0, set[str]()
    for start in nodes:
        path: list[str] = []
        current: str | None = start
        while current is not None and current not in settled:
            if current in path:
                cycle = path[path.index(current) :]
                first = min(cycle, key=lambda i: nodes[i].key)
                nodes[first].parent, broken = None, broken + 1
                break
            path.append(current)
            current = nodes[current].parent
        settled.update(path)
    return broken


def walk(node: Node) -> Iterator[Node]:
    """The node and its descendants, pre-order (iterative: deep traces cannot hit the recursion limit)."""
    stack = [node]
    while stack:
        current = stack.pop()
        yield current
        stack.extend(reversed(current.children))


def _text(value: object) -> str | None:
    return value if isinstance(value, str) and value else None


def agent_name(span: SpanRow) -> str | None:
    """The agent a span stands for, by Agent Lightning 0.3's rules (first that fires), or None.

    >>> agent_name(SpanRow(seq=1, sequence_id=1, span_id="a", name="x", attributes={"agent.name": "planner"}))
    'planner'
    >>> agent_name(SpanRow(seq=1, sequence_id=1, span_id="a", name="langchain.Chain.x", attributes={"lc_name": "g"}))
    'g'
    """
    a = span.attributes
    if name := _text(a.get("agent.name")):  # OpenAI Agents SDK
        return name
    if a.get("agentops.span.kind") == "agent" and (name := _text(a.get("operation.name"))):
        return name
    for key in (
        "recipient_agent_type",
        "langchain.chain.type",
        "executor.id",
    ):  # AutoGen, LangChain, MS agent-framework
        if name := _text(a.get(key)):
            return name
    if a.get("type") == "agent" and (name := _text(a.get("agentlightning.operation.input.name"))):  # Weave
        return name
    if span.name.startswith("langchain.Chain."):
        return _text(a.get("lc_name"))
    return None
