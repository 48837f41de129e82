"""The true reason of a failed read through safetensors (no torch).

safetensors reports every failure to open a file (EACCES, ELOOP, ...) as
FileNotFoundError("No such file or directory: PATH") without an errno (RELIABILITY 950): a
checkpoint or LoRA another user could not read said it did not exist.
"""

from __future__ import annotations

import os
import re

from lorastudio.errors import os_error_text

_NO_SUCH_FILE = re.compile(r"No such file or directory: (.+)$", re.M)


def library_open_reason(err: BaseException) -> str:
    """The text of a failed read through safetensors (load_file, safe_open), with the true reason.
    safetensors reports every failure to open a file (EACCES, ELOOP, ...) as
    FileNotFoundError("No such file or directory: PATH") without an errno, so a checkpoint or LoRA
    another user could not read said it did not exist. The file it names is opened again (read
    only, not blocking) and that open's reason is given ("Permission denied: PATH"); the error's
    own text for any other error (one with an errno is the system's own) or when the file opens."""
    text = str(err) or type(err).__name__
    found = None if getattr(err, "errno", None) is not None else _NO_SUCH_FILE.search(text)
    if found is None:
        return text
    try:
        os.close(os.open(found.group(1), os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC | os.O_NOCTTY))
    except OSError as real:
        return os_error_text(real)
    return text
