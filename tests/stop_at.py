"""A stop for an in-process `train()`: `events, check = stop_at(step)` gives the list to pass as
the run's emit target (append each event to it) and a stop check that asks for a stop with save
once a progress event of `step` or later was emitted."""

from __future__ import annotations

from lorastudio.training.events import StopRequest


def stop_at(step: int) -> tuple[list, object]:
    events: list = []

    def check() -> StopRequest | None:
        done = [e for e in events if e.type == "progress"]
        return StopRequest(save=True) if done and done[-1].step >= step else None

    return events, check
