"""Qwen2VLProcessor without torchvision.

Qwen-Image-Edit's pipelines feed their control images to Qwen2.5-VL through a Qwen2VLProcessor.
In transformers 5 that processor also holds a video processor, which needs torchvision, and it
refuses to be built or loaded without one even when no video is ever passed. The only torchvision
wheel matching the pinned CPU torch (2.13.0+cpu) on the package index is a CUDA build that does
not import against a CPU torch (its ops library links libtorch_cuda), so CPU hosts run without
torchvision. There transformers already falls back to the PIL image processor
(Qwen2VLImageProcessorPil, what images need); `allow_processor_without_torchvision` makes the
processor's sub-processors image processor + tokenizer, so it builds, saves and loads without
the video processor. Hosts with torchvision keep transformers' own behaviour (nothing changes).
Hand-written because no library setting does it; process-wide, idempotent.
"""

from __future__ import annotations

from typing import Any

_VIDEO = "video_processor"


def allow_processor_without_torchvision() -> None:
    """Where torchvision is missing, let Qwen2VLProcessor hold no video processor (see module)."""
    from transformers import Qwen2VLProcessor
    from transformers.utils import is_torchvision_available

    if is_torchvision_available() or getattr(Qwen2VLProcessor, "_without_video", False):
        return
    original = Qwen2VLProcessor.get_attributes.__func__

    def get_attributes(cls: Any) -> list[str]:
        return [name for name in original(cls) if name != _VIDEO]

    Qwen2VLProcessor.get_attributes = classmethod(get_attributes)  # type: ignore[method-assign]
    Qwen2VLProcessor._without_video = True  # type: ignore[attr-defined]
