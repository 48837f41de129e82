"""The preflight's caption count of a tokenizer without tokenizer.json (RELIABILITY 593): a T5 of
spiece.model alone and SDXL's CLIPs of vocab.json + merges.txt are counted in the torch-free child
(jobs/caption_count_slow.py) as transformers counts them; other slow files are still left to the
start, with what the folder holds."""

from __future__ import annotations

import shutil
from collections.abc import Callable
from pathlib import Path

import pytest
import torch

from lorastudio import families
from lorastudio.jobs import caption_tokens
from lorastudio.training.inputs.caption_length import caption_token_counts
from slow_tokenizers import clip_without_tokenizer_json, t5_spiece_only

CAPTIONS = [
    "a red circle on a blue background",
    "",
    "cat " * 70,
    "Tiny, SHINY star; sks ohwx 0 1 2 ... ünïcode 🐈 \t tab",
    ", ".join(["sharp focus, high quality photo"] * 9),
]


def test_sdxls_clips_of_vocab_and_merges_are_counted_as_the_run_counts(
    tiny_model: Callable[[str], Path], tmp_path: Path
) -> None:
    """The run loads these files with transformers' CLIPTokenizer; the child builds the same
    pipeline with `tokenizers`: the counts are equal (the old code: "no tokenizer.json")."""
    family = families.get("sdxl")
    base = shutil.copytree(tiny_model("sdxl"), tmp_path / "sdxl-slow")
    for tok in ("tokenizer", "tokenizer_2"):
        clip_without_tokenizer_json(base / tok)
    encoders = family.load_text_encoders(str(base), None, torch.float32, torch.device("cpu"))
    engine = caption_token_counts(family.spec, encoders, CAPTIONS)
    assert caption_tokens.caption_counts(family.spec, base, CAPTIONS) == engine
    assert engine == caption_tokens.caption_counts(family.spec, tiny_model("sdxl"), CAPTIONS)  # as before


def test_a_t5_of_spiece_model_alone_is_counted_as_transformers_counts(
    tiny_model: Callable[[str], Path], tmp_path: Path
) -> None:
    """FLUX.1's tokenizer_2 as spiece.model alone: counted with sentencepiece, the same counts as
    transformers' T5Tokenizer of that model's pieces (its eos appended)."""
    from transformers import T5Tokenizer

    base = shutil.copytree(tiny_model("flux"), tmp_path / "flux-slow")
    pieces = t5_spiece_only(base / "tokenizer_2")
    reference = T5Tokenizer(vocab=pieces, extra_ids=0, eos_token="</s>", unk_token="<unk>", pad_token="<pad>")
    expected = [len(ids) for ids in reference(CAPTIONS, truncation=False)["input_ids"]]
    assert caption_tokens.caption_counts(families.get("flux").spec, base, CAPTIONS) == expected
    assert expected[2] > 70  # "cat " x 70: past a 64-token limit


@pytest.mark.parametrize(
    ("files", "says"),
    [
        (
            {"tokenizer.model": b"x"},
            "(tokenizer.model, tokenizer_config.json, tokenizer_class LlamaTokenizer)",
        ),
        ({"vocab.json": b"{}", "merges.txt": b""}, "tokenizer_class LlamaTokenizer"),
        ({"spiece.model": b"not a model"}, "cannot be read"),
    ],
    ids=["llama-model", "bpe-of-another-class", "bad-spiece"],
)
def test_other_slow_files_are_left_to_the_start_saying_what_is_there(
    files: dict[str, bytes], says: str, tiny_model: Callable[[str], Path], tmp_path: Path
) -> None:
    base = shutil.copytree(tiny_model("flux"), tmp_path / "flux-other")
    tok = base / "tokenizer_2"
    for old in tok.iterdir():
        old.unlink()
    klass = "T5Tokenizer" if "spiece.model" in files else "LlamaTokenizer"
    (tok / "tokenizer_config.json").write_text(f'{{"tokenizer_class": "{klass}"}}', encoding="utf-8")
    for name, data in files.items():
        (tok / name).write_bytes(data)
    with pytest.raises(caption_tokens.CannotCount, match="tokenizer_2/") as err:
        caption_tokens.caption_counts(families.get("flux").spec, base, CAPTIONS)
    assert says in str(err.value), err.value


def test_the_slow_counts_import_no_torch_nor_transformers(
    tiny_model: Callable[[str], Path], tmp_path: Path
) -> None:
    """The count's child (jobs/caption_count.py) reads the slow files with sentencepiece and
    tokenizers only: transformers' tokenizers would import torch (seconds, and its memory)."""
    import subprocess
    import sys

    t5 = shutil.copytree(tiny_model("flux"), tmp_path / "t5")
    t5_spiece_only(t5 / "tokenizer_2")
    clip = shutil.copytree(tiny_model("sdxl"), tmp_path / "clip")
    clip_without_tokenizer_json(clip / "tokenizer")
    code = (
        "import sys\n"
        "from pathlib import Path\n"
        "from lorastudio.jobs.caption_count import count\n"
        f"print(count(Path({str(t5)!r}), Path({str(t5)!r}), 'tokenizer_2', 'plain', ['a red circle']))\n"
        f"print(count(Path({str(clip)!r}), Path({str(clip)!r}), 'tokenizer', 'plain', ['a red circle']))\n"
        "print(sorted(m for m in ('torch', 'diffusers', 'transformers', 'peft') if m in sys.modules))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr[-2000:]
    t5_count, clip_count, heavy = out.stdout.strip().splitlines()
    assert int(t5_count.strip("[]")) > 1 and int(clip_count.strip("[]")) > 2
    assert heavy == "[]"
