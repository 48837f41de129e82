"""The preflight's caption counts kept while the tokenizer folder's files stay the same
(jobs/caption_count_cache.py): the same ask on unchanged files starts no second count child, and
any write, replacement or added file in the folder, other captions or a "cannot count" answer
start one (RELIABILITY 1930)."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

from lorastudio import families
from lorastudio.jobs import caption_count_cache, caption_tokens

SPEC = families.get("flux").spec  # a plain T5 count of tokenizer_2/tokenizer.json
CAPTIONS = ["a red circle on a blue background", "cat " * 70]


@pytest.fixture
def children(monkeypatch: pytest.MonkeyPatch) -> list[dict]:
    """The asks each real count child was started with."""
    started: list[dict] = []
    real = caption_tokens._run_child

    def counted(ask: dict):
        started.append(ask)
        return real(ask)

    monkeypatch.setattr(caption_tokens, "_run_child", counted)
    caption_count_cache.forget()
    yield started
    caption_count_cache.forget()


@pytest.fixture
def folder(tiny_model, tmp_path: Path) -> Path:
    """A copy of the tiny FLUX.1's tokenizer_2 folder (a pipeline folder of its own)."""
    base = tmp_path / "base"
    shutil.copytree(tiny_model("flux") / "tokenizer_2", base / "tokenizer_2")
    return base


def test_the_same_count_on_unchanged_files_starts_no_second_child(children, folder):
    first = caption_tokens.caption_counts(SPEC, folder, CAPTIONS)
    assert first[1] > first[0] > 0
    assert caption_tokens.caption_counts(SPEC, folder, CAPTIONS) == first
    assert len(children) == 1  # the old code started a child for every preflight
    assert caption_tokens.caption_counts(SPEC, folder, CAPTIONS[:1]) == first[:1]  # other captions
    assert len(children) == 2


def test_a_written_replaced_or_added_file_is_counted_again(children, folder):
    tokenizer = folder / "tokenizer_2" / "tokenizer.json"
    expected = caption_tokens.caption_counts(SPEC, folder, CAPTIONS)
    tokenizer.write_bytes(tokenizer.read_bytes())  # written in place (the same bytes)
    assert caption_tokens.caption_counts(SPEC, folder, CAPTIONS) == expected
    spare = tokenizer.with_name("spare.json")
    shutil.copyfile(tokenizer, spare)
    os.replace(spare, tokenizer)  # replaced by a rename
    assert caption_tokens.caption_counts(SPEC, folder, CAPTIONS) == expected
    (folder / "tokenizer_2" / "special_tokens_map.json").write_text("{}")  # a file added
    assert caption_tokens.caption_counts(SPEC, folder, CAPTIONS) == expected
    assert len(children) == 4
    assert caption_tokens.caption_counts(SPEC, folder, CAPTIONS) == expected
    assert len(children) == 4


def test_a_folder_it_cannot_count_is_asked_again(children, folder):
    (folder / "tokenizer_2" / "tokenizer.json").unlink()
    for _ in range(2):
        with pytest.raises(caption_tokens.CannotCount, match="tokenizer_2/"):
            caption_tokens.caption_counts(SPEC, folder, CAPTIONS)
    assert len(children) == 2


def test_a_folder_of_too_many_entries_is_never_kept(children, folder, monkeypatch):
    monkeypatch.setattr(caption_count_cache, "MAX_ENTRIES", 1)  # tokenizer_2 holds two files
    first = caption_tokens.caption_counts(SPEC, folder, CAPTIONS)
    assert caption_tokens.caption_counts(SPEC, folder, CAPTIONS) == first
    assert len(children) == 2


