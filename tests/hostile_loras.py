"""Hostile LoRA files for the header checks (lora/header.py): each case is the file's bytes and a
fragment of the refusal it must get when used as a FLUX.1 LoRA. Shared by the unit, API and CLI
tests."""

from __future__ import annotations

import json
import struct

FLUX_KEY = "transformer.single_transformer_blocks.0.attn.to_q"


def safetensors_bytes(header: dict | bytes, data: bytes = b"") -> bytes:
    """A safetensors file: 8-byte little-endian header length, the header, the data."""
    raw = header if isinstance(header, bytes) else json.dumps(header).encode()
    return struct.pack("<Q", len(raw)) + raw + data


def _tensor(shape: list[int], begin: int, dtype: str = "F32") -> dict:
    size = 4
    for d in shape:
        size *= d
    return {"dtype": dtype, "shape": shape, "data_offsets": [begin, begin + size]}


def flux_lora_bytes(rank: int = 2, metadata: dict | None = None, key: str = FLUX_KEY) -> bytes:
    """A well-formed tiny LoRA (one module, A [rank, 4], B [4, rank]) with `metadata`."""
    a = _tensor([rank, 4], 0)
    b = _tensor([4, rank], a["data_offsets"][1])
    header: dict = {f"{key}.lora_A.weight": a, f"{key}.lora_B.weight": b}
    if metadata is not None:
        header["__metadata__"] = metadata
    return safetensors_bytes(header, bytes(b["data_offsets"][1]))


def tensors_bytes(shapes: dict[str, list[int]], metadata: dict | None = None) -> bytes:
    """A file of zero-filled F32 tensors of these names and shapes, laid out one after another."""
    header: dict = {}
    at = 0
    for name, shape in shapes.items():
        header[name] = _tensor(shape, at)
        at = header[name]["data_offsets"][1]
    if metadata is not None:
        header["__metadata__"] = metadata
    return safetensors_bytes(header, bytes(at))


def qwen_image_attention_shapes(
    blocks: tuple[int, ...],
    prefix: str = "transformer.",
    projections: tuple[str, ...] = ("to_q", "add_q_proj"),
) -> dict[str, list[int]]:
    """A rank-1 Qwen-Image LoRA of attention layers only (diffusers' names: FLUX.1's double blocks'
    too, at FLUX.1's width 3072) on `blocks`: tensor name -> shape, for `tensors_bytes`."""
    shapes: dict[str, list[int]] = {}
    for block in blocks:
        for proj in projections:
            layer = f"{prefix}transformer_blocks.{block}.attn.{proj}"
            shapes[f"{layer}.lora_A.weight"], shapes[f"{layer}.lora_B.weight"] = [1, 3072], [3072, 1]
    return shapes


