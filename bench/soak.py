"""A studio left running: many operations on one real `lorastudio serve` (CPU, the tiny FLUX.1
model, a fresh studio home), measuring after each batch what could grow with the number of
operations rather than with the data kept.

    PYTHONPATH=$PWD/src python -m bench.soak [--runs 24] [--generations 100] [--edits 50]
        [--streams 60] [--polls 1000] [--generate-every 25] [--out FILE]

After each batch: the RSS (VmRSS), open fds and threads of the server and of each child process
(zombies listed), the server's /dev/shm mappings (multiprocessing's semaphores), the studio
home's size and file count per top folder, and the time of GET /api/train/status, /api/runs,
/api/gallery, /api/datasets, /api/captions. Prints one line per batch; --out FILE keeps the
whole record as JSON. A count of 0 skips that part. The figures of session 28: RELIABILITY.md,
"Session 28 soak audit".
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import os
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from pathlib import Path
from typing import Any

import httpx
from PIL import Image

from bench.e2e_api import _free_port, _wait_up, end_server

STATUS_ROUTES = ("/api/train/status", "/api/runs", "/api/gallery", "/api/datasets", "/api/captions")


def _proc_facts(pid: int) -> dict[str, Any] | None:
    base = Path(f"/proc/{pid}")
    try:
        status = (base / "status").read_text()
        fds = len(os.listdir(base / "fd"))
        threads = len(os.listdir(base / "task"))
        cmd = (base / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")[:80]
    except OSError:
        return None
    fields = dict(line.split(":", 1) for line in status.splitlines() if ":" in line)
    rss_kb = int(fields.get("VmRSS", "0 kB").split()[0]) if "VmRSS" in fields else 0
    return {
        "pid": pid,
        "state": fields["State"].strip()[0],
        "ppid": int(fields["PPid"]),
        "rss_mb": round(rss_kb / 1024, 1),
        "fds": fds,
        "threads": threads,
        "cmd": cmd,
    }


def _tree(root: int) -> list[dict[str, Any]]:
    """The process `root` and every descendant (zombies included)."""
    facts = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit() and (one := _proc_facts(int(entry))):
            facts[one["pid"]] = one
    out, todo = [], [root]
    while todo:
        pid = todo.pop()
        if pid in facts:
            out.append(facts[pid])
            todo += [p for p, f in facts.items() if f["ppid"] == pid]
    return out


def _shm_maps(pid: int) -> int:
    """How many mappings of /dev/shm files (multiprocessing's semaphores and arenas) `pid` has."""
    try:
        return sum(
            "/dev/shm/" in line for line in Path(f"/proc/{pid}/maps").read_text(encoding="utf-8").splitlines()
        )
    except OSError:
        return -1


def _home_facts(home: Path) -> dict[str, list[int]]:
    """Per top folder (and top file) of the home: [bytes, files]."""
    sizes: dict[str, list[int]] = {}
    for path in home.rglob("*"):
        if path.is_file() and not path.is_symlink():
            top = path.relative_to(home).parts[0]
            entry = sizes.setdefault(top, [0, 0])
            entry[0] += path.stat().st_size
            entry[1] += 1
    return sizes


def _route_times(client: httpx.Client) -> dict[str, float]:
    times = {}
    for route in STATUS_ROUTES:
        t0 = time.perf_counter()
        answer = client.get(route)
        times[route] = round((time.perf_counter() - t0) * 1000, 1)
        answer.raise_for_status()
    return times


def _png(i: int) -> bytes:
    buf = io.BytesIO()
    Image.new("RGB", (32, 32), ((37 * i) % 256, 90, 200)).save(buf, format="PNG")
    return buf.getvalue()


class Soak:
    def __init__(self, home: Path, server_pid: int, client: httpx.Client, base: str) -> None:
        self.home, self.pid, self.client, self.base = home, server_pid, client, base
        self.rows: list[dict[str, Any]] = []
        self.ops = 0

    def measure(self, label: str) -> None:
        tree = _tree(self.pid)
        server = tree[0]
        server["shm_maps"] = _shm_maps(self.pid)
        children = tree[1:]
        row = {
            "label": label,
            "ops": self.ops,
            "server": {k: server[k] for k in ("rss_mb", "fds", "threads", "shm_maps")},
            "children": [
                {k: c[k] for k in ("pid", "state", "rss_mb", "fds", "threads", "cmd")} for c in children
            ],
            "zombies": sum(c["state"] == "Z" for c in children),
            "home": _home_facts(self.home),
            "ms": _route_times(self.client),
        }
        self.rows.append(row)
        kids = " ".join(
            f"{c['pid']}:{c['state']}:{c['rss_mb']:.0f}M/{c['fds']}fd/{c['threads']}t" for c in children
        )
        files = sum(v[1] for v in row["home"].values())
        print(
            f"{label:<22} ops {self.ops:5d} server {server['rss_mb']:7.1f} MB {server['fds']:4d} fd "
            f"{server['threads']:3d} thr {server['shm_maps']:3d} shm | home {files} files | ms {row['ms']} | {kids}",
            flush=True,
        )

    # -- training -----------------------------------------------------------------------------

    def _wait(self, job_id: str, statuses: set[str], timeout: float = 300) -> dict[str, Any]:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            job = self.client.get("/api/train/status").json()["job"]
            if job and job["id"] == job_id and job["status"] in statuses:
                return job
            time.sleep(0.1)
        raise RuntimeError(f"job {job_id} not {statuses} in {timeout} s")

    def _wait_step(self, job_id: str, step: int, timeout: float = 300) -> bool:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            job = self.client.get("/api/train/status").json()["job"]
            if job and job["id"] == job_id:
                if job["status"] not in ("queued", "starting", "running"):
                    return False
                if (job.get("step") or 0) >= step:
                    return True
            time.sleep(0.05)
        raise RuntimeError(f"job {job_id} did not reach step {step}")

    def _idle(self) -> None:
        deadline = time.monotonic() + 120
        while self.client.get("/api/train/status").json()["busy"]:
            if time.monotonic() > deadline:
                raise RuntimeError("the GPU was not freed")
            time.sleep(0.05)

    def training(self, model: str, runs: int) -> list[str]:
        files = [("files", (f"s{i}.png", _png(i))) for i in range(6)]
        files += [("files", (f"s{i}.txt", f"shape {i}".encode())) for i in range(6)]
        assert self.client.post("/api/datasets/shapes/files", files=files).status_code == 201
        config = {"family": "flux", "base_model": model, "data_dir": "shapes", "resolution": 32,
                  "steps": 4, "save_every": 1}  # fmt: skip
        saved: list[str] = []
        done: list[str] = []
        for i in range(runs):
            kind = i % 5
            if kind == 3 and saved:
                answer = self.client.post(
                    f"/api/runs/{saved.pop()}/resume", json={"queue": False, "settings": {"steps": 8}}
                )
            else:
                answer = self.client.post(
                    "/api/train/start", json={"config": {**config, "steps": 2 + i % 3}, "queue": False}
                )
            if answer.status_code != 201:
                raise RuntimeError(f"start refused: {answer.status_code} {answer.text[:500]}")
            job = answer.json()["id"]
            if kind in (1, 2) and self._wait_step(job, 1):
                self.client.post("/api/train/stop", json={"save": kind == 1})
            final = self._wait(job, {"completed", "stopped", "cancelled", "failed", "interrupted"})
            self._idle()
            if final["status"] == "failed":
                print("  failed:", final.get("error"), flush=True)
            if kind == 1:
                saved.append(job)
            done.append(job)
            if kind == 4:
                gone = self.client.delete(f"/api/runs/{done[0]}")
                print(f"  delete {done[0]}: {gone.status_code}", flush=True)
                done.pop(0)
            self.ops += 1
            if (i + 1) % 6 == 0:
                self.measure(f"train {i + 1}")
        return done

    # -- generation ---------------------------------------------------------------------------

    def generations(self, model: str, count: int, loras: list[str], every: int = 25) -> None:
        body = {
            "family": "flux",
            "base_model": model,
            "prompt": "a shape",
            "steps": 2,
            "width": 32,
            "height": 32,
        }

        def one(i: int) -> None:
            extra: dict[str, Any] = {"seed": i}
            if loras and i % 3 == 0:
                extra["loras"] = [{"name": loras[i % len(loras)]}]
            if i % 10 == 7:  # cancelled: by its request id
                rid = uuid.uuid4().hex
                holder: list[Any] = []
                thread = threading.Thread(
                    target=lambda: holder.append(
                        self.client.post(
                            "/api/generate", json={**body, **extra, "request_id": rid}, timeout=300
                        )
                    )
                )
                thread.start()
                time.sleep(0.3)
                self.client.post(f"/api/generate/{rid}/cancel")
                thread.join()
                return
            if i % 10 == 8:  # the client leaves
                with contextlib.suppress(httpx.TimeoutException):
                    self.client.post("/api/generate", json={**body, **extra}, timeout=0.5)
                return
            answer = self.client.post("/api/generate", json={**body, **extra}, timeout=300)
            if answer.status_code not in (200, 201):
                print(f"  generate {i}: {answer.status_code} {answer.text[:300]}", flush=True)

        i = 0
        while i < count:
            if i % 20 == 10:  # several at once
                threads = [threading.Thread(target=one, args=(i + k,)) for k in range(4)]
                for t in threads:
                    t.start()
                for t in threads:
                    t.join()
                i += 4
            else:
                one(i)
                i += 1
            self.ops += 1
            if i // every != (i - 1) // every or i >= count:
                self.measure(f"generate {i}")

    # -- data, captions, streams, polls -------------------------------------------------------

    def data(self, edits: int, vlm: str | None) -> None:
        for i in range(edits):
            name = f"d{i % 5}"
            files = [("files", (f"x{i}.png", _png(i))), ("files", (f"x{i}.txt", b"first"))]
            assert self.client.post(f"/api/datasets/{name}/files", files=files).status_code == 201
            put = self.client.put(f"/api/datasets/{name}/captions/x{i}.png", json={"caption": f"edited {i}"})
            if put.status_code != 200:
                print(f"  caption edit: {put.status_code} {put.text[:200]}", flush=True)
            if i % 2:
                self.client.delete(f"/api/datasets/{name}/images/x{i}.png")
            if i % 10 == 9:
                self.client.delete(f"/api/datasets/d{(i // 10) % 5}")
            self.ops += 1
            if (i + 1) % 25 == 0:
                self.measure(f"data {i + 1}")
        if vlm and edits:
            for _ in range(3):
                answer = self.client.post(
                    "/api/datasets/shapes/caption", json={"model": vlm, "max_tokens": 4, "overwrite": True}
                )
                if answer.status_code != 202:
                    print(f"  caption job: {answer.status_code} {answer.text[:300]}", flush=True)
                    break
                job = answer.json()["id"]
                deadline = time.monotonic() + 300
                while self.client.get(f"/api/captions/{job}").json()["status"] in ("queued", "running"):
                    if time.monotonic() > deadline:
                        raise RuntimeError("caption job did not end")
                    time.sleep(0.2)
                self.ops += 1
            self.measure("caption jobs 3")

    def streams(self, count: int) -> None:
        for i in range(count):
            route = ("/api/train/events", "/api/captions/events", "/api/models/events")[i % 3]
            try:
                with (
                    httpx.Client(base_url=self.base, timeout=httpx.Timeout(5, read=0.3)) as c,
                    c.stream("GET", route, params={"after": 0}) as resp,
                ):
                    for _line in resp.iter_lines():
                        pass
            except httpx.TimeoutException:
                pass  # the client drops the stream
            self.ops += 1
        if count:
            self.measure(f"streams {count}")

    def polls(self, count: int) -> None:
        routes = (*STATUS_ROUTES, "/api/info", "/api/loras", "/api/models")
        for i in range(count):
            self.client.get(routes[i % len(routes)]).raise_for_status()
            self.ops += 1
            if (i + 1) % 1000 == 0 or i + 1 == count:
                self.measure(f"polls {i + 1}")


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--runs", type=int, default=24)
    parser.add_argument("--generations", type=int, default=100)
    parser.add_argument("--generate-every", type=int, default=25, help="measure after this many generations")
    parser.add_argument("--edits", type=int, default=50)
    parser.add_argument("--streams", type=int, default=60)
    parser.add_argument("--polls", type=int, default=1000)
    parser.add_argument("--home", type=Path, default=None)
    parser.add_argument("--out", type=Path, default=None)
    args = parser.parse_args()

    from lorastudio.tiny import save_tiny_model, tiny_model_dir
    from lorastudio.tiny.vlm import save_tiny_vlm

    work = Path(tempfile.mkdtemp(prefix="soak-"))
    home = args.home or work / "home"
    model = str(save_tiny_model("flux", tiny_model_dir("flux", work / "models")))
    vlm = str(save_tiny_vlm(work / "models" / "vlm"))
    port = _free_port()
    env = {**os.environ, "LORASTUDIO_HOME": str(home), "HF_HUB_OFFLINE": "1"}
    log = work / "server.log"
    with open(log, "wb") as out:
        proc = subprocess.Popen(
            [sys.executable, "-m", "lorastudio.cli", "serve", "--port", str(port)],
            env=env,
            stdout=out,
            stderr=subprocess.STDOUT,
        )
    base = f"http://127.0.0.1:{port}"
    try:
        with httpx.Client(base_url=base, timeout=120) as client:
            _wait_up(client, proc, log)
            soak = Soak(home, proc.pid, client, base)
            soak.measure("start")
            done = soak.training(model, args.runs)
            loras = [
                r["output_name"] for r in client.get("/api/runs").json()["runs"] if r.get("lora_file")
            ] or []
            if not loras:
                loras = [
                    p.name for p in (home / "outputs").iterdir() if (p / f"{p.name}.safetensors").is_file()
                ]
            print("loras:", loras[:5], "runs kept:", len(done), flush=True)
            soak.generations(model, args.generations, loras[:3], args.generate_every)
            soak.data(args.edits, vlm)
            soak.streams(args.streams)
            soak.polls(args.polls)
            time.sleep(5)
            soak.measure("end")
        print(f"server log: {log} ({log.stat().st_size} B)")
        if args.out:
            args.out.write_text(json.dumps(soak.rows, indent=1))
    finally:
        end_server(proc)


if __name__ == "__main__":
    main()
