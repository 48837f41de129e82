"""Hand-made LyCORIS files on a tiny FLUX.1 (generate/lycoris_patch.py): a patch whose rows are
not the layer's (a transposed LoRA of the same size) is refused, never scrambled into the
weight by a reshape; the pipeline keeps its base weights bit for bit."""

from __future__ import annotations

import pytest
import torch
from safetensors.torch import save_file

from lorastudio.errors import ModelSourceError
from lorastudio.generate import apply_loras, load_pipeline
from lorastudio.lora.lycoris import module_key


@pytest.fixture(scope="module")
def pipe(tiny_model):
    return load_pipeline(str(tiny_model("flux")), "flux", device="cpu")


def _state(pipe) -> dict[str, torch.Tensor]:
    return {k: v.clone() for k, v in pipe.transformer.state_dict().items()}


def test_a_transposed_patch_of_the_same_size_is_refused(pipe, tmp_path) -> None:
    """The patch was checked by its number of elements only, then reshaped to the weight: an
    [in, out] patch on an [out, in] layer was applied scrambled (fix 139)."""
    name, layer = next(
        (n, m)
        for n, m in pipe.transformer.named_modules()
        if isinstance(m, torch.nn.Linear) and m.out_features != m.in_features and "proj_mlp" in n
    )
    out, inp = layer.weight.shape  # [out, in]
    file = tmp_path / "transposed.safetensors"
    key = module_key(name)
    save_file(
        {f"{key}.lora_up.weight": torch.ones(inp, 2), f"{key}.lora_down.weight": torch.ones(2, out)},
        str(file),
    )  # delta [in, out]: as many elements as the weight, other rows
    before = _state(pipe)
    with pytest.raises(
        ModelSourceError, match=rf"layer {key}: patch \({inp}, {out}\) vs weight \({out}, {inp}\)"
    ):
        apply_loras(pipe, [(file, 1.0)])
    after = _state(pipe)
    assert all(torch.equal(before[k], after[k]) for k in before)
    one_scale = tmp_path / "one-scale.safetensors"  # a DoRA magnitude of one row: was broadcast
    save_file(
        {
            f"{key}.lora_up.weight": torch.ones(out, 2),
            f"{key}.lora_down.weight": torch.ones(2, inp),
            f"{key}.dora_scale": torch.ones(1, 1),
        },
        str(one_scale),
    )
    with pytest.raises(ModelSourceError, match=rf"layer {key}: dora_scale \(1, 1\) vs weight"):
        apply_loras(pipe, [(one_scale, 1.0)])
    assert all(torch.equal(before[k], v) for k, v in _state(pipe).items())
    right = tmp_path / "right.safetensors"
    save_file(
        {f"{key}.lora_up.weight": torch.ones(out, 2), f"{key}.lora_down.weight": torch.ones(2, inp)},
        str(right),
    )
    apply_loras(pipe, [(right, 0.5)])  # the same layer in its own shape is applied
    assert not torch.equal(layer.weight, before[f"{name}.weight"])
    apply_loras(pipe, [])
    assert all(torch.equal(before[k], v) for k, v in _state(pipe).items())
