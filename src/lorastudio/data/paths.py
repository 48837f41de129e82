"""Safe names and dataset folder resolution.

User-supplied names (dataset and output names) and dataset paths come from the CLI and the HTTP
API. These two functions are the one place that decides what may reach the file system:

- `safe_component(name)`: one path component (a folder or file name), portable and harmless;
- `new_name(name)`: a name the user chooses for something the studio creates (a dataset): a
  safe component that does not start with "-" (a command line would read it as an option:
  `lorastudio datasets delete -x`). A folder already named so is still reached by name, on the
  command line after `--` (`lorastudio datasets delete -- -x`); output names (runs, LoRAs) are
  held to `^[A-Za-z0-9][A-Za-z0-9._-]*$` by TrainConfig.output_name;
- `resolve_dataset_dir(data_dir, datasets_root, allow_outside_root)`: a dataset path, kept
  inside the datasets root unless the caller (the local CLI) explicitly allows otherwise.
"""

from __future__ import annotations

import unicodedata
from collections.abc import Collection
from pathlib import Path

from lorastudio.data.joiners import joined
from lorastudio.errors import ConfigError, FieldProblem, PathOutsideRoot

MAX_COMPONENT_LENGTH = 100
MAX_COMPONENT_BYTES = 200  # a name plus a staging prefix/suffix stays under the 255-byte file-system limit

# Device names Windows reserves in every folder (also with any extension: "con.txt").
_RESERVED_NAMES = frozenset(
    {"CON", "PRN", "AUX", "NUL", "CONIN$", "CONOUT$"}
    | {f"COM{i}" for i in range(10)}
    | {f"LPT{i}" for i in range(10)}
    | {f"COM{c}" for c in "\u00b9\u00b2\u00b3"}
    | {f"LPT{c}" for c in "\u00b9\u00b2\u00b3"}
)
_SEPARATORS = ("/", "\\")
NAME_MAX_BYTES = 255  # the longest file name Linux file systems hold (NAME_MAX)
_FORBIDDEN_CHARS = frozenset('<>:"|?*')
# Invisible or direction-changing characters: format (Cf: zero-width spaces and joiners, bidi
# marks, embeddings, overrides and isolates, the BOM), control (Cc), line/paragraph separators.
_HIDDEN_CATEGORIES = frozenset({"Cf", "Cc", "Zl", "Zp"})
# The C0 controls a user types or pastes (unicodedata has no name for a control character).
_CONTROL_NAMES = {"\0": "NULL", "\t": "TAB", "\n": "LINE FEED", "\r": "CARRIAGE RETURN", "\x1b": "ESCAPE"}


def nfc(text: str) -> str:
    """`text` in Unicode NFC: the one form names are stored (safe_component) and compared in, so
    that a name copied from macOS (NFD: "e" + combining accent) is the same name."""
    return unicodedata.normalize("NFC", text)


def stem_key(name: str) -> str:
    """The key a file pairs with its image by (a control image, a loss mask): its stem in NFC
    (`nfc`), so that a name stored by the studio (NFC) and the same name copied from macOS (NFD)
    pair. (Path(name).stem's rule on the last component, without building a Path: a listing
    of tens of thousands of images asks it for each.)"""
    name = name.rpartition("/")[2]
    dot = name.rfind(".")
    return nfc(name[:dot] if 0 < dot < len(name) - 1 else name)


def _config_error(field: str, message: str) -> ConfigError:
    return ConfigError([FieldProblem(field, message)])


