"""Span attribute helpers: flatten and unflatten nested values, sanitise them, and read tags, links and exceptions.

Same semantics as Agent Lightning 0.3's ``agentlightning/utils/otel.py``.
"""

from __future__ import annotations

import json
import logging
import traceback
from collections.abc import Mapping, Sequence
from typing import Any, Protocol, TypeVar, cast

import msgspec
from opentelemetry.sdk.trace import ReadableSpan

from voltbus.schemas.base import Attributes, AttributeValue
from voltbus.services.clients.telemetry import semconv
from voltbus.services.clients.telemetry.semconv import LightningSpanAttributes, LinkAttributes, LinkMatch

logger = logging.getLogger(__name__)

_PRIMITIVES = (str, int, float, bool)


class SpanLike(Protocol):
    """Anything with a name and attributes: ``SpanCore``, a store ``Span``, an OpenTelemetry ``ReadableSpan``."""

    @property
    def name(self) -> str: ...

    @property
    def attributes(self) -> Mapping[str, Any] | None: ...


SpanT = TypeVar("SpanT", bound=SpanLike)


def full_qualified_name(obj: type[Any]) -> str:
    """``module.QualName`` of a type; a bare name for builtins.

    >>> full_qualified_name(dict), full_qualified_name(LinkMatch)
    ('dict', 'voltbus.services.clients.telemetry.semconv.LinkMatch')
    """
    if str(obj.__module__) == "builtins":
        return obj.__qualname__
    return f"{obj.__module__}.{obj.__qualname__}"


def flatten_attributes(nested_data: Any, *, expand_leaf_lists: bool = False) -> dict[str, Any]:
    """Flatten nested dicts and lists into dotted keys; lists of one primitive type stay values unless expanded.

    >>> flatten_attributes({"a": {"b": 1, "c": [2, 3]}})
    {'a.b': 1, 'a.c': [2, 3]}
    >>> flatten_attributes({"a": {"c": [2, 3]}, "d": [{"e": None}]}, expand_leaf_lists=True)
    {'a.c.0': 2, 'a.c.1': 3, 'd.0.e': None}
    """
    flat: dict[str, Any] = {}

    def walk(value: Any, prefix: str) -> None:
        if isinstance(value, dict):
            for key, item in cast(dict[Any, Any], value).items():
                if not isinstance(key, str):
                    raise ValueError(
                        f"Only string keys are supported in dictionaries, got '{key}' of type {type(key)} in {prefix}"
                    )
                walk(item, f"{prefix}.{key}" if prefix else key)
        elif isinstance(value, list):
            items = cast(list[Any], value)
            if not expand_leaf_lists and prefix and items and all(isinstance(i, _PRIMITIVES) for i in items):
                # bool before int: bool is a subclass of int.
                kinds = {next(k for k in (bool, int, float, str) if isinstance(i, k)) for i in items}
                if len(kinds) == 1:
                    flat[prefix] = items
                    return
                logger.warning("List attribute '%s' contains mixed primitive types %s; expanding.", prefix, kinds)
            for index, item in enumerate(items):
                walk(item, f"{prefix}.{index}" if prefix else str(index))
        else:
            flat[prefix] = value

    walk(nested_data, "")
    return flat


def _listify(node: Any) -> Any:
    if isinstance(node, list):
        return [_listify(item) for item in cast(list[Any], node)]
    if not isinstance(node, dict):
        return node
    tree = cast(dict[str, Any], node)
    for key, child in tree.items():
        tree[key] = _listify(child)
    if tree and all(key.isdigit() for key in tree) and sorted(int(k) for k in tree) == list(range(len(tree))):
        return [tree[str(i)] for i in range(len(tree))]
    return tree


def unflatten_attributes(flat_data: Mapping[str, Any]) -> dict[str, Any] | list[Any]:
    """Rebuild the nested value; a dict whose keys are exactly ``0..n-1`` becomes a list.

    >>> unflatten_attributes({"a.b": 1, "a.c.0": 2, "a.c.1": 3, "d.0": 4, "d.2": 5})
    {'a': {'b': 1, 'c': [2, 3]}, 'd': {'0': 4, '2': 5}}
    >>> unflatten_attributes({"0": "x", "1": "y"})
    ['x', 'y']
    """
    root: dict[str, Any] = {}
    for flat_key, value in flat_data.items():
        parts = flat_key.split(".")
        node = root
        for part in parts[:-1]:
            if not isinstance(node.get(part), dict):
                node[part] = {}
            node = node[part]
        node[parts[-1]] = value
    return cast(dict[str, Any] | list[Any], _listify(root))


