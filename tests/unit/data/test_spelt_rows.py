"""A metadata.jsonl row naming its image with the accents composed otherwise (RELIABILITY 2200):
an older lorastudio's upload stored `café.png` composed (NFC) with its row's `café.png` as
written, decomposed (NFD: e + U+0301, a folder from macOS). The Datasets list called it usable
while every run of it was refused since fix 2105. Now the row that matches no file byte for byte
but exactly one file once both are composed is that file's row (its caption trains, a note names
the row), in the scan, the listing, the dataset's page, the caption job's plan and the caption
writers alike; a row two files or two rows could claim is still refused."""

from __future__ import annotations

import json
import unicodedata
from pathlib import Path

import pytest
from tests.unit.data.conftest import write_image

from lorastudio.captioning.plan import plan_captions
from lorastudio.data import scan_dataset
from lorastudio.data.dataset_detail import dataset_detail
from lorastudio.data.image_edits import write_caption
from lorastudio.data.listing import dataset_summary
from lorastudio.data.metadata_write import set_metadata_captions
from lorastudio.data.row_names import match_rows, spelt_resume_note
from lorastudio.errors import DatasetError

NFC, NFD = (unicodedata.normalize(form, "café") for form in ("NFC", "NFD"))


def _folder(root: Path, images: list[str], rows: list[tuple[str, str]]) -> Path:
    root.mkdir()
    for seed, name in enumerate(images):
        write_image(root / name, seed=seed)
    (root / "metadata.jsonl").write_text(
        "".join(json.dumps({"file_name": n, "text": t}, ensure_ascii=False) + "\n" for n, t in rows),
        encoding="utf-8",
    )
    return root


@pytest.mark.parametrize(("image", "row"), [(NFC, NFD), (NFD, NFC)])
def test_a_row_spelt_otherwise_captions_its_image_in_the_scan_the_list_and_the_page(
    tmp_path: Path, image: str, row: str
) -> None:
    """Before: the scan refused the run ("row ...: no such file here ... compose their accents
    differently"), the list counted 1 of 2 captioned and called it usable, the page showed the
    image uncaptioned and the caption job would caption it again."""
    ds = _folder(
        tmp_path / "ds", [f"{image}.png", "b.png"], [(f"{row}.png", "an accented cup"), ("b.png", "b")]
    )
    scan = scan_dataset(ds, resolution=64, multiple=16, trigger_word="sks")
    assert {it.path.name: (it.caption, it.caption_source) for it in scan.items} == {
        f"{image}.png": ("sks, an accented cup", "metadata"),
        "b.png": ("sks, b", "metadata"),
    }
    (note,) = [why for name, why in scan.dropped if name == "metadata.jsonl"]
    assert note.startswith(f"the row {ascii(row + '.png')} is read as {image}.png's"), note
    assert ascii(image + ".png") in note
    summary = dataset_summary(ds)
    assert (summary["images"], summary["captions"], summary["usable"]) == (2, 2, True)
    detail = dataset_detail(ds)
    assert {f["file"]: f["caption"] for f in detail["files"]}[f"{image}.png"] == "an accented cup"
    assert {"file": "metadata.jsonl", "reason": note} in detail["dropped"]
    assert plan_captions(ds, overwrite=False).todo == []  # captioned: not asked of a model again
    assert spelt_resume_note(scan.dropped).startswith(f" (metadata.jsonl row(s) {ascii(row + '.png')} ")


def test_a_caption_written_for_the_image_goes_into_its_row_spelt_otherwise(tmp_path: Path) -> None:
    """Before: the caption job's metadata store appended a second row for café.png beside the old
    one, and a .txt written on the page left the row's old text (a second caption)."""
    ds = _folder(tmp_path / "ds", [f"{NFC}.png"], [(f"{NFD}.png", "old")])
    set_metadata_captions(ds / "metadata.jsonl", {f"{NFC}.png": "new"}, append_missing=True)
    lines = (ds / "metadata.jsonl").read_text(encoding="utf-8").splitlines()
    assert [json.loads(line) for line in lines] == [{"file_name": f"{NFC}.png", "text": "new"}]
    write_caption(ds, f"{NFC}.png", "by hand")  # the .txt wins; its row follows it (1735)
    scan = scan_dataset(ds, resolution=64, multiple=16)
    assert [it.caption for it in scan.items] == ["by hand"]
    assert not [why for _, why in scan.dropped if "another caption" in why]
    cleared = _folder(tmp_path / "cleared", [f"{NFC}.png"], [(f"{NFD}.png", "old")])
    write_caption(cleared, f"{NFC}.png", "", expected="old")  # the page's expected: the row's (was a 409)
    assert (cleared / "metadata.jsonl").read_text(encoding="utf-8") == ""  # else its caption came back


