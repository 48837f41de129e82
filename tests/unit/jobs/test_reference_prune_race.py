"""A generation's use of an uploaded reference and the prune of references unused for
ORPHAN_AFTER_S (run by the next upload) one at a time (jobs/references.py): a use that landed
during a prune's pass was not seen by it (the pass read the uses first), so the reference was
removed just after the generation took its path, and the worker failed on the missing file; one
removed before the use was sent to the worker as the path "None". Now the use waits for the
pass: the reference is then kept as used, or gone and the request refused naming it
(RELIABILITY 1922). The interleaving is forced: the use is started from inside the pass."""

from __future__ import annotations

import io
import threading
from pathlib import Path
from typing import Any

import pytest
from PIL import Image

from lorastudio import file_age
from lorastudio.errors import ConfigError
from lorastudio.jobs import references
from lorastudio.jobs.references import prune_orphans, references_dir, store_reference, use_reference
from lorastudio.settings import Settings, get_settings


class _SeenLock:
    """A lock that says when a thread began to wait for it."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.asked = threading.Event()

    def __enter__(self) -> None:
        self.asked.set()
        self._lock.acquire()

    def __exit__(self, *exc: object) -> None:
        self._lock.release()


def test_a_reference_used_during_a_prunes_pass_is_kept_or_refused_never_lost(
    studio_home: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    boot = [0.0]  # the host's boot clock, moved by the test
    monkeypatch.setattr(file_age, "host_now", lambda: boot[0])
    settings: Settings = get_settings().ensure_dirs()
    png = io.BytesIO()
    Image.new("RGB", (8, 8), (200, 10, 10)).save(png, format="PNG")
    png.seek(0)
    ref = store_reference(settings, "ref.png", png)
    boot[0] = 1000.0  # unused for 1000 s: past the prune's 500 below
    lock = _SeenLock()
    monkeypatch.setattr(references, "_PRUNE_LOCK", lock, raising=False)  # the old code had none
    used: list[Any] = []
    done = threading.Event()

    def use() -> None:
        used.append(use_reference(settings, ref))
        done.set()

    user = threading.Thread(target=use)
    aged = references.aged

    def use_meanwhile(*args: Any, **kwargs: Any) -> bool:  # the pass read the uses already
        if not user.is_alive() and not used:
            user.start()
            while not (done.wait(0.01) or lock.asked.is_set()):  # its use ended, or waits for the pass
                pass
        return aged(*args, **kwargs)

    monkeypatch.setattr(references, "aged", use_meanwhile)
    prune_orphans(settings, older_than_s=500)
    user.join()
    path = references_dir(settings) / ref
    assert used[0] is None or path.is_file(), "the reference a generation took was removed"
    assert used == [None] and not path.exists()  # the prune came first: gone, and said so
    with pytest.raises(ConfigError) as err:
        references.used_references(settings, [ref])
    assert [p.field for p in err.value.problems] == ["references.0"]
    assert "was removed after the request's checks" in err.value.problems[0].message
