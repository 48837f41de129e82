"""Sample previews during training: the config's sample prompts rendered with the live LoRA
every `sample_every` optimizer steps and after the last step, saved beside the run as
samples/step-000123-<prompt index>.png and announced with a SampleReady event.

How a round renders (exactly what inference would render):
- the prompts were encoded in phase 1 with the captions, so no text encoder is needed now;
  `Family.pipeline_prompt_kwargs` turns their cached conditioning into prompt_embeds kwargs;
- the family's diffusers pipeline class is built from parts: the live training denoiser (its
  LoRA included), a VAE, the base model's scheduler, and no text encoders;
- the VAE is loaded from the base model for each round and freed after it (the run keeps no
  decoder in memory between rounds; on a GPU a FLUX.1 VAE is ~0.3 GB and loads in well under a
  second from the page cache). It decodes in the run's dtype, as in the inference pipeline
  loaded in that dtype (SDXL's pipeline upcasts an fp16 VAE itself). A run that encodes latents
  every step already holds its VAE: that one is reused when its dtype is the run's;
- an edit family renders each prompt with its reference images (config_samples.SamplePrompt:
  the prompt's `controls`, else on a paired run the first paired image's controls: see
  data/sample_refs.py), fitted to the sample size as `lorastudio generate --control` does, or,
  where the run sizes its controls on their own (TrainConfig.control_resolution other than
  "target"), sized as training sized them (data/control_sizing.py), and VAE-encoded at that
  size (Family.render_sized_references: Qwen-Image-Edit's pipelines would re-size every reference
  to ~1 MP, RELIABILITY 1490); a copy of each is kept beside the samples (samples/ref-<prompt>-<slot>.png) for the gallery. Where the
  family's prompt sees the controls (spec.prompt_sees_controls: Qwen-Image-Edit), phase 1 encoded
  each prompt with its own references (sample_texts: EditPrompts keyed by prompt + files; fitted
  to the sample size, or as they are where the run sizes controls: as training encodes them);
- each prompt's noise comes from a CPU generator seeded with `sample_seed` (the same image for
  the same LoRA on any device), at the training resolution, with the family's generation
  defaults and `sample_steps` inference steps; a prompt given as an object (SamplePrompt) may
  set its own width, height, seed and guidance scale (the family's guidance keyword);
- each image is taken as the pipeline's "np" output and checked as Generate checks its images
  (generate/finite_image.py, RELIABILITY 1561): a prompt whose pixels came out NaN or infinite
  (an overflowing LoRA: the "pil" cast made them a black PNG) has no file in that round; its
  reason is in `failures`, which the loop announces as a RunWarning (RELIABILITY 1651).

A round never changes the training: the denoiser runs in eval mode under no_grad (back to train
mode after), the global CPU/CUDA RNG states are forked and restored (LoRA dropout draws from
them), and the run's own generators are never touched, so a run with samples has bitwise the
losses and LoRA of the same run without. Compiled blocks run eagerly while sampling
(torch.compiler stance "force_eager"): no recompilation for the inference shapes.
"""

from __future__ import annotations

import contextlib
import inspect
import time
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch

from lorastudio.config_samples import SamplePrompt, prompt_text
from lorastudio.data.images import load_rgb
from lorastudio.data.safe_open import folder_identity
from lorastudio.errors import GenerationFailed
from lorastudio.families.common import pipeline_facts
from lorastudio.families.single_file import apply_scheduler_overrides, config_of, model_source
from lorastudio.generate.finite_image import finite_image
from lorastudio.generate.references import reference_kwargs, run_sizer
from lorastudio.hub_token import hub_kwargs
from lorastudio.open_reason import library_open_reason
from lorastudio.training.inputs.conditioning import EditPrompt, Text
from lorastudio.training.precision import free_accelerator_memory
from lorastudio.training.sample_files import (
    remove_samples,
    sample_name,
    samples_dir,
    write_reference_files,
    write_sample_files,
)

# Optional pipeline components (default None in __init__) that sampling never uses.
_OPTIONAL_PARTS = frozenset({"image_encoder", "feature_extractor"})

if TYPE_CHECKING:
    from PIL import Image

    from lorastudio.config import TrainConfig
    from lorastudio.data import DatasetScan
    from lorastudio.families.base import Family
    from lorastudio.training.inputs.conditioning import Conditioning
    from lorastudio.training.preflight import PreparedRun


