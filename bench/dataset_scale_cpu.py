"""A user's large dataset through the studio's CPU paths, in one process (the session 40 scale audit).

Builds, under `--root` (default /tmp/scale3/N), a studio home whose datasets hold N tiny PNGs in
all: `plain` (half of them, .txt captions, square and 2:1 / 1:2 sizes), `meta` (a quarter,
captions in metadata.jsonl) and `kohya` (a quarter, in `5_cat` and `10_dog` sub-folders, .txt
captions). Then times, and reads the peak RSS of (VmHWM, reset before each step through
/proc/self/clear_refs), each path that touches every file: the listing (GET /api/datasets), a
dataset's detail (a page, the whole), the preflight of a mix of `plain` x2 and `meta` x3 with the
disk latent cache (first: every image decoded and hashed; second: remembered), the preflight of
the kohya folder, the scan of the mix (data/run_scan.scan_for_run, in process), the bucket
assignment and an epoch's sampler, the latent keys' planning, the fingerprint (from the
remembered hashes, and from cold: every file hashed), and the CLI as its own processes
(`datasets list`, a `datasets captions --dry-run`, `datasets import --kohya` of the kohya folder
and `datasets import` of `plain`: their CPU seconds and peak RSS). Usage:

    PYTHONPATH=$PWD/src:$PWD python -m bench.dataset_scale_cpu --images 10000

Prints one JSON line per step: images, step, seconds, cpu_s, rss_mb (after), peak_mb (during the
step). `--only PREFIX,...` runs some steps; `--profile FILE` writes a cProfile of the main thread.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import struct
import subprocess
import sys
import time
import zlib
from collections.abc import Callable, Iterator
from contextlib import contextmanager, suppress
from pathlib import Path
from typing import Any


def png(width: int, height: int, seed: int) -> bytes:
    """A valid `width` x `height` RGB PNG (stored deflate) whose first pixel encodes `seed`."""
    row = bytearray(b"\0" + bytes(3 * width))
    rows = [bytes(row)] * height
    first = bytearray(row)
    first[1:4] = bytes((seed & 0xFF, (seed >> 8) & 0xFF, (seed >> 16) & 0xFF))
    rows[0] = bytes(first)
    ihdr = struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0)
    data = zlib.compress(b"".join(rows), 0)
    return b"\x89PNG\r\n\x1a\n" + _chunk(b"IHDR", ihdr) + _chunk(b"IDAT", data) + _chunk(b"IEND", b"")


def _chunk(kind: bytes, data: bytes) -> bytes:
    return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))


SIZES = ((32, 32), (64, 32), (32, 64), (48, 32))


def build(datasets: Path, count: int) -> None:
    """The three datasets of `count` images in all (see the module's docstring)."""
    plain, meta, kohya = count // 2, count // 4, count - count // 2 - count // 4
    folder = datasets / "plain"
    folder.mkdir(parents=True)
    for i in range(plain):
        w, h = SIZES[i % len(SIZES)]
        (folder / f"p{i:06d}.png").write_bytes(png(w, h, i))
        (folder / f"p{i:06d}.txt").write_text(f"a plain square, tag{i % 97}, tag{i % 13}")
    folder = datasets / "meta"
    folder.mkdir()
    rows = []
    for i in range(meta):
        w, h = SIZES[i % len(SIZES)]
        (folder / f"m{i:06d}.png").write_bytes(png(w, h, plain + i))
        rows.append(json.dumps({"file_name": f"m{i:06d}.png", "text": f"a meta caption {i}"}))
    (folder / "metadata.jsonl").write_text("\n".join(rows) + "\n")
    for sub, start, stop in (("5_cat", 0, kohya // 2), ("10_dog", kohya // 2, kohya)):
        folder = datasets / "kohya" / sub
        folder.mkdir(parents=True)
        for i in range(start, stop):
            w, h = SIZES[i % len(SIZES)]
            (folder / f"k{i:06d}.png").write_bytes(png(w, h, plain + meta + i))
            (folder / f"k{i:06d}.txt").write_text(f"{sub} picture {i}")


def _memory() -> tuple[float, float]:
    fields = {}
    for line in Path("/proc/self/status").read_text(encoding="utf-8").splitlines():
        key, _, value = line.partition(":")
        fields[key] = value
    return int(fields["VmRSS"].split()[0]) / 1024, int(fields["VmHWM"].split()[0]) / 1024


@contextmanager
def step(images: int, name: str, out: dict[str, Any] | None = None) -> Iterator[None]:
    """Times the block and prints its JSON line (peak RSS reset before it where the kernel allows)."""
    with suppress(OSError):
        Path("/proc/self/clear_refs").write_text("5", encoding="ascii")  # resets VmHWM
    t0, c0 = time.perf_counter(), time.process_time()
    yield
    seconds, cpu = time.perf_counter() - t0, time.process_time() - c0
    rss, peak = _memory()
    row = {"images": images, "step": name, "seconds": round(seconds, 3), "cpu_s": round(cpu, 3)}
    row.update(rss_mb=round(rss), peak_mb=round(peak))
    row.update(out or {})
    print(json.dumps(row), flush=True)


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--images", type=int, default=10_000)
    ap.add_argument("--root", type=Path, default=None)
    ap.add_argument("--only", default="", help="comma-separated step name prefixes (default: all)")
    ap.add_argument("--profile", type=Path, default=None, help="write a cProfile of the whole run here")
    args = ap.parse_args(argv)
    n = args.images
    root = args.root or Path(f"/tmp/scale3/{n}")
    home = root / "home"
    if not (home / "datasets" / "kohya").is_dir():
        shutil.rmtree(root, ignore_errors=True)
        with step(n, "build"):
            build(home / "datasets", n)
    for kept in home.iterdir():  # a fresh home around the datasets: no decoded record, no cache
        if kept.name != "datasets":
            shutil.rmtree(kept) if kept.is_dir() else kept.unlink()
    os.environ["LORASTUDIO_HOME"] = str(home)
    os.environ["HF_HUB_OFFLINE"] = "1"
    os.environ["LORASTUDIO_STANDBY_WORKER"] = "0"
    only = [p for p in args.only.split(",") if p]
    if args.profile is None:
        run(n, home, root, only)
        return
    import cProfile

    cProfile.runctx(
        "run(n, home, root, only)",
        globals(),
        {"run": run, "n": n, "home": home, "root": root, "only": only},
        str(args.profile),
    )


def run(n: int, home: Path, root: Path, only: list[str]) -> None:
    from fastapi.testclient import TestClient

    from lorastudio.api.app import create_app
    from lorastudio.data import discovery
    from lorastudio.settings import Settings
    from lorastudio.tiny import tiny_model_dir

    def wanted(name: str) -> bool:
        return not only or any(name.startswith(p) for p in only)

    discovery._SETTLED_NS = 0  # nothing changes the folders from here: remember listings at once
    model = tiny_model_dir("flux", root / "models")
    if not model.is_dir():  # built in a child: this process, like the server's, never imports torch
        code = "import sys; from lorastudio.tiny import save_tiny_model as s; s('flux', sys.argv[1])"
        subprocess.run([sys.executable, "-c", code, str(model)], check=True, capture_output=True)
    settings = Settings(home=home)
    base = {"family": "flux", "base_model": str(model), "resolution": 32, "steps": 4, "latent_cache": "disk"}
    mix = {**base, "datasets": [{"path": "plain", "repeats": 2}, {"path": "meta", "repeats": 3}]}
    kohya = {**base, "data_dir": "kohya", "kohya_folders": True}
    timed: Callable[..., Any] = lambda name, **out: step(n, name, out)  # noqa: E731
    with TestClient(create_app(settings), base_url="http://127.0.0.1") as client:
        if wanted("api_datasets"):
            with timed("api_datasets_first"):
                assert client.get("/api/datasets").status_code == 200
            with timed("api_datasets_again"):
                assert client.get("/api/datasets").status_code == 200
        if wanted("detail"):
            with timed("detail_page"):
                assert client.get("/api/datasets/plain", params={"limit": 200}).status_code == 200
            with timed("detail_whole"):
                assert client.get("/api/datasets/plain").status_code == 200
        if wanted("preflight"):
            for name, cfg in (("mix", mix), ("kohya", kohya)):
                for when in ("first", "again"):
                    with timed(f"preflight_{name}_{when}"):
                        resp = client.post("/api/train/preflight", json={"config": cfg})
                        assert resp.status_code == 200, resp.text[:2000]
    if any(wanted(s) for s in ("scan", "buckets", "latent", "fingerprint")):
        in_process(n, settings, mix, wanted)
    if wanted("cli"):
        cli(n, home, "cli_datasets_list", "datasets", "list")
        cli(
            n,
            home,
            "cli_captions_dry_run",
            "datasets",
            "captions",
            "plain",
            "--find",
            "tag",
            "--replace",
            "t",
            "--dry-run",
        )
        cli(
            n,
            home,
            "cli_import_kohya",
            "datasets",
            "import",
            str(home / "datasets" / "kohya"),
            "--kohya",
            "--name",
            "imported",
        )
        cli(
            n,
            home,
            "cli_import_plain",
            "datasets",
            "import",
            str(home / "datasets" / "plain"),
            "--name",
            "copy",
        )


def cli(n: int, home: Path, name: str, *args: str) -> None:
    """`lorastudio ARGS` as its own process: its wall time, CPU seconds and peak RSS."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.perf_counter()
    env = {**os.environ, "LORASTUDIO_HOME": str(home)}
    done = subprocess.run([sys.executable, "-c", _CLI, *args], env=env, capture_output=True, text=True)
    seconds = time.perf_counter() - t0
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if done.returncode != 0:
        raise SystemExit(f"{name}: exit {done.returncode}\n{done.stdout[-2000:]}\n{done.stderr[-4000:]}")
    peak = int(done.stderr.rsplit("VmHWM:", 1)[1].split()[0]) / 1024
    cpu = after.ru_utime + after.ru_stime - before.ru_utime - before.ru_stime
    row = {
        "images": n,
        "step": name,
        "seconds": round(seconds, 3),
        "cpu_s": round(cpu, 3),
        "peak_mb": round(peak),
    }
    print(json.dumps(row), flush=True)


# `lorastudio ARGS` whose exit prints its own /proc/self/status (VmHWM: the process's peak RSS) to stderr
_CLI = (
    "import atexit, runpy, sys\n"
    "atexit.register(lambda: sys.stderr.write(open('/proc/self/status').read()))\n"
    "sys.argv = ['lorastudio', *sys.argv[1:]]\n"
    "runpy.run_module('lorastudio', run_name='__main__')\n"
)


def in_process(n: int, settings: Any, mix: dict[str, Any], wanted: Callable[[str], bool]) -> None:
    """The scan, buckets, latent keys and fingerprint called directly (no HTTP)."""
    import numpy as np

    from lorastudio import families
    from lorastudio.config import TrainConfig
    from lorastudio.config_resolve import resolve_train_config
    from lorastudio.data import scan as scan_mod
    from lorastudio.data.entries import epoch_bucket_counts, resolve_entries, run_sampler
    from lorastudio.data.latent_keys import encoder_parts, plan_variants
    from lorastudio.data.run_scan import scan_for_run

    cfg = resolve_train_config(TrainConfig.model_validate(mix))
    spec = families.get("flux").spec
    with step(n, "scan_for_run_mix_remembered"):
        entries = resolve_entries(cfg, settings.datasets_dir, allow_outside_root=False)
        scan = scan_for_run(entries, cfg, spec, settings)
    if wanted("buckets"):
        with step(n, "bucket_counts"):
            epoch_bucket_counts(scan)
        with step(n, "sampler_epoch"):
            sampler = run_sampler(scan, batch_size=4, seed=0)
            sum(1 for _ in iter(sampler))
    if wanted("latent"):
        with step(n, "plan_variants"):
            plan_variants(scan.items, cfg, np.random.default_rng(0), encoder_parts(spec, "m", "bf16", "cpu"))
    if wanted("fingerprint"):
        from dataclasses import replace

        from lorastudio.data.scan import dataset_fingerprint

        items = scan.items
        with step(n, "fingerprint_remembered"):
            dataset_fingerprint(list(items))
        scan_mod._hash_memo.clear()
        with step(n, "fingerprint_cold"):
            dataset_fingerprint([replace(it, sha256="") for it in items])


if __name__ == "__main__":
    main()
