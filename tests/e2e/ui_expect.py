"""Playwright's auto-waiting assertions for the browser tests, waiting as long as the pages' own
default timeout (30 s: a loaded 2-core host) rather than expect's 5 s.

An assertion on what a page shows right after waiting for something else (`count() == 0`,
`is_visible()`, `inner_text() ==`) reads the page once, and fails when the page is a render
behind on a loaded host: `expect(locator).to_have_count(0)` and the like wait for it. Without the
playwright package `expect` is None: the tests that use it skip (conftest's `browser` fixture).
"""

from __future__ import annotations

from typing import Any

expect: Any
try:
    from playwright.sync_api import expect
except ImportError:  # the browser tests skip
    expect = None
else:
    expect.set_options(timeout=30_000)
