"""Reading a LoRA file and checking its values: every reader of a .safetensors LoRA (convert,
merge, resize, the assistant, the generation worker's LoRAs) goes through these.

- `read_lora_file`: (tensors, header metadata) of a file whose header passed
  `lora.header.read_header` / `check_lora_structure` and whose every value is finite.
- `check_lora_values`: the same checks on a file another loader reads (diffusers, the LyCORIS
  patch), one tensor in memory at a time, remembered per unchanged file.
- `check_finite`: the NaN / infinity refusal of one tensor, and of a kohya / LyCORIS `.alpha`
  of 0 (a layer scaled by alpha / rank = 0).
- `widened`: a tensor of an 8-bit float dtype as float32 (torch has no arithmetic on them);
  `widened_kohya_file`: a kohya-layout file so, for generation's loader.
- `fold_layer_alphas` / `has_layer_alphas`: a diffusers-named file's per-layer `.alpha` tensors
  (`transformer.<module>.alpha` beside its lora_A / lora_B: TheLastBen's FLUX trainer and others)
  folded into each layer's lora_B, as ComfyUI applies them.

Each raises NotFound (no such file) or ModelSourceError naming the file and what is wrong.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from pathlib import Path

import torch

from lorastudio import json_read
from lorastudio.errors import ModelSourceError, NotFound
from lorastudio.file_version import FileVersion, version_of
from lorastudio.lora.header import ADAPTER_METADATA_KEY, MAX_ALPHA_SCALE, check_lora_structure, read_header
from lorastudio.lora.header_read import TensorInfo
from lorastudio.open_reason import library_open_reason
from lorastudio.user_paths import is_file, missing_file


def read_lora_file(path: Path) -> tuple[dict[str, torch.Tensor], dict[str, str]]:
    """(tensors, header metadata) of a .safetensors LoRA whose header passed `read_header` and
    `check_lora_structure` and whose every value is finite (`check_finite`); a tensor stored in an
    8-bit float dtype comes back as float32 (`widened`: convert, merge and resize compute on
    them). Raises NotFound, ModelSourceError."""
    from safetensors import SafetensorError, safe_open

    if not is_file(path):
        raise NotFound(missing_file(path, "LoRA file"))
    header = read_header(path)
    check_lora_structure(header)  # header checked (size cap, offsets, dtypes, ranks) first
    try:
        with safe_open(str(path), framework="pt") as f:
            tensors = {k: widened(f.get_tensor(k)) for k in f.keys()}  # noqa: SIM118
            metadata = dict(f.metadata() or {})
    except (SafetensorError, OSError) as err:
        raise ModelSourceError(
            f"{path} is not a readable safetensors file: {library_open_reason(err)}"
        ) from err
    for name, tensor in tensors.items():
        check_finite(path, name, tensor)
        check_alpha_scale(path, name, tensor, header.tensors)
    return fold_layer_alphas(path, tensors, metadata), metadata


# diffusers' denoiser prefixes: a per-layer alpha beside these names is read here (kohya's
# lora_unet_ / ComfyUI's diffusion_model. ones by their own readers, lora/convert_read.py)
_PEFT_PREFIXES = ("transformer.", "unet.")
_A, _B = ".lora_A.weight", ".lora_B.weight"


def has_layer_alphas(keys: Iterable[str]) -> bool:
    """Whether a file of these tensor names holds a diffusers-named layer's `.alpha`
    (`transformer.<module>.alpha` / `unet.<module>.alpha` beside `<module>.lora_A.weight`)."""
    names = set(keys)
    return any(
        k.startswith(_PEFT_PREFIXES) and k.endswith(".alpha") and k.removesuffix(".alpha") + _A in names
        for k in names
    )


def fold_layer_alphas(
    path: Path, tensors: dict[str, torch.Tensor], metadata: Mapping[str, str]
) -> dict[str, torch.Tensor]:
    """`tensors` with each diffusers-named layer's `.alpha` (`has_layer_alphas`) folded into its
    lora_B (B * alpha / rank, computed in float32, stored in B's dtype) and dropped: the layer then
    changes its weight by (alpha / rank) * B @ A under diffusers' rule for a file without alpha
    (scale 1), as ComfyUI applies the file (comfy/lora.py: `<layer>.alpha` beside
    `<layer>.lora_A.weight`). Such files (TheLastBen's FLUX trainer; `transformer.<module>.lora_A.weight`
    + `transformer.<module>.alpha`) were refused by convert, merge, resize and assistant_lora
    ("not a diffusers or kohya LoRA") and by generation for every family but FLUX.1 (diffusers'
    Qwen-Image / Z-Image readers take them for ComfyUI's names and fail naming every module).
    Other tensors come back as they are (a layer without alpha is at scale 1, diffusers' and
    ComfyUI's rule). Raises ModelSourceError for a file that also states alpha in its adapter
    config (`lora_adapter_metadata`: two alphas for one layer)."""
    if not has_layer_alphas(tensors):
        return tensors
    config = json_read.loads(metadata.get(ADAPTER_METADATA_KEY) or "{}")  # JSON: read_header checked it
    if any(k == "lora_alpha" or k.endswith(".lora_alpha") for k in config):
        raise ModelSourceError(
            f"{path} is not a usable LoRA: it gives its layers' alpha twice, as `.alpha` tensors and in"
            " lora_adapter_metadata's lora_alpha; keep one of them"
        )
    out = dict(tensors)
    for key in [k for k in tensors if k.startswith(_PEFT_PREFIXES) and k.endswith(".alpha")]:
        layer = key.removesuffix(".alpha")
        down, up = tensors.get(layer + _A), tensors.get(layer + _B)
        if down is None or up is None:
            continue  # no layer of diffusers' names: left to the structure checks / readers
        scale = float(tensors[key].float()) / down.shape[0]  # alpha / rank
        out[layer + _B] = (up.float() * scale).to(up.dtype)  # [out, r]
        check_folded(path, key, out[layer + _B])
        del out[key]
    return out


def check_folded(path: Path, alpha_key: str, folded: torch.Tensor) -> None:
    """Refuse a lora_B that its layer's alpha / rank, folded in, took past its dtype's range (an
    alpha of 1e30 beside F16 weights: every value inf, every image black, every merge or
    conversion of it the same, where the file's own values passed `check_finite`). Raises
    ModelSourceError naming the file and the alpha."""
    if not bool(torch.isfinite(folded).all()):
        raise ModelSourceError(
            f"{path} is not a usable LoRA: its alpha {alpha_key[:120]!r} over the layer's rank scales"
            f" its weights past what {str(folded.dtype).removeprefix('torch.')} holds (inf)"
        )


_8BIT_FLOATS = frozenset({torch.float8_e4m3fn, torch.float8_e5m2})


def widened(tensor: torch.Tensor) -> torch.Tensor:
    """`tensor` as float32 when it is of an 8-bit float dtype (safetensors' F8_E4M3 / F8_E5M2,
    which lora/header.py admits: torch has no multiply or matmul on them, so a conversion that
    folds alpha / rank, a merge or a resize failed with a NotImplementedError traceback); any
    other tensor as it is."""
    return tensor.float() if tensor.dtype in _8BIT_FLOATS else tensor


def widened_kohya_file(path: Path) -> dict[str, torch.Tensor] | None:
    """The tensors of the kohya / ComfyUI-layout LoRA `path` with its 8-bit float ones as float32
    (`widened`), for a loader that computes on them (diffusers' kohya converters multiply each
    down / up by its alpha share: NotImplementedError on fp8); None when the file holds no 8-bit
    float tensor or is not of that layout (a diffusers file, read with its adapter config, loads
    fp8 as it is). The header is read first (`read_header`)."""
    from safetensors.torch import load_file

    from lorastudio.lora.files import detect_layout

    header = read_header(path)
    if not any(info.dtype in ("F8_E4M3", "F8_E5M2") for info in header.tensors.values()):
        return None
    try:
        if detect_layout(header.tensors) != "kohya":
            return None
    except ModelSourceError:
        return None
    return {k: widened(v) for k, v in load_file(str(path)).items()}


def check_finite(path: Path, name: str, tensor: torch.Tensor) -> None:
    """Refuse a NaN or infinite value in the tensor `name` of the LoRA file `path`: applied, it
    turns every image black (NaN) and every merge, resize or conversion of it into the same.
    Also refuse a kohya / LyCORIS `.alpha` of 0: ComfyUI, diffusers and every reader here scale
    the layer by alpha / rank, so the file would change nothing, without a word (kohya's own
    network code reads 0 as alpha = rank and never writes it). Raises ModelSourceError naming
    the file, the tensor and how many values are bad."""
    finite = torch.isfinite(tensor.float())
    if not bool(finite.all()):
        bad = int(finite.numel() - finite.sum())
        raise ModelSourceError(
            f"{path} is not a usable LoRA: the tensor {name[:120]!r} holds {bad} NaN or infinite value(s)"
        )
    if name.endswith(".alpha") and tensor.numel() == 1 and float(tensor.float()) == 0.0:
        raise ModelSourceError(
            f"{path} is not a usable LoRA: the alpha {name[:120]!r} is 0, so its layer's weight change"
            " (alpha / rank) x up @ down is zero in ComfyUI, diffusers and lorastudio (kohya's trainer"
            " reads 0 as alpha = rank): set it to the rank it was trained with"
        )


# a layer's rank: the first dimension of its down matrix (LoRA), of hada_w1_b (LoHa), of
# lokr_w2_b or else lokr_w1_b (LoKr: ComfyUI's weight_adapter/lokr.py; a LoKr layer without
# either ignores its alpha)
_RANK_OF = (
    ".lora_A.weight",
    ".lora_down.weight",
    ".lora.down.weight",
    ".hada_w1_b",
    ".lokr_w2_b",
    ".lokr_w1_b",
)


def check_alpha_scale(path: Path, name: str, tensor: torch.Tensor, infos: Mapping[str, TensorInfo]) -> None:
    """Refuse a `.alpha` whose alpha / rank is past MAX_ALPHA_SCALE in size (`infos`: the file's
    header tensors, whose shapes give the layer's rank; an alpha without a rank beside it is left
    to the other checks). Raises ModelSourceError naming the file, the alpha and the scale."""
    if not name.endswith(".alpha") or tensor.numel() != 1:
        return
    layer = name.removesuffix(".alpha")
    rank = next(
        (infos[layer + s].shape[0] for s in _RANK_OF if layer + s in infos and infos[layer + s].shape), 0
    )
    if rank and abs(float(tensor.float())) / rank > MAX_ALPHA_SCALE:
        raise ModelSourceError(
            f"{path} is not a usable LoRA: the alpha {name[:120]!r} is {float(tensor.float()):g} at rank"
            f" {rank}, a scale alpha / rank past {MAX_ALPHA_SCALE:g} that no trainer writes (alpha is"
            " usually 1 to a few times the rank): the file is damaged"
        )


# Files that passed check_lora_values, by version (file_version.version_of, ctime included): a
# generation worker checks the LoRAs of every request, and re-reading an unchanged file each time
# cost a read of all of it.
_CHECKED: dict[FileVersion, None] = {}
_CHECKED_MAX = 256


def _identity(path: Path) -> FileVersion | None:
    try:
        st = path.stat()
    except OSError:
        return None
    return version_of(st)


def check_lora_values(path: Path) -> None:
    """`read_lora_file`'s checks (header, structure, finite values) on a file that another loader
    will read (diffusers' load_lora_weights, the LyCORIS patch), one tensor in memory at a time.
    A file that passed is not read again while its size and modification time stay the same (a
    file rewritten in place is checked again). Raises NotFound, ModelSourceError."""
    from safetensors import SafetensorError, safe_open

    if not is_file(path):
        raise NotFound(missing_file(path, "LoRA file"))
    before = _identity(path)
    if before is not None and before in _CHECKED:
        return
    header = read_header(path)
    check_lora_structure(header)
    try:
        with safe_open(str(path), framework="pt") as f:
            for name in f.keys():  # noqa: SIM118
                tensor = f.get_tensor(name)
                check_finite(path, name, tensor)
                check_alpha_scale(path, name, tensor, header.tensors)
    except (SafetensorError, OSError) as err:
        raise ModelSourceError(
            f"{path} is not a readable safetensors file: {library_open_reason(err)}"
        ) from err
    if before is not None and _identity(path) == before:  # unchanged while it was read
        if len(_CHECKED) >= _CHECKED_MAX:
            _CHECKED.pop(next(iter(_CHECKED)))
        _CHECKED[before] = None
