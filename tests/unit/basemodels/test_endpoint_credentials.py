"""An HF_ENDPOINT with credentials (`https://user:secret@mirror.corp`, a hub mirror behind basic
auth) never appears in clear in what the studio says: fetch and push errors (CLI, API answers,
fetch records) and a run's log (session 29 observability audit). Before, every hub message
named the endpoint as the variable held it: `cannot reach the hub at
http://user:secret@host ...`."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from cli_runner import run_cli
from fake_hub_upload import WRITE_TOKEN, UploadHub, UploadHubServer
from lorastudio.basemodels.hubcache import hide_userinfo
from lorastudio.errors import HubUploadError, LorastudioError
from ports import free_port

SECRET = "Mirror-Pass-7f3a9c"


@pytest.fixture
def mirror(monkeypatch: pytest.MonkeyPatch) -> str:
    """HF_ENDPOINT: a mirror with credentials on a port nothing listens on, the hub client online."""
    from huggingface_hub import constants

    url = f"http://mirror-user:{SECRET}@127.0.0.1:{free_port()}"
    monkeypatch.setenv("HF_ENDPOINT", url)
    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", False)
    return url


def test_a_fetch_that_cannot_reach_the_mirror_does_not_show_its_password(
    mirror: str, studio_home: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    code, out = run_cli(capsys, monkeypatch, "models", "fetch", "acme/flux")
    assert code != 0 and "cannot reach the hub at http://***@127.0.0.1:" in out, out
    assert SECRET not in out


def test_a_push_refused_by_the_mirror_does_not_show_its_password(
    studio_home: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A push to a repo the mirror does not have: "no model repo 'me/repo' on <endpoint>"."""
    from huggingface_hub import constants

    from lorastudio.lora.hub_push import _upload

    with UploadHubServer(UploadHub(repos={})) as fake:
        monkeypatch.setenv("HF_ENDPOINT", fake.url.replace("http://", f"http://mirror-user:{SECRET}@"))
        monkeypatch.setattr(constants, "HF_HUB_OFFLINE", False)
        with pytest.raises(LorastudioError) as caught:
            _upload({"a.txt": b"x"}, "me/repo", WRITE_TOKEN, create=False, private=False, name="a")
    assert SECRET not in str(caught.value) and "http://***@127.0.0.1:" in str(caught.value), caught.value


@pytest.mark.slow  # huggingface_hub retries the connection for ~25 s
def test_a_push_that_cannot_reach_the_hub_is_a_named_error(mirror: str, studio_home: Path) -> None:
    """Before, httpx2.ConnectError (not an OSError) went past every handler: a traceback from
    `lora push`, a 500 from the API."""
    from lorastudio.lora.hub_push import _upload

    with pytest.raises(HubUploadError) as caught:
        _upload({"a.txt": b"x"}, "me/repo", "hf_token", create=False, private=False, name="a")
    message = str(caught.value)
    assert (
        message.startswith("pushing to me/repo on http://***@127.0.0.1:") and "Connection refused" in message
    )
    assert SECRET not in message


LOG_SCRIPT = """
import logging, sys
from pathlib import Path
from lorastudio.jobs.worker_log import WorkerLog
log = WorkerLog(Path(sys.argv[1])).start()
logging.getLogger("huggingface_hub.utils._http").warning(
    "'[Errno 111] Connection refused' thrown while requesting HEAD %s/acme/flux/resolve/main/x.json", sys.argv[2]
)
print("retrying " + sys.argv[2])
log.close()
"""


def test_a_runs_log_hides_a_urls_credentials(tmp_path: Path) -> None:
    """The hub client's retry line (a log record) and printed text name the endpoint in full."""
    path = tmp_path / "run.log"
    url = f"https://mirror-user:{SECRET}@mirror.corp/hf"
    done = subprocess.run(
        [sys.executable, "-c", LOG_SCRIPT, str(path), url], capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, done.stderr
    text = path.read_text()
    assert SECRET not in text and text.count("https://***@mirror.corp/hf") == 2, text


def test_hide_userinfo() -> None:
    assert hide_userinfo(f"at https://u:{SECRET}@h.corp/x and http://tok@h:8080/") == (
        "at https://***@h.corp/x and http://***@h:8080/"
    )
    kept = "https://huggingface.co/acme/flux and a@b.c and user@host:path"
    assert hide_userinfo(kept) == kept
