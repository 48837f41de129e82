"""Sample prompts and their cadence, from ai-toolkit's `sample` table and kohya's prompt file
lines (no torch).

lorastudio renders at most MOST_PROMPTS prompts; each may be an object with its own width,
height, seed and guidance, which is how a peer's one size, guidance and walking seed are carried.
"""

from __future__ import annotations

import re
from typing import Any

from lorastudio.config_import import values
from lorastudio.config_import.common import carry
from lorastudio.config_import.report import NOT_NEEDED, NOT_SUPPORTED, Draft

MOST_PROMPTS = 8  # TrainConfig.sample_prompts' max_length


def sample_prompts(draft: Draft, peer: str, sample: dict[str, Any], trigger: str | None) -> None:
    """ai-toolkit's `sample` table: prompts (or samples: [{prompt}]), width, height, seed,
    walk_seed, guidance_scale, sample_steps, sample_every, neg, sampler."""
    key = "prompts" if "prompts" in sample else "samples"
    raw = sample.get(key, [])
    texts: list[tuple[str, str]] = []  # (peer key, prompt)
    inline: list[dict[str, Any]] = []  # each prompt's own size, seed, guidance (its --flags)
    inline_folds: list[tuple[str, str, Any]] = []  # (peer key, our key in the prompt, value)
    for i, item in enumerate(raw if isinstance(raw, list) else []):
        where = f"{peer}.{key}[{i}]"
        prompt = item.get("prompt") if isinstance(item, dict) else item
        if not isinstance(prompt, str) or not prompt.strip():
            draft.drop(where, "not a prompt (text)")
        elif len(texts) >= MOST_PROMPTS:
            draft.drop(where, f"{NOT_SUPPORTED}: at most {MOST_PROMPTS} sample prompts")
        else:
            label = f"{where}.prompt" if isinstance(item, dict) else where
            text, own_flags, folded = _inline(draft, label, prompt)
            if not text:
                draft.drop(label, "not a prompt (text): only options")
                continue
            why = refused({"prompt": text})
            if why:
                draft.drop(label, f"refused here (its prompt: {why})")
                continue
            texts.append((label, text))
            inline.append(own_flags)
            inline_folds += folded
            if isinstance(item, dict):
                for extra in sorted(k for k in item if re.fullmatch(r"ctrl_img(_?\d)?", str(k))):
                    draft.drop(f"{where}.{extra}", _REFERENCE)
    if key in sample and not isinstance(raw, list):
        draft.drop(f"{peer}.{key}", "not a list of prompts")
    own: dict[str, Any] = {}
    folds: list[tuple[str, str, Any]] = []  # (peer key, our key in each prompt, value)
    for theirs, ours, conv in (("width", "width", values.integer), ("height", "height", values.integer),
                               ("guidance_scale", "guidance", values.number)):  # fmt: skip
        if theirs in sample and texts:
            try:
                own[ours] = conv(sample[theirs])
                folds.append((f"{peer}.{theirs}", ours, own[ours]))
            except values.Skip as why:
                draft.drop(f"{peer}.{theirs}", str(why))
    walk = sample.get("walk_seed") is True
    seed = sample.get("seed")
    if texts:
        prompts: list[Any] = []
        changed = []
        for i, (_, prompt) in enumerate(texts):
            if "[trigger]" in prompt and trigger:
                prompt = prompt.replace("[trigger]", trigger)
                changed.append(i)
            entry = {"prompt": prompt, **own}
            if walk and isinstance(seed, int) and not isinstance(seed, bool):
                entry["seed"] = seed + i
            entry |= inline[i]  # the prompt's own --w / --h / --seed / --cfg win, as in ai-toolkit
            prompts.append(entry if len(entry) > 1 else prompt)
        how = "[trigger] replaced by the trigger word, as ai-toolkit does at sampling"
        draft.set(texts[0][0], "sample_prompts", prompts, how if 0 in changed else "",
                  shown=("sample_prompts[0]", prompts[0]))  # fmt: skip
        for i, (where, _) in enumerate(texts[1:], 1):
            draft.fold(
                where, "sample_prompts", prompts[i], how if i in changed else "", f"sample_prompts[{i}]"
            )
        for where, ours, value in folds:
            draft.fold(where, "sample_prompts", value, f"each prompt's {ours}")
        for where, ours, value in inline_folds:
            draft.fold(where, "sample_prompts", value, f"the prompt's own {ours}")
    if "seed" in sample:
        if walk and texts:
            draft.fold(
                f"{peer}.seed", "sample_prompts", seed, "each prompt's seed: seed + its index (walk_seed)"
            )
            draft.fold(f"{peer}.walk_seed", "sample_prompts", True, "each prompt's own seed")
        else:
            carry(draft, f"{peer}.seed", seed, "sample_seed", values.integer)
    if "walk_seed" in sample and not (walk and texts and "seed" in sample):
        draft.drop(f"{peer}.walk_seed", f"{NOT_NEEDED}: every sample has the one sample_seed" if not walk else
                   f"{NOT_SUPPORTED}: no seed to walk from")  # fmt: skip
    if "sample_every" in sample:
        carry(draft, f"{peer}.sample_every", sample["sample_every"], "sample_every", values.integer)
    if "sample_steps" in sample:
        carry(draft, f"{peer}.sample_steps", sample["sample_steps"], "sample_steps", values.integer)
    neg = sample.get("neg")
    if "neg" in sample:
        draft.drop(
            f"{peer}.neg",
            f"{NOT_SUPPORTED}: samples have no negative prompt" if neg else f"{NOT_NEEDED}: empty",
        )
    for key_, why in (("sampler", f"{NOT_NEEDED}: samples use the family's own scheduler"),
                      ("sample_start_step", f"{NOT_SUPPORTED}: samples start with sample_every's first multiple"),
                      ("format", f"{NOT_NEEDED}: samples are PNG files"),
                      ("network_multiplier", f"{NOT_SUPPORTED}: samples render the LoRA at strength 1")):  # fmt: skip
        if key_ in sample:
            draft.drop(f"{peer}.{key_}", why)


