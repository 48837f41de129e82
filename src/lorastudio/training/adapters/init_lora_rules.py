"""Whether a run may start from TrainConfig.init_lora, told from the file's header alone (no
torch): the job service's preflight (jobs/validation.py), `lorastudio train --check` and the
engine's preflight all call `init_lora_problems`; `resolve_train_config` takes the file's rank
and alpha through `file_rank_alpha` where lora_rank / lora_alpha are left unset. What needs the
file's weights (its layers by their diffusers names against the run's targets, the weights
themselves): training/adapters/init_lora.py.

The value names a file as other path settings do: an absolute path or `~/...` as it is, a bare
name (no "/", no .safetensors) a trained LoRA of the studio's list (outputs/NAME/NAME.safetensors,
as generation's LoRA picker and `generate --lora NAME` name them: jobs/generation_inputs.lora_file),
any other relative path a file under outputs/ (kept inside it); the CLI makes a config file's
relative path absolute against its directory first (cli/config_file.localize_paths), as it does
a data_dir's.

The file's adapter kind is told by its key names (LyCORIS' lokr_ / hada_ factors, DoRA's
dora_scale / lora_magnitude_vector), its rank by its header (lorastudio's, kohya's ss_network_dim)
else its down (A) matrices' rows, its alpha by lorastudio's header (`lorastudio.alpha`: a
diffusers file of ours holds alpha / rank folded into lora_B), else its `.alpha` tensors (each
over its layer's rank: one scale alpha / rank, the file's alpha = that scale x the rank; a fused
layer of a kohya layout stacks several ranks and alphas), else diffusers' adapter config, else
kohya's ss_network_alpha, else the rank (diffusers' rule).
"""

from __future__ import annotations

import hashlib
import math
import re
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from lorastudio.errors import ConfigError, FieldProblem, LorastudioError, ModelSourceError, NotFound
from lorastudio.user_paths import expand_user, is_file, missing_file, resolved

if TYPE_CHECKING:
    from lorastudio.config import TrainConfig
    from lorastudio.settings import Settings

FIELD = "init_lora"
_DOWN = re.compile(r"^(?P<layer>.+)\.(lora_A|lora_down|lora\.down)\.weight$")
_TE_KEY = re.compile(r"^(lora_te\d*_|lora_te\d*\.|text_encoders?(_\d+)?\.)")  # lora/text_encoder_names' rule
_ADAPTER_KEY = "lora_adapter_metadata"  # diffusers' header key (lora/files.ADAPTER_METADATA_KEY)


@dataclass(frozen=True)
class InitFile:
    """What a LoRA file's header says about starting a run from it.

    path: the file; kind: "lora", "dora", "loha" or "lokr"; rank: the rank its header gives
    (lorastudio's, kohya's ss_network_dim), else its down matrices' most common one (a kohya
    layout's fused layer stacks several: per-layer ranks are read from the weights,
    training/adapters/init_lora.py); alpha: the file's alpha (None where its layers' `.alpha` differ);
    text_encoder_keys: the keys of text-encoder layers."""

    path: Path
    kind: str
    rank: int
    alpha: float | None
    text_encoder_keys: tuple[str, ...]
    dora_scale: bool = False  # a DoRA file in the LyCORIS layout (its rule: lora/dora_rule.py)


def is_local(value: str) -> bool:
    """An init_lora value that is a path as it is (absolute, or from ~)."""
    return value.startswith(("/", "~"))


def is_name(value: str) -> bool:
    """An init_lora value that names a trained LoRA of the studio's list (outputs/NAME/NAME.safetensors)."""
    return "/" not in value and not value.endswith(".safetensors") and not is_local(value)


def form_problems(value: str) -> list[FieldProblem]:
    """The form of an init_lora value (config_rules): a .safetensors path or a LoRA's name."""
    if "\x00" in value:  # no file has one in its name (os.stat raises ValueError for it)
        return [FieldProblem(FIELD, "must not contain a NUL character")]
    if is_name(value):
        return []
    if not value.endswith(".safetensors"):
        return [FieldProblem(FIELD, "must be a .safetensors LoRA file or a trained LoRA's name")]
    if not is_local(value) and ".." in value.split("/"):
        return [FieldProblem(FIELD, "a relative path names a file under outputs/: no '..' part")]
    return []


