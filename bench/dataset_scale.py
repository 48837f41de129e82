"""A dataset of many tiny images through a real `lorastudio serve` (the session 23 scale audit).

Builds N 32 x 32 PNGs with .txt captions (one encoded PNG, a few pixel bytes varied per image and
its IDAT CRC recomputed: N files in about a second) in a dataset folder of a fresh studio home,
starts the server on it (a free loopback port) and times what a user's screens and commands ask:
the dataset listing (/api/datasets), the dataset's detail (first page and whole, bytes of JSON),
a thumbnail (first and cached), a run's preflight (first: every image decoded once; second:
remembered), a caption edit and a bulk caption dry run, and `lorastudio datasets import` of the
same N files into another dataset (a CLI process). The server's RSS (VmRSS, and its peak VmHWM)
is read from /proc after each step. Usage:

    PYTHONPATH=$PWD/src python -m bench.dataset_scale --images 10000

Prints one JSON line per step: step, seconds, bytes (of the answer), rss_mb, peak_mb.
"""

from __future__ import annotations

import argparse
import io
import json
import os
import socket
import struct
import subprocess
import sys
import tempfile
import time
import zlib
from pathlib import Path
from typing import Any

import httpx
from PIL import Image

SERVER_START_S = 120.0


def tiny_pngs(count: int, size: int = 32) -> list[bytes]:
    """`count` distinct valid PNGs of `size` x `size` (stored-deflate, so pixel bytes can be
    varied in place: the zlib stream's Adler-32 and the IDAT CRC are recomputed)."""
    raw = b"".join(b"\0" + bytes(3 * size) for _ in range(size))  # filter 0, black rows
    out = []
    ihdr = struct.pack(">IIBBBBB", size, size, 8, 2, 0, 0, 0)
    for i in range(count):
        row = bytearray(raw)
        row[1:4] = bytes((i & 0xFF, (i >> 8) & 0xFF, (i >> 16) & 0xFF))  # the first pixel's colour
        row[5 + (i % size) * 3] = 255  # a bright pixel whose place varies
        data = zlib.compress(bytes(row), 0)
        out.append(
            b"\x89PNG\r\n\x1a\n" + _chunk(b"IHDR", ihdr) + _chunk(b"IDAT", data) + _chunk(b"IEND", b"")
        )
    return out


def _chunk(kind: bytes, data: bytes) -> bytes:
    return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))


def write_dataset(folder: Path, count: int) -> None:
    """N images img00000.png ... with captions into `folder`."""
    folder.mkdir(parents=True, exist_ok=True)
    for i, data in enumerate(tiny_pngs(count)):
        (folder / f"img{i:05d}.png").write_bytes(data)
        (folder / f"img{i:05d}.txt").write_text(f"a tiny square number {i}")
    with Image.open(io.BytesIO(tiny_pngs(1)[0])) as img:  # Pillow reads what was written
        img.load()


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _memory(pid: int) -> tuple[float, float]:
    """(VmRSS, VmHWM) of process `pid` in MB."""
    fields = {}
    for line in Path(f"/proc/{pid}/status").read_text(encoding="utf-8").splitlines():
        key, _, value = line.partition(":")
        if key in ("VmRSS", "VmHWM"):
            fields[key] = int(value.split()[0]) / 1024
    return fields["VmRSS"], fields["VmHWM"]


