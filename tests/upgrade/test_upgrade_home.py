"""Session 26 upgrade audit, end to end (slow: ~1-2 min on 2 cores): a studio home built by the
code of the session's start (commit OLD, extracted with `git archive`; tests/upgrade/old_home.py
run on it) is opened by this code. Every stopped run resumes bitwise onto the run the old code
made uninterrupted, or is refused early (exit 2, before any model loads) naming why; gallery
images render again pixel for pixel; the disk cache is reused (no latent entry re-encoded; the
text entry is encoded once more under fingerprint rule 3's key, which a hub id of the same files
shares) and can be pruned and cleared; the old caption job, kept only in the old server's memory,
is answered as unknown. Skipped where the repository lacks the old commit (a shallow clone)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file
from tests.upgrade.old_tree import old_src, renders_again, resumes_bitwise

OLD = "a85de674"  # the session's start
REPO = Path(__file__).resolve().parents[2]
pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def old_home(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict]:
    root = tmp_path_factory.mktemp("upgrade")
    env = {**os.environ, "PYTHONPATH": str(old_src(OLD, root / "old")), "OMP_NUM_THREADS": "1"}
    built = subprocess.run(
        [sys.executable, str(Path(__file__).with_name("old_home.py")), str(root / "home")],
        env=env, capture_output=True, text=True, cwd=root,
    )  # fmt: skip
    assert built.returncode == 0, built.stderr[-3000:]
    return root / "home", json.loads((root / "old_home.json").read_text())


@pytest.fixture
def home(old_home: tuple[Path, dict], monkeypatch: pytest.MonkeyPatch) -> tuple[Path, dict]:
    from lorastudio.settings import get_settings

    monkeypatch.setenv("LORASTUDIO_HOME", str(old_home[0]))
    get_settings.cache_clear()
    return old_home


def _cli(*args: str) -> subprocess.CompletedProcess:
    """This code's CLI on the home (LORASTUDIO_HOME set by `home`) with the old home's hub cache."""
    from lorastudio.settings import get_settings

    hub = get_settings().home.parent / "hf-cache"
    env = {**os.environ, "PYTHONPATH": str(REPO / "src"), "HF_HUB_CACHE": str(hub), "HF_HUB_OFFLINE": "1"}
    return subprocess.run(
        [sys.executable, "-m", "lorastudio.cli", *args], env=env, capture_output=True, text=True
    )


def _shards(home: Path) -> dict[str, int]:
    return {
        p.relative_to(home).as_posix(): p.stat().st_mtime_ns
        for p in (home / "cache" / "encoded").rglob("*.safetensors")
    }


def test_an_old_home_upgrades(home: tuple[Path, dict]) -> None:
    from fastapi.testclient import TestClient

    from lorastudio.api.app import create_app
    from lorastudio.settings import get_settings

    folder, old = home
    runs = old["runs"]
    assert {n for n, r in runs.items() if r.get("stopped")} >= {
        "plain",
        "ema",
        "dora",
        "prodigy",
        "valreg",
        "disk",
        "capfiles",
    }
    listed = _cli("datasets", "list")
    assert listed.returncode == 0 and all(
        n in listed.stdout for n in ("shapes", "reg", "capfiles", "ko-3_sks shape")
    )
    assert _cli("lora", "list", "done").returncode == 0
    assert old["cli_run"]["rc"] == 0, old["cli_run"]
    runs_listed = _cli("runs", "list")  # the old CLI run's record in the run store
    assert runs_listed.returncode == 0 and "clirun" in runs_listed.stdout, (
        runs_listed.stdout + runs_listed.stderr
    )
    cached = _shards(folder)
    assert cached

    # refused early, naming the reason: Prodigy's lr floor (fix 371), the split rule (fix 372)
    # and the kohya caption rule (fix 470, its captions now the .caption files': fix 491)
    for name, field, why in (
        ("prodigy", "learning_rate", "below 0.1"),
        ("valreg", "validation_split", "split rule 1"),
        ("kohya", "dataset_fingerprint", "RELIABILITY 470"),
    ):
        refused = _cli("train", "--resume", name, "--device", "cpu")
        assert refused.returncode == 2, refused.stderr[-2000:]
        assert f"- {field}:" in refused.stderr and why in refused.stderr, refused.stderr[-2000:]
        assert "loading" not in refused.stderr, refused.stderr[-2000:]

    with TestClient(create_app(get_settings()), base_url="http://127.0.0.1") as client:
        (run,) = [r for r in client.get("/api/runs").json()["runs"] if r["output_name"] == "clirun"]
        assert (run["output_name"], run["status"], run["steps_run"]) == ("clirun", "completed", 2)
        assert client.get(f"/api/runs/{run['id']}").status_code == 200
        images = client.get("/api/gallery").json()["images"]
        assert len(images) == len(old["gallery"])
        renders_again(client, old["gallery"])  # the LoRAs unchanged yet: the same pixels
        job = old["caption_job"]
        assert job["end"]["status"] == "completed"
        assert (
            client.get(f"/api/captions/{job['out']['id']}").status_code == 404
        )  # the old server kept it in memory only

    # a plain folder's .caption files beside images trained on the default caption: refused since
    # RELIABILITY 1002, naming the way to keep training as the run began (delete them)
    refused = _cli("train", "--resume", "capfiles", "--device", "cpu")
    assert refused.returncode == 2, refused.stderr[-2000:]
    assert "shape_00.caption: a .caption file" in refused.stderr, refused.stderr[-2000:]
    assert "(or delete shape_00.caption to train without it)" in refused.stderr, refused.stderr[-2000:]
    for caption in (folder / "datasets" / "capfiles").glob("*.caption"):
        caption.unlink()

    # the maths unchanged: bitwise the old full run
    resumes_bitwise(folder, runs, ("plain", "ema", "dora", "disk", "capfiles"))
    # the latent entries read, none written anew; the FLUX.1's text entry was keyed by the base's
    # name for the components it lacks (rules 1-2), now by a fixed marker (fingerprint rule 3,
    # RELIABILITY 920): its captions encoded once more under the new key, one new text entry (the
    # old one left unread, prunable), never misread
    resumed_shards = _shards(folder)
    assert cached.keys() < resumed_shards.keys()
    fresh = {Path(k).parts[2:4] for k in resumed_shards.keys() - cached.keys()}
    assert len(fresh) == 1 and {kind for kind, _ in fresh} == {"text"}, fresh

    # a hub-cache base (the same files as models/tiny-flux): its text entry was keyed by the
    # tokenizer's hub id (rule 1) and the base's name (rule 2), now by its files alone: the one
    # the folder's runs wrote is read, nothing encoded anew
    hub_run = _cli("train", "--resume", "hub", "--device", "cpu")
    assert hub_run.returncode == 0, hub_run.stderr[-2000:]
    lora, full = (load_file(str(folder / "outputs" / n / f"{n}.safetensors")) for n in ("hub", "hub-full"))
    assert lora.keys() == full.keys() and all(torch.equal(lora[k], full[k]) for k in lora)
    assert _shards(folder).keys() == resumed_shards.keys()

    shown = _cli("runs", "show", run["id"])
    assert shown.returncode == 0 and "clirun" in shown.stdout, shown.stdout + shown.stderr
    pruned = _cli("cache", "prune", "--max-gb", "0")
    assert pruned.returncode == 0, pruned.stderr
    assert _cli("cache", "clear", "--yes").returncode == 0
    assert not _shards(folder)