def init_lora_path(value: str, settings: Settings) -> Path:
    """The file an init_lora value names (module docstring). Raises NotFound naming the value,
    ConfigError / PathOutsideRoot for a name or relative path that is not one."""
    if is_local(value):
        path = expand_user(value)
        if not is_file(path):
            raise NotFound(missing_file(path, "LoRA file"))
        return path
    if is_name(value):
        from lorastudio.jobs.generation_inputs import lora_file

        return lora_file(settings, value)
    root = settings.outputs_dir.resolve()
    path = resolved(root / value)  # None: a NUL byte, a link loop (the config's rules refuse the first)
    if path is None or not path.is_relative_to(root):
        raise NotFound(f"{value} is not a file under {settings.outputs_dir}")
    if not is_file(path):
        raise NotFound(missing_file(path, "LoRA file"))
    return path


def _kind(keys: list[str]) -> str:
    """The adapter kind of a file's keys: lokr / loha (LyCORIS' factors), dora (its per-row scale), lora."""
    if any(".lokr_" in k for k in keys):
        return "lokr"
    if any(".hada_" in k for k in keys):
        return "loha"
    if any(k.endswith((".dora_scale", ".lora_magnitude_vector")) for k in keys):
        return "dora"
    return "lora"


_MARKERS = ((".lokr_", "lokr"), (".hada_", "loha"), (".lora_up.", "lora"), (".lora_down.", "lora"),
            (".lora_A.", "lora"), (".lora_B.", "lora"))  # fmt: skip


def _mixed(path: Path, keys: list[str]) -> None:
    """Raise ModelSourceError when the file's layers are of several kinds (LoKr, LoHa, LoRA /
    DoRA: a LyCORIS preset's per-module algo, `module_algo_map`): a run trains one adapter kind,
    and the loader cannot put a layer of another kind into it (it crashed, 'Linear' object has no
    attribute 'lora_A')."""
    seen: dict[str, str] = {}  # kind -> a layer of it
    for key in keys:
        for marker, kind in _MARKERS:
            if marker in key:
                seen.setdefault(kind, key.split(marker)[0])
                break
    if len(seen) > 1:
        layers = ", ".join(f"{kind} ({layer[:80]})" for kind, layer in sorted(seen.items()))
        raise ModelSourceError(
            f"{path} mixes layers of several adapter kinds: {layers} (a LyCORIS preset's per-module algo); "
            "a run trains one kind, so it cannot start from this file"
        )


def _alphas(path: Path, names: list[str]) -> list[float]:
    """The values of a file's `.alpha` tensors (each one number; safetensors' numpy reader: no torch)."""
    from safetensors import SafetensorError, safe_open

    try:
        with safe_open(str(path), framework="numpy") as f:
            return [float(f.get_tensor(n).reshape(-1)[0]) for n in names]
    except (SafetensorError, OSError, ValueError) as err:
        raise ModelSourceError(f"{path}: its alpha tensors cannot be read: {err}") from err


def _header_alpha(metadata: dict[str, str]) -> float | None:
    """The alpha a file's header gives: diffusers' adapter config's, else kohya's
    ss_network_alpha; None when neither gives one."""
    packed = _packed_alpha(metadata)
    return packed if packed is not None else _number(metadata.get("ss_network_alpha"))


def _number(text: str | None) -> float | None:
    """A positive finite number a header string holds, else None."""
    try:
        value = float(text or "")
    except ValueError:
        return None
    return value if 0 < value < float("inf") else None


def _whole(text: str | None) -> int | None:
    """A rank a header string states: a whole number >= 1, else None ("0.5" is no rank, never 0)."""
    value = _number(text)
    return int(value) if value is not None and value >= 1 and value.is_integer() else None


def _packed_alpha(metadata: dict[str, str]) -> float | None:
    """The lora_alpha of diffusers' adapter config in a header, None without one."""
    from lorastudio import json_read

    packed = metadata.get(_ADAPTER_KEY)
    if packed is None:
        return None
    try:
        config = json_read.loads(packed)
    except (ValueError, RecursionError):
        return None
    alphas = [v for k, v in config.items() if k.endswith("lora_alpha") and isinstance(v, int | float)]
    return float(alphas[0]) if alphas else None


