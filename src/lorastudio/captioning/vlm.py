"""The captioning model: load a vision-language model with its processor, caption one image.

Qwen2.5-VL / Qwen2-VL: the processor's chat template with an image part and the prompt, greedy
generate, the new tokens decoded. Florence-2 (native transformers class): the prompt is a task
token (<CAPTION>, <DETAILED_CAPTION>, <MORE_DETAILED_CAPTION>) that its processor expands.
Decoding is greedy (do_sample False, one beam): the same image, prompt and model give the same
caption every run. Where torchvision is missing, Qwen's processor loads without its video
processor (families/qwen_vl_processor.py). Only workers and the CLI import this module (torch).
"""

from __future__ import annotations

from typing import Any

import torch
from PIL import Image

from lorastudio.captioning.options import DEFAULT_PROMPT, FLORENCE_DEFAULT_TASK
from lorastudio.captioning.source import CaptionerSource
from lorastudio.errors import ModelSourceError
from lorastudio.hub_token import held_hub_token
from lorastudio.open_reason import library_open_reason


def pick_device(device: str, gpu: int | None = None) -> str:
    """ "auto" -> "cuda" when a GPU is visible, else "cpu"; "cuda" without a GPU is refused.
    `gpu`: the index of the GPU to use ("cuda:<gpu>"; the caption job's placement), refused when
    this process does not see that many GPUs; None: the current device ("cuda")."""
    if device == "auto":
        device = "cuda" if torch.cuda.is_available() else "cpu"
    if device == "cuda" and not torch.cuda.is_available():
        raise ModelSourceError(
            "device 'cuda' asked for captioning but no GPU is visible; use 'cpu' or 'auto'"
        )
    if device != "cuda" or gpu is None:
        return device
    if not 0 <= gpu < torch.cuda.device_count():
        raise ModelSourceError(
            f"captioning was placed on GPU {gpu} but this process sees {torch.cuda.device_count()} GPU(s)"
        )
    return f"cuda:{gpu}"


class Captioner:
    """A loaded captioning model. `caption(image)` returns the model's raw text (not cleaned)."""

    def __init__(
        self, source: CaptionerSource, device: str, token: str | None = None, gpu: int | None = None
    ):
        from transformers import AutoProcessor

        self.kind = source.kind
        self.device = pick_device(device, gpu)  # "cpu", "cuda" or "cuda:<gpu>"
        if self.device.startswith("cuda:"):
            torch.cuda.set_device(self.device)  # kernels and caches of this process on that GPU only
        dtype = torch.bfloat16 if self.device.startswith("cuda") else torch.float32
        # the token given (the CLI's settings), else the one this worker holds (hub_token.py)
        kwargs: dict[str, Any] = {"revision": source.revision, "token": token or held_hub_token()}
        if self.kind != "florence2":
            from lorastudio.families.qwen_vl_processor import allow_processor_without_torchvision

            allow_processor_without_torchvision()
        cls = _model_class(self.kind)
        try:
            self.processor = AutoProcessor.from_pretrained(source.source, **kwargs)
            model, info = cls.from_pretrained(source.source, dtype=dtype, output_loading_info=True, **kwargs)
        # the loaders raise many kinds for one cause (a missing or cut file: OSError, SafetensorError;
        # a config its class refuses: ValueError, TypeError, huggingface_hub's validation errors)
        except Exception as err:  # noqa: BLE001 - each is "this model cannot be loaded", named
            raise ModelSourceError(
                f"captioning model {source.source} cannot be loaded: {type(err).__name__}: {library_open_reason(err)}"
            ) from None
        _require_every_weight(source.source, self.kind, info)
        self.stop_ids = _stop_ids(model, self.processor)
        self.cut = False  # whether the last caption stopped at max_tokens, not at the model's end
        try:
            self.model = model.to(self.device).eval()
        except torch.OutOfMemoryError as err:
            raise ModelSourceError(
                f"captioning model {source.source} does not fit in the memory of {self.device}: {err}"
            ) from None

    def default_prompt(self) -> str:
        return FLORENCE_DEFAULT_TASK if self.kind == "florence2" else DEFAULT_PROMPT

    @torch.inference_mode()
    def caption(self, image: Image.Image, prompt: str | None, max_tokens: int) -> str:
        """The model's text for `image` (RGB) asked with `prompt` (None: the default). Sets
        `cut`: True when the text ended because `max_tokens` were made, not at the model's end
        token (its last sentence is then likely unfinished: RELIABILITY 1941)."""
        prompt = prompt or self.default_prompt()
        if self.kind == "florence2":
            inputs = self.processor(text=prompt, images=image, return_tensors="pt")
        else:
            messages = [{"role": "user", "content": [{"type": "image"}, {"type": "text", "text": prompt}]}]
            text = self.processor.apply_chat_template(messages, add_generation_prompt=True)
            inputs = self.processor(text=[text], images=[image], return_tensors="pt")
        inputs = {k: v.to(self.device) for k, v in inputs.items()}
        if "pixel_values" in inputs and inputs["pixel_values"].is_floating_point():
            inputs["pixel_values"] = inputs["pixel_values"].to(self.model.dtype)
        out = self.model.generate(**inputs, max_new_tokens=max_tokens, do_sample=False, num_beams=1)  # [1, L]
        # decoder-only models echo the prompt: keep the new tokens [1, N]; Florence-2's decoder does not
        new = out if self.kind == "florence2" else out[:, inputs["input_ids"].shape[1] :]
        # generate ends a sequence with its end token, or at max_new_tokens on any other token
        self.cut = new.shape[1] > 0 and int(new[0, -1]) not in self.stop_ids
        return self.processor.batch_decode(new, skip_special_tokens=True)[0]

    def close(self) -> None:
        """Drop the weights (and the GPU's cached blocks)."""
        del self.model
        if self.device.startswith("cuda"):
            torch.cuda.empty_cache()