class SamplePreviews:
    """The sample rounds of one session of a run.

    Takes the prepared run and the sample prompts' conditioning (prompt -> tensors, from phase
    1). `due(step, total_steps)` says whether a round falls on `step`; `render(denoiser, step,
    vae=None)` writes one PNG per prompt whose image is finite and returns their paths relative
    to the run folder (`failures`: the round's others, why each has none); `discard()` removes
    the files this session created (stop-and-discard of a resumed run)."""

    def __init__(self, run: PreparedRun, prompt_conds: Conditioning):
        self.run = run
        self.entries = [_entry(p) for p in run.cfg.sample_prompts]  # each with its own settings
        self.prompts = [e.prompt for e in self.entries]
        paths = sample_reference_paths(run.cfg, run.family, run.scan)  # per prompt, its references
        self.references = [[load_rgb(p, folder_identity(p.parent)) for p in refs] for refs in paths]
        # per prompt, the conditioning keys of it and of its negative "" (with its references
        # where the family's prompt sees them: phase 1 encoded them so, sample_texts)
        self.keys = [
            (_key(text), _key(negative)) for text, negative in _prompt_texts(run.cfg, run.family, paths)
        ]
        missing = [p for p, (key, _) in zip(self.prompts, self.keys, strict=True) if key not in prompt_conds]
        if missing:
            raise KeyError(f"sample prompts without conditioning: {missing}")
        self.conds = prompt_conds
        self.every = run.cfg.sample_every
        self.created: list[Path] = []  # files this session created (not merely replaced)
        # each round's seconds beyond its prompts' renders (the VAE's load for the round, the
        # pipeline's assembly, the PNGs written): the wall-time record's `sample_fixed_s`
        self.fixed_s: list[float] = []
        self._rendering = 0.0
        self.kept = False  # the reference copies are written
        # the last round's prompts without a file: "sample prompt <n> (step k): why" (RELIABILITY 1651)
        self.failures: list[str] = []

    @property
    def enabled(self) -> bool:
        return bool(self.prompts)

    def due(self, step: int, total_steps: int) -> bool:
        """A round falls on every `sample_every`-th step and on the last step of the run."""
        if not self.prompts:
            return False
        return step >= total_steps or (self.every is not None and step % self.every == 0)

    def render(self, denoiser: torch.nn.Module, step: int, vae: Any = None) -> list[str]:
        """Render every sample prompt with `denoiser` as it is now and write the PNGs (staged,
        then renamed). `vae`: one already loaded on the run's device, else one is loaded for
        this round and freed (also when `vae` is not in the run's dtype: the training's VAE is
        never changed). Returns the paths relative to the run folder, in prompt order, of the
        prompts whose image came out finite; each other prompt has no file this round and a line
        in `failures` (RELIABILITY 1651: its pixels were NaN or infinite, saved black before).
        Raises ModelSourceError when the VAE or scheduler cannot be loaded; whatever the
        pipeline raises. The denoiser is back in train mode afterwards in every case."""
        start, self._rendering = time.perf_counter(), 0.0
        self.failures = []
        images = self._images(denoiser, vae)
        for index, image in enumerate(images):
            if isinstance(image, GenerationFailed):
                self.failures.append(f"sample prompt {index + 1} of step {step} has no preview: {image}")
        writers = [None if isinstance(image, GenerationFailed) else _png_writer(image) for image in images]
        existing = {p for p in _round_paths(self.run.run_dir, step, len(images)) if p.exists()}
        self._keep_references()
        paths = write_sample_files(self.run.run_dir, step, writers)
        self.created += [p for p in paths if p not in existing and p not in self.created]
        self.fixed_s.append(max(time.perf_counter() - start - self._rendering, 0.0))
        return [p.relative_to(self.run.run_dir).as_posix() for p in paths]

    def _keep_references(self) -> None:
        """Copy each prompt's reference images beside the samples (once per session)."""
        if self.kept or not any(self.references):
            return
        writers = {
            (i, slot): _png_writer(image)
            for i, refs in enumerate(self.references)
            for slot, image in enumerate(refs)
        }
        existing = set(self.run.run_dir.glob("samples/ref-*.png"))
        paths = write_reference_files(self.run.run_dir, writers)
        self.created += [p for p in paths if p not in existing and p not in self.created]
        self.kept = True

    def discard(self) -> None:
        """Remove the sample files this session created."""
        remove_samples(self.created)
        self.created = []

    def _images(self, denoiser: torch.nn.Module, vae: Any) -> list[Image.Image | GenerationFailed]:
        run = self.run
        own_vae = vae is None or vae.dtype != run.dtype
        if own_vae:
            vae = run.family.load_vae(model_source(run.cfg), run.cfg.revision, run.dtype, run.device)
            if vae.dtype != run.dtype:  # SDXL's VAE loads in fp32: decode as the inference pipeline
                vae = vae.to(dtype=run.dtype)
        was_training = denoiser.training
        pipe = None
        try:
            pipe = sampling_pipeline(run, denoiser, vae)
            denoiser.eval()
            with _isolated(run.device):
                return [self._timed(pipe, i) for i in range(len(self.prompts))]
        finally:
            denoiser.train(was_training)
            del pipe
            if own_vae:
                del vae
                free_accelerator_memory(run.device)

    def _timed(self, pipe: Any, index: int) -> Image.Image | GenerationFailed:
        """`_one`, its seconds added to the round's rendering (the rest of a round is its fixed
        part); the refusal of a non-finite image returned, not raised (the round goes on)."""
        start = time.perf_counter()
        try:
            return self._one(pipe, index)
        except GenerationFailed as refusal:
            return refusal
        finally:
            self._rendering += time.perf_counter() - start

    def _one(self, pipe: Any, index: int) -> Image.Image:
        """Sample prompt `index` rendered with its references and its own size, seed and guidance.
        Raises GenerationFailed when a pixel came out NaN or infinite (finite_image)."""
        run = self.run
        cfg, family = run.cfg, run.family
        own = self.entries[index]
        key, negative_key = self.keys[index]
        cond = family.collate_conditioning([self.conds[key]])
        facts = pipeline_facts(pipe, family.spec.denoiser)  # the checkpoint's flavour
        kwargs = family.generation_defaults(facts)
        if cfg.sample_steps is not None:
            kwargs["num_inference_steps"] = cfg.sample_steps
        if own.guidance is not None:
            kwargs[family.spec.guidance_kwarg] = own.guidance
        kwargs.update(family.pipeline_prompt_kwargs(cond, run.device, run.dtype))
        if family.spec.guides_with_negative:  # the pipeline's default negative prompt: ""
            negative = family.collate_conditioning([self.conds[negative_key]])
            kwargs.update(family.pipeline_negative_kwargs(negative, run.device, run.dtype))
        width, height = _sample_size(cfg, own)
        references = self.references[index]
        high = family.control_images(facts)[1]
        kwargs.update(reference_kwargs(pipe, high, references, width, height, control_resizer(cfg, family)))
        render = pipe
        if high and not references:  # an edit family's prompt without references: text-to-image
            render, kwargs = family.render_without_references(pipe, kwargs)
        elif references:  # each encoded at the size the run trains it (Qwen-Image-Edit: not ~1 MP)
            render, kwargs = family.render_sized_references(pipe, kwargs, references)
        seed = cfg.sample_seed if own.seed is None else own.seed
        generator = torch.Generator("cpu").manual_seed(seed)
        out = render(width=width, height=height, generator=generator, output_type="np", **kwargs)
        return finite_image(out.images[0])  # [H, W, 3] floats in 0..1, as Generate (RELIABILITY 1651)


