"""The lora-targets check's child (`python -m lorastudio.training.target_check`) run in the test
process: `subprocess.run` as jobs/target_check calls it, answered by the same `main()` on the same
stdin bytes, its one stdout line parsed by jobs/target_check as the child's.

What a real child costs (~6-7 CPU s of torch and diffusers imports) buys nothing a test reading the
engine's answer needs; the real child runs in test_api_lora_targets_preflight's first test and in
test_api_server_imports. The child's environment as the server gave it is honoured where it
decides the answer: HF_HUB_OFFLINE (the server sets it for the child: the hub is never asked
there), applied to huggingface_hub's constants for the call.
"""

from __future__ import annotations

import contextlib
import io
import subprocess
import sys
from types import SimpleNamespace
from unittest import mock


def child_in_this_process(
    args: list[str], *, input: str, env: dict[str, str] | None = None, **_: object
) -> subprocess.CompletedProcess:
    """`subprocess.run(args, input=..., env=...)` of the check's child, run here."""
    assert args[1:] == ["-m", "lorastudio.training.target_check"], args
    from huggingface_hub import constants

    from lorastudio.training import target_check as child

    offline = (env or {}).get("HF_HUB_OFFLINE", "") not in ("", "0")
    out = io.StringIO()
    with (
        mock.patch.object(sys, "stdin", io.TextIOWrapper(io.BytesIO(input.encode()), encoding="utf-8")),
        mock.patch.object(constants, "HF_HUB_OFFLINE", offline),
        contextlib.redirect_stdout(out),
    ):
        code = child.main()
    return subprocess.CompletedProcess(args, code, out.getvalue(), "")


# jobs/target_check's `subprocess` with the child above: monkeypatch.setattr(target_check,
# "subprocess", IN_PROCESS)
IN_PROCESS = SimpleNamespace(run=child_in_this_process, TimeoutExpired=subprocess.TimeoutExpired)
