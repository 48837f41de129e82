"""A preflight whose lora_targets check is left to the run's start says so in its answer's
`notes` (jobs/target_check.py, fix 146): turned away by the waiting bound while other checks
run, its child crashed, or the base is not on this machine; a check that was made (it passed)
adds no note."""

from __future__ import annotations

import shutil
import threading
from collections.abc import Callable
from pathlib import Path
from types import SimpleNamespace

import pytest
from fastapi.testclient import TestClient
from huggingface_hub import constants
from tests.polling import until
from tests.target_check_child import IN_PROCESS
from tests.target_check_patience import patient_target_check  # noqa: F401  (autouse)

from lorastudio.config import TrainConfig, resolve_train_config
from lorastudio.jobs import target_check
from lorastudio.settings import Settings

BOUND_NOTE = "lora_targets not checked now: 3 checks already running or waiting; the run's start checks it"


@pytest.fixture
def shapes(settings: Settings, sample_dataset: Path) -> None:
    settings.ensure_dirs()
    shutil.copytree(sample_dataset, settings.datasets_dir / "shapes")


def test_a_preflight_turned_away_by_the_waiting_bound_says_the_check_was_not_made(
    client: TestClient, shapes: None, flux_config: Callable[..., dict], monkeypatch: pytest.MonkeyPatch
) -> None:
    release = threading.Event()

    def blocked(cfg: TrainConfig, timeout_s: float) -> target_check.TargetAnswer | str:
        """The child, answering "passed" (the check's own pass: test_api_lora_targets_preflight);
        the busy configs' only once released."""
        if cfg.lora_targets and cfg.lora_targets[0].startswith("busy_"):
            release.wait(30)  # a child's torch import on a loaded host: many seconds
        return target_check.TargetAnswer()

    monkeypatch.setattr(target_check, "_ask_child", blocked)
    base = str(flux_config()["base_model"])
    busy = [
        threading.Thread(
            target=target_check.check_lora_targets,
            args=(
                resolve_train_config(
                    TrainConfig(family="flux", base_model=base, data_dir="/d", lora_targets=[f"busy_{i}"])
                ),
            ),
        )
        for i in range(1 + target_check.MAX_WAITING)
    ]
    for t in busy:
        t.start()
    try:
        until(
            lambda: target_check._slots._value == 0, 10, "saturated bound"
        )  # one running, MAX_WAITING waiting
        answer = client.post(
            "/api/train/preflight", json={"config": flux_config(lora_targets=["to_q", "to_k"])}
        )
        assert answer.status_code == 200, answer.text
        assert answer.json()["notes"] == [BOUND_NOTE]
    finally:
        release.set()
        for t in busy:
            t.join(30)
    passed = client.post("/api/train/preflight", json={"config": flux_config(lora_targets=["to_q", "to_k"])})
    assert passed.status_code == 200, passed.text
    assert passed.json()["notes"] == []  # checked (the child said it passed): nothing to say


def test_a_crashed_check_child_is_named_and_a_passing_check_is_not(
    client: TestClient, shapes: None, flux_config: Callable[..., dict], monkeypatch: pytest.MonkeyPatch
) -> None:
    config = flux_config(lora_targets=["to_q"], rank_pattern={"to_q": 8}, output_name="crash")
    monkeypatch.setattr(target_check, "sys", SimpleNamespace(executable="/bin/false"))  # a child that dies
    crashed = client.post("/api/train/preflight", json={"config": config})
    assert crashed.status_code == 200, crashed.text
    assert crashed.json()["notes"] == [
        "lora_targets / rank_pattern not checked now: the check failed (exit code 1); the run's start checks them"
    ]
    monkeypatch.undo()  # nothing was cached: the next preflight asks the child again
    # a child that passes (the check's own pass, and a real child's 5 CPU s of imports: test_api_lora_targets_preflight)
    monkeypatch.setattr(target_check, "_ask_child", lambda cfg, timeout_s: target_check.TargetAnswer())
    before = target_check.spawned
    passed = client.post("/api/train/preflight", json={"config": config})
    assert passed.status_code == 200, passed.text
    assert passed.json()["notes"] == [] and target_check.spawned == before + 1


def test_a_hub_base_not_on_this_machine_notes_both_checks_are_left_to_the_start(
    client: TestClient,
    shapes: None,
    flux_config: Callable[..., dict],
    monkeypatch: pytest.MonkeyPatch,
    tmp_path: Path,
) -> None:
    """Online, a hub id not yet fetched passes (the run fetches it). The child cannot read its
    denoiser config (it runs with the hub offline): the engine's check answers "not checked" (it
    said [] before: a silent pass); and the caption count is left to the start too (fix 123).
    The child runs in this process (tests/target_check_child.py: its main() with the hub offline
    as the server's environment for it says; a real child's imports: test_api_lora_targets_preflight)."""
    monkeypatch.setattr(target_check, "subprocess", IN_PROCESS)
    monkeypatch.delenv("HF_HUB_OFFLINE")
    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", False)
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "empty-hub"))
    answer = client.post(
        "/api/train/preflight",
        json={"config": flux_config(base_model="acme/not-fetched-flux", lora_targets=["to_q"])},
    )
    assert answer.status_code == 200, answer.text
    assert answer.json()["notes"] == [
        "lora_targets not checked now: the base's denoiser config cannot be read on this machine; "
        "the run's start checks it"
    ]
    tokens = answer.json()["dataset"]["caption_tokens"]
    assert (tokens["counted"], tokens["cut"]) == (False, [])
    assert tokens["note"] == (
        "caption lengths are counted at the start of the run (the base model's tokenizer is not on this machine)"
    )
