"""The console program runs in Python's UTF-8 mode under every locale (PEP 540; the default from
Python 3.15 on, PEP 686).

Outside it, Python takes the encoding of file names, of `open()` without an `encoding=` and of a
child's pipes from the locale: under a non-UTF-8 one (LC_ALL=en_US.ISO-8859-1, or the C locale
with PYTHONUTF8=0) an upload named `bild_猫.png`, a dataset `猫ds` or a sample prompt sent to a
check child raised UnicodeEncodeError: a 500 and a traceback in the server's log (RELIABILITY
1028), while the studio's JSON, SQLite store, web UI and captions are UTF-8 throughout. Under the
C and POSIX locales Python turns the mode on by itself; under any other locale whose encoding is
not UTF-8 `ensure_utf8_mode` starts the program again (exec: same pid, same arguments) with
PYTHONUTF8=1 in its environment, which every process it starts (training and generation workers,
torchrun's ranks, check children) then inherits. A name on disk that is not UTF-8 (an archive's
Latin-1 bytes) is then held as lone surrogates, which the studio refuses or escapes by name as it
does under a UTF-8 locale (RELIABILITY 31, 35). No torch here; hand-written: Python offers the
mode only at the interpreter's start.
"""

from __future__ import annotations

import codecs
import locale
import os
import sys

FLAG = "PYTHONUTF8"


def _is_utf8(encoding: str) -> bool:
    try:
        return codecs.lookup(encoding).name == "utf-8"
    except LookupError:  # an encoding name Python does not know: not UTF-8
        return False


def needs_utf8_mode() -> bool:
    """Whether this interpreter reads file names or text through a non-UTF-8 locale encoding and
    has not been started again for it yet (PYTHONUTF8=1 already set: never twice, also where a
    command line's `-X utf8=0` outweighs the variable)."""
    if sys.flags.utf8_mode or os.environ.get(FLAG) == "1":
        return False
    return not (_is_utf8(sys.getfilesystemencoding()) and _is_utf8(locale.getencoding()))


def ensure_utf8_mode() -> None:
    """Exec this program again in UTF-8 mode when needs_utf8_mode (returns otherwise). Only for the
    console program (cli/app.main with import_freeze.is_standalone): a program that called main()
    itself (a test runner) is never replaced."""
    if not needs_utf8_mode() or not sys.executable:
        return
    os.environ[FLAG] = "1"
    sys.stdout.flush()
    sys.stderr.flush()
    os.execv(sys.executable, [sys.executable, *sys.orig_argv[1:]])
