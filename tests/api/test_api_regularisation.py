"""Issue 29 part 2 through the API: the preflight marks a regularisation entry (its loss weight
times prior_loss_weight) and states differential output preservation with its cost per step; a
prior_loss_weight without a regularisation entry and a preservation without a trigger word are
refused together, naming their fields."""

from __future__ import annotations

from collections.abc import Callable

from api_helpers import upload_images
from fastapi.testclient import TestClient


def test_the_preflight_marks_reg_entries_and_states_preservation(
    client: TestClient, flux_config: Callable[..., dict]
) -> None:
    upload_images(client, "subject", 2, "a person")
    upload_images(client, "class", 4, "a person")
    entries = [
        {"path": "subject", "repeats": 2},
        {"path": "class", "regularisation": True, "loss_weight": 2.0},
    ]
    cfg = flux_config(
        datasets=entries,
        trigger_word="sks",
        prior_loss_weight=0.5,
        preservation={"class_word": "person", "weight": 0.8},
    )
    cfg.pop("data_dir")
    report = client.post("/api/train/preflight", json={"config": cfg})
    assert report.status_code == 200, report.text
    data = report.json()
    assert [(e["label"], e["regularisation"], e["loss_weight"]) for e in data["dataset"]["entries"]] == [
        ("subject", False, 1.0),
        ("class", True, 1.0),  # 2.0 x prior_loss_weight 0.5
    ]
    assert data["schedule"]["preservation"] == (
        "the base model's output on the captions with the trigger word replaced by 'person', weight 0.8: "
        "one extra no-grad forward + one extra forward/backward per micro-batch (about 1.7-2x a step's compute)"
    )
    plain = client.post("/api/train/preflight", json={"config": {**cfg, "preservation": None}}).json()
    assert plain["schedule"]["preservation"] is None


def test_reg_and_preservation_settings_that_cannot_be_honoured_are_refused_together(
    client: TestClient, flux_config: Callable[..., dict]
) -> None:
    upload_images(client, "subject", 1, "a person")
    bad = flux_config(data_dir="subject", prior_loss_weight=2.0, preservation={"class_word": "person"})
    answer = client.post("/api/train/preflight", json={"config": bad})
    assert answer.status_code == 400
    problems = {p["field"].rsplit("config.", 1)[-1]: p["message"] for p in answer.json()["problems"]}
    assert problems["prior_loss_weight"] == "needs a datasets entry with regularisation = true"
    assert problems["preservation"].startswith("needs a trigger_word")
