"""Build a studio home with the code of session 41's start (run with PYTHONPATH=<old tree>/src).

Two steps, each under its own version's code (tests/upgrade/test_upgrade_home41.py runs both):
- `python old_home41.py HOME --s40start` under the code of session 40's start (e5b93794, before
  fix 2102 stored a metadata.jsonl row's name composed): the tiny FLUX.1, the sample dataset, a
  dataset uploaded through that app with a metadata.jsonl row naming `café.png` decomposed (NFD)
  while the upload stored the file composed (NFC), and a run on it (trained then without the
  row's caption: on the trigger word) stopped at step 2 beside its twin;
- `python old_home41.py HOME` under session 41's start (d22724d8): a run of each adapter kind
  (LoRA, LoKr, LoHa, DoRA) and one on a kohya layout read in place (`kohya_folders`), each
  stopped at step 2 beside its twin; a dataset uploaded through the app in two batches (its
  decoded-images record written whole, no journal: before fix 2210); the old app's listing of
  the datasets; two asynchronous generations (POST /api/generations) with a LyCORIS DoRA whose
  header names no dora_scale rule (the answer warns: fix 2162; the gallery sidecar of this
  version keeps no warnings: before fix 2211).
The summary goes to HOME/../old_home.json (the second step adds to the first's)."""

from __future__ import annotations

import io
import json
import os
import shutil
import sys
import time
import unicodedata
from pathlib import Path
from typing import Any

from old_home import _settings  # noqa: E402 (beside this file)
from old_home38 import _stopped_and_full  # noqa: E402

os.environ.setdefault("OMP_NUM_THREADS", "1")
os.environ["HF_HUB_OFFLINE"] = "1"
os.environ["LORASTUDIO_STANDBY_WORKER"] = "0"

NFC, NFD = (unicodedata.normalize(form, "café") for form in ("NFC", "NFD"))
STEPS = 3
KINDS = ("lora", "lokr", "loha", "dora")
GEN_BODY = {"family": "flux", "prompt": "a red circle", "seed": 1, "steps": 2, "width": 32, "height": 32}
LAYER = "transformer_blocks.0.attn.to_q"


def _client() -> Any:
    from fastapi.testclient import TestClient

    from lorastudio.api.app import create_app
    from lorastudio.settings import get_settings

    get_settings.cache_clear()
    return TestClient(create_app(get_settings()), base_url="http://127.0.0.1")


def _pngs(shapes: Path, count: int, first: int = 0) -> list[bytes]:
    return [p.read_bytes() for p in sorted(shapes.glob("*.png"))[first : first + count]]


def _s40start(home: Path) -> dict:
    """Session 40's start: the model, the sample dataset, the NFD-row upload and its run."""
    from lorastudio.settings import get_settings
    from lorastudio.tiny import make_sample_dataset, save_tiny_model

    settings = get_settings()
    settings.ensure_dirs()
    model = save_tiny_model("flux", settings.models_dir / "tiny-flux")
    shapes = make_sample_dataset(settings.datasets_dir / "shapes")
    one, two = _pngs(shapes, 2)
    rows = "".join(
        json.dumps(r, ensure_ascii=False) + "\n"
        for r in (
            {"file_name": f"{NFD}.png", "text": "an accented shape"},
            {"file_name": "plain.png", "text": "plain"},
        )
    ).encode("utf-8")
    files = [("files", (f"{NFD}.png", io.BytesIO(one))), ("files", ("plain.png", io.BytesIO(two))),
             ("files", ("metadata.jsonl", io.BytesIO(rows)))]  # fmt: skip
    with _client() as client:
        up = client.post("/api/datasets/nfd41/files", files=files)
        assert up.status_code == 201, up.text
    data = settings.datasets_dir / "nfd41"
    stored = sorted(p.name for p in data.iterdir())
    raw = _settings(model, data, "nfd40", {"steps": STEPS, "save_every": None, "trigger_word": "sks"})
    return {"model": str(model), "nfd": {"stored": stored, "run": _stopped_and_full(raw)}}


