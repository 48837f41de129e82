"""Session 41 upgrade audit, end to end (slow: 1.9-3.5 min from scratch on 2 shared cores, 0.8-1.3
of them building the home; 1.1-1.6 min on a copy, UPGRADE41_BUILT; a studio home built by the code of
the session's start, commit OLD, and of session 40's start, OLD40, each extracted with `git archive`;
tests/upgrade/old_home41.py: a dataset uploaded by OLD40's app with a metadata.jsonl row naming
`café.png` decomposed and a run on it stopped at step 2; runs of each adapter kind and one on a
kohya layout read in place stopped at step 2; a dataset uploaded in two batches (its
decoded-images record written whole, no journal); two asynchronous generations with a DoRA whose
header names no rule) opened by this code: the listings; the NFD row read as its image's caption
by a new run, the old run's resume refused naming the row, then resumed bitwise once the row is
deleted (RELIABILITY 2200); the kohya layout listed with its images (2201) and its run resumed
bitwise; every adapter kind resumed bitwise both ways (this code's checkpoints by the old code
too); the old generations' warnings answered from their
records, none from an old sidecar (2211's note). Then this code's decoded-record journal (2210)
and generation sidecar with warnings are read by the old code (roll back: no row lost or
misread, the old recovery answers from the new sidecar), and this code reads the old code's
record over its own journal again (forward). Skipped where the repository lacks the old commits
(a shallow clone). UPGRADE41_BUILT=<a root this fixture built> copies it instead of building
(while developing)."""

from __future__ import annotations

import io
import json
import os
import shutil
import subprocess
import sys
import time
import unicodedata
from pathlib import Path
from typing import Any

import pytest
from PIL import Image
from tests.upgrade.old_tree import build_old_home, cli_env, old_src, use_old_home
from tests.upgrade.test_upgrade_home37 import OLD_APP, RESUME, _names, _old_python

from stop_at import stop_at

OLD = "d22724d8"  # session 41's start (session 40's end)
OLD40 = "e5b93794"  # session 40's start: its upload kept a metadata.jsonl row's name as sent
REPO = Path(__file__).resolve().parents[2]
HERE = Path(__file__).parent
NFC, NFD = (unicodedata.normalize(form, "café") for form in ("NFC", "NFD"))
KINDS = ("lora", "lokr", "loha", "dora", "kohya")
ENDED = ("done", "failed", "cancelled", "interrupted")
# the home's build (two old versions, 12 short runs, two generations) is fixture setup, inside
# pytest-timeout's 600 s per test on the loaded 2-core host: the test has 30 min
pytestmark = [pytest.mark.slow, pytest.mark.timeout(1800)]

RECORD = (  # the decoded-images record of folder argv[1] (record folder argv[2]) as this code reads
    # it: {image: [w, h] known or null} before and after a scan (argv[3] == "scan") and the sizes
    "import json, sys; from pathlib import Path; from PIL import Image; from lorastudio.data import scan_dataset;"
    " from lorastudio.data.decoded import DecodedRecord; from lorastudio.data.safe_open import folder_identity\n"
    "folder, rd = Path(sys.argv[1]), Path(sys.argv[2])\n"
    "def known():\n"
    "    r = DecodedRecord.load(rd, folder, folder_identity(folder))\n"
    "    return {p.name: (lambda i: i and [i.width, i.height])(r.known(p)) for p in sorted(folder.glob('*.png'))}\n"
    "before = known()\n"
    "if sys.argv[3:] == ['scan']: scan_dataset(folder, resolution=32, multiple=16, decoded_dir=rd, trigger_word='x')\n"
    "print(json.dumps([before, known(), {p.name: list(Image.open(p).size) for p in sorted(folder.glob('*.png'))}]))"
)
OLD_RESUMES = (  # the old code's train() resuming each [config, run folder] of argv[1] to its end
    "import json, sys; from pathlib import Path; from lorastudio.config import TrainConfig;"
    " from lorastudio.training.loop import train\n"
    "out = []\n"
    "for raw, run in json.loads(sys.argv[1]):\n"
    "    ev = []\n"
    "    r = train(TrainConfig.model_validate(raw), ev.append, device='cpu', resume=Path(run))\n"
    "    out.append([list(r.losses), [e.message for e in ev if e.type == 'warning']])\n"
    "print(json.dumps(out))"
)
OLD_UPLOAD = (  # the old app's upload of files argv[2:] into dataset argv[1] -> [status, text]
    "import io, json, sys; from pathlib import Path; from fastapi.testclient import TestClient;"
    " from lorastudio.api.app import create_app; from lorastudio.settings import get_settings\n"
    "with TestClient(create_app(get_settings()), base_url='http://127.0.0.1') as c:\n"
    "    files = [('files', (Path(p).name, io.BytesIO(Path(p).read_bytes()))) for p in sys.argv[2:]]\n"
    "    r = c.post(f'/api/datasets/{sys.argv[1]}/files', files=files)\n"
    "    print(json.dumps([r.status_code, r.text[:2000]]))"
)


