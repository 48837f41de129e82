"""W&B from the server (session 30, RELIABILITY 860): `serve` drops WANDB_API_KEY from its
environment with every other secret; the studio keeps it in its settings (or takes
LORASTUDIO_WANDB_API_KEY) and a run's worker gets it in them, as the hub token travels; a run
with report_to wandb and no key anywhere (settings, environment, ~/.netrc) is refused before it
starts, naming the setting, by the job service's check and the engine's preflight; and wandb's
own failure to start (its UsageError / CommError) is the run's ConfigError naming report_to."""

from __future__ import annotations

import os
import pickle
from pathlib import Path

import pytest

from lorastudio.errors import ConfigError
from lorastudio.jobs.childenv import drop_process_secrets
from lorastudio.jobs.validation import validate_run
from lorastudio.settings import Settings, get_settings
from lorastudio.tracker_login import wandb_login_problems
from lorastudio.training.loop import train
from lorastudio.training.trackers import TrackerSink, start_failure

WANDB_VARIABLES = ("WANDB_API_KEY", "WANDB_IDENTITY_TOKEN_FILE", "WANDB_MODE", "WANDB_DISABLED",
                   "WANDB_BASE_URL", "WANDB_CONFIG_DIR", "NETRC", "LORASTUDIO_WANDB_API_KEY")  # fmt: skip


