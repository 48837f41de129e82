"""An image delete killed (or failing) part-way (session 28 chaos audit). `delete_image` removed
the image first, then its caption, control images and masks: a kill -9 after the image left
them behind, orphans a run refuses, that no image delete could reach any more (404: the image is
gone). Now the image goes last, so whatever stops the delete leaves the image listed and the
delete sent again completes."""

from __future__ import annotations

import io
import signal
import subprocess
import sys
from pathlib import Path

from PIL import Image

from lorastudio.data.image_edits import delete_image

# Delete image argv[2] of dataset folder argv[1], SIGKILLed at the delete's second unlink.
_KILLED_MID_DELETE = """
import os, signal, sys
from pathlib import Path
real, calls = Path.unlink, []
def unlink(self, *args, **kwargs):
    calls.append(self)
    if len(calls) == 2:
        os.kill(os.getpid(), signal.SIGKILL)
    real(self, *args, **kwargs)
Path.unlink = unlink
from lorastudio.data.image_edits import delete_image
delete_image(Path(sys.argv[1]), sys.argv[2])
"""


def _png(path: Path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    buf = io.BytesIO()
    Image.new("RGB", (16, 16), (10, 20, 30)).save(buf, format="PNG")
    path.write_bytes(buf.getvalue())


def test_an_image_delete_killed_part_way_can_be_sent_again(tmp_path: Path) -> None:
    dataset = tmp_path / "datasets" / "pairs"
    for name in ("a.png", "control/a.png", "masks/a.png", "b.png", "control/b.png"):
        _png(dataset / name)
    (dataset / "a.txt").write_text("a cat", encoding="utf-8")
    (dataset / "b.txt").write_text("a dog", encoding="utf-8")
    killed = subprocess.run(
        [sys.executable, "-c", _KILLED_MID_DELETE, str(dataset), "a.png"], capture_output=True, timeout=120
    )
    assert killed.returncode == -signal.SIGKILL, killed.stderr
    assert (dataset / "a.png").is_file()  # still listed: its delete can be sent again
    delete_image(dataset, "a.png")
    left = sorted(p.relative_to(dataset).as_posix() for p in dataset.rglob("*") if p.is_file())
    assert left == ["b.png", "b.txt", "control/b.png"]
