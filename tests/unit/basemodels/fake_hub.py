"""A tiny Hugging Face Hub on 127.0.0.1 for the fetch tests: just the endpoints that
huggingface_hub's snapshot_download and repo_info use, served by a real HTTP server.

- GET  /api/models/{owner}/{name}[/revision/{rev}]      repo info (sha, siblings, gated, private)
- GET  /api/models/{owner}/{name}/tree/{rev}?recursive=  the file list with sizes
- HEAD /{owner}/{name}/resolve/{rev}/{path}              ETag, X-Repo-Commit, Content-Length
- GET  /{owner}/{name}/resolve/{rev}/{path}              the bytes, honouring `Range: bytes=N-`

Access: a `private` repo answers 401 + X-Error-Code RepoNotFound without the right token; a
`gated` repo lists its files but answers 401 (no token) / 403 (wrong token) + X-Error-Code
GatedRepo on its files, like the real Hub. Faults for the resume tests: `drop_after[path] = n`
sends n bytes of the next GET of `path` and closes the connection (once); `hold[path]` makes GETs
of `path` wait on that event before sending.
"""

from __future__ import annotations

import hashlib
import json
import re
import threading
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from urllib.parse import parse_qs, unquote, urlsplit

TOKEN = "hf_sEcReT_t0ken_for_tests_123456"  # the token the fake hub accepts for gated/private repos


@dataclass
class FakeRepo:
    files: dict[str, bytes]
    commit: str = "0123456789abcdef0123456789abcdef01234567"
    private: bool = False
    gated: bool = False


@dataclass
class Request:
    method: str
    path: str
    range: str | None
    authorization: str | None


@dataclass
class FakeHub:
    token: str
    repos: dict[str, FakeRepo] = field(default_factory=dict)
    drop_after: dict[str, int] = field(default_factory=dict)
    hold: dict[str, threading.Event] = field(default_factory=dict)
    requests: list[Request] = field(default_factory=list)
    url: str = ""

    def gets(self, filename: str) -> list[Request]:
        """GET requests of a file's bytes (any repo), in order."""
        return [r for r in self.requests if r.method == "GET" and r.path.endswith("/" + filename)]


def folder_files(folder: Path) -> dict[str, bytes]:
    """Every file under `folder`, by its '/'-separated relative path."""
    return {
        p.relative_to(folder).as_posix(): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()
    }


def flux_repo_files(tiny_flux: Path) -> dict[str, bytes]:
    """The tiny FLUX.1 pipeline as a hub repo, plus what a real repo carries that training does
    not need: a single-file checkpoint at the root, .bin twins, an fp16 variant, a GGUF, ONNX
    and flax exports, a README."""
    files = {p: b for p, b in folder_files(tiny_flux).items() if p != "lorastudio_tiny.json"}
    files.update(
        {
            "README.md": b"# tiny flux\n",
            "flux1-tiny.safetensors": b"single-file checkpoint" * 10,
            "flux1-tiny-Q4_K_S.gguf": b"GGUF" * 10,
            "transformer/diffusion_pytorch_model.bin": b"bin twin" * 10,
            "transformer/diffusion_pytorch_model.fp16.safetensors": b"fp16" * 10,
            "vae/diffusion_flax_model.msgpack": b"flax" * 10,
            "onnx/model.onnx": b"onnx" * 10,
        }
    )
    return files


_INFO = re.compile(r"^/api/models/([^/]+/[^/]+?)(?:/revision/([^/]+))?$")
_TREE = re.compile(r"^/api/models/([^/]+/[^/]+)/tree/([^/]+)$")
_RESOLVE = re.compile(r"^/([^/]+/[^/]+)/resolve/([^/]+)/(.+)$")


