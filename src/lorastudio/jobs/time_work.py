"""The work of a run's sized phases as a cost model of the model's own shapes, for the wall-time
forecast (jobs/time_forecast.py, jobs/time_fit.py). No torch: the safetensors headers and configs.

Why hand-written: no library forecasts a training step's time from a diffusers folder; FLOP
counters (fvcore, torch.utils.flop_counter) need the model in memory and a traced step, which the
job service (no torch) cannot do before a run. What a step's time scales with is not its pixels:
a transformer's linear layers cost tokens x weights, its attention tokens^2 x heads x head_dim
(the tiny FLUX.1's step at 2048 px, 16.9k tokens, grew 12x from 1024 px on one thread, not 4x),
a text stream costs the same at every size (FLUX.1's 512 T5 tokens are most of a tiny model's
64 px step: 16 ms, 36 at 256 px), a U-Net's convolutions cost weights x the cells of their level
(1/4 per level down). So:

    step work   forward FLOPs of one sample through the denoiser at `pixels`, each weight of the
                safetensors headers x the tokens it sees: 2 x weights x tokens for a linear
                (image tokens = pixels / (vae_scale x patch)^2; text tokens = the family's
                max_sequence_length, else 77; per-sample modulation / time embeddings x 1; a
                joint block's weights x both), 2 x weights x cells of its level for a U-Net's
                convolution, plus 4 x tokens_q x tokens_kv x inner dim per attention (each to_q)
    VAE work    the same for the VAE's encoder at full pixels (its levels and mid attention),
                plus ELEMENT_WORK per element of each convolution's output (below)

Both None when the folder has no readable headers (a hub id): the callers then scale by pixels as
before. A record's time is then `fixed + work / rate`: `rate` (work per second of this device) is
the slope fitted on this machine's records of one signature at two sizes (median over the
signatures that have them), else on a CPU this host's probed rate, else CPU_WORK_RATE (jobs/
time_rate.py), else unknown (a GPU: the time is all work, the proportional rule by work). One record so splits into
its fixed part and its work part, and the work part scales by the work ratio. The VAE's work runs
at time_forecast.VAE_RATE x the step's rate, a sample round's (forward passes, decodes) at
FORWARD_RATE x (a forward only; the step's work counts its forward, not its backward).

What it leaves out: FLOPs of different kinds run at different rates beyond the VAE's element
term (ELEMENT_WORK: a narrow convolution's output traffic, which made the tiny VAE's mid attention
look several times faster per FLOP than its convolutions), the denoiser's own memory traffic, and
the host's load (RELIABILITY, Known problems).
"""

from __future__ import annotations

import math
import re
import statistics
from collections.abc import Callable
from pathlib import Path
from typing import Any

from lorastudio import families
from lorastudio.families.spec import FamilySpec
from lorastudio.jobs.vram_estimate import _safetensors_shapes

TEXT_TOKENS = 77  # a family without max_sequence_length: CLIP's
# the multiple a transformer pads its text stream to (diffusers' ZImageTransformer2DModel:
# SEQ_MULTI_OF); the others take a caption's tokens as they are
_TEXT_MULTIPLE = {"ZImageTransformer2DModel": 32}
# The VAE encoder's work per element of a convolution's output beyond its multiply-adds, in forward
# FLOPs at the rate its attention runs: the GroupNorm, SiLU, residual add and the convolution's own
# reads and writes of that element, memory traffic once a level's activations leave the cache. The
# tiny VAE (16-32 channels: 290-580 FLOPs an element) on one CPU thread, CPU time (bench/RESULTS
# note 42): its mid attention at 9.6e10 FLOP/s, its convolutions with their norms and activations
# 0.80 s at 1024 px and 3.63 s at 2048 for 1.9e10 / 7.6e10 FLOPs, 780 / 920 such FLOPs an output
# element beyond theirs (390 at 512 px, partly in the cache). Without it the encoder's work grew
# 11.7x from 1024 to 2048 px (the attention's cells^2) where its time grows 8.2x, and the latent
# cache fitted on 256 and 1024 px came out ~2x high at 2048. A real VAE's 128-512 channels
# (2,300-9,200 FLOPs an element) make it 8-35 % of their convolutions' work.
ELEMENT_WORK = 800.0

