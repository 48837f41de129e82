"""The save-time diffusers check of a LyCORIS LoKr file (lora/portability.check_diffusers_lokr,
RELIABILITY 1501): diffusers 0.42 reads FLUX.2's and FLUX.2 klein's LyCORIS LoKr names
(tests/unit/lora/test_portable_matrix.py loads such files through it at 1.0 and 0.5), so their
sidecar says it loads them, and names a factor whose Kronecker product does not fit its layer;
a pipeline with no reader for the file is "not checked", with diffusers' reason; Z-Image's reader
takes the `diffusion_model.<diffusers name>` spelling lorastudio writes its LoKr files in
(RELIABILITY 1700), not the `lycoris_` one."""

from __future__ import annotations

import pytest
import torch

from lorastudio import families
from lorastudio.lora.lycoris import generic_spelling, peft_to_lycoris
from lorastudio.lora.portability import check_diffusers_lokr

LAYERS = [
    "transformer_blocks.0.attn.to_q",
    "transformer_blocks.0.ff.linear_in",
    "single_transformer_blocks.0.attn.to_out",
]


def _lokr_file(shapes: dict[str, tuple[int, ...]], wrong: str | None = None) -> dict[str, torch.Tensor]:
    """w1 [2, 2] (x) w2 low-rank [out / 2, 4] @ [4, in / 2] per layer (w2 one row short in `wrong`)."""
    tensors = {}
    for name in LAYERS:
        out, inp = shapes[name][:2]
        key = "lycoris_" + name.replace(".", "_")
        rows = out // 2 - (1 if name == wrong else 0)
        tensors |= {
            f"{key}.lokr_w1": torch.randn(2, 2),  # [2, 2]
            f"{key}.lokr_w2_a": torch.randn(rows, 4),  # [out / 2, r]
            f"{key}.lokr_w2_b": torch.randn(4, inp // 2),  # [r, in / 2]
            f"{key}.alpha": torch.tensor(8.0),
        }
    return tensors


@pytest.mark.parametrize("family", ["flux2", "flux2-klein"])
def test_a_flux2_lokr_file_is_checked_against_diffusers_own_reader(family, layer_shapes):
    shapes = layer_shapes(family)
    pipeline = families.get(family).spec.pipeline_class
    check = check_diffusers_lokr(_lokr_file(shapes), family, shapes, pipeline)
    assert check["checked"] and check["ok"] and check["loaded"] == len(LAYERS), check
    bad = check_diffusers_lokr(_lokr_file(shapes, wrong=LAYERS[1]), family, shapes, pipeline)
    assert bad["checked"] and not bad["ok"], bad
    assert len(bad["mismatched"]) == 1 and "ff.linear_in" in bad["mismatched"][0]


def test_a_pipeline_without_a_lokr_reader_leaves_the_file_unchecked_with_its_reason(layer_shapes):
    shapes = layer_shapes("z-image")
    name = "layers.0.attention.to_q"
    out, inp = shapes[name]
    tensors = {
        f"lycoris_{name.replace('.', '_')}.lokr_w1": torch.randn(2, 2),
        f"lycoris_{name.replace('.', '_')}.lokr_w2": torch.randn(out // 2, inp // 2),
    }
    check = check_diffusers_lokr(tensors, "z-image", shapes, families.get("z-image").spec.pipeline_class)
    assert check["checked"] is False and "ZImagePipeline" in check["reason"], check


@pytest.mark.parametrize("low_rank", [False, True])
def test_a_zimage_lokr_file_as_written_loads_in_diffusers_own_reader(layer_shapes, low_rank):
    """The writer's Z-Image spelling (lora/lycoris.generic_spelling) through diffusers 0.42's
    ZImagePipeline.lora_state_dict: every layer converted onto its layer (full factors, alpha / rank
    folded into w1, and a low-rank w2 with its alpha); the old `lycoris_` spelling is refused above."""
    shapes = layer_shapes("z-image")
    modules = ["layers.0.attention.to_q", "layers.0.attention.to_v", "context_refiner.0.attention.to_out.0"]
    peft = {}
    for m in modules:
        out, inp = shapes[m]
        w2 = (
            {f"{m}.lokr_w2_a": torch.randn(out // 2, 2), f"{m}.lokr_w2_b": torch.randn(2, inp // 2)}
            if low_rank
            else {f"{m}.lokr_w2": torch.randn(out // 2, inp // 2)}
        )
        peft |= {f"{m}.lokr_w1": torch.randn(2, 2), **w2}  # w1 [2, 2] (x) w2 [out / 2, in / 2]
    scales = {m: (2, 4.0) for m in modules}
    assert generic_spelling("z-image", "lokr") and not generic_spelling("z-image", "loha")
    tensors = peft_to_lycoris(peft, "lokr", scales, generic=generic_spelling("z-image", "lokr"))
    assert all(k.startswith("diffusion_model.") for k in tensors)
    check = check_diffusers_lokr(tensors, "z-image", shapes, families.get("z-image").spec.pipeline_class)
    assert check["checked"] and check["ok"] and check["loaded"] == len(modules), check


def test_lorastudio_reads_both_zimage_lokr_spellings_onto_the_same_layers(tmp_path):
    """The old `lycoris_` files and the new `diffusion_model.` ones name the same layers for
    generation and init_lora (both read through generate/lycoris_names.to_lycoris_names)."""
    from safetensors.torch import save_file

    from lorastudio.training.adapters.init_lycoris import file_targets

    modules = ["layers.0.attention.to_q", "context_refiner.0.attention.to_out.0", "layers.1.feed_forward.w2"]
    peft = {p: torch.randn(2, 2) for m in modules for p in (f"{m}.lokr_w1", f"{m}.lokr_w2")}
    scales = {m: (2, 2.0) for m in modules}
    pipeline = families.get("z-image").spec.pipeline_class
    read = []
    for generic in (False, True):
        path = tmp_path / f"{generic}.safetensors"
        save_file(peft_to_lycoris(peft, "lokr", scales, generic=generic), str(path))
        read.append({target.keys: sorted(parts) for _, target, parts in file_targets(path, pipeline)})
    assert read[0] == read[1] and len(read[0]) == len(modules), read
