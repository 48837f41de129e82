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
