"""kohya's objective and precision arguments -> lorastudio settings (no torch): the loss and its
Huber options, the timestep sampling (kohya's "sigma" by weighting_scheme, "shift" with
discrete_flow_shift; sd-scripts' FLUX.1 defaults where the file leaves them unset), the prediction type, gradient checkpointing, mixed precision and fp8_base,
and the trackers. Split from kohya.py, with the argument helpers both use."""

from __future__ import annotations

from typing import Any

from lorastudio.config_import import peer_defaults, values
from lorastudio.config_import.common import carry
from lorastudio.config_import.report import NOT_NEEDED, NOT_SUPPORTED, Draft

Args = dict[str, tuple[str, Any]]  # argument -> (its key in the file, value)


def take(args: Args, name: str) -> tuple[str, Any] | None:
    """The argument `name` taken out of `args` (mapped once), or None."""
    return args.pop(name, None)


def truthy(item: tuple[str, Any] | None) -> bool:
    """Whether the argument `item` is there and true."""
    if item is None:
        return False
    try:
        return values.flag(item[1])
    except values.Skip:
        return False


def objective(draft: Draft, args: Args) -> None:
    """Map the objective and precision arguments of `args` (taken out of it) into `draft`."""
    loss = take(args, "loss_type")
    if loss is not None:
        names = {"l2": "mse", "mse": "mse", "l1": "l1", "huber": "huber", "smooth_l1": "smooth_l1"}
        carry(
            draft,
            loss[0],
            loss[1],
            "loss",
            lambda v: names.get(str(v).lower()) or skip("losses: mse, l1, huber, smooth_l1"),
        )
    schedule = take(args, "huber_schedule")
    if schedule is not None:
        carry(draft, schedule[0], schedule[1], "huber_schedule", lambda v: str(v).lower())
    elif loss is not None and _huber(loss[1]) and draft.settings.get("family") == "sdxl":
        # sd-scripts' default schedule is snr, computed for DDPM models only (a flow model's run
        # stops on it unless the file names a schedule)
        draft.set(loss[0], "huber_schedule", "snr", "kohya's default schedule (here: constant)")
    _sampling(draft, args)
    pred = take(args, "model_prediction_type")
    if pred is not None:
        draft.drop(pred[0], f"{NOT_NEEDED}: the denoiser's output is the prediction" if str(pred[1]) == "raw"
                   else f"{NOT_SUPPORTED}: the denoiser's output is the prediction (raw)")  # fmt: skip
    elif draft.settings.get("family") in peer_defaults.KOHYA_FLUX_FAMILIES:
        draft.drop("model_prediction_type", f"{NOT_SUPPORTED}: {peer_defaults.KOHYA_FLUX_PREDICTION}")
    ckpt = take(args, "gradient_checkpointing")
    if ckpt is not None:
        carry(
            draft, ckpt[0], ckpt[1], "gradient_checkpointing", lambda v: "full" if values.flag(v) else "off"
        )
    precision = take(args, "mixed_precision")
    fp8 = take(args, "fp8_base")
    if fp8 is not None and truthy(fp8):
        draft.set(fp8[0], "base_precision", "int8", values.EIGHT_BIT)
    elif fp8 is not None:
        draft.drop(fp8[0], f"{NOT_NEEDED}: off by default")
    if precision is not None:
        try:
            ours, note = values.compute_precision(precision[1])
        except values.Skip as why:
            draft.drop(precision[0], str(why))
        else:
            if ours is None or "base_precision" in draft.settings:
                draft.drop(precision[0], note or f"{NOT_NEEDED}: the quantised base computes in bf16")
            else:
                draft.set(precision[0], "base_precision", ours)
    log = take(args, "log_with")
    if log is not None:
        kinds = {"tensorboard": ["tensorboard"], "wandb": ["wandb"], "all": ["tensorboard", "wandb"]}
        carry(
            draft,
            log[0],
            log[1],
            "report_to",
            lambda v: kinds.get(str(v).lower()) or skip("tensorboard, wandb"),
        )


_SAMPLING = {"uniform": "uniform", "sigmoid": "sigmoid", "shift": "sigmoid", "flux_shift": "sigmoid",
             "qwen_shift": "sigmoid", "logit_normal": "logit_normal"}  # fmt: skip
_SAMPLING_HOW = {
    "flux_shift": "without FLUX's resolution-dependent shift (flow_shift: a fixed one)",
    "qwen_shift": "with the shift the family's pipeline uses for the image size",
}


