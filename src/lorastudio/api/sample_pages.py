"""GET /api/runs/{id}/samples a page of rounds at a time (session 36 kpfix5): a long run's 400
rounds of 4 previews answered 553 KB in one listing (RELIABILITY 1341).

A round is the previews of one step. A page holds the newest rounds from its cursor down, listed
oldest step first then prompt order (as the whole listing was), so a client that asks with no
parameters gets the newest DEFAULT_ROUNDS rounds, in the order it always read; a run with fewer
answers every preview as before. The cursor is the step of a page's oldest round: the next page
holds the rounds of smaller steps, so a round written meanwhile (a larger step) neither repeats
nor skips one. `step` picks one round (a preview's "Generate again" looks up its own).
"""

from __future__ import annotations

from collections.abc import Sequence

from lorastudio.training.sample_files import SampleFile

DEFAULT_ROUNDS = 100  # rounds in a page asked for without `limit`
CURSOR = r"^[0-9]{1,12}$"  # a page's next_cursor: the step of its oldest round


def page_rounds(
    found: Sequence[SampleFile], limit: int, cursor: int | None = None, step: int | None = None
) -> tuple[list[SampleFile], int, int | None]:
    """(the page's previews, the rounds `step` keeps, next cursor or None) of `found` (ordered by
    step, then prompt index: sample_files.list_samples): the newest `limit` rounds of a step below
    `cursor` (when given), only round `step` when given."""
    kept = [f for f in found if step is None or f.step == step]
    steps = sorted({f.step for f in kept})
    below = [s for s in steps if cursor is None or s < cursor]
    chosen = below[-limit:]
    lowest = chosen[0] if chosen else None
    page = [
        f for f in kept if lowest is not None and lowest <= f.step and (cursor is None or f.step < cursor)
    ]
    more = lowest is not None and len(below) > len(chosen)
    return page, len(steps), lowest if more else None