def test_rows_two_files_or_two_rows_could_claim_are_still_refused(tmp_path: Path) -> None:
    """`éé` composed and decomposed beside each other, a row spelling it half and half: neither
    file is picked; two rows of one image in two other spellings: neither row is picked."""
    both, half = unicodedata.normalize("NFC", "éé"), "e\u0301" + unicodedata.normalize("NFC", "é")
    other = unicodedata.normalize("NFC", "é") + "e\u0301"
    match = match_rows({f"{half}.png": "x"}, [f"{both}.png", unicodedata.normalize("NFD", both) + ".png"])
    assert (match.by_file, match.unmatched) == ({}, [f"{half}.png"])
    ds = _folder(tmp_path / "ds", [f"{both}.png"], [(f"{half}.png", "one"), (f"{other}.png", "two")])
    with pytest.raises(DatasetError) as err:
        scan_dataset(ds, resolution=64, multiple=16, trigger_word="sks")
    assert all("compose their accents differently" in p for p in err.value.problems), err.value.problems
    assert dataset_summary(ds)["captions"] == 0  # the list counts what the run reads
    exact = match_rows({f"{NFC}.png": "mine", f"{NFD}.png": "other"}, [f"{NFC}.png"])
    assert (exact.by_file, exact.unmatched) == ({f"{NFC}.png": "mine"}, [f"{NFD}.png"])


def test_the_page_names_a_row_the_run_refuses_where_the_list_called_it_usable(tmp_path: Path) -> None:
    """A row `X.PNG` for x.png (fix 1002's rule, not read: a name another way than byte for byte
    or composed alike) is refused by the run while x.png has no caption of its own; the page listed
    nothing of it before. A row naming a file that is gone is listed as the scan lists it."""
    ds = _folder(tmp_path / "ds", ["x.png", "y.png"], [("X.PNG", "a cup"), ("gone.png", "g"), ("y.png", "y")])
    with pytest.raises(DatasetError) as err:
        scan_dataset(ds, resolution=64, multiple=16, trigger_word="sks")
    assert [p.split(";")[0] for p in err.value.problems] == ["metadata.jsonl row 'X.PNG': no such file here"]
    dropped = {d["file"]: d["reason"] for d in dataset_detail(ds)["dropped"]}
    assert dropped["X.PNG"].startswith(
        "listed in metadata.jsonl but not found; a run refuses the dataset: x.png has no caption of its own"
    ), dropped
    assert dropped["gone.png"] == "listed in metadata.jsonl but not found"


def test_a_control_row_spelt_otherwise_pairs_its_image(tmp_path: Path) -> None:
    """A paired dataset's row {"file_name": café.png decomposed, "control_file_name": ...}: its
    caption was read (above) but its control not, the run refused ("café.png: no control image")
    and the page showed none. The pairing reads rows by the same rule."""
    ds = tmp_path / "ds"
    (ds / "ref").mkdir(parents=True)
    write_image(ds / f"{NFC}.png")
    write_image(ds / "ref" / "r.png", seed=1)
    row = {"file_name": f"{NFD}.png", "text": "a cup", "control_file_name": "ref/r.png"}
    (ds / "metadata.jsonl").write_text(json.dumps(row, ensure_ascii=False) + "\n", encoding="utf-8")
    scan = scan_dataset(ds, resolution=64, multiple=16, control_images=(1, 1), family="an edit family")
    assert [(it.caption, [c.name for c in it.controls]) for it in scan.items] == [("a cup", ["r.png"])]
    assert dataset_detail(ds)["files"][0]["controls"] == ["ref/r.png"]
    (ds / "ref" / "r.png").rename(ds / "ref" / f"{NFC}.png")  # the control's own path spelt otherwise
    row["control_file_name"] = f"ref/{NFD}.png"
    (ds / "metadata.jsonl").write_text(json.dumps(row, ensure_ascii=False) + "\n", encoding="utf-8")
    scan = scan_dataset(ds, resolution=64, multiple=16, control_images=(1, 1), family="an edit family")
    assert [c.name for c in scan.items[0].controls] == [f"{NFC}.png"]  # was "control image ... not found"
    assert dataset_detail(ds)["files"][0]["controls"] == [f"ref/{NFC}.png"]
