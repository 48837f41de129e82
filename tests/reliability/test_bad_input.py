"""Property-based bad input against the FastAPI app in-process (TestClient): dataset names, file
names, multipart bodies, captions and config values. Every request must get a 4xx with a message
(or a success that stayed inside the studio), never a 5xx; no file may appear outside the studio
home; a refused request must leave the datasets, outputs and run records exactly as they were.

Cases per run (always on): 250 dataset names, 250 file names, 150 multipart bodies, 150
captions, 200 preflight configs and 100 start configs = 1,100 generated cases."""

from __future__ import annotations

import io
import json
import math
import os
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any
from urllib.parse import quote

import pytest
from fastapi.testclient import TestClient
from hypothesis import HealthCheck, given
from hypothesis import settings as hsettings
from hypothesis import strategies as st
from PIL import Image

from live_server import LOOPBACK
from lorastudio.api.app import create_app
from lorastudio.jobs.dataset_claims import CLAIMS_DIR
from lorastudio.jobs.worker import WorkerArgs
from lorastudio.settings import Settings

COUNTS: dict[str, int] = {}
RESERVED = ["CON", "con.png", "NUL", "nul.txt", "COM1", "LPT9.jpg", "AUX", "PRN.webp", "CLOCK$"]
TRAVERSAL = ["..", ".", "../x", "..\\x", "/etc", "/etc/passwd", "C:\\Windows", "a/../../b", "~", "~root"]
NASTY = [*RESERVED, *TRAVERSAL, "", " ", "a ", " a", "a.", ".hidden", "a\x00b", "\x00", "x" * 101, "x" * 5000]
NASTY += ["😀" * 99, "é" * 100, "ﬁ" * 90, "a\nb", "a\tb", 'a"b', "a<b>", "a|b", "a?b", "a*b", "a:b"]
NAME_ALPHABET = st.characters(codec="utf-8", exclude_characters="\ud800")


def names() -> st.SearchStrategy[str]:
    return st.one_of(
        st.sampled_from(NASTY),
        st.text(NAME_ALPHABET, min_size=1, max_size=120),
        st.text(st.sampled_from("./\\:\x00 .~aZ😀é"), min_size=1, max_size=12),
        st.builds(lambda s, n: s * n, st.sampled_from(["😀", "あ", "é", "a"]), st.integers(60, 130)),
    )


def _png() -> bytes:
    buf = io.BytesIO()
    Image.new("RGB", (8, 8), (200, 10, 10)).save(buf, format="PNG")
    return buf.getvalue()


PNG = _png()


def _tree(root: Path) -> dict[str, tuple[int, int]]:
    """Every file and folder under `root` (except the run store) -> (size, mtime_ns) of a file,
    (0, 0) for a folder (a folder's mtime moves when a staging entry comes and goes)."""
    out = {}
    for p in root.rglob("*"):
        if p.name.startswith("lorastudio.db"):
            continue
        st_ = p.lstat()
        out[str(p.relative_to(root))] = (st_.st_size, st_.st_mtime_ns) if p.is_file() else (0, 0)
    return out


def hold_until_stopped(args: WorkerArgs, events: Any, stop_event: Any, stop_save: Any) -> None:
    """A worker that trains nothing (an accepted start must not train here) and stays alive until
    it is stopped (the server's shutdown kills it). An accepted start's job thus stays live, with
    its dataset claim held, from its 201 to the end of the test: no later example's "before" and
    "after" snapshots can straddle the moment it ends (a worker that exited at once made its job
    fail, and its claim files vanish, during whichever example ran ~2-3 s later), and every later
    valid config is refused as busy (409) while that claim is held, which must change nothing."""
    stop_event.wait()


class Studio:
    """The app under test, the folder around the studio home, and the invariant checks."""

    def __init__(self, client: TestClient, settings: Settings):
        self.client = client
        self.settings = settings
        self.outside = settings.home.parent  # the studio home and its surroundings

    def snapshot(self) -> tuple[dict[str, tuple[int, int]], int]:
        """The files around the home and the runs the app's store holds (`GET /api/runs`'s `total`
        read from that store in this thread: 0.1 against 7 ms of CPU a request, twice an example)."""
        _runs, total, _after = self.client.app.state.store.runs_page(1)
        return _tree(self.outside), total

    def check(self, response: Any, before: tuple[dict, int], kind: str) -> None:
        COUNTS[kind] = COUNTS.get(kind, 0) + 1
        assert response.status_code < 500, (kind, response.status_code, response.text[:500])
        after_tree, after_runs = self.snapshot()
        home = str(self.settings.home.relative_to(self.outside))
        escaped = [
            p for p in after_tree if p not in before[0] and not (p == home or p.startswith(home + os.sep))
        ]
        assert escaped == [], f"files outside the studio home: {escaped}"
        if response.status_code >= 400:
            body = response.json()
            assert body.get("detail"), f"{kind}: {response.status_code} without a message"
            assert after_tree == before[0], f"{kind}: a refused request changed files"
            assert after_runs == before[1], f"{kind}: a refused request recorded a run"


