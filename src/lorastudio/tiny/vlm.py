"""Tiny random captioners (Qwen2.5-VL, Florence-2), built offline of the real transformers classes.

Qwen2_5_VLForConditionalGeneration with a one-layer vision tower and a two-layer text model over
the tiny Qwen tokenizer, and the Qwen2VLProcessor of tiny/qwen_edit.py (at most 64 vision tokens
per image) with a Qwen2-VL chat template, so `processor.apply_chat_template` puts the image
tokens where the real model's template does. Saved with `save_pretrained` (model + processor in
one folder, loads with `from_pretrained` offline); captioning tests run on it (lorastudio/
captioning). The weights are random: captions are token soup, but deterministic.

The tiny Florence-2 (`kind="florence2"`): Florence2ForConditionalGeneration with a 4-stage DaViT of
8-16 channels and a one-layer BART over a byte-level BART tokenizer laid out from the tiny Qwen
vocabulary (plus BART's specials and `<image>`), and CLIP's image processor at 64x64 px
(2x2 patches + 1 pooled token = 5 image tokens); its generation config asks for at least 4 new
tokens (random weights tend to end at once).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from lorastudio import json_read
from lorastudio.errors import ModelSourceError
from lorastudio.tiny.staging import publish_once

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

    from lorastudio.tiny.parts import seed_for
    from lorastudio.tiny.qwen_edit import qwen_vl_processor
    from lorastudio.tiny.qwen_image import qwen_vl_config

    seed_for(seed, "captioner")
    model = Qwen2_5_VLForConditionalGeneration(qwen_vl_config()).eval()
    processor = qwen_vl_processor()
    processor.chat_template = CHAT_TEMPLATE
    return model, processor


def build_tiny_florence(seed: int = 0) -> tuple[Any, Any]:
    """(model, processor): a tiny random Florence-2 in eval mode and its processor."""
    from transformers import (
        BartTokenizer,
        CLIPImageProcessor,
        Florence2Config,
        Florence2ForConditionalGeneration,
        Florence2Processor,
    )

    from lorastudio.tiny.parts import seed_for
    from lorastudio.tiny.tokenizers import _qwen_vocab_merges

    vocab, merges = _qwen_vocab_merges()
    tok = BartTokenizer(
        vocab=dict(vocab), merges=list(merges), extra_special_tokens={"image_token": "<image>"}
    )
    specials = {"bos_token": "<s>", "eos_token": "</s>", "pad_token": "<pad>", "unk_token": "<unk>"}
    tok.add_special_tokens({**specials, "mask_token": "<mask>"})
    images = CLIPImageProcessor(size={"height": 64, "width": 64}, do_center_crop=False, image_seq_length=5)
    ids = {
        "bos_token_id": tok.bos_token_id,
        "eos_token_id": tok.eos_token_id,
        "pad_token_id": tok.pad_token_id,
    }
    text = {
        "vocab_size": len(tok),
        "d_model": 32,
        "encoder_layers": 1,
        "decoder_layers": 1,
        "max_position_embeddings": 128,
    }
    heads = {
        "encoder_attention_heads": 2,
        "decoder_attention_heads": 2,
        "encoder_ffn_dim": 32,
        "decoder_ffn_dim": 32,
    }
    config = Florence2Config(
        text_config={**text, **heads, **ids, "decoder_start_token_id": tok.eos_token_id},
        vision_config={
            "depths": [1, 1, 1, 1],
            "embed_dim": [8, 8, 16, 16],
            "num_heads": [1, 1, 2, 2],
            "num_groups": [1, 1, 2, 2],
            "window_size": 2,
            "projection_dim": 32,
            "drop_path_rate": 0.0,
        },
        image_token_id=tok.image_token_id,
    )
    seed_for(seed, "florence")
    model = Florence2ForConditionalGeneration(config).eval()
    # random weights may end a caption at once: a few tokens first (the real models say more anyway)
    model.generation_config.min_new_tokens = 4
    model.generation_config.forced_eos_token_id = tok.eos_token_id
    return model, Florence2Processor(image_processor=images, tokenizer=tok)


def _holds_tiny_vlm(folder: Path, seed: int, kind: str) -> bool:
    try:
        marker = json_read.loads((folder / MARKER_FILE).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return False
    return marker == {"seed": seed, "kind": kind} and (folder / "config.json").is_file()


def save_tiny_vlm(out_dir: str | Path, seed: int = 0, kind: str = "qwen2_5_vl") -> Path:
    """Write the tiny captioner of `kind` ("qwen2_5_vl" or "florence2"; model + processor) to
    `out_dir`, atomically; returns the path. Idempotent for the same seed and kind. Raises
    ValueError for another kind, ModelSourceError if `out_dir` holds anything else."""
    builders = {"qwen2_5_vl": build_tiny_vlm, "florence2": build_tiny_florence}
    if kind not in builders:
        raise ValueError(f"no tiny captioner of kind {kind!r} (kinds: {', '.join(builders)})")
    out = Path(out_dir)

    def fill(staging: Path) -> None:
        model, processor = builders[kind](seed)
        model.save_pretrained(staging, safe_serialization=True)
        processor.save_pretrained(staging)
        (staging / MARKER_FILE).write_text(json.dumps({"seed": seed, "kind": kind}) + "\n", encoding="utf-8")

    return publish_once(
        out,
        fill,
        lambda folder: _holds_tiny_vlm(folder, seed, kind),
        ModelSourceError,
        what="the tiny VLM",
        refusal=f"{out} already exists and is not the tiny {kind} VLM (seed {seed}); choose another folder",
    )
