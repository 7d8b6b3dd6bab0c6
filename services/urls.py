"""Lists of URLs as the settings take them from the environment, and an engine's URL as the weight-swap
protocol names it (the learner's resume and the gateway's served versions)."""

from __future__ import annotations

import json


def url_list(value: object) -> object:
    """Accept a JSON list or a comma-separated string (from the environment) as well as a list.

    >>> url_list("http://a, http://b"), url_list('["http://c"]'), url_list(["http://d"])
    (['http://a', 'http://b'], ['http://c'], ['http://d'])
    """
    if isinstance(value, str):
        if value.strip().startswith("["):
            return json.loads(value)
        return [u.strip() for u in value.split(",") if u.strip()]
    return value


def engine_root(url: str) -> str:
    """An engine's URL without a trailing ``/`` or ``/v1``: how versions name it.

    >>> engine_root("http://e:8000/v1/"), engine_root("http://e:8000")
    ('http://e:8000', 'http://e:8000')
    """
    return url.rstrip("/").removesuffix("/v1")
