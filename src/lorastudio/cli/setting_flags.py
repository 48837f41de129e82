"""`lorastudio train CONFIG --learning_rate 1e-4`: a setting typed as a flag, as kohya's sd-scripts
(and SimpleTuner) take every setting, answered with the `--set` that gives it.

click's answer was "No such option: --learning_rate", and for `--steps=3` "(Possible options:
--gpus, --help, --set)", which reads as if --gpus were meant; kohya's own names (`--network_dim
16`) said nothing of lora_rank. The train command's class looks at each `--NAME` that is none
of its options before click parses them: a TrainConfig setting (dashes read as underscores) or
a kohya argument the importer maps (config_import/kohya_tables.SIMPLE) is a usage error (status
2) naming the `--set` to write. Any other unknown option goes on to click's own message.
"""

from __future__ import annotations

from typing import Any

from typer.core import TyperCommand


class SettingFlagsCommand(TyperCommand):
    """A typer command that names the `--set` of a setting given as an unknown flag."""

    def parse_args(self, ctx: Any, args: list[str]) -> list[str]:
        known = {opt for param in self.params for opt in (*param.opts, *param.secondary_opts)}
        for i, token in enumerate(args):
            if token == "--":  # what follows is arguments, never options
                break
            name, eq, value = token.partition("=")
            if not name.startswith("--") or name in known:
                continue
            if not eq:  # `--steps 3`: its value is the next word, when that is no option
                following = args[i + 1] if i + 1 < len(args) else ""
                value = following if following and not following.startswith("-") else ""
            hint = setting_hint(name, value)
            if hint is not None:
                ctx.fail(f"No such option: {name}: {hint}")
        return super().parse_args(ctx, args)


def setting_hint(option: str, value: str = "") -> str | None:
    """How the setting an unknown `option` ("--learning_rate", "--network-dim") names is given,
    with `value` when typed ("VALUE" when not); None when it names no setting."""
    from lorastudio.config import TrainConfig
    from lorastudio.config_import.kohya_tables import SIMPLE

    name = option.lstrip("-").replace("-", "_")
    shown = value or "VALUE"
    if name in TrainConfig.model_fields:
        return f"a setting is given as --set {name}={shown} (or in the config file)"
    if name in SIMPLE:
        ours = SIMPLE[name][0]
        return (
            f"kohya's {name} is the setting {ours} here: --set {ours}={shown} (`lorastudio config"
            " import` converts a whole kohya config)"
        )
    return None
