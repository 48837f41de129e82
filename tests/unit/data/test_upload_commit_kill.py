"""An upload into an existing dataset killed while it moves its files in (session 28 chaos audit).
The commit moves file by file, in name order: a real server SIGKILLed once the first files
appeared (1500 images, their metadata.jsonl rows) left 15 images visible and metadata.jsonl
not yet moved: a run started then trained them uncaptioned, as "usable". Now the target images
move last: every image a killed commit moved has the caption (and the controls) the upload sent
with it; the rest is staging, which the next start removes, and the upload redone completes."""

from __future__ import annotations

import io
import json
import signal
import subprocess
import sys
from pathlib import Path

from PIL import Image

from lorastudio.data.listing import dataset_summary
from lorastudio.data.uploads import UploadBatch

# Commit `names` (files of argv[3]) into dataset argv[2] under datasets root argv[1], killed
# (SIGKILL, no cleanup) at its 4th move of a file into the dataset.
_KILLED_MID_COMMIT = """
import os, signal, sys
from pathlib import Path
from lorastudio.data.uploads import UploadBatch
root, dataset, source = (Path(a) for a in sys.argv[1:4])
real, moves = os.replace, []
def replace(src, dst, *args, **kwargs):
    if kwargs.get("dst_dir_fd") is not None:
        moves.append(dst)
        if len(moves) == 4:
            os.kill(os.getpid(), signal.SIGKILL)
    return real(src, dst, *args, **kwargs)
os.replace = replace
with UploadBatch(root, dataset, 10**8) as batch:
    for path in sorted(source.iterdir()):
        with open(path, "rb") as fh:
            batch.add(path.name, fh)
    batch.commit()
"""


def _png(colour: tuple[int, int, int]) -> bytes:
    buf = io.BytesIO()
    Image.new("RGB", (16, 16), colour).save(buf, format="PNG")
    return buf.getvalue()


def test_a_commit_killed_between_moves_shows_no_image_without_what_came_with_it(tmp_path: Path) -> None:
    root = tmp_path / "datasets"
    dataset = root / "pets"
    with UploadBatch(root, dataset, 10**8) as batch:  # the dataset exists: its commit moves file by file
        batch.add("old.png", io.BytesIO(_png((1, 2, 3))))
        batch.add("old.txt", io.BytesIO(b"an old cat"))
        batch.commit()
    source = tmp_path / "incoming"
    source.mkdir()
    for i, stem in enumerate(["a", "b", "c"]):
        (source / f"{stem}.png").write_bytes(_png((40 * i, 0, 0)))
        (source / f"{stem}.txt").write_text(f"a {stem} cat", encoding="utf-8")
    rows = "".join(json.dumps({"file_name": f"d{i}.png", "text": f"dog {i}"}) + "\n" for i in range(3))
    (source / "metadata.jsonl").write_text(rows, encoding="utf-8")
    for i in range(3):
        (source / f"d{i}.png").write_bytes(_png((0, 40 * i, 0)))
    killed = subprocess.run(
        [sys.executable, "-c", _KILLED_MID_COMMIT, str(root), str(dataset), str(source)],
        capture_output=True,
        timeout=120,
    )
    assert killed.returncode == -signal.SIGKILL, killed.stderr
    summary = dataset_summary(dataset)
    assert summary["images"] == summary["captions"], summary  # no image the upload captioned without it
    assert summary["usable"], summary
    with UploadBatch(root, dataset, 10**8) as batch:  # redone: the whole upload
        for path in sorted(source.iterdir()):
            batch.add(path.name, io.BytesIO(path.read_bytes()))
        batch.commit()
    assert dataset_summary(dataset) | {"path": None} == {
        "name": "pets", "path": None, "images": 7, "captions": 7, "markup_captions": 0, "markup_counted": True,
        "usable": True,
        "problem": None,
    }  # fmt: skip