def safe_component(name: str, *, field: str = "name") -> str:
    """Validate one path component (a dataset or output name) and return it in Unicode NFC.

    Takes: `name`, a single folder/file name; `field`, the setting named in error messages.
    Returns: `name` normalised to NFC (so "é" typed as e + combining accent names the same file
    as the precomposed one; callers store and look up this returned form) when it is safe:
    non-empty, at most 100 characters and MAX_COMPONENT_BYTES bytes in UTF-8 (room for staging
    suffixes under the 255-byte limit), no path separator, not "." or "..", no NUL, control,
    zero-width or bidi control characters (Unicode categories Cf, Cc, Zl, Zp: U+200B-U+200F,
    U+202A-U+202E, U+2066-U+2069, U+FEFF...) but a joiner that joins as in a free text
    (`hidden_in_name`: a Persian word's non-joiner, an emoji's ZWJ sequence), none of <>:"|?*, not starting with "." (hidden),
    no leading/trailing whitespace or trailing dot, and not a reserved device name (CON, NUL,
    COM1, LPT1, ..., with or without an extension).
    Raises: PathOutsideRoot for separators, "." and ".." (they would leave the folder);
    ConfigError (one FieldProblem for `field`) for every other bad name.
    """
    if not isinstance(name, str):
        raise _config_error(field, f"must be a string, got {type(name).__name__}")
    if name == "":
        raise _config_error(field, "must not be empty")
    if "\x00" in name:
        raise _config_error(field, "must not contain a NUL character")
    if any("\ud800" <= ch <= "\udfff" for ch in name):  # a file name's non-UTF-8 bytes, or JSON's lone \ud8xx
        raise _config_error(field, "must be valid UTF-8 text (it holds a lone surrogate / undecodable bytes)")
    name = nfc(name)
    if name in (".", ".."):
        raise PathOutsideRoot(f"{field}: {name!r} is not allowed (it names a folder, not a new one)")
    if any(sep in name for sep in _SEPARATORS):
        raise PathOutsideRoot(f"{field}: {name!r} must be a single name without '/' or '\\'")
    if len(name) > MAX_COMPONENT_LENGTH:
        raise _config_error(field, f"must be at most {MAX_COMPONENT_LENGTH} characters (got {len(name)})")
    if len(name.encode("utf-8")) > MAX_COMPONENT_BYTES:
        raise _config_error(
            field, f"must be at most {MAX_COMPONENT_BYTES} bytes in UTF-8 (file systems allow 255)"
        )
    if any(ord(ch) < 32 or ord(ch) == 127 for ch in name):
        raise _config_error(field, "must not contain control characters")
    shown = hidden_in_name(name)
    if shown:
        raise _config_error(
            field,
            f"must not contain invisible or text-direction characters ({shown}): they disguise the name",
        )
    bad = sorted(set(name) & _FORBIDDEN_CHARS)
    if bad:
        raise _config_error(field, f"must not contain any of {' '.join(bad)}")
    if name.startswith("."):
        raise _config_error(field, f"{name!r} must not start with '.' (hidden names are not allowed)")
    if name != name.strip():
        raise _config_error(field, f"{name!r} must not start or end with whitespace")
    if name.endswith("."):
        raise _config_error(field, f"{name!r} must not end with '.'")
    stem = name.split(".", 1)[0].rstrip(" ").upper()
    if stem in _RESERVED_NAMES:
        raise _config_error(field, f"{name!r} is a reserved device name on Windows; pick another name")
    return name


def existing_component(name: str, *, field: str = "name") -> str:
    """Check that `name` can only be the name of an entry directly in a folder, for a lookup of
    an existing file by the name a listing gave (data/image_edits.existing_image): not empty, no
    NUL, no lone surrogate, no path separator, not "." or "..", at most NAME_MAX_BYTES. The rules of names the studio
    creates (safe_component: length, <>:"|?*, hidden characters, reserved names) are not applied:
    a file made by hand under such a name is listed and trained on, so it must be reachable.
    Returns `name` unchanged (not normalised). Raises PathOutsideRoot for separators, "." and
    "..", ConfigError (one FieldProblem for `field`) for the rest."""
    if not isinstance(name, str) or name == "":
        raise _config_error(field, "must be a non-empty string")
    if "\x00" in name:
        raise _config_error(field, "must not contain a NUL character")
    if any("\ud800" <= ch <= "\udfff" for ch in name):
        raise _config_error(field, "must be valid UTF-8 text (it holds a lone surrogate / undecodable bytes)")
    if name in (".", "..") or any(sep in name for sep in _SEPARATORS):
        raise PathOutsideRoot(f"{field}: {name!r} must be a single name without '/' or '\\'")
    if len(name.encode("utf-8")) > NAME_MAX_BYTES:
        raise _config_error(
            field, f"must be at most {NAME_MAX_BYTES} bytes in UTF-8 (no file name is longer)"
        )
    return name


def new_name(name: str, *, field: str = "name") -> str:
    """`safe_component(name, field=field)` for a name that creates something (a dataset), which
    must also not start with "-": every command that takes the name would read it as an option.
    Returns the NFC name. Raises what safe_component raises, and ConfigError for a leading "-".
    Names of things that exist are looked up with safe_component alone: a folder made before
    this rule (or by hand) stays reachable."""
    name = safe_component(name, field=field)
    if name.startswith("-"):
        raise _config_error(
            field,
            f"{name!r} must not start with '-': a command line would read it as an option; pick another name",
        )
    return name


def hidden_in_name(name: str) -> str:
    """`hidden_characters(name)` but the format characters that are part of the name as of a free
    text (data/joiners.joined: a Persian or Urdu word's non-joiner, U+200C between گل and ها; an
    emoji's ZWJ sequence; an Indic joiner after a virama; an emoji flag's tags): the rule of file
    and folder names (safe_component, kohya folders). A joiner that joins nothing (between Latin
    letters, at an end, beside a space) is still named. The web form's copy: name_rule. Judged on
    the name's NFC form (`nfc`), as names are stored and compared: a kohya folder copied from macOS
    (NFD, "e" + U+0301 for "é") was refused for a joiner its NFC twin keeps (RELIABILITY 1164)."""
    name = nfc(name)
    return hidden_characters(name, "", joined(name))


