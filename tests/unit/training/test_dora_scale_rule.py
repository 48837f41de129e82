"""A LyCORIS-layout DoRA file's dora_scale read by the rule its writer used (lora/dora_rule.py):
LyCORIS' (dora_scale = the magnitude m: kohya sd-scripts' lycoris.kohya, SimpleTuner) or ComfyUI
0.3.77+'s (m ||W|| / ||W + delta||: lorastudio's files, with or without the header key that names
it). Hand-made files on the tiny FLUX.1 of one trained DoRA layer (base W, a known change delta
and magnitude m): generation's patched weight and init_lora's peft layer both equal the trained
layer, m (W + delta) / ||W + delta||, for every writer (before: LyCORIS' files were off by
||W + delta|| / ||W|| per row); a header that names no rule warns naming the file; an unknown
rule is refused naming it."""

from __future__ import annotations

import json
import logging
from pathlib import Path

import pytest
import torch
from safetensors.torch import save_file

from lorastudio import families
from lorastudio.errors import ModelSourceError
from lorastudio.generate import apply_loras, load_pipeline
from lorastudio.lora.dora_rule import RULE_KEY
from lorastudio.lora.header import check_lora_file
from lorastudio.lora.lycoris import module_key
from lorastudio.training.adapters.init_lora import InitSource, load_init_lora
from lorastudio.training.adapters.init_lora_rules import file_sha256

LAYER = "transformer_blocks.0.attn.to_q"
RANK = 2
KOHYA_LYCORIS = {
    "ss_network_module": "lycoris.kohya",
    "ss_network_args": json.dumps({"algo": "lora", "dora_wd": "True", "wd_on_output": "True"}),
}
OLD_LORASTUDIO = {"lorastudio.lora_format": "lycoris", "lorastudio.adapter": "dora", **KOHYA_LYCORIS}
# (header, the rule the writer used): kohya's LyCORIS and SimpleTuner write m; lorastudio ComfyUI's
WRITERS = {
    "kohya-lycoris": (KOHYA_LYCORIS, "lycoris"),
    "simpletuner": ({"lycoris_config": json.dumps({"algo": "lora", "dora_wd": True})}, "lycoris"),
    "lorastudio-before-the-key": (OLD_LORASTUDIO, "comfyui"),
    "lorastudio": ({**OLD_LORASTUDIO, RULE_KEY: "comfyui"}, "comfyui"),
    "named-lycoris": ({RULE_KEY: "lycoris"}, "lycoris"),
}


@pytest.fixture(scope="module")
def pipe(tiny_model):
    return load_pipeline(str(tiny_model("flux")), "flux", device="cpu")


