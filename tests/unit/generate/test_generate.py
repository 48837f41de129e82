"""Generation: loading pipelines, applying LoRAs with scales, generating, and the CLI."""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pytest
import torch
from PIL import Image
from safetensors import safe_open
from safetensors.torch import load_file, save_file
from typer.testing import CliRunner

from lorastudio.cli.app import _register, app
from lorastudio.cli.generate_cmd import parse_lora_arg
from lorastudio.errors import ConfigError, ModelSourceError, NotFound
from lorastudio.generate import apply_loras, detect_family, generate_image, load_pipeline
from lorastudio.settings import get_settings

PROMPT = "a red circle on a blue background"
KW = {
    "prompt": PROMPT,
    "seed": 0,
    "steps": 2,
    "width": 32,
    "height": 32,
    "extra": {"max_sequence_length": 16},
}


def _img(pipe, **overrides) -> np.ndarray:
    return np.asarray(generate_image(pipe, "flux", **{**KW, **overrides}), dtype=np.float32)


# two adapters on purpose: peft's "Already found a `peft_config`" warning was printed by every
# `generate --lora A --lora B` (session 39 CLI audit, RELIABILITY 1966)
@pytest.mark.filterwarnings("error:Already found a `peft_config`:UserWarning")
def test_apply_loras_replaces_scales_and_unloads(flux_pipe, flux_lora):
    apply_loras(flux_pipe, [])
    base = _img(flux_pipe)
    apply_loras(flux_pipe, [(flux_lora, 1.0)])
    full = _img(flux_pipe)
    assert np.abs(full - base).mean() > 1.0
    apply_loras(flux_pipe, [(flux_lora, 1.0)])  # replaces, does not stack
    np.testing.assert_allclose(_img(flux_pipe), full, atol=1.0)
    apply_loras(flux_pipe, [(flux_lora, 0.5), (flux_lora, 0.5)])  # two halves = one whole
    np.testing.assert_allclose(_img(flux_pipe), full, atol=1.0)
    apply_loras(flux_pipe, [(flux_lora, 0.5)])
    half = _img(flux_pipe)
    assert np.abs(half - base).mean() > 0.2 and np.abs(half - full).mean() > 0.2
    apply_loras(flux_pipe, [(flux_lora, 0.0)])
    np.testing.assert_allclose(_img(flux_pipe), base, atol=1.0)
    apply_loras(flux_pipe, [])
    np.testing.assert_array_equal(_img(flux_pipe), base)


def test_seed_decides_the_image(flux_pipe):
    apply_loras(flux_pipe, [])
    np.testing.assert_array_equal(_img(flux_pipe, seed=3), _img(flux_pipe, seed=3))
    assert not np.array_equal(_img(flux_pipe, seed=3), _img(flux_pipe, seed=4))


def test_bad_loras_are_refused_and_leave_the_base(flux_pipe, flux_lora, tmp_path):
    with pytest.raises(NotFound):
        apply_loras(flux_pipe, [(tmp_path / "missing.safetensors", 1.0)])
    foreign = tmp_path / "sdxl_like.safetensors"
    key = "unet.down_blocks.1.attentions.0.transformer_blocks.0.attn1.to_q"
    save_file(
        {f"{key}.lora_A.weight": torch.randn(4, 64), f"{key}.lora_B.weight": torch.zeros(64, 4)}, foreign
    )
    apply_loras(flux_pipe, [(flux_lora, 1.0)])
    with pytest.raises(ModelSourceError, match="no layer matching"):
        apply_loras(flux_pipe, [(foreign, 1.0)])
    assert not any(flux_pipe.get_list_adapters().values())
    garbage = tmp_path / "garbage.safetensors"
    garbage.write_text("not a safetensors file")
    with pytest.raises(
        ModelSourceError,
        match="garbage.safetensors is not a usable safetensors LoRA: it is not a safetensors file",
    ):
        apply_loras(flux_pipe, [(garbage, 1.0)])  # the header check, before diffusers' loader
    assert not any(flux_pipe.get_list_adapters().values())


