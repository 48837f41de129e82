"""The caption count's hostile-input boundary: `python -m lorastudio.jobs.caption_count`, the
child process the preflight counts in (jobs/caption_tokens.py), and the counting it runs.

The base model folder is whatever path a config names, so its tokenizer.json, its
tokenizer_config.json and its chat template are untrusted: a FIFO or /dev/zero (the Rust reader
blocks holding the GIL, or reads without end), a symlink out of the folder, a JSON nested past
Python's recursion limit, a template that raises anything (1/0, a recursive macro), loops for
hours (nested range()) or renders gigabytes ('a'|center(10**9), lipsum(10**6)). So the server
never reads or renders them itself: it runs this module as a child with a wall-clock limit, and
the child caps its own address space and CPU time (`LIMIT_AS_BYTES`, `LIMIT_CPU_S`), reads only
regular files of at most `MAX_FILE_BYTES` that resolve inside the folder (or, for a hub cache
snapshot, inside its repository's cache folder, where the snapshot's links point; or to a hub
cache blob, where an old `--local-dir` with symlinks points: is_hub_blob), and answers
any failure as "cannot count here: <why>".

Protocol: stdin one JSON object {"folder", "root", "tokenizer", "template", "texts"}; stdout one
JSON line, {"counts": [...]} or {"cannot": "<why>"}; exit code 0 whenever that line was written.
Imports no lorastudio module but jobs/caption_count_slow.py (for a tokenizer without
tokenizer.json; the child starts in ~0.2 s) and never torch or transformers.
"""

from __future__ import annotations

import functools
import json
import os
import stat
import sys
from datetime import datetime
from pathlib import Path
from typing import Any

# QwenImagePipeline.__init__: the prompt template and the leading tokens it drops
QWEN_IMAGE_TEMPLATE = (
    "<|im_start|>system\nDescribe the image by detailing the color, shape, size, texture, quantity, "
    "text, spatial relationships of the objects and background:<|im_end|>\n<|im_start|>user\n{}"
    "<|im_end|>\n<|im_start|>assistant\n"
)
QWEN_IMAGE_DROP = 34
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
MAX_FILE_BYTES = 128 * 2**20  # the largest tokenizer.json published is ~35 MB (Gemma 3)
LIMIT_AS_BYTES = 6 * 2**30  # the child's address space (a 35 MB tokenizer.json loads in < 1 GiB)
LIMIT_CPU_S = 60
# texts one encode_batch is given: its Encodings (ids, offsets, masks: ~19 KB a 200-character T5
# caption) are held only a chunk at a time (50,000 captions at once held ~1 GB: RELIABILITY 2112)
COUNT_CHUNK = 2_048


class CannotCount(Exception):
    """The tokenizer files cannot be counted with here (the reason is the message)."""


def is_hub_blob(real: Path) -> bool:
    """Whether `real` (a resolved path) is a file of a hub cache's content store:
    `.../models--ORG--NAME/blobs/<40 or 64 hex>`, where huggingface_hub's snapshots and its old
    `--local-dir` with symlinks (`local_dir_use_symlinks`) link a model folder's files. Such a
    link out of the model folder is followed: the blob is a model's file, named by its hash,
    never a file of the user's own (a link to /etc/passwd or a home's file is still refused)."""
    name = real.name
    return (
        len(name) in (40, 64)
        and all(c in "0123456789abcdef" for c in name)
        and real.parent.name == "blobs"
        and real.parent.parent.name.startswith("models--")
    )


def read_bounded(file: Path, root: Path) -> bytes:
    """`file`'s bytes: a regular file of at most MAX_FILE_BYTES whose real path is inside `root`
    or is a hub cache blob (is_hub_blob: a folder made by huggingface_hub's old `--local-dir`
    with symlinks), opened without blocking, so a FIFO or a device is refused, never waited on.
    Raises FileNotFoundError when it does not exist, CannotCount otherwise."""
    real = Path(os.path.realpath(file))
    if not real.is_relative_to(os.path.realpath(root)) and not is_hub_blob(real):
        if not os.path.lexists(file):
            raise FileNotFoundError(file)
        raise CannotCount(f"{file.parent.name}/{file.name} leads out of the model folder (to {real})")
    fd = os.open(real, os.O_RDONLY | os.O_NONBLOCK | os.O_NOCTTY | os.O_NOFOLLOW)  # no link swapped in
    with os.fdopen(fd, "rb") as handle:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            raise CannotCount(f"{file.parent.name}/{file.name} is not a regular file")
        if info.st_size > MAX_FILE_BYTES:
            raise CannotCount(
                f"{file.parent.name}/{file.name} is {info.st_size / 2**20:.0f} MiB (at most "
                f"{MAX_FILE_BYTES // 2**20} MiB is read here)"
            )
        return handle.read(MAX_FILE_BYTES + 1)[:MAX_FILE_BYTES]


