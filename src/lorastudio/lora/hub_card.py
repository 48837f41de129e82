"""The model card (README.md) pushed with a LoRA to the hub, generated from the run's sidecar.

    card = model_card(sidecar, name, samples=[("samples/step-000100-0.png", "a photo of sks")])

YAML front matter the hub reads (base_model, tags, instance_prompt, widget with the sample
images), then the facts a user needs to use the file: base model, family, trigger word, the
layout and the loaders it was checked against, and the training settings.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from typing import Any

# settings shown in the card's table, in this order (others stay in the pushed sidecar)
_SETTINGS = (
    "steps",
    "learning_rate",
    "lr_scheduler",
    "optimizer",
    "batch_size",
    "resolution",
    "lora_rank",
    "lora_alpha",
    "adapter",
    "seed",
)
_HUB_ID = re.compile(r"^[A-Za-z0-9][\w.-]*/[\w.-]+$")


def hub_base_model(base_model: str | None) -> str | None:
    """`base_model` when it is a hub repo id ("owner/name"), else None (a local folder or file)."""
    if not base_model or base_model.startswith(("/", ".", "~")) or "\\" in base_model:
        return None
    return base_model if _HUB_ID.match(base_model) else None


def model_card(sidecar: Mapping[str, Any], name: str, samples: Sequence[tuple[str, str | None]] = ()) -> str:
    """README.md text for the LoRA `name` whose sidecar is `sidecar`; `samples` are (path in the
    repo, prompt) of the sample images pushed with it."""
    config: Mapping[str, Any] = sidecar.get("config") or {}
    family = str(sidecar.get("family") or config.get("family") or "")
    base = str(sidecar.get("base_model") or config.get("base_model") or "")
    hub_base = hub_base_model(base)
    trigger = sidecar.get("trigger_word") or config.get("trigger_word")
    front: dict[str, Any] = {
        "library_name": "diffusers",
        "tags": ["lora", "lorastudio", "text-to-image", *([family] if family else [])],
    }
    if hub_base:
        front["base_model"] = hub_base
    if trigger:
        front["instance_prompt"] = trigger
    if samples:
        front["widget"] = [{"text": prompt or "", "output": {"url": path}} for path, prompt in samples]
    lines = ["---", *_yaml(front), "---", "", f"# {name}", ""]
    lines.append(f"A LoRA for **{family or 'unknown family'}**, trained with lorastudio.")
    lines += ["", f"- Base model: {_code(base or 'unknown')}" + ("" if hub_base else " (a local model)")]
    lines.append(f"- Trigger word: {_code(str(trigger))}" if trigger else "- Trigger word: none")
    lines.append(f"- File: `{name}.safetensors`, {sidecar.get('lora_format', 'diffusers')} layout")
    loaders = sidecar.get("loaders") or {}
    checked = [k for k, v in loaders.items() if isinstance(v, Mapping) and v.get("ok")]
    if checked:
        lines.append(f"- Loads in: {', '.join(checked)} (checked when it was saved)")
    steps, total = sidecar.get("steps"), sidecar.get("total_steps")
    if steps is not None:
        lines.append(f"- Trained steps: {steps}" + (f" of {total}" if total and total != steps else ""))
    lines += ["", "## Settings", "", "| setting | value |", "| --- | --- |"]
    for key in _SETTINGS:
        if config.get(key) is not None:
            lines.append(f"| {key} | `{config[key]}` |")
    if samples:
        lines += ["", "## Samples", ""]
        lines += [f"![{_alt(prompt or path)}]({path})" for path, prompt in samples]
    lines += ["", f"The full settings are in `{name}.json`.", ""]
    return "\n".join(lines)


def _code(text: str) -> str:
    """`text` as one Markdown code span: fenced by more backticks than its longest run (a trigger
    word's backtick ended the span, RELIABILITY 2237), line breaks folded to spaces."""
    text = " ".join(text.split("\n"))
    fence = "`" * (max((len(run) for run in re.findall(r"`+", text)), default=0) + 1)
    pad = " " if text.startswith("`") or text.endswith("`") else ""
    return f"{fence}{pad}{text}{pad}{fence}"


def _alt(text: str) -> str:
    """`text` (a sample's prompt) as an image's alt text: one line, `\\`, `[` and `]` escaped (a
    prompt's `]` or line break ended the alt text and added Markdown of its own to the card)."""
    return re.sub(r"([\\\[\]])", r"\\\1", " ".join(text.split()))


def _yaml(data: Mapping[str, Any]) -> list[str]:
    """Front matter lines: JSON scalars and lists are valid YAML flow values."""
    return [f"{key}: {json.dumps(value, ensure_ascii=False)}" for key, value in data.items()]