def read_init_file(path: Path, family: str) -> InitFile:
    """The InitFile of the LoRA `path` for a run of `family`: its header read and checked as every
    LoRA's is (lora/header.check_lora_file: a file of another family is refused naming both).
    Raises NotFound, ModelSourceError (also for a file of several adapter kinds: `_mixed`; a DoRA
    file whose header names a dora_scale rule no reader knows: check_lora_file)."""
    from lorastudio.lora.header import check_lora_file

    header = check_lora_file(path, family)
    keys = list(header.tensors)
    _mixed(path, keys)
    te = tuple(k for k in keys if _TE_KEY.match(k))
    ranks = {}
    for key, info in header.tensors.items():
        match = _DOWN.match(key)
        if match is not None and not _TE_KEY.match(key):
            ranks[match["layer"]] = int(info.shape[0])
    if not ranks:
        lyco = [int(i.shape[0]) for k, i in header.tensors.items() if k.endswith(("_w1_a", "_w2_a", "_w2_b"))]
        ranks = {"(all)": min(lyco)} if lyco else {}
    stated = _whole(header.metadata.get("lorastudio.rank")) or _whole(header.metadata.get("ss_network_dim"))
    rank = stated if stated else Counter(ranks.values()).most_common(1)[0][0] if ranks else 0
    alpha_keys = [k for k in keys if k.endswith(".alpha") and k.removesuffix(".alpha") in ranks]
    alpha = _number(header.metadata.get("lorastudio.alpha"))  # a file of ours: the run's alpha
    if alpha is None and alpha_keys:  # each layer's alpha / its rank: one scale, the file's alpha
        scales = {
            a / ranks[k.removesuffix(".alpha")]
            for k, a in zip(alpha_keys, _alphas(path, alpha_keys), strict=True)
        }
        one = scales.pop() if len(scales) == 1 else None
        alpha = (
            one * rank if one is not None and math.isfinite(one) and one > 0 else None
        )  # 0 / NaN: read_lora_file's refusal
    elif alpha is None:
        alpha = _header_alpha(header.metadata)
        alpha = (float(rank) if rank else None) if alpha is None else alpha  # rank 0: not told
    return InitFile(path, _kind(keys), rank, alpha, te, any(k.endswith(".dora_scale") for k in keys))


def file_rank_alpha(cfg: TrainConfig, settings: Settings) -> tuple[int, float | None] | None:
    """(the most common rank, the alpha) of cfg.init_lora's file for resolve_train_config, or None
    where there is no file to read (unset, not found, not a LoRA of the family: init_lora_problems
    says why)."""
    if cfg.init_lora is None:
        return None
    try:
        found = read_init_file(init_lora_path(cfg.init_lora, settings), cfg.family)
    except (LorastudioError, OSError):
        return None
    if bounds_problems(found):  # a rank or alpha no run takes: refused by init_lora_problems
        return None
    return (found.rank, found.alpha) if found.rank else None


MAX_RANK, MAX_ALPHA = 1024, 4096.0  # TrainConfig.lora_rank's and lora_alpha's bounds


def bounds_problems(found: InitFile) -> list[FieldProblem]:
    """A rank or alpha of the file that TrainConfig cannot hold (a header's stated rank of 10^6,
    an alpha past 4096): refused naming the file, never resolved into a config that fails."""
    problems = []
    if found.rank and not 1 <= found.rank <= MAX_RANK:  # 0: not told (a LoKr of full factors)
        problems.append(
            FieldProblem(FIELD, f"{found.path.name} is of rank {found.rank}; a run takes 1 to {MAX_RANK}")
        )
    if found.alpha is not None and not 0 < found.alpha <= MAX_ALPHA:
        problems.append(
            FieldProblem(
                FIELD, f"{found.path.name}'s alpha is {found.alpha:g}; a run takes up to {MAX_ALPHA:g}"
            )
        )
    return problems


def init_lora_notes(cfg: TrainConfig, settings: Settings) -> list[str]:
    """What the train preflight says of cfg.init_lora beside its problems: the warning of a
    LyCORIS-layout DoRA file whose header names no dora_scale rule (lora/dora_rule.untold_warnings:
    read by ComfyUI's rule, a guess; the run says it again as its warning, InitLoad.note). []
    without init_lora, and for a file init_lora_problems refuses (it says why)."""
    from lorastudio.lora.dora_rule import untold_warnings

    if cfg.init_lora is None:
        return []
    try:
        return untold_warnings([init_lora_path(cfg.init_lora, settings)])
    except (LorastudioError, OSError):
        return []


