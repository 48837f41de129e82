"""Generation: load a family's pipeline, apply LoRAs with scales, generate one image.

    pipe = load_pipeline("/models/flux-dev", "flux")
    apply_loras(pipe, [(Path("outputs/run/run.safetensors"), 0.8)])
    image = generate_image(pipe, "flux", prompt="sks dog", seed=1, steps=28, width=1024, height=1024)

The LoRA files are loaded with the pipeline's own `load_lora_weights` (so the adapter metadata
in the file header sets alpha), and combined with `set_adapters`; LyCORIS-layout files (LoKr,
LoHa, kohya-layout DoRA), which diffusers cannot read, are merged into the weights at their scale
(generate/lycoris_patch.py).
"""

from __future__ import annotations

import warnings
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch

from lorastudio.data.control_sizing import ControlTooSmall
from lorastudio.data.sample_refs import reference_size_problem
from lorastudio.errors import (
    ConfigError,
    FieldProblem,
    GenerationCancelled,
    ModelSourceError,
    NotFound,
)
from lorastudio.generate.detect import detect_family
from lorastudio.generate.finite_image import finite_image
from lorastudio.generate.guidance_checks import unapplied_guidance
from lorastudio.generate.references import fit_reference, reference_kwargs, run_sizer
from lorastudio.generation_rules import (
    guidance_problems,
    seed_problems,
    size_problems,
    text_tokens_problems,
    unused_guidance_problems,
)
from lorastudio.hub_token import hub_kwargs
from lorastudio.open_reason import library_open_reason
from lorastudio.user_paths import missing_file

if TYPE_CHECKING:
    from diffusers import DiffusionPipeline
    from PIL import Image

    from lorastudio.data.control_sizing import ControlRule

ADAPTER_PREFIX = "lorastudio_"  # adapter names given by apply_loras: lorastudio_0, lorastudio_1, ...


def load_pipeline(
    base_model: str,
    family: str,
    *,
    revision: str | None = None,
    dtype: torch.dtype | None = None,
    device: str | torch.device | None = None,
    base_config: str | None = None,
    v_prediction: bool | None = None,
    cancelled: Callable[[], bool] | None = None,
) -> DiffusionPipeline:
    """Load `base_model` (hub id or local folder) with the family's pipeline class, in `dtype`
    (default: bf16 on a GPU of compute capability 8.0+, else fp32: training's auto) on `device`
    (default: CUDA if available).
    With `base_config` (a resolved pipeline folder or hub id), `base_model` is a single-file
    checkpoint loaded through from_single_file (families/single_file.py; `v_prediction` None:
    as the file says, else the config's scheduler). `cancelled`: asked before each component
    is loaded and before the pipeline moves to `device` (generate/load_cancel.py).

    Raises UnknownFamily, ModelSourceError (missing, unreadable or another family's model),
    GenerationCancelled (`cancelled()` True: what was loaded is dropped, the caller frees it).
    """
    from lorastudio.generate.load_cancel import cancellable_load, stop_if_cancelled

    with cancellable_load(cancelled):
        stop_if_cancelled("its first component")
        pipe, dev = _load(base_model, family, revision, dtype, device, base_config, v_prediction)
        stop_if_cancelled(f"moving it to {dev}")
    pipe.to(dev)
    pipe.set_progress_bar_config(disable=True)
    return pipe


def _load(
    base_model: str,
    family: str,
    revision: str | None,
    dtype: torch.dtype | None,
    device: str | torch.device | None,
    base_config: str | None,
    v_prediction: bool | None,
) -> tuple[DiffusionPipeline, torch.device]:
    """load_pipeline's pipeline, not yet moved to its device (returned with it)."""
    import diffusers

    from lorastudio import families

    spec = families.get(family).spec
    families.get(family).prepare_pipeline_loading()
    if base_config is not None:
        from lorastudio.families.single_file import load_file_pipeline, single_file

        dev = torch.device(device) if device is not None else _default_device()
        sf = single_file(base_model, base_config, v_prediction)
        class_name = families.get(family).source_pipeline_class(sf, revision)  # its base config's flavour
        return load_file_pipeline(spec, sf, revision, dtype or _default_dtype(dev), class_name), dev
    found = detect_family(base_model)
    local = Path(base_model).expanduser()
    if local.exists() and found is None and not (local / "model_index.json").is_file():
        raise ModelSourceError(f"{local} is not a diffusers pipeline folder (no model_index.json)")
    if found is not None and found != spec.name:
        raise ModelSourceError(f"{base_model} is a {found} model, not {spec.name}")
    dev = torch.device(device) if device is not None else _default_device()
    dtype = dtype or _default_dtype(dev)
    class_name = families.get(family).source_pipeline_class(base_model, revision)  # the checkpoint's flavour
    pipeline_cls = getattr(diffusers, class_name)
    try:
        pipe = pipeline_cls.from_pretrained(base_model, revision=revision, dtype=dtype, **hub_kwargs())
    except (OSError, ValueError) as err:
        raise ModelSourceError(
            f"cannot load {class_name} from {base_model!r}: {library_open_reason(err)}"
        ) from err
    return pipe, dev


