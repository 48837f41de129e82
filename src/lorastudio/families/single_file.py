"""Loading a family's components from a single-file checkpoint through diffusers'
`from_single_file`, with the configs (and the components the file lacks) of a base config.

A run's base is either a source string (a pipeline folder or hub id) or a `SingleFile` (the
checkpoint, its base config, and the prediction type the run trains it as); `model_source(cfg)`
says which, and the Family hooks take both (families/base.py). Which components a file replaces
is the layout row's (basemodels/single_file.LAYOUTS): SDXL files hold the U-Net, the VAE and both
text encoders; FLUX.1 / Chroma files the transformer only.

A denoiser or VAE from the file: only its keys are read (safetensors' lazy reader), converted by
diffusers' own mapping function of the class (convert_ldm_unet_checkpoint,
convert_ldm_vae_checkpoint) or, for BFL's layout, by families/bfl_keys.py (diffusers' converter
is fixed to FLUX.1's width), checked against the model the config builds (missing or extra
weights are refused by name: diffusers would leave missing ones on the meta device), then
handed to `from_single_file`, which loads them as they are. SDXL's text encoders come through
the pipeline's `from_single_file` (diffusers' CLIP / OpenCLIP converters). Imports torch only
when loading: the server reads `model_source` through training/adapters/assistant_rules.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from lorastudio.errors import ModelSourceError
from lorastudio.hub_token import hub_kwargs
from lorastudio.open_reason import library_open_reason

if TYPE_CHECKING:
    import torch

    from lorastudio.config import TrainConfig
    from lorastudio.families.base import FamilySpec


@dataclass(frozen=True)
class SingleFile:
    """A single-file base: `file` the .safetensors checkpoint, `config` the pipeline folder or
    hub id of its configs and missing components (the hooks' `revision` is that hub id's);
    `v_prediction` None = the config's scheduler decides; `zero_terminal_snr` from the file."""

    file: str
    config: str
    components: tuple[str, ...]
    v_prediction: bool | None = None
    zero_terminal_snr: bool = False


def model_source(cfg: TrainConfig) -> str | SingleFile:
    """What a resolved run config's base loads from: `cfg.base_model` (folder or hub id), or a
    SingleFile when it is a checkpoint file (preflight resolved `cfg.base_config` for it)."""
    if cfg.base_config is None or not Path(cfg.base_model).is_file():
        return cfg.base_model
    return single_file(cfg.base_model, cfg.base_config, cfg.v_prediction)


def single_file(file: str, config: str, v_prediction: bool | None) -> SingleFile:
    """The SingleFile of checkpoint `file` (read from its header: layout, markers) with base
    config `config`; `v_prediction` None takes what the file says. Raises ModelSourceError."""
    from lorastudio.basemodels.single_file import read_file_facts

    facts = read_file_facts(Path(file))
    v_pred = v_prediction if v_prediction is not None else facts.v_prediction
    return SingleFile(file, config, facts.layout.components, v_pred, facts.zero_terminal_snr)


def config_of(source: str | SingleFile) -> str:
    """Where configs are read: the source itself, or a single file's base config."""
    return source.config if isinstance(source, SingleFile) else source


def scheduler_overrides(source: str | SingleFile) -> dict[str, Any]:
    """Scheduler config entries a single file sets over its base config's: prediction_type
    (v_prediction given or read from the file), rescale_betas_zero_snr (its `ztsnr` marker)."""
    if not isinstance(source, SingleFile):
        return {}
    out: dict[str, Any] = {}
    if source.v_prediction is not None:
        out["prediction_type"] = "v_prediction" if source.v_prediction else "epsilon"
    if source.zero_terminal_snr:
        out["rescale_betas_zero_snr"] = True
    return out


# the keys of a component in an SGM file (read alone: one component in memory, not the file)
COMPONENT_PREFIXES = {"unet": ("model.diffusion_model.",), "vae": ("first_stage_model.",)}
# parts a ComfyUI "full" FLUX.1 / Chroma file bundles beside its transformer (not read)
BUNDLED_PREFIXES = ("vae.", "first_stage_model.", "text_encoders.", "conditioner.", "cond_stage_model.")


