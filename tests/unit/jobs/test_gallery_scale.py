"""A gallery page and a new image's number in a long-used gallery (session 34 home at scale
audit, RELIABILITY 1225): each stat'ed every image of the gallery (0.25 CPU s at 20,000 images,
per page and per generation). A numbered image's order is its name's: only the page's images are
stat'ed now (for their `created`), and the listing is the same. Counted, never timed."""

from __future__ import annotations

import os
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from bench.home_build import Scale, build_home

from lorastudio.jobs import gallery
from lorastudio.jobs.gallery import gallery_page, new_image_name
from lorastudio.settings import Settings

N = 300


class _Entry:
    """An os.DirEntry whose stat() is counted."""

    def __init__(self, entry: os.DirEntry[str], seen: Counter[str]) -> None:
        self._entry, self._seen = entry, seen
        self.name, self.path = entry.name, entry.path

    def is_file(self, *, follow_symlinks: bool = True) -> bool:
        return self._entry.is_file(follow_symlinks=follow_symlinks)

    def stat(self, *, follow_symlinks: bool = True) -> os.stat_result:
        self._seen["entry.stat"] += 1
        return self._entry.stat(follow_symlinks=follow_symlinks)


@pytest.fixture
def stats(monkeypatch: pytest.MonkeyPatch) -> Counter[str]:
    seen: Counter[str] = Counter()
    real_scandir, real_stat = os.scandir, os.stat

    class Scan:
        def __init__(self, folder: Any) -> None:
            self._it = real_scandir(folder)

        def __enter__(self) -> Iterator[_Entry]:
            return (_Entry(e, seen) for e in self._it.__enter__())

        def __exit__(self, *exc: object) -> None:
            self._it.__exit__(*exc)

    def counted_stat(path: Any, *args: Any, **kw: Any) -> os.stat_result:
        if Path(path).suffix == ".png":
            seen["os.stat"] += 1
        return real_stat(path, *args, **kw)

    monkeypatch.setattr(gallery.os, "scandir", Scan)
    monkeypatch.setattr(gallery.os, "stat", counted_stat)
    return seen


def test_a_page_stats_only_its_own_images(settings: Settings, stats: Counter[str]) -> None:
    build_home(settings.home, Scale(runs=0, gallery=N, datasets=0))
    by_hand = settings.home / "gallery" / "by-hand.png"  # unnumbered: its mtime orders it
    by_hand.write_bytes((settings.home / "gallery" / "000001_20260101-000000-1-00000001.png").read_bytes())
    page = gallery_page(settings, 60)
    assert page["total"] == N + 1 and len(page["images"]) == 60
    assert [i["file"][:6] for i in page["images"][:2]] == [f"{N:06d}", f"{N - 1:06d}"]
    assert all(isinstance(i["created"], float) for i in page["images"])
    assert stats["entry.stat"] <= 1 and stats["os.stat"] <= 60, stats  # the unnumbered one, the page's own
    walked = page["images"]
    while page["next_cursor"]:
        page = gallery_page(settings, 60, page["next_cursor"])
        walked += page["images"]
    assert [i["file"] for i in walked][-1] == "by-hand.png" and len(walked) == N + 1
    stats.clear()
    assert new_image_name(settings, 7).startswith(f"{N + 1:06d}_")
    assert stats["entry.stat"] <= 1 and stats["os.stat"] == 0, stats
