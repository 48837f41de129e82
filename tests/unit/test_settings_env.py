"""A refused LORASTUDIO_* environment value is named, every one at once, and the CLI ends with
its own error (exit 2), not pydantic's traceback."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator

import pytest

from lorastudio.errors import ConfigError
from lorastudio.settings import get_settings


@pytest.fixture
def fresh_settings() -> Iterator[None]:
    get_settings.cache_clear()
    yield
    get_settings.cache_clear()


def test_each_refused_environment_value_is_named_at_once(
    monkeypatch: pytest.MonkeyPatch, fresh_settings: None
) -> None:
    monkeypatch.setenv("LORASTUDIO_PORT", "99999")
    monkeypatch.setenv("LORASTUDIO_MAX_IMAGE_PIXELS", "-5")
    with pytest.raises(ConfigError) as err:
        get_settings()
    fields = {p.field for p in err.value.problems}
    assert fields == {"LORASTUDIO_PORT", "LORASTUDIO_MAX_IMAGE_PIXELS"}


def test_the_cli_says_which_variable_and_exits_2(tmp_path: object) -> None:
    env = {
        "PATH": "/usr/bin:/bin",
        "HOME": str(tmp_path),
        "LORASTUDIO_HOME": str(tmp_path),
        "LORASTUDIO_PORT": "0",
    }
    done = subprocess.run(
        [sys.executable, "-m", "lorastudio.cli", "paths"],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 2, done.stderr
    assert "LORASTUDIO_PORT" in done.stderr and "Traceback" not in done.stderr


def test_the_hub_token_is_stripped_and_one_no_header_can_carry_is_refused_unshown(
    monkeypatch: pytest.MonkeyPatch, fresh_settings: None
) -> None:
    """LORASTUDIO_HF_TOKEN read from a file keeps its newline (a .env its CR): dropped. One with
    a character no HTTP header carries is refused naming the variable, never quoting the token
    (it reached an Authorization header, whose error quoted it, or raised)."""
    secret = "hf_settings_secret_0123456789"
    monkeypatch.setenv("LORASTUDIO_HF_TOKEN", f"{secret}\r\n")
    assert get_settings().hf_token.get_secret_value() == secret  # type: ignore[union-attr]
    for bad in (f"{secret}\nX", f"{secret}é", f"hf_{secret} x"):
        get_settings.cache_clear()
        monkeypatch.setenv("LORASTUDIO_HF_TOKEN", bad)
        with pytest.raises(ConfigError) as err:
            get_settings()
        assert [p.field for p in err.value.problems] == ["LORASTUDIO_HF_TOKEN"]
        assert secret not in str(err.value)
    get_settings.cache_clear()
    monkeypatch.setenv("LORASTUDIO_HF_TOKEN", "  ")
    assert get_settings().hf_token is None


def test_a_hub_error_quoting_the_token_is_scrubbed_in_every_form() -> None:
    from lorastudio.basemodels.hubaccess import scrub

    token = "hf_scrub\tme"
    message = f"Illegal header value {('Bearer ' + token).encode()!r}; {token!r}; {token}"
    assert "hf_scrub" not in scrub(message, token)


@pytest.mark.parametrize(
    ("forms", "real", "given"),
    [  # the damaged forms of f"{tmp_path}/home"; a folder truly so named, and how it is given
        ((" {}/home", "{}/home "), "mine ", "{}/mine "),
        (('"{}/home"', "'{}/home'"), '"q"', '"q"'),  # relative to the current folder
    ],
    ids=["stray-space", "quotes"],
)
def test_a_home_with_stray_space_or_quotes_is_refused_unless_it_exists(
    monkeypatch: pytest.MonkeyPatch,
    fresh_settings: None,
    tmp_path,
    forms: tuple[str, str],
    real: str,
    given: str,
) -> None:
    """`LORASTUDIO_HOME= /data` (a .env file's stray space) was a folder "  /data" made under the
    current directory, and "/data " a second, empty home (session 39 CLI audit, RELIABILITY 1962);
    `LORASTUDIO_HOME="/data"` from an env file no shell reads (`docker run --env-file` keeps the
    quotes) a relative folder `"/data"`: a second, empty home (session 39 newcode10, 2012)."""
    monkeypatch.chdir(tmp_path)
    for form in forms:
        monkeypatch.setenv("LORASTUDIO_HOME", form.format(tmp_path))
        get_settings.cache_clear()
        with pytest.raises(ConfigError) as err:
            get_settings()
        assert [p.field for p in err.value.problems] == ["LORASTUDIO_HOME"]
        assert f"give '{tmp_path}/home'" in err.value.problems[0].message
    assert list(tmp_path.iterdir()) == []
    (tmp_path / real).mkdir()  # a folder whose name truly has them is taken
    monkeypatch.setenv("LORASTUDIO_HOME", given.format(tmp_path))
    get_settings.cache_clear()
    assert get_settings().home == tmp_path / real


@pytest.mark.parametrize("hosts", ["*", "studio.lan, *.example"])
def test_a_wildcard_allowed_host_is_refused_naming_the_way(
    monkeypatch: pytest.MonkeyPatch, fresh_settings: None, hosts: str
) -> None:
    """`*` was kept as a host name no request has: every request a 421 (RELIABILITY 2104)."""
    monkeypatch.setenv("LORASTUDIO_ALLOWED_HOSTS", hosts)
    with pytest.raises(ConfigError) as err:
        get_settings()
    (problem,) = err.value.problems
    assert problem.field == "LORASTUDIO_ALLOWED_HOSTS"
    assert "a wildcard is not a host name; list each name" in problem.message, problem.message


@pytest.mark.parametrize("name", ["LORASTUDIO_CACHE_MAX_GB", "LORASTUDIO_WORKER_TIMEOUT_SCALE"])
def test_a_number_setting_that_is_not_finite_is_named_so(
    monkeypatch: pytest.MonkeyPatch, fresh_settings: None, name: str
) -> None:
    """`nan` was "Input should be less than or equal to ..." (RELIABILITY 2106)."""
    monkeypatch.setenv(name, "nan")
    with pytest.raises(ConfigError) as err:
        get_settings()
    assert [(p.field, p.message) for p in err.value.problems] == [(name, "Input should be a finite number")]


def test_an_allowed_host_written_with_its_roots_dot_is_answered(
    monkeypatch: pytest.MonkeyPatch, fresh_settings: None
) -> None:
    """`studio.lan.` (a fully qualified name) was kept with its dot while a request's Host is
    compared without it: every request a 421 (RELIABILITY 2146)."""
    from lorastudio.api.hosts import HostPolicy

    monkeypatch.setenv("LORASTUDIO_ALLOWED_HOSTS", "Studio.LAN.")
    monkeypatch.setenv("LORASTUDIO_HOST", "0.0.0.0")
    monkeypatch.setenv("LORASTUDIO_API_TOKEN", "tok-123")
    policy = HostPolicy.from_settings(get_settings())
    assert [policy.accepts(h) for h in ("studio.lan", "studio.lan.:7860", "other.lan")] == [True, True, False]
