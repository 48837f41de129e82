"""Session 39 upgrade audit, end to end (slow: 5.8 to 8.7 min on 2 shared cores, 3.6 to 6.9
of them building the home; 1.5 to 2.5 min on a copy, UPGRADE39_BUILT): a studio home
built by the code of the session's start (commit OLD, extracted with `git archive`;
tests/upgrade/old_home39.py: session 38's fixture home, a plain LoRA run of the LoKr run's
settings finished, a run on a dataset with loss masks and a Qwen-Image-Edit run on one with
control images and masks, each stopped at step 2 beside its uninterrupted twin) is opened by this
code: the listings (the placeholder dataset counted as refused, RELIABILITY 1862), the forecast from the old wall-time records (the
old LoKr record measures LoKr runs, not LoRA runs: 1970), the old checkpoints resumed bitwise with
no machine note (they record no device: 1873), a LoHa run's within rounding (1990), the masked run's mask black in its crop named
(1871); this code's checkpoint (device and dtype path
recorded) and the LoHa run's resumed by the old code to the uninterrupted losses; a LoKr run finished by the old code
after the roll back (its record without `adapter`) forecast as a LoKr by this code again, and a
"train again" of the LoKr run through its server. Skipped
where the repository lacks the old commit (a shallow clone). UPGRADE39_BUILT=<a root this fixture
built> copies it instead of building (while developing)."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import pytest
import torch
from tests.upgrade.old_tree import build_old_home, old_src, run_cli, use_old_home
from tests.upgrade.test_upgrade_home35 import _ended
from tests.upgrade.test_upgrade_home37 import OLD_APP, RESUME, _names, _old_python

from stop_at import stop_at

OLD = "de983f10"  # session 39's start
REPO = Path(__file__).resolve().parents[2]
pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def old_home(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict, Path]:
    root = tmp_path_factory.mktemp("upgrade39")
    built = os.environ.get("UPGRADE39_BUILT")
    if built:  # a root built before (its home and old_home.json): copied, the old source extracted
        shutil.copytree(built, root, symlinks=True, dirs_exist_ok=True, ignore=shutil.ignore_patterns("old"))
        text = (Path(built) / "old_home.json").read_text().replace(str(Path(built)), str(root))
        # the records' and LoRAs' base model paths as the copy's (the forecast matches them)
        for path in [
            *(root / "home" / "run_timings").glob("*.json"),
            *(root / "home" / "outputs").glob("*/*.json"),
        ]:
            path.write_text(path.read_text().replace(str(Path(built)), str(root)))
        return root / "home", {**json.loads(text), "copied": True}, old_src(OLD, root / "old")
    return build_old_home(root, OLD, "old_home39.py")


@pytest.fixture
def home(old_home: tuple[Path, dict, Path], monkeypatch: pytest.MonkeyPatch) -> tuple[Path, dict, Path]:
    return use_old_home(old_home, monkeypatch)


def _steps_basis(client, config: dict) -> str:  # noqa: ANN001 (the app's TestClient)
    """The basis of the steps phase of `config`'s preflight forecast."""
    answer = client.post("/api/train/preflight", json={"config": config})
    assert answer.status_code == 200, answer.text[:2000]
    return next(p["basis"] for p in answer.json()["time"]["phases"] if p["name"] == "steps")