def _bare_dora(outputs: Path, model: Path, name: str) -> Path:
    """outputs/NAME/NAME.safetensors: a rank-2 LyCORIS DoRA of the tiny FLUX.1's to_q whose header
    names no dora_scale rule (tests/api/test_api_dora_warning.py's `_dora`)."""
    import torch
    from safetensors import safe_open
    from safetensors.torch import save_file

    from lorastudio.lora.lycoris import module_key

    weights = next((model / "transformer").glob("*.safetensors"))
    with safe_open(str(weights), "pt") as f:
        out, inp = f.get_slice(f"{LAYER}.weight").get_shape()  # [out, in]
    g = torch.Generator().manual_seed(0)
    key = module_key(LAYER)
    tensors = {
        f"{key}.lora_up.weight": torch.randn(out, 2, generator=g) * 0.01,  # [out, r]
        f"{key}.lora_down.weight": torch.randn(2, inp, generator=g),  # [r, in]
        f"{key}.alpha": torch.tensor(2.0),
        f"{key}.dora_scale": torch.ones(out, 1),  # [out, 1]
    }
    path = outputs / name / f"{name}.safetensors"
    path.parent.mkdir(parents=True, exist_ok=True)
    save_file(tensors, str(path), metadata={"ss_network_dim": "2"})
    return path


def _generations(client: Any, model: Path) -> dict:
    """Two asynchronous generations with the bare DoRA, followed to their end: {id: status}."""
    out = {}
    for rid in ("old-gen-1", "old-gen-2"):
        body = {**GEN_BODY, "base_model": str(model), "loras": [{"name": "bare41"}], "request_id": rid}
        sent = client.post("/api/generations", json=body)
        assert sent.status_code == 202, sent.text
        for _ in range(1200):
            now = client.get(f"/api/generations/{rid}").json()
            if now["state"] in ("done", "failed", "cancelled", "interrupted"):
                break
            time.sleep(0.25)
        out[rid] = {"body": body, "status": now}
    return out


def _s41start(home: Path, model: Path, done: dict) -> dict:
    """Session 41's start: the adapter runs, the kohya run, the decoded record, the generations."""
    from lorastudio.settings import get_settings

    settings = get_settings()
    shapes = settings.datasets_dir / "shapes"
    out = dict(done)
    for kind in KINDS:
        if kind not in out:
            extra = {"steps": STEPS, "save_every": None, "adapter": kind, "lora_rank": 2}
            out[kind] = _stopped_and_full(_settings(model, shapes, f"{kind}41", extra))
    kohya = settings.datasets_dir / "kohya41"
    if "kohya" not in out:
        (kohya / "2_sks shape").mkdir(parents=True, exist_ok=True)
        (kohya / "1_sks ring").mkdir(exist_ok=True)
        for i, img in enumerate(sorted(shapes.glob("*.png"))[:6]):
            folder = kohya / ("2_sks shape" if i < 4 else "1_sks ring")
            shutil.copy(img, folder / img.name)
            if i % 2 == 0:  # every other image its own caption; the rest the folder's words
                shutil.copy(img.with_suffix(".txt"), folder / img.with_suffix(".txt").name)
        raw = _settings(model, kohya, "kohya41", {"steps": STEPS, "save_every": None, "kohya_folders": True})
        out["kohya"] = _stopped_and_full(raw)
    _bare_dora(settings.outputs_dir, model, "bare41")
    with _client() as client:
        for batch in ((0, 3), (3, 2)):  # two uploads: the record written whole each time
            files = [("files", (f"d{batch[0] + i}.png", io.BytesIO(b)))
                     for i, b in enumerate(_pngs(shapes, batch[1], batch[0]))]  # fmt: skip
            up = client.post("/api/datasets/dec41/files", files=files)
            assert up.status_code == 201, up.text
        out["datasets"] = client.get("/api/datasets").json()
        out["kohya_detail"] = client.get("/api/datasets/kohya41").json()
        if "generations" not in out:
            out["generations"] = _generations(client, model)
    record_dir = settings.home / "cache" / "decoded"
    out["decoded_files"] = sorted(p.name for p in record_dir.iterdir()) if record_dir.is_dir() else []
    return out


if __name__ == "__main__":
    home = Path(sys.argv[1])
    os.environ["LORASTUDIO_HOME"] = str(home)
    summary = home.parent / "old_home.json"
    if sys.argv[2:] == ["--s40start"]:
        out: dict = _s40start(home)
    else:
        out = json.loads(summary.read_text())
        out["s41"] = _s41start(home, Path(out["model"]), out.get("s41", {}))
    summary.write_text(json.dumps(out, indent=1, default=str))
    print(json.dumps(out, default=str)[:3000])
