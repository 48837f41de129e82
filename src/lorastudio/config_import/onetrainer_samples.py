"""OneTrainer's sample definitions and weight dtypes -> our sample prompts and base_precision (no torch).

Samples (OneTrainer modules/util/config/SampleConfig.py): the config's `samples` list, or, where
it is null (what OneTrainer saves), the JSON list in `sample_definition_file_name`
(training_samples/samples.json by default), each {enabled, prompt, negative_prompt, width,
height, seed, random_seed, diffusion_steps, cfg_scale, noise_scheduler, ...}. Each enabled one is
a sample prompt object with its width, height, seed and cfg_scale (as guidance); their
diffusion_steps is our one sample_steps where they agree. A random seed, a negative prompt, an
inpainting sample, layer skips and the sampler are named as not carried.

Weight dtypes (OneTrainer modules/util/enum/DataType.py): the denoiser's `weight_dtype` (its
part's, `transformer` / `unet` / `prior`, or an older file's top-level one) stores the frozen base
and `train_dtype` computes with it; our base_precision is one value for both: FLOAT_32 /
BFLOAT_16 / FLOAT_16 storage computed in the same dtype are fp32 / bf16 / fp16, INT_8 / NFLOAT_4
are int8 / nf4 (bf16 compute), FLOAT_8 (fp8 weights) becomes int8 weights (the same memory).
"""

from __future__ import annotations

from typing import Any

from lorastudio.config_import import values
from lorastudio.config_import.common import side_path_above
from lorastudio.config_import.reading import read_document
from lorastudio.config_import.report import NOT_NEEDED, NOT_SUPPORTED, Draft
from lorastudio.config_import.samples import MOST_PROMPTS, refused

_FLOATS = {"FLOAT_32": "fp32", "BFLOAT_16": "bf16", "FLOAT_16": "fp16", "TFLOAT_32": "fp32"}
_QUANTISED = {"INT_8": ("int8", ""), "NFLOAT_4": ("nf4", ""), "FLOAT_8": ("int8", values.EIGHT_BIT)}
_DENOISER_PARTS = ("transformer", "unet", "prior")
_OFF = {  # sample keys: not carried at their default, else why
    "negative_prompt": ("", f"{NOT_SUPPORTED}: samples have no negative prompt"),
    "random_seed": (False, f"{NOT_SUPPORTED}: each prompt keeps one seed (sample_seed or its own)"),
    "sample_inpainting": (False, f"{NOT_SUPPORTED}: samples are not inpainted"),
    "base_image_path": ("", f"{NOT_SUPPORTED}: samples are not inpainted"),
    "mask_image_path": ("", f"{NOT_SUPPORTED}: samples are not inpainted"),
    "frames": (1, f"{NOT_SUPPORTED}: samples are images"),
    "text_encoder_1_layer_skip": (0, f"{NOT_SUPPORTED}: the text encoders' last layer is used"),
    "text_encoder_2_layer_skip": (0, f"{NOT_SUPPORTED}: the text encoders' last layer is used"),
    "text_encoder_3_layer_skip": (0, f"{NOT_SUPPORTED}: the text encoders' last layer is used"),
    "text_encoder_4_layer_skip": (0, f"{NOT_SUPPORTED}: the text encoders' last layer is used"),
    "force_last_timestep": (False, f"{NOT_SUPPORTED}: samples use the family's own schedule"),
    "transformer_attention_mask": (False, f"{NOT_SUPPORTED}: samples use the family's own attention"),
}
_ALWAYS = {
    "noise_scheduler": f"{NOT_NEEDED}: samples use the family's own scheduler",
    "length": f"{NOT_NEEDED}: samples are images",
    "__version": f"{NOT_NEEDED}: OneTrainer's own file version",
}


def samples(draft: Draft, data: dict[str, Any]) -> None:
    """`samples` (inline) or `sample_definition_file_name`'s list as sample_prompts."""
    listed, root = data.get("samples"), "samples"
    if "samples" in data and listed is None:
        draft.drop("samples", f"{NOT_NEEDED}: null: the samples are sample_definition_file_name's")
    if listed is None and isinstance(data.get("sample_definition_file_name"), str):
        path = side_path_above(draft, "sample_definition_file_name", data["sample_definition_file_name"])
        if path is None:
            return
        if not path.is_file():  # OneTrainer's default name, written only once samples are defined
            draft.drop(
                "sample_definition_file_name", f"{NOT_SUPPORTED}: {path} is not a file (no samples read)"
            )
            return
        listed = read_document(path, where=f"{draft.file.name}: sample_definition_file_name")
        draft.drop("sample_definition_file_name", f"{NOT_NEEDED}: its samples read as sample_prompts")
        root = path.name
    elif "sample_definition_file_name" in data:
        draft.drop("sample_definition_file_name", f"{NOT_NEEDED}: the config's own samples are read")
    if listed is None:
        return
    if not isinstance(listed, list):
        draft.fail(root, "is not a list of samples")
        return
    _prompts(draft, root, listed)
    if root != "samples":
        draft.unread(listed, root)


