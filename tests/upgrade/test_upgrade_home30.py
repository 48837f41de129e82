"""Session 30 upgrade audit, end to end (slow: ~2-3 min on 2 cores): a studio home built by the
code of the session's start (commit OLD, extracted with `git archive`; tests/upgrade/old_home30.py
run on it under a team's umask 002) is opened by this code, then again by the old code (a user
rolling back). Listings keep their order; every stopped run and the killed one resume bitwise
onto the old code's uninterrupted runs, reading the old disk cache without re-encoding; the
forecast reads the old time records at two sizes; gallery images render again pixel for pixel;
the old code resumes a checkpoint this code wrote, bitwise. The home's shared files the old code
made 0600 / 0644 / 0755 follow the umask after this code's first command (RELIABILITY 940).
Skipped where the repository lacks the old commit (a shallow clone)."""

from __future__ import annotations

import json
import os
import socket
import stat
import subprocess
import sys
import urllib.request
from pathlib import Path

import pytest
from tests.polling import until
from tests.upgrade.old_tree import old_src, renders_again, resumes_bitwise

OLD = "89e293be"  # session 30's start
REPO = Path(__file__).resolve().parents[2]
pytestmark = pytest.mark.slow


def _umask_002() -> None:
    os.umask(0o002)


@pytest.fixture(scope="module")
def old_home(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict, Path]:
    root = tmp_path_factory.mktemp("upgrade30")
    source = old_src(OLD, root / "old")
    env = {**os.environ, "PYTHONPATH": str(source), "OMP_NUM_THREADS": "1"}
    built = subprocess.run(
        [sys.executable, str(Path(__file__).with_name("old_home30.py")), str(root / "home")],
        env=env, capture_output=True, text=True, cwd=root, preexec_fn=_umask_002,  # noqa: PLW1509
    )  # fmt: skip
    assert built.returncode == 0, built.stderr[-3000:]
    return root / "home", json.loads((root / "old_home.json").read_text()), source


@pytest.fixture
def home(old_home: tuple[Path, dict, Path], monkeypatch: pytest.MonkeyPatch) -> tuple[Path, dict, Path]:
    from lorastudio.settings import get_settings

    monkeypatch.setenv("LORASTUDIO_HOME", str(old_home[0]))
    get_settings.cache_clear()
    return old_home


def _cli(*args: str, src: Path = REPO / "src") -> subprocess.CompletedProcess:
    """The CLI of `src` (this code's by default) on the home, under umask 002 (a team's)."""
    env = {**os.environ, "PYTHONPATH": str(src), "HF_HUB_OFFLINE": "1"}
    return subprocess.run(
        [sys.executable, "-m", "lorastudio.cli", *args],
        env=env, capture_output=True, text=True, preexec_fn=_umask_002,  # noqa: PLW1509
    )  # fmt: skip


def _cli_python(code: str, *args: str) -> subprocess.CompletedProcess:
    """`python -c code args` with this code, under umask 002."""
    env = {**os.environ, "PYTHONPATH": str(REPO / "src"), "HF_HUB_OFFLINE": "1"}
    return subprocess.run(
        [sys.executable, "-c", code, *args],
        env=env, capture_output=True, text=True, preexec_fn=_umask_002,  # noqa: PLW1509
    )  # fmt: skip


def _mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