def test_a_lora_with_layers_the_pipeline_lacks_is_refused_naming_them(flux_pipe, flux_lora, tmp_path):
    """diffusers' loader only logs the layers of a file that match no module of the pipeline (and
    loads the rest): generation would render with part of the LoRA, silently. The file's own
    layers plus a pair for a block the tiny FLUX.1 lacks (it has one double block) are refused,
    naming that layer. A pair for T5, which FluxPipeline puts no LoRA on, was refused so too; it is
    now merged into T5 (RELIABILITY 148: generate/foreign_loras.py), at scale 1 here (no adapter
    config for text_encoder_2: alpha = rank)."""
    tensors = load_file(str(flux_lora))
    a = next(v for k, v in tensors.items() if k.endswith("to_q.lora_A.weight"))
    b = next(v for k, v in tensors.items() if k.endswith("to_q.lora_B.weight"))
    absent = "transformer.transformer_blocks.7.attn.to_q"
    t5_q = flux_pipe.text_encoder_2.encoder.block[0].layer[0].SelfAttention.q  # FluxPipeline: no T5 LoRA
    t5 = "text_encoder_2.encoder.block.0.layer.0.SelfAttention.q"
    extra = {
        f"{absent}.lora_A.weight": a.clone(),
        f"{absent}.lora_B.weight": b.clone(),
        f"{t5}.lora_A.weight": torch.randn(4, t5_q.in_features),
        f"{t5}.lora_B.weight": torch.randn(t5_q.out_features, 4),
    }
    with safe_open(str(flux_lora), "pt") as fh:
        header = fh.metadata()
    partial = tmp_path / "partial.safetensors"
    save_file({**tensors, **{k: v for k, v in extra.items() if k.startswith(f"{absent}.")}}, partial, header)
    apply_loras(flux_pipe, [(flux_lora, 1.0)])
    with pytest.raises(ModelSourceError, match=rf"1 of its \d+ layers .*{re.escape(absent)}"):
        apply_loras(flux_pipe, [(partial, 1.0)])
    assert not any(flux_pipe.get_list_adapters().values())  # nothing of it (nor the previous one) left
    with_t5 = tmp_path / "with-t5.safetensors"
    save_file({**tensors, **{k: v for k, v in extra.items() if k.startswith(f"{t5}.")}}, with_t5, header)
    original = t5_q.weight.detach().clone()
    apply_loras(flux_pipe, [(with_t5, 1.0)])
    change = extra[f"{t5}.lora_B.weight"] @ extra[f"{t5}.lora_A.weight"]  # [out, in]
    torch.testing.assert_close(t5_q.weight, original + change, rtol=1e-5, atol=1e-6)
    apply_loras(flux_pipe, [])
    assert torch.equal(t5_q.weight, original)
    apply_loras(flux_pipe, [(flux_lora, 1.0)])  # the whole file still loads
    assert any(flux_pipe.get_list_adapters().values())
    apply_loras(flux_pipe, [])