def _prompts(draft: Draft, root: str, listed: list[Any]) -> None:
    prompts: list[dict[str, Any]] = []
    lines: list[tuple[str, str, Any]] = []  # (peer key, label, value) folded once sample_prompts is written
    steps: dict[str, int] = {}
    for i, sample in enumerate(listed):
        where = f"{root}[{i}]"
        if not isinstance(sample, dict) or sample.get("enabled", True) is False:
            draft.drop(
                where, f"{NOT_NEEDED}: a disabled sample" if isinstance(sample, dict) else "not a sample"
            )
            continue
        prompt = sample.get("prompt")
        if not isinstance(prompt, str) or not prompt.strip():
            draft.drop(where, "not a prompt (text)")
            continue
        if len(prompts) >= MOST_PROMPTS:
            draft.drop(where, f"{NOT_SUPPORTED}: at most {MOST_PROMPTS} sample prompts")
            continue
        why = refused({"prompt": prompt.strip()})
        if why:
            draft.drop(where, f"refused here (its prompt: {why})")
            continue
        entry: dict[str, Any] = {"prompt": prompt.strip()}
        label = f"sample_prompts[{len(prompts)}]"
        own: list[tuple[str, str, Any]] = [(f"{where}.prompt", label, entry["prompt"])]
        for theirs, ours, conv in (("width", "width", values.integer), ("height", "height", values.integer),
                                   ("seed", "seed", values.integer), ("cfg_scale", "guidance", values.number)):  # fmt: skip
            if theirs not in sample:
                continue
            if theirs == "seed" and sample.get("random_seed") is True:
                draft.drop(f"{where}.seed", f"{NOT_NEEDED}: random_seed is on")
                continue
            try:
                value = conv(sample[theirs])
            except values.Skip as skip:
                draft.drop(f"{where}.{theirs}", str(skip))
                continue
            why = refused({"prompt": "p", ours: value})
            if why:  # this sample's own value, not every sample's prompts
                draft.drop(f"{where}.{theirs}", f"refused here ({ours} = {value}: {why})")
                continue
            entry[ours] = value
            own.append((f"{where}.{theirs}", f"{label}.{ours}", value))
        if "diffusion_steps" in sample:
            steps[f"{where}.diffusion_steps"] = sample["diffusion_steps"]
        for key, (default, why) in _OFF.items():
            if key in sample:
                draft.drop(
                    f"{where}.{key}", why if sample[key] not in (default, None) else f"{NOT_NEEDED}: off"
                )
        for key, why in _ALWAYS.items():
            if key in sample:
                draft.drop(f"{where}.{key}", why)
        if "enabled" in sample:
            own.append((f"{where}.enabled", label, True))
        prompts.append(entry)
        lines += own
    if not prompts:
        return
    draft.set(lines[0][0], "sample_prompts", prompts, shown=("sample_prompts[0]", prompts[0]))
    for peer, label, value in lines[1:]:
        draft.fold(peer, "sample_prompts", value, label=label)
    _steps(draft, steps)


def _steps(draft: Draft, steps: dict[str, Any]) -> None:
    """The samples' diffusion_steps as our one sample_steps where they agree."""
    found = set()
    for value in steps.values():
        try:
            found.add(values.integer(value))
        except values.Skip:
            found.add(None)
    if len(found) == 1 and None not in found:
        keys = list(steps)
        draft.set(keys[0], "sample_steps", found.pop())
        for key in keys[1:]:
            draft.fold(key, "sample_steps", steps[key])
        return
    for key in steps:
        draft.drop(key, f"{NOT_SUPPORTED}: sample_steps is one for every prompt, and the samples' differ")


def precision(draft: Draft, data: dict[str, Any]) -> None:
    """The denoiser's weight_dtype with train_dtype as our base_precision (module docstring)."""
    part = next((p for p in _DENOISER_PARTS if isinstance(data.get(p), dict) and
                 str(data[p].get("weight_dtype", "NONE")).upper() != "NONE"), None)  # fmt: skip
    weight_key = f"{part}.weight_dtype" if part else "weight_dtype" if "weight_dtype" in data else None
    weight = str(data[part]["weight_dtype"] if part else data.get("weight_dtype", "")).upper()
    if part and "weight_dtype" in data:
        draft.drop("weight_dtype", f"{NOT_NEEDED}: the denoiser's own {part}.weight_dtype is read")
    train = str(data.get("train_dtype", "")).upper() if "train_dtype" in data else None
    if weight_key is not None and weight in _QUANTISED:
        ours, how = _QUANTISED[weight]
        draft.set(weight_key, "base_precision", ours, how)
        if train is not None:
            draft.drop("train_dtype", f"{NOT_NEEDED}: a quantised base computes in bf16 here" if train == "BFLOAT_16"
                       else f"{NOT_SUPPORTED}: a quantised base computes in bf16 here")  # fmt: skip
        return
    stored = _FLOATS.get(weight) if weight_key is not None else None
    computed = _compute(train) if train is not None else None
    if weight_key is not None and stored is None:
        draft.drop(weight_key, f"{NOT_SUPPORTED}: {weight}: the base is fp32, bf16, fp16, int8 or nf4 here")
    if stored is not None and (train is None or computed == stored):
        draft.set(weight_key, "base_precision", stored)
        if train is not None:
            draft.fold("train_dtype", "base_precision", stored)
        return
    if stored is not None:
        draft.drop(weight_key, f"{NOT_SUPPORTED}: {weight} weights computed in {train}: base_precision stores and "
                   "computes in one dtype; the compute one is taken")  # fmt: skip
    if train is not None:
        _train_dtype(draft, train)


def _compute(train: str) -> str | None:
    """OneTrainer's train_dtype as the dtype our base computes in (None: not one of ours)."""
    return _FLOATS.get(train)


def _train_dtype(draft: Draft, train: str) -> None:
    """train_dtype alone: our base_precision when it is not auto's."""
    if train not in _FLOATS:
        draft.drop("train_dtype", f"{NOT_SUPPORTED}: {train}: the base computes in fp32, bf16 or fp16 here")
        return
    ours, note = values.compute_precision(_FLOATS[train])
    if ours:
        draft.set("train_dtype", "base_precision", ours)
    else:
        draft.drop("train_dtype", note)