def _handler(hub: FakeHub) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, format: str, *args: object) -> None:  # quiet
            return

        def _send(self, status: int, body: bytes = b"", headers: dict[str, str] | None = None) -> None:
            self.send_response(status)
            for k, v in (headers or {}).items():
                self.send_header(k, v)
            if "Content-Length" not in (headers or {}):
                self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            if self.command != "HEAD":
                self.wfile.write(body)

        def _json(self, data: object, status: int = 200, headers: dict[str, str] | None = None) -> None:
            body = json.dumps(data).encode()
            self._send(status, body, {"Content-Type": "application/json", **(headers or {})})

        def _authorised(self, repo: FakeRepo) -> int:
            """0 when allowed, else the status to answer (401 no token, 403 wrong token)."""
            if not (repo.private or repo.gated):
                return 0
            auth = self.headers.get("authorization")
            if auth == f"Bearer {hub.token}":
                return 0
            return 401 if auth is None else 403

        def do_HEAD(self) -> None:
            self._serve()

        def do_GET(self) -> None:
            self._serve()

        def _serve(self) -> None:
            parts = urlsplit(self.path)
            path = unquote(parts.path)
            hub.requests.append(
                Request(self.command, path, self.headers.get("range"), self.headers.get("authorization"))
            )
            if m := _TREE.match(path):
                return self._tree(m.group(1), unquote(m.group(2)), parse_qs(parts.query))
            if m := _INFO.match(path):
                return self._info(m.group(1), unquote(m.group(2) or "main"))
            if m := _RESOLVE.match(path):
                return self._resolve(m.group(1), unquote(m.group(2)), m.group(3))
            self._json({"error": "not found"}, 404)

        def _repo(self, repo_id: str, rev: str) -> FakeRepo | None:
            repo = hub.repos.get(repo_id)
            if repo is None or (repo.private and self._authorised(repo)):
                self._json({"error": "Repository not found"}, 401, {"X-Error-Code": "RepoNotFound"})
                return None
            if rev not in ("main", repo.commit):
                self._json({"error": "Invalid rev id"}, 404, {"X-Error-Code": "RevisionNotFound"})
                return None
            return repo

        def _info(self, repo_id: str, rev: str) -> None:
            if (repo := self._repo(repo_id, rev)) is None:
                return
            siblings = [{"rfilename": p} for p in repo.files]
            self._json(
                {
                    "id": repo_id,
                    "sha": repo.commit,
                    "private": repo.private,
                    "gated": "manual" if repo.gated else False,
                    "siblings": siblings,
                }
            )

        def _tree(self, repo_id: str, rev: str, query: dict[str, list[str]]) -> None:
            if (repo := self._repo(repo_id, rev)) is None:
                return
            entries = [
                {"type": "file", "path": p, "size": len(b), "oid": hashlib.sha1(b).hexdigest()}
                for p, b in repo.files.items()
            ]
            self._json(entries)

        def _resolve(self, repo_id: str, rev: str, filename: str) -> None:
            if (repo := self._repo(repo_id, rev)) is None:
                return
            denied = self._authorised(repo)
            if denied:
                return self._json(
                    {"error": "Access to this repo is restricted"},
                    denied,
                    {"X-Error-Code": "GatedRepo", "X-Error-Message": "gated repo"},
                )
            data = repo.files.get(filename)
            commit_header = {"X-Repo-Commit": repo.commit}
            if data is None:
                return self._json(
                    {"error": "Entry not found"}, 404, {"X-Error-Code": "EntryNotFound", **commit_header}
                )
            headers = {
                **commit_header,
                "ETag": f'"{hashlib.sha256(data).hexdigest()}"',
                "Accept-Ranges": "bytes",
                "Content-Type": "application/octet-stream",
            }
            if self.command == "HEAD":
                return self._send(200, b"", {**headers, "Content-Length": str(len(data))})
            if filename in hub.hold:
                hub.hold[filename].wait(30)
            start = 0
            rng = self.headers.get("range")
            if rng and (m := re.fullmatch(r"bytes=(\d+)-", rng.strip())):
                start = int(m.group(1))
            body = data[start:]
            status = 206 if start else 200
            if start:
                headers["Content-Range"] = f"bytes {start}-{len(data) - 1}/{len(data)}"
            drop = hub.drop_after.pop(filename, None)
            self.send_response(status)
            for k, v in {**headers, "Content-Length": str(len(body))}.items():
                self.send_header(k, v)
            self.end_headers()
            if drop is not None:  # send part of it, then cut the connection
                self.wfile.write(body[:drop])
                self.wfile.flush()
                self.close_connection = True
                return
            self.wfile.write(body)

    return Handler


class FakeHubServer:
    """Serve a FakeHub on 127.0.0.1 (free port) in a daemon thread; use as a context manager."""

    def __init__(self, hub: FakeHub):
        self.hub = hub
        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), _handler(hub))
        self.httpd.daemon_threads = True
        hub.url = f"http://127.0.0.1:{self.httpd.server_address[1]}"
        # polled every 50 ms: shutdown() waits up to one poll (the default 0.5 s, per server)
        self.thread = threading.Thread(
            target=self.httpd.serve_forever, kwargs={"poll_interval": 0.05}, name="fake-hub", daemon=True
        )

    def __enter__(self) -> FakeHub:
        self.thread.start()
        return self.hub

    def __exit__(self, *exc: object) -> None:
        for event in self.hub.hold.values():
            event.set()
        self.httpd.shutdown()
        self.httpd.server_close()
