"""A per-layer alpha that, folded into its layer's lora_B (alpha / rank), takes the weights past
their dtype's range: refused naming the alpha, not read as inf weights (RELIABILITY 912); a
rank-0 layer beside its alpha: refused "rank 0" by every reader, not a ZeroDivisionError (915)."""

from __future__ import annotations

import re

import pytest
import torch
from safetensors.torch import save_file

from lorastudio.errors import ModelSourceError
from lorastudio.lora.convert import fold_strength
from lorastudio.lora.convert_read import to_diffusers
from lorastudio.lora.file_read import read_lora_file

LAYER = "transformer.transformer_blocks.0.attn.to_q"


def _file(tmp_path, alpha: float, up: float = 1.0):
    path = tmp_path / f"a{alpha:g}-{up:g}.safetensors"
    save_file(
        {
            LAYER + ".lora_A.weight": torch.ones(4, 8, dtype=torch.float16),  # [r, in]
            LAYER + ".lora_B.weight": torch.full((8, 4), up, dtype=torch.float16),  # [out, r]
            LAYER + ".alpha": torch.tensor(alpha),
        },
        str(path),
    )
    return path


def test_a_diffusers_named_alpha_that_overflows_its_layer_is_refused(tmp_path) -> None:
    tensors, _ = read_lora_file(_file(tmp_path, 2.0))  # alpha / rank 0.5
    assert float(tensors[LAYER + ".lora_B.weight"][0, 0]) == 0.5
    tensors, _ = read_lora_file(_file(tmp_path, -4.0))  # a negative alpha: the sign flipped, as ComfyUI
    assert float(tensors[LAYER + ".lora_B.weight"][0, 0]) == -1.0
    # the old code: lora_B all inf (float16), every image and merge of it black / NaN (a scale of
    # 100, within fix 951's bound, over weights of 1000: 1e5, past float16's 65504)
    with pytest.raises(ModelSourceError, match=r"alpha '.*to_q\.alpha' over the layer's rank .* float16"):
        read_lora_file(_file(tmp_path, 400.0, up=1000.0))


def test_a_kohya_layer_alpha_that_overflows_is_refused_by_the_conversion() -> None:
    """Layers of different alpha / rank: each one's scale folded into its lora_B (convert, merge,
    resize, assistant_lora, generation's reader)."""

    def layer(name: str, alpha: float) -> dict[str, torch.Tensor]:
        return {
            f"lora_unet_{name}.lora_down.weight": torch.ones(4, 320, dtype=torch.float16),
            f"lora_unet_{name}.lora_up.weight": torch.ones(320, 4, dtype=torch.float16),
            f"lora_unet_{name}.alpha": torch.tensor(alpha),
        }

    q, k = (
        "down_blocks_1_attentions_0_transformer_blocks_0_attn1_to_q",
        "down_blocks_1_attentions_0_transformer_blocks_0_attn1_to_k",
    )
    ok = to_diffusers({**layer(q, 2.0), **layer(k, 4.0)}, "sdxl")
    assert torch.isfinite(torch.stack([t.float().sum() for t in ok.tensors.values()])).all()
    with pytest.raises(ModelSourceError, match=r"attn1\.to_k.*float16"):
        to_diffusers({**layer(q, 2.0), **layer(k, 1e30)}, "sdxl")
    # one alpha in every layer: folded by fold_strength (convert to diffusers, merge, generation's
    # reader of a text-encoder part), the same refusal
    same = to_diffusers({**layer(q, 1e30), **layer(k, 1e30)}, "sdxl")
    with pytest.raises(ModelSourceError, match=r"attn1\.to_[qk].*float16"):
        fold_strength(same)


@pytest.mark.parametrize(
    "down, up",
    [
        (LAYER + ".lora_A.weight", LAYER + ".lora_B.weight"),
        ("lora_unet_down_blocks_1_attentions_0_transformer_blocks_0_attn1_to_q.lora_down.weight",
         "lora_unet_down_blocks_1_attentions_0_transformer_blocks_0_attn1_to_q.lora_up.weight"),
    ],
)  # fmt: skip
def test_a_rank_0_layer_with_an_alpha_is_refused_by_every_reader(tmp_path, down: str, up: str) -> None:
    """alpha / rank of a [0, in] down matrix: ZeroDivisionError out of fold_layer_alphas (the
    old code: generation's and convert's reader), where the CLI / API check said "rank 0"
    (RELIABILITY 915)."""
    from lorastudio.lora.file_read import check_lora_values

    path = tmp_path / "rank0.safetensors"
    alpha = down.removesuffix(".lora_A.weight").removesuffix(".lora_down.weight") + ".alpha"
    save_file({down: torch.ones(0, 8), up: torch.ones(8, 0), alpha: torch.tensor(4.0)}, str(path))
    for reader in (read_lora_file, check_lora_values):
        with pytest.raises(ModelSourceError, match=r"rank 0: the adapter matrix .* has shape \[0, 8\]"):
            reader(path)


KOHYA = "lora_unet_down_blocks_1_attentions_0_transformer_blocks_0_attn1_to_q"


def test_an_absurd_alpha_over_its_rank_is_refused_by_every_reader(tmp_path) -> None:
    """One alpha of 1e30 beside a rank-4 F32 layer: no fold overflows (fix 912's check passes
    it), diffusers' loader applied alpha / rank at run time (black images) and `lora convert --to
    kohya` kept it. Now refused at read time naming the file and the alpha (RELIABILITY 951)."""
    from lorastudio.lora.file_read import check_lora_values

    def kohya(alpha: float):
        path = tmp_path / f"k{alpha:g}.safetensors"
        save_file(
            {
                KOHYA + ".lora_down.weight": torch.ones(4, 320),  # [r, in]
                KOHYA + ".lora_up.weight": torch.ones(320, 4),  # [out, r]
                KOHYA + ".alpha": torch.tensor(alpha),
            },
            str(path),
        )
        return path

    for alpha in (1.0, 4.0, 64.0, 4e4):  # up to a scale of 1e4: read
        read_lora_file(kohya(alpha))
        check_lora_values(kohya(alpha))
    for path in (kohya(1e30), kohya(-4.1e4), _file(tmp_path, 1e30)):
        for reader in (read_lora_file, check_lora_values):
            with pytest.raises(
                ModelSourceError, match=rf"{re.escape(path.name)}.*alpha '.*to_q\.alpha' is .* at rank 4"
            ):
                reader(path)


def test_an_absurd_lora_alpha_in_the_adapter_config_is_refused(tmp_path) -> None:
    import json

    for alpha, refused in ((8, False), (1e30, True)):
        path = tmp_path / f"c{alpha:g}.safetensors"
        save_file(
            {LAYER + ".lora_A.weight": torch.ones(4, 8), LAYER + ".lora_B.weight": torch.ones(8, 4)},
            str(path),
            metadata={
                "lora_adapter_metadata": json.dumps({"transformer.r": 4, "transformer.lora_alpha": alpha})
            },
        )
        if refused:
            with pytest.raises(ModelSourceError, match=r"'transformer\.lora_alpha' = 1e\+30 at r = 4"):
                read_lora_file(path)
        else:
            read_lora_file(path)
