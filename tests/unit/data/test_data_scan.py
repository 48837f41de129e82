"""scan_dataset: discovery, refusals (each listing its files, nothing written), EXIF, fingerprint."""

from __future__ import annotations

import numpy as np
import pytest
from PIL import Image

from lorastudio.data import make_buckets, nearest_bucket, scan_dataset
from lorastudio.data.dataset_detail import dataset_detail
from lorastudio.data.image_edits import write_caption
from lorastudio.errors import DatasetError


def _scan(root, **kwargs):
    kwargs.setdefault("default_caption", "a photo")
    return scan_dataset(root, resolution=64, multiple=16, **kwargs)


def test_discovery_sorted_case_insensitive_not_recursive(tmp_path, make_image):
    make_image(tmp_path / "b.PNG")
    make_image(tmp_path / "a.JpG")
    make_image(tmp_path / "c.webp")
    make_image(tmp_path / "d.jpeg")
    make_image(tmp_path / ".hidden.png")
    (tmp_path / "notes.md").write_text("hello", encoding="utf-8")
    (tmp_path / "orphan.txt").write_text("no image", encoding="utf-8")
    (tmp_path / "sub").mkdir()
    make_image(tmp_path / "sub" / "nested.png")

    scan = _scan(tmp_path)

    assert [it.path.name for it in scan.items] == ["a.JpG", "b.PNG", "c.webp", "d.jpeg"]
    dropped = dict(scan.dropped)
    assert set(dropped) == {"notes.md", "orphan.txt", "sub"}
    assert "not an image" in dropped["notes.md"]
    assert "recursive" in dropped["sub"]
    assert scan.root == tmp_path


def test_kohya_caption_files_are_named_for_what_they_are(tmp_path, make_image):
    """`.caption` sidecars (kohya's caption_extension) are not read: the preflight says so, and
    which caption the image trains on instead, not "not an image"."""
    for stem in ("alone", "both", "none"):
        make_image(tmp_path / f"{stem}.png")
    (tmp_path / "alone.caption").write_text("kohya caption", encoding="utf-8")
    (tmp_path / "both.caption").write_text("kohya caption", encoding="utf-8")
    (tmp_path / "both.txt").write_text("the txt caption", encoding="utf-8")
    (tmp_path / "ghost.caption").write_text("no image", encoding="utf-8")

    with pytest.raises(
        DatasetError
    ) as err:  # alone.png would train on the default caption (RELIABILITY 1002)
        _scan(tmp_path)
    assert err.value.problems == [
        "alone.caption: a .caption file: only <image name>.txt captions are read (rename it alone.txt to use "
        "it); alone.png has no caption of its own (or delete alone.caption to train without it)"
    ]
    (tmp_path / "alone.txt").write_text("alone's own", encoding="utf-8")
    scan = _scan(tmp_path)

    dropped = dict(scan.dropped)
    assert (
        dropped["alone.caption"]
        == "a .caption file: only <image name>.txt captions are read; alone.txt is used"
    )
    assert (
        dropped["both.caption"]
        == "a .caption file: only <image name>.txt captions are read; both.txt is used"
    )
    assert dropped["ghost.caption"] == "caption file with no image of the same name"
    assert {it.path.name: it.caption for it in scan.items}["both.png"] == "the txt caption"


def test_items_carry_size_and_nearest_bucket(tmp_path, make_image):
    make_image(tmp_path / "wide.png", (120, 40))
    make_image(tmp_path / "tall.png", (30, 90))
    scan = _scan(tmp_path)
    buckets = make_buckets(64, 16)
    by_name = {it.path.name: it for it in scan.items}
    assert (by_name["wide.png"].width, by_name["wide.png"].height) == (120, 40)
    assert by_name["wide.png"].bucket == nearest_bucket(120, 40, buckets)
    assert by_name["wide.png"].bucket[0] > by_name["wide.png"].bucket[1]
    assert by_name["tall.png"].bucket[0] < by_name["tall.png"].bucket[1]
    assert sum(scan.bucket_histogram().values()) == 2
    assert scan.bucket_histogram() == {
        f"{w}x{h}": 1 for (w, h) in sorted({by_name["wide.png"].bucket, by_name["tall.png"].bucket})
    }


def test_square_only_puts_every_image_in_the_square_bucket(tmp_path, make_image):
    make_image(tmp_path / "wide.png", (120, 40))
    make_image(tmp_path / "tall.png", (30, 90))
    scan = _scan(tmp_path, aspect_buckets=False)
    assert {it.bucket for it in scan.items} == {(64, 64)}
    assert scan.bucket_histogram() == {"64x64": 2}


def test_exif_rotated_jpeg_reports_transposed_size(tmp_path, make_image):
    make_image(tmp_path / "rot.jpg", (80, 40), orientation=6)
    make_image(tmp_path / "plain.jpg", (80, 40), orientation=1)
    by_name = {it.path.name: it for it in _scan(tmp_path).items}
    assert (by_name["rot.jpg"].width, by_name["rot.jpg"].height) == (40, 80)
    assert (by_name["plain.jpg"].width, by_name["plain.jpg"].height) == (80, 40)
    assert by_name["rot.jpg"].bucket[1] > by_name["rot.jpg"].bucket[0]