class Bench:
    """The server subprocess and the timed steps (`step`), each printed as a JSON line."""

    def __init__(self, home: Path) -> None:
        self.home = home
        port = _free_port()
        self.url = f"http://127.0.0.1:{port}"
        env = {**os.environ, "LORASTUDIO_HOME": str(home), "LORASTUDIO_STANDBY_WORKER": "0"}
        code = (
            "from lorastudio.api.app import serve; from lorastudio.settings import get_settings; "
            f"serve(get_settings(), '127.0.0.1', {port})"
        )
        self.log = (home / "server.log").open("w")
        self.proc = subprocess.Popen(
            [sys.executable, "-c", code], env=env, stdout=self.log, stderr=subprocess.STDOUT
        )
        self.client = httpx.Client(base_url=self.url, timeout=600)
        deadline = time.monotonic() + SERVER_START_S
        while True:
            try:
                if self.client.get("/api/info").status_code == 200:
                    break
            except httpx.TransportError:
                pass
            if self.proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError((home / "server.log").read_text())
            time.sleep(0.3)
        self.rows: list[dict[str, Any]] = []

    def step(self, name: str, method: str, path: str, **kw: Any) -> httpx.Response:
        start = time.perf_counter()
        resp = self.client.request(method, path, **kw)
        seconds = time.perf_counter() - start
        self.record(name, seconds, len(resp.content), resp.status_code)
        return resp

    def record(self, name: str, seconds: float, size: int = 0, status: int = 0) -> None:
        rss, peak = _memory(self.proc.pid)
        row = {"step": name, "seconds": round(seconds, 3), "bytes": size, "status": status}
        row |= {"rss_mb": round(rss), "peak_mb": round(peak)}
        self.rows.append(row)
        print(json.dumps(row), flush=True)

    def close(self) -> None:
        self.client.close()
        self.proc.terminate()
        try:
            self.proc.wait(timeout=15)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        self.log.close()


def run(count: int, home: Path) -> list[dict[str, Any]]:
    from lorastudio.tiny import save_tiny_model

    (home / "datasets").mkdir(parents=True)
    start = time.perf_counter()
    write_dataset(home / "datasets" / "big", count)
    write_dataset(home / "source", count)
    print(
        json.dumps({"step": "write datasets", "seconds": round(time.perf_counter() - start, 3)}), flush=True
    )
    model = save_tiny_model("flux", home / "models" / "tiny-flux")
    bench = Bench(home)
    try:
        first = "img00000.png"
        bench.step("list datasets", "GET", "/api/datasets")
        bench.step(
            "dataset detail, first page (limit 100)", "GET", "/api/datasets/big", params={"limit": 100}
        )
        bench.step("dataset detail, whole", "GET", "/api/datasets/big", params={"limit": 0})
        bench.step("dataset detail, whole (again)", "GET", "/api/datasets/big", params={"limit": 0})
        bench.step("thumbnail (first)", "GET", f"/api/datasets/big/thumbnails/{first}")
        bench.step("thumbnail (cached)", "GET", f"/api/datasets/big/thumbnails/{first}")
        config = {"family": "flux", "base_model": str(model), "data_dir": "big", "resolution": 32, "steps": 4}
        for label in ("first", "second"):
            resp = bench.step(f"preflight ({label})", "POST", "/api/train/preflight", json={"config": config})
            assert resp.status_code == 200, resp.text[:2000]
        resp = bench.step(
            "caption edit",
            "PUT",
            f"/api/datasets/big/captions/{first}",
            json={"caption": "an edited caption"},
        )
        assert resp.status_code == 200, resp.text
        bench.step(
            "bulk caption (dry run)",
            "POST",
            "/api/datasets/big/captions",
            json={"append": ", tiny", "dry_run": True},
        )
        env = {**os.environ, "LORASTUDIO_HOME": str(home)}
        start = time.perf_counter()
        out = subprocess.run(
            [
                sys.executable,
                "-m",
                "lorastudio.cli",
                "datasets",
                "import",
                str(home / "source"),
                "--name",
                "imported",
            ],
            env=env,
            capture_output=True,
            text=True,
        )
        assert out.returncode == 0, out.stdout + out.stderr
        bench.record("datasets import (CLI process)", time.perf_counter() - start)
        bench.step("list datasets (two of N)", "GET", "/api/datasets")
        resp = bench.step("preflight (imported: decoded at import)", "POST", "/api/train/preflight",
                          json={"config": {**config, "data_dir": "imported"}})  # fmt: skip
        assert resp.status_code == 200, resp.text[:2000]
    finally:
        bench.close()
    return bench.rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--images", type=int, default=10_000)
    parser.add_argument("--out", type=Path, default=None, help="also write the rows as JSON here")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="lorastudio-scale-") as tmp:
        rows = run(args.images, Path(tmp) / "home")
    if args.out is not None:
        args.out.write_text(json.dumps(rows, indent=1))


if __name__ == "__main__":
    main()