def test_an_old_home_upgrades_and_downgrades(home: tuple[Path, dict, Path]) -> None:
    from fastapi.testclient import TestClient

    from lorastudio.api.app import create_app
    from lorastudio.config import TrainConfig
    from lorastudio.settings import get_settings
    from lorastudio.training.events import StopRequest
    from lorastudio.training.loop import train

    folder, old, old_src = home
    runs = old["runs"]
    assert old["added"]["rc"] == 0 and all(runs[n]["rc"] == 0 for n in ("done32", "done64")), old
    assert len(old["killed"]["checkpoints"]) >= 1, old["killed"]

    # listings: the run store's order (newest first) as the old code listed it
    listed = _cli("runs", "list")
    assert listed.returncode == 0, listed.stderr[-2000:]
    order = [line.split("\t")[4] for line in listed.stdout.splitlines()[1:]]
    assert order == ["killed", "done64", "done32"], listed.stdout
    assert "interrupted" in listed.stdout.splitlines()[1]
    models = _cli("models", "list")
    assert models.returncode == 0 and "added:tiny-flux" in models.stdout, models.stdout
    shards = {p: p.stat().st_mtime_ns for p in (folder / "cache" / "encoded").rglob("*.safetensors")}
    assert shards

    _listing_pages_of_a_served_home(folder, ["killed", "done64", "done32"])

    with TestClient(create_app(get_settings()), base_url="http://127.0.0.1") as client:
        renders_again(client, old["gallery"])  # generation with the old LoRAs: the same pixels
        assert client.get(f"/api/captions/{old['caption_job']['out']['id']}").json()["status"] == "completed"
        config = {k: v for k, v in runs["plain"]["raw"].items() if not k.startswith("sample_")}
        for resolution, confidence in ((32, "measured"), (48, "scaled"), (64, "measured")):
            body = {"config": {**config, "output_name": "fc", "resolution": resolution}}
            forecast = client.post("/api/train/preflight", json=body)
            assert forecast.status_code == 200, forecast.text
            wall = forecast.json()["time"]
            assert (wall["source"], wall["confidence"]) == ("history", confidence), wall
            assert wall["total_s"] > 0

    # exact resume of each stopped kind: bitwise the old code's uninterrupted run
    resumes_bitwise(folder, runs, ("plain", "ema", "multi", "disk"))
    assert {p: p.stat().st_mtime_ns for p in shards} == shards  # kept, none rewritten
    added = set((folder / "cache" / "encoded").rglob("*.safetensors")) - set(shards)
    # fingerprint rule 3 (RELIABILITY 920) keys the captions anew once: no latent is encoded again
    assert all("/text/" in p.as_posix() for p in added), sorted(added)

    killed = old["killed"]  # the interrupted run: resumed to its twin's step, the same losses
    events: list = []

    def stop_at_twin() -> StopRequest | None:
        done = [e for e in events if e.type == "progress"]
        return StopRequest(save=True) if done and done[-1].step >= len(killed["full_losses"]) else None

    config = TrainConfig.model_validate(killed["raw"])
    again = train(config, events.append, stop_at_twin, device="cpu", resume=folder / "outputs" / "killed")
    assert again.losses == killed["full_losses"]

    # downgrade: this code's checkpoint (ema at step 3) read by the old code. Its identity takes a
    # component FLUX.1 lacks by fingerprint rule 3 (RELIABILITY 920), which the old code does not
    # know: it refuses the resume as a changed base, naming the components, and writes nothing;
    # this code then resumes the same checkpoint to the end, bitwise the uninterrupted run.
    events = []

    def stop_at_3() -> StopRequest | None:
        done = [e for e in events if e.type == "progress"]
        return StopRequest(save=True) if done and done[-1].step >= 3 else None

    ema = TrainConfig.model_validate(runs["ema"]["raw"])
    train(ema.model_copy(update={"output_name": "ema-new"}), events.append, stop_at_3, device="cpu")
    kept = {p: p.stat().st_mtime_ns for p in (folder / "outputs" / "ema-new").rglob("*") if p.is_file()}
    back = _cli("train", "--resume", "ema-new", "--device", "cpu", src=old_src)
    assert back.returncode == 2 and "text_encoder_3" in back.stderr, back.stderr[-2000:]
    assert "Traceback" not in back.stderr
    now = {p: p.stat().st_mtime_ns for p in (folder / "outputs" / "ema-new").rglob("*") if p.is_file()}
    assert now == kept  # nothing written by the refused resume
    train(
        ema.model_copy(update={"output_name": "ema-new"}),
        [].append,
        device="cpu",
        resume=folder / "outputs" / "ema-new",
    )
    from safetensors.torch import load_file

    lora, full = (
        load_file(str(folder / "outputs" / n / f"{n}.safetensors")) for n in ("ema-new", "ema-full")
    )
    assert lora.keys() == full.keys() and all((lora[k] == full[k]).all() for k in lora)
    rolled = _cli("runs", "list", src=old_src)  # the old code lists the store this code wrote
    assert rolled.returncode == 0 and "ema-new" in rolled.stdout, rolled.stderr[-2000:]


