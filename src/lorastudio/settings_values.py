"""Checks of single settings' values that need neither pydantic nor the Settings class (an
allowed-hosts entry, a hub token, the room a home leaves below the file system's path limit);
split out of settings.py to keep it short. settings.py re-exports them."""

from __future__ import annotations

import os
from pathlib import Path

from lorastudio.errors import ConfigError, FieldProblem

__all__ = [
    "BELOW_HOME_BYTES",
    "_host_entry",
    "default_home",
    "expanded",
    "folder_text_problem",
    "hub_token_problem",
    "path_max",
]


def _host_entry(item: str) -> str:
    """One allowed-hosts entry, lower-cased, IPv6 brackets dropped. Raises ValueError for a URL,
    a path or a port (the port is never compared), and for a wildcard: `*` or `*.example` was
    kept as a name no Host header is, so every request was a 421 where the list was meant to let
    them all in (RELIABILITY 2104)."""
    host = item.strip().lower()
    bare = host[1:-1] if host.startswith("[") and host.endswith("]") else host
    if "*" in bare:
        raise ValueError(
            f"{item!r}: a wildcard is not a host name; list each name the studio is reached by (a server"
            " bound to 0.0.0.0 with a token and no list answers every name)"
        )
    if not bare or any(c in bare for c in "/@ \t") or bare.count(":") == 1:
        raise ValueError(f"{item!r} is not a host name or address (give it without scheme, path or port)")
    return bare


def hub_token_problem(token: str) -> str | None:
    """Why `token` cannot be a hub token (None: it can): a hub token is visible ASCII (no space,
    no control character, no other script), at most 400 characters. The message never quotes it."""
    if len(token) > 400:
        return f"a hub token is at most 400 characters; this one has {len(token)} (not shown)"
    bad = next((i for i, c in enumerate(token) if not "!" <= c <= "~"), None)
    if bad is not None:
        return (
            f"a hub token is printable ASCII without spaces; character {bad + 1} of the one given is not "
            "(the token is not shown)"
        )
    return None


# The longest path the studio makes below its home (or cache folder), in bytes: a checkpoint's
# staged text-encoder file under an output name of 100 characters (outputs/NAME/checkpoints/...),
# a cache shard and its staging name (cache/encoded/latents/<20 hex>/<2>/<64 hex>.safetensors.
# <pid>-<hex>.tmp: ~150). Names the user picks (a dataset's, an image's) are theirs to fit.
BELOW_HOME_BYTES = 255


def path_max(path: Path) -> int:
    """The file system's limit on a path's bytes (PATH_MAX, with its final NUL) where `path` is
    (or would be made: its nearest existing folder is asked); 4096, Linux's, where it cannot be
    asked."""
    for folder in (path, *path.parents):
        try:
            return int(os.pathconf(folder, "PC_PATH_MAX"))
        except (OSError, ValueError):
            continue
    return 4096


def default_home() -> Path:
    """The studio home when LORASTUDIO_HOME is unset: ~/.lorastudio. Raises ConfigError naming
    LORASTUDIO_HOME where there is no home to put it in: a container's user with no passwd entry
    and HOME unset (`docker run --user 12345`, an OpenShift uid; pathlib raised "Could not determine
    home directory." out of every command as a traceback)."""
    try:
        return Path.home() / ".lorastudio"
    except (RuntimeError, KeyError):
        raise ConfigError(
            [
                FieldProblem(
                    "LORASTUDIO_HOME",
                    f"unset, and user id {os.getuid()} has no home directory (HOME is unset and no"
                    " passwd entry names one): set LORASTUDIO_HOME to a writable folder (in a"
                    " container, a mounted volume)",
                )
            ]
        ) from None


def expanded(value: str | Path) -> Path:
    """`value` with a leading "~" expanded and made absolute. Raises ValueError (pydantic names
    the variable) where "~" names no home: pathlib's RuntimeError was a traceback."""
    try:
        return Path(value).expanduser().absolute()
    except RuntimeError:
        user = str(value)[1:].split("/", 1)[0]
        if user:  # `~name/...`: no user of that name here (it was blamed on this process's user)
            raise ValueError(
                f"{value} starts with ~{user}, and no user {user} is known here: give an absolute path"
            ) from None
        raise ValueError(
            f"{value} starts with ~ and user id {os.getuid()} has no home directory (HOME is unset"
            " and no passwd entry names one): give an absolute path"
        ) from None


def folder_text_problem(value: str) -> str | None:
    """Why a folder setting's text looks damaged by the file it came from (None: it does not):
    white space at either end (a .env or compose file's stray space: `LORASTUDIO_HOME= /data`,
    RELIABILITY 1962) or a pair of the same quote around it (`docker run --env-file` keeps them:
    '"/data"' was <cwd>/"/data", 2012). The caller refuses it unless it names an existing folder."""
    if value != value.strip():
        return (
            f"{value!r} begins or ends with white space and names no existing folder (a stray"
            f" space of a .env or compose file?): give {value.strip()!r}"
        )
    if len(value) >= 2 and value[0] == value[-1] and value[0] in "'\"":
        return (
            f"{value!r} is in quotes and names no existing folder (an env file read without"
            f" a shell keeps them): give {value[1:-1]!r}"
        )
    return None