def test_a_dataset_of_over_a_million_characters_of_captions_is_kept_by_digest(children, folder):
    """2,000 captions of ~600 characters (1.2 M in all): kept like a small dataset's (the old
    cache kept nothing past 1,000,000 characters, so a large dataset's every preflight started a
    count child), under a digest of the texts: what is kept holds ~4 bytes a caption, not the
    texts (RELIABILITY 2110)."""
    captions = [f"photo {i} " + "a cat on a mat, " * 37 for i in range(2_000)]
    assert sum(map(len, captions)) > 1_000_000
    first = caption_tokens.caption_counts(SPEC, folder, captions)
    assert caption_tokens.caption_counts(SPEC, folder, captions) == first
    assert len(children) == 1
    ((key, (_, counts)),) = caption_count_cache._kept.items()
    assert sum(len(str(part)) for part in key) < 1_000 and counts.itemsize * len(counts) == 4 * 2_000
    changed = [*captions[:-1], captions[-1] + "!"]  # one character of one caption: counted again
    caption_tokens.caption_counts(SPEC, folder, changed)
    assert len(children) == 2


def test_the_count_encodes_a_chunk_at_a_time_and_its_time_grows_with_the_texts(folder, monkeypatch):
    """The child's count (jobs/caption_count.count, run here in process on the tiny FLUX.1's T5
    tokenizer) hands encode_batch COUNT_CHUNK texts at most, so the Encodings it holds are one
    chunk's whatever the dataset's size (50,000 captions at once held ~1 GB), with the counts of
    one whole batch; and the child's wall-clock limit grows with the texts' characters (a fixed
    20 s ran out at 50,000 long captions on a loaded host, every preflight: RELIABILITY 2112)."""
    from lorastudio.jobs import caption_count

    real = caption_count._tokenizer
    batches: list[int] = []

    def tokenizer(tok_dir: Path, root: Path):
        tok = real(tok_dir, root)

        class Counted:  # the tokenizer, its encode_batch's batch sizes recorded
            def encode_batch(self, texts, **options):
                batches.append(len(texts))
                return tok.encode_batch(texts, **options)

        return Counted()

    texts = [f"caption {i} " + "word " * (i % 50) for i in range(250)]
    whole = [len(e.ids) for e in real(folder / "tokenizer_2", folder).encode_batch(texts)]
    monkeypatch.setattr(caption_count, "_tokenizer", tokenizer)
    monkeypatch.setattr(caption_count, "COUNT_CHUNK", 64)
    assert caption_count.count(folder, folder, "tokenizer_2", "plain", texts) == whole
    assert batches == [64, 64, 64, 58]  # the old code: [250]
    assert caption_tokens.count_timeout_s(["x" * 100]) < caption_tokens.COUNT_TIMEOUT_S + 1
    assert caption_tokens.count_timeout_s(["x" * 200] * 50_000) >= 2 * caption_tokens.COUNT_TIMEOUT_S


@pytest.mark.slow  # ~15 s; the default tests above cover the paths (the digest, the chunks, the limit)
def test_fifty_thousand_long_captions_are_counted_in_bounded_memory_and_kept(children, folder):
    """50,000 captions of ~200 characters (10 M characters): the count (jobs/caption_count.count,
    in a process of its own whose peak RSS is read) holds a chunk's Encodings, not all of them
    (962 MB before 2112); the child answers within its limit, and the same ask is then answered
    without a child (2110)."""
    import json
    import subprocess
    import sys

    captions = [
        f"photo {i} of a person standing in a field, golden hour, detailed, " * 3 for i in range(50_000)
    ]
    code = (
        "import json, sys\n"
        "from pathlib import Path\n"
        "from lorastudio.jobs.caption_count import count\n"
        "texts = json.loads(sys.stdin.read())\n"
        "counts = count(Path(sys.argv[1]), Path(sys.argv[1]), 'tokenizer_2', 'plain', texts)\n"
        "hwm = [l for l in open('/proc/self/status') if l.startswith('VmHWM:')][0].split()[1]\n"
        "print(len(counts), hwm)\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", code, str(folder)], input=json.dumps(captions), capture_output=True, text=True
    )
    assert done.returncode == 0, done.stderr[-2000:]
    counted, peak_kib = map(int, done.stdout.split())
    assert counted == 50_000 and peak_kib < 300 * 1024  # the old count: ~960 MB
    first = caption_tokens.caption_counts(SPEC, folder, captions)
    assert len(first) == 50_000 and min(first) > 40
    assert caption_tokens.caption_counts(SPEC, folder, captions) == first
    assert len(children) == 1
