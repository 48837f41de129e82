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
- a paired (edit) run renders every prompt as an edit of the first dataset image's control
  images (its references), fitted to the sample size as `lorastudio generate --control` does;
- each prompt's noise comes from a CPU generator seeded with `sample_seed` (the same image for
  the same LoRA on any device), at the training resolution, with the family's generation
  defaults and `sample_steps` inference steps; a prompt given as an object (SamplePrompt) may
  set its own width, height, seed and guidance scale (the family's guidance keyword).

A round never changes the training: the denoiser runs in eval mode under no_grad (back to train
mode after), the global CPU/CUDA RNG states are forked and restored (LoRA dropout draws from
them), and the run's own generators are never touched, so a run with samples has bitwise the
losses and LoRA of the same run without. Compiled blocks run eagerly while sampling
(torch.compiler stance "force_eager"): no recompilation for the inference shapes.
"""

from __future__ import annotations

import contextlib
import inspect
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch

from lorastudio.config_samples import SamplePrompt, prompt_text
from lorastudio.families.common import pipeline_facts
from lorastudio.generate.pipeline import reference_kwargs
from lorastudio.training.precision import free_accelerator_memory
from lorastudio.training.sample_files import remove_samples, sample_name, samples_dir, write_sample_files

# Optional pipeline components (default None in __init__) that sampling never uses.
_OPTIONAL_PARTS = frozenset({"image_encoder", "feature_extractor"})

if TYPE_CHECKING:
    from PIL import Image

    from lorastudio.config import TrainConfig
    from lorastudio.families.base import Family
    from lorastudio.training.conditioning import Conditioning
    from lorastudio.training.preflight import PreparedRun


class SamplePreviews:
    """The sample rounds of one session of a run.

    Takes the prepared run and the sample prompts' conditioning (prompt -> tensors, from phase
    1). `due(step, total_steps)` says whether a round falls on `step`; `render(denoiser, step,
    vae=None)` writes one PNG per prompt and returns their paths relative to the run folder;
    `discard()` removes the files this session created (stop-and-discard of a resumed run)."""

    def __init__(self, run: PreparedRun, prompt_conds: Conditioning):
        self.run = run
        self.prompts = list(run.cfg.sample_prompts)
        self.references = _references(run)
        missing = [prompt_text(p) for p in self.prompts if prompt_text(p) not in prompt_conds]
        if missing:
            raise KeyError(f"sample prompts without conditioning: {missing}")
        self.conds = prompt_conds
        self.every = run.cfg.sample_every
        self.created: list[Path] = []  # files this session created (not merely replaced)

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
        never changed). Returns the paths relative to the run folder, in prompt order.
        Raises ModelSourceError when the VAE or scheduler cannot be loaded; whatever the
        pipeline raises. The denoiser is back in train mode afterwards in every case."""
        images = self._images(denoiser, vae)
        writers = [_png_writer(image) for image in images]
        existing = {p for p in _round_paths(self.run.run_dir, step, len(images)) if p.exists()}
        paths = write_sample_files(self.run.run_dir, step, writers)
        self.created += [p for p in paths if p not in existing and p not in self.created]
        return [p.relative_to(self.run.run_dir).as_posix() for p in paths]

    def discard(self) -> None:
        """Remove the sample files this session created."""
        remove_samples(self.created)
        self.created = []

    def _images(self, denoiser: torch.nn.Module, vae: Any) -> list[Image.Image]:
        run = self.run
        own_vae = vae is None or vae.dtype != run.dtype
        if own_vae:
            vae = run.family.load_vae(run.cfg.base_model, run.cfg.revision, run.dtype, run.device)
            if vae.dtype != run.dtype:  # SDXL's VAE loads in fp32: decode as the inference pipeline
                vae = vae.to(dtype=run.dtype)
        was_training = denoiser.training
        pipe = None
        try:
            pipe = sampling_pipeline(run, denoiser, vae)
            denoiser.eval()
            with _isolated(run.device):
                return [self._one(pipe, prompt) for prompt in self.prompts]
        finally:
            denoiser.train(was_training)
            del pipe
            if own_vae:
                del vae
                free_accelerator_memory(run.device)

    def _one(self, pipe: Any, entry: str | SamplePrompt) -> Image.Image:
        run = self.run
        cfg, family = run.cfg, run.family
        own = entry if isinstance(entry, SamplePrompt) else SamplePrompt(prompt=entry)
        cond = family.collate_conditioning([self.conds[own.prompt]])
        kwargs = family.generation_defaults(pipeline_facts(pipe, family.spec.denoiser))
        if cfg.sample_steps is not None:
            kwargs["num_inference_steps"] = cfg.sample_steps
        if own.guidance is not None:
            kwargs[family.spec.guidance_kwarg] = own.guidance
        kwargs.update(family.pipeline_prompt_kwargs(cond, run.device, run.dtype))
        if family.spec.guides_with_negative:  # the pipeline's default negative prompt: ""
            negative = family.collate_conditioning([self.conds[""]])
            kwargs.update(family.pipeline_negative_kwargs(negative, run.device, run.dtype))
        size = int(cfg.resolution or 0)
        width, height = own.width or size, own.height or size
        kwargs.update(reference_kwargs(pipe, family.spec.control_images[1], self.references, width, height))
        seed = cfg.sample_seed if own.seed is None else own.seed
        generator = torch.Generator("cpu").manual_seed(seed)
        out = pipe(width=width, height=height, generator=generator, output_type="pil", **kwargs)
        return out.images[0]


def sample_texts(cfg: TrainConfig, family: Family) -> list[str]:
    """The texts phase 1 encodes for sample previews: each sample prompt once, plus "" (the
    negative prompt) when the family's pipeline guides with one (spec.guides_with_negative)."""
    texts = list(dict.fromkeys(prompt_text(p) for p in cfg.sample_prompts))
    if texts and family.spec.guides_with_negative and "" not in texts:
        texts.append("")
    return texts


def _references(run: PreparedRun) -> list[Image.Image]:
    """The reference images of a paired run's samples: the first dataset image's controls."""
    from lorastudio.data.images import load_rgb
    from lorastudio.data.pairs import control_folder_ids

    items = run.scan.items
    if not items:
        return []
    return [load_rgb(p, fid) for p, fid in zip(items[0].controls, control_folder_ids(items[0]), strict=True)]


def sampling_pipeline(run: PreparedRun, denoiser: torch.nn.Module, vae: Any) -> Any:
    """The family's diffusers pipeline built from parts: `denoiser` and `vae` as given, the
    scheduler read from the base model, every other component (text encoders, tokenizers,
    image encoders) None. Raises ModelSourceError when the scheduler cannot be read."""
    import diffusers

    from lorastudio.errors import ModelSourceError
    from lorastudio.families.base import quiet_loading

    spec = run.family.spec
    pipeline_cls = getattr(diffusers, spec.pipeline_class)
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
        pipe = pipeline_cls.from_pretrained(run.cfg.base_model, revision=run.cfg.revision, **parts)
    except (OSError, ValueError, KeyError) as err:
        raise ModelSourceError(f"cannot build the {spec.pipeline_class} for samples: {err}") from err
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