def _trained(w: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """(up [out, r], down [r, in], m [out], the trained weight m (W + delta) / ||W + delta||) of a
    DoRA layer on base `w` [out, in] whose change delta = up @ down is of W's size per row."""
    g = torch.Generator().manual_seed(0)
    out, inp = w.shape
    down = torch.randn(RANK, inp, generator=g)  # [r, in]
    up = torch.randn(out, RANK, generator=g)  # [out, r]
    up *= w.norm(dim=1, keepdim=True) / (up @ down).norm(dim=1, keepdim=True)  # ||delta|| = ||W|| per row
    merged = w + up @ down  # [out, in]
    m = w.norm(dim=1) * (1 + 0.3 * torch.rand(out, generator=g))  # [out]
    return up, down, m, m[:, None] * merged / merged.norm(dim=1, keepdim=True)


def _file(tmp_path: Path, w: torch.Tensor, header: dict[str, str], rule: str, name: str) -> Path:
    """The trained layer as `rule`'s writer stores it: dora_scale = m (LyCORIS) or m ||W|| / ||W + delta||."""
    up, down, m, _ = _trained(w)
    scale = m if rule == "lycoris" else m * w.norm(dim=1) / (w + up @ down).norm(dim=1)  # [out]
    key = module_key(LAYER)
    path = tmp_path / f"{name}.safetensors"
    tensors = {
        f"{key}.lora_up.weight": up,
        f"{key}.lora_down.weight": down,
        f"{key}.alpha": torch.tensor(float(RANK)),  # scale alpha / rank = 1
        f"{key}.dora_scale": scale[:, None],  # [out, 1]: wd_on_output
    }
    save_file({k: v.contiguous() for k, v in tensors.items()}, str(path), metadata=header)
    return path


@pytest.mark.parametrize("writer", sorted(WRITERS))
def test_generation_renders_each_writers_dora_as_the_trained_layer(pipe, tmp_path, writer) -> None:
    header, rule = WRITERS[writer]
    layer = dict(pipe.transformer.named_modules())[LAYER]
    base = layer.weight.detach().float().clone()  # [out, in]
    path = _file(tmp_path, base, header, rule, writer)
    apply_loras(pipe, [(path, 1.0)])
    try:
        torch.testing.assert_close(layer.weight.detach().float(), _trained(base)[3], rtol=1e-5, atol=1e-6)
    finally:
        apply_loras(pipe, [])
    assert torch.equal(layer.weight.detach().float(), base)


def test_a_dora_whose_header_names_no_rule_warns_naming_it_and_an_unknown_rule_is_refused(
    pipe, tmp_path, caplog
) -> None:
    layer = dict(pipe.transformer.named_modules())[LAYER]
    base = layer.weight.detach().float().clone()  # [out, in]
    bare = _file(tmp_path, base, {"ss_network_dim": str(RANK)}, "comfyui", "bare")
    with caplog.at_level(logging.WARNING, logger="lorastudio.generate.lycoris_patch"):
        apply_loras(pipe, [(bare, 1.0)])
    try:  # read by ComfyUI's rule, as before and as ComfyUI renders it
        torch.testing.assert_close(layer.weight.detach().float(), _trained(base)[3], rtol=1e-5, atol=1e-6)
    finally:
        apply_loras(pipe, [])
    assert any(
        str(bare) in r.getMessage() and "nothing in its header" in r.getMessage() for r in caplog.records
    )
    odd = _file(tmp_path, base, {RULE_KEY: "forge"}, "comfyui", "odd")
    said = rf"{odd}.*{RULE_KEY} is 'forge', not one of comfyui, lycoris"
    with pytest.raises(ModelSourceError, match=said):  # the header check generation makes before
        check_lora_file(odd, "flux")  # its pipeline loads (jobs/generation_check, lorastudio generate)
    with pytest.raises(ModelSourceError, match=said):
        apply_loras(pipe, [(odd, 1.0)])
    assert torch.equal(layer.weight.detach().float(), base)


@pytest.mark.parametrize("writer", ["kohya-lycoris", "lorastudio-before-the-key", "bare"])
def test_init_lora_starts_from_each_writers_dora_as_the_trained_layer(
    make_config, tiny_model, tmp_path, writer
) -> None:
    """peft's DoRA layer after the load computes the trained weight (its magnitude is m)."""
    from lorastudio.training.adapters.lora import add_lora, lora_config_for

    header, rule = WRITERS.get(writer, ({"ss_network_dim": str(RANK)}, "comfyui"))  # bare: ComfyUI's, warned
    family = families.get("flux")
    denoiser = family.load_denoiser(str(tiny_model("flux")), None, torch.float32, torch.device("cpu"))
    cfg = make_config(adapter="dora", lora_rank=RANK, lora_alpha=float(RANK), lora_targets=["to_q"])
    add_lora(denoiser, lora_config_for(cfg, family.spec.lora_targets))
    module = dict(denoiser.named_modules())[LAYER]
    base = module.get_base_layer().weight.detach().float().clone()  # [out, in]
    path = _file(tmp_path, base, header, rule, writer)
    load = load_init_lora(denoiser, InitSource(path, file_sha256(path)), "flux", "dora")
    assert LAYER not in load.fresh
    _, _, m, want = _trained(base)
    torch.testing.assert_close(
        module.lora_magnitude_vector["default"].weight.detach().reshape(-1), m, rtol=1e-5, atol=0
    )
    x = torch.randn(3, base.shape[1], generator=torch.Generator().manual_seed(1))  # [3, in]
    bias = module.get_base_layer().bias
    with torch.no_grad():
        torch.testing.assert_close(
            module(x), x @ want.T + (0 if bias is None else bias), rtol=1e-5, atol=1e-5
        )
    if writer == "bare":  # the run's warning names the file and the rule it was read by
        assert str(path) in (load.warning(path.name) or "") and "nothing in its header" in load.note
    else:
        assert load.note is None  # the header told the rule


def test_a_lycoris_rule_dora_whose_change_overflows_is_refused(make_config, tiny_model, tmp_path) -> None:
    """LyCORIS' rule takes m = dora_scale with no norm of W + delta, which was where an overflowing
    change (finite factors, up @ down past float32) showed (RELIABILITY 1542): it is checked by
    itself now, for either rule."""
    from lorastudio.training.adapters.lora import add_lora, lora_config_for

    family = families.get("flux")
    denoiser = family.load_denoiser(str(tiny_model("flux")), None, torch.float32, torch.device("cpu"))
    cfg = make_config(adapter="dora", lora_rank=RANK, lora_alpha=float(RANK), lora_targets=["to_q"])
    add_lora(denoiser, lora_config_for(cfg, family.spec.lora_targets))
    base = dict(denoiser.named_modules())[LAYER].get_base_layer().weight.detach().float()  # [out, in]
    key = module_key(LAYER)
    path = tmp_path / "overflow.safetensors"
    tensors = {
        f"{key}.lora_up.weight": torch.full((base.shape[0], RANK), 1e20),
        f"{key}.lora_down.weight": torch.full((RANK, base.shape[1]), 1e20),  # up @ down: 2e40 per entry
        f"{key}.dora_scale": torch.ones(base.shape[0], 1),
    }
    save_file(tensors, str(path), metadata=KOHYA_LYCORIS)
    with pytest.raises(ModelSourceError, match="past what float32 holds"):
        load_init_lora(denoiser, InitSource(path, file_sha256(path)), "flux", "dora")
