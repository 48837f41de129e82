"""The diffusers classes the registered families load, imported ahead of a job.

diffusers imports its pipelines and models lazily, on the first attribute access: importing
`diffusers` or `diffusers.models` (the standby worker's PRELOAD, jobs/standby.py) leaves
`diffusers.FluxPipeline`'s module unimported, and that module pulls in every transformer-model
module of diffusers, the text encoders' modeling files of transformers, scipy.stats (through the
schedulers) and torchvision. A real-size FLUX.1 run through the API spent 2.6 s before its first
load in those imports, on the critical path (RESULTS note 43, a sampling profile of the worker on
an H100). The standby resolves each family's classes while it waits, so a job finds them loaded.

Resolving a class imports its module and nothing else: no weights, no CUDA (the standby checks
that no import created a CUDA context, jobs/standby_cuda.py).
"""

from __future__ import annotations

import importlib

from lorastudio import families


def family_class_names() -> list[str]:
    """Every diffusers class name a registered family loads: its pipeline (each flavour's own
    too), denoiser and VAE classes, in registry order, each once."""
    names: list[str] = []
    for family in families.all_families():
        spec = family.spec
        flavours = [v.pipeline_class for v in spec.variants if v.pipeline_class]
        for name in (spec.pipeline_class, *flavours, spec.denoiser_class, spec.vae_class):
            if name not in names:
                names.append(name)
    return names


def import_family_classes() -> list[str]:
    """Resolve every name of `family_class_names()` on the diffusers package (importing the
    modules behind it). Returns "Name (reason)" for each one this install cannot give (an
    older diffusers without a family's classes, a missing optional library): that family's job
    then fails at its own load with the library's message, as without the preload."""
    diffusers = importlib.import_module("diffusers")
    skipped = []
    for name in family_class_names():
        try:
            getattr(diffusers, name)
        except (ImportError, AttributeError, RuntimeError) as err:  # diffusers' lazy import errors
            skipped.append(f"{name} ({type(err).__name__}: {err})")
    return skipped