_MODULATION = (
    "norm1.linear",
    "norm1_context.linear",
    "norm.linear",
    "norm_out.linear",
    "img_mod",
    "txt_mod",
    "adaLN_modulation",
    "time_text_embed",
    "t_embedder",
    "time_embed",
    "time_emb_proj",
    "add_embedding",
    "guidance",
)
_TEXT = ("context", "add_q_proj", "add_k_proj", "add_v_proj", "to_add_out", "txt", "cap_")
_LEVEL = re.compile(r"^(down_blocks|up_blocks)\.(\d+)\.")


def step_work(
    family: str, base_model: str, pixels: float, samples: float, text_tokens: float | None = None
) -> float | None:
    """Forward FLOPs of `samples` samples of `pixels` through the denoiser of `base_model` (module
    docstring); None when its headers cannot be read. `text_tokens`: the text tokens a sample's
    caption gives the denoiser, for a family that cuts its captions' embeddings to their tokens
    (FamilySpec.text_padded False; `seen_text_tokens`); None, or a padding family: the
    family's max_sequence_length (else TEXT_TOKENS)."""
    spec = families.get(family).spec
    shapes = _shapes(Path(base_model) / spec.denoiser)
    if not shapes or pixels <= 0:
        return None
    txt = float(spec.defaults.get("max_sequence_length") or TEXT_TOKENS)
    if not spec.text_padded and text_tokens is not None and text_tokens > 0:
        txt = float(text_tokens)
    cells = pixels / spec.vae_scale_factor**2  # latent cells of one sample
    if any(_LEVEL.match(n) for n, _ in shapes):
        work = _unet(shapes, cells, txt)
    else:
        work = _transformer(shapes, cells / spec.patch_size**2, txt)
    return work * samples if math.isfinite(work) and work > 0 else None


def vae_work(family: str, base_model: str, pixels: float, part: str = "encoder") -> float | None:
    """Forward work of one image of `pixels` through the VAE's encoder (`part` "encoder"; the
    latent cache) or decoder ("decoder"; a sample) of `base_model`, in FLOPs: each convolution's
    2 x weights x the pixels of its level + ELEMENT_WORK x its output channels x those pixels (the
    traffic of its output, which a narrow convolution's multiply-adds do not show), each
    attention's 4 x cells^2 x inner dim (the mid block's). A block's level is the number of
    resampling blocks before it (the 2D VAE's down_blocks.i / up_blocks.i hold their own
    down- / upsampler; the Qwen-Image VAE's encoder resample blocks are blocks of their own), counted
    down from the latent's level in the decoder; None when its headers cannot be read or no
    down_blocks / up_blocks are found."""
    del family  # every family's VAE folder is "vae"
    prefix = f"{part}."
    shapes = [(n[len(prefix) :], s) for n, s in _shapes(Path(base_model) / "vae") if n.startswith(prefix)]
    marks = {int(m.group(2)) for n, _ in shapes if (m := _LEVEL.match(n)) and _resamples(n)}
    if not any(_LEVEL.match(n) for n, _ in shapes) or pixels <= 0:
        return None
    total = 0.0
    for name, shape in shapes:
        match = _LEVEL.match(name)
        if match:  # the resamplings before it, its own block's included when it is the resampler
            index = int(match.group(2))
            before = sum(1 for d in marks if d < index) + (1 if _resamples(name) else 0)
            level = before if part == "encoder" else len(marks) - before
        elif part == "encoder":  # conv_in at full size; the mid block, conv_out at the last level
            level = 0 if name.startswith("conv_in") else len(marks)
        else:  # the decoder's conv_in and mid block at the latent's level; conv_out at full size
            level = len(marks) if name.startswith(("conv_in", "mid_block")) else 0
        at = _at_level(pixels, level)
        if len(shape) >= 2 and not name.endswith("gamma"):
            total += 2 * _count(shape) * at
        if len(shape) >= 4:  # a convolution: its output's traffic (its norm, activation, reads and writes)
            total += ELEMENT_WORK * shape[0] * at
        if name.endswith(("to_q.weight", "to_qkv.weight")):
            inner = shape[0] // (3 if name.endswith("to_qkv.weight") else 1)
            total += 4 * at * at * inner
    return total if math.isfinite(total) and total > 0 else None


def _resamples(name: str) -> bool:
    """Whether a VAE layer changes its level: a downsampler (the 2D VAE's, the Qwen-Image VAE's
    resample blocks) or an upsampler's convolution after its upsampling (the Qwen-Image VAE's
    time_conv runs before it, at the lower level)."""
    return (
        "downsamplers" in name or ".resample." in name or ("upsamplers" in name and "time_conv" not in name)
    )


