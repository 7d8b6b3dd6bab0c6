"""Agent Lightning's ``utils.otel``: the span-attribute helpers (tags, links, flattening), voltbus's implementation
(``services/clients/telemetry/attributes.py``). AL's tracer-provider helpers are not carried over."""

from __future__ import annotations

from voltbus.services.clients.telemetry.attributes import (
    extract_links_from_attributes,
    extract_tags_from_attributes,
    filter_and_unflatten_attributes,
    filter_attributes,
    flatten_attributes,
    full_qualified_name,
    make_link_attributes,
    make_tag_attributes,
    query_linked_spans,
    sanitize_attribute_value,
    unflatten_attributes,
)

__all__ = [
    "extract_links_from_attributes",
    "extract_tags_from_attributes",
    "filter_and_unflatten_attributes",
    "filter_attributes",
    "flatten_attributes",
    "full_qualified_name",
    "make_link_attributes",
    "make_tag_attributes",
    "query_linked_spans",
    "sanitize_attribute_value",
    "unflatten_attributes",
]
