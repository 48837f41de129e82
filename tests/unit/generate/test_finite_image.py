"""A LoRA whose weights are finite but overflow float32 at its strength (1e20 in each factor:
B @ A is 1e40) passes every finite-values check of the file, and its image's pixels come out NaN.
Before RELIABILITY 1561 the pipeline's uint8 cast made them 0: a black image was written to the
gallery (or the CLI's --out) and listed as a success, with only a numpy warning in the log. Now
generate_image raises GenerationFailed saying why and what to try, and the worker writes nothing."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch
from safetensors.torch import save_file

from lorastudio.errors import GenerationFailed
from lorastudio.generate import apply_loras, generate_image
from lorastudio.generate.finite_image import finite_image
from lorastudio.jobs.generation_process import rebuild_error
from lorastudio.jobs.generation_worker import GenerationJob, Resident, run_job
from lorastudio.lora.file_digest import lora_digest

KEY = "transformer.single_transformer_blocks.0.attn.to_q"  # the tiny FLUX.1's 32-wide q projection
WORDS = "values not finite (NaN or infinite: they would be black), so none was kept"


def _overflowing_lora(path: Path) -> Path:
    save_file(
        {
            f"{KEY}.lora_A.weight": torch.full((2, 32), 1e20),
            f"{KEY}.lora_B.weight": torch.full((32, 2), 1e20),
        },
        path,
    )
    return path


def test_an_image_with_non_finite_pixels_is_refused_not_saved_black(flux_pipe, tmp_path):
    lora = _overflowing_lora(tmp_path / "huge.safetensors")
    kw = {"prompt": "x", "seed": 1, "steps": 2, "width": 32, "height": 32, "max_sequence_length": 16}
    apply_loras(flux_pipe, [(lora, 1.0)])  # every value finite: the file's checks pass
    try:
        with pytest.raises(GenerationFailed, match="values not finite") as info:
            generate_image(flux_pipe, "flux", **kw)  # before: an all-black image
        assert f"of its {32 * 32 * 3} values" in str(info.value)
    finally:
        apply_loras(flux_pipe, [])
    image = generate_image(flux_pipe, "flux", **kw)  # the pipeline goes on
    assert np.asarray(image).any()
    pixels = np.array([[[0.0, 0.5, 1.0]]], dtype=np.float32)
    assert np.asarray(finite_image(pixels)).tolist() == [[[0, 128, 255]]]  # numpy_to_pil's rounding


def test_the_worker_writes_no_black_image(tiny_model, tmp_path):
    lora = _overflowing_lora(tmp_path / "huge.safetensors")
    out = tmp_path / "gallery" / ".img.png.partial"
    out.parent.mkdir()
    job = GenerationJob(
        source=str(tiny_model("flux")), family="flux", revision=None, prompt="x", seed=1, steps=2,
        width=32, height=32, guidance=None, loras=((str(lora), 1.0),), lora_digests=(lora_digest(lora),),
        out_path=str(out), png_meta='{"prompt": "x", "seed": 1}', max_sequence_length=16,
    )  # fmt: skip
    reply, fatal = run_job(Resident(), job)
    assert reply[:2] == ("error", "GenerationFailed") and not fatal, reply
    err = rebuild_error(*reply[1:])  # as the server rebuilds the worker's report
    assert isinstance(err, GenerationFailed) and WORDS in str(err)
    assert list(out.parent.iterdir()) == []
