"""Another trainer's setting given alone to a lorastudio config, named (no torch; RELIABILITY 2041).

An unknown setting of a run config is told by config_resolve._did_you_mean, the one place the CLI's
`--set` and config file, `POST /api/train/start`, the preflight and a resume's settings share. A
key another trainer reads (kohya sd-scripts / musubi-tuner, SimpleTuner, OneTrainer, ai-toolkit) is
not a misspelling of ours, and difflib's nearest field was wrong (`max_train_steps` ->
max_bad_steps) or none (`network_args`, `checkpointing_steps`). `peer_hint` names what it is here,
from the importers' own tables (config_import: the keys each carries to a setting of ours, and
those it drops saying why lorastudio needs none or lacks one), and points at `lorastudio config
import`, which converts the whole file. `GUESSES` are names a user guesses for a setting of ours
(`checkpoint_every` for save_every): said as "did you mean".
"""

from __future__ import annotations

import re

from lorastudio.config_import import aitoolkit_data, kohya_data, kohya_tables
from lorastudio.config_import.onetrainer import _NEEDLESS as _OT_NEEDLESS
from lorastudio.config_import.onetrainer import _SIMPLE as _OT_SIMPLE
from lorastudio.config_import.report import NOT_NEEDED, NOT_SUPPORTED
from lorastudio.config_import.simpletuner import _NEEDLESS as _ST_NEEDLESS
from lorastudio.config_import.simpletuner import _SIMPLE as _ST_SIMPLE

# keys the importers map in code rather than by a table: the key -> what it becomes here
_KOHYA_CODE = {
    "network_args": "adapter (its algo, conv_dim, preset ... options: the importer reads each)",
    "network_module": "family and adapter",
    "pretrained_model_name_or_path": "base_model",
    "train_data_dir": "data_dir",
    "reg_data_dir": "a datasets entry with regularisation = true",
    "dataset_config": "datasets",
    "optimizer_type": "optimizer",
    "unet_lr": "learning_rate",
    "loss_type": "loss",
    "weighting_scheme": "timestep_sampling",
    "discrete_flow_shift": "flow_shift",
    "fp8_base": "base_precision",
    "log_with": "report_to",
    "flip_aug": "random_flip",
    "shuffle_caption": "shuffle_tags",
    "enable_bucket": "aspect_buckets",
    "bucket_no_upscale": "no_upscale",
    "caption_dropout_rate": "caption_dropout",
}
_AITOOLKIT = {  # config.process[0]'s network / train / save / datasets keys (config_import/aitoolkit*.py)
    "linear": "lora_rank",
    "linear_alpha": "lora_alpha",
    "lr": "learning_rate",
    "gradient_accumulation": "grad_accum",
    "optimizer_params": "optimizer_args",
    "timestep_type": "timestep_sampling",
    "max_step_saves_to_keep": "keep_loras",
    "folder_path": "data_dir (a datasets entry's path)",
    "name_or_path": "base_model",
    "diff_output_preservation": "preservation",
}
_SIMPLETUNER_CODE = {
    "pretrained_model_name_or_path": "base_model",
    "model_family": "family",
    "data_backend_config": "datasets",
}
_ONETRAINER_CODE = {
    "base_model_name": "base_model",
    "sample_after": "sample_every",
    "offset_noise_weight": "noise_offset",
    "lora_decompose": "adapter = dora",
    "concepts": "datasets",
    "loss_weight_fn": "snr_gamma (CONSTANT: null, off; MIN_SNR_GAMMA: its loss_weight_strength)",
    "loss_weight_strength": "snr_gamma (with loss_weight_fn MIN_SNR_GAMMA)",
}
# (the trainer's name, its keys carried to ours, its keys dropped: "not needed here: why" or
# "not supported here: what lorastudio does instead")
_PEERS: tuple[tuple[str, dict[str, str], dict[str, str]], ...] = (
    (
        "kohya",
        {**{k: v[0] for k, v in kohya_tables.SIMPLE.items()}, **_KOHYA_CODE},
        {
            **{k: f"{NOT_NEEDED}: {why}" for k, why in kohya_tables.NEEDLESS.items()},
            **{k: f"{NOT_SUPPORTED}: {why}" for k, why in kohya_tables.UNSUPPORTED.items()},
        },
    ),
    ("SimpleTuner", {**{k: v[0] for k, v in _ST_SIMPLE.items()}, **_SIMPLETUNER_CODE}, dict(_ST_NEEDLESS)),
    ("OneTrainer", {**{k: v[0] for k, v in _OT_SIMPLE.items()}, **_ONETRAINER_CODE}, dict(_OT_NEEDLESS)),
    ("ai-toolkit", _AITOOLKIT, {}),
)