def count(folder: Path, root: Path, tokenizer_dir: str, template: str, texts: list[str]) -> list[int]:
    """Each text's tokens as training/inputs/caption_length.caption_token_counts counts them, read from
    `folder`/`tokenizer_dir`'s files (only those inside `root`). Raises CannotCount."""
    tok_dir = folder / tokenizer_dir
    tokenizer = _tokenizer(tok_dir, root)
    if template == "plain":
        return _lengths(tokenizer, texts)
    if template == "qwen_image":
        wrapped = [QWEN_IMAGE_TEMPLATE.format(c) for c in texts]
        return [n - QWEN_IMAGE_DROP for n in _lengths(tokenizer, wrapped)]
    if template == "krea2":
        wrapped = [KREA2_PREFIX + c for c in texts]
        return [n - KREA2_DROP + KREA2_SUFFIX_TOKENS for n in _lengths(tokenizer, wrapped)]
    chat, specials = _chat_template(tok_dir, root)
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
        return _lengths(tokenizer, rendered)
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
    return _lengths(tokenizer, rendered, add_special_tokens=False)


def _lengths(tokenizer: Any, texts: list[str], **options: Any) -> list[int]:
    """Each text's token count by `tokenizer.encode_batch(chunk, **options)`, COUNT_CHUNK texts at
    a time (the Encodings of one chunk held at once, whatever the dataset's size)."""
    out: list[int] = []
    for start in range(0, len(texts), COUNT_CHUNK):
        out += [len(e.ids) for e in tokenizer.encode_batch(texts[start : start + COUNT_CHUNK], **options)]
    return out


def _tokenizer(tok_dir: Path, root: Path) -> Any:
    from tokenizers import Tokenizer

    try:
        data = read_bounded(tok_dir / "tokenizer.json", root)
    except FileNotFoundError:
        from lorastudio.jobs.caption_count_slow import slow_tokenizer

        return slow_tokenizer(tok_dir, root, read_bounded, CannotCount)  # a T5 spiece.model, CLIP's BPE
    try:
        tokenizer = Tokenizer.from_str(data.decode("utf-8"))
    except Exception as err:  # noqa: BLE001 (the Rust reader raises plain Exception on a bad file)
        raise CannotCount(f"{tok_dir.name}/tokenizer.json cannot be read by tokenizers: {err}") from None
    tokenizer.no_truncation()  # a tokenizer.json may carry a cut or padding; the run counts without
    tokenizer.no_padding()
    return tokenizer


def _chat_template(tok_dir: Path, root: Path) -> tuple[str, dict[str, str]]:
    """The tokenizer's chat template (chat_template.jinja, else tokenizer_config.json's) and its
    special tokens as the template sees them (bos_token, eos_token, ...)."""
    try:
        config = json.loads(read_bounded(tok_dir / "tokenizer_config.json", root))
    except (FileNotFoundError, ValueError, RecursionError):
        config = {}
    if not isinstance(config, dict):
        config = {}
    specials: dict[str, str] = {}
    for k in ("bos_token", "eos_token", "unk_token", "pad_token"):
        v = config.get(k)
        v = v.get("content") if isinstance(v, dict) else v
        if isinstance(v, str):
            specials[k] = v
    try:
        return read_bounded(tok_dir / "chat_template.jinja", root).decode("utf-8"), specials
    except FileNotFoundError:
        pass
    except UnicodeDecodeError:
        raise CannotCount(f"{tok_dir.name}/chat_template.jinja is not UTF-8 text") from None
    chat = config.get("chat_template")
    if isinstance(chat, str):
        return chat, specials
    raise CannotCount(f"{tok_dir.name}/ has no chat template")


def render_chat(
    template: str, messages: list[dict[str, Any]], specials: dict[str, str], **kwargs: Any
) -> str:
    """`template` rendered as transformers' apply_chat_template renders it (a sandboxed jinja2
    environment, trim_blocks and lstrip_blocks, loop controls, the {% generation %} block (its
    body rendered as is), its tojson / raise_exception / strftime_now). Raises CannotCount when
    the template does not render here (any error it raises; its time and size are bounded by
    the child process that runs it)."""
    import jinja2

    try:
        return _compiled(template).render(messages=messages, tools=None, documents=None, **specials, **kwargs)
    except jinja2.exceptions.TemplateError as err:
        raise CannotCount(f"its chat template does not render here: {err}") from None
    except (ArithmeticError, TypeError, ValueError, LookupError, AttributeError, RecursionError) as err:
        raise CannotCount(f"its chat template does not render here: {type(err).__name__}: {err}") from None


@functools.lru_cache(maxsize=4)
def _compiled(template: str) -> Any:
    """`template` compiled once in transformers' environment (render_chat; a count renders it
    for every caption: compiling each time cost ~5 ms a caption). Raises jinja2's TemplateError."""
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
    return env.from_string(template)


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


def main() -> int:
    """The child: limits itself, counts, writes the one answer line (see the module docstring)."""
    import resource

    resource.setrlimit(resource.RLIMIT_AS, (LIMIT_AS_BYTES, LIMIT_AS_BYTES))
    resource.setrlimit(resource.RLIMIT_CPU, (LIMIT_CPU_S, LIMIT_CPU_S))
    ask = json.loads(sys.stdin.buffer.read())  # UTF-8 bytes whatever PYTHONIOENCODING says (RELIABILITY 1029)
    try:
        answer: dict[str, Any] = {
            "counts": count(
                Path(ask["folder"]), Path(ask["root"]), ask["tokenizer"], ask["template"], ask["texts"]
            )
        }
    except CannotCount as err:
        answer = {"cannot": str(err)}
    except (OSError, MemoryError) as err:
        answer = {"cannot": f"its tokenizer files cannot be read here: {type(err).__name__}: {err}"}
    print(json.dumps(answer))
    return 0


if __name__ == "__main__":
    sys.exit(main())
