"""A run started from a LoRA file (TrainConfig.init_lora, training/adapters/init_lora.py) on the tiny
models: the adapter holds the file's weights exactly at the start (every family; a kohya file;
the denoiser's layers as generation applies the file at strength 1), EMA starts from them, the
loss continues from the file's level, layers the file lacks start fresh with a warning, layers
the targets miss are refused before any model loads, per-layer ranks become the run's
rank_pattern, and a resume needs the file no more (its name and sha256 stay recorded)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from safetensors import safe_open
from safetensors.torch import load_file

from lorastudio import families
from lorastudio.errors import ConfigError
from lorastudio.settings import get_settings
from lorastudio.tiny import TINY_FAMILIES
from lorastudio.training.adapters.init_lora_rules import file_sha256
from lorastudio.training.events import RunWarning, StopRequest
from lorastudio.training.loop import train

TINY_LR = 1e-12  # a step that moves no fp32 weight of the file's size: the saved LoRA is the file


def _trained(make_config, family: str, name: str, **settings: object) -> Path:
    """The LoRA file of a 1-step run (its lora_B no longer zero), alpha 8 at rank 4."""
    cfg = make_config(family, steps=1, lora_alpha=8.0, output_name=name, **settings)
    return train(cfg, [].append, device="cpu").lora_path


def _close(a: dict[str, torch.Tensor], b: dict[str, torch.Tensor]) -> None:
    assert a.keys() == b.keys() and a
    for key in a:
        torch.testing.assert_close(b[key], a[key], rtol=1e-6, atol=1e-9, msg=key)


@pytest.mark.parametrize("family", TINY_FAMILIES)
def test_a_run_starts_from_the_files_weights_exactly(make_config, family):
    first = _trained(make_config, family, "first")
    events: list = []
    cfg = make_config(
        family, steps=1, learning_rate=TINY_LR, lora_rank=None, output_name="again", init_lora=str(first)
    )
    again = train(cfg, events.append, device="cpu")
    _close(load_file(str(first)), load_file(str(again.lora_path)))
    sidecar = json.loads(again.lora_path.with_suffix(".json").read_text())
    assert (sidecar["rank"], sidecar["alpha"]) == (4, 8.0)  # the file's, lora_rank unset
    assert sidecar["init_lora"] == {"file": "first.safetensors", "sha256": file_sha256(first)}
    with safe_open(str(again.lora_path), framework="pt") as f:
        header = f.metadata()
    assert header["lorastudio.init_lora"] == "first.safetensors"
    assert header["lorastudio.init_lora_sha256"] == file_sha256(first)
    assert not [e for e in events if isinstance(e, RunWarning)]  # every layer was in the file


def test_a_kohya_file_and_a_name_of_the_list_load_and_ema_starts_from_them(make_config):
    first = _trained(make_config, "flux", "kohya", lora_format="kohya")
    assert any(k.startswith("lora_unet_") for k in load_file(str(first)))
    cfg = make_config(
        steps=1, learning_rate=TINY_LR, output_name="from-kohya", init_lora="kohya", ema_decay=0.5
    )
    again = train(cfg, [].append, device="cpu")
    ours = load_file(str(again.lora_path))  # the EMA's weights (diffusers layout), the file's
    _close(ours, load_file(str(again.lora_path.with_name("from-kohya.raw.safetensors"))))
    back = train(
        make_config(
            steps=1,
            learning_rate=TINY_LR,
            output_name="back",
            lora_format="kohya",
            init_lora=str(again.lora_path),
        ),
        [].append,
        device="cpu",
    )
    _close(load_file(str(first)), load_file(str(back.lora_path)))  # kohya -> diffusers -> kohya


def test_the_loaded_adapter_is_generations_file_at_strength_1(make_config, tiny_model):
    from lorastudio.generate.pipeline import apply_loras, load_pipeline
    from lorastudio.training.adapters.init_lora import InitSource, load_init_lora
    from lorastudio.training.adapters.lora import add_lora, lora_config_for

    first = _trained(make_config, "flux", "gen")
    family = families.get("flux")
    denoiser = family.load_denoiser(str(tiny_model("flux")), None, torch.float32, torch.device("cpu"))
    add_lora(denoiser, lora_config_for(make_config(lora_alpha=8.0), family.spec.lora_targets))
    load = load_init_lora(denoiser, InitSource(first, file_sha256(first)), "flux")
    assert load.fresh == () and load.loaded > 0
    pipe = load_pipeline(str(tiny_model("flux")), "flux", dtype=torch.float32, device="cpu")
    apply_loras(pipe, [(first, 1.0)])
    theirs = dict(pipe.transformer.named_modules())
    g = torch.Generator().manual_seed(0)
    checked = 0
    for name, module in denoiser.named_modules():
        if hasattr(module, "lora_A") and "default" in getattr(module, "lora_A", {}):
            x = torch.randn(3, module.in_features, generator=g)  # [3, in]
            torch.testing.assert_close(module(x), theirs[name](x), rtol=1e-5, atol=1e-6, msg=name)
            checked += 1
    assert checked == load.loaded


def test_the_loss_continues_from_the_files_level(make_config):
    settings = {"learning_rate": 1e-1, "seed": 3, "lora_rank": 8}
    trained = train(make_config(steps=20, output_name="long", **settings), [].append, device="cpu")
    fresh = train(make_config(steps=1, output_name="fresh", **settings), [].append, device="cpu")
    cont = train(
        make_config(steps=1, output_name="cont", init_lora=str(trained.lora_path), **settings),
        [].append,
        device="cpu",
    )
    assert fresh.losses[0] == trained.losses[0]  # the same seed: the same first sample, noise and time
    late = sum(trained.losses[-5:]) / 5  # where the first run ended (1.25 vs 1.33 at its start)
    assert late < 0.97 * fresh.losses[0], trained.losses
    # on that same first sample the run from the file starts below where the first run ended
    assert cont.losses[0] < min(late, 0.9 * fresh.losses[0]), (cont.losses, fresh.losses, late)


def test_layers_the_file_lacks_start_fresh_and_are_counted(make_config):
    first = _trained(make_config, "flux", "q-only", lora_targets=["to_q"])
    events: list = []
    cfg = make_config(steps=1, learning_rate=TINY_LR, output_name="wider", init_lora=str(first))
    wider = train(cfg, events.append, device="cpu")
    warnings = [e.message for e in events if isinstance(e, RunWarning)]
    assert len(warnings) == 1 and "not in the file and start fresh" in warnings[0], warnings
    ours, theirs = load_file(str(wider.lora_path)), load_file(str(first))
    _close(theirs, {k: v for k, v in ours.items() if k in theirs})
    assert all(float(v.abs().max()) < 1e-9 for k, v in ours.items() if k not in theirs and "lora_B" in k)


def test_layers_outside_the_targets_are_refused_before_any_model_loads(make_config):
    first = _trained(make_config, "flux", "all")
    events: list = []
    cfg = make_config(steps=1, output_name="narrow", lora_targets=["to_q"], init_lora=str(first))
    with pytest.raises(ConfigError) as err:
        train(cfg, events.append, device="cpu")
    problem = next(p for p in err.value.problems if p.field == "init_lora")
    assert "do not adapt" in problem.message and "to_k" in problem.message, problem
    assert not [e for e in events if getattr(e, "type", "") == "model_load_started"]
    assert not (get_settings().outputs_dir / "narrow").exists()


def test_per_layer_ranks_become_the_runs_rank_pattern(make_config):
    first = _trained(make_config, "flux", "mixed", rank_pattern={"to_k": 2})
    cfg = make_config(
        steps=1, learning_rate=TINY_LR, lora_rank=None, output_name="mixed-again", init_lora=str(first)
    )
    again = train(cfg, [].append, device="cpu")
    _close(load_file(str(first)), load_file(str(again.lora_path)))
    sidecar = json.loads(again.lora_path.with_suffix(".json").read_text())
    pattern = sidecar["config"]["rank_pattern"]
    assert sidecar["rank"] == 4 and set(pattern.values()) == {2} and all("to_k" in k for k in pattern)
    # train again: the recorded config sends the file's ranks explicitly, and is accepted
    recorded = {k: sidecar["config"][k] for k in ("lora_rank", "lora_alpha", "rank_pattern")}
    third = train(
        make_config(steps=1, learning_rate=TINY_LR, output_name="third", init_lora=str(first), **recorded),
        [].append,
        device="cpu",
    )
    _close(load_file(str(first)), load_file(str(third.lora_path)))
    with pytest.raises(ConfigError) as err:  # ranks of its own: refused, naming the field
        train(
            make_config(steps=1, output_name="fourth", init_lora=str(first), rank_pattern={"to_q": 2}),
            [].append,
        )
    assert [p.field for p in err.value.problems] == ["rank_pattern"]


def _stop_at(step: int):
    events: list = []

    def stop() -> StopRequest | None:
        done = sum(1 for e in events if getattr(e, "type", "") == "progress")
        return StopRequest(save=True) if done >= step else None

    return events, stop


def test_a_resume_needs_the_init_file_no_more(make_config, tmp_path):
    first = _trained(make_config, "flux", "source")
    moved = tmp_path / "source.safetensors"
    moved.write_bytes(first.read_bytes())
    digest = file_sha256(moved)
    settings = {"steps": 3, "learning_rate": 1e-3, "lora_rank": None, "init_lora": str(moved)}
    full = train(make_config(output_name="full", **settings), [].append, device="cpu")
    events, stop = _stop_at(1)
    part = train(make_config(output_name="part", **settings), events.append, stop, device="cpu")
    assert part.stopped and part.steps_run == 1
    moved.unlink()  # the run's state is in its checkpoint
    run_dir = get_settings().outputs_dir / "part"
    resumed = train(make_config(output_name="part", **settings), [].append, device="cpu", resume=run_dir)
    assert resumed.losses == full.losses
    _close(load_file(str(full.lora_path)), load_file(str(resumed.lora_path)))
    sidecar = json.loads(resumed.lora_path.with_suffix(".json").read_text())
    assert sidecar["init_lora"] == {"file": "source.safetensors", "sha256": digest}


def test_an_sdxl_files_text_encoder_layers_start_its_text_encoder_lora(make_config):
    first = _trained(make_config, "sdxl", "te", train_text_encoder=True)
    assert any(k.startswith("lora_te1_") for k in load_file(str(first)))  # SDXL's kohya layout
    with pytest.raises(ConfigError) as err:  # without train_text_encoder they would be dropped
        train(
            make_config("sdxl", steps=1, output_name="no-te", init_lora=str(first)), [].append, device="cpu"
        )
    assert "set train_text_encoder = true" in str(err.value)
    events: list = []
    cfg = make_config(
        "sdxl",
        steps=1,
        learning_rate=TINY_LR,
        output_name="te-again",
        init_lora=str(first),
        train_text_encoder=True,
    )
    again = train(cfg, events.append, device="cpu")
    _close(load_file(str(first)), load_file(str(again.lora_path)))  # U-Net and both CLIP encoders
    assert not [e for e in events if isinstance(e, RunWarning)]


@pytest.mark.parametrize(("adapter", "options"), [("lokr", {"lokr_factor": 2}), ("loha", {}), ("dora", {})])
def test_a_loha_lokr_or_dora_file_starts_a_run_of_its_adapter(make_config, adapter, options):
    first = _trained(make_config, "flux", adapter, adapter=adapter, **options)
    keys = list(load_file(str(first)))
    if adapter == "dora":  # FLUX.1's diffusers layout: lora_A / lora_B and peft's magnitude per layer
        assert any(k.endswith(".lora_magnitude_vector") for k in keys)
    else:
        assert any(k.startswith("lycoris_") for k in keys)  # the LyCORIS layout
    cfg = make_config(
        steps=1, learning_rate=TINY_LR, lora_rank=None, output_name=f"{adapter}-again", init_lora=str(first),
        adapter=adapter, **options,
    )  # fmt: skip
    again = train(cfg, [].append, device="cpu")
    _close(load_file(str(first)), load_file(str(again.lora_path)))
    with pytest.raises(ConfigError) as err:  # a LoRA run from it: which adapter to set
        train(make_config(steps=1, output_name="as-lora", init_lora=str(first)), [].append, device="cpu")
    assert f"set adapter = '{adapter}'" in str(err.value)


def test_a_name_is_read_in_the_runs_own_studio_home(make_config, tmp_path):
    """train(settings=...) of another home than the process's: the file's rank is that home's file's."""
    import shutil

    from lorastudio.settings import Settings

    first = _trained(make_config, "flux", "elsewhere", lora_rank=8)
    other = Settings(home=tmp_path / "other-home").ensure_dirs()
    shutil.move(str(first.parent), str(other.outputs_dir / "elsewhere"))
    cfg = make_config(
        steps=1, learning_rate=TINY_LR, lora_rank=None, output_name="there", init_lora="elsewhere"
    )
    again = train(cfg, [].append, device="cpu", settings=other)
    assert json.loads(again.lora_path.with_suffix(".json").read_text())["rank"] == 8  # not the family's 16
    _close(
        load_file(str(other.outputs_dir / "elsewhere" / "elsewhere.safetensors")),
        load_file(str(again.lora_path)),
    )