def _after_steps(
    cancelled: Callable[[], bool] | None, on_step: Callable[[int, int], None] | None, steps: int | None
) -> Callable[..., dict[str, Any]]:
    """A callback_on_step_end that tells `on_step(done, of)` each finished step (`of`: the
    pipeline's own count, else `steps`), then raises GenerationCancelled once `cancelled()` is
    True: the pipeline's loop stops after the step it just finished (no decode, no image)."""

    def after_step(pipe: Any, step: int, timestep: Any, callback_kwargs: dict[str, Any]) -> dict[str, Any]:
        if on_step is not None:
            on_step(step + 1, int(getattr(pipe, "num_timesteps", None) or steps or step + 1))
        if cancelled is not None and cancelled():
            raise GenerationCancelled(f"generation cancelled after denoising step {step + 1}")
        return callback_kwargs

    return after_step


def _default_dtype(dev: torch.device) -> torch.dtype:
    """bf16 where `dev` computes it, else fp32: training's rule for `base_precision: auto`
    (training/precision.bf16_capable: the device's own compute capability, 8.0+), not
    torch.cuda.is_bf16_supported(), which asks the current device and says yes on sm_75 (a T4,
    an RTX 20xx), where bf16 is emulated."""
    from lorastudio.training.precision import pick_dtype

    return pick_dtype("auto", dev)


def _default_device() -> torch.device:
    return torch.device("cuda" if torch.cuda.is_available() else "cpu")


def apply_loras(
    pipe: DiffusionPipeline,
    loras: Sequence[tuple[str | Path, float]],
    cancelled: Callable[[], bool] | None = None,
) -> None:
    """Replace whatever LoRAs `pipe` has with `loras` (file path, scale): diffusers / kohya LoRA
    and DoRA files each loaded with the pipeline's load_lora_weights and weighted with
    set_adapters (a file that loader cannot read but lorastudio's readers do, OneTrainer's
    Qwen-Image / Z-Image files, loaded as the diffusers state dict they read, and a FLUX.1 file's
    T5 layers, merged into T5's weights at the strength as ComfyUI does, restored on the next
    call: generate/foreign_loras.py; text-encoder layers of a family that takes none refused; a DoRA among them merged into its layers at its strength by
    ComfyUI's rule, W + s * (W_dora - W), and its adapter deleted: generate/dora_strength.py);
    LyCORIS files (LoKr, LoHa, DoRA written with lora_format = "kohya", and those
    under kohya's names) and files in ComfyUI's own spelling (its trainer node's: LoRA pairs under
    `diffusion_model.<checkpoint name>` with lora_up / lora_down, `.diff` / `.diff_b`),
    which that loader cannot read, merged into the denoiser's weights at their scale the way
    ComfyUI merges them (generate/lycoris_patch.py; restored exactly on the next call). An empty
    list unloads all. `cancelled`: asked before each LoRA file is applied; True stops there.

    Raises GenerationCancelled (`cancelled()`: the pipeline is left with no LoRA), NotFound for a missing file, ModelSourceError for a file that does not fit this
    pipeline (unreadable, a non-float or NaN / infinite tensor, down and up of different ranks,
    or a layer of it that no module takes: diffusers' loader only logs those,
    generate/lora_coverage.py);
    after a failure the pipeline has no LoRA.
    """
    from lorastudio.generate.dora_strength import merge_dora_adapter
    from lorastudio.generate.foreign_loras import merge_layers, read_foreign
    from lorastudio.generate.lora_coverage import converted_layers, layers_not_loaded
    from lorastudio.generate.lora_messages import loader_failure, no_layer_message
    from lorastudio.generate.lycoris_patch import is_lycoris_file, patch_lycoris, restore_lycoris
    from lorastudio.lora.file_read import check_lora_values, widened_kohya_file

    for path, _ in loras:
        if not Path(path).is_file():
            raise NotFound(missing_file(path, "LoRA file"))
    restore_lycoris(pipe)
    pipe.unload_lora_weights()
    for path, _ in loras:  # dtypes, ranks, finite values: a NaN would render a black image
        check_lora_values(Path(path))
    lycoris = [(Path(p), float(s)) for p, s in loras if is_lycoris_file(Path(p))]
    adapters = [(p, s) for p, s in loras if not is_lycoris_file(Path(p))]
    stop = _lora_stop(pipe, cancelled)
    for path, _ in lycoris:
        stop(path)
    patch_lycoris(pipe, lycoris)  # on a failure, restores what it patched
    names: list[str] = []
    weights: list[float] = []
    for i, (path, scale) in enumerate(adapters):
        stop(path)
        name = f"{ADAPTER_PREFIX}{i}"
        try:
            foreign = read_foreign(Path(path), pipe)  # a file only lorastudio's reader reads
            if foreign is None or foreign.state:
                # a kohya fp8 file as float32: diffusers' converters cannot multiply fp8
                source = (widened_kohya_file(Path(path)) or str(path)) if foreign is None else foreign.state
                with converted_layers(pipe) as layers, warnings.catch_warnings():  # the load's own conversion
                    # peft warns "Already found a `peft_config` ... multiple adapters ... Make sure to
                    # know what you are doing!" at each LoRA after the first: several are the request
                    warnings.filterwarnings("ignore", "Already found a `peft_config`", UserWarning)
                    pipe.load_lora_weights(source, adapter_name=name)
            if foreign is not None and foreign.merged:  # FLUX.1's / Chroma's T5: merged at its strength
                merge_layers(pipe, Path(path), foreign.merged, float(scale))
        except ModelSourceError:
            _unload(pipe)
            raise
        except (
            OSError,
            ValueError,
            KeyError,
            RuntimeError,
            AssertionError,
        ) as err:  # diffusers' converters assert
            _unload(pipe)
            raise loader_failure(path, err) from err  # bounded: peft's names every module
        if foreign is not None and not foreign.state:
            continue  # nothing of it left to diffusers' loader
        loaded = {n for names_ in pipe.get_list_adapters().values() for n in names_}
        if name not in loaded:
            _unload(pipe)
            raise ModelSourceError(no_layer_message(pipe, path))
        try:
            missing, total = layers_not_loaded(pipe, layers, name)
        except ModelSourceError:
            _unload(pipe)
            raise
        if missing:  # diffusers only logs these: the image would show part of the LoRA
            _unload(pipe)
            shown = ", ".join(missing[:5]) + (f" and {len(missing) - 5} more" if len(missing) > 5 else "")
            raise ModelSourceError(
                f"LoRA {path}: {len(missing)} of its {total} layers match no layer this "
                f"{type(pipe).__name__} puts a LoRA on, so they would be left out: {shown}"
            )
        try:  # a DoRA at its strength by ComfyUI's rule, merged (generate/dora_strength.py)
            merged = merge_dora_adapter(pipe, name, float(scale))
        except (ValueError, RuntimeError) as err:
            _unload(pipe)
            raise ModelSourceError(f"cannot apply LoRA {path}: {err}") from err
        if not merged:
            names.append(name)
            weights.append(float(scale))
    if names:
        pipe.set_adapters(names, adapter_weights=weights)
    _inference_mode_modules(pipe)


