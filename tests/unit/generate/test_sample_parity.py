"""A run's sample previews against generation with the LoRA files it wrote (tiny FLUX.1, CPU):
what training/sample_source.py says renders a preview again (its settings and the run's file
holding the weights it shows, resolved as Generate resolves it) renders the preview's pixels, and
the same request twice the same pixels (RELIABILITY 695); an EMA preview no file keeps is named
so (RELIABILITY 696)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from PIL import Image

from lorastudio.config import parse_train_config
from lorastudio.generate import apply_loras, generate_image
from lorastudio.jobs.generation_inputs import lora_file
from lorastudio.settings import Settings
from lorastudio.training.loop import train
from lorastudio.training.sample_source import sample_source

PROMPT = {"prompt": "a dog", "seed": 5, "width": 48, "height": 32, "guidance": 4.0}


def _run(tiny_model, sample_dataset, tmp_path_factory, name: str, **extra: Any) -> tuple[Settings, dict]:
    """A 2-step FLUX.1 run (`steps` in `extra`: another count) with a snapshot and a preview at
    every step; (its home's settings, its config as the run store keeps it)."""
    raw = {
        "family": "flux",
        "base_model": str(tiny_model("flux")),
        "data_dir": str(sample_dataset),
        "output_name": name,
        "resolution": 32,
        "steps": 2,
        "batch_size": 2,
        "learning_rate": 1e-2,
        "lora_rank": 4,
        "sample_prompts": [PROMPT],
        "sample_every": 1,
        "sample_steps": 2,
        "save_lora_every": 1,
        **extra,
    }
    settings = Settings(home=tmp_path_factory.mktemp(f"{name}-home"))
    cfg = parse_train_config(raw)
    assert train(cfg, [].append, settings=settings, device="cpu").lora_path is not None
    return settings, cfg.model_dump(mode="json")


@pytest.fixture(scope="module")
def dropout_run(
    tiny_model: Callable[[str], Path], sample_dataset: Path, tmp_path_factory
) -> tuple[Settings, dict]:
    return _run(tiny_model, sample_dataset, tmp_path_factory, "parity", lora_dropout=0.5)


@pytest.fixture(scope="module")
def ema_run(
    tiny_model: Callable[[str], Path], sample_dataset: Path, tmp_path_factory
) -> tuple[Settings, dict]:
    """3 steps, a checkpoint after steps 1 and 2 of which keep_last keeps the newest."""
    return _run(
        tiny_model,
        sample_dataset,
        tmp_path_factory,
        "parity-ema",
        ema_decay=0.5,
        steps=3,
        save_every=1,
        keep_last=1,
    )


def _render(
    pipe, settings: Settings, source: dict[str, Any], lora: dict[str, Any] | None = None
) -> np.ndarray:
    """Generate's render of `source`'s settings with the run's file `lora` names (its `lora`)."""
    lora = lora or source["lora"]
    apply_loras(pipe, [(lora_file(settings, lora["name"], lora["step"], lora.get("weights")), 1.0)])
    image = generate_image(
        pipe, "flux", prompt=PROMPT["prompt"], seed=source["seed"], steps=source["steps"],
        width=source["width"], height=source["height"], guidance=source["guidance"],
        max_sequence_length=source["max_sequence_length"],
    )  # fmt: skip
    return np.asarray(image, dtype=np.int16)


def _preview(settings: Settings, name: str, step: int) -> np.ndarray:
    path = settings.outputs_dir / name / f"samples/step-{step:06d}-0.png"
    return np.asarray(Image.open(path), dtype=np.int16)


def test_a_lora_trained_with_dropout_renders_its_previews_and_the_same_pixels_twice(flux_pipe, dropout_run):
    """peft injected the LoRA's dropout in train mode into the eval-mode pipeline: each render
    dropped a random half of the LoRA (the global RNG, not the seed), so the same request gave
    other pixels and neither matched the preview."""
    settings, config = dropout_run
    run_dir = settings.outputs_dir / "parity"
    for step in (1, 2):
        source = sample_source(config, run_dir, step, 0)
        assert source["lora"] == {"name": "parity", "step": step} and source["note"] is None, source
        assert (source["seed"], source["width"], source["height"], source["steps"]) == (5, 48, 32, 2)
        first = _render(flux_pipe, settings, source)
        np.testing.assert_array_equal(first, _preview(settings, "parity", step))
        np.testing.assert_array_equal(_render(flux_pipe, settings, source), first)
    apply_loras(flux_pipe, [])


def test_an_ema_runs_previews_name_the_file_that_renders_them_or_that_none_does(flux_pipe, ema_run):
    """An EMA run's preview of step N shows the EMA weights of step N; its snapshot holds the raw
    ones. Each checkpoint now keeps the EMA weights of its step as a LoRA file (RELIABILITY 812;
    before, no file kept them before the last step), removed with it by keep_last."""
    settings, config = ema_run
    run_dir = settings.outputs_dir / "parity-ema"
    last = sample_source(config, run_dir, 3, 0)
    assert last["weights"] == "ema" and last["lora"] == {"name": "parity-ema", "step": None}
    assert last["note"] is None
    np.testing.assert_array_equal(_render(flux_pipe, settings, last), _preview(settings, "parity-ema", 3))
    kept = sample_source(config, run_dir, 2, 0)  # its checkpoint's EMA file renders it
    assert kept["lora"] == {"name": "parity-ema", "step": 2, "weights": "ema"} and kept["note"] is None, kept
    np.testing.assert_array_equal(_render(flux_pipe, settings, kept), _preview(settings, "parity-ema", 2))
    first = sample_source(config, run_dir, 1, 0)  # keep_last = 1 removed step 1's checkpoint with its file
    assert first["weights"] == "ema" and first["lora"] is None
    assert "EMA weights of step 1, which no file keeps" in first["note"]
    snapshot = _render(flux_pipe, settings, first, {"name": "parity-ema", "step": 1})  # its raw weights
    assert np.abs(snapshot - _preview(settings, "parity-ema", 1)).max() > 0  # not the preview, as said
    raw = sample_source({**config, "sample_with_ema": False}, run_dir, 1, 0)
    assert raw["weights"] == "raw" and raw["lora"] == {"name": "parity-ema", "step": 1}
    apply_loras(flux_pipe, [])


def test_an_ema_previews_note_offers_a_file_of_its_step_only_where_one_is_kept(
    flux_pipe, tiny_model, sample_dataset, tmp_path_factory
):
    """Session 30 (RELIABILITY 862): the note of an EMA preview no file keeps sent the user to
    "the step's snapshot" of a step that had none (only sample_every fell on it). Session 37
    (RELIABILITY 1492): the newest preview of a step no checkpoint keeps has its EMA weights kept
    in samples/ (one pair: each such round replaces the previous), so it renders again. 6 steps,
    checkpoints after steps 2 and 4, snapshots after steps 3 and 6: step 1 has no file at all,
    step 3 its raw snapshot (named, and it renders the raw weights, not the preview), step 2 its
    checkpoint's EMA file, step 5 the kept preview EMA file (its pixels), step 6 the final LoRA."""
    from lorastudio.lora.snapshots import raw_lora_at

    extra = {"ema_decay": 0.5, "steps": 6, "save_every": 2, "save_lora_every": 3}
    settings, config = _run(tiny_model, sample_dataset, tmp_path_factory, "gap-ema", **extra)
    run_dir = settings.outputs_dir / "gap-ema"
    bare = sample_source(config, run_dir, 1, 0)
    assert bare["weights"] == "ema" and bare["lora"] is None and raw_lora_at(run_dir, 1) is None
    assert "EMA weights of step 1, which no file keeps" in bare["note"]
    assert "no LoRA file of step 1 is kept either" in bare["note"] and "snapshot renders" not in bare["note"]
    snapshot = sample_source(config, run_dir, 3, 0)
    assert snapshot["lora"] is None and raw_lora_at(run_dir, 3) is not None
    assert (
        'the LoRA of step 3 (Generate\'s {"name": "gap-ema", "step": 3}) holds its raw weights'
        in snapshot["note"]
    )
    named = _render(flux_pipe, settings, snapshot, {"name": "gap-ema", "step": 3})
    assert np.abs(named - _preview(settings, "gap-ema", 3)).max() > 0  # the raw weights, as said
    kept = sample_source(config, run_dir, 2, 0)
    assert kept["lora"] == {"name": "gap-ema", "step": 2, "weights": "ema"} and kept["note"] is None
    newest = sample_source(config, run_dir, 5, 0)  # no checkpoint: the kept preview EMA file
    assert newest["lora"] == {"name": "gap-ema", "step": 5, "weights": "ema"} and newest["note"] is None
    np.testing.assert_array_equal(_render(flux_pipe, settings, newest), _preview(settings, "gap-ema", 5))
    kept_files = sorted(p.name for p in (run_dir / "samples").iterdir() if not p.name.endswith(".png"))
    assert kept_files == ["gap-ema-step-000005.ema.json", "gap-ema-step-000005.ema.safetensors"]  # one pair
    assert sample_source(config, run_dir, 6, 0)["lora"] == {"name": "gap-ema", "step": None}
    apply_loras(flux_pipe, [])


def test_an_ema_checkpoints_file_is_a_loadable_lora_with_the_final_files_facts(ema_run):
    """The EMA file of step 2 lies in that step's checkpoint, with the final file's header and
    sidecar (its own step), and is listed as that step's EMA file; step 1's went with its checkpoint."""
    import json
    from datetime import datetime

    from safetensors import safe_open

    from lorastudio.lora.snapshots import run_loras

    settings, _ = ema_run
    run_dir = settings.outputs_dir / "parity-ema"
    path = run_dir / "checkpoints" / "step-000002" / "parity-ema-step-000002.ema.safetensors"
    assert sorted(p.name for p in (run_dir / "checkpoints").iterdir()) == ["step-000002"]
    step, final = (
        json.loads(p.with_suffix(".json").read_text()) for p in (path, run_dir / "parity-ema.safetensors")
    )
    assert (step["steps"], step["ema"]["weights"], step["snapshot"]) == (2, "ema", True)
    assert step["lora_file"] == "checkpoints/step-000002/parity-ema-step-000002.ema.safetensors"
    # created_at is each file's write time (the step's file is written at step 2, the final one
    # after the last step: a second apart or not), so it is compared by order, not equality
    assert datetime.fromisoformat(step["created_at"]) <= datetime.fromisoformat(final["created_at"])
    same = {k for k in final if k not in ("steps", "lora_file", "ema", "validation", "stopped", "created_at")}
    assert {k: step[k] for k in same} == {k: final[k] for k in same}
    with safe_open(str(path), "pt") as f, safe_open(str(run_dir / "parity-ema.safetensors"), "pt") as g:
        assert set(f.keys()) == set(g.keys())
        header, final_header = f.metadata(), g.metadata()
    assert set(header) == set(final_header)
    assert not list((run_dir / "samples").glob("*.ema.*"))  # every preview's step had a checkpoint
    rows = [(r["step"], r["weights"], r["final"]) for r in run_loras(run_dir)]
    assert rows == [
        (1, "raw", False),
        (2, "raw", False),
        (2, "ema", False),
        (3, "raw", True),
        (3, "ema", True),
    ]


def test_the_listing_names_the_family_defaults_by_number(tmp_path):
    config = {"resolution": [32, 64], "sample_seed": 3, "sample_prompts": ["a"], "max_sequence_length": 16}
    source = sample_source(config, tmp_path / "gone", 4, 0)
    assert (source["seed"], source["width"], source["height"], source["steps"]) == (3, 64, 64, None)
    # the family's defaults by number (Generate's own default is 20 steps): FLUX.1 dev's 28 and 3.5
    flux = sample_source({**config, "family": "flux", "base_model": "not/here"}, tmp_path, 4, 0)
    assert (flux["steps"], flux["guidance"]) == (28, 3.5)
    assert source["lora"] is None and source["note"] == "the run has no output folder"


def test_a_run_read_to_other_than_generations_text_tokens_renders_again_at_its_length(
    flux_pipe, tiny_model, sample_dataset, tmp_path_factory
):
    """A run at max_sequence_length 16 previews its prompt read to 16 tokens; Generate read 512
    only (6 levels off on the tiny FLUX.1), so nothing rendered such a preview again (RELIABILITY 810)."""
    settings, config = _run(
        tiny_model, sample_dataset, tmp_path_factory, "parity-tokens", max_sequence_length=16
    )
    run_dir = settings.outputs_dir / "parity-tokens"
    source = sample_source(config, run_dir, 1, 0)
    assert source["max_sequence_length"] == 16 and source["note"] is None, source
    assert source["lora"] == {"name": "parity-tokens", "step": 1}
    np.testing.assert_array_equal(
        _render(flux_pipe, settings, source), _preview(settings, "parity-tokens", 1)
    )
    at_512 = _render(flux_pipe, settings, {**source, "max_sequence_length": None})  # the pipeline's default
    assert np.abs(at_512 - _preview(settings, "parity-tokens", 1)).max() > 0  # the length matters here
    apply_loras(flux_pipe, [])


@pytest.fixture(scope="module")
def sdxl_run(
    tiny_model: Callable[[str], Path], sample_dataset: Path, tmp_path_factory
) -> tuple[Settings, dict]:
    """A 1-step SDXL run previewing two prompts (encoded together before RELIABILITY 697)."""
    raw = {
        "family": "sdxl",
        "base_model": str(tiny_model("sdxl")),
        "data_dir": str(sample_dataset),
        "output_name": "parity-sdxl",
        "resolution": 64,
        "steps": 1,
        "batch_size": 2,
        "learning_rate": 1e-2,
        "lora_rank": 4,
        "sample_prompts": ["a red circle", {**PROMPT, "width": 64, "height": 64}],
        "sample_steps": 3,
        "sample_seed": 11,
    }
    settings = Settings(home=tmp_path_factory.mktemp("parity-sdxl-home"))
    cfg = parse_train_config(raw)
    assert train(cfg, [].append, settings=settings, device="cpu").lora_path is not None
    return settings, cfg.model_dump(mode="json")


def test_sdxl_previews_are_generates_pixels(tiny_model, sdxl_run):
    """Phase 1 encoded the sample prompts in one batch, Generate its one prompt alone: SDXL's
    pooled projection rounds otherwise in a batch (5e-7), one 8-bit level of the preview off."""
    from lorastudio.generate import load_pipeline

    settings, config = sdxl_run
    pipe = load_pipeline(str(tiny_model("sdxl")), "sdxl", device="cpu")
    for index, prompt in enumerate(["a red circle", PROMPT["prompt"]]):
        source = sample_source(config, settings.outputs_dir / "parity-sdxl", 1, index)
        assert source["lora"] == {"name": "parity-sdxl", "step": 1} and source["note"] is None
        apply_loras(pipe, [(lora_file(settings, "parity-sdxl", 1), 1.0)])
        image = generate_image(
            pipe, "sdxl", prompt=prompt, seed=source["seed"], steps=source["steps"], width=source["width"],
            height=source["height"], guidance=source["guidance"],
        )  # fmt: skip
        preview = settings.outputs_dir / "parity-sdxl" / f"samples/step-000001-{index}.png"
        np.testing.assert_array_equal(np.asarray(image), np.asarray(Image.open(preview)))


def test_a_z_image_preview_with_its_own_guidance_renders_and_is_generates_pixels(
    tiny_model, sample_dataset, tmp_path
):
    """Z-Image's default guidance (0) runs no CFG, so phase 1 encoded no "" for its previews: a
    sample prompt with its own guidance above 0 made ZImagePipeline refuse the preview's
    prompt_embeds without negative ones (ValueError): a run failed at its first sample round,
    its final round (here) was a warning and no preview (RELIABILITY 699)."""
    from lorastudio.generate import load_pipeline

    raw = {"family": "z-image", "base_model": str(tiny_model("z-image")), "data_dir": str(sample_dataset),
           "output_name": "parity-z", "resolution": 32, "steps": 1, "batch_size": 2, "lora_rank": 4,
           "learning_rate": 1e-2, "sample_prompts": ["a red circle", PROMPT], "sample_steps": 2}  # fmt: skip
    settings = Settings(home=tmp_path)
    cfg = parse_train_config(raw)
    assert train(cfg, [].append, settings=settings, device="cpu").lora_path is not None
    pipe = load_pipeline(str(tiny_model("z-image")), "z-image", device="cpu")
    apply_loras(pipe, [(lora_file(settings, "parity-z", 1), 1.0)])
    for index, prompt in enumerate(["a red circle", PROMPT["prompt"]]):
        source = sample_source(cfg.model_dump(mode="json"), settings.outputs_dir / "parity-z", 1, index)
        image = generate_image(
            pipe, "z-image", prompt=prompt, seed=source["seed"], steps=source["steps"], width=source["width"],
            height=source["height"], guidance=source["guidance"],
        )  # fmt: skip
        preview = settings.outputs_dir / "parity-z" / f"samples/step-000001-{index}.png"
        np.testing.assert_array_equal(np.asarray(image), np.asarray(Image.open(preview)))


def test_an_edit_preview_whose_references_the_run_sized_is_named(tmp_path):
    """An edit family's preview sizes its references as the run trains them (control_resolution
    "pipeline", the default), Generate fits a reference to the output size: FLUX.1 Kontext's tiny
    preview was 21 levels off Generate's render of its kept reference."""
    config = {"resolution": 32, "sample_prompts": ["make it blue"], "control_resolution": "pipeline"}
    said = sample_source(config, tmp_path, 1, 0, references=True)["note"]
    assert "references were sized as the run trains them (control_resolution 'pipeline')" in said
    target = sample_source({**config, "control_resolution": "target"}, tmp_path, 1, 0, references=True)
    assert "references" not in target["note"]
    assert "references" not in sample_source(config, tmp_path, 1, 0)["note"]  # a text-to-image preview
    # Qwen-Image-Edit's previews encode their references at the run's size, Generate's pipeline at
    # ~1 MP: named under every rule (RELIABILITY 1490)
    qwen = sample_source(
        {**config, "family": "qwen-image-edit", "control_resolution": "target"}, tmp_path, 1, 0, True
    )
    assert (
        "(control_resolution 'target'), where Generate fits a reference to the output size and its "
        in qwen["note"]
    )
