"""The peer's own defaults for the loss-shaping settings its file leaves unset (no torch).

A peer's file names what its user changed; what it leaves out trains at the PEER's default, which
is not always lorastudio's (SDXL's snr_gamma 5 here; no min-SNR in kohya sd-scripts, SimpleTuner,
OneTrainer or ai-toolkit unless asked for). Each rule below is read from the peer's own source (its argument
parser or config class, at the commit named), and each default filled gets a report line:
"changed  <peer key> -> <our key> = <value>: unset in the file: <the peer's rule>", so the import
says every value it chose for the file. A key the file names (even empty or refused) is the
file's, never filled here: the peer modules carry or report it.
"""

from __future__ import annotations

from typing import Any

from lorastudio.config_import.report import Draft

# kohya-ss/sd-scripts 48d368fa (2026-02-16)
KOHYA_SNR = (
    "sd-scripts' default (custom_train_functions.add_custom_train_arguments: --min_snr_gamma "
    "default None, no min-SNR weighting; lorastudio's SDXL default is 5)"
)
KOHYA_FLUX_SAMPLING = (
    "sd-scripts' default sigma sampling (flux_train_utils.add_flux_train_arguments: "
    "--timestep_sampling default sigma), by weighting_scheme {scheme}"
)
KOHYA_FLUX_SHIFT = (
    "sd-scripts' default (flux_train_utils.add_flux_train_arguments: --discrete_flow_shift default "
    "3.0), the static shift of its scheduler, whose levels its {kind} sampling draws"
)
KOHYA_FLUX_PREDICTION = (
    "unset in the file: sd-scripts' default sigma_scaled (flux_train_utils.add_flux_train_arguments; "
    "the denoiser's output x (-sigma) + the noisy input) is not offered: trained raw here, the "
    'output the prediction (sd-scripts trains so with model_prediction_type = "raw")'
)
KOHYA_FLUX_FAMILIES = frozenset({"flux", "chroma"})  # trained by sd-scripts' flux_train_network
# ostris/ai-toolkit 27a03a91 (2026-08-21)
AITOOLKIT_SNR = (
    "ai-toolkit's default (toolkit/config_modules.TrainConfig: min_snr_gamma None, no min-SNR "
    "weighting; lorastudio's SDXL default is 5)"
)
# bghira/SimpleTuner bc8e6ab7 (2026-08-22)
SIMPLETUNER_SNR = (
    "SimpleTuner's default (field_registry/sections/loss.py: --snr_gamma has no default, None: "
    "no SNR weighting; lorastudio's SDXL default is 5)"
)
SIMPLETUNER_SHIFT = (
    "SimpleTuner's default (field_registry/sections/advanced.py: --flow_schedule_shift default 3.0, "
    "the static shift custom_schedule.apply_flow_schedule_shift puts on its sampled levels)"
)
# the families whose SimpleTuner model draws its levels by helpers/models/common.sample_flow_sigmas
# (sigmoid of N(0, 1), as logit_normal's default here, then the shift); Chroma's has its own schedule
SIMPLETUNER_SHIFT_FAMILIES = frozenset(
    {"flux", "flux-kontext", "qwen-image", "qwen-image-edit", "z-image", "flux2", "flux2-klein"}
)
# Nerogar/OneTrainer 23df3832 (2026-08-19)
ONETRAINER_SNR = (
    "OneTrainer's default (TrainConfig.default_values: loss_weight_fn CONSTANT, no min-SNR "
    "weighting; lorastudio's SDXL default is 5)"
)


def fill(draft: Draft, peer: str, ours: str, value: Any, rule: str) -> None:
    """Write the peer's default `value` as our `ours` for the key `peer` the file leaves unset,
    its report line saying so and naming the peer's `rule`."""
    draft.set(peer, ours, value, f"unset in the file: {rule}")


def weights_snr(draft: Draft) -> bool:
    """Whether the draft's family takes min-SNR weighting (snr_gamma) here, so that a peer file
    without it must say "off" rather than train at lorastudio's default. False for a family
    unknown (the strict config names it)."""
    from lorastudio import families
    from lorastudio.errors import UnknownFamily

    name = draft.settings.get("family")
    try:
        family = families.get(name) if isinstance(name, str) else None
    except UnknownFamily:
        return False
    return family is not None and "snr_gamma" in family.spec.supports


def no_snr(draft: Draft, peer: str, rule: str) -> None:
    """snr_gamma = null (off) for a file whose peer weights no loss by SNR unless asked, when the
    family has min-SNR here and the import set no snr_gamma; `peer` the peer's key, `rule` its
    default's source."""
    if weights_snr(draft) and "snr_gamma" not in draft.settings:
        fill(draft, peer, "snr_gamma", None, rule)
