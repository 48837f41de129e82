"""Issue 29 part 1 through the API: a run of several stored datasets (`datasets` entries) is
previewed with each entry's images, samples per epoch and share, and the schedule follows the
mix; data_dir with datasets, weights on some entries only, and a folder outside the datasets
root are refused, every problem at once and naming its field."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from api_helpers import upload_images
from fastapi.testclient import TestClient


def test_the_preflight_lists_each_entry_and_the_schedule_follows_the_mix(
    client: TestClient, flux_config: Callable[..., dict]
) -> None:
    upload_images(client, "person", 2)
    upload_images(client, "style", 6)
    entries = [{"path": "person", "repeats": 5, "trigger_word": "sks"}, {"path": "style", "loss_weight": 0.5}]
    cfg = flux_config(data_dir=None, datasets=entries, num_epochs=2, batch_size=1)
    cfg.pop("data_dir")
    report = client.post("/api/train/preflight", json={"config": cfg})
    assert report.status_code == 200, report.text
    data = report.json()["dataset"]
    assert [
        (e["label"], e["images"], e["samples_per_epoch"], e["share"], e["loss_weight"])
        for e in data["entries"]
    ] == [
        ("person", 2, 10, 0.625, 1.0),
        ("style", 6, 6, 0.375, 0.5),
    ]
    assert data["samples_per_epoch"] == 16 and data["images_used"] == 8
    assert report.json()["schedule"]["steps"] == 2 * 16  # batch 1: a step per sample

    weighted = [{"path": "person", "weight": 1.0}, {"path": "style", "weight": 1.0}]
    report = client.post("/api/train/preflight", json={"config": {**cfg, "datasets": weighted}})
    assert [e["samples_per_epoch"] for e in report.json()["dataset"]["entries"]] == [4, 4]  # 8 images, halved


def test_bad_dataset_settings_are_refused_together(
    client: TestClient, flux_config: Callable[..., dict]
) -> None:
    upload_images(client, "person", 1)
    bad = flux_config(datasets=[{"path": "person", "weight": 2.0}, {"path": "/etc"}])
    answer = client.post("/api/train/preflight", json={"config": bad})
    assert answer.status_code == 400
    fields = {p["field"] for p in answer.json()["problems"]}
    assert {"config.datasets"} <= fields or {"datasets"} <= fields, answer.text
    messages = " ".join(p["message"] for p in answer.json()["problems"])
    assert "both given" in messages and "weight is set on some entries only" in messages
    outside = flux_config(data_dir=None, datasets=[{"path": "person"}, {"path": "/etc"}, {"path": "../x"}])
    answer = client.post(
        "/api/train/preflight", json={"config": {k: v for k, v in outside.items() if v is not None}}
    )
    assert answer.status_code == 400
    assert [p["field"].rsplit("config.", 1)[-1] for p in answer.json()["problems"]] == [
        "datasets.1.path",
        "datasets.2.path",
    ]


def test_the_preflight_shows_three_captions_as_the_model_sees_them_and_their_cost(
    client: TestClient, flux_config: Callable[..., dict]
) -> None:
    upload_images(client, "person", 4)  # captions "person 0" ... "person 3"
    for i in range(4):
        body = {"caption": f"[trigger], red, round, shiny, number {i}"}
        assert client.put(f"/api/datasets/person/captions/person{i}.png", json=body).status_code == 200
    plain = client.post(
        "/api/train/preflight", json={"config": flux_config(data_dir="person", trigger_word="ohwx")}
    )
    captions = plain.json()["dataset"]["captions"]
    assert captions["examples"] == ["ohwx, red, round, shiny, number 0", "ohwx, red, round, shiny, number 2",
                                    "ohwx, red, round, shiny, number 3"]  # fmt: skip
    assert (captions["variants_per_image"], captions["texts_encoded"], captions["cost"]) == (1, 4, None)
    cfg = flux_config(
        data_dir="person", trigger_word="ohwx", shuffle_tags=True, keep_tokens=1, caption_variants=4
    )
    varied = client.post("/api/train/preflight", json={"config": cfg}).json()["dataset"]["captions"]
    assert (
        all(e.startswith("ohwx, ") for e in varied["examples"]) and varied["examples"] != captions["examples"]
    )
    assert sorted(varied["examples"][0].split(", ")) == sorted(captions["examples"][0].split(", "))
    assert varied["variants_per_image"] == 4 and 4 < varied["texts_encoded"] <= 16
    assert "4 caption variants per image" in varied["cost"] and "embeddings cached" in varied["cost"]


def test_the_preflight_shows_buckets_per_resolution(
    client: TestClient, flux_config: Callable[..., dict]
) -> None:
    upload_images(client, "person", 2)  # 32 x 32 images
    report = client.post(
        "/api/train/preflight", json={"config": flux_config(data_dir="person", resolution=[32, 64])}
    )
    assert report.status_code == 200, report.text
    data = report.json()["dataset"]
    assert data["buckets_by_resolution"] == {"32": {"32x32": 2}, "64": {"64x64": 2}}
    assert data["samples_per_epoch"] == 4 and data["entries"][0]["resolution"] == [32, 64]
    assert (data["images_used"], data["images_found"]) == (2, 2)  # each image once
    assert report.json()["config"]["resolution"] == [32, 64]


def test_the_preflight_says_when_captions_are_encoded_in_every_step(
    client: TestClient, tiny_model: Callable[[str], Path]
) -> None:
    """README: with SDXL's train_text_encoder the preflight reports that captions are encoded in
    every step (no caption cache); `--check` prints it, and the API's report carries it too."""
    upload_images(client, "sdxl-set", 2)
    cfg = {"family": "sdxl", "base_model": str(tiny_model("sdxl")), "data_dir": "sdxl-set", "resolution": 64}
    plain = client.post("/api/train/preflight", json={"config": {**cfg, "steps": 2}})
    assert plain.status_code == 200, plain.text
    assert plain.json()["conditioning"]["per_step"] is False
    report = client.post(
        "/api/train/preflight", json={"config": {**cfg, "steps": 2, "train_text_encoder": True}}
    )
    assert report.status_code == 200, report.text
    conditioning = report.json()["conditioning"]
    assert conditioning["per_step"] is True and "every step" in conditioning["note"]


