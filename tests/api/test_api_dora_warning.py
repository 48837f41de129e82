"""A LyCORIS-layout DoRA file whose header names no dora_scale rule is read by ComfyUI's rule, a
guess (lora/dora_rule.py, fix 2090): generation said so in the server's log only. Its warning now
comes back with the image (POST /api/generate's `warnings`, the generation record's image) and in
the train preflight's notes of a run that starts from it (RELIABILITY 2162)."""

from __future__ import annotations

import json
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import torch
from api_helpers import LiveServer
from fastapi.testclient import TestClient
from safetensors import safe_open
from safetensors.torch import save_file
from tests.polling import until

from generation_fakes import InProcessGeneration
from lorastudio.basemodels import ResolvedBase
from lorastudio.jobs.generation_inputs import GenerationRequest
from lorastudio.jobs.gpu import GpuArbiter
from lorastudio.lora.dora_rule import RULE_KEY
from lorastudio.lora.lycoris import module_key
from lorastudio.settings import Settings

LAYER = "transformer_blocks.0.attn.to_q"


def _dora(folder: Path, name: str, header: dict[str, str], model: Path | None = None) -> Path:
    """outputs/NAME/NAME.safetensors: a rank-2 DoRA of the tiny FLUX.1's to_q in the LyCORIS layout
    (kohya's names, an [out, 1] dora_scale) with `header` as its metadata; without `model`, of a
    made-up 32 x 32 layer (for the service without a worker)."""
    out, inp = 32, 32
    if model is not None:
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
    path = folder / name / f"{name}.safetensors"
    path.parent.mkdir(parents=True)
    save_file(tensors, str(path), metadata=header)
    return path


@pytest.mark.slow  # ~45 s here (two real renders); the default test below covers the answer's path
def test_a_dora_whose_header_names_no_rule_is_said_with_the_rendered_image(
    server: LiveServer, settings: Settings, tiny_model: Callable[[str], Path]
) -> None:
    model = tiny_model("flux")
    bare = _dora(settings.ensure_dirs().outputs_dir, "bare", {"ss_network_dim": "2"}, model)
    _dora(settings.outputs_dir, "told", {RULE_KEY: "lycoris"}, model)
    body = {"family": "flux", "base_model": str(model), "prompt": "x", "steps": 1, "width": 32, "height": 32}
    made = server.client.post("/api/generate", json={**body, "loras": [{"name": "bare"}]})
    assert made.status_code == 201, made.text
    (said,) = made.json()["warnings"]
    assert str(bare) in said and "nothing in its header says how its dora_scale was written" in said
    told = server.client.post("/api/generate", json={**body, "loras": [{"name": "told"}]})
    assert told.status_code == 201 and told.json()["warnings"] == [], told.text


class _WithLoras(InProcessGeneration):
    """The in-process service whose check finds the request's LoRAs in the outputs folder."""

    def check(self, req: GenerationRequest) -> Any:
        loras = [
            (str(self.settings.outputs_dir / c.name / f"{c.name}.safetensors"), c.scale) for c in req.loras
        ]
        return ResolvedBase(source=req.base_model, folder=None), loras, tuple("0" * 64 for _ in loras)


def test_the_generation_answer_and_its_record_carry_the_dora_warning(
    settings: Settings, client: TestClient
) -> None:
    """POST /api/generate and GET /api/generations/{id}'s image both say it (the worker stood in
    for: the service's answer is what is tested); a file whose header names its rule says nothing."""
    bare = _dora(settings.ensure_dirs().outputs_dir, "bare", {"ss_network_dim": "2"})
    _dora(settings.outputs_dir, "told", {RULE_KEY: "lycoris"})
    client.app.state.generation = _WithLoras(settings, GpuArbiter())  # type: ignore[attr-defined]
    body = {"family": "flux", "base_model": "tiny", "prompt": "x", "width": 32, "height": 32}
    made = client.post("/api/generate", json={**body, "loras": [{"name": "bare"}, {"name": "told"}]})
    assert made.status_code == 201, made.text
    (said,) = made.json()["warnings"]
    assert str(bare) in said and f'set {RULE_KEY} = "lycoris"' in said
    sent = client.post("/api/generations", json={**body, "loras": [{"name": "bare"}], "request_id": "w-1"})
    assert sent.status_code == 202, sent.text
    done = until(
        lambda: (s := client.get("/api/generations/w-1").json())["state"] == "done" and s, 30, "done"
    )
    assert done["image"]["warnings"] == [said]  # type: ignore[index]
    quiet = client.post("/api/generate", json={**body, "loras": [{"name": "told"}]})
    assert quiet.status_code == 201 and quiet.json()["warnings"] == [], quiet.text