def sample_reference_paths(cfg: TrainConfig, family: Family, scan: DatasetScan) -> list[tuple[Path, ...]]:
    """Each sample prompt's reference image paths (data/sample_refs.py), counted against the
    base checkpoint's flavour (Family.source_control_images). Raises DatasetError naming the
    prompt and file when one is missing, unreadable, or too many / too few."""
    from lorastudio.data.sample_refs import sample_references
    from lorastudio.errors import DatasetError
    from lorastudio.settings import get_settings

    settings = get_settings()
    paths, problems = sample_references(
        cfg.sample_prompts,
        scan,
        family.source_control_images(cfg.base_model, cfg.revision),
        family=family.spec.name,
        max_pixels=settings.max_image_pixels,
        decode_pixels=settings.max_decode_pixels,
        sizing=family.spec.control_sizing,
        rule=cfg.control_resolution,
        control_names=cfg.control_dirs,
    )
    if problems:
        raise DatasetError("the sample prompts' reference images cannot be used", problems)
    return paths


def sample_texts(
    cfg: TrainConfig, family: Family, references: Sequence[tuple[Path, ...]] | None = None
) -> list[Text]:
    """The texts phase 1 encodes for sample previews: each sample prompt once, plus "" (the
    negative prompt) when the family's pipeline guides with one (spec.guides_with_negative).
    Where the family's prompt sees the controls (spec.prompt_sees_controls), each is an
    EditPrompt with that prompt's references (`references`: sample_reference_paths), fitted
    to the sample size as the previews hand them to the pipeline."""
    refs = references if references is not None else [()] * len(cfg.sample_prompts)
    pairs = _prompt_texts(cfg, family, refs)
    texts: dict[str | None, Text] = {}
    for text in [p for p, _ in pairs] + [n for _, n in pairs if n is not None]:  # prompts, then ""s
        texts.setdefault(_key(text), text)
    return list(texts.values())


