"""The config facts a family's pipeline components must agree on, as data (FamilySpec.config_rules).

A pipeline folder can hold a component of the right class from another model (an SDXL VAE in a
FLUX.1 folder, a CLIP of another width, a T5 of another size): every file is there, the loaders
fail after minutes or the run trains garbage. These rules are checked against the components'
config.json files by basemodels/agreement.py, for local folders, single files' base configs and
hub snapshots alike, before anything is loaded; `Shape` rules against each component's
safetensors headers (basemodels/weight_shapes.py: a config.json over another model's weights).

- `Agrees`: the values of `parts` (summed when several; a part whose component the folder does
  not list is left out) times `factor` equal `target`'s value, or the constant `target`;
- `Required`: a key the family's pipeline reads must be set (not missing, not null);
- `Shape`: a tensor's leading dimensions are what the component's own config implies.
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


# A factor of an expected dimension: a constant, or keys of the component's own config.json
# (the first set; dotted keys read nested objects: "text_config.vocab_size").
Factor = int | tuple[str, ...]


@dataclass(frozen=True)
class Shape:
    """A tensor of `component`'s weights whose leading dimensions its config.json implies, read
    from the safetensors headers (basemodels/weight_shapes.py: headers only, never the data).

    `tensors` are name suffixes (a name equal to one or ending with "." + one: the same tensor
    under a wrapper's prefix, "text_model." or "language_model.model."); every tensor matching
    the first suffix found is checked. `dims` are the expected leading dimensions, each the
    product of its factors (None: not checked). A component whose safetensors weights hold none
    of `tensors` is another model's."""

    component: str
    tensors: tuple[str, ...]
    dims: tuple[tuple[Factor, ...] | None, ...]
    what: str  # the component's kind in words: "VAE", "text encoder", "transformer"

    def __post_init__(self) -> None:
        for dim in self.dims:
            for factor in dim or ():
                if not isinstance(factor, int) and not (
                    isinstance(factor, tuple) and factor and all(isinstance(k, str) for k in factor)
                ):
                    raise TypeError(
                        f"Shape {self.tensors[0]}: a factor is an int or a tuple of keys, not {factor!r}"
                    )


def autoencoder_shapes(latent_key: str = "latent_channels", base_key: str | None = None) -> tuple[Shape, ...]:
    """A VAE's latent channels in its weights: the encoder's last conv writes mean and log-variance
    (2 x latent channels), the decoder's first conv reads the latents; with `base_key` (the
    Qwen-Image VAE's base_dim) the encoder's first conv writes that many channels."""
    base = (Shape("vae", ("encoder.conv_in.weight",), (((base_key,),),), "VAE"),) if base_key else ()
    return (
        Shape("vae", ("encoder.conv_out.weight",), ((2, (latent_key,)),), "VAE"),
        Shape("vae", ("decoder.conv_in.weight",), (None, ((latent_key,),)), "VAE"),
        *base,
    )


def vision_shape(component: str = "text_encoder") -> Shape:
    """A vision-language text encoder's vision tower (Qwen2.5-VL, Qwen3-VL): its patch embedding
    [vision width, channels, temporal patch, patch, patch]. A text-only model's weights have none."""
    return Shape(
        component,
        ("visual.patch_embed.proj.weight",),
        (
            (("vision_config.hidden_size", "vision_config.embed_dim"),),
            None,
            (("vision_config.temporal_patch_size",),),
            (("vision_config.patch_size",),),
            (("vision_config.patch_size",),),
        ),
        "text encoder",
    )


def qwen3_shape(component: str = "text_encoder") -> Shape:
    """A Qwen3 text model's per-head query norm [head_dim], which Qwen2 / Qwen2.5 weights lack
    (their embeddings can have the same shape)."""
    return Shape(component, ("layers.0.self_attn.q_norm.weight",), ((("head_dim",),),), "text encoder")


def embedding_shape(component: str, tensors: tuple[str, ...], width_keys: tuple[str, ...]) -> Shape:
    """A text encoder's token embedding: vocab_size rows of its hidden size."""
    vocab = ("text_config.vocab_size", "vocab_size")
    return Shape(component, tensors, ((vocab,), (width_keys,)), "text encoder")


def projection_shape(
    component: str, tensor: str, out: tuple[Factor, ...], in_key: str, what: str = "transformer"
) -> Shape:
    """A linear projection of the denoiser: [out features, in features], in = one config key."""
    return Shape(component, (tensor,), (out, ((in_key,),)), what)


HEADS = (("num_attention_heads",), ("attention_head_dim",))  # a transformer's inner width

ConfigRule = Agrees | Required | Shape


def qwen_vl_pipeline_shapes() -> tuple[Shape, ...]:
    """The weights a Qwen-Image-style pipeline's shared parts must hold (Qwen-Image, its edit
    variants, Krea 2): the Qwen-Image VAE (z_dim latents, base_dim first conv) and a Qwen2.5-VL
    text encoder (its vision tower, and a token embedding as wide as its text config says)."""
    return (
        *autoencoder_shapes("z_dim", "base_dim"),
        vision_shape(),
        embedding_shape("text_encoder", ("embed_tokens.weight",), ("text_config.hidden_size", "hidden_size")),
    )
