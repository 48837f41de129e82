"""Tokenizer folders without tokenizer.json, as released repos ship them (tests of the preflight's
caption count, jobs/caption_count_slow.py): a T5 of `spiece.model` alone, a CLIP of `vocab.json` +
`merges.txt`."""

from __future__ import annotations

import json
from pathlib import Path

T5_TEXT = [
    "a red circle on a blue background, sharp focus, high quality photo",
    "a green triangle and a yellow square on white, studio light",
    "the quick brown fox jumps over the lazy dog near a small river",
] * 20


def t5_spiece_only(tok_dir: Path) -> list[tuple[str, float]]:
    """Make `tok_dir` a T5 tokenizer of a small trained `spiece.model` and its
    tokenizer_config.json (no tokenizer.json); returns the model's (piece, score) table."""
    import sentencepiece

    for old in tok_dir.iterdir():
        old.unlink()
    corpus = tok_dir.parent / "t5-corpus.txt"
    corpus.write_text("\n".join(T5_TEXT), encoding="utf-8")
    sentencepiece.SentencePieceTrainer.train(
        input=str(corpus), model_prefix=str(tok_dir / "spiece"), vocab_size=48, hard_vocab_limit=False, model_type="unigram",
        pad_id=0, eos_id=1, unk_id=2, bos_id=-1, num_threads=1, minloglevel=2,
    )  # fmt: skip
    corpus.unlink()
    (tok_dir / "spiece.vocab").unlink()
    config = {
        "tokenizer_class": "T5Tokenizer",
        "eos_token": "</s>",
        "unk_token": "<unk>",
        "pad_token": "<pad>",
    }
    (tok_dir / "tokenizer_config.json").write_text(json.dumps(config), encoding="utf-8")
    processor = sentencepiece.SentencePieceProcessor(model_file=str(tok_dir / "spiece.model"))
    return [(processor.id_to_piece(i), processor.get_score(i)) for i in range(processor.get_piece_size())]


def clip_without_tokenizer_json(tok_dir: Path) -> None:
    """Write `tok_dir`'s CLIP BPE (from its tokenizer.json) as vocab.json + merges.txt, as SDXL's
    released tokenizers are, and remove tokenizer.json."""
    model = json.loads((tok_dir / "tokenizer.json").read_text(encoding="utf-8"))["model"]
    (tok_dir / "vocab.json").write_text(json.dumps(model["vocab"]), encoding="utf-8")
    merges = [m if isinstance(m, str) else " ".join(m) for m in model["merges"]]
    (tok_dir / "merges.txt").write_text("#version: 0.2\n" + "\n".join(merges) + "\n", encoding="utf-8")
    (tok_dir / "tokenizer.json").unlink()