@pytest.mark.slow  # ~60 s here (the preflight of a tiny FLUX.1 run); the default test below covers init_lora_notes
def test_the_train_preflight_notes_an_init_lora_dora_whose_header_names_no_rule(
    client: TestClient,
    settings: Settings,
    sample_dataset: Path,
    flux_config: Callable[..., dict],
    tiny_model: Callable[[str], Path],
) -> None:
    """The run said it as its warning once started (InitLoad.note); the preflight said nothing."""
    settings.ensure_dirs()
    shutil.copytree(sample_dataset, settings.datasets_dir / "shapes")
    model = tiny_model("flux")
    bare = _dora(tmp := settings.home / "loras", "bare", {"ss_network_dim": "2"}, model)
    told = _dora(tmp, "told", {RULE_KEY: "lycoris"}, model)
    config = flux_config(adapter="dora", lora_rank=2, lora_targets=["to_q"])
    answer = client.post("/api/train/preflight", json={"config": {**config, "init_lora": str(bare)}})
    assert answer.status_code == 200, answer.text
    (said,) = [n for n in answer.json()["notes"] if "dora_scale" in n]
    assert str(bare) in said and "nothing in its header says how its dora_scale was written" in said
    quiet = client.post("/api/train/preflight", json={"config": {**config, "init_lora": str(told)}})
    assert quiet.status_code == 200 and not [n for n in quiet.json()["notes"] if "dora_scale" in n], (
        quiet.text
    )


def test_init_lora_notes_name_a_dora_whose_header_names_no_rule(settings: Settings) -> None:
    """What validate_run adds to the preflight's notes (jobs/validation.py): the warning of a bare
    DoRA, nothing for a told one, nor for no init_lora or a file the problems already refuse."""
    from types import SimpleNamespace

    from lorastudio.training.adapters.init_lora_rules import init_lora_notes

    bare = _dora(settings.home / "loras", "bare", {"ss_network_dim": "2"})
    told = _dora(settings.home / "loras", "told", {RULE_KEY: "lycoris"})
    (said,) = init_lora_notes(SimpleNamespace(init_lora=str(bare)), settings)  # type: ignore[arg-type]
    assert str(bare) in said and "nothing in its header says how its dora_scale was written" in said
    for value in (str(told), None, str(settings.home / "missing.safetensors")):
        assert init_lora_notes(SimpleNamespace(init_lora=value), settings) == []  # type: ignore[arg-type]


def test_a_generation_answered_after_a_restart_from_its_sidecar_keeps_its_warning(
    settings: Settings, client: TestClient, monkeypatch: pytest.MonkeyPatch
) -> None:
    """RELIABILITY 2211: its "done" record lost (a kill after the image was committed), the next
    server answers it done from the gallery's sidecar (jobs/generation_recover, fix 1773): that
    answer had no warnings, the sidecar kept the settings only. A sidecar of before (no
    `warnings`) or a hand's other form answers none."""
    from lorastudio.jobs import generation_records

    _dora(settings.ensure_dirs().outputs_dir, "bare", {"ss_network_dim": "2"})
    client.app.state.generation = _WithLoras(settings, GpuArbiter())  # type: ignore[attr-defined]
    real_write = generation_records.GenerationRecords.write

    def lose_done(self: Any, status: dict[str, Any], *a: Any, **k: Any) -> None:
        if status["state"] != "done":
            real_write(self, status, *a, **k)

    monkeypatch.setattr(generation_records.GenerationRecords, "write", lose_done)
    body = {"family": "flux", "base_model": "tiny", "prompt": "x", "width": 32, "height": 32}
    for rid in ("lost-1", "lost-2", "lost-3"):
        sent = client.post("/api/generations", json={**body, "loras": [{"name": "bare"}], "request_id": rid})
        assert sent.status_code == 202, sent.text
        until(lambda rid=rid: client.get(f"/api/generations/{rid}").json()["state"] == "done", 30, "done")
    monkeypatch.setattr(generation_records.GenerationRecords, "write", real_write)
    said = client.get("/api/generations/lost-1").json()["image"]["warnings"]
    assert len(said) == 1 and "dora_scale" in said[0]
    sidecars = {}
    for sidecar in (settings.home / "gallery").glob("*.json"):
        meta = json.loads(sidecar.read_text(encoding="utf-8"))
        sidecars[meta["request_id"]] = (sidecar, meta)
    older, planted = sidecars["lost-2"], sidecars["lost-3"]
    older[0].write_text(json.dumps({k: v for k, v in older[1].items() if k != "warnings"}), encoding="utf-8")
    planted[0].write_text(json.dumps(planted[1] | {"warnings": ["a", 5, None]}), encoding="utf-8")
    client.app.state.generation = _WithLoras(settings, GpuArbiter())  # type: ignore[attr-defined]  # the restart
    for rid, warnings in (("lost-1", said), ("lost-2", []), ("lost-3", ["a"])):
        again = client.get(f"/api/generations/{rid}").json()
        assert (again["state"], again["image"]["warnings"]) == ("done", warnings), again