@pytest.fixture
def no_login(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """No W&B key anywhere: no variable, an empty home (no ~/.netrc, no wandb settings file)."""
    for name in WANDB_VARIABLES:
        monkeypatch.delenv(name, raising=False)
    home = tmp_path / "user"
    home.mkdir()
    monkeypatch.setenv("HOME", str(home))
    get_settings.cache_clear()
    return home


def test_the_server_keeps_the_wandb_key_it_drops_from_its_environment(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(os, "environ", {"WANDB_API_KEY": " wk-env \n", "PATH": "/bin"})
    kept = drop_process_secrets(Settings())
    assert os.environ == {"PATH": "/bin"}  # no child of the server inherits it
    assert kept.wandb_api_key is not None and kept.wandb_api_key.get_secret_value() == "wk-env"
    travelled = pickle.loads(pickle.dumps(kept))  # as WorkerArgs reaches a spawned worker
    assert travelled.wandb_api_key.get_secret_value() == "wk-env"
    assert "wk-env" not in repr(kept) and "wk-env" not in kept.model_dump_json()
    monkeypatch.setattr(os, "environ", {"WANDB_API_KEY": "wk-env", "LORASTUDIO_WANDB_API_KEY": "wk-studio"})
    assert drop_process_secrets(Settings()).wandb_api_key.get_secret_value() == "wk-studio"
    assert os.environ == {}


def test_wandb_online_without_a_key_is_refused_naming_the_setting(no_login: Path) -> None:
    (problem,) = wandb_login_problems(["wandb"], Settings())
    assert problem.field == "report_to" and "LORASTUDIO_WANDB_API_KEY" in problem.message
    assert wandb_login_problems(["tensorboard"], Settings()) == []
    with_key = Settings(wandb_api_key="wk-0123")
    assert wandb_login_problems(["wandb"], with_key) == []
    assert wandb_login_problems(["wandb"], Settings(), {"WANDB_API_KEY": "wk"}) == []  # a CLI's own
    assert wandb_login_problems(["wandb"], Settings(), {"WANDB_MODE": "offline"}) == []
    (no_login / ".config" / "wandb").mkdir(parents=True)
    (no_login / ".config" / "wandb" / "settings").write_text("[default]\nmode = offline\n")  # `wandb offline`
    assert wandb_login_problems(["wandb"], Settings(), {}) == []
    (no_login / ".config" / "wandb" / "settings").write_text("[default]\nmode = online\n")
    assert len(wandb_login_problems(["wandb"], Settings(), {})) == 1
    (no_login / ".netrc").write_text(
        "machine api.wandb.ai\n  login user\n  password wk-netrc\n"
    )  # `wandb login`
    assert wandb_login_problems(["wandb"], Settings(), {}) == []
    elsewhere = {"WANDB_BASE_URL": "https://wandb.corp.example"}  # a login for another server is none
    assert len(wandb_login_problems(["wandb"], Settings(), elsewhere)) == 1


def test_the_mode_is_read_as_wandb_reads_it(no_login: Path) -> None:
    """RELIABILITY 916: wandb 0.31 reads no WANDB_DISABLED (online: "No API key configured" at the
    run's start) and refuses a WANDB_MODE not written as one of its modes ("Offline", " offline",
    blank: a ValidationError at the start, key or not); a settings file's mode that is none of them
    is online. Each was taken for a keyless mode (the run accepted, then failing as it started)."""
    for env in ({"WANDB_MODE": "disabled"}, {"WANDB_MODE": "dryrun"}, {"WANDB_MODE": "offline"}):
        assert wandb_login_problems(["wandb"], Settings(), env) == []
    assert len(wandb_login_problems(["wandb"], Settings(), {"WANDB_DISABLED": "true"})) == 1
    assert len(wandb_login_problems(["wandb"], Settings(), {"WANDB_MODE": "online"})) == 1
    for bad in ("Offline", " offline", "", "DISABLED"):
        for settings in (Settings(), Settings(wandb_api_key="wk-0123")):
            (problem,) = wandb_login_problems(["wandb"], settings, {"WANDB_MODE": bad})
            assert f"WANDB_MODE={bad!r} is not one of wandb's modes" in problem.message
    (no_login / ".config" / "wandb").mkdir(parents=True)
    (no_login / ".config" / "wandb" / "settings").write_text("[default]\nmode = Offline\n")
    assert len(wandb_login_problems(["wandb"], Settings(), {})) == 1  # wandb: online
    (no_login / ".config" / "wandb" / "settings").write_text("[default]\nmode =  offline \n")
    assert wandb_login_problems(["wandb"], Settings(), {}) == []


def test_a_wandb_run_without_a_key_is_refused_before_it_starts(
    no_login: Path, make_config, tiny_model, small_dataset, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Whether or not wandb is installed here: its package's check is told it is ("json" for
    "wandb"); without its package a run is refused for that alone (one report_to problem each)."""
    from lorastudio import config_host
    from lorastudio.tracker_login import report_to_problems

    monkeypatch.setitem(config_host.TRACKERS, "wandb", ("lorastudio_no_such_package", "wandb"))
    (missing,) = report_to_problems(["wandb"], Settings())
    assert "needs the lorastudio_no_such_package package" in missing.message
    monkeypatch.setitem(config_host.TRACKERS, "wandb", ("json", "wandb"))  # "installed"
    raw = {"family": "flux", "base_model": str(tiny_model("flux")), "data_dir": str(small_dataset),
           "report_to": ["wandb"]}  # fmt: skip
    with pytest.raises(ConfigError) as err:  # the job service's check (its start, `train --check`)
        validate_run(raw, get_settings(), live_output_names=set(), allow_outside_root=True)
    assert any("LORASTUDIO_WANDB_API_KEY" in p.message for p in err.value.problems)
    events: list = []
    with pytest.raises(ConfigError, match="LORASTUDIO_WANDB_API_KEY"):  # the engine's own preflight
        train(make_config(report_to=["wandb"]), events.append, device="cpu")
    outputs = get_settings().outputs_dir
    assert events[-1].type == "error" and (not outputs.exists() or not any(outputs.iterdir()))


def test_wandbs_own_errors_are_the_runs_named_config_error() -> None:
    errors = pytest.importorskip("wandb.errors", reason="wandb is not installed (lorastudio[wandb])")
    from pydantic import SecretStr

    key = SecretStr("wk-0123456789")
    for err in (errors.UsageError("No API key configured. Use `wandb login` to log in."),
                errors.CommError("invalid api key wk-0123456789"), errors.AuthenticationError("refused")):  # fmt: skip
        failure = start_failure("wandb", err, key)
        assert failure is not None and [p.field for p in failure.problems] == ["report_to"], err
        assert failure.problems[0].message.startswith("wandb could not start: ")
        assert "wk-0123456789" not in failure.problems[0].message
    assert start_failure("wandb", KeyError("a defect")) is None  # raised as it is


def test_a_wandb_that_cannot_log_in_is_the_runs_config_error(no_login: Path, tmp_path: Path) -> None:
    """A real wandb.init online with no key (the preflight's refusal left out): its UsageError."""
    pytest.importorskip("wandb", reason="wandb is not installed (lorastudio[wandb])")
    sink = TrackerSink(["wandb"])
    with pytest.raises(ConfigError, match="wandb could not start: No API key configured") as err:
        sink.open(tmp_path / "run", {})
    assert [p.field for p in err.value.problems] == ["report_to"]


def test_the_studios_key_is_given_to_wandb_init_not_to_an_environment(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    wandb = pytest.importorskip("wandb", reason="wandb is not installed (lorastudio[wandb])")
    from pydantic import SecretStr

    from lorastudio.training.trackers import WRITERS

    given: dict = {}
    monkeypatch.setattr(wandb, "init", lambda **kwargs: given.update(kwargs))
    WRITERS["wandb"](tmp_path, {}, 1, SecretStr("wk-0123456789"))
    assert given["settings"].api_key == "wk-0123456789"
    assert "wk-0123456789" not in os.environ.values()


def test_the_server_carries_the_wandb_identity_token_file_it_drops(
    no_login: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """RELIABILITY 934: `serve` dropped WANDB_IDENTITY_TOKEN_FILE (a TOKEN name) and kept nothing
    of it: its W&B runs were refused. Now its path travels in the settings (made absolute: the
    worker may run elsewhere), lifts the refusal, and reaches the wandb writer."""
    from lorastudio import config_host

    monkeypatch.setitem(config_host.TRACKERS, "wandb", ("json", "wandb"))  # "installed"
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(
        os, "environ", {"WANDB_IDENTITY_TOKEN_FILE": "jwt/token", "PATH": "/bin", "HOME": str(no_login)}
    )
    kept = drop_process_secrets(Settings())
    assert os.environ == {"PATH": "/bin", "HOME": str(no_login)}  # no child inherits it
    travelled = pickle.loads(pickle.dumps(kept))  # as WorkerArgs reaches a spawned worker
    assert travelled.wandb_identity_token_file == tmp_path / "jwt" / "token"
    assert wandb_login_problems(["wandb"], travelled, {}) == []
    assert len(wandb_login_problems(["wandb"], Settings(), {})) == 1
    given: list[dict] = []
    sink = TrackerSink(
        ["wandb"], travelled.wandb_api_key, {"wandb": lambda *a, **kw: given.append(kw)},
        wandb_identity_file=travelled.wandb_identity_token_file,
    )  # fmt: skip
    sink.open(tmp_path / "run", {})
    assert given == [{"identity_file": tmp_path / "jwt" / "token"}]


def test_wandbs_local_settings_file_is_read_as_wandb_reads_it(
    no_login: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """RELIABILITY 935: `wandb offline` run in the server's folder writes ./wandb/settings, which
    wandb reads over the global file; the check read only the global one."""
    work = tmp_path / "work"
    (work / "wandb").mkdir(parents=True)
    monkeypatch.chdir(work)
    (no_login / ".config" / "wandb").mkdir(parents=True)
    (no_login / ".config" / "wandb" / "settings").write_text("[default]\nmode = online\n")
    (work / "wandb" / "settings").write_text("[default]\nmode = offline\n")
    assert wandb_login_problems(["wandb"], Settings(), {}) == []
    (work / ".wandb").mkdir()  # wandb then reads ./.wandb/settings instead
    assert len(wandb_login_problems(["wandb"], Settings(), {})) == 1
    (work / ".wandb" / "settings").write_text("[default]\nmode = disabled\n")
    assert wandb_login_problems(["wandb"], Settings(), {}) == []


def test_the_identity_token_file_is_wandbs_session_login(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """With wandb 0.31 installed: the writer makes the file wandb's session credentials (what its
    login reads; wandb.init's own settings are not read for it), through no environment."""
    wandb = pytest.importorskip("wandb", reason="wandb is not installed (lorastudio[wandb])")
    from wandb.sdk.lib import wbauth

    from lorastudio.training.trackers import WRITERS

    token = tmp_path / "token.jwt"
    token.write_text("eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiJ4In0.c2ln")
    monkeypatch.setattr(wandb, "init", lambda **kwargs: None)
    WRITERS["wandb"](tmp_path, {}, 1, None, identity_file=token)
    base = wandb.setup().settings.base_url
    auth = wbauth.session_credentials(host=wbauth.HostUrl(base))
    assert isinstance(auth, wbauth.AuthIdentityTokenFile) and auth.path == token
    assert str(token) not in os.environ.values()