_REFERENCE = (
    f"{NOT_SUPPORTED}: a sample's references are paths inside the dataset folder or its control_dirs "
    "folders (sample_prompts' controls: set them by hand); left out, a paired run renders each prompt as an edit of its first paired image's controls"
)
_INLINE = {"w": "width", "h": "height", "d": "seed", "seed": "seed", "l": "guidance", "cfg": "guidance"}


def _inline(draft: Draft, peer: str, prompt: str) -> tuple[str, dict[str, Any], list[tuple[str, str, Any]]]:
    """ai-toolkit's prompt text with its options ("make it red --ctrl_img /x/a.jpg --w 768"): the
    text before the first "--", the options carried ({"width": 768}) and their (peer key, our
    key, value) for the caller to report once the prompt is written; each other option is
    reported here at "<peer> --<flag>" (ai-toolkit splits the text at every "--", as here)."""
    parts = prompt.split("--")
    own: dict[str, Any] = {}
    folded: list[tuple[str, str, Any]] = []
    for part in parts[1:]:
        flag_ = part.strip().split(" ")[0].strip()
        content = part.strip()[len(flag_) :].strip()
        where = f"{peer} --{flag_}"
        ours = _INLINE.get(flag_)
        try:
            if ours is not None:
                value = values.number(content) if ours == "guidance" else values.integer(content)
                why = refused({"prompt": "p", ours: value})
                if why:  # this prompt's option only, not every prompt (refused)
                    draft.drop(where, f"refused here ({ours} = {value}: {why})")
                    continue
                own[ours] = value
                folded.append((where, ours, value))
            elif flag_.startswith("ctrl_img"):
                draft.drop(where, _REFERENCE)
            elif flag_ == "n":
                draft.drop(where, f"{NOT_SUPPORTED}: samples have no negative prompt")
            else:
                draft.drop(where, f"{NOT_SUPPORTED}: the prompt option --{flag_}")
        except values.Skip as why:
            draft.drop(where, str(why))
    return parts[0].strip(), own, folded


def refused(entry: dict[str, Any]) -> str:
    """Why the strict config refuses the sample prompt `entry` ("" when it takes it): checked
    sample by sample, so that one sample's width of 10^9 or a prompt with an ESC in it drops that
    sample's value, not every sample's prompts (settle.py refuses a setting whole). ai-toolkit's prompts and OneTrainer's samples."""
    from pydantic import ValidationError

    from lorastudio.config_samples import SamplePrompt
    from lorastudio.text_rules import visible_text

    try:
        SamplePrompt.model_validate(entry)
        visible_text(entry["prompt"], "the prompt")
    except ValidationError as err:
        first = err.errors()[0]
        return str(first.get("msg", err))
    except ValueError as err:
        return str(err)
    return ""


