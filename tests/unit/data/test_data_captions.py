"""Caption precedence, trigger words, sidecar and metadata.jsonl parsing, via scan_dataset."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from lorastudio.data import apply_trigger, scan_dataset
from lorastudio.errors import DatasetError


def _scan(root: Path, **kwargs):
    return scan_dataset(root, resolution=64, multiple=16, **kwargs)


def _by_name(scan) -> dict[str, tuple[str, str]]:
    return {it.path.name: (it.caption, it.caption_source) for it in scan.items}


def test_precedence_txt_over_metadata_over_default(tmp_path, make_image):
    for name in ("a.png", "b.png", "c.png"):
        make_image(tmp_path / name)
    (tmp_path / "a.txt").write_text("  caption from txt \n", encoding="utf-8")
    rows = [{"file_name": "a.png", "text": "meta a"}, {"file_name": "b.png", "text": "meta b"}]
    (tmp_path / "metadata.jsonl").write_text("\n".join(json.dumps(r) for r in rows), encoding="utf-8")

    got = _by_name(_scan(tmp_path, default_caption="instance prompt"))

    assert got == {
        "a.png": ("caption from txt", "txt"),
        "b.png": ("meta b", "metadata"),
        "c.png": ("instance prompt", "default"),
    }


def test_trigger_alone_when_nothing_else_and_prepended_once(tmp_path, make_image):
    for name in ("a.png", "b.png", "c.png", "d.png"):
        make_image(tmp_path / name)
    (tmp_path / "a.txt").write_text("a red car", encoding="utf-8")
    (tmp_path / "b.txt").write_text("sks, already tagged", encoding="utf-8")
    (tmp_path / "c.txt").write_text("sksdog is another word", encoding="utf-8")

    got = _by_name(_scan(tmp_path, trigger_word=" sks "))

    assert got == {
        "a.png": ("sks, a red car", "txt"),
        "b.png": ("sks, already tagged", "txt"),
        "c.png": ("sks, sksdog is another word", "txt"),
        "d.png": ("sks", "trigger"),
    }


def test_default_caption_gets_trigger(tmp_path, make_image):
    make_image(tmp_path / "x.jpg")
    got = _by_name(_scan(tmp_path, trigger_word="ohwx", default_caption="a photo of a man"))
    assert got == {"x.jpg": ("ohwx, a photo of a man", "default")}


def test_empty_sidecar_falls_through_and_caption_key_accepted(tmp_path, make_image):
    make_image(tmp_path / "a.png")
    (tmp_path / "a.txt").write_text(" \n\t", encoding="utf-8")
    (tmp_path / "metadata.jsonl").write_text(
        json.dumps({"file_name": "./a.png", "caption": "from the caption key"}) + "\n\n", encoding="utf-8"
    )
    assert _by_name(_scan(tmp_path)) == {"a.png": ("from the caption key", "metadata")}


def test_sidecar_utf8_with_bom_is_read(tmp_path, make_image):
    make_image(tmp_path / "a.png")
    (tmp_path / "a.txt").write_bytes("\ufeffcafé à Zürich".encode())
    assert _by_name(_scan(tmp_path)) == {"a.png": ("café à Zürich", "txt")}


def test_windows_and_mac_line_ends_read_as_the_caption_saved_elsewhere(tmp_path, make_image):
    """RELIABILITY 551: a multi-line caption saved on Windows (CR LF) or classic Mac (CR) trained
    with its CRs, which no prompt can hold (text_rules refuses CR) and byte-level tokenizers read
    as tokens of their own: the same caption saved on Linux trained otherwise. Line ends are LF
    now, in a .txt (a kohya `.caption` too: the same reader), a UTF-16 one and metadata.jsonl."""
    from lorastudio.data.captions import read_sidecar

    for name in ("a.png", "b.png", "c.png", "d.png", "e.png"):
        make_image(tmp_path / name)
    (tmp_path / "a.txt").write_bytes(b"red, blue\r\ngreen, yellow\r\n")
    (tmp_path / "b.txt").write_bytes(b"red, blue\rgreen, yellow\r")
    (tmp_path / "c.txt").write_bytes(b"red, blue\ngreen, yellow\n")
    (tmp_path / "d.txt").write_bytes("\ufeffred, blue\r\ngreen, yellow".encode("utf-16"))
    (tmp_path / "metadata.jsonl").write_text(
        json.dumps({"file_name": "e.png", "text": "red, blue\r\ngreen, yellow"})
    )
    captions = {it.path.name: it.caption for it in _scan(tmp_path).items}
    assert set(captions.values()) == {"red, blue\ngreen, yellow"}, captions
    assert read_sidecar(tmp_path / "a.txt") == "red, blue\ngreen, yellow"


@pytest.mark.parametrize("encoding", ["utf-16", "utf-16-le", "utf-16-be"])
def test_sidecar_utf16_with_its_byte_order_mark_is_read(tmp_path, make_image, encoding):
    """Windows Notepad's "Unicode" saves UTF-16 with a byte order mark: unambiguous, so read."""
    make_image(tmp_path / "a.png")
    bom = {"utf-16-le": "\ufeff", "utf-16-be": "\ufeff"}.get(encoding, "\ufeff")  # utf-16: a 2nd mark
    (tmp_path / "a.txt").write_bytes(f"{bom}une photo de sks, café ☕\r\n".encode(encoding))
    scan = scan_dataset(tmp_path, resolution=64, multiple=16)
    assert scan.items[0].caption == "une photo de sks, café ☕"