def _checkpoint(sf: SingleFile, subfolder: str) -> dict[str, torch.Tensor]:
    """The file's tensors of component `subfolder` (safetensors' lazy reader: nothing else is
    read). Raises ModelSourceError when the file cannot be read."""
    from safetensors import safe_open

    wanted = COMPONENT_PREFIXES.get(subfolder)
    try:
        with safe_open(sf.file, framework="pt") as f:
            return {
                k: f.get_tensor(k)
                for k in f.keys()  # noqa: SIM118 (safe_open has no __iter__)
                if (k.startswith(wanted) if wanted else not k.startswith(BUNDLED_PREFIXES))
            }
    except (OSError, ValueError, RuntimeError) as err:
        raise ModelSourceError(f"cannot read the checkpoint {sf.file}: {library_open_reason(err)}") from err


def _no_meta(model: Any, sf: SingleFile, component: str) -> Any:
    missing = [name for name, p in model.named_parameters() if p.is_meta]
    if missing:
        raise ModelSourceError(
            f"{sf.file} lacks {len(missing)} weight(s) of its {component} ({', '.join(missing[:4])}"
            f"{', ...' if len(missing) > 4 else ''}): the checkpoint is incomplete"
        )
    return model


def load_file_component(
    cls: Any, sf: SingleFile, subfolder: str, revision: str | None, dtype: torch.dtype
) -> Any:
    """Component `subfolder` (class `cls`) of a single-file base: from the file when it holds
    it (diffusers' from_single_file with the base config's `subfolder` config), else from the
    base config. Raises ModelSourceError (unreadable, incomplete, not the config's shape)."""
    from lorastudio.families.loading import load_component, quiet_loading

    if subfolder not in sf.components:
        return load_component(cls, sf.config, subfolder, revision, dtype=dtype)
    quiet_loading()
    checkpoint = _converted(cls, sf, subfolder, revision)
    try:  # keys already diffusers': from_single_file loads them as they are
        model = cls.from_single_file(
            checkpoint, config=sf.config, subfolder=subfolder, config_revision=revision, **hub_kwargs()
        )
    except (OSError, ValueError, KeyError, RuntimeError) as err:
        raise ModelSourceError(
            f"cannot load {subfolder!r} ({cls.__name__}) from {sf.file} with the config of {sf.config}: "
            f"{library_open_reason(err)}"
        ) from err
    return _no_meta(model, sf, subfolder).to(dtype)


def _converted(cls: Any, sf: SingleFile, subfolder: str, revision: str | None) -> dict[str, torch.Tensor]:
    """Component `subfolder` of the file in diffusers' keys (SGM: diffusers' own converter of
    `cls`, convert_ldm_unet_checkpoint / convert_ldm_vae_checkpoint; BFL: bfl_keys), checked
    against the model the base config builds: every weight there, none left over. Raises
    ModelSourceError naming the missing or extra weights (an incomplete file, another config)."""
    import torch
    from diffusers.loaders.single_file_model import SINGLE_FILE_LOADABLE_CLASSES

    from lorastudio.families.bfl_keys import bfl_to_diffusers

    try:
        config = cls.load_config(sf.config, subfolder=subfolder, revision=revision, **hub_kwargs())
        raw = _checkpoint(sf, subfolder)
        if cls.__name__ in ("FluxTransformer2DModel", "ChromaTransformer2DModel"):
            converted = bfl_to_diffusers(raw, config)
        else:
            converted = SINGLE_FILE_LOADABLE_CLASSES[cls.__name__]["checkpoint_mapping_fn"](
                checkpoint=raw, config=config
            )
        with torch.device("meta"):
            expected = set(cls.from_config(config).state_dict())
    except KeyError as err:
        raise ModelSourceError(
            f"{sf.file} lacks {err} of its {subfolder}: the checkpoint is incomplete"
        ) from err
    except (OSError, ValueError, RuntimeError) as err:
        raise ModelSourceError(f"cannot convert the {subfolder} of {sf.file}: {err}") from err
    missing = sorted(expected - set(converted))
    if missing:
        raise ModelSourceError(
            f"{sf.file} lacks {len(missing)} {subfolder} weight(s) the config of {sf.config} has "
            f"({', '.join(missing[:4])}{', ...' if len(missing) > 4 else ''}): the checkpoint is "
            "incomplete or of another shape"
        )
    unexpected = sorted(set(converted) - expected)
    if unexpected:  # e.g. a FLUX.1 [dev] file (guidance embedding) with a [schnell] config
        raise ModelSourceError(
            f"{sf.file} has {len(unexpected)} {subfolder} weight(s) the config of {sf.config} does not "
            f"({', '.join(unexpected[:4])}{', ...' if len(unexpected) > 4 else ''}): give the base_config of "
            "the model this file was made from"
        )
    return converted


