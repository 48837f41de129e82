"""A browser page for the browser tests: a fresh context (its own storage: each test a new user),
one page with a default timeout for every wait, both closed when the test's block ends."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any


@contextmanager
def open_page(browser: Any, *, timeout_ms: int = 30_000, **context_args: Any) -> Iterator[Any]:
    """`with open_page(browser) as page:` a new context (`context_args`: Playwright's
    new_context arguments, e.g. viewport) and its page, default timeout `timeout_ms`."""
    context = browser.new_context(**context_args)
    page = context.new_page()
    page.set_default_timeout(timeout_ms)
    try:
        yield page
    finally:
        context.close()
