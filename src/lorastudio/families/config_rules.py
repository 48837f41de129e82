"""The config facts a family's pipeline components must agree on, as data (FamilySpec.config_rules).

A pipeline folder can hold a component of the right class from another model (an SDXL VAE in a
FLUX.1 folder, a CLIP of another width, a T5 of another size): every file is there, the loaders
fail after minutes or the run trains garbage. These rules are checked against the components'
config.json files only (no weights read) by basemodels/agreement.py, for local folders, single
files' base configs and hub snapshots alike, before anything is loaded.

- `Agrees`: the values of `parts` (summed when several; a part whose component the folder does
  not list is left out) times `factor` equal `target`'s value, or the constant `target`;
- `Required`: a key the family's pipeline reads must be set (not missing, not null).
A key missing from a diffusers config is not judged by `Agrees` (the class default applies); one
missing from a transformers config (no `_class_name`: it writes every field of its class) marks
that component as another class's.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Value:
    """A value of one component's config.json: the first of `keys` that is set; a dotted key
    reads a nested object ("text_config.hidden_size": the text model of a VL encoder)."""

    component: str  # "vae", "text_encoder_2", "transformer"
    keys: tuple[str, ...]  # ("latent_channels",), ("text_config.hidden_size", "hidden_size")

    @property
    def key(self) -> str:
        """The key named in messages (the first one)."""
        return self.keys[0]


@dataclass(frozen=True)
class Agrees:
    """sum(parts) x factor == target (a Value of another component, or a constant)."""

    parts: tuple[Value, ...]
    target: Value | int
    what: str  # the parts' kind in words: "VAE", "text encoder", "transformer"
    factor: int = 1
    # how `factor` reads ("2 x 2": a 2x2 patch; "3 stacked layers"); for a constant target, what
    # the constant is ("16 latent channels x 2 x 2")
    how: str = ""


@dataclass(frozen=True)
class Required:
    """`value` must be set: the family's pipeline reads it (FLUX.1's VAE shift_factor)."""

    value: Value
    what: str
    why: str  # "FluxPipeline shifts the latents by it"


ConfigRule = Agrees | Required


def vae_rules(
    denoiser: str, channels_key: str, in_channels_key: str, patch: int, latent: int, denoiser_what: str
) -> tuple[ConfigRule, ...]:
    """The two rules every family has: the denoiser takes the family's latents (constant), and
    the VAE's latent channels x patch^2 are what the denoiser takes."""
    packed = f" x {patch} x {patch}" if patch > 1 else ""
    return (
        Agrees(
            (Value(denoiser, (in_channels_key,)),),
            latent * patch * patch,
            denoiser_what,
            how=f"{latent} latent channels{packed}",
        ),
        Agrees(
            (Value("vae", (channels_key,)),),
            Value(denoiser, (in_channels_key,)),
            "VAE",
            factor=patch * patch,
            how=packed.removeprefix(" x "),
        ),
    )


def shifted_vae(pipeline: str) -> tuple[ConfigRule, ...]:
    """A VAE whose latents the pipeline scales and shifts (FLUX.1's 16-channel VAE)."""
    return (
        Required(Value("vae", ("scaling_factor",)), "VAE", f"{pipeline} scales the latents by it"),
        Required(Value("vae", ("shift_factor",)), "VAE", f"{pipeline} shifts the latents by it"),
    )
