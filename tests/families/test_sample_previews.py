"""Sample previews work for every registered family, and a preview is exactly inference: the
image rendered from the cached prompt conditioning during training equals the one the family's
full pipeline (with its text encoders) generates for the prompt text with the trained LoRA (for
an edit family: as an edit of the first dataset image's controls, the run's sample references;
on a paired dataset one more prompt names other references: the first prompt's text with the
second image's controls, rendered, and where the prompt sees them encoded, with those)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from PIL import Image
from tests.families.conftest import controls_for

from lorastudio import families
from lorastudio.config import parse_train_config
from lorastudio.generate import generate_image, load_pipeline
from lorastudio.settings import Settings
from lorastudio.training.loop import train

PROMPTS = ["a red circle on grey", "two blue squares"]
SAMPLE_STEPS, SAMPLE_SEED = 2, 5


@pytest.mark.parametrize("family", families.names())
def test_a_sample_equals_the_pipeline_image_of_its_prompt(family, tiny_model, training_data, tmp_path):
    spec = families.get(family).spec
    data = training_data(family)
    captions = sorted(data.glob("*.txt"))
    references = controls_for(family, data, captions[0])
    prompts: list = [*PROMPTS]
    expected_refs = [references] * len(PROMPTS)
    if references:  # a paired dataset: a sample prompt with references of its own
        prompts.append({"prompt": PROMPTS[0], "controls": [f"control/{captions[1].stem}.png"]})
        expected_refs.append(controls_for(family, data, captions[1]))
    size = max(32, 2 * spec.resolution_multiple)
    extra = {"max_sequence_length": 16} if "max_sequence_length" in spec.supports else {}
    raw = {
        "family": family,
        "base_model": str(tiny_model(family)),
        "data_dir": str(data),
        "output_name": "sampled",
        "resolution": size,
        "steps": 1,
        "batch_size": 2,
        "learning_rate": 5e-2,
        "lora_rank": 4,
        "seed": 0,
        "sample_prompts": prompts,
        "sample_steps": SAMPLE_STEPS,
        "sample_seed": SAMPLE_SEED,
        **extra,
        # the pipelines' ~1 MP controls would dwarf the 32 px targets
        **({"control_resolution": "target"} if (data / "control").is_dir() else {}),
    }
    events: list = []
    result = train(
        parse_train_config(raw),
        events.append,
        settings=Settings(home=tmp_path / "home"),
        device="cpu",
        return_denoiser=True,
    )
    ready = [e for e in events if e.type == "sample_ready"]
    assert [(e.step, len(e.images)) for e in ready] == [(1, len(prompts))]
    pipe = load_pipeline(str(tiny_model(family)), family, device="cpu")
    setattr(pipe, spec.denoiser, result.denoiser)  # the LoRA as trained
    for entry, refs, rel in zip(prompts, expected_refs, ready[0].images, strict=True):
        prompt = entry if isinstance(entry, str) else entry["prompt"]
        sample = Path(result.lora_path.parent, rel)
        with Image.open(sample) as image:
            rendered = np.asarray(image.convert("RGB"))
        expected = generate_image(
            pipe,
            family,
            prompt=prompt,
            seed=SAMPLE_SEED,
            steps=SAMPLE_STEPS,
            width=size,
            height=size,
            extra=extra,
            controls=refs,
            control_resolution=raw.get("control_resolution"),  # as the run's previews size them
        )
        assert np.array_equal(rendered, np.asarray(expected)), f"{family}: {rel} differs from inference"