def test_a_utf16_sidecar_without_a_byte_order_mark_is_refused_saying_so(tmp_path, make_image):
    make_image(tmp_path / "a.png")
    (tmp_path / "a.txt").write_bytes("a photo".encode("utf-16-le"))  # no BOM: NULs in "UTF-8"
    with pytest.raises(DatasetError) as err:
        scan_dataset(tmp_path, resolution=64, multiple=16)
    assert err.value.problems == [
        "a.txt: not valid UTF-8 text (NUL at byte 1: UTF-16 without its byte order mark?); save it as UTF-8"
    ]


@pytest.mark.parametrize("encoding", ["utf-32", "utf-32-be"])
def test_a_utf32_sidecar_is_refused_as_utf32(tmp_path, make_image, encoding):
    """A UTF-32 file's mark (FF FE 00 00) starts with UTF-16's: it was read as UTF-16 and refused
    as "UTF-16 without its byte order mark?", the wrong guess."""
    make_image(tmp_path / "a.png")
    text = "a photo" if encoding == "utf-32" else "\ufeffa photo"  # utf-32 writes its own mark
    (tmp_path / "a.txt").write_bytes(text.encode(encoding))
    with pytest.raises(DatasetError) as err:
        scan_dataset(tmp_path, resolution=64, multiple=16)
    assert err.value.problems == [
        "a.txt: UTF-32 text (by its byte order mark), which is not read; save it as UTF-8"
    ]


def test_a_metadata_caption_holding_a_nul_is_a_problem_naming_its_line(tmp_path, make_image):
    make_image(tmp_path / "a.png")
    (tmp_path / "metadata.jsonl").write_text(json.dumps({"file_name": "a.png", "text": "a\u0000b"}) + "\n")
    with pytest.raises(DatasetError) as err:
        scan_dataset(tmp_path, resolution=64, multiple=16)
    assert err.value.problems[0] == 'metadata.jsonl line 1: "text" of a.png holds a NUL character'


def test_missing_captions_are_listed(tmp_path, make_image, dir_snapshot):
    for name in ("a.png", "b.png", "c.png"):
        make_image(tmp_path / name)
    (tmp_path / "b.txt").write_text("has one", encoding="utf-8")
    before = dir_snapshot(tmp_path)

    with pytest.raises(DatasetError) as info:
        _scan(tmp_path)

    named = [p.split(":")[0] for p in info.value.problems]
    assert named == ["a.png", "c.png"]
    assert all("no caption" in p for p in info.value.problems)
    assert dir_snapshot(tmp_path) == before


def test_bad_metadata_lines_and_non_utf8_sidecar_are_listed(tmp_path, make_image):
    for name in ("a.png", "b.png"):
        make_image(tmp_path / name)
    (tmp_path / "a.txt").write_bytes(b"caf\xe9")  # latin-1, not UTF-8
    lines = [
        "{not json",
        json.dumps(["a list"]),
        json.dumps({"text": "no file name"}),
        json.dumps({"file_name": "b.png"}),
        json.dumps({"file_name": "b.png", "text": 3}),
        json.dumps({"file_name": "b.png", "text": "ok"}),
        json.dumps({"file_name": "b.png", "text": "twice"}),
    ]
    (tmp_path / "metadata.jsonl").write_text("\n".join(lines), encoding="utf-8")

    with pytest.raises(DatasetError) as info:
        _scan(tmp_path, default_caption="fallback")

    problems = info.value.problems
    for lineno in (1, 2, 3, 4, 5, 7):
        assert any(p.startswith(f"metadata.jsonl line {lineno}:") for p in problems), problems
    assert not any(p.startswith("metadata.jsonl line 6:") for p in problems)
    assert any(p.startswith("a.txt:") and "UTF-8" in p for p in problems)