def _builder(root: Path, src: Path, *args: str) -> None:
    env = {**os.environ, "PYTHONPATH": f"{src}{os.pathsep}{HERE}", "OMP_NUM_THREADS": "1"}
    built = subprocess.run([sys.executable, str(HERE / "old_home41.py"), str(root / "home"), *args],
                           env=env, capture_output=True, text=True, cwd=root)  # fmt: skip
    assert built.returncode == 0, built.stderr[-3000:]


@pytest.fixture(scope="module")
def old_home(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict, Path]:
    root = tmp_path_factory.mktemp("upgrade41")
    built = os.environ.get("UPGRADE41_BUILT")
    if built:  # a root built before (its home and old_home.json): copied, the old source extracted
        top = {"old", "old40"}  # the old sources (extracted again); a home's old-gen-1.json kept
        shutil.copytree(built, root, symlinks=True, dirs_exist_ok=True,
                        ignore=lambda at, names: top & set(names) if Path(at) == Path(built) else set())  # fmt: skip
        text = (Path(built) / "old_home.json").read_text().replace(str(Path(built)), str(root))
        for path in [
            *(root / "home" / "run_timings").glob("*.json"),
            *(root / "home" / "outputs").glob("*/*.json"),
            *(root / "home" / "outputs").glob("*/checkpoints/*/identity.json"),  # a resume's config
            *(root / "home" / "generation-jobs").glob("*.json"),
            *(root / "home" / "gallery").glob("*.json"),
        ]:
            path.write_text(path.read_text().replace(str(Path(built)), str(root)))
        return root / "home", {**json.loads(text), "copied": True}, old_src(OLD, root / "old")
    _builder(root, old_src(OLD40, root / "old40"), "--s40start")
    return build_old_home(root, OLD, "old_home41.py")


@pytest.fixture
def home(old_home: tuple[Path, dict, Path], monkeypatch: pytest.MonkeyPatch) -> tuple[Path, dict, Path]:
    return use_old_home(old_home, monkeypatch)


def _resumed(raw: dict, run: Path) -> list[float]:
    """This code's train() resuming `run` with settings `raw` to its end (no warning given)."""
    from lorastudio.config import TrainConfig
    from lorastudio.training.loop import train

    events: list = []
    ours = train(TrainConfig.model_validate(raw), events.append, device="cpu", resume=run)
    assert not [e.message for e in events if e.type == "warning"], run
    return list(ours.losses)


def _png(size: tuple[int, int], colour: tuple[int, int, int]) -> bytes:
    out = io.BytesIO()
    Image.new("RGB", size, colour).save(out, format="PNG")
    return out.getvalue()


