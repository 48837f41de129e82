"""stub"""

from __future__ import annotations

from typing import Any

from lorastudio.config_import.report import Draft


def build(draft: Draft, data: dict[str, Any], family: str | None) -> None:
    draft.fail("config", "not yet")