@pytest.fixture
def studio(settings: Settings, shapes: Path) -> Iterator[Studio]:
    with TestClient(
        create_app(settings, worker_target=hold_until_stopped),
        raise_server_exceptions=False,
        base_url=LOOPBACK,
    ) as client:
        yield Studio(client, settings)
    # the server stopped: every claim (an accepted start's, an upload's) was released with nothing left
    assert not (settings.home / CLAIMS_DIR).exists(), sorted(os.listdir(settings.home / CLAIMS_DIR))


FAST = hsettings(
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
    database=None,
    derandomize=True,
)


@hsettings(FAST, max_examples=250)
@given(name=names(), op=st.sampled_from(["get", "upload", "caption", "delete", "thumb"]))
def test_dataset_names(studio: Studio, name: str, op: str) -> None:
    before = studio.snapshot()
    path = f"/api/datasets/{quote(name, safe='')}"
    c = studio.client
    if op == "get":
        resp = c.get(path)
    elif op == "upload":
        resp = c.post(f"{path}/files", files=[("files", ("a.png", PNG))])
    elif op == "caption":
        resp = c.put(f"{path}/captions/red_circle.png", json={"caption": "x"})
    elif op == "delete":
        resp = c.delete(f"{path}/images/red_circle.png")
    else:
        resp = c.get(f"{path}/thumbnails/red_circle.png")
    studio.check(resp, before, "dataset_name")
    if resp.status_code == 201:  # accepted: the dataset is a direct child of the datasets root
        assert (studio.settings.datasets_dir / name / "a.png").is_file()


@hsettings(FAST, max_examples=250)
@given(
    file_names=st.lists(st.one_of(names(), names().map(lambda n: n + ".png")), min_size=1, max_size=3),
    op=st.sampled_from(["upload", "caption", "delete", "thumb"]),
)
def test_file_names(studio: Studio, file_names: list[str], op: str) -> None:
    before = studio.snapshot()
    c = studio.client
    first = quote(file_names[0], safe="")
    if op == "upload":
        files = [("files", (n, PNG if n.lower().endswith(".png") else b"a caption")) for n in file_names]
        resp = c.post("/api/datasets/upl/files", files=files)
    elif op == "caption":
        resp = c.put(f"/api/datasets/shapes/captions/{first}", json={"caption": "new"})
    elif op == "delete":
        resp = c.delete(f"/api/datasets/shapes/images/{first}")
    else:
        resp = c.get(f"/api/datasets/shapes/thumbnails/{first}")
    studio.check(resp, before, "file_name")
    if op == "upload" and resp.status_code == 201:
        for n in resp.json()["committed"]:
            assert (studio.settings.datasets_dir / "upl" / n).is_file()


