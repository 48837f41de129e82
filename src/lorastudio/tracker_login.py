"""Whether a run with report_to wandb can log in to W&B, judged before it starts (no torch, no
wandb import: the job service's check and the engine's preflight both call it).

wandb.init finds its API key in the settings it is given (the studio's `wandb_api_key`:
LORASTUDIO_WANDB_API_KEY, or the WANDB_API_KEY `serve` had; its `wandb_identity_token_file`
likewise: jobs/childenv.py), in the
environment (WANDB_API_KEY, WANDB_IDENTITY_TOKEN_FILE: a CLI run keeps its own) or in the
netrc file (`wandb login`: NETRC, else ~/.netrc or ~/_netrc) under the host of its server
(WANDB_BASE_URL, else the settings files' `base_url`, else api.wandb.ai). A run in offline
or disabled mode (WANDB_MODE, else `wandb offline`'s settings files) needs none. The settings
files are read as wandb 0.31's setup reads them: the global one (WANDB_CONFIG_DIR/settings,
else ~/.config/wandb/settings), then the local one of the folder the process runs in (a
worker's is the server's) over it: `./wandb/settings`, or `./.wandb/settings` where `./.wandb`
exists (WANDB_DIR is read after them: not theirs). The mode is read as wandb
0.31 reads it: WANDB_MODE exactly (a value that is not one of its modes, "Offline" or blank
included, makes wandb.init fail whatever the key: refused here, naming it), the settings file's
mode only when it is one of them (else wandb runs online); WANDB_DISABLED is none of wandb's
(transformers' Trainer reads it: wandb runs online, RELIABILITY 916). Without any of
them wandb.init fails at the run's start ("No API key configured"); here the run is refused
before, naming the setting (RELIABILITY 860).
"""

from __future__ import annotations

import configparser
import netrc
import os
from collections.abc import Mapping
from pathlib import Path
from urllib.parse import urlsplit

from lorastudio.config_host import tracker_problems
from lorastudio.errors import FieldProblem
from lorastudio.settings import Settings
from lorastudio.user_paths import expand_user

DEFAULT_BASE_URL = "https://api.wandb.ai"
KEYLESS_MODES = frozenset({"offline", "dryrun", "disabled"})
WANDB_MODES = ("online", "offline", "disabled", "dryrun", "shared", "run")  # wandb.Settings.mode
NO_KEY = (
    "wandb has no API key here: set LORASTUDIO_WANDB_API_KEY (for `serve`: before it starts; "
    "WANDB_API_KEY in its environment is taken too) or LORASTUDIO_WANDB_IDENTITY_TOKEN_FILE "
    "(WANDB_IDENTITY_TOKEN_FILE likewise), log in with `wandb login` (~/.netrc) or "
    "set WANDB_MODE=offline (or leave wandb out of report_to)"
)


def report_to_problems(
    report_to: list[str], settings: Settings, env: Mapping[str, str] | None = None
) -> list[FieldProblem]:
    """Every report_to problem, one per tracker: its package missing (config_host.
    tracker_problems), else, for wandb, no API key known (`wandb_login_problems`)."""
    missing = {name for name in report_to if tracker_problems([name])}
    installed = [name for name in report_to if name not in missing]
    return tracker_problems(report_to) + wandb_login_problems(installed, settings, env)


def wandb_login_problems(
    report_to: list[str], settings: Settings, env: Mapping[str, str] | None = None
) -> list[FieldProblem]:
    """A report_to problem when the run reports to wandb, online, with no API key known
    (see the module docstring); [] otherwise. `env`: the environment (default os.environ)."""
    if "wandb" not in report_to:
        return []
    env = os.environ if env is None else env
    if "WANDB_MODE" in env and env["WANDB_MODE"] not in WANDB_MODES:  # wandb.init's ValidationError
        return [
            FieldProblem(
                "report_to",
                f"WANDB_MODE={env['WANDB_MODE'][:40]!r} is not one of wandb's modes"
                f" ({', '.join(WANDB_MODES)}, as written): wandb would not start",
            )
        ]
    if settings.wandb_api_key is not None or settings.wandb_identity_token_file is not None:
        return []
    if _given(env, "WANDB_API_KEY", "WANDB_IDENTITY_TOKEN_FILE"):
        return []
    files = _settings_file(env)
    if _mode(env, files) in KEYLESS_MODES or _netrc_has_key(env, _base_url(env, files)):
        return []
    return [FieldProblem("report_to", NO_KEY)]


def _given(env: Mapping[str, str], *names: str) -> bool:
    return any(env.get(name, "").strip() for name in names)


def _mode(env: Mapping[str, str], files: Mapping[str, str]) -> str:
    """The mode wandb 0.31 runs in: WANDB_MODE as written (checked above), else the settings
    file's when it is one of wandb's modes (configparser strips its spaces), else online."""
    if "WANDB_MODE" in env:
        return env["WANDB_MODE"]
    mode = files.get("mode", "online")
    return mode if mode in WANDB_MODES else "online"


def _base_url(env: Mapping[str, str], files: Mapping[str, str]) -> str:
    return (env.get("WANDB_BASE_URL", "").strip() or files.get("base_url", "").strip()) or DEFAULT_BASE_URL


def _settings_file(env: Mapping[str, str]) -> dict[str, str]:
    """wandb's settings files' [default] sections, the local one's keys over the global one's
    (see the module docstring; {} for a file absent or unreadable)."""
    folder = env.get("WANDB_CONFIG_DIR", "").strip()
    path = expand_user(folder or "~/.config/wandb")  # as typed where the user has no home
    try:
        local = Path.cwd() / (".wandb" if (Path.cwd() / ".wandb").exists() else "wandb")
    except OSError:  # the folder this process runs in was removed: wandb would find none there
        return _read_settings(path / "settings")
    return {**_read_settings(path / "settings"), **_read_settings(local / "settings")}


def _read_settings(path: Path) -> dict[str, str]:
    """A wandb settings file's [default] section ({} when absent or unreadable)."""
    parser = configparser.ConfigParser()
    try:
        parser.read(path, encoding="utf-8")
    except (configparser.Error, OSError, UnicodeDecodeError):
        return {}
    return dict(parser["default"]) if parser.has_section("default") else {}


def _netrc_has_key(env: Mapping[str, str], base_url: str) -> bool:
    """Whether the netrc file wandb reads holds a password for `base_url`'s host (an unreadable
    or malformed file holds none, as wandb reads it)."""
    given = env.get("NETRC", "").strip()
    if given:
        path = expand_user(given)
    else:
        path = next(
            (p for p in (expand_user("~/.netrc"), expand_user("~/_netrc")) if p.is_file()),
            None,
        )
    host = urlsplit(base_url).netloc
    if path is None or not host or not path.is_file():
        return False
    try:
        found = netrc.netrc(str(path)).authenticators(host)
    except (netrc.NetrcParseError, OSError, UnicodeDecodeError):
        return False
    return bool(found and found[2])