def filter_attributes(attributes: Mapping[str, Any], prefix: str) -> dict[str, Any]:
    """The attributes whose key is ``prefix`` itself or starts with ``prefix.``.

    >>> filter_attributes({"p": 1, "p.a": 2, "pa": 3, "q": 4}, "p")
    {'p': 1, 'p.a': 2}
    """
    dotted = prefix + "."
    return {k: v for k, v in attributes.items() if k == prefix or k.startswith(dotted)}


def filter_and_unflatten_attributes(attributes: Mapping[str, Any], prefix: str) -> dict[str, Any] | list[Any]:
    """Unflatten the attributes under ``prefix``, with the prefix stripped; a key equal to it raises ValueError.

    >>> filter_and_unflatten_attributes({"t.0": "a", "t.1": "b", "u": 1}, "t")
    ['a', 'b']
    """
    stripped: dict[str, Any] = {}
    for key, value in filter_attributes(attributes, prefix).items():
        if key == prefix:
            raise ValueError(f"Cannot unflatten attribute with key exactly equal to prefix: {prefix}")
        stripped[key[len(prefix) + 1 :]] = value
    return unflatten_attributes(stripped)


def _sanitize_list(values: list[Any]) -> AttributeValue:
    if all(isinstance(v, str) for v in values) or all(isinstance(v, bool) for v in values):
        return list(values)
    if all(isinstance(v, (int, bool)) for v in values):
        return [int(v) for v in values]
    if all(isinstance(v, (float, int, bool)) for v in values):
        return [float(v) for v in values]
    raise ValueError(f"List must contain only one type of primitive values, got: {set(type(v) for v in values)}.")


def sanitize_attribute_value(value: Any, force: bool = True) -> AttributeValue:
    """A valid attribute value: primitives kept, homogeneous lists normalised, anything else JSON.

    >>> sanitize_attribute_value([True, 2]), sanitize_attribute_value([1, 2.5]), sanitize_attribute_value(None)
    ([1, 2], [1.0, 2.5], 'null')
    >>> sanitize_attribute_value({"a": (1, "x")})
    '{"a": [1, "x"]}'
    """
    if isinstance(value, _PRIMITIVES):
        return value
    if isinstance(value, list):
        try:
            return _sanitize_list(cast(list[Any], value))
        except ValueError as exc:
            logger.warning(f"Failed to sanitize list attribute. Fallback to JSON serialization: {exc}")
    try:
        return json.dumps(value, default=str if force else None)
    except (TypeError, ValueError) as exc:
        raise ValueError(f"Object must be JSON serializable, got: {type(value)}.") from exc


def sanitize_attributes(attributes: Mapping[str, Any], force: bool = True) -> Attributes:
    """Every value through :func:`sanitize_attribute_value`; a failure names its key.

    >>> sanitize_attributes({"a": [1, "x"], "b": 2})
    {'a': '[1, "x"]', 'b': 2}
    """
    result: Attributes = {}
    for key, value in attributes.items():
        try:
            result[key] = sanitize_attribute_value(value, force=force)
        except ValueError as exc:
            raise ValueError(f"Failed to sanitize attribute '{key}': {exc}") from exc
    return result


def check_attributes_sanity(attributes: Mapping[Any, Any]) -> None:
    """Raise ValueError unless keys are str and values are primitives or one-type primitive lists.

    >>> check_attributes_sanity({"a": 1, "b": [1, True], "c": "x"})
    >>> check_attributes_sanity({"a": None})
    Traceback (most recent call last):
    ValueError: Attribute value must be a string, int, float, bool, or list of these, got <class 'NoneType'> ...
    """
    for key, value in attributes.items():
        if not isinstance(key, str):
            raise ValueError(f"Attribute key must be a string, got {type(key)} for key '{key}'")
        if isinstance(value, list):
            try:
                _sanitize_list(cast(list[Any], value))
            except ValueError as exc:
                raise ValueError(f"Failed to sanitize list attribute '{key}': {exc}") from exc
        elif not isinstance(value, _PRIMITIVES):
            raise ValueError(
                f"Attribute value must be a string, int, float, bool, or list of these, got {type(value)} "
                f"for value '{value}'"
            )


