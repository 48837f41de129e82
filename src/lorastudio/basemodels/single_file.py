"""Single-file base checkpoints (one .safetensors in the original LDM / SGM or BFL key layout),
recognised and vetted from their header alone (no torch, no tensor read).

A single file holds some of a pipeline's components; the rest (tokenizers, scheduler, configs,
and for FLUX.1 / Chroma the text encoders and VAE) come from a *base config*: a diffusers
pipeline folder or the hub id of the original model (TrainConfig.base_config; default: the row's
`default_config`). The families load the file through diffusers' `from_single_file`
(families/single_file.py).

LAYOUTS is the table of what lorastudio trains from one file: the family, the marker keys that
tell the layout (the ones diffusers' `infer_diffusers_model_type` reads, with the
`model.diffusion_model.` prefix optional for the transformer-only layouts), the key groups the
file must hold, the components it replaces. Hand-written because diffusers' recognition needs the
tensors loaded (a torch state dict); the catalogue and the server read headers only.

SDXL v-prediction: a file says it with a `v_pred` key (and zero terminal SNR with `ztsnr`), the
markers ComfyUI and the NoobAI / Illustrious v-pred releases use, or with the ModelSpec header
`modelspec.prediction_type`; other files do not say, and `v_prediction` decides.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from lorastudio.basemodels.layout import INFERENCE_ONLY, weight_suffix
from lorastudio.errors import FieldProblem, ModelSourceError, NotFound
from lorastudio.user_paths import is_file

if TYPE_CHECKING:
    from lorastudio.basemodels.vetting import Recognition

MAX_CHECKPOINT_HEADER = 64 * 1024 * 1024  # an SDXL file's header is ~250 KB; 64 MB is no checkpoint
PICKLE_SUFFIXES = (".ckpt", ".pt", ".pth", ".bin")
TRANSFORMER_PREFIX = "model.diffusion_model."


@dataclass(frozen=True)
class Layout:
    """One single-file layout lorastudio trains: `markers` all present = this layout (`absent`
    all absent); `required` key groups (label -> keys) must all be there; `components` are the
    pipeline components the file replaces; `default_config` the hub id configs come from."""

    name: str
    family: str
    title: str
    markers: tuple[str, ...]
    required: dict[str, tuple[str, ...]]
    components: tuple[str, ...]
    default_config: str
    absent: tuple[str, ...] = ()
    prefix_optional: bool = False  # keys may carry TRANSFORMER_PREFIX (ComfyUI's saved files)


_FLUX_COMMON = {
    "image input (img_in)": ("img_in.weight", "img_in.bias"),
    "text input (txt_in)": ("txt_in.weight", "txt_in.bias"),
    "double blocks": ("double_blocks.0.img_attn.qkv.weight", "double_blocks.0.txt_attn.qkv.weight"),
    "single blocks": ("single_blocks.0.linear1.weight", "single_blocks.0.linear2.weight"),
    "final layer": ("final_layer.linear.weight", "final_layer.adaLN_modulation.1.weight"),
}
LAYOUTS: tuple[Layout, ...] = (
    Layout(
        "sdxl", "sdxl", "SDXL checkpoint (SGM layout: U-Net, VAE, both text encoders)",
        markers=("conditioner.embedders.1.model.positional_embedding", "model.diffusion_model.input_blocks.0.0.weight"),
        required={
            "U-Net (model.diffusion_model.*)": ("model.diffusion_model.input_blocks.0.0.weight", "model.diffusion_model.out.2.weight", "model.diffusion_model.label_emb.0.0.weight"),
            "VAE (first_stage_model.*)": ("first_stage_model.encoder.conv_in.weight", "first_stage_model.decoder.conv_out.weight"),
            "CLIP-L text encoder (conditioner.embedders.0.*)": ("conditioner.embedders.0.transformer.text_model.embeddings.position_embedding.weight",),
            "OpenCLIP-bigG text encoder (conditioner.embedders.1.*)": ("conditioner.embedders.1.model.positional_embedding", "conditioner.embedders.1.model.text_projection"),
        },
        components=("unet", "vae", "text_encoder", "text_encoder_2"),
        default_config="stabilityai/stable-diffusion-xl-base-1.0",
    ),
    Layout(
        "chroma", "chroma", "Chroma transformer (BFL layout)",
        markers=("distilled_guidance_layer.in_proj.bias",),
        required={**_FLUX_COMMON, "final layer": ("final_layer.linear.weight",), "guidance approximator": ("distilled_guidance_layer.in_proj.weight", "distilled_guidance_layer.out_proj.weight")},
        components=("transformer",), default_config="lodestones/Chroma1-HD", prefix_optional=True,
    ),
    Layout(
        "flux-dev", "flux", "FLUX.1 [dev]-class transformer (BFL layout, guidance embedding)",
        markers=("double_blocks.0.img_attn.norm.key_norm.scale", "guidance_in.in_layer.weight"),
        required={**_FLUX_COMMON, "time / vector inputs": ("time_in.in_layer.weight", "vector_in.in_layer.weight")},
        components=("transformer",), default_config="black-forest-labs/FLUX.1-dev", prefix_optional=True,
    ),
    Layout(
        "flux-schnell", "flux", "FLUX.1 [schnell]-class transformer (BFL layout, no guidance embedding)",
        markers=("double_blocks.0.img_attn.norm.key_norm.scale",),
        absent=("guidance_in.in_layer.weight",),
        required={**_FLUX_COMMON, "time / vector inputs": ("time_in.in_layer.weight", "vector_in.in_layer.weight")},
        components=("transformer",), default_config="black-forest-labs/FLUX.1-schnell", prefix_optional=True,
    ),
)  # fmt: skip
_BY_FAMILY = {row.family for row in LAYOUTS}

# layouts recognised only to say why they are refused (marker key -> what it is)
OTHER_LAYOUTS: dict[str, str] = {
    "single_stream_modulation.lin.weight": "a FLUX.2 transformer (single files of FLUX.2 are not supported; use its diffusers folder)",
    "conditioner.embedders.0.model.text_projection": "an SDXL refiner checkpoint (not a family lorastudio trains)",
    "cond_stage_model.transformer.text_model.embeddings.position_embedding.weight": "a Stable Diffusion 1.x checkpoint (not a family lorastudio trains)",
    "cond_stage_model.model.token_embedding.weight": "a Stable Diffusion 2.x checkpoint (not a family lorastudio trains)",
    "txtfusion.projector.weight": "a Krea 2 transformer (single files of Krea 2 are not supported; use its diffusers folder)",
    "lora_unet_down_blocks_0_attentions_0_proj_in.lora_down.weight": "a LoRA, not a base model",
}  # fmt: skip


@dataclass(frozen=True)
class SingleFileFacts:
    """What one checkpoint file is: its layout row, and what it says of its prediction type
    (v_prediction None: the file does not say)."""

    path: Path
    layout: Layout
    v_prediction: bool | None
    zero_terminal_snr: bool

    @property
    def family(self) -> str:
        return self.layout.family


def is_single_file(path: Path) -> bool:
    """True for an existing file with a weight suffix (.safetensors, .gguf, .ckpt, ...)."""
    return is_file(path) and weight_suffix(path.name) is not None


def _normalised_keys(keys: set[str]) -> set[str]:
    """The keys with the transformer prefix of ComfyUI-saved transformer files taken off."""
    return {k.removeprefix(TRANSFORMER_PREFIX) for k in keys} | keys


def read_file_facts(path: Path) -> SingleFileFacts:
    """Recognise the checkpoint file `path` from its header. Raises NotFound (no such file) and
    ModelSourceError naming the file and the reason: an inference-only (GGUF, ONNX ...) or
    pickle file, an unreadable header, a layout no family trains, missing key groups."""
    from lorastudio.lora.header import read_header

    path = Path(path)
    suffix = weight_suffix(path.name)
    if suffix in INFERENCE_ONLY:
        raise ModelSourceError(
            f"{path} is a {INFERENCE_ONLY[suffix]} file, an inference-only (quantised / exported) format that "
            "cannot be trained; use the model's .safetensors checkpoint or its diffusers folder"
        )
    if suffix in PICKLE_SUFFIXES:
        raise ModelSourceError(
            f"{path} is a pickle checkpoint ({suffix}); lorastudio loads single files only as .safetensors "
            "(a pickle can run code when loaded): convert it to .safetensors first"
        )
    if suffix != ".safetensors":
        raise ModelSourceError(f"{path} is not a .safetensors checkpoint")
    try:
        header = read_header(path, MAX_CHECKPOINT_HEADER)
    except NotFound:
        raise NotFound(f"checkpoint file not found: {path}") from None
    except ModelSourceError as err:
        raise ModelSourceError(str(err).replace("safetensors LoRA", "safetensors checkpoint")) from None
    raw = set(header.tensors)
    keys = _normalised_keys(raw)
    layout = _layout_of(path, raw, keys)
    missing = [
        label
        for label, group in layout.required.items()
        if not all(k in (keys if layout.prefix_optional else raw) for k in group)
    ]
    if missing:
        raise ModelSourceError(
            f"{path} looks like a {layout.title} but is missing keys of: {', '.join(missing)}; "
            "it is incomplete (pruned or a partial save) and cannot be trained"
        )
    spec = header.metadata.get("modelspec.prediction_type", "").lower()
    v_pred = (
        True if "v_pred" in raw or spec in ("v", "v_prediction") else (False if spec == "epsilon" else None)
    )
    return SingleFileFacts(path, layout, v_pred if layout.family == "sdxl" else None, "ztsnr" in raw)


def _layout_of(path: Path, raw: set[str], keys: set[str]) -> Layout:
    for row in LAYOUTS:
        pool = keys if row.prefix_optional else raw
        if all(m in pool for m in row.markers) and not any(a in pool for a in row.absent):
            return row
    for marker, what in OTHER_LAYOUTS.items():
        if marker in keys:
            raise ModelSourceError(f"{path} is {what}")
    raise ModelSourceError(
        f"{path} is not a single-file checkpoint lorastudio recognises ({len(raw)} tensors, none of the "
        f"keys of {', '.join(r.title for r in LAYOUTS)}); use the model's diffusers folder"
    )


def vet_single_file(path: Path, family: str) -> SingleFileFacts:
    """The single-file check: `path` must be a checkpoint of a layout that family `family`
    trains. Returns its facts. Raises ModelSourceError (see read_file_facts; another family's
    file; a family that takes no single files) and NotFound."""
    facts = read_file_facts(path)
    if facts.family != family:
        takes = (
            f"the {family} family takes single files of {', '.join(r.title for r in LAYOUTS if r.family == family)}"
            if family in _BY_FAMILY
            else f"the {family} family takes no single-file checkpoints (only sdxl, flux and chroma do)"
        )
        raise ModelSourceError(f"{path} is a {facts.layout.title} (family {facts.family!r}); {takes}")
    return facts


def single_file_problems(
    facts: SingleFileFacts | None, base_config: str | None, v_prediction: bool | None
) -> list[FieldProblem]:
    """Settings a base cannot honour: base_config without a single file; v_prediction without a
    single file, or against what the file says (its `v_pred` marker / ModelSpec header)."""
    problems = []
    if facts is None:
        if base_config is not None:
            problems.append(
                FieldProblem(
                    "base_config", "only applies when base_model is a single .safetensors checkpoint"
                )
            )
        if v_prediction is not None:
            problems.append(
                FieldProblem(
                    "v_prediction",
                    "only applies to a single-file checkpoint; a pipeline folder's scheduler_config.json "
                    "says its prediction type",
                )
            )
    elif v_prediction is not None and facts.family != "sdxl":
        problems.append(
            FieldProblem("v_prediction", f"{facts.layout.title}: a flow model, no prediction type to set")
        )
    elif v_prediction is not None and facts.v_prediction is not None and v_prediction != facts.v_prediction:
        says = "v-prediction (it carries the v_pred marker)" if facts.v_prediction else "epsilon prediction"
        problems.append(
            FieldProblem("v_prediction", f"{facts.path} says it is {says}; leave v_prediction unset")
        )
    return problems


def base_updates(
    source: str,
    folder: Path | None,
    facts: SingleFileFacts | None,
    config: str | None,
    given_config: str | None,
    v_prediction: bool | None,
    revision: str | None,
) -> tuple[dict[str, object], list[FieldProblem]]:
    """What a resolved base changes in a run config ({"base_model", and for a single file
    "base_config" and the "v_prediction" the file says}) and the settings it cannot honour
    (single_file_problems; a revision with a local folder or a single file's local base config:
    revisions name hub commits). The one rule of the job service and the engine's preflight."""
    problems = single_file_problems(facts, given_config, v_prediction)
    local_config = facts is not None and config is not None and Path(config).is_dir()
    if revision is not None and (folder is not None or local_config):
        where = "a local folder" if folder is not None else f"the local base config {config}"
        problems.append(FieldProblem("revision", f"only applies to hub ids, not to {where}"))
    updates: dict[str, object] = {"base_model": source}
    if facts is not None:
        updates["base_config"] = config
        if v_prediction is None and facts.v_prediction is not None:
            updates["v_prediction"] = facts.v_prediction
    return updates, problems


def inspect_file(path: Path) -> Recognition:
    """The catalogue's view of a checkpoint file (never raises): its family when a layout row
    matches and every key group is there, else the reason (GGUF, pickle, incomplete, unknown)."""
    from lorastudio.basemodels.vetting import Recognition

    try:
        facts = read_file_facts(path)
    except (ModelSourceError, NotFound) as err:
        return Recognition(None, None, False, str(err), False, ())
    row = facts.layout
    note = f"single-file checkpoint: {row.title}; configs from base_config (default {row.default_config})"
    if facts.v_prediction:
        note += "; v-prediction (its v_pred marker)"
    return Recognition(row.family, None, True, None, True, (), checkpoint=note)
