"""The run's LoRA is written after its last step and before the final sample round (training/
loop_end.finish_run), so a failure or a kill while the final samples render keeps every trained
step: the final LoRA and its sidecar are on disk, loadable, the weights of the uninterrupted run.
Tiny FLUX.1, 2 steps, no checkpoint (before: the folder was removed, or the LoRA never written)."""

from __future__ import annotations

import json
import multiprocessing
import os
import signal
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import torch

from lorastudio.config import TrainConfig
from lorastudio.lora.file_read import read_lora_file
from lorastudio.settings import get_settings
from lorastudio.training.loop import train
from lorastudio.training.samples import SamplePreviews

SAMPLES = {"sample_prompts": ["a red circle"], "sample_steps": 2}


def _final_round_raises(monkeypatch: pytest.MonkeyPatch, error: BaseException) -> None:
    real = SamplePreviews.render

    def render(self: SamplePreviews, denoiser: Any, step: int, vae: Any = None) -> list[str]:
        if step >= int(self.run.cfg.steps):
            lora = get_settings().outputs_dir / str(self.run.cfg.output_name)
            assert (lora / f"{lora.name}.safetensors").is_file()  # written before this round
            raise error
        return real(self, denoiser, step, vae=vae)

    monkeypatch.setattr(SamplePreviews, "render", render)


def _assert_final_lora(name: str, reference: Path) -> None:
    run_dir = get_settings().outputs_dir / name
    tensors, _ = read_lora_file(run_dir / f"{name}.safetensors")
    expected, _ = read_lora_file(reference)
    assert tensors.keys() == expected.keys() and all(torch.equal(tensors[k], expected[k]) for k in tensors)
    sidecar = json.loads((run_dir / f"{name}.json").read_text())
    assert (sidecar["steps"], sidecar["stopped"]) == (2, False)
    assert not [p.name for p in run_dir.iterdir() if p.name.startswith(".")]  # no staging left


def test_a_failure_in_the_final_sample_round_completes_the_run_with_a_warning(
    make_config: Callable[..., TrainConfig], monkeypatch: pytest.MonkeyPatch
) -> None:
    """The LoRA is whole: the run completes (no error), a `warning` event names the failure, the
    LoRA is the uninterrupted run's (was: an error event, the run failed)."""
    whole = train(make_config(output_name="whole", **SAMPLES), [].append, device="cpu")
    assert whole.lora_path is not None
    _final_round_raises(monkeypatch, RuntimeError("the sampler broke"))
    events: list = []
    result = train(make_config(output_name="broken", **SAMPLES), events.append, device="cpu")
    kinds = [e.type for e in events]
    assert kinds[-2:] == ["warning", "complete"] and "error" not in kinds and "sample_ready" not in kinds
    warning, complete = events[-2], events[-1]
    assert warning.step == 2 and "the sampler broke" in warning.message and "LoRA" in warning.message
    assert complete.lora_path == str(result.lora_path) and not complete.stopped and not result.stopped
    assert result.lora_path is not None and result.lora_path.name == "broken.safetensors"
    _assert_final_lora("broken", whole.lora_path)


def test_an_interrupt_in_the_final_sample_round_still_ends_the_run_with_its_lora(
    make_config: Callable[..., TrainConfig], monkeypatch: pytest.MonkeyPatch
) -> None:
    whole = train(make_config(output_name="whole", **SAMPLES), [].append, device="cpu")
    assert whole.lora_path is not None
    _final_round_raises(monkeypatch, KeyboardInterrupt())
    events: list = []
    with pytest.raises(KeyboardInterrupt):
        train(make_config(output_name="broken", **SAMPLES), events.append, device="cpu")
    assert events[-1].type == "error" and "sample_ready" not in [e.type for e in events]
    _assert_final_lora("broken", whole.lora_path)


def _killed_in_the_final_round(config: str, events: str) -> None:
    """The forked child's run: its events' text appended to `events`, and a SIGKILL of itself
    when its final sample round starts."""
    real = SamplePreviews.render

    def render(self: SamplePreviews, denoiser: Any, step: int, vae: Any = None) -> list[str]:
        if step >= int(self.run.cfg.steps):
            os.kill(os.getpid(), signal.SIGKILL)
        return real(self, denoiser, step, vae=vae)

    SamplePreviews.render = render  # (this process only: it ends here)
    with open(events, "a", encoding="utf-8") as out:

        def emit(event: Any) -> None:
            out.write(f"{event}\n")
            out.flush()

        train(TrainConfig.model_validate_json(Path(config).read_text(encoding="utf-8")), emit, device="cpu")


def test_a_kill_in_the_final_sample_round_keeps_the_final_lora(
    make_config: Callable[..., TrainConfig], tmp_path: Path
) -> None:
    """A real SIGKILL of the training process when its final sample round starts. The process is
    forked from this one (its imports done: ~0.3 CPU s where a fresh interpreter's cost 8)."""
    whole = train(make_config(output_name="whole", **SAMPLES), [].append, device="cpu")
    assert whole.lora_path is not None
    config = tmp_path / "killed.json"
    config.write_text(
        json.dumps(make_config(output_name="killed", **SAMPLES).model_dump(mode="json", exclude_unset=True))
    )
    events = tmp_path / "events.txt"
    child = multiprocessing.get_context("fork").Process(
        target=_killed_in_the_final_round, args=(str(config), str(events))
    )
    child.start()
    try:
        child.join(300)
    finally:
        if child.is_alive():  # (a hung child: the assertion below names it)
            child.kill()
            child.join()
    assert child.exitcode == -signal.SIGKILL, child.exitcode
    text = events.read_text(encoding="utf-8")
    assert "type='progress'" in text and "sample_ready" not in text and "type='complete'" not in text, text
    _assert_final_lora("killed", whole.lora_path)