def round_work(
    family: str,
    base_model: str,
    pixels: float,
    sample_work: float,
    images: float,
    text_tokens: float | None = None,
) -> float | None:
    """The work of one sample round: prompts x sample steps (`sample_work`) forward passes of one
    sample at `pixels` (`text_tokens`: as step_work's) and `images` (its prompts) decodes by the
    VAE; None when the base's headers cannot be read."""
    forward = step_work(family, base_model, pixels, 1, text_tokens)
    decode = vae_work(family, base_model, pixels, "decoder")
    if not forward or decode is None:
        return None
    return sample_work * forward + images * decode


def _transformer(shapes: list[tuple[str, tuple[int, ...]]], img: float, txt: float) -> float:
    total = 0.0
    for name, shape in shapes:
        if len(shape) != 2:
            continue
        text = any(t in name for t in _TEXT)
        if any(m in name for m in _MODULATION):
            tokens = 1.0
        elif text:
            tokens = txt
        elif name.startswith(("single_transformer_blocks.", "layers.")):
            tokens = img + txt  # a joint block: one stream of both
        else:
            tokens = img
        total += 2 * _count(shape) * tokens
        if name.endswith("to_q.weight"):  # joint attention, or a refiner over one stream
            seq = txt if text else img if "noise_refiner" in name else img + txt
            total += 4 * seq * seq * shape[0]
    return total


def _unet(shapes: list[tuple[str, tuple[int, ...]]], cells: float, txt: float) -> float:
    levels = max(int(m.group(2)) for n, _ in shapes if (m := _LEVEL.match(n))) + 1
    total = 0.0
    for name, shape in shapes:
        match = _LEVEL.match(name)
        if match:
            level = (
                int(match.group(2)) if match.group(1) == "down_blocks" else levels - 1 - int(match.group(2))
            )
        else:
            level = levels - 1 if name.startswith("mid_block") else 0
        level += 1 if "downsamplers" in name else -1 if "upsamplers" in name else 0
        at = _at_level(cells, level)
        if any(m in name for m in _MODULATION):
            at = 1.0
        elif "attn2.to_k" in name or "attn2.to_v" in name:
            at = txt
        if len(shape) in (2, 4):
            total += 2 * _count(shape) * at
        if name.endswith("attn1.to_q.weight"):
            total += 4 * at * at * shape[0]
        elif name.endswith("attn2.to_q.weight"):
            total += 4 * at * txt * shape[0]
    return total


# a level past this many halvings has no cell left (4^-40 of a 2048 px image's pixels): a
# header's level is a number from its names ("down_blocks.<i>."), which a damaged or hostile
# header may make 10^12 (4 ** 10^12 as Python's integer: a hang, then an OverflowError)
_MAX_LEVEL = 40


def _at_level(cells: float, level: int) -> float:
    """`cells` at `level` halvings of each side (1/4 per level; level 0 and below: all of them)."""
    return cells * 0.25 ** min(max(level, 0), _MAX_LEVEL)


def _count(shape: tuple[int, ...]) -> float:
    """Elements of `shape` as a float (inf past float's range: the callers' sums then are not
    finite and read as no work)."""
    return math.prod(float(d) for d in shape)


def _shapes(folder: Path) -> list[tuple[str, tuple[int, ...]]]:
    """(tensor name, shape) of the *.safetensors in `folder` ([] when none; a header whose shapes
    are not whole numbers >= 0 reads as none: vram_estimate._safetensors_shapes), each header
    parsed once per file version and shared with the VRAM estimate (jobs/safetensors_headers.py)."""
    try:
        files = sorted(folder.glob("*.safetensors"))
    except OSError:
        return []
    return [item for f in files for item in _safetensors_shapes(f)]


def record_step_work(record: dict[str, Any]) -> float | None:
    """The step work of a record (its signature's family, base, mean pixels, batch x accumulation);
    None when the base's headers cannot be read (a hub id, a folder since removed)."""
    sig = record["signature"]
    try:
        return step_work(
            sig["family"],
            sig["base_model"],
            sig["pixels"],
            sig["batch_size"] * sig["grad_accum"],
            _text_tokens(record),
        )
    except (KeyError, TypeError, families.UnknownFamily):
        return None


def record_image_work(record: dict[str, Any]) -> float | None:
    """The VAE work of one image of a record's pixels (None: not readable)."""
    sig = record["signature"]
    try:
        return vae_work(sig["family"], sig["base_model"], sig["pixels"])
    except (KeyError, TypeError, families.UnknownFamily):
        return None