def _sampling(draft: Draft, args: Args) -> None:
    """timestep_sampling, discrete_flow_shift, weighting_scheme, logit_mean / logit_std -> our
    timestep_sampling (+ flow_shift, logit_mean, logit_std). kohya's "sigma" draws the levels by
    weighting_scheme's density (uniform by default, logit_normal with its mean and std), shifted
    by discrete_flow_shift (its scheduler's static shift) and read from the noisy end, so its
    logit_mean is negated here; with another sampling, weighting_scheme weights only the loss
    (sigma_sqrt, cosmap: not offered). A FLUX.1 / Chroma file (sd-scripts' flux_train_network)
    that leaves timestep_sampling or discrete_flow_shift unset gets sd-scripts' defaults, sigma
    and 3.0, each on a line naming the rule (peer_defaults)."""
    sampling, shift = take(args, "timestep_sampling"), take(args, "discrete_flow_shift")
    weighting = take(args, "weighting_scheme")
    flux = draft.settings.get("family") in peer_defaults.KOHYA_FLUX_FAMILIES  # sd-scripts' flux_train_network
    kind = str(sampling[1]).lower() if sampling else "sigma" if flux else None
    scheme = str(weighting[1]).lower() if weighting else "uniform"
    density = {"logit_normal": "logit_normal", "uniform": "uniform", "none": "uniform"}.get(scheme)
    ours = None
    if kind == "sigma" and density is None:
        why = f"{NOT_SUPPORTED}: weighting_scheme {scheme}'s levels are not offered"
        for item in (sampling, weighting):
            if item is not None:
                draft.drop(item[0], why)
    elif kind == "sigma":
        ours = density
        if sampling is not None:
            draft.set(sampling[0], "timestep_sampling", ours, f"kohya's sigma sampling, by weighting_scheme {scheme}"
                      + ("" if weighting else " (unset in the file: kohya's default)"))  # fmt: skip
        else:
            unset = "" if weighting else " (unset too: sd-scripts' default uniform)"
            rule = peer_defaults.KOHYA_FLUX_SAMPLING.format(scheme=scheme + unset)
            peer_defaults.fill(draft, "timestep_sampling", "timestep_sampling", ours, rule)
        if weighting is not None:
            draft.fold(weighting[0], "timestep_sampling", scheme)
    elif sampling is not None:
        ours = _SAMPLING.get(str(kind))
        if ours is None:
            draft.drop(sampling[0], f"{NOT_SUPPORTED}: timestep_sampling is logit_normal, uniform or sigmoid")
        else:
            draft.set(sampling[0], "timestep_sampling", ours, _SAMPLING_HOW.get(str(kind), ""))
    if weighting is not None and kind != "sigma":
        draft.drop(weighting[0], f"{NOT_NEEDED}: it shapes kohya's sigma sampling only" if density else
                   f"{NOT_SUPPORTED}: min-SNR (snr_gamma) is the one loss weighting")  # fmt: skip
    if shift is None and flux and kind in ("sigma", "shift") and ours is not None:
        rule = peer_defaults.KOHYA_FLUX_SHIFT.format(kind=kind)
        peer_defaults.fill(draft, "discrete_flow_shift", "flow_shift", 3.0, rule)
    if shift is not None and kind == "shift":
        carry(draft, shift[0], shift[1], "flow_shift", values.number)
    elif shift is not None and kind == "sigma" and ours is not None:
        carry(draft, shift[0], shift[1], "flow_shift", values.number, _SIGMA_SHIFT)
    elif shift is not None and kind == "sigma":
        draft.drop(shift[0], f"{NOT_SUPPORTED}: it shifts kohya's sigma sampling, which is not carried")
    elif shift is not None:
        draft.drop(shift[0], f"{NOT_NEEDED}: kohya applies it with timestep_sampling = shift or sigma only")
    for key in ("logit_mean", "logit_std"):
        if (got := take(args, key)) is None:
            continue
        if ours == "logit_normal" and kind == "sigma" and key == "logit_mean":
            carry(draft, got[0], got[1], key, _negated, _SIGMA_MEAN)
        elif ours == "logit_normal" and kind == "sigma":
            carry(draft, got[0], got[1], key, values.number)
        else:
            draft.drop(got[0], f"{NOT_NEEDED}: kohya reads it with weighting_scheme = logit_normal only")


# kohya's sigma sampling (flux_train_utils.get_noisy_model_input_and_timesteps, musubi-tuner's
# alike): u from weighting_scheme's density, then the sigma of its FlowMatchEulerDiscreteScheduler
# (shift = discrete_flow_shift) at timesteps[u x 1000], whose timesteps run from the noisy end:
# sigma = shift(1 - u) (session 39 maths audit, tests/unit/training/test_maths_reference.py)
_SIGMA_SHIFT = "the static shift of kohya's scheduler, whose levels its sigma sampling draws"
_SIGMA_MEAN = (
    "kohya's sigma sampling reads its scheduler from the noisy end (sigma = 1 - u): its m is -m here"
)


def _huber(loss: Any) -> bool:
    """Whether kohya's loss_type `loss` is one of the Huber losses."""
    return str(loss).lower() in ("huber", "smooth_l1")


def _negated(value: Any) -> float:
    """-value for a number (0 stays 0). Raises values.Skip."""
    return 0.0 - values.number(value)


def skip(what: str) -> Any:
    """Raise values.Skip: `what` is what lorastudio offers instead."""
    raise values.Skip(f"{NOT_SUPPORTED}: {what}")
