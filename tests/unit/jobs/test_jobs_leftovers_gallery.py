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
