"""The autouse fixture of the API tests that read the lora-targets check child's answers
(tests/api/test_api_lora_targets_*.py): `from tests.target_check_patience import
patient_target_check  # noqa: F401` makes it apply to a module's tests."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from lorastudio.jobs import target_check


@pytest.fixture(autouse=True)
def patient_target_check() -> Iterator[None]:
    """The check's child (torch and diffusers imports) ran past target_check.TIMEOUT_S (120 s) on
    a 2-core host at load 11: its preflight then noted "not checked" and these tests failed. The
    bound is test_caption_tokens_sources' subject (a 0.01 s one), not these tests'. Each test has
    an empty answer cache of its own (no answer of another test, real or faked, is found or left).
    (Its own MonkeyPatch: a test's monkeypatch.undo() keeps it.)"""
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(target_check, "TIMEOUT_S", 400.0)
        patch.setattr(target_check, "_cache", {})
        yield
