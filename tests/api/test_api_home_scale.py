"""A studio home after long use, built small (bench/home_build.py: 250 faked run records, one
run folder with 5 checkpoints, 5 snapshots and 20 sample previews), through the API: the work of
each request is bounded by what it answers, counted in calls, never timed (bench/home_scale.py
times a home of 2,000 runs). GET /api/runs pages with a cursor that holds across new and deleted
runs; a run's sample listing reads the run's LoRA sidecars once, not once per preview."""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from bench.home_build import Scale, build_home, output_name, run_id
from fastapi.testclient import TestClient

from live_server import LOOPBACK
from lorastudio.api.app import create_app
from lorastudio.jobs.records import JobStatus
from lorastudio.jobs.store import RunStore
from lorastudio.lora import snapshots
from lorastudio.settings import Settings
from lorastudio.training.sample_source import sample_source

SCALE = Scale(
    runs=250, heavy_every=1000, checkpoints=5, samples=20, gallery=0, datasets=0, log_kb=0, metrics=2
)


@pytest.fixture
def home_client(settings: Settings) -> Iterator[TestClient]:
    """The app on a home of SCALE (built before the server starts, as a restart finds it)."""
    build_home(settings.home, SCALE)
    with TestClient(create_app(settings), base_url=LOOPBACK) as client:
        yield client


def _walk(client: TestClient, limit: int, between: Any = None) -> list[str]:
    """Every run id, page by page; `between(page_number)` runs after each page but the last."""
    ids: list[str] = []
    params: dict[str, Any] = {"limit": limit}
    pages = 0
    while True:
        answer = client.get("/api/runs", params=params)
        assert answer.status_code == 200, answer.text
        body = answer.json()
        assert len(body["runs"]) <= limit
        ids += [r["id"] for r in body["runs"]]
        pages += 1
        if body["next_cursor"] is None:
            return ids
        if between is not None:
            between(pages)
        params = {"limit": limit, "cursor": body["next_cursor"]}


def test_the_runs_list_pages_newest_first_and_counts_every_run(home_client: TestClient) -> None:
    """Before, GET /api/runs answered the newest `limit` runs (200 by default) and no way to the
    others: past 200 runs, the Runs page could not show or delete the older ones (RELIABILITY 1221)."""
    first = home_client.get("/api/runs").json()
    assert first["total"] == SCALE.runs and len(first["runs"]) == 200 and first["next_cursor"]
    assert [r["id"] for r in first["runs"][:2]] == [run_id(SCALE.runs - 1), run_id(SCALE.runs - 2)]
    ids = _walk(home_client, 100)
    assert ids == [run_id(i) for i in reversed(range(SCALE.runs))]
    one = home_client.get("/api/runs", params={"limit": 1}).json()  # the Live page's "latest run"
    assert [r["id"] for r in one["runs"]] == [run_id(SCALE.runs - 1)] and one["total"] == SCALE.runs


def test_a_run_made_or_deleted_between_pages_repeats_or_skips_none(
    home_client: TestClient, settings: Settings
) -> None:
    def change(page: int) -> None:
        if page != 1:
            return
        store = RunStore.open(settings.db_path, recover=False)
        try:  # a new run (the newest: before every page) and one of the next page deleted
            store.create_run("late", "late", "flux", {"steps": 1}, "2026-12-01T00:00:00+00:00",
                             status=JobStatus.COMPLETED)  # fmt: skip
        finally:
            store.close()
        assert home_client.delete(f"/api/runs/{run_id(SCALE.runs - 61)}").status_code == 200

    ids = _walk(home_client, 50, change)
    expected = [run_id(i) for i in reversed(range(SCALE.runs)) if i != SCALE.runs - 61]
    assert ids == expected  # neither "late" (newer than every page) nor a skipped or repeated one


def test_a_bad_runs_cursor_is_a_422(client: TestClient) -> None:
    for cursor in ("abc", "-1", "1" * 20):
        assert client.get("/api/runs", params={"cursor": cursor}).status_code == 422
    body = client.get("/api/runs", params={"cursor": "9" * 19}).json()  # past SQLite's integers: all
    assert body == {"runs": [], "total": 0, "next_cursor": None}


@pytest.fixture
def sidecar_reads(monkeypatch: pytest.MonkeyPatch) -> Counter[Path]:
    """Each LoRA sidecar read by lora/snapshots.py (run_loras), counted."""
    seen: Counter[Path] = Counter()
    real = snapshots._sidecar

    def counted(path: Path) -> dict[str, Any]:
        seen[path] += 1
        return real(path)

    monkeypatch.setattr(snapshots, "_sidecar", counted)
    return seen


