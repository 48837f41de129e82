"""A studio home shared by a group (a setgid folder, umask 002): every file and folder the studio
makes there must follow the umask, so that another member of the group can take the home's locks
and write its database. Before, the lock files were made 0600 whatever the umask (another user:
"error: Permission denied: .../lorastudio.lock"), the database 0644 (sqlite's own mode), the
cache's folders 0755, a checkpoint's LoRA 0600 (safetensors': "cannot read checkpoint ... No such
file or directory" for another user's resume). Each part runs in a child process with umask 002;
a whole run's files: the slow test."""

from __future__ import annotations

import json
import os
import stat
import subprocess
import sys
import textwrap
from collections.abc import Callable
from pathlib import Path

import pytest


def _in_umask_002(script: str, home: Path) -> None:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path), "LORASTUDIO_HOME": str(home)}
    done = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(script)],
        preexec_fn=lambda: os.umask(0o002),  # noqa: PLW1509 (the child's own umask)
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr[-3000:]


def _not_group_writable(home: Path) -> list[str]:
    """Every file and folder under `home` that the group cannot write, with its mode."""
    bad = []
    for path in [home, *home.rglob("*")]:
        mode = path.lstat().st_mode
        if stat.S_ISLNK(mode):
            continue
        want = 0o070 if stat.S_ISDIR(mode) else 0o060
        if mode & want != want:
            bad.append(f"{oct(mode & 0o777)} {path.relative_to(home)}")
    return bad


def test_the_homes_locks_database_and_cache_follow_a_group_umask(tmp_path: Path) -> None:
    home = tmp_path / "home"
    _in_umask_002(
        f"""
        from pathlib import Path
        from lorastudio.basemodels.added import _list_held
        from lorastudio.basemodels.fetch_lock import FetchLock
        from lorastudio.data.cache_io import hold_entry, hold_readers, one_prune, write_shard_bytes
        from lorastudio.data.staging_owner import make_owned
        from lorastudio.data.writes import dataset_lock
        from lorastudio.jobs.dataset_claims import READ, DatasetClaim
        from lorastudio.jobs.homelock import HomeLock
        from lorastudio.jobs.store import RunStore
        from lorastudio.settings import Settings
        from lorastudio.training.resume.fresh_mark import mark_fresh

        settings = Settings(home=Path({str(home)!r})).ensure_dirs()
        lock = HomeLock.for_command(settings.home, "datasets import")
        RunStore.open(settings.db_path).close()
        (settings.datasets_dir / "shapes").mkdir()
        claim = DatasetClaim.take(settings.home, settings.datasets_dir, ["shapes"], READ, "a test")
        with dataset_lock(settings.datasets_dir, "shapes"):
            make_owned(settings.datasets_dir)
        (settings.models_dir / "m").mkdir()
        FetchLock(settings.models_dir / "m", "org/m")
        with _list_held(settings):  # the added list's lock (`models add`)
            pass
        from lorastudio.data.disk_cache import cache_root
        root = cache_root(settings)
        shard = root / "latents" / "model" / "ab" / "abcdef.safetensors"
        hold_readers(root), hold_entry(root, "latents", "model")
        assert write_shard_bytes(shard, b"x")
        with one_prune(root):
            pass
        run = settings.outputs_dir / "r"
        run.mkdir()
        mark_fresh(run)
        """,
        home,
    )
    assert (home / "lorastudio.lock").is_file() and (home / "lorastudio.db").is_file()
    assert _not_group_writable(home) == []


@pytest.mark.slow
def test_a_runs_files_follow_a_group_umask(
    tmp_path: Path, tiny_model: Callable[[str], Path], sample_dataset: Path
) -> None:
    """A CLI run with checkpoints and the disk cache (~15 s): its LoRA, checkpoints, records,
    cache entries and the home's database all group-writable."""
    home = tmp_path / "home"
    config = tmp_path / "c.json"
    body = {
        "family": "flux", "base_model": str(tiny_model("flux")), "data_dir": str(sample_dataset),
        "resolution": 32, "steps": 2, "output_name": "shared", "save_every": 1,
        "latent_cache": "disk", "max_sequence_length": 16,
    }  # fmt: skip
    config.write_text(json.dumps(body))
    _in_umask_002(
        f"""
        import sys
        from lorastudio.cli.app import main
        sys.argv = ["lorastudio", "train", {str(config)!r}, "--device", "cpu"]
        try:
            main()
        except SystemExit as end:
            assert end.code in (0, None), end.code
        """,
        home,
    )
    assert list((home / "outputs" / "shared" / "checkpoints").glob("step-*/lora.safetensors"))
    assert _not_group_writable(home) == []


def test_an_older_versions_narrow_files_follow_a_group_umask(tmp_path: Path) -> None:
    """A home an older lorastudio made (fix 940): its locks 0600, database and claims 0644, cache
    folders 0755 and checkpoint files 0600 get the group's bits at the owner's first command of
    this version (the home lock, the run store, a run's hold on the cache), once per umask."""
    home = tmp_path / "home"
    narrow = {
        "lorastudio.lock": 0o600,
        ".added_models.lock": 0o600,
        "lorastudio.db": 0o644,
        "claims/abc.lock": 0o644,
        "outputs/r/checkpoints/step-000001/lora.safetensors": 0o600,
        "cache/encoded/.readers.lock": 0o644,
        "cache/encoded/latents/model/.used": 0o644,
    }
    for name, mode in narrow.items():
        (home / name).parent.mkdir(parents=True, exist_ok=True)
        (home / name).write_bytes(b"")
        (home / name).chmod(mode)
    for folder in ("cache/encoded", "cache/encoded/latents", "cache/encoded/latents/model"):
        (home / folder).chmod(0o755)
    _in_umask_002(
        f"""
        from pathlib import Path
        from lorastudio.data.cache_io import hold_readers
        from lorastudio.jobs.homelock import HomeLock
        from lorastudio.jobs.store import RunStore

        home = Path({str(home)!r})
        (home / "lorastudio.db").unlink()  # sqlite's own file, made 0644 by the old code
        RunStore.open(home / "lorastudio.db").close()
        (home / "lorastudio.db").chmod(0o644)
        RunStore.open(home / "lorastudio.db").close()
        HomeLock.for_command(home, "datasets import").release()
        hold_readers(home / "cache" / "encoded")
        """,
        home,
    )
    made_old = [*narrow, "cache/encoded", "cache/encoded/latents", "cache/encoded/latents/model"]
    want = {n: 0o070 if (home / n).is_dir() else 0o060 for n in made_old}
    assert [n for n, w in want.items() if (home / n).stat().st_mode & w != w] == []
    assert (home / ".modes-umask").read_text() == "2\n"
    assert (home / "cache" / "encoded" / ".modes-umask").read_text() == "2\n"