def _upload(client: Any, name: str, files: dict[str, bytes]) -> None:
    sent = [("files", (n, io.BytesIO(b))) for n, b in files.items()]
    answer = client.post(f"/api/datasets/{name}/files", files=sent)
    assert answer.status_code == 201, answer.text


def _generated(client: Any, body: dict) -> dict:
    """POST /api/generations of `body`, followed to its end: its status."""
    sent = client.post("/api/generations", json=body)
    assert sent.status_code == 202, sent.text
    for _ in range(2400):
        now = client.get(f"/api/generations/{body['request_id']}").json()
        if now["state"] in ENDED:
            return now
        time.sleep(0.25)
    raise AssertionError(f"{body['request_id']} never ended: {now}")


def _in_flight(record: Path) -> None:
    """Generation record `record` as a server killed after the image's commit and before the
    "done" left it (in flight: read as interrupted, then looked for in the gallery: fix 1773)."""
    data = json.loads(record.read_text(encoding="utf-8"))
    record.write_text(json.dumps({**data, "outcome": None, "ended": None, "result": None}), encoding="utf-8")


def _record(src: Path, folder: Path, record_dir: Path, scan: bool) -> list[dict]:
    args = [str(folder), str(record_dir), *(["scan"] if scan else [])]
    return _old_python(RECORD, *args, src=src)  # type: ignore[return-value]


def _true(before: dict, sizes: dict) -> None:
    """Each row a record gives is the image's true size (an unknown one is decoded again)."""
    wrong = {n: (k, sizes[n]) for n, k in before.items() if k is not None and k != sizes[n]}
    assert not wrong, wrong