@pytest.mark.parametrize("kind", ["dora", "loha", "lokr"])
def test_a_lycoris_file_in_kohya_names_merges_as_in_lorastudios_names(flux_pipe, flux_lora, tmp_path, kind):
    """kohya sd-scripts / LyCORIS / ai-toolkit write DoRA, LoHa and LoKr under kohya's names
    (`lora_unet_…` or `diffusion_model.…` with `.dora_scale`, `.hada_w1_a` …), which ComfyUI
    reads. diffusers' loader dropped a DoRA's `dora_scale` (it rendered as a plain LoRA) and read
    no LoHa / LoKr; generation now merges them by ComfyUI's rule, each weight exactly as the same
    tensors under lorastudio's `lycoris_` names. A fused layer (FLUX.1's q, k, v) is refused."""
    from lorastudio.lora.lycoris import module_key

    weight = flux_pipe.transformer.transformer_blocks[0].attn.to_out[0].weight  # [out, in]
    out, inp = weight.shape
    g = torch.Generator().manual_seed(1)
    parts = {
        "dora": {
            "lora_down.weight": torch.randn(4, inp, generator=g),
            "lora_up.weight": torch.randn(out, 4, generator=g),
            "alpha": torch.tensor(8.0),
            "dora_scale": torch.rand(out, 1, generator=g) + 1,
        },
        "loha": {
            "hada_w1_a": torch.randn(out, 4, generator=g),
            "hada_w1_b": torch.randn(4, inp, generator=g),
            "hada_w2_a": torch.randn(out, 4, generator=g),
            "hada_w2_b": torch.randn(4, inp, generator=g),
            "alpha": torch.tensor(2.0),
        },
        "lokr": {
            "lokr_w1": torch.randn(2, 2, generator=g),
            "lokr_w2": torch.randn(out // 2, inp // 2, generator=g),
            "alpha": torch.tensor(1.0),
        },
    }[kind]
    ours = tmp_path / "ours.safetensors"
    save_file({f"{module_key('transformer_blocks.0.attn.to_out.0')}.{k}": v for k, v in parts.items()}, ours)
    apply_loras(flux_pipe, [])
    base_weight = weight.detach().clone()
    apply_loras(flux_pipe, [(ours, 0.5)])
    want = weight.detach().clone()
    assert (want - base_weight).abs().max() > 1e-3  # the patch moved the layer
    for base in ("lora_unet_double_blocks_0_img_attn_proj", "diffusion_model.double_blocks.0.img_attn.proj"):
        theirs = tmp_path / f"{base[:9]}-{kind}.safetensors"
        save_file({f"{base}.{k}": v for k, v in parts.items()}, theirs)
        apply_loras(flux_pipe, [(theirs, 0.5)])
        assert torch.equal(weight, want) and not any(flux_pipe.get_list_adapters().values())
    wrong = tmp_path / f"wrong-{kind}.safetensors"  # img_attn.proj's shape on the fused q, k, v
    save_file({f"lora_unet_double_blocks_0_img_attn_qkv.{k}": v for k, v in parts.items()}, wrong)
    with pytest.raises(ModelSourceError, match="lora_unet_double_blocks_0_img_attn_qkv: patch"):
        apply_loras(flux_pipe, [(wrong, 1.0)])
    assert torch.equal(weight, base_weight)  # nothing of it left
    apply_loras(flux_pipe, [])


def test_generate_image_checks_the_size(flux_pipe):
    with pytest.raises(ConfigError) as info:
        generate_image(flux_pipe, "flux", prompt="x", seed=0, steps=0, width=40, height=8)
    assert {p.field for p in info.value.problems} == {"width", "height", "steps"}


def test_load_pipeline_and_detect_family(tiny_model, tmp_path):
    assert detect_family(str(tiny_model("z-image"))) == "z-image"
    assert detect_family("owner/name") is None
    with pytest.raises(ModelSourceError, match="z-image model, not flux"):
        load_pipeline(str(tiny_model("z-image")), "flux", device="cpu")
    with pytest.raises(ModelSourceError, match="no model_index.json"):
        load_pipeline(str(tmp_path), "flux", device="cpu")


@pytest.mark.parametrize(
    "arg, expected",
    [
        ("runs/a.safetensors", (Path("runs/a.safetensors"), 1.0)),
        ("runs/a.safetensors:0.7", (Path("runs/a.safetensors"), 0.7)),
        ("/x/y:z/a.safetensors", (Path("/x/y:z/a.safetensors"), 1.0)),
        ("a.safetensors:-1", (Path("a.safetensors"), -1.0)),
    ],
)
def test_parse_lora_arg(arg, expected):
    assert parse_lora_arg(arg) == expected


def test_generate_cli_writes_the_image_with_the_scaled_lora(tiny_model, flux_lora, flux_pipe, tmp_path):
    _register()
    out = tmp_path / "img.png"
    args = ["generate", "--base", str(tiny_model("flux")), "--lora", f"{flux_lora}:0.5", "--prompt", PROMPT]
    args += ["--steps", "2", "--width", "32", "--height", "32", "--out", str(out), "--device", "cpu"]
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 0, result.output
    assert out.is_file() and [p.name for p in tmp_path.iterdir()] == ["img.png"]
    apply_loras(flux_pipe, [(flux_lora, 0.5)])
    expected = generate_image(flux_pipe, "flux", prompt=PROMPT, seed=0, steps=2, width=32, height=32)
    np.testing.assert_allclose(
        np.asarray(Image.open(out), dtype=np.float32), np.asarray(expected, dtype=np.float32), atol=1.0
    )
    again = CliRunner().invoke(app, args)  # the file exists now
    assert again.exit_code == 2 and "--overwrite" in again.output


def test_generate_cli_refuses_bad_input_and_writes_nothing(tiny_model, tmp_path):
    _register()
    out = tmp_path / "img.png"
    args = ["generate", "--base", str(tiny_model("flux")), "--prompt", "p", "--out", str(out)]
    missing = CliRunner().invoke(app, [*args, "--lora", str(tmp_path / "nope.safetensors")])
    assert missing.exit_code == 2 and "nope.safetensors not found" in missing.output
    bad_size = CliRunner().invoke(app, [*args, "--width", "33", "--height", "32", "--steps", "1"])
    assert bad_size.exit_code == 2 and "width" in bad_size.output
    bad_suffix = CliRunner().invoke(app, [*args[:-1], str(tmp_path / "img.gif")])
    assert bad_suffix.exit_code == 2 and ".png" in bad_suffix.output
    no_base = CliRunner().invoke(
        app, ["generate", "--base", str(tmp_path / "gone"), "--family", "flux", *args[3:]]
    )
    assert no_base.exit_code == 2 and "base model folder not found" in no_base.output
    wrong_family = CliRunner().invoke(app, [*args, "--family", "sdxl"])
    assert wrong_family.exit_code == 2 and "Use family 'flux'" in wrong_family.output
    negative = CliRunner().invoke(app, [*args, "--negative", "blurry"])
    assert negative.exit_code == 2 and "FLUX.1 guides with a distilled guidance embedding" in negative.output
    assert list(tmp_path.iterdir()) == []


def test_generate_cli_refuses_what_the_api_refuses_before_loading_the_pipeline(
    tiny_model, tmp_path, monkeypatch
):
    """Reference counts (the family's and the checkpoint flavour's), the reference size and the
    output size are refused before any weight loads, every problem at once, as POST /api/generate
    refuses them (a FLUX.2 dev load takes minutes at real size)."""
    import lorastudio.generate as generate

    def no_load(*args, **kwargs):
        raise AssertionError("the pipeline was loaded before the request was checked")

    monkeypatch.setattr(generate, "load_pipeline", no_load)
    _register()
    ref = tmp_path / "ref.png"
    Image.new("RGB", (64, 64), "red").save(ref)
    out = tmp_path / "img.png"

    def run(family: str, *extra: str) -> str:
        args = ["generate", "--base", str(tiny_model(family)), "--prompt", "p", "--out", str(out)]
        result = CliRunner().invoke(app, [*args, "--steps", "1", "--device", "cpu", *extra])
        assert result.exit_code == 2, result.output
        return result.output.replace("\n", " ")

    two = run("flux-kontext", "--control", str(ref), "--control", str(ref), "--width", "33", "--height", "32")
    assert "flux-kontext takes at most 1 reference images, got 2" in two and "--width: 33" in two
    assert "takes no reference images (text-to-image only)" in run("z-image", "--control", str(ref))
    plain_edit = run("qwen-image-edit", "--control", str(ref), "--control", str(ref))  # its flavour takes 1
    assert "Qwen-Image-Edit takes at most 1 reference images, got 2" in plain_edit
    # no reference for the single-image flavour: its pipeline cannot render text-to-image (it loaded
    # the whole pipeline, then refused as "controls: QwenImageEditPipeline edits one reference image")
    assert "--control: Qwen-Image-Edit needs 1 reference image(s), got 0" in run("qwen-image-edit")
    args = ["generate", "--base", str(tiny_model("flux-kontext")), "--prompt", "p", "--out", str(out)]
    none = CliRunner().invoke(app, [*args, "--steps", "1", "--device", "cpu"])  # text-to-image: allowed
    assert isinstance(none.exception, AssertionError) and "reference" not in none.output  # it went on to load
    small = run("flux2", "--control", str(ref), "--width", "32", "--height", "32")
    assert "takes reference images of at least 64 px a side" in small
    assert not out.exists()


def test_generate_cli_takes_a_model_by_its_name_under_models(tiny_model, tmp_path):
    """--base NAME finds models/NAME (and its family) the way a training run's base_model does."""
    _register()
    models = get_settings().models_dir
    models.mkdir(parents=True)
    (models / "my-flux").symlink_to(tiny_model("flux"), target_is_directory=True)
    out = tmp_path / "img.png"
    args = ["generate", "--base", "my-flux", "--prompt", PROMPT, "--out", str(out), "--device", "cpu"]
    result = CliRunner().invoke(app, [*args, "--steps", "1", "--width", "32", "--height", "32"])
    assert result.exit_code == 0, result.output
    assert Image.open(out).size == (32, 32)


def test_the_coverage_check_reads_no_tensor_data(flux_pipe, flux_lora, monkeypatch):
    """The completeness check (generate/lora_coverage.py) took the file's layers from a second
    `lora_state_dict(path)` after the load: a second full read and copy of the file (a FLUX.1 LoRA
    can be 1+ GB). It now takes the layers of the load's own conversion: applying one LoRA reads
    its tensors once (diffusers' load), and the check itself opens no file."""
    import safetensors.torch

    apply_loras(flux_pipe, [(flux_lora, 1.0)])  # the value check's memo is warm: it reads no more
    reads: list[str] = []
    real = safetensors.torch.load_file

    def counted(filename, *args, **kwargs):
        reads.append(str(filename))
        return real(filename, *args, **kwargs)

    monkeypatch.setattr(safetensors.torch, "load_file", counted)
    apply_loras(flux_pipe, [(flux_lora, 1.0)])
    assert reads == [str(flux_lora)]
    assert any(flux_pipe.get_list_adapters().values())
    apply_loras(flux_pipe, [])
