"""SDXL text-encoder LoRA (train_text_encoder, text_encoder_lr; training/adapters/text_encoders.py): both
CLIP encoders train (captions encoded in every step, the first step's loss that of the caption
cache), saved in the kohya layout (lora_te1_ / lora_te2_ with .alpha) and the diffusers layout
(text_encoder. / text_encoder_2.), both passing the save-time check; the diffusers file loads in
plain diffusers onto both encoders and gives the in-memory image; a stopped run resumes bitwise;
refused for the other families and for what it cannot run with."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch
from PIL import Image
from safetensors.torch import load_file

from lorastudio import families
from lorastudio.config import parse_train_config
from lorastudio.errors import ConfigError
from lorastudio.generate import apply_loras, generate_image, load_pipeline
from lorastudio.settings import get_settings
from lorastudio.training.events import StopRequest
from lorastudio.training.loop import train

TE = {"family": "sdxl", "train_text_encoder": True, "steps": 3, "learning_rate": 5e-2}


def _te_keys(tensors: dict[str, torch.Tensor]) -> dict[str, list[str]]:
    return {
        p: sorted(k for k in tensors if k.startswith(p))
        for p in ("lora_te1_", "lora_te2_", "text_encoder.", "text_encoder_2.")
    }


def test_both_text_encoders_train_and_the_kohya_file_holds_them(make_config):
    events: list = []
    result = train(make_config(output_name="te", **TE), events.append, device="cpu")
    plain = train(
        make_config(output_name="plain", **{**TE, "train_text_encoder": False}), [].append, device="cpu"
    )
    # the step's encoding of the untrained encoders is the caption cache's: same first loss
    assert result.losses[0] == pytest.approx(plain.losses[0], rel=1e-5)
    assert result.losses[1:] != plain.losses[1:]
    assert not any(e.type == "preparing" and e.phase == "conditioning" for e in events)  # no caption cache
    tensors = load_file(str(result.lora_path))
    keys = _te_keys(tensors)
    assert keys["lora_te1_"] and keys["lora_te2_"] and not keys["text_encoder."]
    for prefix in ("lora_te1_", "lora_te2_"):
        names = {k.rsplit(".", 2)[0] if k.endswith(".weight") else k.rsplit(".", 1)[0] for k in keys[prefix]}
        assert all(f"{n}.alpha" in tensors and f"{n}.lora_up.weight" in tensors for n in names)
        assert all(n.startswith(prefix + "text_model_encoder_layers_") for n in names)
        moved = max(float(tensors[f"{n}.lora_up.weight"].abs().max()) for n in names)
        assert moved > 1e-4, prefix  # each encoder's LoRA trained away from its zero init
    sidecar = json.loads(result.lora_path.with_suffix(".json").read_text())
    loaders = sidecar["loaders"]
    assert loaders["comfyui"]["ok"] and loaders["diffusers"]["ok"] and loaders["a1111_forge"]["ok"], loaders
    # this file's kind went through ComfyUI's own loader, CLIPs included (bench/comfyui_te_check.py)
    assert loaders["comfyui"]["loader_checked"].startswith("ComfyUI v0.19.3 (3086026"), loaders["comfyui"]
    assert loaders["diffusers"]["loaded"] > len([k for k in tensors if k.startswith("lora_unet_")]) * 2 // 3
    pipe = load_pipeline(str(make_config(**TE).base_model), "sdxl", device="cpu")
    ids = pipe.tokenizer_2(
        ["a red circle"], padding="max_length", max_length=77, return_tensors="pt"
    ).input_ids
    before = pipe.text_encoder_2(ids, output_hidden_states=True).hidden_states[-2]
    apply_loras(pipe, [(result.lora_path, 1.0)])  # generation's loader reads the kohya names too
    after = pipe.text_encoder_2(ids, output_hidden_states=True).hidden_states[-2]
    assert float((after - before).detach().abs().max()) > 1e-3


def test_previews_render_with_the_live_text_encoder_lora(make_config):
    events: list = []
    cfg = make_config(  # 2-step previews (sdxl's default: 30): each round still reads the live LoRA
        output_name="te-s", sample_prompts=["a red circle"], sample_every=1, sample_steps=2, **TE
    )
    train(cfg, events.append, device="cpu")
    rounds = [e for e in events if e.type == "sample_ready"]
    assert [r.step for r in rounds] == [1, 2, 3]
    run_dir = get_settings().outputs_dir / "te-s"
    first, last = (
        np.asarray(Image.open(run_dir / r.images[0]), dtype=np.float32) for r in (rounds[0], rounds[-1])
    )
    assert np.abs(first - last).mean() > 0.5  # the previews follow the training


def test_text_encoder_lr_sets_their_own_step_size(make_config):
    fast = train(make_config(output_name="fast", **TE), [].append, device="cpu")
    slow = train(make_config(output_name="slow", text_encoder_lr=1e-6, **TE), [].append, device="cpu")
    a, b = load_file(str(fast.lora_path)), load_file(str(slow.lora_path))
    te_size = {
        f: max(float(t[k].abs().max()) for k in t if k.startswith("lora_te") and "lora_up" in k)
        for f, t in (("fast", a), ("slow", b))
    }
    assert te_size["slow"] < te_size["fast"] / 100  # the encoders barely moved at 1e-6
    unet = [k for k in a if k.startswith("lora_unet_") and "lora_up" in k]
    assert max(float(b[k].abs().max()) for k in unet) > 1e-3  # the U-Net still trained at 5e-2


def _image(pipe) -> np.ndarray:
    img = generate_image(
        pipe, "sdxl", prompt="a red circle", seed=0, steps=2, width=64, height=64, extra=None
    )
    return np.asarray(img, dtype=np.float32)


def test_the_diffusers_file_loads_onto_both_encoders_and_gives_the_in_memory_image(make_config, tiny_model):
    cfg = make_config(output_name="te-d", lora_format="diffusers", resolution=64, **TE)
    result = train(cfg, [].append, device="cpu", return_denoiser=True)
    tensors = load_file(str(result.lora_path))
    keys = _te_keys(tensors)
    assert keys["text_encoder."] and keys["text_encoder_2."] and not keys["lora_te1_"]
    assert all(".text_model.encoder.layers." in k for k in keys["text_encoder."] + keys["text_encoder_2."])
    sidecar = json.loads(result.lora_path.with_suffix(".json").read_text())
    comfy = sidecar["loaders"]["comfyui"]
    assert sidecar["loaders"]["diffusers"]["ok"], sidecar["loaders"]
    # ComfyUI reads SDXL's diffusers U-Net keys only in the old processor spelling (the reason
    # SDXL's default layout is kohya); it reads the text encoders' diffusers keys
    assert comfy["unconsumed"] and all(k.startswith("unet.") for k in comfy["unconsumed"])
    assert not comfy["mismatched"] and not comfy["wrong_strength"]
    base_pipe = load_pipeline(str(tiny_model("sdxl")), "sdxl", device="cpu")
    base = _image(base_pipe)
    ids = base_pipe.tokenizer(
        ["a red circle"], padding="max_length", max_length=77, return_tensors="pt"
    ).input_ids
    before = base_pipe.text_encoder(ids, output_hidden_states=True).hidden_states[-2]
    apply_loras(base_pipe, [(result.lora_path, 1.0)])  # the studio's generation: load_lora_weights
    after = base_pipe.text_encoder(ids, output_hidden_states=True).hidden_states[-2]
    assert float((after - before).detach().abs().max()) > 1e-3  # the text encoder's LoRA is applied
    from_file = _image(base_pipe)
    memory = load_pipeline(str(tiny_model("sdxl")), "sdxl", device="cpu")
    memory.unet = result.denoiser
    for name, module in result.text_encoders.modules.items():
        setattr(memory, name, module.eval())
    in_memory = _image(memory)
    assert np.abs(in_memory - base).mean() > 0.5  # the LoRA visibly changes the image
    assert np.abs(from_file - in_memory).max() <= 1.0


def test_stop_and_resume_is_bitwise_with_the_text_encoders(make_config):
    settings = {**TE, "steps": 4, "caption_dropout": 0.3, "ema_decay": 0.5}
    full = train(make_config(output_name="full", **settings), [].append, device="cpu")
    events: list = []

    def stop() -> StopRequest | None:
        done = [e for e in events if e.type == "progress"]
        return StopRequest(save=True) if done and done[-1].step >= 2 else None

    first = train(make_config(output_name="part", **settings), events.append, stop, device="cpu")
    assert first.stopped and first.losses == full.losses[:2]
    run_dir = get_settings().outputs_dir / "part"
    assert (next((run_dir / "checkpoints").iterdir()) / "text_encoders.safetensors").is_file()
    resumed = train(make_config(output_name="part", **settings), [].append, device="cpu", resume=run_dir)
    assert resumed.losses == full.losses and len(set(full.losses)) == 4
    for suffix in (".safetensors", ".raw.safetensors"):  # the EMA LoRA and the raw one
        a = load_file(str(full.lora_path).replace(".safetensors", suffix))
        b = load_file(str(resumed.lora_path).replace(".safetensors", suffix))
        assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)
        assert _te_keys(a)["lora_te2_"]


def test_refused_for_other_families_and_what_it_cannot_run_with():
    base = {"base_model": "a/b", "data_dir": "d"}
    for family in families.names():
        if family == "sdxl":
            continue
        with pytest.raises(ConfigError) as err:
            parse_train_config({**base, "family": family, "train_text_encoder": True})
        (problem,) = err.value.problems
        assert problem.field == "train_text_encoder" and "SDXL's two CLIP encoders" in problem.message
    sdxl = {**base, "family": "sdxl"}
    with pytest.raises(ConfigError, match="needs train_text_encoder"):
        parse_train_config({**sdxl, "text_encoder_lr": 1e-5})
    with pytest.raises(ConfigError) as err:
        parse_train_config(
            {**sdxl, "train_text_encoder": True, "adapter": "loha", "batch_size": 2, "micro_batch_size": 1}
        )
    assert {p.field for p in err.value.problems} == {"train_text_encoder", "micro_batch_size"}
    with pytest.raises(ConfigError, match="num_gpus"):
        parse_train_config({**sdxl, "train_text_encoder": True, "num_gpus": 2})
    with pytest.raises(ConfigError, match="validation_split: the validation loss encodes its captions once"):
        parse_train_config({**sdxl, "train_text_encoder": True, "validation_split": 0.2})
    parse_train_config({**sdxl, "train_text_encoder": True, "text_encoder_lr": 1e-5})


def test_a_prior_prediction_entry_is_refused_with_text_encoder_lora(make_config, small_dataset, tmp_path):
    """A prior_prediction entry's target is the base model's prediction; with train_text_encoder
    the batch's captions are encoded through the text encoders' LoRA, so that target was the
    base U-Net's on the LoRA's text conditioning (half the adapter disabled), as preservation's
    would be (refused there too). Refused before any load, naming the entry and why."""
    from lorastudio.training.preflight import preflight

    subject, klass = tmp_path / "subject", tmp_path / "class"
    for n, img in enumerate(sorted(small_dataset.glob("*.png"))):
        folder = subject if n < 2 else klass
        folder.mkdir(exist_ok=True)
        for path in (img, img.with_suffix(".txt")):
            (folder / path.name).write_bytes(path.read_bytes())
    entries = [{"path": str(subject)}, {"path": str(klass), "regularisation": True, "prior_prediction": True}]
    settings = {"data_dir": None, "datasets": entries, "train_text_encoder": True, "output_name": "prior-te"}
    with pytest.raises(ConfigError) as err:
        train(make_config("sdxl", **settings), [].append, device="cpu")
    (problem,) = err.value.problems
    assert problem.field == "datasets.1.prior_prediction"
    assert "train_text_encoder" in problem.message and "text encoders' LoRA" in problem.message
    assert not (get_settings().outputs_dir / "prior-te").exists()  # nothing loaded, nothing written
    regularised = [entries[0], {**entries[1], "prior_prediction": False}]
    preflight(make_config("sdxl", **{**settings, "datasets": regularised}), get_settings(), "cpu")
    preflight(make_config("sdxl", **{**settings, "train_text_encoder": False}), get_settings(), "cpu")


def test_prodigy_refuses_a_text_encoder_lr_other_than_learning_rate():
    """Prodigy learns one step size from the largest group lr (prodigyopt refuses different lrs
    per group at its first step): text_encoder_lr had no effect, or crashed the run after the
    model loaded. Refused at the config, naming both fields and why; equal to learning_rate, or
    unset, it runs."""
    from prodigyopt import Prodigy

    a, b = torch.nn.Parameter(torch.ones(2)), torch.nn.Parameter(torch.ones(2))
    opt = Prodigy([{"params": [a], "lr": 1.0}, {"params": [b], "lr": 0.5}])
    (a.sum() + b.sum()).backward()
    with pytest.raises(RuntimeError, match="different lr values"):
        opt.step()  # the library's own refusal, which the config rule states first
    sdxl = {"base_model": "a/b", "data_dir": "d", "family": "sdxl", "train_text_encoder": True,
            "optimizer": "prodigy"}  # fmt: skip
    for extra, named in (
        ({"text_encoder_lr": 0.5}, "(1)"),
        ({"learning_rate": 0.8, "text_encoder_lr": 1.0}, "(0.8)"),
    ):
        with pytest.raises(ConfigError) as err:
            parse_train_config({**sdxl, **extra})
        (problem,) = err.value.problems
        assert problem.field == "text_encoder_lr", problem
        assert f"differs from learning_rate {named}: prodigy learns one step size" in problem.message
    parse_train_config({**sdxl, "text_encoder_lr": 1.0})  # Prodigy's default learning_rate
    parse_train_config({**sdxl, "learning_rate": 0.8, "text_encoder_lr": 0.8})
    parse_train_config(sdxl)
    parse_train_config({**sdxl, "optimizer": "adamw", "text_encoder_lr": 1e-5})


def test_the_preflight_report_says_captions_are_encoded_every_step(make_config):
    from lorastudio.jobs.preflight import preflight_report
    from lorastudio.jobs.validation import validate_run

    def validated(cfg):
        raw = cfg.model_dump(exclude_unset=True)
        return validate_run(raw, get_settings(), live_output_names=set(), allow_outside_root=True)

    report = preflight_report(validated(make_config(**TE)))
    assert report["conditioning"]["per_step"] is True
    assert "every step" in report["conditioning"]["note"]
    plain = preflight_report(validated(make_config(family="sdxl")))
    assert plain["conditioning"]["per_step"] is False


def test_lora_convert_keeps_the_text_encoders_in_both_directions(make_config, tiny_model, tmp_path):
    from lorastudio.lora.files import convert_file

    result = train(make_config(output_name="te-c", **TE), [].append, device="cpu")  # kohya
    as_diffusers, again = tmp_path / "d.safetensors", tmp_path / "k.safetensors"
    assert convert_file(result.lora_path, as_diffusers, "diffusers") == "kohya"
    assert convert_file(as_diffusers, again, "kohya") == "diffusers"
    assert _te_keys(load_file(str(as_diffusers)))["text_encoder_2."]
    assert load_file(str(again)).keys() == load_file(str(result.lora_path)).keys()

    def encoded(path) -> list[torch.Tensor]:
        pipe = load_pipeline(str(tiny_model("sdxl")), "sdxl", device="cpu")
        if path is not None:
            apply_loras(pipe, [(path, 1.0)])
        out = []
        for tok, enc in ((pipe.tokenizer, pipe.text_encoder), (pipe.tokenizer_2, pipe.text_encoder_2)):
            ids = tok(["a red circle"], padding="max_length", max_length=77, return_tensors="pt").input_ids
            out.append(enc(ids, output_hidden_states=True).hidden_states[-2].detach())
        return out

    bases = encoded(None)
    for base, a, b, c in zip(
        bases, encoded(result.lora_path), encoded(as_diffusers), encoded(again), strict=True
    ):
        assert float((a - base).abs().max()) > 1e-4  # the file changes each encoder
        torch.testing.assert_close(b, a, rtol=1e-5, atol=1e-5)  # the same text-encoder change
        torch.testing.assert_close(c, a, rtol=1e-5, atol=1e-5)