def test_apply_trigger_rules():
    assert apply_trigger("a dog", None) == "a dog"
    assert apply_trigger("a dog", "  ") == "a dog"
    assert apply_trigger("a dog", "sks") == "sks, a dog"
    assert apply_trigger("sks a dog", "sks") == "sks a dog"
    assert apply_trigger("sks", "sks") == "sks"
    assert apply_trigger("sks_dog", "sks") == "sks, sks_dog"
    assert apply_trigger("", "sks") == "sks"
    assert apply_trigger(apply_trigger("a dog", "sks"), "sks") == "sks, a dog"


def test_metadata_lines_and_captions_over_the_caption_cap_are_problems_naming_the_line(tmp_path, make_image):
    """A caption in metadata.jsonl gets the cap of a .txt caption (64 KB); a line longer than
    the line cap is skipped in bounded pieces, never held whole."""
    import tracemalloc

    from lorastudio.data.captions import MAX_CAPTION_BYTES, MAX_METADATA_LINE_BYTES, read_metadata

    for name in ("a.png", "b.png", "c.png"):
        make_image(tmp_path / name)
    huge = '{"file_name": "b.png", "text": "' + "x" * (20 * 2**20) + '"}'  # a 20 MB line
    rows = [
        json.dumps({"file_name": "a.png", "text": "fine"}),
        json.dumps({"file_name": "c.png", "text": "é" * (MAX_CAPTION_BYTES // 2 + 1)}),  # 64 KB + 2 bytes
        huge,
    ]
    (tmp_path / "metadata.jsonl").write_text("\n".join(rows) + "\n", encoding="utf-8")

    tracemalloc.start()
    table = read_metadata(tmp_path / "metadata.jsonl")
    _, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    assert peak < 4 * MAX_METADATA_LINE_BYTES, f"{peak:,} bytes held to read a 20 MB line"
    assert table.captions == {"a.png": "fine"}
    assert table.problems == [
        "metadata.jsonl line 2: caption of c.png larger than 64 KB (shorten it)",
        f"metadata.jsonl line 3: longer than {MAX_METADATA_LINE_BYTES // 1024} KB",
    ]
    with pytest.raises(DatasetError) as err:
        _scan(tmp_path)
    assert "metadata.jsonl line 3: longer than 512 KB" in err.value.problems


def test_an_oversized_metadata_file_or_sidecar_is_refused_unread(tmp_path, make_image, monkeypatch):
    from lorastudio.data import captions

    make_image(tmp_path / "a.png")
    (tmp_path / "metadata.jsonl").write_text(json.dumps({"file_name": "a.png", "text": "t"}) * 200)
    monkeypatch.setattr(captions, "MAX_METADATA_BYTES", 1000)
    with pytest.raises(DatasetError) as err:
        _scan(tmp_path)
    assert err.value.problems == ["metadata.jsonl: 7,000 bytes, larger than the 0 MB allowed"]

    (tmp_path / "metadata.jsonl").unlink()
    (tmp_path / "a.txt").write_text("w" * (captions.MAX_CAPTION_BYTES + 1))
    with pytest.raises(DatasetError) as err:
        _scan(tmp_path)
    assert err.value.problems == ["a.txt: caption larger than 64 KB (shorten it)"]
    (tmp_path / "a.txt").write_text("\ufeff" + "w" * captions.MAX_CAPTION_BYTES + "\n\n")
    assert _by_name(_scan(tmp_path))["a.png"][1] == "txt"  # exactly the cap, with a BOM: read


def test_a_metadata_upload_of_70000_bad_lines_is_one_short_answer(tmp_path, make_image):
    """Found by tests/reliability/test_bad_input.py's caption fuzzing in CI: 70,000 bad lines made
    70,000 problems, deduplicated pairwise (minutes of CPU in the request). The first lines are
    listed, the rest counted, and the upload answers at once."""
    import io

    from lorastudio.data.captions import MAX_LISTED_LINE_PROBLEMS
    from lorastudio.data.uploads import UploadBatch

    root = tmp_path / "datasets"
    (root / "ds").mkdir(parents=True)
    lines = b"x\n" * 70_000  # each line is not JSON
    with UploadBatch(root, root / "ds", 10**6) as batch:
        batch.add("metadata.jsonl", io.BytesIO(lines))
        with pytest.raises(DatasetError) as caught:
            batch.commit()
    problems = caught.value.problems
    assert len(problems) == MAX_LISTED_LINE_PROBLEMS + 1, problems[-3:]
    assert "metadata.jsonl line 1:" in problems[0]
    assert problems[-1].endswith(f"and {70_000 - MAX_LISTED_LINE_PROBLEMS:,} more bad lines")
    assert not any((root / "ds").iterdir())  # nothing stored
