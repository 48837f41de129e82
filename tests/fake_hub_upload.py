"""A tiny Hugging Face Hub on 127.0.0.1 for the push tests: the endpoints huggingface_hub's
create_repo and create_commit use, served by a real HTTP server (like basemodels/fake_hub.py for
downloads).

- POST /api/validate-yaml                          a README's front matter: 400 + errors unless YAML
- POST /api/repos/create                          {name, organization, private} -> {url}; 409 if it exists
- POST /api/models/{owner}/{name}/preupload/{rev} every file "regular" (sent inline in the commit)
- POST /api/models/{owner}/{name}/commit/{rev}    NDJSON: header + base64 files -> {commitOid, commitUrl}

Access like the real Hub: no token or an unknown one -> 401 (a missing repo without a valid
token: 401 + X-Error-Code RepoNotFound); `read_only` tokens -> 403 on writes; a missing repo
with a valid token -> 404 + X-Error-Code RepoNotFound.
"""

from __future__ import annotations

import base64
import hashlib
import json
import re
import threading
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import unquote, urlsplit

import yaml

WRITE_TOKEN = "hf_wRiTe_t0ken_for_push_tests_1234"
READ_TOKEN = "hf_rEaD_t0ken_for_push_tests_12345"


@dataclass
class UploadHub:
    tokens: dict[str, str] = field(default_factory=lambda: {WRITE_TOKEN: "write", READ_TOKEN: "read"})
    repos: dict[str, dict[str, bytes]] = field(default_factory=dict)  # repo id -> {path: bytes}
    private: set[str] = field(default_factory=set)
    commits: list[dict] = field(default_factory=list)  # {"repo", "summary", "files"}
    requests: list[tuple[str, str]] = field(default_factory=list)
    cards: list[dict] = field(default_factory=list)  # parsed front matter of each validated README
    url: str = ""


_PRE = re.compile(r"^/api/models/([^/]+/[^/]+)/preupload/([^/]+)$")
_COMMIT = re.compile(r"^/api/models/([^/]+/[^/]+)/commit/([^/]+)$")


def _handler(hub: UploadHub) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, format: str, *args: object) -> None:  # quiet
            return

        def _json(self, data: object, status: int = 200, headers: dict[str, str] | None = None) -> None:
            body = json.dumps(data).encode()
            self.send_response(status)
            for k, v in {"Content-Type": "application/json", **(headers or {})}.items():
                self.send_header(k, v)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def _access(self) -> str | None:
            auth = self.headers.get("authorization") or ""
            return hub.tokens.get(auth.removeprefix("Bearer "))

        def do_POST(self) -> None:
            path = unquote(urlsplit(self.path).path)
            body = self.rfile.read(int(self.headers.get("content-length") or 0))
            hub.requests.append(("POST", path))
            access = self._access()
            if path == "/api/validate-yaml":
                return self._validate(json.loads(body)["content"])
            if path == "/api/repos/create":
                return self._create(json.loads(body or b"{}"), access)
            m = _PRE.match(path) or _COMMIT.match(path)
            if m is None:
                return self._json({"error": "not found"}, 404)
            repo = m.group(1)
            if repo not in hub.repos:
                status = 404 if access else 401
                return self._json({"error": "Repository not found"}, status, {"X-Error-Code": "RepoNotFound"})
            if access is None:
                return self._json({"error": "Invalid credentials in Authorization header"}, 401)
            if access != "write":
                return self._json({"error": "You don't have the rights to write to this repo"}, 403)
            if _PRE.match(path):
                files = json.loads(body)["files"]
                answer = [{"path": f["path"], "uploadMode": "regular", "shouldIgnore": False} for f in files]
                return self._json({"files": answer, "commitOid": "0" * 40})
            return self._commit(repo, body)

        def _validate(self, content: str) -> None:
            head = content.split("---\n", 2)
            try:
                meta = yaml.safe_load(head[1]) if content.startswith("---\n") and len(head) == 3 else None
            except yaml.YAMLError as err:
                return self._json({"errors": [{"message": str(err)}], "warnings": []}, 400)
            if not isinstance(meta, dict):
                return self._json({"errors": [{"message": "no metadata block"}], "warnings": []}, 400)
            hub.cards.append(meta)
            return self._json({"errors": [], "warnings": []})

        def _create(self, data: dict, access: str | None) -> None:
            if access is None:
                return self._json({"error": "Invalid credentials in Authorization header"}, 401)
            if access != "write":
                return self._json({"error": "You don't have the rights to create a repo"}, 403)
            repo = f"{data.get('organization') or 'me'}/{data['name']}"
            if repo in hub.repos:
                return self._json(
                    {"error": "You already created this model repo", "url": f"{hub.url}/{repo}"}, 409
                )
            hub.repos[repo] = {}
            if data.get("private") or data.get("visibility") == "private":
                hub.private.add(repo)
            return self._json({"url": f"{hub.url}/{repo}", "name": repo})

        def _commit(self, repo: str, body: bytes) -> None:
            summary, files = None, {}
            for line in body.decode().splitlines():
                item = json.loads(line)
                if item["key"] == "header":
                    summary = item["value"].get("summary")
                elif item["key"] == "file":
                    value = item["value"]
                    files[value["path"]] = base64.b64decode(value["content"])
            hub.repos[repo].update(files)
            oid = hashlib.sha1(repr(sorted(files)).encode() + str(len(hub.commits)).encode()).hexdigest()
            hub.commits.append({"repo": repo, "summary": summary, "files": files})
            self._json({"commitOid": oid, "commitUrl": f"{hub.url}/{repo}/commit/{oid}", "success": True})

    return Handler


class UploadHubServer:
    """Serve an UploadHub on 127.0.0.1 (free port) in a daemon thread; a context manager."""

    def __init__(self, hub: UploadHub):
        self.hub = hub
        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), _handler(hub))
        self.httpd.daemon_threads = True
        hub.url = f"http://127.0.0.1:{self.httpd.server_address[1]}"
        self.thread = threading.Thread(target=self.httpd.serve_forever, name="fake-upload-hub", daemon=True)

    def __enter__(self) -> UploadHub:
        self.thread.start()
        return self.hub

    def __exit__(self, *exc: object) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()