@hsettings(FAST, max_examples=150)
@given(
    body=st.one_of(
        st.binary(max_size=2000),
        st.builds(
            lambda b, parts: (
                b"".join(b"--" + b + b"\r\n" + p + b"\r\n" for p in parts) + b"--" + b + b"--\r\n"
            ),
            st.just(b"BOUNDARY"),
            st.lists(st.binary(max_size=300), max_size=4),
        ),
        st.builds(
            lambda disp, data: (
                b"--BOUNDARY\r\nContent-Disposition: " + disp + b"\r\n\r\n" + data + b"\r\n--BOUNDARY--\r\n"
            ),
            st.sampled_from(
                [
                    b'form-data; name="f"; filename="../../evil.png"',
                    b'form-data; name="f"; filename="/etc/evil.png"',
                    b'form-data; name="f"; filename="a\x00.png"',
                    b"form-data; name=\"f\"; filename*=UTF-8''%2e%2e%2fevil.png",
                    b'form-data; name="f"; filename="a.png',
                    b'form-data; name="f"',
                    b"form-data",
                    b'form-data; name="f"; filename="\xff\xfe.png"',
                    b'form-data; name="f"; filename="ok.png"',
                ]
            ),
            st.one_of(st.just(PNG), st.just(PNG[: len(PNG) // 2]), st.binary(max_size=500)),
        ),
    ),
    content_type=st.sampled_from(
        [
            "multipart/form-data; boundary=BOUNDARY",
            "multipart/form-data",
            "multipart/form-data; boundary=",
            "multipart/form-data; boundary=" + "x" * 300,
            "application/octet-stream",
            "text/plain",
        ]
    ),
)
def test_multipart_bodies(studio: Studio, body: bytes, content_type: str) -> None:
    before = studio.snapshot()
    resp = studio.client.post("/api/datasets/mp/files", content=body, headers={"content-type": content_type})
    studio.check(resp, before, "multipart")
    if resp.status_code == 201:  # a well-formed part with a safe name (e.g. latin-1 "ÿ.png")
        for n in resp.json()["committed"]:
            assert (studio.settings.datasets_dir / "mp" / n).is_file()


@hsettings(FAST, max_examples=150)
@given(
    caption=st.one_of(
        st.binary(max_size=300),
        st.builds(lambda b, n: b * n, st.binary(min_size=1, max_size=8), st.integers(70_000, 80_000)),
        st.text(max_size=200).map(lambda t: t.encode("utf-8", "surrogatepass")),
        st.sampled_from([b"\xff\xfe\x00a", b"\xc3\x28", b"\xed\xa0\x80", b"caption\x00nul", b"x" * 70_000]),
    ),
    via=st.sampled_from(["upload", "put", "metadata"]),
)
def test_captions(studio: Studio, caption: bytes, via: str) -> None:
    before = studio.snapshot()
    c = studio.client
    if via == "upload":
        resp = c.post("/api/datasets/shapes/files", files=[("files", ("red_circle.txt", caption))])
    elif via == "metadata":
        line = b'{"file_name": "red_circle.png", "text": "' + caption + b'"}\n'
        resp = c.post("/api/datasets/shapes/files", files=[("files", ("metadata.jsonl", line))])
    else:
        text = caption.decode("utf-8", "replace")
        resp = c.put("/api/datasets/shapes/captions/red_circle.png", json={"caption": text})
    studio.check(resp, before, "caption")


NUMERIC_FIELDS = [
    "steps", "num_epochs", "batch_size", "grad_accum", "learning_rate", "lr_warmup_steps", "weight_decay",
    "max_grad_norm", "seed", "lora_rank", "lora_alpha", "lora_dropout", "resolution", "save_every",
    "keep_last", "caption_dropout", "latent_cache_max_gb", "snr_gamma", "logit_mean", "logit_std",
    "flow_shift", "guidance", "max_sequence_length", "cache_variants",
]  # fmt: skip
BAD_VALUES = st.one_of(
    st.sampled_from([math.nan, math.inf, -math.inf, -1, -1e300, 1e300, 10**30, -(10**30), 2**63, 0]),
    st.sampled_from(["", "12", "nan", "1e999", None, [], {}, [1], {"a": 1}, True, False]),
    st.floats(allow_nan=True, allow_infinity=True),
    st.integers(min_value=-(2**70), max_value=2**70),
    st.text(max_size=20),
)


def _post_json(studio: Studio, url: str, body: dict) -> Any:
    """POST `body` as JSON, NaN and Infinity written as the bare tokens many clients send."""
    data = json.dumps(body, allow_nan=True)
    return studio.client.post(url, content=data, headers={"content-type": "application/json"})


@pytest.fixture
def base_config(tiny_model: Callable[[str], Path]) -> dict[str, Any]:
    return {"family": "flux", "base_model": str(tiny_model("flux")), "data_dir": "shapes", "resolution": 32}


@hsettings(FAST, max_examples=200)
@given(
    field=st.sampled_from(
        [*NUMERIC_FIELDS, "family", "base_model", "data_dir", "output_name", "lora_targets"]
    ),
    value=BAD_VALUES,
)
def test_config_values_at_preflight(studio: Studio, base_config: dict, field: str, value: Any) -> None:
    before = studio.snapshot()
    resp = _post_json(studio, "/api/train/preflight", {"config": {**base_config, field: value}})
    studio.check(resp, before, "config_preflight")
    if resp.status_code == 200:
        assert not (isinstance(value, float) and not math.isfinite(value)), (field, value)


@hsettings(FAST, max_examples=100)
@given(field=st.sampled_from(NUMERIC_FIELDS), value=BAD_VALUES)
def test_config_values_at_start(studio: Studio, base_config: dict, field: str, value: Any) -> None:
    before = studio.snapshot()
    body = {"config": {**base_config, field: value}, "queue": False}
    resp = _post_json(studio, "/api/train/start", body)
    studio.check(resp, before, "config_start")
    if resp.status_code == 201:
        assert not (isinstance(value, float) and not math.isfinite(value)), (field, value)
        # its job is live and holds its dataset's read claim (released when the job ends)
        assert resp.json()["status"] in ("queued", "preparing"), resp.json()
        assert list((studio.settings.home / CLAIMS_DIR).glob("*.holder")), "an accepted start holds no claim"


def test_zz_cases_tried(studio: Studio) -> None:
    """Report how many generated cases ran in this session (>= 1,000 when the module ran whole)."""
    from reliability_helpers import record_figure

    total = sum(COUNTS.values())
    record_figure("bad_input", {"cases": COUNTS, "total": total, "server_errors": 0})
    if len(COUNTS) == 6:
        assert total >= 1000
