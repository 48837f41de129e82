"""The host RAM forecast's terms for what a run keeps beside its denoiser (jobs/host_memory_texts.py):
the caption embeddings held in RAM from phase 1 to the end, the VAE kept for per-step latents and
the text encoders kept by train_text_encoder. None of them was counted before (RESULTS note 41)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest
from bench.header_pipelines import build_flux1, build_sdxl

from lorastudio import families
from lorastudio.config import TrainConfig
from lorastudio.jobs import host_memory
from lorastudio.jobs.hardware import CPU_HOST, HostInfo, precisions_for
from lorastudio.jobs.host_memory_texts import text_bytes_per_text, texts_encoded
from lorastudio.jobs.preflight import param_count, plan_for_estimate
from lorastudio.jobs.validation import validate_run
from lorastudio.settings import Settings

GPU = HostInfo("cuda", "H100", 79.2, precisions_for("cuda", (9, 0)), gpu_count=1)


def _run(settings: Settings, model: Path, **over: object):
    raw = {"family": over.pop("family", "flux"), "base_model": str(model), "data_dir": "shapes"}
    return validate_run({**raw, "resolution": 256, "steps": 2, **over}, settings, live_output_names=set())


def _forecast(run, host: HostInfo = CPU_HOST) -> dict:
    cfg = run.config
    return host_memory.scan_forecast(cfg, run.model_dir, plan_for_estimate(cfg, host), host, run.scan)


def _encoded_bytes(family: str, model: Path, settings: Settings) -> list[int]:
    """Bytes of the tensors the family's encode_prompts keeps for two captions (fp32, CPU)."""
    import torch

    fam = families.get(family)
    cfg = _run(settings, model, family=family).config
    encoders = fam.load_text_encoders(str(model), None, torch.float32, torch.device("cpu"))
    out = fam.encode_prompts(encoders, ["a red circle on a blue background, drawn flat", ""], cfg)
    return [sum(t.numel() * t.element_size() for t in text.values() if t.is_floating_point()) for text in out]


@pytest.mark.parametrize("family", ["flux", "sdxl", "qwen-image"])
def test_a_texts_bytes_are_the_encoders_tensors(
    family: str, settings: Settings, tiny_model: Callable[[str], Path], shapes: Path
) -> None:
    """A padded family's (FLUX.1: T5 512 x 32 + pooled 32; SDXL: 77 x 96 + pooled 32) term is
    exactly what encode_prompts keeps per text; a family that cuts its texts to the caption's
    tokens (Qwen-Image) is bounded by it."""
    model = tiny_model(family)
    spec = families.get(family).spec
    cfg = _run(settings, model, family=family).config
    forecast = text_bytes_per_text(spec, model / spec.denoiser, cfg, 4)
    measured = _encoded_bytes(family, model, settings)
    if spec.text_padded:
        assert measured == [forecast, forecast]
    else:
        assert max(measured) < forecast


@pytest.mark.slow
@pytest.mark.parametrize("family", ["z-image", "flux2", "flux2-klein", "chroma", "krea2", "flux-kontext"])
def test_every_familys_texts_bytes_are_the_encoders_tensors(
    family: str, settings: Settings, tiny_model: Callable[[str], Path], shapes: Path
) -> None:
    test_a_texts_bytes_are_the_encoders_tensors(family, settings, tiny_model, shapes)


def test_the_caption_embeddings_are_held_in_every_phase_unless_on_disk(
    settings: Settings, tiny_model: Callable[[str], Path], shapes: Path
) -> None:
    """Every text phase 1 encodes stays in RAM (training/inputs/conditioning.encode_texts moves each to the
    CPU) through the latents and denoiser phases, on a GPU host too; on disk (latent_mode "disk")
    the captions' shards go there. Before, no phase counted them: a real FLUX.1 set of 1,000
    captions holds 8.4 GB of T5 states on CPU (fp32), 4.2 GB on a GPU host (bf16)."""
    model = tiny_model("flux")
    prompts = ["a red circle", "a blue square"]
    run = _run(settings, model, latent_cache="memory", caption_dropout=0.1, sample_prompts=prompts)
    texts = texts_encoded(run.config, run.scan, families.get("flux").spec)
    assert texts == len({it.caption for it in run.scan.items}) + 1 + 2  # captions, "", samples
    per_text = (512 * 32 + 32) * 4  # T5 states + CLIP pooled, fp32 on CPU
    held = texts * per_text / 1e9
    with_texts, without = _forecast(run), host_memory.host_memory_forecast(
        run.config, run.model_dir, plan_for_estimate(run.config, CPU_HOST), CPU_HOST,
        run.scan.bucket_histogram(),
    )  # fmt: skip
    for phase in ("conditioning", "latents", "denoiser"):
        assert with_texts["phases"][phase] - without["phases"][phase] == pytest.approx(held, abs=2e-3)
    gpu = _forecast(run, GPU)
    gpu_without = host_memory.host_memory_forecast(
        run.config, run.model_dir, plan_for_estimate(run.config, GPU), GPU, run.scan.bucket_histogram()
    )
    assert gpu["phases"]["denoiser"] - gpu_without["phases"]["denoiser"] == pytest.approx(held / 2, abs=2e-3)
    disk = _forecast(_run(settings, model, latent_cache="disk", caption_dropout=0.1))
    big = host_memory.host_memory_forecast(
        run.config, run.model_dir, plan_for_estimate(run.config, CPU_HOST), CPU_HOST,
        run.scan.bucket_histogram(), texts=1000,
    )  # fmt: skip
    assert big["phases"]["denoiser"] - without["phases"]["denoiser"] == pytest.approx(
        1000 * per_text / 1e9, abs=2e-3
    )
    assert disk["phases"]["denoiser"] < with_texts["phases"]["denoiser"] - held / 2


