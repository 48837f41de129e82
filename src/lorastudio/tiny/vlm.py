"""A tiny random Qwen2.5-VL captioner, built offline of the real transformers classes.

Qwen2_5_VLForConditionalGeneration with a one-layer vision tower and a two-layer text model over
the tiny Qwen tokenizer, and the Qwen2VLProcessor of tiny/qwen_edit.py (at most 64 vision tokens
per image) with a Qwen2-VL chat template, so `processor.apply_chat_template` puts the image
tokens where the real model's template does. Saved with `save_pretrained` (model + processor in
one folder, loads with `from_pretrained` offline); captioning tests run on it (lorastudio/
captioning). The weights are random: captions are token soup, but deterministic.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from lorastudio.errors import ModelSourceError
from lorastudio.tiny.staging import is_empty_dir, publish_dir

MARKER_FILE = "lorastudio_tiny_vlm.json"
TINY_VLM_NAME = "tiny-vlm"

# The Qwen2-VL chat template in a short form (system turn, text and image parts, generation prompt).
CHAT_TEMPLATE = (
    "{% for message in messages %}"
    "{% if loop.first and message['role'] != 'system' %}"
    "<|im_start|>system\nYou are a helpful assistant.<|im_end|>\n{% endif %}"
    "<|im_start|>{{ message['role'] }}\n"
    "{% if message['content'] is string %}{{ message['content'] }}"
    "{% else %}{% for part in message['content'] %}"
    "{% if part['type'] == 'image' %}<|vision_start|><|image_pad|><|vision_end|>"
    "{% elif part['type'] == 'text' %}{{ part['text'] }}{% endif %}"
    "{% endfor %}{% endif %}<|im_end|>\n{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)


def build_tiny_vlm(seed: int = 0) -> tuple[Any, Any]:
    """(model, processor): a tiny random Qwen2.5-VL in eval mode and its processor."""
    from transformers import Qwen2_5_VLForConditionalGeneration

    from lorastudio.tiny.models import _seed_for, qwen_vl_config
    from lorastudio.tiny.qwen_edit import qwen_vl_processor

    _seed_for(seed, "captioner")
    model = Qwen2_5_VLForConditionalGeneration(qwen_vl_config()).eval()
    processor = qwen_vl_processor()
    processor.chat_template = CHAT_TEMPLATE
    return model, processor


def _holds_tiny_vlm(folder: Path, seed: int) -> bool:
    try:
        marker = json.loads((folder / MARKER_FILE).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return False
    return marker == {"seed": seed} and (folder / "config.json").is_file()


def save_tiny_vlm(out_dir: str | Path, seed: int = 0) -> Path:
    """Write the tiny captioner (model + processor) to `out_dir`, atomically; returns the path.
    Idempotent for the same seed. Raises ModelSourceError if `out_dir` holds anything else."""
    out = Path(out_dir)
    if _holds_tiny_vlm(out, seed):
        return out
    if out.exists() and not is_empty_dir(out):
        raise ModelSourceError(
            f"{out} already exists and is not the tiny VLM (seed {seed}); choose another folder"
        )

    def fill(staging: Path) -> None:
        model, processor = build_tiny_vlm(seed)
        model.save_pretrained(staging, safe_serialization=True)
        processor.save_pretrained(staging)
        (staging / MARKER_FILE).write_text(json.dumps({"seed": seed}) + "\n", encoding="utf-8")

    try:
        publish_dir(out, fill, lambda folder: _holds_tiny_vlm(folder, seed))
    except FileExistsError as err:
        raise ModelSourceError(f"{out} was created by someone else while the tiny VLM was written") from err
    except OSError as err:
        raise ModelSourceError(f"cannot write the tiny VLM to {out}: {err}") from err
    return out
