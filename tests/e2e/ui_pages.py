"""A browser page for the browser tests: a fresh context (its own storage: each test a new user),
one page with a default timeout for every wait, both closed when the test's block ends; and
`settle(page)`, the wait for a page's settled state before it is measured (RELIABILITY 1481)."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

# Counts the page's fetches still in flight, a response's body included (the app's API client and
# its image reads use fetch; the event stream is an EventSource, never counted). Installed in every
# context open_page makes, before any script of the page runs.
PENDING_JS = """(() => {
  let pending = 0;
  const fetch0 = window.fetch.bind(window);
  window.__apiPending = () => pending;
  window.fetch = (...args) => {
    pending += 1;
    const done = () => setTimeout(() => { pending -= 1; }, 0);  // after the app's own handlers
    const answer = fetch0(...args);
    answer.then((res) => res.clone().arrayBuffer()).then(done, done);
    return answer;
  };
})()"""
# True on the QUIET_FRAMES-th frame in a row with no fetch in flight (window.__settle reset first)
QUIET_FRAMES = 3
_QUIET_JS = f"""() => {{
  const pending = window.__apiPending ? window.__apiPending() : 0;
  window.__settle = pending === 0 ? (window.__settle || 0) + 1 : 0;
  return window.__settle >= {QUIET_FRAMES};
}}"""


def settle(page: Any, *, timeout_ms: int = 60_000) -> None:
    """Wait until the page has its data and has drawn it: no fetch in flight (PENDING_JS) for
    QUIET_FRAMES animation frames in a row, so what arrived was rendered and what measures itself
    (a chart's ResizeObserver) has answered. A condition, not a sleep: a hash navigation's
    `wait_for_load_state("networkidle")` returns at once (the document loaded long before), and a
    page measured before its data arrived on a loaded host read as a layout fault (RELIABILITY
    1481). Raises Playwright's TimeoutError after `timeout_ms` (a page that polls without pause)."""
    page.evaluate("() => { window.__settle = 0; }")
    page.wait_for_function(_QUIET_JS, polling="raf", timeout=timeout_ms)


@contextmanager
def open_page(browser: Any, *, timeout_ms: int = 30_000, **context_args: Any) -> Iterator[Any]:
    """`with open_page(browser) as page:` a new context (`context_args`: Playwright's
    new_context arguments, e.g. viewport) and its page, default timeout `timeout_ms`."""
    context = browser.new_context(**context_args)
    context.add_init_script(PENDING_JS)  # settle() reads it
    page = context.new_page()
    page.set_default_timeout(timeout_ms)
    try:
        yield page
    finally:
        context.close()
