"""Dynamo's saved graphs' staging files (training/speed/precompile.py, RELIABILITY 1741): a killed
saver's goes at the next save into its key's folder, a live saver's stays."""

from __future__ import annotations

import torch
from tests.unit.training.test_precompile import _compiled, cache  # noqa: F401 (the fixture)

from lorastudio.training.speed import precompile, precompile_prune


def test_a_killed_savers_staging_file_goes_at_the_next_save_a_live_ones_stays(cache):  # noqa: F811
    """RELIABILITY 1741: a save killed mid-write left its `mkstemp` staging file (MBs a graph) in
    the key's folder for ever, nothing removed it. The staging name now carries the saver's pid:
    the next save there removes a dead saver's (and an older version's name a day old), never a
    live one's, and no staging file of its own stays."""
    import os
    import time

    torch._dynamo.reset()
    x = torch.randn(2, 4, 8, generator=torch.Generator().manual_seed(1))  # [B, N, D]
    _compiled(x)
    (saved,) = cache.glob("*/ToyBlock-*.bin")
    folder = saved.parent
    dead = folder / f".{saved.name}.999999999-abcdef.tmp"  # no such pid
    live = folder / f".{saved.name}.{os.getpid()}-abcdef.tmp"  # a saver beside this one
    older = folder / f".{saved.name}.k3_x9q0z.tmp"  # mkstemp's, before the fix
    for path in (dead, live, older):
        path.write_bytes(b"half a graph")
    past = time.time() - 2 * 24 * 3600
    os.utime(older, (past, past))
    saved.unlink()  # the next run saves again into this folder
    torch._dynamo.reset()
    _compiled(x)
    assert precompile.COUNTERS["saved"] == 2
    assert saved.is_file() and live.is_file() and not dead.exists() and not older.exists()
    hidden = sorted(p.name for p in folder.iterdir() if p.name.startswith("."))
    assert hidden == sorted([live.name, precompile_prune.IN_USE])  # and the key's lock (1772)