def _inference_mode_modules(pipe: DiffusionPipeline) -> None:
    """Every torch component of `pipe` (and each module in it) in eval mode. peft builds the
    layers of an adapter it injects in train mode, so a LoRA trained with `lora_dropout` left
    its dropout on in the pipeline's eval-mode denoiser: each render dropped a random share of
    the LoRA (from the global RNG, not the seed), the same request gave other pixels, and none
    matched the run's previews (rendered in eval mode). RELIABILITY 695."""
    for component in pipe.components.values():
        if isinstance(component, torch.nn.Module):
            component.eval()


def _lora_stop(pipe: DiffusionPipeline, cancelled: Callable[[], bool] | None) -> Callable[[str | Path], None]:
    """apply_loras' check before LoRA `path`: once `cancelled()` is True, every LoRA off and
    GenerationCancelled."""

    def stop(path: str | Path) -> None:
        if cancelled is not None and cancelled():
            _unload(pipe)
            raise GenerationCancelled(f"generation cancelled while its LoRAs were applied, before {path}")

    return stop


def _unload(pipe: DiffusionPipeline) -> None:
    """Every LoRA off: diffusers' adapters unloaded, LyCORIS patches restored."""
    from lorastudio.generate.lycoris_patch import restore_lycoris

    pipe.unload_lora_weights()
    restore_lycoris(pipe)