def test_an_old_home_of_session_41_upgrades_rolls_back_and_upgrades_again(
    home: tuple[Path, dict, Path],
) -> None:
    from fastapi.testclient import TestClient

    from lorastudio.api.app import create_app
    from lorastudio.config import TrainConfig
    from lorastudio.errors import ConfigError
    from lorastudio.jobs.resume import validate_resume
    from lorastudio.settings import get_settings
    from lorastudio.training.loop import train

    folder, old, old_src_dir = home
    s41, outputs, settings = old["s41"], folder / "outputs", get_settings()
    assert old["nfd"]["stored"] == [f"{NFC}.png", "metadata.jsonl", "plain.png"]  # the old upload's
    rows = (folder / "datasets" / "nfd41" / "metadata.jsonl").read_text(encoding="utf-8")
    assert json.dumps(f"{NFD}.png", ensure_ascii=False) in rows  # the row as sent: decomposed
    listed = _names(REPO / "src")
    assert _names(old_src_dir) == listed
    # the old list called the kohya layout empty (2201's defect); the old answers held the warning
    (was,) = [d for d in s41["datasets"]["datasets"] if d["name"] == "kohya41"]
    assert was["images"] == 0, was
    for rid, gen in s41["generations"].items():
        assert gen["status"]["state"] == "done" and len(gen["status"]["image"]["warnings"]) == 1, rid
    said = s41["generations"]["old-gen-1"]["status"]["image"]["warnings"]

    _in_flight(folder / "generation-jobs" / "old-gen-2.json")  # killed after its image was committed
    with TestClient(create_app(settings), base_url="http://127.0.0.1") as client:
        runs = client.get("/api/runs").json()["runs"]
        assert [r["output_name"] for r in runs] == listed
        for run in runs:
            for tail in ("", "/checkpoints", "/config"):
                assert client.get(f"/api/runs/{run['id']}{tail}").status_code == 200, (run, tail)
        loras = {lo["name"] for lo in client.get("/api/loras").json()["loras"]}
        assert {f"{k}41-full" for k in KINDS} | {"nfd40-full", "bare41"} <= loras, loras
        # 2201: the kohya layout read in place listed with its images, as its run reads them
        (kohya,) = [d for d in client.get("/api/datasets").json()["datasets"] if d["name"] == "kohya41"]
        assert kohya["images"] == 6, kohya
        page = client.get("/api/datasets/kohya41").json()
        folders = sorted(f["file"].split("/")[0] for f in page["files"])
        assert folders == ["1_sks ring"] * 2 + ["2_sks shape"] * 4, folders
        assert not page["dropped"], page["dropped"]
        # 2200: the NFD row is its image's caption on the page too
        nfd = {f["file"]: f["caption"] for f in client.get("/api/datasets/nfd41").json()["files"]}
        assert nfd[f"{NFC}.png"] == "an accented shape", nfd
        # the old generations: the record's warning (kept as written); an old sidecar tells none
        first = client.get("/api/generations/old-gen-1").json()
        assert (first["state"], first["image"]["warnings"]) == ("done", said), first
        second = client.get("/api/generations/old-gen-2").json()
        assert (second["state"], second["image"]["warnings"]) == ("done", []), second
        # this code's generation: its sidecar keeps the warning (2211)
        body = {**s41["generations"]["old-gen-1"]["body"], "request_id": "new-gen-1"}
        new = _generated(client, body)
        assert new["state"] == "done" and new["image"]["warnings"] == said, new
        sidecar = folder / "gallery" / Path(new["image"]["file"]).with_suffix(".json").name
        assert json.loads(sidecar.read_text())["warnings"] == said
        new2 = _generated(client, {**body, "request_id": "new-gen-2"})
        assert new2["state"] == "done", new2
        # 2210: the old record (whole, no journal) read; this code's first save writes it whole
        # with a journal, its next appends
        dec = folder / "datasets" / "dec41"
        _upload(client, "dec41", {"n0.png": _png((32, 32), (200, 10, 10))})
        _upload(client, "dec41", {"n1.png": _png((32, 40), (10, 200, 10))})
    journals = list((folder / "cache" / "decoded").glob("*.journal"))
    assert len(journals) == 1 and "n1.png" in journals[0].read_text(), journals
    record_dir = folder / "cache" / "decoded"
    before, after, sizes = _record(REPO / "src", dec, record_dir, scan=True)  # a copied home's rows: stale
    _true(before, sizes)
    assert before["n1.png"] == [32, 40] and after == sizes, (before, after)

    # every adapter kind's and the kohya run's old checkpoint resumed to the uninterrupted losses
    for kind in KINDS:
        assert _resumed(s41[kind]["raw"], outputs / f"{kind}41") == s41[kind]["full_losses"], kind
    # ... and this code's checkpoint of each kind resumed by the old code to those losses (roll back)
    jobs = []
    for kind in KINDS:
        raw = {**s41[kind]["raw"], "output_name": f"{kind}41-new"}
        events, check = stop_at(2)
        assert train(TrainConfig.model_validate(raw), events.append, check, device="cpu").stopped, kind
        jobs.append([raw, str(outputs / f"{kind}41-new")])
    done = subprocess.run([sys.executable, "-c", OLD_RESUMES, json.dumps(jobs)], env=cli_env(old_src_dir),
                          capture_output=True, text=True)  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    for kind, (losses, warned) in zip(KINDS, json.loads(done.stdout.strip().splitlines()[-1]), strict=True):
        assert losses == s41[kind]["full_losses"] and not warned, (kind, losses, warned)
    # 2200: the NFD row read by a new run; the old run (trained without it) refused naming it,
    # and resumed bitwise once the row is deleted, as the refusal says
    nfd_run = old["nfd"]["run"]
    fresh = train(TrainConfig.model_validate({**nfd_run["raw"], "output_name": "nfd41-new"}), [].append,
                  device="cpu")  # fmt: skip
    assert len(fresh.losses) == len(nfd_run["full_losses"]) and fresh.losses != nfd_run["full_losses"]
    events, check = stop_at(2)  # its twin stopped: the old code refuses the row it cannot read
    stop_raw = {**nfd_run["raw"], "output_name": "nfd41-stop"}
    assert train(TrainConfig.model_validate(stop_raw), events.append, check, device="cpu").stopped
    rolled = subprocess.run([sys.executable, "-c", RESUME, json.dumps(stop_raw), str(outputs / "nfd41-stop")],
                            env=cli_env(old_src_dir), capture_output=True, text=True)  # fmt: skip
    said_old = rolled.stderr[-3000:]
    assert rolled.returncode != 0 and "compose their accents differently" in said_old, said_old
    assert _resumed(stop_raw, outputs / "nfd41-stop") == list(fresh.losses)  # forward again
    with pytest.raises(ConfigError) as err:
        validate_resume(outputs / "nfd40", None, {}, settings, live_output_names=set())
    (problem,) = [p.message for p in err.value.problems if p.field == "dataset_fingerprint"]
    assert f"metadata.jsonl row(s) {ascii(NFD + '.png')} name their image" in problem, problem
    table = folder / "datasets" / "nfd41" / "metadata.jsonl"  # the NFD row deleted, plain.png's kept
    kept = [line for line in table.read_text(encoding="utf-8").splitlines() if NFD not in line]
    table.write_text("".join(f"{line}\n" for line in kept), encoding="utf-8")
    assert _resumed(nfd_run["raw"], outputs / "nfd40") == nfd_run["full_losses"]

    # roll back: the old code reads the record alone (n1's row is in the journal: decoded again),
    # no row misread; its uploads (o0, and n1 replaced at another size) and scan record every image
    before, after, sizes = _record(old_src_dir, dec, record_dir, scan=False)
    _true(before, sizes)
    assert before["n1.png"] is None and before["n0.png"] == [32, 32], before
    replaced = folder.parent / "up"
    replaced.mkdir(exist_ok=True)
    (replaced / "o0.png").write_bytes(_png((48, 32), (10, 10, 200)))
    (replaced / "n1.png").write_bytes(_png((40, 48), (200, 200, 10)))
    status, text = _old_python(OLD_UPLOAD, "dec41", str(replaced / "o0.png"), str(replaced / "n1.png"),
                               src=old_src_dir)  # fmt: skip
    assert status == 201, text
    before, after, sizes = _record(old_src_dir, dec, record_dir, scan=True)
    _true(before, sizes)
    assert after == sizes and sizes["n1.png"] == [40, 48], (after, sizes)
    assert journals[0].is_file()  # the old code left this code's journal
    answers = _old_python(OLD_APP, "/api/runs", "/api/loras", "/api/datasets", "/api/gallery",
                          "/api/generations/new-gen-2", src=old_src_dir)  # fmt: skip
    assert [s for s, _ in answers] == [200] * 5, answers
    assert answers[4][1]["state"] == "done", answers[4]
    _in_flight(folder / "generation-jobs" / "new-gen-1.json")  # the old recovery reads the new sidecar
    ((status, recovered),) = _old_python(OLD_APP, "/api/generations/new-gen-1", src=old_src_dir)
    assert status == 200 and recovered["state"] == "done", recovered
    assert _names(old_src_dir) == _names(REPO / "src")

    # forward again: this code reads the old whole record under its own journal (n1's stale row:
    # decoded again, never its old size), scans and records every image
    before, after, sizes = _record(REPO / "src", dec, record_dir, scan=True)
    _true(before, sizes)
    assert before["n1.png"] is None and before["o0.png"] == [48, 32] and after == sizes, (before, after)
    _, again, _ = _record(REPO / "src", dec, record_dir, scan=False)
    assert again == sizes, again
    get_settings.cache_clear()
    with TestClient(create_app(get_settings()), base_url="http://127.0.0.1") as client:
        assert [r["output_name"] for r in client.get("/api/runs").json()["runs"]] == _names(old_src_dir)
        back = client.get("/api/generations/new-gen-1").json()
        assert (back["state"], back["image"]["warnings"]) == ("done", said), back