def _prompt_texts(
    cfg: TrainConfig, family: Family, references: Sequence[tuple[Path, ...]]
) -> list[tuple[Text, Text | None]]:
    """Per sample prompt: what phase 1 encodes for it and for its negative prompt "" (None
    unless spec.guides_with_negative); EditPrompts with its references where the prompt sees them."""
    out: list[tuple[Text, Text | None]] = []
    for entry, paths in zip(cfg.sample_prompts, references, strict=True):
        size = _sample_size(cfg, _entry(entry))  # the preview's size: _one fits the references to it
        fit = None if control_resizer(cfg, family) else size  # or sizes them as training did
        captions: list[str] = [prompt_text(entry), *([""] if family.spec.guides_with_negative else [])]
        if family.spec.prompt_sees_controls:
            ids = tuple(folder_identity(p.parent) for p in paths)
            texts: list[Text] = [EditPrompt(c, tuple(paths), ids, fit) for c in captions]
        else:
            texts = list(captions)
        out.append((texts[0], texts[1] if len(texts) > 1 else None))
    return out


def control_resizer(cfg: TrainConfig, family: Family) -> Callable[[Image.Image], Image.Image] | None:
    """How the previews size a reference where the run sizes its controls on their own
    (control_resolution "pipeline" or a side; data/control_sizing.py): an RGB image -> the image
    training would have encoded; None for "target" (previews fit it to their size)."""
    return run_sizer(family.spec.control_sizing, cfg.control_resolution)


def _entry(entry: str | SamplePrompt) -> SamplePrompt:
    """A sample_prompts entry as an object (a plain prompt sets none of its own settings)."""
    return entry if isinstance(entry, SamplePrompt) else SamplePrompt(prompt=entry)


def _sample_size(cfg: TrainConfig, own: SamplePrompt) -> tuple[int, int]:
    """(width, height) of one sample preview: its own, else the training resolution
    (data/sample_refs.sample_size, what the checks before the run size its references for)."""
    from lorastudio.data.sample_refs import sample_size

    return sample_size(own, cfg.resolution)


def _key(text: Text | None) -> str | None:
    """The conditioning key of a phase-1 text (None for no text)."""
    return text.key if isinstance(text, EditPrompt) else text


def sampling_pipeline(run: PreparedRun, denoiser: torch.nn.Module, vae: Any) -> Any:
    """The family's diffusers pipeline built from parts: `denoiser` and `vae` as given, the
    scheduler read from the base model, every other component (text encoders, tokenizers,
    image encoders) None. Raises ModelSourceError when the scheduler cannot be read."""
    import diffusers

    from lorastudio.errors import ModelSourceError
    from lorastudio.families.base import quiet_loading

    spec = run.family.spec
    source = model_source(run.cfg)  # a single file: its base config's scheduler, with its overrides
    run.family.prepare_pipeline_loading()
    class_name = run.family.source_pipeline_class(source, run.cfg.revision)  # the checkpoint's flavour
    pipeline_cls = getattr(diffusers, class_name)
    params = inspect.signature(pipeline_cls.__init__).parameters
    components = [  # required __init__ arguments are the components; plus the optional ones
        name
        for name, param in params.items()
        if name != "self" and (param.default is inspect.Parameter.empty or name in _OPTIONAL_PARTS)
    ]
    parts: dict[str, Any] = {name: None for name in components if name != "scheduler"}
    parts.update({"vae": vae, spec.denoiser: denoiser})
    quiet_loading()
    try:
        pipe = pipeline_cls.from_pretrained(
            config_of(source), revision=run.cfg.revision, **hub_kwargs(), **parts
        )
    except (OSError, ValueError, KeyError) as err:
        raise ModelSourceError(
            f"cannot build the {class_name} for samples: {library_open_reason(err)}"
        ) from err
    apply_scheduler_overrides(pipe, source)
    pipe.set_progress_bar_config(disable=True)
    return pipe


@contextlib.contextmanager
def _isolated(device: torch.device) -> Iterator[None]:
    """No gradients, compiled code run eagerly, and the global RNG states (CPU, and the CUDA
    device's) restored on exit: nothing the training draws from is consumed."""
    devices = [device] if device.type == "cuda" else []
    with torch.random.fork_rng(devices=devices), torch.no_grad(), torch.compiler.set_stance("force_eager"):
        yield


def _round_paths(run_dir: Path, step: int, count: int) -> list[Path]:
    return [samples_dir(run_dir) / sample_name(step, i) for i in range(count)]


def _png_writer(image: Image.Image) -> Callable[[Path], None]:
    def write(path: Path) -> None:
        with path.open("wb") as fh:
            image.save(fh, format="PNG")

    return write
