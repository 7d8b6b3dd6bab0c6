"""The browser tests on a machine without a browser: skipped with the reason, a failure where CI requires one."""

from __future__ import annotations

import pytest

from .conftest import missing_browser


def test_a_missing_browser_skips_with_its_reason() -> None:
    with pytest.raises(pytest.skip.Exception, match="need Chromium.*VOLTBUS_TEST_REQUIRE_BROWSER"):
        missing_browser("the dashboard tests need Chromium", require=False)


def test_a_missing_browser_fails_where_ci_requires_it() -> None:
    with pytest.raises(pytest.fail.Exception, match="need Chromium: VOLTBUS_TEST_REQUIRE_BROWSER is set"):
        missing_browser("the dashboard tests need Chromium", require=True)