# a `[[datasets]]` entry's keys as the trainers' dataset files spell them (kohya's
# [[datasets.subsets]], ai-toolkit's datasets items, SimpleTuner's data backends): key -> (the
# trainers, what it is here)
_ENTRY_PEERS: dict[str, tuple[list[str], str]] = {}
for _name, _pairs in (
    (
        "kohya",
        [*((k, v) for k, v, _ in kohya_data._ENTRY), ("image_dir", "path"), ("image_directory", "path")],
    ),
    ("kohya", [(k, f"the run's {v}") for k, v, _ in kohya_data._RUN]),
    ("ai-toolkit", [*((k, v) for k, v, _ in aitoolkit_data._ENTRY), ("folder_path", "path")]),
    ("ai-toolkit", [(k, f"the run's {v}") for k, v, _ in aitoolkit_data._RUN]),
    ("SimpleTuner", [("instance_data_dir", "path"), ("is_regularisation_data", "regularisation")]),
):
    for _key, _target in _pairs:
        if _key != _target:
            _ENTRY_PEERS.setdefault(_key, ([], _target))[0].append(_name)
ENTRY_GUESSES = {  # a name guessed for a datasets entry's key -> it
    "dir": "path",
    "folder": "path",
    "data_dir": "path",
    "directory": "path",
    "repeat": "repeats",
    "num_repeats": "repeats",
    "trigger": "trigger_word",
    "caption": "default_caption",
}

GUESSES = {  # a name guessed for a setting of ours -> it
    "checkpoint_every": "save_every",
    "checkpoint_steps": "save_every",
    "save_steps": "save_every",
    "save_checkpoint_every": "save_every",
    "max_steps": "steps",
    "train_steps": "steps",
    "total_steps": "steps",
    "epochs": "num_epochs",
    "lr": "learning_rate",
    "rank": "lora_rank",
    "alpha": "lora_alpha",
    "dropout": "lora_dropout",
    "dataset": "data_dir",
    "dataset_dir": "data_dir",
    "model": "base_model",
    "base": "base_model",
    "trigger": "trigger_word",
    "gradient_accumulation_steps": "grad_accum",
    "sample_steps_every": "sample_every",
}


def peer_hint(key: str) -> str:
    """'; <trainer>'s KEY is X here (...)' for `key` (not a setting of ours) that another
    trainer's importer carries to a setting of ours, '; <trainer>'s KEY is not needed here: why
    (...)' or '... is not supported here: ...' for one it drops, '; did you mean X?' for a GUESSES
    name, what a kohya `[*_arguments]` section (sd-scripts' sectioned config file) is; '' for none
    of those."""
    if key in GUESSES:
        return f"; did you mean {GUESSES[key]}?"
    if key.endswith("_arguments") and key != "_arguments":  # RELIABILITY 2120
        return (
            f"; kohya sd-scripts' [{key}] section holds kohya's arguments, named otherwise here"
            " (`lorastudio config import` converts a whole kohya file)"
        )
    mapped = [(name, table[key]) for name, table, _ in _PEERS if key in table and table[key] != key]
    if mapped:
        targets: dict[str, list[str]] = {}  # what it is here -> the trainers that read it so
        for name, target in mapped:
            targets.setdefault(target, []).append(name)
        said = "; ".join(
            f"{_names(names, 'and')} {key} is {target} here" for target, names in targets.items()
        )
        files = _names([n for n, _ in mapped], "or", own=False)
        return f"; {said} (`lorastudio config import` converts a whole {files} file)"
    dropped = [(name, why[key]) for name, _, why in _PEERS if key in why]
    if dropped:
        name, why = dropped[0]
        return f"; {name}'s {key} is {why} (`lorastudio config import` converts a whole {name} file)"
    return ""