def hostile_cases() -> dict[str, tuple[bytes, str]]:
    """name -> (file bytes, what the refusal says)."""
    unet = "unet.down_blocks.1.attentions.0.transformer_blocks.0.attn1.to_q"
    return {
        "too_short": (b"abc", "too short for a safetensors header"),
        "huge_header": (struct.pack("<Q", 2**40) + b"{}", "is larger than the 16777216 allowed"),
        "header_past_end": (struct.pack("<Q", 1000) + b"{}", "runs past the end of the file"),
        # another format named .safetensors (session 36: "a header of 4404653942100549990 bytes is
        # larger than the 16777216 allowed" for a text file, "runs past the end" for a zip)
        "text_file": (b'family = "flux"\nsteps = 10\n', "it is not a safetensors file"),
        "zip_checkpoint": (b"PK\x03\x04" + bytes(60), "it is not a safetensors file"),
        "not_json": (safetensors_bytes(b"\xff\xfe not json"), "its header is not JSON"),
        "deep_json": (safetensors_bytes(b"[" * 200_000 + b"]" * 200_000), "its header is not JSON"),
        "json_array": (safetensors_bytes(b"[1, 2]"), "its header is not a JSON object"),
        "metadata_not_string": (
            flux_lora_bytes(metadata={"lorastudio.family": "flux", "lorastudio.rank": 2}),
            "metadata 'lorastudio.rank' is a int, not a string",
        ),
        "metadata_not_object": (flux_lora_bytes(metadata=["x"]), "__metadata__ is not an object"),  # type: ignore[arg-type]
        "absurd_shape": (
            safetensors_bytes(
                {
                    f"{FLUX_KEY}.lora_A.weight": {
                        "dtype": "F32",
                        "shape": [2**39, 2**39],
                        "data_offsets": [0, 16],
                    }
                },
                bytes(16),
            ),
            "do not hold a F32 tensor of shape",
        ),  # fmt: skip
        "negative_shape": (
            safetensors_bytes({"x": {"dtype": "F32", "shape": [-1, 4], "data_offsets": [0, 16]}}, bytes(16)),
            "impossible shape",
        ),
        "unknown_dtype": (
            safetensors_bytes({"x": {"dtype": "X99", "shape": [4], "data_offsets": [0, 16]}}, bytes(16)),
            "unknown dtype",
        ),
        "offsets_past_the_data": (
            safetensors_bytes({"x": _tensor([2, 2], 0)}, bytes(8)),
            "the tensors describe 16 bytes of data, the file holds 8",
        ),
        "overlapping_tensors": (
            safetensors_bytes({"x": _tensor([2, 2], 0), "y": _tensor([2, 2], 0)}, bytes(32)),
            "overlaps or leaves a gap",
        ),
        "no_tensors": (safetensors_bytes({"__metadata__": {"format": "pt"}}), "it holds no tensors"),
        "rank_0": (flux_lora_bytes(rank=0), "rank 0: the adapter matrix"),
        "adapter_config_rank_0": (
            flux_lora_bytes(metadata={"lora_adapter_metadata": json.dumps({"transformer.r": 0})}),
            "lora_adapter_metadata gives an impossible rank",
        ),
        "kohya_dim_0": (flux_lora_bytes(metadata={"ss_network_dim": "0"}), "rank 0 (ss_network_dim = 0)"),
        # peft's per-layer patterns (lora convert / merge / resize read them: tracebacks before)
        "rank_pattern_not_a_rank": (
            flux_lora_bytes(
                metadata={"lora_adapter_metadata": json.dumps({"transformer.rank_pattern": {"to_q": "x"}})}
            ),
            "lora_adapter_metadata rank_pattern gives an impossible rank for 'to_q'",
        ),
        "rank_pattern_a_list": (
            flux_lora_bytes(
                metadata={"lora_adapter_metadata": json.dumps({"transformer.rank_pattern": [1]})}
            ),
            "lora_adapter_metadata rank_pattern is not a JSON object",
        ),
        "alpha_pattern_bad_regex": (
            flux_lora_bytes(
                metadata={"lora_adapter_metadata": json.dumps({"transformer.alpha_pattern": {"(": 3}})}
            ),
            "lora_adapter_metadata alpha_pattern key '(' is not a module pattern",
        ),
        "alpha_pattern_nan": (
            flux_lora_bytes(
                metadata={"lora_adapter_metadata": json.dumps({"transformer.alpha_pattern": {"to_q": "NaN"}})}
            ),
            "lora_adapter_metadata alpha_pattern gives an impossible alpha for 'to_q'",
        ),
        # a layer the loaders would skip or fail on: the file would be applied in part
        "loha_without_w2": (
            tensors_bytes(
                {
                    f"lycoris_{FLUX_KEY.replace('.', '_')}.hada_w1_a": [4, 2],
                    f"lycoris_{FLUX_KEY.replace('.', '_')}.hada_w1_b": [2, 4],
                }
            ),
            "lacks hada_w2_a, hada_w2_b (it holds hada_w1_a, hada_w1_b)",
        ),  # fmt: skip
        "lokr_without_w2": (
            tensors_bytes({f"{FLUX_KEY}.lokr_w1": [2, 2], f"{FLUX_KEY}.lokr_w2_a": [2, 1]}),
            "lacks lokr_w2 (or lokr_w2_a and lokr_w2_b)",
        ),
        "alpha_without_its_layer": (
            tensors_bytes(
                {
                    f"{FLUX_KEY}.lora_A.weight": [2, 4],
                    f"{FLUX_KEY}.lora_B.weight": [4, 2],
                    "lora_unet_single_blocks_1_linear2.alpha": [],
                }
            ),
            "the tensor 'lora_unet_single_blocks_1_linear2.alpha' has no weights of its layer",
        ),  # fmt: skip
        "dora_scale_without_its_layer": (
            tensors_bytes(
                {
                    f"{FLUX_KEY}.lora_A.weight": [2, 4],
                    f"{FLUX_KEY}.lora_B.weight": [4, 2],
                    "lycoris_single_blocks_3_linear2.dora_scale": [4, 1],
                }
            ),
            "has no weights of its layer 'lycoris_single_blocks_3_linear2'",
        ),  # fmt: skip
        "one_layer_two_spellings": (  # diffusers' loader applied one of the two, silently
            tensors_bytes(
                {
                    "lora_unet_double_blocks_0_img_attn_proj.lora_down.weight": [2, 4],
                    "lora_unet_double_blocks_0_img_attn_proj.lora_up.weight": [4, 2],
                    "diffusion_model.double_blocks.0.img_attn.proj.lora_A.weight": [2, 4],
                    "diffusion_model.double_blocks.0.img_attn.proj.lora_B.weight": [4, 2],
                }
            ),
            "is in the file twice, as 'lora_unet_double_blocks_0_img_attn_proj.lora_down.weight' and "
            "'diffusion_model.double_blocks.0.img_attn.proj.lora_A.weight'",
        ),
        "adapter_config_alpha_0": (
            flux_lora_bytes(metadata={"lora_adapter_metadata": json.dumps({"transformer.lora_alpha": 0})}),
            "lora_adapter_metadata gives an impossible lora_alpha [0]",
        ),
        "alpha_pattern_0": (
            flux_lora_bytes(
                metadata={"lora_adapter_metadata": json.dumps({"transformer.alpha_pattern": {"to_q": 0}})}
            ),
            "lora_adapter_metadata alpha_pattern gives an impossible alpha for 'to_q': 0",
        ),
        "another_family_in_header": (
            flux_lora_bytes(metadata={"lorastudio.family": "sdxl"}),
            "is not a flux LoRA: it is a sdxl one (its header says lorastudio.family='sdxl'",
        ),
        "an_sd15_kohya_file": (
            flux_lora_bytes(metadata={"ss_base_model_version": "sd_v1"}),
            "is not a flux LoRA: it is a Stable Diffusion 1.x one (its header says ss_base_model_version='sd_v1'",
        ),
        "qwen_image_layers": (
            flux_lora_bytes(key="transformer.transformer_blocks.0.img_mlp.net.0.proj"),
            "is not a flux LoRA: it is a qwen-image one (it has layers such as 'transformer.transformer_blocks.0.img_mlp",
        ),
        "qwen_image_attention_layers": (  # FLUX.1's names and width; block 59 of Qwen-Image's 60
            tensors_bytes(qwen_image_attention_shapes((0, 59))),
            "is not a flux LoRA: it is a qwen-image one (it has attention layers of blocks up to 59",
        ),
        "krea2_layers": (
            flux_lora_bytes(key="diffusion_model.blocks.3.attn.wq"),
            "is not a flux LoRA: it is a krea2 one (it has layers such as 'diffusion_model.blocks.3.attn.wq",
        ),
        "unet_layers": (
            flux_lora_bytes(key=unet),
            "is not a flux LoRA: it is a sdxl one (it has layers such as 'unet.down_blocks",
        ),
    }
