"""The portable-LoRA matrix (session 37 audit): every family x adapter kind x layout x save dtype,
each file loaded by each loader that reads it, at strength 1.0 and 0.5, against the change the
run trained (peft's own merge of each trained layer minus its base: bench.comfyui_check).

Cells (CASES below; a 3-step tiny run each, rank 4, alpha 8: a lost alpha shows):
- LoRA in the family's default layout and in the other one, in bf16 and fp16 too; DoRA in the
  LyCORIS layout (kohya) and in the diffusers one; LoHa, LoKr (LyCORIS layout).
- Loaders (tests/unit/lora/portable_cells.py): lorastudio's generation (`apply_loras`), diffusers'
  plain `load_lora_weights` + `set_adapters`, peft alone (`inject_adapter_in_model` with the
  header's LoraConfig + `set_peft_model_state_dict`). ComfyUI's own loader:
  tests/external/test_comfyui_loader.py (needs a checkout); here the save-time check's verdict
  in the sidecar (ComfyUI's rules restated, lora/comfy.py) is asserted as the table says.
- Every loaded linear layer must move by strength x the trained change (fp32 files 1e-4 of the
  layer's largest change, bf16 2e-2, fp16 3e-3) and no untrained layer may move.
- The header: the model spec's architecture ("<base>/lora" or "/lycoris"), kohya's ss_* keys of
  a kohya / LyCORIS file (network module, dim = the rank, a LoRA's alpha / dim = each layer's,
  base model version: A1111 / Forge tell an SDXL LoRA by `ss_base_model_version` "sdxl_...").

What a cell does not load, and why (asserted as such, so a change shows):
- diffusers' kohya FLUX.1 reader (FLUX.1, Kontext, Chroma) hard-codes FLUX.1-dev's single-block
  widths and asserts on the tiny model's (DESIGN.md; generation uses that reader too): the real
  bases load (tests/unit/lora/test_diffusers_loader.py trains the double blocks only for this);
- DoRA in the diffusers layout at 0.5 through diffusers / peft: peft scales the LoRA part before
  the normalisation (not half the change; generation applies ComfyUI's rule,
  generate/dora_strength.py); ComfyUI reads no peft magnitude (the sidecar says so);
- LoHa / LoKr / LyCORIS DoRA: diffusers has no reader, but for FLUX.2 / FLUX.2 klein LoKr, which
  diffusers 0.42 reads (its LyCORIS FLUX.2 LoKr conversion);
- the SDXL diffusers layout in ComfyUI (its SDXL diffusers map wants the old `processor` names).

Slow (~10 min on 2 cores with -n 2 for the whole matrix); the default suite keeps one cheap cell of the one
loader the rest of the suite does not run: peft alone on a diffusers-layout file
(`test_peft_alone_loads_a_diffusers_file_at_each_strength`).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from safetensors.torch import save_file
from tests.unit.lora.portable_cells import (
    Cell,
    base_weights,
    linear_weights,
    loaded_weights,
    peft_loaded,
    text_encoder_weights,
    train_cell,
    train_run,
    train_text_encoder_cell,
    worst_error,
)

from lorastudio import families
from lorastudio.lora.convert import PeftLora
from lorastudio.lora.files import file_for_layout
from lorastudio.lora.metadata import BASE_MODEL_VERSION
from lorastudio.training.adapters.lora import add_lora, lora_config_for, lora_state_dict

FAMILIES = families.names()
TOLERANCE = {"fp32": 1e-4, "bf16": 2e-2, "fp16": 3e-3}
FLUX1_LAYOUT = {"flux", "flux-kontext", "chroma"}  # diffusers' kohya FLUX.1 reader's families
# diffusers 0.42's LyCORIS FLUX.2 LoKr reader; its Z-Image reader of the diffusion_model. spelling
# lorastudio writes Z-Image LoKr files in (RELIABILITY 1700)
FLUX2_LOKR = {"flux2", "flux2-klein", "z-image"}
# (case of bench.comfyui_check.CASES, lora_format: None = the case's / the family's default, "other")
CASES = [
    ("lora", None),
    ("lora", "other"),
    ("dora", "kohya"),
    ("dora", "diffusers"),
    ("loha", None),
    ("lokr", None),
    ("lora-bf16", None),
    ("lora-fp16", None),
]


def _layout(family: str, fmt: str | None) -> str | None:
    default = families.get(family).spec.defaults.get("lora_format") or "diffusers"
    return {"diffusers": "kohya", "kohya": "diffusers"}[default] if fmt == "other" else fmt


def _kind(case: str) -> str:
    return case.split("-")[0]


def _expected(family: str, case: str, layout: str) -> dict[str, object]:
    """{loader: the strengths it must apply exactly (a tuple) or the sidecar verdict (bool / None)}."""
    kind = _kind(case)
    flux1_kohya = layout == "kohya" and family in FLUX1_LAYOUT and kind == "lora"
    loads = {"generate": () if flux1_kohya else (1.0, 0.5)}
    if kind == "lora":
        loads["diffusers"] = () if flux1_kohya else (1.0, 0.5)
        comfy, diffusers = not (family == "sdxl" and layout == "diffusers"), not flux1_kohya
    elif kind == "dora" and layout == "diffusers":
        loads["diffusers"] = (1.0,)
        comfy, diffusers = False, True
    else:  # the LyCORIS layout
        diffusers_lokr = kind == "lokr" and family in FLUX2_LOKR
        loads["diffusers"] = (1.0, 0.5) if diffusers_lokr else ()
        comfy, diffusers = True, (True if diffusers_lokr else None)  # None: not checked at save time
    if layout == "diffusers":
        loads["peft"] = (1.0,) if kind == "dora" else (1.0, 0.5)
    return {**loads, "comfyui_ok": comfy, "diffusers_ok": diffusers}


def _assert_header(cell: Cell, layout: str) -> None:
    header, kind = cell.header, _kind(cell.case)
    lycoris = kind != "lora" and layout == "kohya"
    assert header["modelspec.architecture"].endswith("/lycoris" if lycoris else "/lora"), header
    assert header["modelspec.sai_model_spec"] == "1.0.0"
    assert header["lorastudio.family"] == cell.family
    if layout != "kohya":
        assert not any(k.startswith("ss_") for k in header), header
        return
    assert header["ss_network_module"] == ("lycoris.kohya" if lycoris else "networks.lora")
    assert header["ss_network_dim"] == "4"
    if not lycoris:  # a layer's alpha / rank is the header's (a fused layer of FLUX.1 / FLUX.2
        # holds its parts' ranks and alphas summed; Krea 2's layers hold it in lora_up: no .alpha)
        tensors = _file_tensors(cell.lora)
        scale = float(header["ss_network_alpha"]) / 4
        for key, alpha in tensors.items():
            if key.endswith(".alpha"):
                module = key.removesuffix(".alpha")  # its down matrix: kohya's or (Z-Image) lora_A
                down = tensors.get(module + ".lora_down.weight", tensors.get(module + ".lora_A.weight"))
                assert down is not None, key
                rank = down.shape[0]
                assert float(alpha) / rank == pytest.approx(scale), key
        if not any(k.endswith(".alpha") for k in tensors):
            assert scale == 1.0, header
    # (a LyCORIS file's header names the run's alpha: a full-factor LoKr layer holds alpha = rank,
    # its alpha / rank folded into lokr_w1, as ComfyUI's scale-1 branch reads it)
    assert header["ss_base_model_version"] == BASE_MODEL_VERSION[cell.family]
    if cell.family == "sdxl":  # A1111 / Forge: an SDXL LoRA is told by this key alone
        assert header["ss_base_model_version"].startswith("sdxl_")


def _file_tensors(path: Path) -> dict[str, torch.Tensor]:
    from safetensors.torch import load_file

    return load_file(str(path))


@pytest.mark.slow
@pytest.mark.parametrize(("case", "fmt"), CASES, ids=[f"{c}-{f or 'default'}" for c, f in CASES])
@pytest.mark.parametrize("family", FAMILIES)
def test_each_file_loads_in_each_loader_at_the_trained_strength(family, case, fmt, tmp_path):
    layout = _layout(family, fmt)
    cell = train_cell(family, case, tmp_path, layout)
    sidecar = json.loads(cell.lora.with_suffix(".json").read_text())
    layout = sidecar["lora_format"]
    want = _expected(family, case, layout)
    assert sidecar["loaders"]["comfyui"]["ok"] is want["comfyui_ok"], sidecar["loaders"]["comfyui"]
    assert sidecar["loaders"]["diffusers"].get("ok") is want["diffusers_ok"], sidecar["loaders"]["diffusers"]
    _assert_header(cell, layout)
    dtype = "bf16" if "bf16" in case else "fp16" if "fp16" in case else "fp32"
    base = base_weights(cell)
    for loader in ("generate", "diffusers", "peft"):
        for strength in want.get(loader, ()):  # type: ignore[union-attr]
            error, stray = worst_error(base, loaded_weights(cell, loader, strength), cell.change, strength)
            assert error <= TOLERANCE[dtype] and not stray, (loader, strength, error, stray[:5])


def test_peft_alone_loads_a_diffusers_file_at_each_strength(tiny_model, tmp_path):
    """The default suite's cell: a FLUX.1 diffusers-layout file (rank 4, alpha 8, every layer's
    lora_B random) put in by peft alone from its header's LoraConfig: every adapted layer moves by
    strength x (alpha / rank) B @ A, nothing else moves."""
    family = "flux"
    fam = families.get(family)
    denoiser = fam.load_denoiser(str(tiny_model(family)), None, torch.float32, torch.device("cpu"))
    plain = linear_weights(denoiser)
    from types import SimpleNamespace

    config = SimpleNamespace(lora_rank=4, lora_alpha=8.0, lora_dropout=0.0, lora_targets=None)
    torch.manual_seed(0)
    add_lora(denoiser, lora_config_for(config, fam.spec.lora_targets))
    change = {}
    for name, module in denoiser.named_modules():
        if hasattr(module, "lora_B") and "default" in module.lora_B:
            torch.nn.init.normal_(module.lora_B["default"].weight, std=0.1)
            change[f"{name}.weight"] = module.get_delta_weight("default").detach().float()  # [out, in]
    tensors, header = file_for_layout(
        PeftLora(lora_state_dict(denoiser), 4, 8.0), family, "diffusers", {"lorastudio.family": family}
    )
    path = tmp_path / "peft.safetensors"
    save_file(tensors, str(path), metadata=header)
    cell = Cell(family, "lora", path, tiny_model(family), change, header)
    for strength in (1.0, 0.5):
        error, stray = worst_error(plain, linear_weights(peft_loaded(cell, strength)), change, strength)
        assert error <= TOLERANCE["fp32"] and not stray, (strength, error, stray[:5])


@pytest.mark.slow
@pytest.mark.parametrize("layout", ["kohya", "diffusers"])
def test_an_sdxl_file_with_text_encoder_layers_loads_them_at_the_trained_strength(layout, tmp_path):
    """SDXL's train_text_encoder: both CLIP encoders' layers, through generation and plain
    diffusers, at 1.0 and 0.5 (the U-Net's as in the matrix); ComfyUI's CLIP loading:
    tests/external/test_comfyui_text_encoders.py."""
    cell, encoders = train_text_encoder_cell(tmp_path, layout)
    sidecar = json.loads(cell.lora.with_suffix(".json").read_text())
    assert sidecar["loaders"]["diffusers"]["ok"], sidecar["loaders"]["diffusers"]
    assert sidecar["loaders"]["comfyui"]["ok"] is (layout == "kohya"), sidecar["loaders"]["comfyui"]
    assert {k.split(".")[0] for k in encoders} == {"text_encoder", "text_encoder_2"}
    plain, base = text_encoder_weights(cell, None, 1.0), base_weights(cell)
    for loader in ("generate", "diffusers"):
        for strength in (1.0, 0.5):
            error, stray = worst_error(
                plain, text_encoder_weights(cell, loader, strength), encoders, strength
            )
            assert error <= TOLERANCE["fp32"] and not stray, (loader, strength, error, stray[:5])
            error, stray = worst_error(base, loaded_weights(cell, loader, strength), cell.change, strength)
            assert error <= TOLERANCE["fp32"] and not stray, (loader, strength, error, stray[:5])


def train_cell_like(cell: Cell, lora: Path, change: dict[str, torch.Tensor]) -> Cell:
    """`cell`'s model and family with another file and change (a merged file's)."""
    from safetensors import safe_open

    with safe_open(str(lora), "pt") as f:
        header = dict(f.metadata() or {})
    return Cell(cell.family, "merged", lora, cell.model, change, header)


@pytest.mark.slow
@pytest.mark.parametrize(("family", "layout"), [("flux", "diffusers"), ("sdxl", "kohya"), ("flux2", "kohya")])
def test_a_merged_file_loads_at_the_weighted_sum_of_its_inputs_changes(family, layout, tmp_path):
    """`lora merge A:0.7 B:0.3` of two runs (other seeds): generation (and diffusers) applies
    0.7 x A's change + 0.3 x B's, half of it at 0.5; the sidecar-free merged file's header is a
    kohya / diffusers header as a run's (ss_* dims and alphas consistent with its layers)."""
    from lorastudio.lora.ops import merge_files

    one, _ = train_run(family, tmp_path, "one", lora_format=layout, seed=1)
    two, _ = train_run(family, tmp_path, "two", lora_format=layout, seed=2)
    out = merge_files([(one.lora, 0.7), (two.lora, 0.3)], tmp_path / "merged.safetensors")
    change = {k: 0.7 * one.change[k] + 0.3 * two.change.get(k, 0) for k in one.change}
    merged = train_cell_like(one, out, change)
    assert merged.header["modelspec.merged_from"] == "one.safetensors, two.safetensors"
    if layout == "kohya":
        assert merged.header["ss_network_dim"] == "8"  # the ranks concatenated
    base = base_weights(merged)
    loaders = ("generate", "diffusers") if family != "flux" or layout == "diffusers" else ("generate",)
    for loader in loaders:
        for strength in (1.0, 0.5):
            error, stray = worst_error(base, loaded_weights(merged, loader, strength), change, strength)
            assert error <= TOLERANCE["fp32"] and not stray, (loader, strength, error, stray[:5])
