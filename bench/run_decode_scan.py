"""What the run's own full decode adds to its preflight (RELIABILITY 165), and what its progress
count and stop check add (RELIABILITY 170).

Builds N noise PNGs (and captions) of SIZE x SIZE in a temporary folder and times
data.scan.scan_dataset three ways on it, each on a fresh decoded record unless said:
the cheap check (headers, chunk CRCs: what a check past its 30 s budget gives a file), the run's
scan with no budget (every pixel decoded, then recorded), and the next scan of the same folder
(the record lists every file: no file decoded; each case hashes every file, as
a fresh process does, for the fingerprint); then the last two again with the run's
DecodeProgress (data/decode_progress.py: a stat per file more, a stop poll per decode); and the
run's scan with one decode at a time (data/decode_checks.py's window set to 1: the scan's own loop
before RELIABILITY 210) against its decodes on both decode threads. Usage:

    PYTHONPATH=$PWD/src python -m bench.run_decode_scan --images 1000 --size 64

Prints one JSON line per case: case, seconds, cpu_s (the process's CPU seconds: above `seconds`
when both decode threads ran at once), full_decodes, reports (the progress's counts sent).
"""

from __future__ import annotations

import argparse
import io
import json
import math
import tempfile
import time
from pathlib import Path

import numpy as np
from PIL import Image

from lorastudio.data import decode_checks, images, scan
from lorastudio.data.decode_progress import DecodeProgress
from lorastudio.data.scan import scan_dataset


def write_dataset(folder: Path, count: int, size: int) -> None:
    """`count` noise PNGs of `size` x `size` with a caption each (noise: the deflate stream
    spans the file, as a photo's does)."""
    rng = np.random.default_rng(0)
    folder.mkdir(parents=True)
    for i in range(count):
        buf = io.BytesIO()
        Image.fromarray(rng.integers(0, 255, (size, size, 3), dtype=np.uint8)).save(buf, format="PNG")
        (folder / f"img{i:05d}.png").write_bytes(buf.getvalue())
        (folder / f"img{i:05d}.txt").write_text(f"image {i}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--images", type=int, default=1000)
    parser.add_argument("--size", type=int, default=64)
    args = parser.parse_args()
    decodes: list[str] = []
    real = images._full_decode

    def counted(path: Path, *rest: object) -> bool:
        decodes.append(path.name)
        return real(path, *rest)  # type: ignore[arg-type]

    images._full_decode = counted  # type: ignore[assignment]
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp) / "data"
        write_dataset(folder, args.images, args.size)
        time.sleep(0.05)  # the files older than the file clock's tick (data/decoded.racy): recorded
        cases = [
            ("cheap check (budget 0 s)", Path(tmp) / "rec0", 0.0, False, 2),
            ("run's scan, one decode at a time (fresh record)", Path(tmp) / "rec3", math.inf, False, 1),
            ("run's scan (no budget, fresh record)", Path(tmp) / "rec1", math.inf, False, 2),
            ("next scan (recorded)", Path(tmp) / "rec1", math.inf, False, 2),
            ("run's scan with its progress (fresh record)", Path(tmp) / "rec2", math.inf, True, 2),
            ("next scan with its progress (recorded)", Path(tmp) / "rec2", math.inf, True, 2),
        ]
        slots = decode_checks.DECODE_SLOTS
        for case, record_dir, budget, counted_scan, window in cases:
            decode_checks.DECODE_SLOTS = min(window, slots)  # the probes one loop keeps pending
            decodes.clear()
            reports: list[tuple[int, int]] = []
            progress = (
                DecodeProgress(lambda d, t, sink=reports: sink.append((d, t)), lambda: None)
                if counted_scan
                else None
            )
            scan._hash_memo.clear()  # each case hashes the files as a fresh process would
            start, cpu = time.perf_counter(), time.process_time()
            result = scan_dataset(
                folder,
                resolution=64,
                multiple=16,
                decoded_dir=record_dir,
                decode_budget_s=budget,
                progress=progress,
            )
            if progress is not None:
                progress.finish()
            seconds, cpu = time.perf_counter() - start, time.process_time() - cpu
            assert len(result.items) == args.images
            row = {
                "case": case,
                "seconds": round(seconds, 3),
                "cpu_s": round(cpu, 3),  # over `seconds`: two decodes at once (on a host with cores free)
                "full_decodes": len(decodes),
                "reports": len(reports),
            }
            print(json.dumps(row))
        decode_checks.DECODE_SLOTS = slots


if __name__ == "__main__":
    main()