def _listing_pages_of_a_served_home(folder: Path, order: list[str]) -> None:
    """A real `lorastudio serve` on the old home: the web's listing pages' API calls answer, the
    runs in the store's order with their resume points."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    env = {
        **os.environ,
        "PYTHONPATH": str(REPO / "src"),
        "HF_HUB_OFFLINE": "1",
        "LORASTUDIO_HOME": str(folder),
    }
    server = subprocess.Popen(
        [sys.executable, "-m", "lorastudio.cli", "serve", "--port", str(port)],
        env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, preexec_fn=_umask_002,  # noqa: PLW1509
    )  # fmt: skip

    def get(path: str) -> object:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=30) as answer:
            return json.loads(answer.read())

    def up() -> bool:
        try:
            get("/api/info")
        except OSError:
            assert server.poll() is None, server.stderr.read().decode()[-2000:] if server.stderr else ""
            return False
        return True

    try:
        until(up, 120, "the server answers")
        runs = get("/api/runs")["runs"]  # type: ignore[index]
        assert [r["output_name"] for r in runs] == order
        assert runs[0]["status"] == "interrupted" and runs[0]["resume_step"] is not None
        for run in runs:
            for tail in ("", "/checkpoints", "/loras", "/samples"):
                get(f"/api/runs/{run['id']}{tail}")
        assert "added:tiny-flux" in json.dumps(get("/api/models"))
        assert {d["name"] for d in get("/api/datasets")["datasets"]} >= {"shapes", "reg", "cards"}  # type: ignore[index]
        assert len(get("/api/gallery")["images"]) == 3  # type: ignore[index]
        assert [j["status"] for j in get("/api/captions")] == ["completed"]  # type: ignore[union-attr]
        assert get("/api/cache")["entries"]  # type: ignore[index]
        assert {lo["name"] for lo in get("/api/loras")["loras"]} >= {"done32", "done64", "plain"}  # type: ignore[index]
    finally:
        server.terminate()
        server.wait(timeout=60)


def test_the_old_homes_shared_files_follow_the_umask_after_its_commands(
    home: tuple[Path, dict, Path],
) -> None:
    """The old code made the home's locks 0600, the database 0644, the cache's folders 0755 and
    each checkpoint's LoRA 0600 whatever the umask: a second member of the group was refused
    every command after the upgrade ("Permission denied: .../lorastudio.lock"), every cache
    write and every resume of the first member's runs. This code's commands (the owner's, under
    the team's umask 002: a CLI command, a run's hold on the cache) give them the group's bits."""
    folder, old, _ = home
    narrow = {name for name, mode in old["modes"].items() if not int(mode, 8) & 0o020}
    assert {"lorastudio.lock", ".added_models.lock", "lorastudio.db"} <= narrow, old["modes"]
    assert any("cache/encoded" in n for n in narrow) and any("checkpoints" in n for n in narrow)
    for args in (("runs", "list"), ("cache", "prune", "--max-gb", "100")):
        done = _cli(*args)
        assert done.returncode == 0, done.stderr[-2000:]
    held = _cli_python(
        "import sys; from pathlib import Path; from lorastudio.data.cache_io import hold_readers;"
        " hold_readers(Path(sys.argv[1]))",
        str(folder / "cache" / "encoded"),
    )
    assert held.returncode == 0, held.stderr[-2000:]
    kept = [n for n in old["modes"] if (folder / n).exists()]  # resumed runs dropped their old checkpoints
    assert any("checkpoints" in n for n in kept) and any("cache/encoded" in n for n in kept), kept
    bad = [f"{oct(_mode(folder / n))} {n}" for n in kept if _mode(folder / n) & 0o020 != 0o020]
    assert not bad, bad