@pytest.mark.parametrize("kind", ["missing", "file"])
def test_missing_folder_or_file_refused(tmp_path, kind):
    target = tmp_path / "nope"
    if kind == "file":
        target.write_text("x", encoding="utf-8")
    with pytest.raises(DatasetError) as info:
        _scan(target)
    assert str(target) in info.value.problems[0]
    assert sorted(p.name for p in tmp_path.iterdir()) == ([] if kind == "missing" else ["nope"])


def test_empty_folder_refused(tmp_path, dir_snapshot):
    (tmp_path / "readme.md").write_text("no images here", encoding="utf-8")
    before = dir_snapshot(tmp_path)
    with pytest.raises(DatasetError, match="no images"):
        _scan(tmp_path)
    assert dir_snapshot(tmp_path) == before


def test_corrupt_and_oversized_images_listed(tmp_path, make_image, header_only_png, dir_snapshot):
    make_image(tmp_path / "good.png", (32, 32))
    (tmp_path / "garbage.png").write_bytes(b"this is not an image at all")
    truncated = make_image(tmp_path / "source.jpg", (40, 40)).read_bytes()
    (tmp_path / "source.jpg").unlink()
    (tmp_path / "truncated.jpg").write_bytes(truncated[: len(truncated) // 2])
    (tmp_path / "fake.webp").write_bytes(b"%PDF-1.4 not a webp")
    make_image(tmp_path / "big.png", (60, 50))
    header_only_png(tmp_path / "bomb.png", 100_000, 100_000)
    before = dir_snapshot(tmp_path)

    with pytest.raises(DatasetError) as info:
        _scan(tmp_path, max_pixels=2_000)

    problems = {p.split(":")[0]: p for p in info.value.problems}
    assert set(problems) == {"garbage.png", "truncated.jpg", "fake.webp", "big.png", "bomb.png"}
    assert "corrupt" in problems["garbage.png"]
    assert "corrupt" in problems["truncated.jpg"]
    assert "oversized" in problems["big.png"] and "60x50" in problems["big.png"]
    assert "oversized" in problems["bomb.png"]
    assert dir_snapshot(tmp_path) == before


def test_bomb_refused_by_header_even_with_a_huge_limit(tmp_path, header_only_png):
    header_only_png(tmp_path / "bomb.png", 100_000, 100_000)
    with pytest.raises(DatasetError) as info:
        _scan(tmp_path, max_pixels=10**12)
    assert info.value.problems[0].startswith("bomb.png: oversized")


def test_skip_bad_images_records_them_as_dropped(tmp_path, make_image):
    make_image(tmp_path / "good.png", (32, 32))
    (tmp_path / "garbage.png").write_bytes(b"nope")
    make_image(tmp_path / "big.png", (60, 50))
    scan = _scan(tmp_path, max_pixels=2_000, skip_bad_images=True)
    assert [it.path.name for it in scan.items] == ["good.png"]
    dropped = dict(scan.dropped)
    assert "corrupt" in dropped["garbage.png"]
    assert "oversized" in dropped["big.png"]


@pytest.mark.parametrize(
    ("resolution", "multiple", "fragment"),
    [(100, 16, "not a multiple of 16"), (16, 16, "smaller than 32"), (48, 32, "not a multiple of 32")],
)
def test_unsupported_resolution_refused(tmp_path, make_image, resolution, multiple, fragment):
    make_image(tmp_path / "a.png")
    with pytest.raises(DatasetError) as info:
        scan_dataset(tmp_path, resolution=resolution, multiple=multiple, default_caption="x")
    assert any(fragment in p for p in info.value.problems)


def test_all_problems_reported_together(tmp_path, make_image):
    make_image(tmp_path / "nocap.png")
    (tmp_path / "broken.png").write_bytes(b"\x89PNG\r\n\x1a\nbroken")
    with pytest.raises(DatasetError) as info:
        scan_dataset(tmp_path, resolution=64, multiple=16)
    assert sorted(p.split(":")[0] for p in info.value.problems) == ["broken.png", "nocap.png"]


def test_rgba_palette_and_16bit_images_are_accepted(tmp_path, make_image):
    make_image(tmp_path / "rgba.png", mode="RGBA")
    make_image(tmp_path / "gray.png", mode="L")
    Image.fromarray(np.full((20, 30), 40000, dtype=np.uint16)).save(tmp_path / "deep.png")
    Image.new("P", (30, 20)).save(tmp_path / "pal.png", transparency=0)
    names = [it.path.name for it in _scan(tmp_path).items]
    assert names == ["deep.png", "gray.png", "pal.png", "rgba.png"]


def test_fingerprint_tracks_bytes_and_captions(tmp_path, make_image):
    make_image(tmp_path / "a.png", seed=1)
    make_image(tmp_path / "b.png", seed=2)
    (tmp_path / "a.txt").write_text("first caption", encoding="utf-8")
    base = _scan(tmp_path).fingerprint
    assert _scan(tmp_path).fingerprint == base
    assert len(base) == 64

    assert _scan(tmp_path, trigger_word="sks").fingerprint != base

    (tmp_path / "a.txt").write_text("first caption, edited", encoding="utf-8")
    edited_caption = _scan(tmp_path).fingerprint
    assert edited_caption != base
    (tmp_path / "a.txt").write_text("first caption", encoding="utf-8")
    assert _scan(tmp_path).fingerprint == base

    data = bytearray((tmp_path / "b.png").read_bytes())
    img = Image.open(tmp_path / "b.png")
    arr = np.array(img)
    arr[0, 0, 0] ^= 1
    Image.fromarray(arr).save(tmp_path / "b.png")
    assert (tmp_path / "b.png").read_bytes() != bytes(data)
    assert _scan(tmp_path).fingerprint not in (base, edited_caption)


def test_an_images_caption_files_found_alone_are_those_the_listing_gives(tmp_path, make_image):
    """An edit finds an image's caption files without listing the folder (discovery.caption_files_of);
    they are the listing's own (any case of .txt, sorted, the first read), links and folders left out."""
    from lorastudio.data.discovery import caption_files_of, discover

    for stem in ("a", "b", "c"):
        make_image(tmp_path / f"{stem}.png")
    for name in ("a.txt", "a.TXT", "a.tXt", "b.Txt", "c.caption"):
        (tmp_path / name).write_text(name)
    (tmp_path / "b.txt").symlink_to(tmp_path / "b.Txt")
    (tmp_path / "c.txt").mkdir()
    listed = discover(tmp_path).caption_files
    for stem in ("a", "b", "c"):
        assert caption_files_of(tmp_path / f"{stem}.png") == listed.get(stem, ())
    assert [p.name for p in listed["a"]] == ["a.TXT", "a.tXt", "a.txt"]
    (tmp_path / "c.caption").unlink()  # else refused: c.png would train without it (RELIABILITY 1002)
    assert _scan(tmp_path).items[0].caption == "a.TXT"


def test_a_metadata_row_that_a_caption_file_overrides_is_named(tmp_path, make_image):
    """RELIABILITY 1731: a.txt and a's metadata.jsonl row holding two captions trained the .txt's
    without a word; the unused row is now listed with the reason (a row that agrees is not)."""
    import json

    for stem in ("a", "b", "c"):
        make_image(tmp_path / f"{stem}.png")
    (tmp_path / "a.txt").write_text("from the txt", encoding="utf-8")
    (tmp_path / "b.txt").write_text("same text\n", encoding="utf-8")
    rows = [{"file_name": "a.png", "text": "from the row"}, {"file_name": "b.png", "text": "same text"}]
    rows.append({"file_name": "c.png", "text": "only the row"})
    (tmp_path / "metadata.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")

    scan = _scan(tmp_path)

    assert [(it.caption, it.caption_source) for it in scan.items] == [
        ("from the txt", "txt"),
        ("same text", "txt"),
        ("only the row", "metadata"),
    ]
    assert [(name, why.split(":")[0]) for name, why in scan.dropped] == [
        ("metadata.jsonl", "the row of a.png only")
    ]
    assert "a.txt holds another caption" in scan.dropped[0][1]
    listed = dataset_detail(tmp_path, 0, None)  # the Datasets page says the same
    assert [d for d in listed["dropped"] if d["file"] == "metadata.jsonl"] == [
        {"file": "metadata.jsonl", "reason": scan.dropped[0][1]}
    ]
    assert [f["caption"] for f in listed["files"]] == ["from the txt", "same text", "only the row"]


def test_a_trigger_placeholder_spelt_otherwise_is_refused_naming_it(tmp_path, make_image):
    """RELIABILITY 1733: "{trigger} on a beach" trained as that text ("sks, {trigger} on a
    beach"): only [trigger] is replaced. Other spellings, and kohya's "|||", are now refused,
    each image named."""
    captions = {"a": "{trigger} on a beach", "b": "<Trigger> at home", "c": "[trigger] ok", "d": "x ||| y, z"}
    for stem, caption in captions.items():
        make_image(tmp_path / f"{stem}.png")
        (tmp_path / f"{stem}.txt").write_text(caption, encoding="utf-8")

    with pytest.raises(DatasetError) as caught:
        _scan(tmp_path, trigger_word="sks")

    assert [p.split(",")[0] for p in caught.value.problems] == [
        "a.png: the caption holds {trigger}",
        "b.png: the caption holds <Trigger>",
        "d.png: the caption holds |||",  # kohya's keep_tokens_separator
    ]
    with pytest.raises(DatasetError, match=r"c.png: the caption holds \{trigger\}, which is not replaced"):
        write_caption(tmp_path, "c.png", "{trigger} again")  # the Datasets page's edit refuses it too
    for stem in "abd":
        (tmp_path / f"{stem}.txt").unlink()
    assert [it.caption for it in _scan(tmp_path, trigger_word="sks").items] == [
        "sks, a photo",
        "sks, a photo",
        "sks ok",
        "sks, a photo",
    ]
