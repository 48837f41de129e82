"""An EMA run's checkpoints keep the EMA weights of their step (RELIABILITY 812): listed by the
run's LoRAs by step as that step's EMA file (its download URL names them), downloaded, and picked
by Generate with `{"name", "step", "weights": "ema"}`; a step whose checkpoint keep_last removed
has none (404 naming why). Before, no file kept an EMA run's weights of a step before its last."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from lorastudio.config import parse_train_config
from lorastudio.settings import Settings
from lorastudio.training.loop import train


def _ema_run(settings: Settings, tiny_model: Callable[[str], Path], sample_dataset: Path) -> Path:
    """3 steps with a checkpoint after steps 1 and 2, keep_last 1: step 2's is kept."""
    raw = {"family": "flux", "base_model": str(tiny_model("flux")), "data_dir": str(sample_dataset),
           "output_name": "emas", "resolution": 32, "steps": 3, "batch_size": 2, "learning_rate": 1e-2,
           "lora_rank": 4, "ema_decay": 0.5, "save_every": 1, "keep_last": 1}  # fmt: skip
    assert train(parse_train_config(raw), [].append, settings=settings.ensure_dirs(), device="cpu").lora_path
    return settings.outputs_dir / "emas"


def test_an_ema_checkpoints_weights_are_listed_downloaded_and_picked(
    client, settings: Settings, tiny_model: Callable[[str], Path], sample_dataset: Path
) -> None:
    run_dir = _ema_run(settings, tiny_model, sample_dataset)
    kept = run_dir / "checkpoints" / "step-000002" / "emas-step-000002.ema.safetensors"
    rows = client.get("/api/loras/emas/steps").json()["loras"]
    ema = [(r["step"], r["final"], r["url"]) for r in rows if r["weights"] == "ema"]
    assert ema == [(2, False, "/api/loras/emas/file?step=2&weights=ema"), (3, True, "/api/loras/emas/file")]
    assert client.get("/api/loras/emas/file?step=2&weights=ema").content == kept.read_bytes()
    raw = client.get("/api/loras/emas/file?step=2").content  # the step's raw weights: another file
    assert (
        raw == (run_dir / "loras" / "emas-step-000002.safetensors").read_bytes() and raw != kept.read_bytes()
    )

    gone = client.get("/api/loras/emas/file?step=1&weights=ema")  # keep_last removed its checkpoint
    assert gone.status_code == 404 and "keep_last removed it" in gone.json()["detail"]
    body = {"family": "flux", "base_model": str(tiny_model("flux")), "prompt": "x", "steps": 1, "width": 32,
            "height": 32, "loras": [{"name": "emas", "step": 1, "weights": "ema"}]}  # fmt: skip
    assert client.post("/api/generate", json=body).status_code == 404
    assert (
        client.post("/api/generate", json={**body, "loras": [{"name": "emas", "weights": "x"}]}).status_code
        == 422
    )

    from lorastudio.jobs.generation import GenerationService
    from lorastudio.jobs.generation_inputs import GenerationRequest, LoraChoice
    from lorastudio.jobs.gpu import GpuArbiter

    service = GenerationService(settings, GpuArbiter())
    try:
        req = GenerationRequest(family="flux", base_model=str(tiny_model("flux")), prompt="x", steps=1, width=32,
                                height=32, loras=(LoraChoice("emas", step=2, weights="ema"),))  # fmt: skip
        _, loras, _ = service.check(req)
        assert [Path(p) for p, _ in loras] == [kept.resolve()]
    finally:
        service.shutdown()
