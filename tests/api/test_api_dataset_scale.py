"""A dataset of 1,000 images through the API: the work of each request is bounded by what it
answers, counted in calls and reads, never timed (RELIABILITY 152; bench/dataset_scale.py times
10,000). A second preflight opens no image (the decoded record knows them), a page of the
dataset's detail reads its own captions only and no header twice, an unchanged folder is listed
once, an upload's checks are linear."""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from bench.dataset_scale import tiny_pngs, write_dataset
from fastapi.testclient import TestClient

from lorastudio.data import dataset_detail, decoded, discovery, images, listing, scan
from lorastudio.data.safe_open import folder_identity
from lorastudio.settings import Settings

N = 1_000


@pytest.fixture
def calls(monkeypatch: pytest.MonkeyPatch) -> Iterator[Counter[str]]:
    """How often the process opens an image for a check, reads a header for a listing, reads a
    caption file, and lists a folder (counted wrappers of the functions that do it)."""
    seen: Counter[str] = Counter()

    def counted(module: object, name: str) -> None:
        real = getattr(module, name)

        def wrapper(*args: object, **kw: object) -> object:
            seen[name] += 1
            return real(*args, **kw)

        monkeypatch.setattr(module, name, wrapper)

    counted(images, "open_frames")
    counted(dataset_detail, "header_info")
    counted(dataset_detail, "read_sidecar")
    counted(scan, "read_sidecar")
    counted(discovery, "_discover")
    yield seen


