"""The caption count's tokenizers for a tokenizer folder without tokenizer.json (run only in the
count's child process, jobs/caption_count.py; never torch or transformers, whose tokenizer
import loads torch): the slow files there are, read bounded and built as transformers builds
its tokenizer from them.

- A T5 tokenizer (`tokenizer_class` T5Tokenizer / T5TokenizerFast, or none) of `spiece.model`
  alone (FLUX.1's tokenizer_2, Chroma's tokenizer in some repos): counted with sentencepiece,
  which reads the model as transformers' conversion does (its Unigram pieces and their
  normalisation), plus the `</s>` T5 appends.
- A CLIP tokenizer (CLIPTokenizer / CLIPTokenizerFast) of `vocab.json` + `merges.txt` (SDXL's
  released tokenizers have no tokenizer.json): the `tokenizers` pipeline transformers'
  CLIPTokenizer builds (NFC, whitespace runs to one space, lower case; CLIP's split; byte-level
  BPE with `</w>` word ends; <|startoftext|> ... <|endoftext|> around).

Anything else cannot be counted here (the reason says what the folder holds): a note, the run's
start counts.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from lorastudio import json_read

T5_CLASSES = frozenset({"T5Tokenizer", "T5TokenizerFast"})
CLIP_CLASSES = frozenset({"CLIPTokenizer", "CLIPTokenizerFast"})
# transformers' CLIPTokenizer pre-tokenizer split (models/clip/tokenization_clip.py)
CLIP_SPLIT = (
    r"""<\|startoftext\|>|<\|endoftext\|>|'s|'t|'re|'ve|'m|'ll|'d|[\p{L}]+|[\p{N}]|[^\s\p{L}\p{N}]+"""
)

Reader = Callable[[Path, Path], bytes]  # caption_count.read_bounded: raises FileNotFoundError


@dataclass(frozen=True)
class _Ids:
    ids: list[int]


class SentencePieceCount:
    """A sentencepiece model counted as a T5 tokenizer: `encode_batch` as tokenizers' (the ids,
    `</s>` appended with the special tokens)."""

    def __init__(self, processor: Any):
        self.processor = processor

    def encode_batch(self, texts: Sequence[str], add_special_tokens: bool = True) -> list[_Ids]:
        eos = [self.processor.eos_id()] if add_special_tokens else []
        return [_Ids(list(ids) + eos) for ids in self.processor.encode(list(texts))]


def slow_tokenizer(tok_dir: Path, root: Path, read: Reader, cannot: type[Exception]) -> Any:
    """A counter of `tok_dir`'s slow tokenizer files with tokenizers' `encode_batch` (see the
    module docstring); files read with `read` (bounded, inside `root`). Raises `cannot` with the
    reason when the folder holds nothing counted here."""
    config = _config(tok_dir, root, read)
    named = config.get("tokenizer_class")
    kind = named if isinstance(named, str) else None
    spiece = _optional(read, tok_dir / "spiece.model", root)
    if spiece is not None and (kind is None or kind in T5_CLASSES):
        return _t5(spiece, tok_dir, cannot)
    vocab = _optional(read, tok_dir / "vocab.json", root)
    merges = _optional(read, tok_dir / "merges.txt", root)
    if vocab is not None and merges is not None and kind in CLIP_CLASSES:
        return _clip(vocab, merges, config, tok_dir, cannot)
    held = sorted(p.name for p in _listing(tok_dir))[:8]
    raise cannot(
        f"{tok_dir.name}/ has no tokenizer.json, and its slow files ({', '.join(held) or 'none'}"
        f"{', tokenizer_class ' + kind if kind else ''}) are not a T5 spiece.model or CLIP's "
        "vocab.json + merges.txt, which are counted here"
    )


def _t5(model: bytes, tok_dir: Path, cannot: type[Exception]) -> SentencePieceCount:
    import sentencepiece

    processor = sentencepiece.SentencePieceProcessor()
    try:
        processor.LoadFromSerializedProto(model)
    except (RuntimeError, OSError, ValueError) as err:
        raise cannot(f"{tok_dir.name}/spiece.model cannot be read by sentencepiece: {err}") from None
    return SentencePieceCount(processor)


def _clip(
    vocab_bytes: bytes, merges_bytes: bytes, config: dict, tok_dir: Path, cannot: type[Exception]
) -> Any:
    from tokenizers import Regex, Tokenizer, normalizers, pre_tokenizers, processors
    from tokenizers.models import BPE

    try:
        vocab = json_read.loads(vocab_bytes)
        lines = merges_bytes.decode("utf-8").splitlines()
    except (ValueError, RecursionError):
        raise cannot(f"{tok_dir.name}/vocab.json or merges.txt is not UTF-8 JSON / text") from None
    if not isinstance(vocab, dict) or not all(isinstance(v, int) for v in vocab.values()):
        raise cannot(f"{tok_dir.name}/vocab.json is not a token -> id table")
    if lines and lines[0].startswith("#version"):
        lines = lines[1:]
    merges = [tuple(line.split(" ")) for line in lines if line]
    if not all(len(m) == 2 for m in merges):
        raise cannot(f"{tok_dir.name}/merges.txt holds a line that is not two tokens")
    bos, eos, unk = (
        _special(config, key, default)
        for key, default in (
            ("bos_token", "<|startoftext|>"),
            ("eos_token", "<|endoftext|>"),
            ("unk_token", "<|endoftext|>"),
        )
    )
    if bos not in vocab or eos not in vocab:
        raise cannot(f"{tok_dir.name}/vocab.json lacks its {bos} or {eos} token")
    try:
        bpe = BPE(vocab=vocab, merges=merges, dropout=None, continuing_subword_prefix="",
                  end_of_word_suffix="</w>", fuse_unk=False, unk_token=unk)  # fmt: skip
    except Exception as err:  # noqa: BLE001 (the Rust model raises plain Exception on bad tables)
        raise cannot(f"{tok_dir.name}/vocab.json + merges.txt cannot be read by tokenizers: {err}") from None
    tokenizer = Tokenizer(bpe)
    tokenizer.normalizer = normalizers.Sequence(
        [normalizers.NFC(), normalizers.Replace(Regex(r"\s+"), " "), normalizers.Lowercase()]
    )
    tokenizer.pre_tokenizer = pre_tokenizers.Sequence(
        [
            pre_tokenizers.Split(Regex(CLIP_SPLIT), behavior="removed", invert=True),
            pre_tokenizers.ByteLevel(add_prefix_space=False),
        ]
    )
    tokenizer.post_processor = processors.RobertaProcessing(
        (eos, vocab[eos]), (bos, vocab[bos]), trim_offsets=False, add_prefix_space=False
    )
    return tokenizer


def _special(config: dict, key: str, default: str) -> str:
    value = config.get(key)
    value = value.get("content") if isinstance(value, dict) else value
    return value if isinstance(value, str) else default


def _config(tok_dir: Path, root: Path, read: Reader) -> dict:
    raw = _optional(read, tok_dir / "tokenizer_config.json", root)
    try:
        config = json_read.loads(raw) if raw is not None else {}
    except (ValueError, RecursionError):
        config = {}
    return config if isinstance(config, dict) else {}


def _optional(read: Reader, file: Path, root: Path) -> bytes | None:
    try:
        return read(file, root)
    except FileNotFoundError:
        return None


def _listing(folder: Path) -> list[Path]:
    try:
        return list(folder.iterdir())[:64]
    except OSError:
        return []
