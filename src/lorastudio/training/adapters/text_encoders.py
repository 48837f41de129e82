"""SDXL text-encoder LoRA (TrainConfig.train_text_encoder): both CLIP encoders get a LoRA on their
attention projections (q/k/v/out_proj, the layers kohya's and diffusers' SDXL scripts train, at
the run's lora_rank / lora_alpha / lora_dropout) and stay loaded through the denoiser phase; each
step's captions are encoded there, with gradients, instead of once before training (a fixed
caption cache would hold the embeddings of the untrained encoders).

The adapter is peft's (`inject_adapter_in_model`, what transformers' `add_adapter` runs), read and
restored with peft's state-dict helpers, so the saved tensors are what diffusers'
`load_lora_weights` puts back into `pipe.text_encoder` / `pipe.text_encoder_2`. Names here:
"<encoder>.<peft key>", e.g. "text_encoder.text_model.encoder.layers.0.self_attn.q_proj.lora_A.weight".
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from typing import TYPE_CHECKING, Any

import torch

if TYPE_CHECKING:
    from lorastudio.config import TrainConfig
    from lorastudio.families.base import Family
    from lorastudio.training.events import Emit

ENCODERS: tuple[str, ...] = ("text_encoder", "text_encoder_2")  # SDXL's CLIP-L and CLIP-G (bigG)
TARGETS: tuple[str, ...] = ("q_proj", "k_proj", "v_proj", "out_proj")


def text_encoder_lora_config(cfg: TrainConfig) -> Any:
    """The peft LoraConfig of the text encoders (the run's rank, alpha and dropout)."""
    from peft import LoraConfig

    return LoraConfig(
        r=int(cfg.lora_rank),
        lora_alpha=float(cfg.lora_alpha),
        lora_dropout=cfg.lora_dropout,
        target_modules=list(TARGETS),
        init_lora_weights=True,
    )


class TextEncoderLora:
    """The text pipeline of an SDXL run (`Family.load_text_encoders`: tokenizers + both CLIP
    encoders) with a LoRA on each encoder, in train mode.

    Args:
        family: the run's family (encodes through its pipeline's encode_prompt).
        encoders: the loaded text pipeline.
        cfg: the resolved config (lora_rank, lora_alpha, lora_dropout).
    """

    def __init__(self, family: Family, encoders: Any, cfg: TrainConfig):
        self.family, self.encoders, self.cfg = family, encoders, cfg
        self.lora_config = text_encoder_lora_config(cfg)
        self.modules: dict[str, torch.nn.Module] = {name: getattr(encoders, name) for name in ENCODERS}
        self.params: list[torch.nn.Parameter] = []
        from peft import inject_adapter_in_model

        with torch.random.fork_rng(devices=[]):  # LoRA A init from the run's seed, global stream kept
            torch.manual_seed(cfg.seed)
            for module in self.modules.values():
                module.requires_grad_(False)
                # peft's injection (transformers' add_adapter wants a newer peft than diffusers
                # does); peft_config as add_adapter records it, for peft's state-dict helpers
                inject_adapter_in_model(self.lora_config, module, adapter_name="default")
                module.peft_config = {"default": self.lora_config}
                module.train()
        for module in self.modules.values():
            for p in module.parameters():
                if p.requires_grad:
                    p.data = p.data.float()  # fp32 LoRA weights whatever the encoders' dtype
                    self.params.append(p)

    def named_parameters(self) -> dict[str, torch.nn.Parameter]:
        """{"<encoder>.<parameter name>": parameter} of the trainable LoRA parameters."""
        return {
            f"{name}.{key}": p
            for name, module in self.modules.items()
            for key, p in module.named_parameters()
            if p.requires_grad
        }

    def encode(self, captions: Sequence[str]) -> dict[str, torch.Tensor]:
        """The collated conditioning of `captions` (what Family.collate_conditioning gives for
        the cached path), computed with gradients through the LoRA: prompt_embeds [B, 77, D1+D2],
        pooled [B, Dp]."""
        embeds, _, pooled, _ = self.encoders.encode_prompt(
            list(captions),
            device=self.encoders.device,
            num_images_per_prompt=1,
            do_classifier_free_guidance=False,
        )  # [B, 77, D1+D2], [B, Dp]
        return {"prompt_embeds": embeds, "pooled": pooled}

    @torch.no_grad()
    def encode_frozen(self, captions: Sequence[str]) -> dict[str, dict[str, torch.Tensor]]:
        """{caption: per-caption CPU tensors} with the live LoRA and no gradients (sample
        previews), in eval mode (no LoRA dropout); the train mode is restored."""
        for module in self.modules.values():
            module.eval()
        try:
            return {
                text: {k: v.detach().cpu() for k, v in tensors.items()}
                for text, tensors in zip(
                    captions, self.family.encode_prompts(self.encoders, list(captions), self.cfg), strict=True
                )
            }
        finally:
            for module in self.modules.values():
                module.train()

    def state_dict(self) -> dict[str, torch.Tensor]:
        """The LoRA weights, "<encoder>.<peft key>" -> CPU tensor (peft naming, no adapter name)."""
        from peft.utils import get_peft_model_state_dict

        return {
            f"{name}.{key}": value.detach().to("cpu").contiguous()
            for name, module in self.modules.items()
            for key, value in get_peft_model_state_dict(module).items()
        }

    def load_state_dict(self, weights: dict[str, torch.Tensor]) -> None:
        """Copy `state_dict()`-shaped weights into the LoRA parameters. Raises ValueError when
        they do not fit (other names or shapes)."""
        from peft.utils import set_peft_model_state_dict

        mine = self.state_dict()
        if set(weights) != set(mine) or any(weights[k].shape != v.shape for k, v in mine.items()):
            raise ValueError("the text-encoder LoRA weights do not fit this run's text encoders")
        for name, module in self.modules.items():
            part = {k.removeprefix(name + "."): v for k, v in weights.items() if k.startswith(name + ".")}
            set_peft_model_state_dict(module, part)

    def module_shapes(self) -> dict[str, dict[str, tuple[int, ...]]]:
        """{encoder: {module name: weight shape}} of each encoder's linear layers (the portability
        check's view of the text encoders)."""
        out: dict[str, dict[str, tuple[int, ...]]] = {}
        for name, module in self.modules.items():
            shapes = {}
            for key, sub in module.named_modules():
                if isinstance(sub, torch.nn.Linear) and ".lora_" not in key:
                    shapes[key.replace(".base_layer", "")] = tuple(sub.weight.shape)
            out[name] = shapes
        return out


class LivePromptConds(Mapping[str, dict[str, torch.Tensor]]):
    """The sample prompts' conditioning of a train_text_encoder run: each lookup encodes the
    prompt with the text encoders' LoRA as it is now (training/samples.py reads it per round),
    so previews show the text-encoder LoRA too. Holds `texts` (the sample prompts and "")."""

    def __init__(self, text_encoders: TextEncoderLora, texts: Sequence[str]):
        self.text_encoders = text_encoders
        self.texts = list(dict.fromkeys(texts))

    def __getitem__(self, text: str) -> dict[str, torch.Tensor]:
        if text not in self.texts:
            raise KeyError(text)
        return self.text_encoders.encode_frozen([text])[text]

    def __iter__(self) -> Iterator[str]:
        return iter(self.texts)

    def __len__(self) -> int:
        return len(self.texts)


def load_text_encoder_lora(
    family: Family, cfg: TrainConfig, dtype: torch.dtype, device: torch.device, emit: Emit
) -> TextEncoderLora:
    """Load the run's text encoders (ModelLoadStarted / Completed "text_encoders") and give them
    their LoRA."""
    import time

    from lorastudio.training.events import ModelLoadCompleted, ModelLoadStarted

    emit(ModelLoadStarted(component="text_encoders"))
    t0 = time.perf_counter()
    encoders = family.load_text_encoders(cfg.base_model, cfg.revision, dtype, device)
    emit(ModelLoadCompleted(component="text_encoders", seconds=time.perf_counter() - t0))
    return TextEncoderLora(family, encoders, cfg)