def _dropped(produced: object, served: object, at: str = "") -> list[str]:
    """The keys of `produced` (the service's report) missing from `served` (the API's answer), at
    every depth, as dotted paths."""
    if isinstance(produced, dict) and isinstance(served, dict):
        missing = [f"{at}{key}" for key in produced if key not in served]
        return missing + [
            m
            for key in produced
            if key in served
            for m in _dropped(produced[key], served[key], f"{at}{key}.")
        ]
    if isinstance(produced, list) and isinstance(served, list) and len(produced) == len(served):
        return [
            m
            for i, (p, s) in enumerate(zip(produced, served, strict=True))
            for m in _dropped(p, s, f"{at}{i}.")
        ]
    return []


def test_the_api_serves_every_part_of_the_service_preflight_report(
    client: TestClient, flux_config: Callable[..., dict], tiny_model: Callable[[str], Path]
) -> None:
    """The preflight's response model must not drop what the job service reports (the
    conditioning section was dropped so): the service's report and the API's answer compared at
    every depth, for a run with validation, a mix with regularisation, and SDXL with its text
    encoders trained."""
    upload_images(client, "person", 2)
    upload_images(client, "style", 4)
    upload_images(client, "sdxl-set", 2)
    mix = [{"path": "person", "repeats": 3}, {"path": "style", "regularisation": True}]
    configs = [
        flux_config(data_dir="style", validation_split=0.25),
        {
            **{k: v for k, v in flux_config().items() if k != "data_dir"},
            "datasets": mix,
        },
        {
            "family": "sdxl",
            "base_model": str(tiny_model("sdxl")),
            "data_dir": "sdxl-set",
            "resolution": 64,
            "steps": 2,
            "train_text_encoder": True,
        },
    ]
    service = client.app.state.service
    for cfg in configs:
        answer = client.post("/api/train/preflight", json={"config": cfg})
        assert answer.status_code == 200, answer.text
        produced = service.preflight(cfg)
        assert _dropped(produced, answer.json()) == [], cfg