_OPTION = re.compile(r"\s--([a-z]+)\s+")


def prompt_line(line: str) -> tuple[dict[str, Any], list[str]]:
    """kohya's sample prompt line "a cat --n neg --w 1024 --h 768 --d 42 --l 3.5 --s 28" as our
    prompt object and the options not carried (each "--x: why")."""
    parts = _OPTION.split(" " + line.strip() + " ")
    entry: dict[str, Any] = {"prompt": parts[0].strip()}
    dropped = []
    for flag_, raw in zip(parts[1::2], parts[2::2], strict=False):
        raw = raw.strip()
        ours = {"w": "width", "h": "height", "d": "seed", "l": "guidance"}.get(flag_)
        try:
            if ours is not None:
                value = values.number(raw) if ours == "guidance" else values.integer(raw)
                why = refused({"prompt": "p", ours: value})
                if why:  # this line's option only, not every prompt
                    dropped.append(f"--{flag_}: refused here ({ours} = {value}: {why})")
                else:
                    entry[ours] = value
            elif flag_ == "n":
                dropped.append(f"--n: {NOT_SUPPORTED}: samples have no negative prompt")
            elif flag_ == "s":
                dropped.append(f"--s: {NOT_SUPPORTED} per prompt: sample_steps is the run's")
            else:
                dropped.append(f"--{flag_}: {NOT_SUPPORTED}")
        except values.Skip as why:
            dropped.append(f"--{flag_}: {why}")
    return entry, dropped


# a peer key that carried a sample prompt's guidance (ai-toolkit, OneTrainer, SimpleTuner, --l / --cfg)
_GUIDANCE_KEYS = ("guidance_scale", "cfg_scale", "validation_guidance", " --l", " --cfg")


def drop_unapplied_guidance(draft: Draft) -> None:
    """Take each sample prompt's guidance above 1 out of a true-CFG family's config (Qwen-Image,
    Qwen-Image-Edit), its report lines "not carried" saying why: such a pipeline applies the scale
    only with a negative prompt, which a sample prompt does not take, so a run refuses it
    (generation_rules.unused_guidance_problems, RELIABILITY 1683) and an imported config that kept
    it (ai-toolkit's Qwen-Image example sets guidance_scale 3) was refused by its first `train
    --check` (RELIABILITY 1811). Other families, an unknown one and a scale of 1 or less: unchanged."""
    from lorastudio import families
    from lorastudio.config_import.report import Line
    from lorastudio.errors import UnknownFamily
    from lorastudio.generation_rules import NO_NEGATIVE, unused_guidance_problems

    family, prompts = draft.settings.get("family"), draft.settings.get("sample_prompts")
    if not isinstance(family, str) or not isinstance(prompts, list):
        return
    try:
        families.get(family)
    except UnknownFamily:
        return

    def why(guidance: float) -> str:  # the run's own refusal of that scale, "" when it takes it
        problems = unused_guidance_problems(guidance, None, family, way_out=NO_NEGATIVE)
        return f"{NOT_SUPPORTED}: {problems[0].message}" if problems else ""

    taken: list[tuple[int, float]] = []
    for i, entry in enumerate(prompts):
        guidance = entry.get("guidance") if isinstance(entry, dict) else None
        if isinstance(guidance, int | float) and not isinstance(guidance, bool) and why(guidance):
            del entry["guidance"]
            taken.append((i, guidance))
    if not taken:
        return
    found = False
    for index in draft.origin.get("sample_prompts", []):
        line = draft.lines[index]
        value = line.value if isinstance(line.value, int | float) else taken[0][1]
        if (line.peer.endswith(_GUIDANCE_KEYS) or (line.ours or "").endswith(".guidance")) and why(value):
            draft.lines[index] = Line(line.peer, "not carried", note=why(value))
            found = True
    if not found:  # folded into a prompt's own line (kohya's prompt file): one line per prompt
        for i, guidance in taken:
            draft.drop(f"sample_prompts[{i}].guidance", why(guidance))