def _stop_ids(model: Any, processor: Any) -> frozenset[int]:
    """The token ids that end a caption: the generation config's eos_token_id (an int or a list:
    Qwen2.5-VL has two), else the tokenizer's; its pad id too (generate pads a finished row)."""
    config = getattr(model, "generation_config", None)
    tokenizer = getattr(processor, "tokenizer", None)
    ids: set[int] = set()
    for value in (
        getattr(config, "eos_token_id", None),
        getattr(config, "pad_token_id", None),
        getattr(tokenizer, "eos_token_id", None),
    ):
        if isinstance(value, int):
            ids.add(value)
        elif isinstance(value, (list, tuple)):
            ids.update(v for v in value if isinstance(v, int))
    return frozenset(ids)


def _require_every_weight(name: str, kind: str, info: dict[str, Any]) -> None:
    """Refuse a model whose files miss weights its class needs or hold them in another shape
    (from_pretrained's loading info): transformers fills those with random values and only logs
    it, so a folder of another model's weights under this config captioned every image with
    noise. Unexpected extra weights are left (a checkpoint may carry more than the class uses)."""
    missing, mismatched = list(info.get("missing_keys", ())), list(info.get("mismatched_keys", ()))
    if not missing and not mismatched:
        return
    named = sorted(str(k[0] if isinstance(k, tuple) else k) for k in (*missing, *mismatched))
    raise ModelSourceError(
        f"captioning model {name} does not hold the weights a {kind} model needs: {len(missing)} missing, "
        f"{len(mismatched)} of another shape (e.g. {', '.join(named[:3])}); its weight files are of "
        "another model or incomplete: fetch it again"
    )


def _model_class(kind: str) -> Any:
    import transformers

    names = {
        "qwen2_5_vl": "Qwen2_5_VLForConditionalGeneration",
        "qwen2_vl": "Qwen2VLForConditionalGeneration",
        "florence2": "Florence2ForConditionalGeneration",
    }
    cls = getattr(transformers, names[kind], None)
    if cls is None:
        raise ModelSourceError(f"this transformers ({transformers.__version__}) has no {names[kind]}")
    return cls
