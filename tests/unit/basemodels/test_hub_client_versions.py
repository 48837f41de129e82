"""The hub's transport failures are caught whichever HTTP client huggingface_hub raises through:
httpx2 from huggingface_hub 2.0 on, httpx in the 1.x releases pyproject's floor allows
(RELIABILITY 1201). Before, `hub_errors` and the push imported httpx2 alone: on huggingface_hub
1.32-1.33 (httpx, no httpx2) every fetch and push raised ModuleNotFoundError.

The 1.x install is emulated here by hiding httpx2 (None in sys.modules: its import raises
ModuleNotFoundError, as where it is not installed); `scripts/check_deps.sh floors` runs the real one."""

from __future__ import annotations

import sys
from pathlib import Path

import httpx
import pytest

from lorastudio.basemodels.hubaccess import hub_errors
from lorastudio.basemodels.hubcache import hub_transport_errors
from lorastudio.errors import HubUploadError, ModelSourceError


@pytest.fixture
def huggingface_hub_1x(monkeypatch: pytest.MonkeyPatch) -> None:
    """No httpx2 to import, as beside huggingface_hub 1.x (the installed huggingface_hub, a 2.x
    that imports httpx2 itself, is imported first)."""
    import huggingface_hub.errors  # noqa: F401
    from huggingface_hub import CommitOperationAdd, HfApi  # noqa: F401 (imported before httpx2 hides)

    monkeypatch.setitem(sys.modules, "httpx2", None)


def test_the_transport_errors_are_httpxs_where_httpx2_is_absent(huggingface_hub_1x: None) -> None:
    assert hub_transport_errors() == (httpx.HTTPError,)


def test_a_fetch_that_cannot_connect_is_a_named_error_beside_huggingface_hub_1x(
    huggingface_hub_1x: None,
) -> None:
    expected = r"cannot reach the hub at .* for acme/flux: ConnectError"
    with pytest.raises(ModelSourceError, match=expected), hub_errors("acme/flux", None, "hf_token"):
        raise httpx.ConnectError("[Errno 111] Connection refused")


def test_a_push_that_cannot_connect_is_a_named_error_beside_huggingface_hub_1x(
    huggingface_hub_1x: None, studio_home: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from huggingface_hub import HfApi

    from lorastudio.lora.hub_push import _upload

    def refused(*args: object, **kwargs: object) -> None:
        raise httpx.ConnectError("[Errno 111] Connection refused")

    monkeypatch.setattr(HfApi, "create_commit", refused)
    with pytest.raises(
        HubUploadError, match=r"pushing to me/repo on .* failed: \[Errno 111\] Connection refused"
    ):
        _upload({"a.txt": b"x"}, "me/repo", "hf_token", create=False, private=False, name="a")
