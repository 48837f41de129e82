"""Captions longer than the text encoder reads, named in the preflight (torch-free).

The run's start counts each caption with its pipeline's own tokenizer and prompt template
(training/caption_length.py, fix 99). The API server may not import torch or transformers, so
the preflight counts with the `tokenizers` package (Rust, torch-free) reading the base model's
`tokenizer.json`, and renders a chat template with jinja2 as transformers does
(`render_chat`): the counts equal training/caption_length.caption_token_counts on every family's
tiny model (tests/unit/jobs/test_caption_tokens_parity.py). The pipelines' template strings are
copied here (`QWEN_IMAGE_TEMPLATE`, `KREA2_*`, `FLUX2_SYSTEM_MESSAGE`); a test checks them
against diffusers' pipelines.

Contract of `caption_token_section`: it reads only local files (a pipeline folder, or a hub id's
snapshot in the hub cache; a single file's base config), never the network. It returns None for
a family whose captions are not measured (no CaptionTokens, or one that never cuts); otherwise
{"limit", "counted": bool, "cut": [{"file", "tokens"}], "note"}. When it cannot count
(no tokenizer.json: a slow-only tokenizer; the files not on this machine; a chat template this
renderer does not run) `counted` is False, `cut` empty and `note` says the count is made at the
start of the run: a note, never a problem.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from datetime import datetime
from functools import lru_cache
from pathlib import Path
from typing import Any

from lorastudio.config import TrainConfig
from lorastudio.data import DatasetScan
from lorastudio.data.caption_variants import scan_variants
from lorastudio.data.items import item_name
from lorastudio.families.spec import FamilySpec

# QwenImagePipeline.__init__: the prompt template and the leading tokens it drops
QWEN_IMAGE_TEMPLATE = (
    "<|im_start|>system\nDescribe the image by detailing the color, shape, size, texture, quantity, "
    "text, spatial relationships of the objects and background:<|im_end|>\n<|im_start|>user\n{}"
    "<|im_end|>\n<|im_start|>assistant\n"
)
QWEN_IMAGE_DROP = 34
QWEN_IMAGE_TOKENIZER_MAX = 1024  # QwenImagePipeline.tokenizer_max_length: its own cut
# Krea2Pipeline.__init__: prefix (dropped) + caption, then the suffix's tokens
KREA2_PREFIX = (
    "<|im_start|>system\nDescribe the image by detailing the color, shape, size, texture, quantity, "
    "text, spatial relationships of the objects and background:<|im_end|>\n<|im_start|>user\n"
)
KREA2_DROP = 34
KREA2_SUFFIX_TOKENS = 5
# diffusers pipelines/flux2/system_messages.SYSTEM_MESSAGE (Flux2Pipeline's system turn)
FLUX2_SYSTEM_MESSAGE = (
    "You are an AI that reasons about image descriptions. You give structured responses focusing on "
    "object relationships, object\nattribution and actions without speculation."
)
AT_START = "caption lengths are counted at the start of the run ({why})"


def caption_token_section(
    spec: FamilySpec, cfg: TrainConfig, scan: DatasetScan, folder: Path | None
) -> dict[str, Any] | None:
    """The preflight's `dataset.caption_tokens`: each image's caption (every variant the run
    encodes) counted as the pipeline builds it; `cut` names those over `limit`, longest first.
    `folder` is the base's local pipeline folder (None: not on this machine). None for a family
    that is not measured."""
    from lorastudio.training.caption_length import token_limit

    limit = token_limit(spec, cfg)
    if limit is None or spec.caption_tokens is None:
        return None
    if spec.caption_tokens.template == "qwen_image":
        limit = min(limit, QWEN_IMAGE_TOKENIZER_MAX)
    variants = scan_variants(scan, cfg.caption_variants, cfg.seed)
    texts = sorted({v for vs in variants for v in vs})
    counts, why = _counts(spec, folder, texts)
    if counts is None:
        return {"limit": limit, "counted": False, "cut": [], "note": AT_START.format(why=why)}
    by_text = dict(zip(texts, counts, strict=True))
    labels = scan.labels()
    cut = []
    for item, vs in zip(scan.items, variants, strict=True):
        longest = max((by_text[v] for v in vs), default=0)
        if longest > limit:
            cut.append({"file": item_name(item, labels), "tokens": longest})
    cut.sort(key=lambda c: (-c["tokens"], c["file"]))
    note = None
    if cut:
        note = (
            f"{len(cut)} of {len(scan.items)} captions are longer than the {limit} tokens {spec.title}'s text "
            f"encoder reads and train cut there"
            + ("" if spec.caption_tokens.template == "plain" else " (its prompt template's tokens included)")
            + f"; the longest: {cut[0]['file']} ({cut[0]['tokens']} tokens)"
        )
    return {"limit": limit, "counted": True, "cut": cut, "note": note}


def tokenizer_folder(cfg: TrainConfig, model_dir: Path | None) -> Path | None:
    """Where the run's tokenizers are on this machine: the local pipeline folder, a single
    file's base config folder, or a hub id's cached snapshot; None when not on disk."""
    from lorastudio.basemodels.hubcache import cached_snapshot, is_hub_id

    if model_dir is not None:
        return model_dir
    where = (
        cfg.base_config if cfg.base_config is not None and Path(cfg.base_model).is_file() else cfg.base_model
    )
    folder = Path(where).expanduser()
    if folder.is_dir():
        return folder
    return cached_snapshot(where, cfg.revision) if is_hub_id(where) else None


def caption_counts(spec: FamilySpec, folder: Path, captions: Sequence[str]) -> list[int]:
    """Each caption's tokens as training/caption_length.caption_token_counts counts them, read
    from the pipeline folder's tokenizer files. Raises CannotCount (with the reason), ValueError
    for a family that is not measured."""
    if spec.caption_tokens is None:
        raise ValueError(f"{spec.title}'s captions are not measured")
    tok_dir = folder / spec.caption_tokens.tokenizer
    tokenizer = _tokenizer(tok_dir)
    template = spec.caption_tokens.template
    texts = list(captions)
    if template == "plain":
        return [len(e.ids) for e in tokenizer.encode_batch(texts)]
    if template == "qwen_image":
        wrapped = [QWEN_IMAGE_TEMPLATE.format(c) for c in texts]
        return [len(e.ids) - QWEN_IMAGE_DROP for e in tokenizer.encode_batch(wrapped)]
    if template == "krea2":
        wrapped = [KREA2_PREFIX + c for c in texts]
        return [len(e.ids) - KREA2_DROP + KREA2_SUFFIX_TOKENS for e in tokenizer.encode_batch(wrapped)]
    chat, specials = _chat_template(tok_dir)
    if template in ("chat", "chat_thinking"):  # rendered, then tokenized with the special tokens
        thinking = template == "chat_thinking"
        rendered = [
            render_chat(
                chat,
                [{"role": "user", "content": c}],
                specials,
                add_generation_prompt=True,
                enable_thinking=thinking,
            )
            for c in texts
        ]
        return [len(e.ids) for e in tokenizer.encode_batch(rendered)]
    if template != "flux2_system":
        raise CannotCount(f"the {template!r} prompt template is not counted here")
    # diffusers' format_input, apply_chat_template(tokenize=True): no special tokens added
    rendered = [
        render_chat(
            chat,
            [
                {"role": "system", "content": [{"type": "text", "text": FLUX2_SYSTEM_MESSAGE}]},
                {"role": "user", "content": [{"type": "text", "text": c.replace("[IMG]", "")}]},
            ],
            specials,
            add_generation_prompt=False,
        )
        for c in texts
    ]
    return [len(e.ids) for e in tokenizer.encode_batch(rendered, add_special_tokens=False)]


class CannotCount(Exception):
    """The tokenizer files cannot be counted with here (the reason is the message)."""


def _counts(spec: FamilySpec, folder: Path | None, texts: list[str]) -> tuple[list[int] | None, str]:
    """(each text's count, "") or (None, why they cannot be counted here)."""
    if folder is None:
        return None, "the base model's tokenizer is not on this machine"
    if not texts:
        return [], ""
    try:
        return caption_counts(spec, folder, texts), ""
    except CannotCount as err:
        return None, str(err)


@lru_cache(maxsize=8)
def _load(path: str, mtime_ns: int) -> Any:
    from tokenizers import Tokenizer

    tokenizer = Tokenizer.from_file(path)
    tokenizer.no_truncation()  # a tokenizer.json may carry a cut or padding; the run counts without
    tokenizer.no_padding()
    return tokenizer


def _tokenizer(tok_dir: Path) -> Any:
    file = tok_dir / "tokenizer.json"
    try:
        stamp = file.stat().st_mtime_ns
    except OSError:
        raise CannotCount(f"{tok_dir.name}/ has no tokenizer.json (a slow-only tokenizer)") from None
    try:
        return _load(str(file), stamp)
    except Exception as err:  # noqa: BLE001 (the Rust reader raises plain Exception on a bad file)
        raise CannotCount(f"{file} cannot be read by tokenizers: {err}") from None


def _chat_template(tok_dir: Path) -> tuple[str, dict[str, str]]:
    """The tokenizer's chat template (chat_template.jinja, else tokenizer_config.json's) and its
    special tokens as the template sees them (bos_token, eos_token, ...)."""
    try:
        config = json.loads((tok_dir / "tokenizer_config.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        config = {}
    specials = {
        k: (v["content"] if isinstance(v, dict) else v)
        for k in ("bos_token", "eos_token", "unk_token", "pad_token")
        if isinstance(v := config.get(k), (str, dict))
    }
    file = tok_dir / "chat_template.jinja"
    if file.is_file():
        return file.read_text(encoding="utf-8"), specials
    chat = config.get("chat_template")
    if isinstance(chat, str):
        return chat, specials
    raise CannotCount(f"{tok_dir.name}/ has no chat template")


def render_chat(
    template: str, messages: list[dict[str, Any]], specials: dict[str, str], **kwargs: Any
) -> str:
    """`template` rendered as transformers' apply_chat_template renders it (a sandboxed jinja2
    environment, trim_blocks and lstrip_blocks, loop controls, the {% generation %} block (its
    body rendered as is), its tojson / raise_exception / strftime_now). Raises CannotCount when the template does not render here."""
    import jinja2
    from jinja2.sandbox import ImmutableSandboxedEnvironment

    def raise_exception(message: str) -> None:
        raise jinja2.exceptions.TemplateError(message)

    def tojson(
        x: Any,
        ensure_ascii: bool = False,
        indent: Any = None,
        separators: Any = None,
        sort_keys: bool = False,
    ) -> str:
        return json.dumps(
            x, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys
        )

    env = ImmutableSandboxedEnvironment(
        trim_blocks=True, lstrip_blocks=True, extensions=["jinja2.ext.loopcontrols", _generation_tag()]
    )
    env.filters["tojson"] = tojson
    env.globals["raise_exception"] = raise_exception
    env.globals["strftime_now"] = lambda fmt: datetime.now().strftime(fmt)
    try:
        return env.from_string(template).render(
            messages=messages, tools=None, documents=None, **specials, **kwargs
        )
    except jinja2.exceptions.TemplateError as err:
        raise CannotCount(f"its chat template does not render here: {err}") from None


def _generation_tag() -> type:
    """transformers' {% generation %}...{% endgeneration %} block (its AssistantTracker marks the
    assistant's tokens): rendered as its body."""
    from jinja2 import nodes
    from jinja2.ext import Extension

    class Generation(Extension):
        tags = {"generation"}  # noqa: RUF012 (jinja2's class attribute)

        def parse(self, parser: Any) -> Any:
            lineno = next(parser.stream).lineno
            body = parser.parse_statements(("name:endgeneration",), drop_needle=True)
            return nodes.CallBlock(self.call_method("_body"), [], [], body).set_lineno(lineno)

        def _body(self, caller: Any) -> str:
            return str(caller())

    return Generation
