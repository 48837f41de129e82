"""A setting typed as a flag (`train CONFIG --learning_rate 1e-4`, kohya's `--network_dim 16`)
is answered with the `--set` that gives it (session 39 CLI audit, RELIABILITY 1963): click said
"No such option: --learning_rate", and for `--steps=3` "(Possible options: --gpus, --help,
--set)"."""

from __future__ import annotations

from cli_runner import run_cli_streams


def test_a_setting_given_as_a_flag_names_its_set(capsys, monkeypatch, tmp_path) -> None:
    config = str(tmp_path / "run.toml")  # never read: the usage error comes first
    cases = [
        (["--learning_rate", "1e-4"], "a setting is given as --set learning_rate=1e-4"),
        (["--check", "--steps=3"], "a setting is given as --set steps=3"),
        (["--network-dim", "16"], "kohya's network_dim is the setting lora_rank here: --set lora_rank=16"),
    ]
    for args, said in cases:
        code, out, err = run_cli_streams(capsys, monkeypatch, "train", config, *args)
        assert code == 2 and said in err and "Possible options" not in err, (args, out, err)
    code, out, err = run_cli_streams(capsys, monkeypatch, "train", config, "--bogus")
    assert code == 2 and "No such option: --bogus" in err and "--set" not in err.split("No such")[1], err
