"""The preflight's torch-free caption count (jobs/caption_tokens.py: `tokenizers` + jinja2) equals
the run's own count (training/inputs/caption_length.caption_token_counts, transformers' tokenizer in the
pipeline's text encoders) for every measured family's tiny model, and the pipelines' templates
copied there are diffusers' own."""

from __future__ import annotations

import pytest
import torch

from lorastudio import families
from lorastudio.jobs import caption_tokens
from lorastudio.training.inputs.caption_length import caption_token_counts

MEASURED = [
    name
    for name in families.names()
    if (ct := families.get(name).spec.caption_tokens) is not None and ct.cuts
]
CAPTIONS = [
    "a red circle on a blue background",
    "",
    "cat " * 70,
    "Tiny, SHINY star; sks ohwx [IMG] <|im_end|> 0 1 2 ... ünïcode 🐈 \t tab",
    ", ".join(["sharp focus, high quality photo"] * 9),
]


def test_every_measured_family_is_covered():
    assert set(MEASURED) >= {
        "sdxl",
        "flux",
        "chroma",
        "qwen-image",
        "z-image",
        "flux2",
        "flux2-klein",
        "krea2",
    }


@pytest.mark.parametrize("name", MEASURED)
def test_the_torch_free_count_is_the_runs(name, tiny_model):
    family = families.get(name)
    folder = tiny_model(name)
    encoders = family.load_text_encoders(str(folder), None, torch.float32, torch.device("cpu"))
    engine = caption_token_counts(family.spec, encoders, CAPTIONS)
    assert caption_tokens.caption_counts(family.spec, folder, CAPTIONS) == engine
    template = family.spec.caption_tokens.template
    if template == "qwen_image":
        assert encoders.prompt_template_encode == caption_tokens.QWEN_IMAGE_TEMPLATE
        assert encoders.prompt_template_encode_start_idx == caption_tokens.QWEN_IMAGE_DROP
        assert encoders.tokenizer_max_length == caption_tokens.QWEN_IMAGE_TOKENIZER_MAX
    if template == "krea2":
        assert encoders.prompt_template_encode_prefix == caption_tokens.KREA2_PREFIX
        assert encoders.prompt_template_encode_start_idx == caption_tokens.KREA2_DROP
        assert encoders.prompt_template_encode_num_suffix_tokens == caption_tokens.KREA2_SUFFIX_TOKENS
    if template == "flux2_system":
        assert encoders.system_message == caption_tokens.FLUX2_SYSTEM_MESSAGE