def record_round_work(record: dict[str, Any]) -> float | None:
    """The work of one of a record's sample rounds (round_work: its prompts x sample steps and its
    prompts' decodes, `sample_images`); None when not readable or the record has no such count
    (records before it: their rounds are scaled by the forward work alone)."""
    sig = record["signature"]
    if not record.get("sample_work") or not record.get("sample_images"):
        return None
    try:
        return round_work(
            sig["family"],
            sig["base_model"],
            sig["pixels"],
            record["sample_work"],
            record["sample_images"],
            _text_tokens(record),
        )
    except (KeyError, TypeError, families.UnknownFamily):
        return None


def _text_tokens(record: dict[str, Any]) -> float | None:
    """The text tokens a record's captions gave its denoiser (`text_tokens`, written by the engine
    for a family that does not pad its captions); None: not recorded (step_work's default)."""
    value = record.get("text_tokens")
    return float(value) if isinstance(value, int | float) and math.isfinite(value) and value > 0 else None


def seen_text_tokens(spec: FamilySpec, counts: list[int], limit: int | None) -> float | None:
    """The mean text tokens the denoiser sees per caption of a family that cuts its captions'
    embeddings to their own tokens (FamilySpec.text_padded False), each of `counts` cut at
    `limit` (the text encoder's; None: none) and rounded up to the multiple its transformer pads
    the text stream to (_TEXT_MULTIPLE); None for a padding family, one the preflight cannot
    count (Qwen-Image-Edit: its prompt holds the control images) or no counts. The preflight's
    counts (jobs/caption_tokens.py) and the engine's record (its embeddings' lengths,
    training/planning/run_timings.py) go through it alike."""
    measured = spec.caption_tokens is not None and spec.caption_tokens.cuts  # the preflight counts them
    if spec.text_padded or not measured or not counts:
        return None
    multiple = _TEXT_MULTIPLE.get(spec.denoiser_class, 1)
    cut = [min(n, limit) if limit else n for n in counts]
    return statistics.fmean(math.ceil(max(n, 1) / multiple) * multiple for n in cut)


def scaled(seconds: float, work_then: float, work_now: float, rate: float | None) -> float:
    """A phase of `seconds` measured at `work_then`, forecast at `work_now`: its work part
    (work_then / rate, at most all of it; all of it without a rate) scaled by the work ratio,
    the rest (its fixed part) kept."""
    if work_then <= 0:
        return seconds
    part = seconds if rate is None else min(seconds, work_then / rate)
    return seconds - part + part * work_now / work_then


Work = Callable[[dict[str, Any]], float]


def nearest(records: list[dict[str, Any]], units: dict[str, float]) -> list[dict[str, Any]]:
    """`records` (newest first) with those whose step work is nearest this run's first (the cost
    model's ratio either way; a record without it last): a run of another base at its size says
    more of this one's fixed and work parts than a larger one scaled down."""
    if not units["step_flops"]:
        return records

    def distance(r: dict[str, Any]) -> float:
        work = record_step_work(r)
        return abs(math.log(work / units["step_flops"])) if work else math.inf

    return sorted(records, key=distance)  # stable: the newest first among equals


def fit_measures(
    records: list[dict[str, Any]], units: dict[str, float]
) -> tuple[Work, Work, dict[str, float]]:
    """What the fit of `records` measures a step's and the latent cache's work in, and `units`
    in that measure: the cost model's FLOPs (jobs/time_work.py) where this run's and every
    record's base can be read, else pixels x samples and images x pixels (without the shapes)."""

    def pixels(r: dict[str, Any]) -> float:
        sig = r["signature"]
        return float(sig["pixels"] * sig["batch_size"] * sig["grad_accum"])

    def images(r: dict[str, Any]) -> float:
        return float(r.get("latents_encoded", r.get("latents")) or 0) * r["signature"]["pixels"]

    def step_flops(r: dict[str, Any]) -> float:
        return record_step_work(r) or 0.0

    def image_flops(r: dict[str, Any]) -> float:
        return float(r.get("latents_encoded", r.get("latents")) or 0) * (record_image_work(r) or 0.0)

    step_x: Work = pixels
    image_x: Work = images
    fit_units = dict(units)
    if units["step_flops"] and all(record_step_work(r) for r in records):
        step_x, fit_units["step_work"] = step_flops, units["step_flops"]
    if units["image_flops"] and all(record_image_work(r) for r in records):
        image_x, fit_units["images"] = image_flops, units["image_flops"]
    return step_x, image_x, fit_units