def test_a_runs_sample_listing_reads_each_sidecar_once(
    home_client: TestClient, settings: Settings, sidecar_reads: Counter[Path]
) -> None:
    """Before, each preview read every snapshot's and checkpoint's sidecar again (twice for an
    EMA preview without its file): a run of 200 previews and 100 LoRA files read 20,000-40,000
    sidecars per page view, 5 s on a loaded host (RELIABILITY 1220). The listing is the same."""
    answer = home_client.get(f"/api/runs/{run_id(0)}/samples")
    assert answer.status_code == 200, answer.text
    samples = answer.json()["samples"]
    assert len(samples) == SCALE.samples
    assert sidecar_reads and max(sidecar_reads.values()) == 1, sidecar_reads.most_common(2)
    run_dir = settings.outputs_dir / output_name(0)
    config = home_client.get(f"/api/runs/{run_id(0)}").json()["config"]
    for item in samples:  # what sample_source says of each alone
        alone = sample_source(config, run_dir, item["step"], item["index"])
        assert {k: item[k] for k in alone} == alone
        assert item["lora"] == {"name": output_name(0), "step": item["step"], "weights": "ema"}


def test_the_lora_list_reads_no_snapshot_or_checkpoint_sidecar(
    home_client: TestClient, sidecar_reads: Counter[Path]
) -> None:
    """Before, each LoRA's `files` came from every LoRA file of its run (run_loras: each
    snapshot's and checkpoint EMA file's sidecar) to keep its final ones: 2,000 LoRAs, 100 of
    them with 100 such files, read 10,000 sidecars per GET /api/loras (RELIABILITY 1224); an EMA
    LoRA's `raw_step` read them all again (1227): now only its step's snapshot is read."""
    answer = home_client.get("/api/loras", params={"family": "flux", "limit": SCALE.runs})
    assert answer.status_code == 200, answer.text
    listed = answer.json()["loras"]
    assert len(listed) == SCALE.runs and listed[-1]["name"] == output_name(0)
    assert [f["url"] for f in listed[-1]["files"]] == [f"/api/loras/{output_name(0)}/file"]
    assert listed[-1]["weights"] == "ema" and listed[-1]["raw_step"] == SCALE.checkpoints * 20  # its snapshot
    inner = [p for p in sidecar_reads if p.parent.name in ("loras",) or "checkpoints" in p.parts]
    assert [p.name for p in inner] == [f"{output_name(0)}-step-{SCALE.checkpoints * 20:06d}.safetensors"]
    assert set(sidecar_reads.values()) <= {1, 2}  # the EMA LoRA's own: for its files and its raw step


def test_a_runs_sample_listing_pages_its_rounds_newest_first(
    home_client: TestClient, settings: Settings
) -> None:
    """Before, GET /api/runs/{id}/samples answered every preview of the run at once: 400 rounds of 4
    prompts were 553 KB a listing (RELIABILITY 1341). A page holds the newest rounds below its
    cursor, listed as before (oldest step first); with no parameters a short run's answer is the
    whole listing; a round written between two pages neither repeats nor skips one."""
    url = f"/api/runs/{run_id(0)}/samples"
    whole = home_client.get(url).json()  # 5 rounds (steps 20..100) of 4 prompts: under the default
    assert [(s["step"], s["index"]) for s in whole["samples"]] == [
        (20 * (r + 1), i) for r in range(5) for i in range(4)
    ]
    assert whole["total"] == 5 and whole["next_cursor"] is None
    first = home_client.get(url, params={"limit": 2}).json()
    assert [s["step"] for s in first["samples"]] == [80] * 4 + [100] * 4 and first["next_cursor"] == "80"
    png = settings.outputs_dir / output_name(0) / "samples" / "step-000100-0.png"
    (png.parent / "step-000120-0.png").write_bytes(png.read_bytes())  # a new round meanwhile
    second = home_client.get(url, params={"limit": 2, "cursor": first["next_cursor"]}).json()
    assert {s["step"] for s in second["samples"]} == {40, 60} and second["total"] == 6
    last = home_client.get(url, params={"limit": 2, "cursor": second["next_cursor"]}).json()
    assert {s["step"] for s in last["samples"]} == {20} and last["next_cursor"] is None
    one = home_client.get(url, params={"step": 60}).json()  # a preview's own round ("Generate again")
    assert [s["name"] for s in one["samples"]] == [f"step-000060-{i}.png" for i in range(4)] and one[
        "total"
    ] == 1
    assert home_client.get(url, params={"cursor": "x"}).status_code in (400, 422)
