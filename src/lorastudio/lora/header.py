"""Read and check a LoRA file's safetensors header before any tensor is loaded (no torch).

A safetensors file is an 8-byte little-endian header length N, N bytes of JSON
({"__metadata__": {str: str}, name: {"dtype", "shape", "data_offsets": [begin, end]}, ...}),
then the tensor bytes. `read_header` reads only the length and the header, with a size cap, and
checks what the format promises: JSON object, string metadata, known dtypes, non-negative
shapes whose byte size matches their offsets, offsets that tile the data exactly (what the
safetensors library itself requires), and no name given twice. `check_lora_header` then refuses what cannot be a LoRA of
the requested family: no tensors, a rank-0 (empty) adapter, a header or key layout naming
another family. `check_lora_structure` (also run by `lora.file_read.read_lora_file`, for every family)
refuses what no adapter file holds: a tensor that is not floating point, an `.alpha` that is not
one number, a layer whose down and up matrices are missing one another or disagree on the rank.
`read_header` and the header's types live in lora/header_read.py (imported here for callers).
Each refusal names the file and the fact that is wrong (ModelSourceError).
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Mapping
from pathlib import Path

from lorastudio.errors import ModelSourceError
from lorastudio.lora.header_read import LoraHeader, TensorInfo, _bad, read_header
from lorastudio.lora.joint_blocks import block_attention_kinds

FAMILY_KEY = "lorastudio.family"
ADAPTER_METADATA_KEY = "lora_adapter_metadata"  # diffusers' header key (lora_base.py)
# kohya's ss_base_model_version (its start, any case) -> the family it is, or what it is when no
# family of ours, the first that matches: sd-scripts' (sdxl_base_v1-0, flux1), musubi-tuner's
# architecture names (flux_kontext, flux_2_dev, flux_2_klein_4b, qwen_image_edit, z_image) and
# ai-toolkit's (flux.1, flux.1_kontext, flux2_klein_4b, qwen_image, zimage) spellings; "flux_2_dev"
# and "flux_kontext" were FLUX.1 by the "flux" prefix (RELIABILITY 2242)
_KOHYA_VERSIONS = tuple((what, re.compile(pattern, re.IGNORECASE)) for pattern, what in (
    (r"sdxl", "sdxl"), (r"flux[._-]?2[._-]?klein", "flux2-klein"), (r"flux[._-]?2", "flux2"),
    (r"flux[._-]?(1[._-]?)?(dev[._-]?)?kontext", "flux-kontext"), (r"flux", "flux"),
    (r"qwen[._-]?image[._-]?edit", "qwen-image-edit"), (r"qwen[._-]?image", "qwen-image"),
    (r"z[._-]?image", "z-image"), (r"chroma", "chroma"), (r"krea[._-]?2", "krea2"),
    (r"sd_v1", "Stable Diffusion 1.x"), (r"sd_v2", "Stable Diffusion 2.x"), (r"sd3", "Stable Diffusion 3"),
))  # fmt: skip
# families a header's stated version also fits (one layout, one denoiser): sd-scripts and
# lorastudio itself stamp a FLUX.1 Kontext file "flux1"; ai-toolkit stamps its Kontext files
# "flux.1_kontext" (a FLUX.1 file as ever: the same layers) and its Qwen-Image-Edit files
# "qwen_image" (lorastudio's own Qwen-Image-Edit files say qwen_image_edit: kept apart, by design)
_SHARED_VERSIONS: dict[str, frozenset[str]] = {
    "flux": frozenset({"flux", "flux-kontext"}),
    "flux-kontext": frozenset({"flux", "flux-kontext"}),
    "qwen-image": frozenset({"qwen-image", "qwen-image-edit"}),
}
# key patterns that only one family's denoiser has (diffusers or original names, dots or kohya's
# "_"); the U-Net's are SDXL's (an SD 1.x / 2.x U-Net LoRA is told apart by its shapes, at load)
_KEY_KINDS = (
    ("sdxl", re.compile(r"(^|[._])(down_blocks|up_blocks|mid_block|input_blocks|output_blocks|middle_block)[._]")),
    ("flux", re.compile(r"(^|[._])(single_transformer_blocks|double_blocks|single_blocks)[._]\d")),
    ("z-image", re.compile(r"(^|[._])(noise_refiner|context_refiner|layers)[._]\d+[._](attention|feed_forward)")),
    # Qwen-Image's per-stream MLPs and modulations (diffusers' and ComfyUI's names are one; FLUX's
    # img_mlp lives in double_blocks), and Krea 2's (diffusers' and its checkpoint's) own names:
    # without them another family's sampler took these files' attention layers, same names and
    # widths (FLUX.1's 3072), as its own
    ("qwen-image", re.compile(r"(^|[._])transformer_blocks[._]\d+[._](img_mlp|txt_mlp|img_mod|txt_mod)[._]")),
    ("krea2", re.compile(r"(^|[._])(txtfusion|text_fusion)[._]|[._]attn[._](wq|wk|wv|wo|to_gate)([._]|$)")),
)  # fmt: skip
# families whose denoisers share one key kind's names: FLUX.1's double/single blocks are also
# Chroma's (its checkpoint keeps FLUX.1's names) and FLUX.2's (BFL names), so keys alone cannot tell
_SHARED_KEYS: dict[str, frozenset[str]] = {
    "flux": frozenset({"flux", "flux-kontext", "chroma", "flux2", "flux2-klein"}),
    "qwen-image": frozenset({"qwen-image", "qwen-image-edit"}),  # one transformer
}
# The largest |alpha / rank| a layer may have. kohya's sd-scripts defaults alpha to 1 (scale 1/rank)
# or is run at alpha = rank (scale 1, ai-toolkit's linear_alpha default, OneTrainer's too), and
# files seen in the wild stay within a few x rank (alpha 16 at rank 4: scale 4; alpha 128 at rank
# 1 would be 128). A scale past 1e4 multiplies the layer's change 10^4 times what any trainer
# writes: it is a damaged or hostile file (1e30 beside rank 4, below fix 912's overflow in F32,
# gave black images through diffusers' loader and was kept by `lora convert --to kohya`).
MAX_ALPHA_SCALE = 1e4
_DOWN = re.compile(r"(lora_A|lora_down|lora\.down)(\.[A-Za-z_]+)?\.weight$")
FLOAT_DTYPES = frozenset({"F16", "BF16", "F32", "F64", "F8_E4M3", "F8_E5M2"})  # what an adapter's weights are
# a layer's down (A) and up (B) matrix names: down [r, in, ...] and up [out, r, ...] share r
_PAIRS = (("lora_A", "lora_B"), ("lora_down", "lora_up"), ("lora.down", "lora.up"))
_PAIR_KEY = re.compile(
    r"^(?P<layer>.+)\.(?P<part>lora_A|lora_B|lora_down|lora_up|lora\.down|lora\.up)\.weight$"
)
# LyCORIS' factors (ComfyUI's weight_adapter/loha.py, lokr.py; peft's LoHa / LoKr parameters):
# a LoHa layer needs all four, a LoKr layer each of w1 and w2 whole or as its _a / _b pair
_LYCORIS_KEY = re.compile(r"^(?P<layer>.+)\.(?P<part>hada_w[12]_[ab]|lokr_w[12](_[ab])?)$")
_LOHA_PARTS = ("hada_w1_a", "hada_w1_b", "hada_w2_a", "hada_w2_b")
# the denoiser-layer spellings of one layer (kohya's, ComfyUI's generic, diffusers', OneTrainer's)
# and of its parts: a file holding one layer under two of them is applied as one by the loaders
_SPELLINGS = ("lora_unet_", "lora_transformer_", "diffusion_model.", "transformer.", "unet.")
_PART_SPELLINGS = (
    (".lora_A.weight", "down"), (".lora_down.weight", "down"), (".lora.down.weight", "down"),
    (".lora_B.weight", "up"), (".lora_up.weight", "up"), (".lora.up.weight", "up"), (".alpha", "alpha"),
)  # fmt: skip


def shown_value(value: str, limit: int = 60) -> str:
    """`value` (a header's string: any length, any characters) quoted for a message: repr of its
    first `limit` characters, and its length when it is longer. A metadata value may be megabytes
    (kohya's ss_tag_frequency is hundreds of KB): quoted whole, it made a 2 MB error message."""
    return repr(value[:limit]) + (f" (cut: {len(value)} characters)" if len(value) > limit else "")


def lora_family_hint(header: LoraHeader) -> tuple[str, str] | None:
    """(what the file is for, the evidence) from its header: `lorastudio.family`, kohya's
    ss_base_model_version, else key names only one kind of denoiser has. None: no sign. Header
    values are quoted bounded (`shown_value`)."""
    named = header.metadata.get(FAMILY_KEY)
    if named:
        what = named if len(named) <= 60 and named.isprintable() else shown_value(named)
        return what, f"its header says {FAMILY_KEY}={shown_value(named)}"
    version = header.metadata.get("ss_base_model_version", "")
    for what, pattern in _KOHYA_VERSIONS:
        if pattern.match(version):
            return what, f"its header says ss_base_model_version={shown_value(version)}"
    for what, pattern in _KEY_KINDS:
        key = next((k for k in header.tensors if pattern.search(k)), None)
        if key is not None:
            return what, f"it has layers such as {key[:120]!r}"
    return None


def check_lora_header(header: LoraHeader, family: str) -> None:
    """Refuse a file that cannot be a LoRA of `family`: no tensors, a rank-0 adapter (an empty
    down/A matrix or r = 0 in its adapter config), or a header / layers of another family (with
    no key only one family has, block attention layers judged by their depth, width and text
    stream: lora/joint_blocks.py).
    Raises ModelSourceError naming the file and the reason."""
    path = header.path
    if not header.tensors:
        raise _bad(path, "it holds no tensors")
    check_lora_structure(header)
    for name, info in header.tensors.items():  # a rank-0 down matrix: check_lora_structure
        if info.shape and 0 in info.shape:
            raise _bad(path, f"the tensor {name[:120]!r} is empty (shape {list(info.shape)})")
    if header.metadata.get("ss_network_dim", "").strip() == "0":
        raise _bad(path, "rank 0 (ss_network_dim = 0)")
    hint = lora_family_hint(header)
    by_keys = hint is not None and hint[1].startswith("it has layers")
    shared = _SHARED_KEYS if by_keys else _SHARED_VERSIONS  # the header's version: fewer families
    if hint is not None and hint[0] != family and family not in shared.get(hint[0], ()):
        raise ModelSourceError(f"{path} is not a {family} LoRA: it is a {hint[0]} one ({hint[1]})")
    if hint is None and (signs := block_attention_kinds(header.tensors)) is not None:
        kinds, families, evidence = signs  # attention layers alone: their blocks and widths tell
        if family not in families:
            what = " or ".join([", ".join(kinds[:-1]), kinds[-1]] if len(kinds) > 1 else kinds)
            raise ModelSourceError(f"{path} is not a {family} LoRA: it is a {what} one ({evidence})")


def check_lora_structure(header: LoraHeader) -> None:
    """Refuse tensors no adapter file holds, whatever its family or layout: a dtype that is not
    floating point (an integer tensor would be cast silently by the loaders), an `.alpha` that
    is not a single number, a rank-0 down (A) matrix (alpha / rank: every reader's division by
    zero), a layer with a down (A) matrix and no up (B) one or the reverse (a
    LoHa / LoKr layer missing a factor, an `.alpha` / `.dora_scale` without its layer's weights, a
    layer under two spellings), or
    whose down [r, in, ...] and up [out, r, ...] disagree on r (diffusers would fail deep in
    load_state_dict, a conversion would write a file nothing loads), or diffusers' adapter
    config (`lora_adapter_metadata`) giving a rank or alpha that is not a number, or an alpha of
    0 (every layer's weight change scaled to nothing) (its rank_pattern / alpha_pattern too,
    whose keys must be patterns peft can match), or setting use_dora for layers whose
    lora_magnitude_vector the file lacks, or a DoRA file's `lorastudio.dora_scale` naming no rule
    lora/dora_rule.py knows. Raises ModelSourceError naming the file and the tensor."""
    path = header.path
    packed = header.metadata.get(ADAPTER_METADATA_KEY)
    if packed is not None:
        try:
            config = json.loads(packed)
        except (ValueError, RecursionError):
            raise _bad(path, f"{ADAPTER_METADATA_KEY} is not JSON") from None
        if not isinstance(config, dict):
            raise _bad(path, f"{ADAPTER_METADATA_KEY} is not a JSON object")
        ranks = [v for k, v in config.items() if k.endswith(".r") or k == "r"]
        if any(not (type(r) is int and r >= 1) for r in ranks):
            raise _bad(path, f"{ADAPTER_METADATA_KEY} gives an impossible rank {ranks[:3]}")
        alphas = [v for k, v in config.items() if k.endswith(".lora_alpha") or k == "lora_alpha"]
        if any(not (type(a) in (int, float) and math.isfinite(a) and a != 0) for a in alphas):  # 0: no change
            raise _bad(path, f"{ADAPTER_METADATA_KEY} gives an impossible lora_alpha {str(alphas[:3])[:80]}")
        for key, alpha in config.items():  # lora_alpha over the r beside it (MAX_ALPHA_SCALE)
            rank = config.get(key.removesuffix("lora_alpha") + "r") if key.endswith("lora_alpha") else None
            if type(rank) is int and rank >= 1 and abs(alpha) / rank > MAX_ALPHA_SCALE:
                raise _bad(
                    path,
                    f"{ADAPTER_METADATA_KEY} gives {key[:80]!r} = {alpha:g} at r = {rank}, a scale alpha / rank"
                    f" past {MAX_ALPHA_SCALE:g} that no trainer writes",
                )
        for key, value in config.items():
            kind = next(
                (k for k in ("rank_pattern", "alpha_pattern") if key.endswith("." + k) or key == k), None
            )
            if kind is not None and value is not None:
                _check_pattern(path, kind, value)
        for key, value in config.items():  # peft saves a DoRA's magnitudes; without them diffusers
            # would make a DoRA of magnitudes taken from the base weights, convert/merge a LoRA
            own = key.removesuffix("use_dora")
            if (
                (key == "use_dora" or key.endswith(".use_dora"))
                and value is True
                and not any(
                    k.startswith(own) and k.endswith(".lora_magnitude_vector") for k in header.tensors
                )
            ):
                raise _bad(
                    path,
                    f"{ADAPTER_METADATA_KEY} sets {key[:80]!r} but the file holds no lora_magnitude_vector"
                    " of those layers (a DoRA file without its magnitudes)",
                )
    layers: dict[tuple[str, int], dict[str, tuple[str, TensorInfo]]] = {}
    for name, info in header.tensors.items():
        label = repr(name[:120])
        if info.dtype not in FLOAT_DTYPES:
            raise _bad(path, f"the tensor {label} is {info.dtype}, not a floating-point dtype")
        if name.endswith(".alpha") and info.shape not in ((), (1,)):
            raise _bad(path, f"the alpha {label} has shape {list(info.shape)}, not one number")
        if _DOWN.search(name) and (not info.shape or info.shape[0] == 0):  # every reader's: alpha / r
            raise _bad(path, f"rank 0: the adapter matrix {label} has shape {list(info.shape)}")
        match = _PAIR_KEY.match(name)
        if match is not None:
            part = match["part"]
            pair = next(i for i, p in enumerate(_PAIRS) if part in p)
            side = "down" if part == _PAIRS[pair][0] else "up"
            layers.setdefault((match["layer"], pair), {})[side] = (name, info)
    _check_partial_layers(path, header.tensors, {layer for layer, _ in layers})
    _check_two_spellings(path, header.tensors)
    if any(name.endswith(".dora_scale") for name in header.tensors):  # a dora_scale rule no reader
        from lorastudio.lora.dora_rule import dora_rule  # knows (lorastudio.dora_scale): refused

        dora_rule(header.metadata, path)
    for (layer, pair), sides in layers.items():
        down_name, up_name = _PAIRS[pair]
        if len(sides) == 1:
            has, lacks = (down_name, up_name) if "down" in sides else (up_name, down_name)
            raise _bad(path, f"the layer {layer[:120]!r} has a {has}.weight but no {lacks}.weight")
        (_, down), (_, up) = sides["down"], sides["up"]
        if len(down.shape) < 2 or len(up.shape) < 2 or down.shape[0] != up.shape[1]:
            raise _bad(
                path,
                f"the layer {layer[:120]!r}: {down_name} {list(down.shape)} and {up_name} {list(up.shape)}"
                " do not share a rank (down [r, in], up [out, r])",
            )


def _check_partial_layers(path: Path, tensors: Mapping[str, TensorInfo], paired: set[str]) -> None:
    """Refuse a LoHa / LoKr layer missing one of its factors and an `.alpha` (or DoRA
    `.dora_scale`) with no weights of its layer beside it: the loaders skip or fail on such a
    layer (diffusers' converters leave it behind, ComfyUI drops an alpha without its matrices),
    so the file would be applied in part. `paired`: the layers with lora down / up matrices."""
    lycoris: dict[str, set[str]] = {}
    for name in tensors:
        match = _LYCORIS_KEY.match(name)
        if match is not None:
            lycoris.setdefault(match["layer"], set()).add(match["part"])
    for layer, parts in lycoris.items():
        if parts & set(_LOHA_PARTS):
            lacks = [p for p in _LOHA_PARTS if p not in parts]
        else:
            lacks = [
                f"lokr_{w} (or lokr_{w}_a and lokr_{w}_b)"
                for w in ("w1", "w2")
                if f"lokr_{w}" not in parts and not {f"lokr_{w}_a", f"lokr_{w}_b"} <= parts
            ]
        if lacks:
            raise _bad(
                path,
                f"the layer {layer[:120]!r} lacks {', '.join(lacks)} (it holds {', '.join(sorted(parts))})",
            )
    weighted = paired | set(lycoris)
    prefixes = set()  # every dotted prefix of every other tensor's name: the layers that hold weights
    for name in tensors:
        if not name.endswith((".alpha", ".dora_scale")):
            parts = name.split(".")
            prefixes.update(".".join(parts[:i]) for i in range(1, len(parts)))
    for name in tensors:
        if name.endswith((".alpha", ".dora_scale")):
            layer = name.rsplit(".", 1)[0]
            if layer not in weighted and layer not in prefixes:
                raise _bad(
                    path, f"the tensor {name[:120]!r} has no weights of its layer {layer[:120]!r} beside it"
                )


def _check_two_spellings(path: Path, tensors: Mapping[str, TensorInfo]) -> None:
    """Refuse a layer's matrix or alpha present under two spellings (`lora_unet_x_y.lora_down` and
    `diffusion_model.x.y.lora_A`, or `.lora_A` beside `.lora.down`): diffusers' loader applies
    one of them and drops the other without a word (lorastudio's convert refused it already)."""
    seen: dict[tuple[str, str], tuple[str, str]] = {}  # (flat layer, part) -> (key, spelling)
    for name in tensors:
        prefix = next((p for p in _SPELLINGS if name.startswith(p)), None)
        part = next(((s, kind) for s, kind in _PART_SPELLINGS if name.endswith(s)), None)
        if prefix is None or part is None:
            continue
        body = name[len(prefix) : -len(part[0])]
        flat = (body.replace(".", "_"), part[1])
        other = seen.setdefault(flat, (name, prefix + body))
        # the same layer under another prefix, or under the same name with another part spelling
        # (two modules of one spelling whose names differ only by "." and "_" are two layers)
        if other[0] != name and (not other[1].startswith(prefix) or other[1] == prefix + body):
            raise _bad(
                path,
                f"the layer {body[:120]!r} is in the file twice, as {other[0][:120]!r} and {name[:120]!r}"
                " (two spellings of one layer: a loader applies one of them)",
            )


def _check_pattern(path: Path, kind: str, pattern: object) -> None:
    """peft's rank_pattern / alpha_pattern of an adapter config: an object of module patterns
    (regular expressions, as peft matches them) to a rank >= 1 / a finite alpha."""
    where = f"{ADAPTER_METADATA_KEY} {kind}"
    if not isinstance(pattern, dict):
        raise _bad(path, f"{where} is not a JSON object")
    for key, value in pattern.items():
        try:
            re.compile(rf"(.*\.)?({key})$")  # peft's match (peft.utils.other.get_pattern_key)
        except (re.error, RecursionError):
            raise _bad(path, f"{where} key {key[:80]!r} is not a module pattern") from None
        if kind == "rank_pattern" and not (type(value) is int and value >= 1):
            raise _bad(path, f"{where} gives an impossible rank for {key[:80]!r}: {str(value)[:40]}")
        if kind == "alpha_pattern" and not (
            type(value) in (int, float) and math.isfinite(value) and value != 0
        ):
            raise _bad(path, f"{where} gives an impossible alpha for {key[:80]!r}: {str(value)[:40]}")


def check_lora_file(path: Path, family: str) -> LoraHeader:
    """`read_header` then `check_lora_header`: the checks every LoRA passes before it is loaded."""
    header = read_header(path)
    check_lora_header(header, family)
    return header
