"""A container's user: a uid with no passwd entry and HOME unset (`docker run --user 12345`, an
OpenShift uid), or HOME=/ that the uid cannot write. Path.home() raises there ("Could not
determine home directory."), which every command hit as a traceback through the studio home's
default; the settings now name LORASTUDIO_HOME, and the other users of "~" keep it as typed."""

from __future__ import annotations

import errno
import os
import pwd
from pathlib import Path

import pytest

from lorastudio.basemodels.added import refusal
from lorastudio.errors import ConfigError
from lorastudio.settings import Settings, get_settings
from lorastudio.tracker_login import wandb_login_problems


@pytest.fixture
def no_home(monkeypatch: pytest.MonkeyPatch) -> None:
    """HOME unset and no passwd entry for this uid: Path.home() raises RuntimeError."""
    monkeypatch.delenv("HOME", raising=False)

    def missing(uid: int) -> pwd.struct_passwd:
        raise KeyError(f"getpwuid(): uid not found: {uid}")

    monkeypatch.setattr(pwd, "getpwuid", missing)
    with pytest.raises(RuntimeError):
        Path.home()


def test_no_home_names_lorastudio_home(no_home: None, monkeypatch: pytest.MonkeyPatch) -> None:
    """The default home, and a "~" in LORASTUDIO_HOME, are refused naming the variable (a
    ConfigError the CLI prints on one line), not a RuntimeError traceback."""
    monkeypatch.delenv("LORASTUDIO_HOME")
    get_settings.cache_clear()
    with pytest.raises(ConfigError, match=r"LORASTUDIO_HOME: unset, and user id \d+ has no home"):
        get_settings()
    monkeypatch.setenv("LORASTUDIO_HOME", "~/studio")
    get_settings.cache_clear()
    with pytest.raises(ConfigError, match=r"LORASTUDIO_HOME: ~/studio starts with ~ .*give an absolute path"):
        get_settings()


def test_a_given_home_works_without_a_user_home(no_home: None, studio_home: Path) -> None:
    """With LORASTUDIO_HOME set, the model-folder check and the wandb key check work (both
    expanded "~" with pathlib, which raised: a 500 of the API's add-a-folder route)."""
    settings = get_settings()
    assert settings.home == studio_home
    folder = studio_home.parent / "models-elsewhere"
    assert refusal(folder, settings) is None
    assert wandb_login_problems(["wandb"], settings, env={}) != []  # no key anywhere: refused, no raise


def test_unwritable_home_names_the_variable(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A home that cannot be made (HOME=/ for a uid of its own: mkdir /.lorastudio is EACCES;
    a read-only root file system: EROFS) says to set LORASTUDIO_HOME (was the bare "Permission
    denied: /.lorastudio"). mkdir is refused by hand: the suite may run as root."""

    def refused(self: Path, *args: object, **kwargs: object) -> None:
        raise OSError(errno.EROFS, os.strerror(errno.EROFS), str(self))

    monkeypatch.setattr(Path, "mkdir", refused)
    with pytest.raises(OSError, match="set LORASTUDIO_HOME to a writable folder") as caught:
        Settings(home=tmp_path / "studio").ensure_dirs()
    assert caught.value.errno == errno.EROFS and caught.value.filename == str(tmp_path / "studio")


def test_a_home_of_another_uid_says_whose(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A studio home on a volume another uid made (`docker run --user 1000` over root's folder):
    the server's lock says whose it is and what to do (was a bare "Permission denied"). The
    refusal and the owner are faked: the suite may run as root, whom permissions do not bind."""
    from lorastudio.jobs.homelock import HomeLock

    home = tmp_path / "home"
    home.mkdir()
    real_open = os.open

    def refused(path: object, *args: object, **kwargs: object) -> int:
        if str(path).endswith("lorastudio.lock"):
            raise PermissionError(errno.EACCES, os.strerror(errno.EACCES), str(path))
        return real_open(path, *args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(os, "open", refused)
    monkeypatch.setattr(os, "geteuid", lambda: os.stat(home).st_uid + 1000)
    with pytest.raises(PermissionError, match=r"belongs to uid \d+ and this process runs as uid \d+: chown"):
        HomeLock.for_server(home, 7860)


def test_a_home_of_an_unknown_user_names_that_user(monkeypatch: pytest.MonkeyPatch) -> None:
    """RELIABILITY 1246: LORASTUDIO_HOME=~nosuchuser/studio (a typo, a user of another host) was
    refused saying this process's user id had no home directory, while HOME was set and fine:
    the advice (set HOME / a passwd entry) sent the user the wrong way. It names the user now."""
    monkeypatch.setenv("LORASTUDIO_HOME", "~no-such-user-nc3/studio")
    get_settings.cache_clear()
    with pytest.raises(ConfigError, match=r"~no-such-user-nc3, and no user no-such-user-nc3 is known") as err:
        get_settings()
    assert "user id" not in str(err.value)