def entry_hint(key: str) -> str:
    """What an unknown key of a `[[datasets]]` entry is here: '; kohya's and ai-toolkit's num_repeats
    is repeats here (...)' for a key of another trainer's dataset file (RELIABILITY 2141), '; did
    you mean X?' for an ENTRY_GUESSES name; '' for neither."""
    if key in _ENTRY_PEERS:
        names, target = _ENTRY_PEERS[key]
        files = _names(names, "or", own=False)
        return (
            f"; {_names(names, 'and')} {key} is {target} here (`lorastudio config import` converts a "
            f"whole {files} file with its datasets)"
        )
    if key in ENTRY_GUESSES:
        return f"; did you mean {ENTRY_GUESSES[key]}?"
    return ""


# what a setting's name shown in a problem line must not hold raw: C0 controls (newline and tab
# too), DEL, C1 controls, bidi and line-separator format characters (cli/safe_output's set)
_UNSHOWN = re.compile("[\x00-\x1f\x7f-\x9f\u061c\u200e\u200f\u2028-\u202e\u2066-\u2069]")
_NAMED = {"\t": "\\t", "\n": "\\n", "\r": "\\r"}
SHOWN_KEY_LIMIT = 200  # a key no form has, echoed in the field and the detail


def shown_key(key: str) -> str:
    """`key` (a setting's path as the user spelt it: an unknown key is echoed) for a problem's
    field, on one line (RELIABILITY 2145): each control, line-breaking or bidi character written as
    its escape (`\\n`, `\\x1b`, `\\u202e`: a key holding a newline printed a problem line of its
    own, "  - lora_rank: fine: unknown setting"), and cut past SHOWN_KEY_LIMIT characters saying
    its length."""
    cut = key if len(key) <= SHOWN_KEY_LIMIT else f"{key[:SHOWN_KEY_LIMIT]}... ({len(key):,} characters)"
    return _UNSHOWN.sub(lambda m: _NAMED.get(m.group()) or _escape(m.group()), cut)


def _escape(char: str) -> str:
    code = ord(char)
    return f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}"


def level_hint(key: str, in_entry: bool) -> str:
    """Where `key` is a setting of ours one level off (RELIABILITY 2144): at the top of a config
    (`in_entry` False), a datasets entry's key (`repeats`); in a datasets entry, a key of the run
    (`steps`). '' for neither: difflib's nearest name was a wrong guess (`loss_weight` ->
    prior_loss_weight) or none (`repeats`)."""
    from lorastudio.config import TrainConfig
    from lorastudio.config_datasets import DatasetEntry

    if not in_entry and key in DatasetEntry.model_fields and key not in TrainConfig.model_fields:
        return (
            f"; {key} is a setting of a datasets entry, not of the run: give the folder as a [[datasets]] "
            f"entry (its path, the data_dir) with {key} set there"
        )
    if in_entry and key in TrainConfig.model_fields and key not in DatasetEntry.model_fields:
        return f"; {key} is a setting of the run, not of a datasets entry: set it at the top of the config"
    return ""


def _names(names: list[str], word: str, own: bool = True) -> str:
    """`names` joined ("kohya's and SimpleTuner's"; own=False: "kohya or SimpleTuner")."""
    said = [f"{n}'s" if own else n for n in dict.fromkeys(names)]
    return said[0] if len(said) == 1 else f"{', '.join(said[:-1])} {word} {said[-1]}"
