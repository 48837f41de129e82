"""Crash leftovers of the gallery (jobs/leftovers.py): a generated image's and an uploaded
reference's hidden `.partial` staging files are found and removed; finished files are kept."""

from __future__ import annotations

from lorastudio.jobs.leftovers import find_leftovers, remove_leftovers
from lorastudio.settings import Settings


def test_gallery_and_reference_partials_are_removed_and_the_rest_kept(settings: Settings) -> None:
    refs = settings.home / "gallery" / "references"
    refs.mkdir(parents=True)
    kept = [settings.home / "gallery" / "a.png", settings.home / "gallery" / "a.json", refs / "r.png"]
    partial = [settings.home / "gallery" / ".b.png.partial", refs / ".0f3a.png.partial"]
    for path in kept + partial:
        path.write_bytes(b"x")
    assert find_leftovers(settings) == sorted(partial)
    remove_leftovers(find_leftovers(settings))
    assert all(p.exists() for p in kept) and not any(p.exists() for p in partial)


def test_a_sidecar_killed_mid_write_or_without_its_image_is_removed(settings: Settings) -> None:
    """A server killed while a generation saved (session 25 genaudit): in the sidecar's staged
    write (`.<stem>.json.<hex>.tmp`) or between the sidecar's rename and the image's (`<stem>.json`
    beside `.<stem>.png.partial`, no PNG). The staging file and that sidecar went unnoticed for
    ever (only the `.partial` was removed); now both go. A sidecar whose PNG a user removed (no
    staging beside it) and a kept image's are kept."""
    gallery = settings.home / "gallery"
    gallery.mkdir(parents=True)
    kept = [gallery / "a.png", gallery / "a.json", gallery / "by-hand.json", gallery / "notes.txt"]
    gone = [
        gallery / f".b.json.{'0' * 32}.tmp",  # killed in the sidecar's write
        gallery / "c.json",  # killed between the renames: its image's staging below
        gallery / ".c.png.partial",
    ]
    for path in kept + gone:
        path.write_bytes(b"x")
    assert find_leftovers(settings) == sorted(gone)
    remove_leftovers(find_leftovers(settings))
    assert all(p.exists() for p in kept) and not any(p.exists() for p in gone)


# Delete gallery image argv[2] of the studio home argv[1], killed (SIGKILL, no cleanup) at the
# delete's first unlink (the sidecar's; the old code's was the image's).
_KILLED_MID_DELETE = """
import os, signal, sys
from pathlib import Path
from lorastudio.jobs.gallery import delete_gallery_image
from lorastudio.settings import Settings
def killed(self, *args, **kwargs):
    if self.name.endswith(".json"):
        os.kill(os.getpid(), signal.SIGKILL)
    real(self, *args, **kwargs)
real, Path.unlink = Path.unlink, killed
delete_gallery_image(Settings(home=Path(sys.argv[1])), sys.argv[2])
"""


def test_a_gallery_delete_killed_before_the_sidecar_went_leaves_what_a_start_removes(
    settings: Settings,
) -> None:
    """A server killed inside DELETE /api/gallery/<file> (session 28 chaos audit): the image was
    unlinked first, so a kill before its sidecar's unlink left `<stem>.json` alone, which a start
    keeps (a sidecar whose image a user removed by hand) for ever. Now the image goes aside to its
    staging name first: the kill leaves it beside the sidecar, and a start removes both."""
    import signal
    import subprocess
    import sys

    gallery = settings.home / "gallery"
    gallery.mkdir(parents=True)
    for path in (gallery / "a.png", gallery / "a.json", gallery / "b.png", gallery / "b.json"):
        path.write_bytes(b"x")
    killed = subprocess.run(
        [sys.executable, "-c", _KILLED_MID_DELETE, str(settings.home), "a.png"],
        capture_output=True,
        timeout=120,
    )
    assert killed.returncode == -signal.SIGKILL, killed.stderr
    assert not (gallery / "a.png").exists()  # out of sight at once
    remove_leftovers(find_leftovers(settings))  # the next server start
    assert sorted(p.name for p in gallery.iterdir()) == ["b.json", "b.png"]
