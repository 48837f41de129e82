"""Which rule a LyCORIS-layout DoRA file's `dora_scale` follows, told from what the file says.

Two writers put different numbers under the same [out, 1] `.dora_scale` key (norms per output
row; a conv's kernel counts as part of its row):

  "comfyui"  W' = (W + delta) * dora_scale / ||W||
             ComfyUI 0.3.77+'s output-axis `weight_decompose` divides by the base row norm; the
             files lorastudio writes hold dora_scale = m ||W|| / ||W + delta|| so that ComfyUI
             gives peft's weight (lora/lycoris.py, training/adapters/lycoris_export.dora_scales).
  "lycoris"  W' = (W + delta) * dora_scale / ||W + delta||
             LyCORIS' `weight_decompose` (DoRA's own rule): dora_scale is the magnitude m. Files
             trained by LyCORIS' modules: kohya sd-scripts with `network_module = "lycoris.kohya"`
             (`network_args` `dora_wd=True`), SimpleTuner and LyCORIS' own `save_weights`.

Read one way, a file written the other way is off by ||W + delta|| / ||W|| per row. The rule
of a file, the first of these its header holds:

  1. `lorastudio.dora_scale` = "comfyui" | "lycoris" (RULE_KEY): lorastudio writes "comfyui"
     (session 40); another value is refused naming the file.
  2. `lorastudio.lora_format` = "lycoris": a LyCORIS file lorastudio wrote before that key (every
     one of them carries it, with `lorastudio.adapter`, since its first): "comfyui", as read then.
  3. `ss_network_module` naming LyCORIS ("lycoris.kohya": kohya sd-scripts' train_network with
     LyCORIS' network; its `ss_network_args` then carry `dora_wd`): "lycoris".
  4. `lycoris_config` (LyCORIS' `save_weights` metadata as SimpleTuner writes it): "lycoris".
  5. none of them: "comfyui" (as ComfyUI 0.3.77+ renders the file, and as lorastudio read every
     file before), with `told` False: generation and init_lora warn naming the file.

The rule goes with the file's header only: no number in the tensors tells the two apart (both
start training from m = ||W||).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path

from lorastudio import json_read
from lorastudio.errors import ModelSourceError
from lorastudio.lora.metadata import PREFIX

COMFYUI = "comfyui"
LYCORIS = "lycoris"
RULES = (COMFYUI, LYCORIS)
RULE_KEY = PREFIX + "dora_scale"  # the header key naming the rule a file's dora_scale follows


@dataclass(frozen=True)
class DoraRule:
    """The rule a file's dora_scale follows (COMFYUI or LYCORIS), the header evidence for it,
    and whether the header told it (False: nothing did; the rule is then COMFYUI, a guess)."""

    rule: str
    evidence: str
    told: bool = True

    def warning(self, path: Path) -> str | None:
        """The warning to give where the header told nothing, naming the file; None where it told."""
        if self.told:
            return None
        return (
            f"DoRA file {path}: nothing in its header says how its dora_scale was written "
            f"(no {RULE_KEY}, ss_network_module or lycoris_config), so it is read by ComfyUI 0.3.77+'s "
            "rule, (W + delta) x dora_scale / ||W||, as ComfyUI renders it. If LyCORIS' modules trained it "
            "(dora_scale = the magnitude m: kohya sd-scripts with lycoris.kohya, SimpleTuner), "
            f'each layer is off by ||W + delta|| / ||W|| per output row: set {RULE_KEY} = "lycoris" in '
            "its safetensors metadata to read it so"
        )


def _network_args(metadata: Mapping[str, str]) -> dict[str, object]:
    """kohya's `ss_network_args` as a dict ({} where absent or not a JSON object)."""
    try:
        args = json_read.loads(metadata.get("ss_network_args") or "{}")
    except ValueError:
        return {}
    return args if isinstance(args, dict) else {}


def dora_rule(metadata: Mapping[str, str], path: Path) -> DoraRule:
    """The rule of the DoRA file `path` whose header metadata is `metadata` (module docstring).
    Raises ModelSourceError naming the file for a RULE_KEY of another value."""
    named = metadata.get(RULE_KEY)
    if named is not None:
        if named not in RULES:
            shown = named if len(named) <= 40 else named[:40] + "..."
            raise ModelSourceError(
                f"DoRA file {path}: its header's {RULE_KEY} is {shown!r}, not one of {', '.join(RULES)} "
                "(comfyui: W' = (W + delta) dora_scale / ||W||; lycoris: dora_scale is the magnitude)"
            )
        return DoraRule(named, f"{RULE_KEY} = {named!r}")
    if metadata.get(PREFIX + "lora_format") == "lycoris":
        return DoraRule(COMFYUI, f"written by lorastudio before {RULE_KEY} ({PREFIX}lora_format = 'lycoris')")
    module = metadata.get("ss_network_module") or ""
    if module.split(".")[0] == "lycoris":
        wd = _network_args(metadata).get("dora_wd")
        return DoraRule(
            LYCORIS, f"ss_network_module = {module!r}" + (f", dora_wd = {wd!r}" if wd is not None else "")
        )
    if "lycoris_config" in metadata:
        return DoraRule(LYCORIS, "lycoris_config (LyCORIS' own save)")
    return DoraRule(COMFYUI, "nothing in the header", told=False)


def dora_rule_of(path: Path) -> DoraRule:
    """`dora_rule` of the file at `path`, its header read (lora/header_read.read_header: no tensor
    loaded). Raises ModelSourceError for an unreadable header or a RULE_KEY of another value."""
    from lorastudio.lora.header_read import read_header

    return dora_rule(read_header(Path(path)).metadata, Path(path))


def untold_warnings(paths: Iterable[Path]) -> list[str]:
    """The warning (DoraRule.warning) of each LyCORIS-layout DoRA file among `paths` (one with a
    `.dora_scale` tensor) whose header tells no rule, in the order given; [] where none. For where
    the user looks: generation's answer (jobs/generation.py, GenerateOut.warnings) and the train
    preflight's notes (training/adapters/init_lora_rules.init_lora_notes). Reads headers only. Raises
    ModelSourceError for an unreadable header or a RULE_KEY of another value (the callers have
    checked each file already: lora/header.check_lora_file)."""
    from lorastudio.lora.header_read import read_header

    found = []
    for path in paths:
        header = read_header(Path(path))
        if any(name.endswith(".dora_scale") for name in header.tensors):
            note = dora_rule(header.metadata, Path(path)).warning(Path(path))
            if note is not None:
                found.append(note)
    return found