def test_an_old_home_of_session_39_upgrades_rolls_back_and_upgrades_again(
    home: tuple[Path, dict, Path],
) -> None:
    from fastapi.testclient import TestClient

    from lorastudio.api.app import create_app
    from lorastudio.config import TrainConfig
    from lorastudio.settings import get_settings
    from lorastudio.training.loop import train

    folder, old, old_src_dir = home
    s39, outputs = old["s39"], folder / "outputs"
    for key in ("mask", "edit"):
        assert s39[key]["stopped"] and len(s39[key]["stopped_losses"]) < len(s39[key]["full_losses"]), key
    listed = _names(REPO / "src")
    assert _names(old_src_dir) == listed
    lokr_raw, lora_raw = old["s38"]["lokr"]["raw"], s39["lora"]["raw"]
    with TestClient(create_app(get_settings()), base_url="http://127.0.0.1") as client:
        runs = client.get("/api/runs").json()["runs"]
        assert [r["output_name"] for r in runs] == listed
        for run in runs:
            for tail in ("", "/checkpoints", "/samples", "/config", "/loras"):  # with the LoRA snapshots
                kept = (outputs / run["output_name"]).is_dir()  # a failed fresh run's: removed
                expected = 404 if tail == "/loras" and not kept else 200
                assert client.get(f"/api/runs/{run['id']}{tail}").status_code == expected, (run, tail)
        ema = next(
            r for r in runs if r["output_name"] == "ema37"
        )  # its checkpoint's snapshot, by the old code
        steps = [lo["step"] for lo in client.get(f"/api/runs/{ema['id']}/loras").json()["loras"]]
        assert old["s37"]["ema"]["end"]["progress"]["step"] in steps, steps  # stopped at 3, or a little later
        loras = {lo["name"] for lo in client.get("/api/loras").json()["loras"]}
        assert {"lora39", "mask39-full", "edit39-full", "lokr38-full"} <= loras, loras
        sets = {d["name"]: d for d in client.get("/api/datasets").json()["datasets"]}
        marked = {name: d["markup_captions"] for name, d in sets.items() if d["markup_captions"]}
        assert marked == {"trig38": sets["trig38"]["images"]}, marked  # every caption of it (1862)
        for name in ("mask39", "edit39"):
            assert client.get(f"/api/datasets/{name}").status_code == 200, name
        # the forecast from the old records: the LoKr run's own record measures a LoKr run, the
        # LoRA run's a LoRA run (1970: the old LoKr record read as a LoRA's measured the LoRA)
        lokr_basis = _steps_basis(client, {**lokr_raw, "output_name": "lokr39-again"})
        assert "measured by 1 earlier run of this base and plan" in lokr_basis, lokr_basis
        lora_basis = _steps_basis(client, {**lora_raw, "output_name": "lora39-again"})
        assert "runs of lokr" not in lora_basis, lora_basis
    listing = run_cli("datasets", "list", src=REPO / "src")
    assert listing.returncode == 0 and "markup: 'trig38': 8 caption(s)" in listing.stdout, listing.stdout

    # the old checkpoints resumed by this code bitwise, with no word of the machine (none recorded);
    # a copied home's edit run too (its old fingerprint holds its controls' absolute paths, compared
    # under the folders its config recorded since RELIABILITY 2040)
    for key, run in (("mask", "mask39"), ("edit", "edit39")):
        events: list = []
        ours = train(TrainConfig.model_validate(s39[key]["raw"]), events.append, device="cpu",
                     resume=outputs / run)  # fmt: skip
        assert ours.losses == s39[key]["full_losses"], key
        assert not [e.message for e in events if e.type == "warning"], key
    # the LoHa run (rank 2: this code's forward takes its factors' product, 1990) resumed to step 4:
    # the old uninterrupted losses within rounding (the same sums in another order)
    loha = TrainConfig.model_validate(s39["loha"]["raw"])
    events, check = stop_at(4)
    ours = train(loha, events.append, check, device="cpu", resume=outputs / "loha39")
    assert ours.losses == pytest.approx(s39["loha"]["full_losses"][:4], rel=1e-5)
    assert not [e.message for e in events if e.type == "warning"]

    # this code runs the masked run afresh, stopped with a checkpoint (its device and dtype path)
    masked = TrainConfig.model_validate({**s39["mask"]["raw"], "output_name": "mask39-new"})
    events, check = stop_at(3)
    ours = train(masked, events.append, check, device="cpu")
    assert ours.stopped and ours.losses == s39["mask"]["full_losses"][: len(ours.losses)]
    said = [w for e in events if e.type == "dataset_warnings" for w in e.warnings if "black" in w]
    assert said and "shape_06.png" in said[0], said  # blank inside its crop (the whole mask is not)
    state = torch.load(
        sorted((outputs / "mask39-new" / "checkpoints").glob("*"))[-1] / "state.pt", weights_only=True
    )
    assert state["device_name"] == "cpu" and state["dtype_path"].startswith("float32 compute"), state

    # roll back: the old code lists this code's store, resumes this code's checkpoint to the end
    listed = _names(REPO / "src")
    assert _names(old_src_dir) == listed
    answers = _old_python(OLD_APP, "/api/runs", "/api/loras", "/api/datasets", src=old_src_dir)
    assert [status for status, _ in answers] == [200] * 3, answers
    raw = {**s39["mask"]["raw"], "output_name": "mask39-new"}
    rolled, warnings = _old_python(RESUME, json.dumps(raw), str(outputs / "mask39-new"), src=old_src_dir)
    assert rolled == s39["mask"]["full_losses"] and not warnings, warnings
    # and the LoHa run from this code's step-4 checkpoint to its end (peft's full weight again)
    rolled, warnings = _old_python(
        RESUME, json.dumps(s39["loha"]["raw"]), str(outputs / "loha39"), src=old_src_dir
    )
    assert rolled == pytest.approx(s39["loha"]["full_losses"], rel=1e-5) and not warnings, warnings
    # the old code finishes a fresh LoKr run: a record without `adapter`
    config = folder.parent / "lokr39old.json"
    config.write_text(json.dumps({**lokr_raw, "output_name": "lokr39old", "lokr_factor": 4}))
    done = run_cli("train", str(config), "--device", "cpu", src=old_src_dir)
    assert done.returncode == 0, done.stderr[-2000:]
    (record,) = (folder / "run_timings").glob("*-lokr39old.json")
    assert "adapter" not in json.loads(record.read_text())["signature"]

    # forward again: the listings, the old run's record read as the LoKr run it was
    get_settings.cache_clear()
    with TestClient(create_app(get_settings()), base_url="http://127.0.0.1") as client:
        assert [r["output_name"] for r in client.get("/api/runs").json()["runs"]] == _names(old_src_dir)
        basis = _steps_basis(client, {**lokr_raw, "output_name": "lokr39-f4", "lokr_factor": 4})
        assert "measured by 1 earlier run of this base and plan" in basis, basis
        again = client.post("/api/train/start", json={"config": {**lokr_raw, "output_name": "lokr39-new"}})
        assert again.status_code == 201, again.text
        assert _ended(client, again.json()["id"])["status"] == "completed"