def load_file_text_pipeline(
    spec: FamilySpec,
    sf: SingleFile,
    revision: str | None,
    dtype: torch.dtype,
    device: torch.device,
    pipeline_class: str | None = None,
) -> Any:
    """The family's pipeline (`pipeline_class`, default spec.pipeline_class: the base config's
    flavour's, Family.source_pipeline_class) with only its text parts, the text encoders from
    the file when it holds them (SDXL: diffusers' from_single_file converts CLIP-L and
    OpenCLIP-bigG), else from the base config. Raises ModelSourceError."""
    import diffusers

    from lorastudio.families.common import load_text_pipeline

    pipeline_cls = getattr(diffusers, pipeline_class or spec.pipeline_class)
    skip = {spec.denoiser: None, "vae": None}
    if "text_encoder" not in sf.components:
        return load_text_pipeline(pipeline_cls, sf.config, revision, dtype, device, **skip)
    pipe = _file_pipeline(pipeline_cls, sf, revision, dtype, **skip)
    pipe.to(device)
    for name in ("text_encoder", "text_encoder_2"):
        _no_meta(getattr(pipe, name), sf, name).eval().requires_grad_(False)
    return pipe


def _file_pipeline(
    pipeline_cls: Any, sf: SingleFile, revision: str | None, dtype: torch.dtype, **parts: Any
) -> Any:
    from lorastudio.families.loading import quiet_loading

    quiet_loading()
    try:
        pipe = pipeline_cls.from_single_file(
            sf.file, config=sf.config, revision=revision, dtype=dtype, **hub_kwargs(), **parts
        )
    except (OSError, ValueError, KeyError, RuntimeError) as err:
        raise ModelSourceError(
            f"cannot load {sf.file} with the config of {sf.config}: {library_open_reason(err)}"
        ) from err
    apply_scheduler_overrides(pipe, sf)
    return pipe


def apply_scheduler_overrides(pipe: Any, source: str | SingleFile) -> None:
    """Give `pipe` a scheduler with the single file's overrides (scheduler_overrides)."""
    extra = scheduler_overrides(source)
    if extra and getattr(pipe, "scheduler", None) is not None:
        pipe.scheduler = type(pipe.scheduler).from_config(pipe.scheduler.config, **extra)


def load_file_pipeline(
    spec: FamilySpec,
    sf: SingleFile,
    revision: str | None,
    dtype: torch.dtype,
    pipeline_class: str | None = None,
) -> Any:
    """The family's whole pipeline (`pipeline_class`, default spec.pipeline_class) on a
    single-file base (generation): the file's components converted by diffusers, the rest from
    the base config; the scheduler with the file's prediction type. Raises ModelSourceError."""
    import diffusers

    class_name = pipeline_class or spec.pipeline_class
    pipeline_cls = getattr(diffusers, class_name)
    if "text_encoder" in sf.components:
        return _file_pipeline(pipeline_cls, sf, revision, dtype)
    denoiser_cls = getattr(diffusers, spec.denoiser_class)
    denoiser = load_file_component(denoiser_cls, sf, spec.denoiser, revision, dtype)
    try:
        pipe = pipeline_cls.from_pretrained(
            sf.config, revision=revision, dtype=dtype, **hub_kwargs(), **{spec.denoiser: denoiser}
        )
    except (OSError, ValueError, KeyError) as err:
        raise ModelSourceError(
            f"cannot load {class_name} from {sf.config!r}: {library_open_reason(err)}"
        ) from err
    apply_scheduler_overrides(pipe, sf)
    return pipe