def test_a_cut_familys_texts_are_a_bound_and_only_warn_where_they_lead(
    settings: Settings, tiny_model: Callable[[str], Path], shapes: Path
) -> None:
    """Qwen-Image keeps each caption's own tokens: 512 is a bound, so a forecast led by it is not
    `certain` (it warns, never refuses); FLUX.1's padded texts stay certain."""
    qwen, flux = tiny_model("qwen-image"), tiny_model("flux")
    for model, family, certain in ((qwen, "qwen-image", False), (flux, "flux", True)):
        run = _run(settings, model, family=family, latent_cache="memory")
        cfg = run.config
        forecast = host_memory.host_memory_forecast(
            cfg, run.model_dir, plan_for_estimate(cfg, CPU_HOST), CPU_HOST, run.scan.bucket_histogram(),
            texts=100_000,
        )  # fmt: skip
        assert forecast["certain"] is certain, family


@pytest.fixture(scope="module")
def real(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """Header-only pipelines of the released FLUX.1-dev and SDXL configs (real shapes, no weights)."""
    root = tmp_path_factory.mktemp("headers")
    return {"flux": build_flux1(root), "sdxl": build_sdxl(root)}


def _real_forecast(
    folder: Path, family: str, host: HostInfo = CPU_HOST, texts: int = 0, **over: object
) -> dict:
    cfg = TrainConfig(family=family, base_model=str(folder), data_dir="d", resolution=1024, **over)
    plan = plan_for_estimate(cfg, host)
    return host_memory.host_memory_forecast(cfg, folder, plan, host, {"1024x1024": 100}, texts=texts)


def test_real_size_caption_embeddings_and_kept_components(real: dict[str, Path]) -> None:
    """At real size the terms are gigabytes: 1,000 FLUX.1 captions hold 1,000 x (512 x 4096 +
    768) T5 / CLIP states, 8.4 GB in fp32 on CPU, 4.2 GB in bf16 on a GPU host; SDXL's
    train_text_encoder keeps both CLIPs (817 M parameters, 3.3 GB fp32) through the denoiser
    phase; latents encoded per step keep the VAE (84 M) and encode beside the loaded 11.9 B
    FLUX.1 transformer (47.6 GB fp32). Before, none of them was counted."""
    flux, sdxl = real["flux"], real["sdxl"]
    per_text = (512 * 4096 + 768) / 1e9
    for host, size in ((CPU_HOST, 4), (GPU, 2)):
        none = _real_forecast(flux, "flux", host, latent_cache="memory")
        many = _real_forecast(flux, "flux", host, texts=1000, latent_cache="memory")
        for phase in ("conditioning", "latents", "denoiser"):
            assert many["phases"][phase] - none["phases"][phase] == pytest.approx(
                1000 * per_text * size, abs=2e-3
            )
    on_disk = _real_forecast(flux, "flux", texts=1000, latent_cache="disk")
    assert on_disk["phases"] == _real_forecast(flux, "flux", latent_cache="disk")["phases"]
    encoders = (param_count(sdxl / "text_encoder") + param_count(sdxl / "text_encoder_2")) * 4 / 1e9
    assert encoders == pytest.approx(3.27, rel=0.01)
    plain = _real_forecast(sdxl, "sdxl", latent_cache="disk")
    trained = _real_forecast(sdxl, "sdxl", latent_cache="disk", train_text_encoder=True)
    assert trained["phases"]["denoiser"] - plain["phases"]["denoiser"] == pytest.approx(encoders, abs=2e-3)
    cached = _real_forecast(flux, "flux", latent_cache="disk")
    per_step = _real_forecast(flux, "flux", latent_cache="off")
    vae = param_count(flux / "vae") * 4 / 1e9
    assert per_step["phases"]["denoiser"] - cached["phases"]["denoiser"] == pytest.approx(vae, abs=2e-3)
    weights = param_count(flux / "transformer") * 4 / 1e9
    assert per_step["phases"]["latents"] > weights + vae > cached["phases"]["latents"]