def hidden_characters(name: str, allowed: str = "", part: Collection[int] = ()) -> str:
    """The invisible or text-direction characters of `name` (categories Cf, Cc, Zl, Zp, and
    lone surrogates: bytes of a file name that are not UTF-8), named ("U+202E RIGHT-TO-LEFT
    OVERRIDE, ...", a file name's byte as "byte 0xE9, not UTF-8": it was "U+DCE9 unnamed",
    RELIABILITY 1028's audit); "" when it has none. Not those in `allowed` (a multi-line text's
    line breaks and tabs) nor those at the indices `part` (a free text's or a name's joiners that
    join, data/joiners.py: text_rules.hidden_in_text, hidden_in_name)."""
    hidden = sorted(
        {
            ch
            for i, ch in enumerate(name)
            if unicodedata.category(ch) in _HIDDEN_CATEGORIES | {"Cs"} and ch not in allowed and i not in part
        }
    )
    return ", ".join(_char_name(ch) for ch in hidden)


def _char_name(ch: str) -> str:
    if "\udc80" <= ch <= "\udcff":  # os.fsdecode's stand-in for a byte that is not UTF-8
        return f"byte 0x{ord(ch) - 0xDC00:02X}, not UTF-8"
    if "\ud800" <= ch <= "\udfff":  # JSON's lone \ud8xx
        return f"U+{ord(ch):04X}, a lone surrogate"
    return f"U+{ord(ch):04X} {unicodedata.name(ch, '') or _CONTROL_NAMES.get(ch, 'unnamed')}"


def shown_name(text: str) -> str:
    """`text` (a line naming files of a folder the user did not write: an archive's) safe to print
    on a terminal: its control, invisible and text-direction characters and lone surrogates
    (bytes that are not UTF-8) escaped as \\xNN / \\uNNNN, so no name moves the cursor, sends an
    escape sequence or reads backwards."""
    return "".join(
        ch.encode("unicode_escape").decode("ascii")
        if unicodedata.category(ch) in _HIDDEN_CATEGORIES | {"Cs"}
        else ch
        for ch in text
    )


def _is_strictly_inside(path: Path, root: Path) -> bool:
    return path != root and path.is_relative_to(root)


def _resolve(path: Path, data_dir: str, field: str = "data_dir") -> Path:
    try:
        return path.resolve()
    except (OSError, RuntimeError) as err:  # symlink loops, names too long for the OS
        raise _config_error(field, f"cannot resolve {data_dir!r}: {err}") from None


def _refuse_hand_named(root: Path, above: list[str], part: str, field: str) -> None:
    """Raise data.dataset_names.unusable_error's reason and fix when `part` names a dataset folder
    made by hand under a name the studio cannot use (a top folder of the datasets root)."""
    from lorastudio.data.dataset_names import unusable_error  # it builds on this module

    if not above and (err := unusable_error(root, part, field)) is not None:
        raise err


def resolve_dataset_dir(
    data_dir: str, datasets_root: Path, allow_outside_root: bool, field: str = "data_dir"
) -> Path:
    """Turn a user's `data_dir` into an absolute, symlink-free dataset folder path.

    Takes: `data_dir`, either a name under the datasets root ("portraits", or nested
    "people/anna"; each component must pass `safe_component` and is taken in its NFC form) or
    an absolute path;
    `datasets_root`, the studio's datasets folder; `allow_outside_root`, True only for trusted
    local callers (the CLI) that may train on any folder; `field`, the setting that messages
    name (validation_split, a datasets entry's path).
    Returns: the resolved path (symlinks followed). Existence is not checked here: see
    `scan_dataset`.
    Raises: ConfigError for an empty/NUL-containing value or a bad component; PathOutsideRoot
    when, without `allow_outside_root`, the path uses "..", is absolute outside the root, is the
    root itself, or a symlink inside it points outside.
    """
    if not isinstance(data_dir, str) or not data_dir.strip():
        raise _config_error(field, "must be a non-empty dataset name or folder path")
    if "\x00" in data_dir:
        raise _config_error(field, "must not contain a NUL character")
    root = _resolve(Path(datasets_root), str(datasets_root))
    given = Path(data_dir)
    if given.is_absolute():
        resolved = _resolve(given, data_dir, field)
        if allow_outside_root or _is_strictly_inside(resolved, root):
            return resolved
        raise PathOutsideRoot(
            f"{field} {data_dir!r} is outside the datasets folder {root}; "
            "give a dataset name, or an absolute path inside that folder"
        )
    parts = [p for p in data_dir.replace("\\", "/").split("/") if p]
    if allow_outside_root:
        return _resolve(root.joinpath(*parts), data_dir, field)
    for i, part in enumerate(parts):
        if part == "..":
            raise PathOutsideRoot(f"{field} {data_dir!r} must not contain '..' (it would leave {root})")
        try:
            parts[i] = safe_component(part, field=field)  # NFC
        except (ConfigError, PathOutsideRoot):
            _refuse_hand_named(root, parts[:i], part, field)
            raise
        if parts[i] != part:  # a folder of that name in NFD (copied from macOS) is not this one
            _refuse_hand_named(root, parts[:i], part, field)
    resolved = _resolve(root.joinpath(*parts), data_dir, field)
    if not _is_strictly_inside(resolved, root):
        raise PathOutsideRoot(
            f"{field} {data_dir!r} resolves to {resolved}, outside the datasets folder {root} "
            "(a symbolic link inside it points out)"
        )
    return resolved