def generate_image(
    pipe: DiffusionPipeline,
    family: str,
    *,
    prompt: str,
    seed: int,
    steps: int | None,
    width: int,
    height: int,
    guidance: float | None = None,
    negative_prompt: str | None = None,
    max_sequence_length: int | None = None,
    extra: Mapping[str, Any] | None = None,
    controls: Sequence[Image.Image] = (),
    control_resolution: ControlRule | None = None,
    cancelled: Callable[[], bool] | None = None,
    on_step: Callable[[int, int], None] | None = None,
) -> Image.Image:
    """One image for `prompt`. steps/guidance default to the family's generation defaults (those
    of the pipeline's variant: Family.generation_defaults); `guidance` goes to the family's
    guidance keyword (spec.guidance_kwarg); `negative_prompt` only to a family whose pipeline
    takes one (spec.negative_prompt); `max_sequence_length`: the text tokens the prompt is read to
    (None: the pipeline's 512), for a family that takes it (generation_rules.text_tokens_problems:
    a run's previews read at the run's); `extra` adds pipeline call arguments. The noise comes from
    a CPU generator seeded with `seed`, so a seed gives the same image on any device. `controls`:
    the reference images of an edit family (spec.control_images), each resized to cover width x
    height and centre-cropped to it, as training crops a control to its target, then handed to
    the pipeline (Qwen-Image-Edit's re-sizes it to ~1 MP); `control_resolution`: a run's rule
    instead (TrainConfig.control_resolution), each reference sized and encoded as that run's
    previews encode it (training/samples.py: "target" fitted to width x height, else sized by
    data/control_sizing.py), its prompt read with it as the run reads it. `cancelled`: asked
    after every denoising step (the pipeline's callback_on_step_end, which every family's pipeline
    takes); True stops the render there with GenerationCancelled. `on_step(done, of)`: told after
    every denoising step (the generation worker's progress).

    Raises GenerationCancelled (`cancelled`), UnknownFamily, GenerationFailed (a pixel came out
    NaN or infinite: generate/finite_image.py; nothing is returned to be saved); ConfigError for what
    lorastudio.generation_rules refuses (width / height not multiples of the family's, a seed or
    guidance out of range, a true-CFG scale above 1 without a negative prompt, which its pipeline
    would not apply), a CFG scale above 1 that the pipeline's own rule runs no guidance at (a
    step-distilled FLUX.2 klein: RELIABILITY 1562), steps < 1, or a number of controls the family does not take.
    """
    from lorastudio import families
    from lorastudio.families.common import pipeline_facts

    fam = families.get(family)
    spec = fam.spec
    problems = size_problems(width, height, spec.name) + seed_problems(seed) + guidance_problems(guidance)
    problems += text_tokens_problems(max_sequence_length, spec.name)
    problems += unused_guidance_problems(guidance, negative_prompt, spec.name)
    if steps is not None and steps < 1:
        problems.append(FieldProblem("steps", "must be >= 1"))
    if negative_prompt and not spec.negative_prompt:
        problems.append(FieldProblem("negative_prompt", f"{spec.name} takes no negative prompt"))
    facts = pipeline_facts(pipe, spec.denoiser)  # the checkpoint's flavour
    low, high = fam.control_images(facts)
    if controls and not low <= len(controls) <= high:
        takes = f"{low}-{high}" if high else "none"
        problems.append(
            FieldProblem(
                "controls", f"{type(pipe).__name__} takes {takes} reference images, got {len(controls)}"
            )
        )
    small = reference_size_problem(spec.name, spec.min_reference_side, width, height)
    if controls and small:
        problems.append(FieldProblem("controls", small))
    kwargs = fam.generation_defaults(facts)
    scale = guidance if guidance is not None else kwargs.get(spec.guidance_kwarg)
    problems += unapplied_guidance(pipe, spec, guidance, negative_prompt, scale)
    if problems:
        raise ConfigError(problems)
    resize = None if control_resolution is None else run_sizer(spec.control_sizing, control_resolution)
    try:
        kwargs.update(reference_kwargs(pipe, high, controls, width, height, resize))
    except ControlTooSmall as err:  # a run would have refused it as a control too
        raise ConfigError([FieldProblem("controls", str(err))]) from None
    if steps is not None:
        kwargs["num_inference_steps"] = steps
    if guidance is not None:
        kwargs[spec.guidance_kwarg] = guidance
    if negative_prompt:
        kwargs["negative_prompt"] = negative_prompt
    if max_sequence_length is not None:
        kwargs["max_sequence_length"] = max_sequence_length
    kwargs.update(extra or {})
    kwargs["prompt"] = prompt
    generator = torch.Generator("cpu").manual_seed(seed)
    with torch.inference_mode():
        render = pipe
        if high and not controls:  # an edit family without references: text-to-image (its hook)
            render, kwargs = fam.render_without_references(pipe, kwargs)
        elif controls and control_resolution is not None:  # as the run's previews encode them
            read = [fit_reference(c, width, height) for c in controls] if resize is None else list(controls)
            render, kwargs = fam.render_sized_references(pipe, kwargs, read)
        if cancelled is not None or on_step is not None:
            kwargs["callback_on_step_end"] = _after_steps(
                cancelled, on_step, kwargs.get("num_inference_steps")
            )
        out = render(width=width, height=height, generator=generator, output_type="np", **kwargs)
    return finite_image(out.images[0])  # [H, W, 3] floats in 0..1
