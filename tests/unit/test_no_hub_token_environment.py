"""RELIABILITY 1120: no process of the studio puts a hub token in an environment (every child a
library starts from os.environ would inherit it in its /proc/PID/environ): the hub token is
held in memory (lorastudio/hub_token.py) and handed to each hub call as `token=`. So src/ names
huggingface_hub's token variables once, in the list of secrets a child's environment is cleared
of and the CLI takes out of its own (hub_token.HUB_TOKEN_NAMES), and never writes or builds one."""

from __future__ import annotations

import re
from pathlib import Path

import lorastudio

SRC = Path(lorastudio.__file__).parent
NAME = re.compile(r"""["'](HF_TOKEN|HUGGING_FACE_HUB_TOKEN)["']|\b(HF_TOKEN|HUGGING_FACE_HUB_TOKEN)\s*=""")
ALLOWED = {
    (
        "hub_token.py",
        'HUB_TOKEN_NAMES = ("HF_TOKEN", "HUGGING_FACE_HUB_TOKEN")  # what huggingface_hub reads',
    )
}


def test_src_names_the_hub_token_variables_only_to_clear_them() -> None:
    found = []
    for path in sorted(SRC.rglob("*.py")):
        for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
            if NAME.search(line) and (path.relative_to(SRC).as_posix(), line.strip()) not in ALLOWED:
                found.append(f"{path.relative_to(SRC)}:{number}: {line.strip()}")
    assert found == [], found