def init_lora_problems(cfg: TrainConfig, settings: Settings, explicit: set[str]) -> list[FieldProblem]:
    """Why cfg.init_lora cannot start this run ([] when it can, or is unset). `cfg`: resolved;
    `explicit`: the settings the user gave (TrainConfig.model_fields_set of the config as given),
    so that a rank or alpha the file set is not taken for the user's. Reads the header and the
    `.alpha` tensors only; a file's layers against the run's targets: training/adapters/init_lora.py."""
    value = cfg.init_lora
    if value is None:
        return []
    try:
        found = read_init_file(init_lora_path(value, settings), cfg.family)
    except ConfigError as err:
        return [FieldProblem(FIELD, p.message) for p in err.problems]
    except (LorastudioError, OSError) as err:
        return [FieldProblem(FIELD, str(err))]
    name = found.path.name
    problems = [p for p in [in_run_folder(found.path, str(cfg.output_name), settings)] if p is not None]
    problems += bounds_problems(found)
    if found.kind != cfg.adapter:
        problems.append(
            FieldProblem(
                FIELD,
                f"{name} is a {found.kind} file and the run's adapter is {cfg.adapter!r}: set adapter = "
                f"{found.kind!r} to continue it",
            )
        )
    if found.text_encoder_keys and not cfg.train_text_encoder:
        problems.append(
            FieldProblem(
                FIELD,
                f"{name} holds text-encoder layers (e.g. {found.text_encoder_keys[0][:100]!r}), which a run "
                "without train_text_encoder would drop: set train_text_encoder = true to train them on"
                + ("" if cfg.family == "sdxl" else f" (SDXL only: a {cfg.family} run cannot)"),
            )
        )
    if "lora_rank" in explicit and found.rank and cfg.lora_rank != found.rank:
        problems.append(
            FieldProblem(
                "lora_rank",
                f"is {cfg.lora_rank} but {name} is of rank {found.rank}: leave it unset (or set {found.rank})",
            )
        )
    if "lora_alpha" in explicit and found.alpha is not None and cfg.lora_alpha != found.alpha:
        problems.append(
            FieldProblem(
                "lora_alpha",
                f"is {cfg.lora_alpha:g} but {name}'s alpha is {found.alpha:g} (its scale alpha / rank would "
                f"change): leave it unset (or set {found.alpha:g})",
            )
        )
    if cfg.alpha_pattern:  # rank_pattern: the file's own is taken (training/adapters/init_lora.init_problems)
        problems.append(
            FieldProblem("alpha_pattern", f"init_lora keeps {name}'s alpha / rank in every layer: remove it")
        )
    return problems


def in_run_folder(path: Path, output_name: str, settings: Settings) -> FieldProblem | None:
    """The refusal of an init file inside the run's own output folder (outputs/<output_name>/):
    a fresh run's folder must not exist, and `train --overwrite` removes it, file and all, before
    the run starts (cli/train_check.check_run asks this for the name it replaces). None elsewhere."""
    folder, found = resolved(settings.outputs_dir / output_name), resolved(path)
    if folder is None or found is None or not found.is_relative_to(folder):
        return None
    return FieldProblem(
        FIELD,
        f"{path} is in the run's own output folder {settings.outputs_dir / output_name}, which a fresh run "
        "replaces (--overwrite removes it first): copy the file elsewhere or choose another output_name",
    )


def file_sha256(path: Path) -> str:
    """The sha256 of a file's bytes (hex)."""
    digest = hashlib.sha256()
    with path.open("rb") as fh:
        for block in iter(lambda: fh.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def unchanged_since_preflight(path: Path, sha256: str) -> None:
    """Raise ModelSourceError when init_lora file `path`'s bytes are no longer those the preflight
    hashed (`sha256`): asked before and after a run's load reads it (training/adapters/init_lora.py)."""
    if file_sha256(path) != sha256:
        raise ModelSourceError(f"init_lora {path} changed since the run's preflight read it")
