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

Each raises NotFound (no such file) or ModelSourceError naming the file and what is wrong.
"""

from __future__ import annotations

from pathlib import Path

import torch

from lorastudio.errors import ModelSourceError, NotFound
from lorastudio.file_version import FileVersion, version_of
from lorastudio.lora.header import check_lora_structure, read_header
from lorastudio.user_paths import is_file, missing_file


def read_lora_file(path: Path) -> tuple[dict[str, torch.Tensor], dict[str, str]]:
    """(tensors, header metadata) of a .safetensors LoRA whose header passed `read_header` and
    `check_lora_structure` and whose every value is finite (`check_finite`); a tensor stored in an
    8-bit float dtype comes back as float32 (`widened`: convert, merge and resize compute on
    them). Raises NotFound, ModelSourceError."""
    from safetensors import SafetensorError, safe_open

    if not is_file(path):
        raise NotFound(missing_file(path, "LoRA file"))
    check_lora_structure(read_header(path))  # header checked (size cap, offsets, dtypes, ranks) first
    try:
        with safe_open(str(path), framework="pt") as f:
            tensors = {k: widened(f.get_tensor(k)) for k in f.keys()}  # noqa: SIM118
            metadata = dict(f.metadata() or {})
    except (SafetensorError, OSError) as err:
        raise ModelSourceError(f"{path} is not a readable safetensors file: {err}") from err
    for name, tensor in tensors.items():
        check_finite(path, name, tensor)
    return tensors, metadata


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
    check_lora_structure(read_header(path))
    try:
        with safe_open(str(path), framework="pt") as f:
            for name in f.keys():  # noqa: SIM118
                check_finite(path, name, f.get_tensor(name))
    except (SafetensorError, OSError) as err:
        raise ModelSourceError(f"{path} is not a readable safetensors file: {err}") from err
    if before is not None and _identity(path) == before:  # unchanged while it was read
        if len(_CHECKED) >= _CHECKED_MAX:
            _CHECKED.pop(next(iter(_CHECKED)))
        _CHECKED[before] = None