def test_a_thousand_images_cost_per_request_what_the_request_answers(
    client: TestClient,
    settings: Settings,
    flux_config: Callable[..., dict],
    calls: Counter[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    folder = settings.datasets_dir / "big"
    write_dataset(folder, N)
    # a folder changed within the last 2 s is listed again each time (discovery._SETTLED_NS);
    # nothing changes it in this test: remember it at once rather than wait
    monkeypatch.setattr(discovery, "_SETTLED_NS", 0)
    config = {"config": flux_config(data_dir="big")}
    assert client.post("/api/train/preflight", json=config).status_code == 200
    assert calls["open_frames"] == N  # each image checked (and decoded) once
    calls.clear()
    assert client.post("/api/train/preflight", json=config).status_code == 200
    assert calls["open_frames"] == 0  # known as it is: not opened again
    assert calls["_discover"] == 0  # the unchanged folder's listing is remembered

    calls.clear()
    page = client.get("/api/datasets/big", params={"offset": 990, "limit": 50}).json()
    assert [f["file"] for f in page["files"]] == [f"img{i:05d}.png" for i in range(990, N)]
    assert (page["total_files"], page["images"], page["captions"]) == (N, N, N)
    assert calls["read_sidecar"] == 10  # the page's captions only
    assert calls["header_info"] == N  # every image's header once (the totals), then remembered
    calls.clear()
    whole = client.get("/api/datasets/big").json()
    assert len(whole["files"]) == N and whole["limit"] is None
    assert calls["header_info"] == 0 and calls["read_sidecar"] == N
    listing = client.get("/api/datasets").json()["datasets"]
    assert [(d["name"], d["images"], d["captions"]) for d in listing] == [("big", N, N)]


def test_an_upload_of_a_thousand_images_checks_each_once(
    client: TestClient, settings: Settings, calls: Counter[str]
) -> None:
    files = [("f", (f"u{i:04d}.png", data)) for i, data in enumerate(tiny_pngs(N))]
    files += [("f", (f"u{i:04d}.txt", f"caption {i}".encode())) for i in range(N)]
    resp = client.post("/api/datasets/up/files", files=files)
    assert resp.status_code == 201, resp.text[:500]
    assert len(resp.json()["committed"]) == 2 * N and resp.json()["refused"] == []
    assert calls["open_frames"] == N


def test_an_upload_into_a_large_dataset_costs_what_it_sends(
    client: TestClient, settings: Settings, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A batch of 2 images with their captions into a dataset of 120 lists none of the dataset's
    files and parses none of its decoded record's rows (the web sends 32 images a batch: a
    listing and a record parse per batch made uploading N images O(N^2), RELIABILITY 2111); a
    caption sent without its image still finds it in the dataset."""
    pngs = tiny_pngs(123)
    files = [("f", (f"u{i:04d}.png", pngs[i])) for i in range(120)]
    files += [("f", (f"u{i:04d}.txt", f"caption {i}".encode())) for i in range(120)]
    assert client.post("/api/datasets/up/files", files=files).status_code == 201
    folder = settings.datasets_dir / "up"
    listed: Counter[str] = Counter()
    real_iterdir, real_entry = Path.iterdir, decoded._entry

    def iterdir(self: Path) -> Iterator[Path]:
        for path in real_iterdir(self):
            listed[str(self)] += 1
            yield path

    def entry(row: object) -> object:
        listed["record rows"] += 1
        return real_entry(row)

    monkeypatch.setattr(Path, "iterdir", iterdir)
    monkeypatch.setattr(decoded, "_entry", entry)
    batch = [("f", (f"v{i}.png", pngs[120 + i])) for i in range(2)]
    batch += [("f", (f"v{i}.txt", b"another")) for i in range(2)]
    resp = client.post("/api/datasets/up/files", files=batch)
    assert resp.status_code == 201 and len(resp.json()["committed"]) == 4
    assert listed[str(folder)] == 0 and listed["record rows"] == 0  # the old code: 480 (listed twice) and 120
    record = decoded.DecodedRecord.load(settings.decoded_record_dir, folder, folder_identity(folder))
    assert len(record.files) == 122  # the record holds every image, the batch's too
    resp = client.post("/api/datasets/up/files", files=[("f", ("u0007.txt", b"a caption alone"))])
    assert resp.status_code == 201 and (folder / "u0007.txt").read_text() == "a caption alone"


def test_an_upload_asked_for_no_summary_lists_nothing(
    client: TestClient, settings: Settings, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`summary=false` (the web's batches): the answer is what the batch stored and refused, and
    the request neither lists the dataset's folder nor looks at its caption files (the summary
    did both for every batch: work linear in the dataset, RELIABILITY 2190); without it the
    answer is the old one, the dataset's counts after the upload."""
    pngs = tiny_pngs(5)
    files = [("f", (f"u{i}.png", pngs[i])) for i in range(3)]
    files += [("f", (f"u{i}.txt", b"a caption")) for i in range(3)]
    assert client.post("/api/datasets/up/files", files=files).status_code == 201
    work: Counter[str] = Counter()
    real_discover, real_marks = discovery._discover, listing.caption_marks

    def discover(*args: object, **kw: object) -> object:
        work["listed"] += 1
        return real_discover(*args, **kw)

    def marks(*args: object, **kw: object) -> object:
        work["caption marks"] += 1
        return real_marks(*args, **kw)

    monkeypatch.setattr(discovery, "_discover", discover)
    monkeypatch.setattr(listing, "caption_marks", marks)
    batch = [("f", ("v.png", pngs[3])), ("f", ("v.txt", b"another")), ("f", ("bad.png", b"not a png"))]
    resp = client.post("/api/datasets/up/files", params={"summary": "false"}, files=batch)
    assert resp.status_code == 201, resp.text[:500]
    answer = resp.json()
    assert answer["name"] == "up" and answer["committed"] == ["v.png", "v.txt"]
    assert [r["file"] for r in answer["refused"]] == ["bad.png"]
    assert set(answer) == {"name", "committed", "refused"}
    assert work == Counter()  # the old code: the folder listed and its captions' marks counted
    resp = client.post("/api/datasets/up/files", files=[("f", ("w.png", pngs[4]))])
    assert resp.status_code == 201
    answer = resp.json()  # no summary=false: the old answer, the dataset's counts
    assert (answer["images"], answer["captions"], answer["committed"]) == (5, 4, ["w.png"])
    assert answer["markup_captions"] == 0 and answer["usable"] is True
    assert work["listed"] == 1 and work["caption marks"] == 1