def make_tag_attributes(tags: list[str]) -> dict[str, Any]:
    """Tags as ``agentlightning.tag.<i>`` attributes.

    >>> make_tag_attributes(["fast", "reliable"])
    {'agentlightning.tag.0': 'fast', 'agentlightning.tag.1': 'reliable'}
    """
    return flatten_attributes({LightningSpanAttributes.TAG.value: tags}, expand_leaf_lists=True)


def extract_tags_from_attributes(attributes: Mapping[str, Any]) -> list[str]:
    """The tags in flattened attributes (``[]`` when there are none).

    >>> extract_tags_from_attributes({"agentlightning.tag.0": "fast", "other": 1})
    ['fast']
    """
    tags = filter_and_unflatten_attributes(attributes, LightningSpanAttributes.TAG.value)
    return [] if tags == {} else msgspec.convert(tags, list[str])


def make_link_attributes(links: Mapping[str, object]) -> dict[str, Any]:
    """Links (attribute key to expected value) as ``agentlightning.link.<i>.*`` attributes.

    >>> make_link_attributes({"gen_ai.response.id": "r-1"})
    {'agentlightning.link.0.key_match': 'gen_ai.response.id', 'agentlightning.link.0.value_match': 'r-1'}
    """
    link_list: list[dict[str, str]] = []
    for key, value in links.items():
        if not isinstance(value, str):
            raise ValueError(f"Link value must be a string, got {type(value)} for key '{key}'")
        link_list.append({LinkAttributes.KEY_MATCH.value: key, LinkAttributes.VALUE_MATCH.value: value})
    return flatten_attributes({LightningSpanAttributes.LINK.value: link_list}, expand_leaf_lists=True)


def extract_links_from_attributes(attributes: Mapping[str, Any]) -> list[LinkMatch]:
    """The links in flattened attributes (``[]`` when there are none).

    >>> extract_links_from_attributes(make_link_attributes({"span_id": "ab"}))
    [LinkMatch(key_match='span_id', value_match='ab')]
    """
    links = filter_and_unflatten_attributes(attributes, LightningSpanAttributes.LINK.value)
    return [] if links == {} else msgspec.convert(links, list[LinkMatch])


def _span_id_field(span: SpanLike, field: str) -> str | None:
    if isinstance(span, ReadableSpan):
        if span.context is None:
            return None
        return f"{span.context.trace_id:032x}" if field == "trace_id" else f"{span.context.span_id:016x}"
    value = getattr(span, field, None)
    return value if isinstance(value, str) else None


def _matches(span: SpanLike, link: LinkMatch) -> bool:
    if link.key_match in ("trace_id", "span_id"):
        return _span_id_field(span, link.key_match) == link.value_match
    return (span.attributes or {}).get(link.key_match) == link.value_match


def query_linked_spans(spans: Sequence[SpanT], links: Sequence[LinkMatch]) -> list[SpanT]:
    """The spans matching every link exactly (``trace_id`` and ``span_id`` match the span's own ids).

    >>> from voltbus.services.clients.telemetry.tracing import SpanCore
    >>> spans = [SpanCore(name="a", attributes={"k": "1"}), SpanCore(name="b", attributes={"k": "2"})]
    >>> [s.name for s in query_linked_spans(spans, [LinkMatch(key_match="k", value_match="2")])]
    ['b']
    """
    return [span for span in spans if all(_matches(span, link) for link in links)]


def format_exception_attributes(exception: BaseException) -> Attributes:
    """OpenTelemetry's ``exception.*`` attributes; the stack trace only when there is one.

    >>> format_exception_attributes(ValueError("boom"))["exception.message"]
    'boom'
    """
    stacktrace = "".join(traceback.format_exception(type(exception), exception, exception.__traceback__))
    attributes: Attributes = {
        semconv.EXCEPTION_TYPE: type(exception).__name__,
        semconv.EXCEPTION_MESSAGE: str(exception),
        semconv.EXCEPTION_ESCAPED: True,
    }
    if stacktrace.strip():
        attributes[semconv.EXCEPTION_STACKTRACE] = stacktrace
    return attributes
