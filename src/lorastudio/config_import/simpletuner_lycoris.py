"""SimpleTuner's `lycoris_config` (a `lora_type = "lycoris"` run's LyCORIS settings, a JSON file:
SimpleTuner documentation/LYCORIS.md) -> our adapter settings (no torch).

    {"algo": "lokr", "multiplier": 1.0, "linear_dim": 10000, "linear_alpha": 1, "factor": 16,
     "apply_preset": {"target_module": ["Attention", "FeedForward"],
                      "module_algo_map": {"Attention": {"factor": 16}}}}

algo lokr / loha / lora (locon) become adapter lokr / loha / lora (dora with LyCORIS'
`weight_decompose`); factor is lokr_factor, decompose_both lokr_decompose_both, linear_dim /
linear_alpha lora_rank / lora_alpha, dropout lora_dropout. LyCORIS' full-matrix LoKr (linear_dim
over half of every factor's size, documented as 10000, or `full_matrix`) ignores its alpha (a
scale of 1): here it is lora_rank 1024 (w2 full in every layer whose factor is at most 2048
wide: all of the families' at a factor of 2 or more) with lora_alpha = lora_rank (peft scales by
alpha / rank: 1). conv_dim / conv_alpha (our adapters are on the family's linear layers),
apply_preset (module classes and per-class factors: ours are lora_targets' layer names and one
factor), rank / module dropout, Tucker and scalar options are named as not carried.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from lorastudio.config_import import values
from lorastudio.config_import.common import carry
from lorastudio.config_import.reading import read_document
from lorastudio.config_import.report import NOT_NEEDED, NOT_SUPPORTED, Draft, Line

_ALGOS = {"lokr": "lokr", "loha": "loha", "lora": "lora", "locon": "lora"}
FULL_RANK = 1024  # TrainConfig.lora_rank's bound: a full-matrix LoKr's rank here
_FULL = (
    "LyCORIS' full-matrix LoKr (w2 not decomposed, its alpha ignored: a scale of 1): here lora_rank "
    f"{FULL_RANK}, which keeps w2 full in every layer whose factor is at most {2 * FULL_RANK} wide, and "
    "lora_alpha = lora_rank (peft's scale alpha / rank = 1)"
)
_NOT_CARRIED = {
    "conv_dim": f"{NOT_SUPPORTED}: the adapter is on the family's linear layers (lora_targets); conv layers get none",
    "conv_alpha": f"{NOT_SUPPORTED}: the adapter is on the family's linear layers (lora_targets); conv layers get none",
    "apply_preset": f"{NOT_SUPPORTED}: the adapted layers are the family's lora_targets (layer names, not module "
    "classes) with one lokr_factor; set lora_targets by hand to narrow them",
    "rank_dropout": f"{NOT_SUPPORTED}: lora_dropout drops the adapter's input only",
    "module_dropout": f"{NOT_SUPPORTED}: lora_dropout drops the adapter's input only",
    "bypass_mode": f"{NOT_NEEDED}: the same weights applied another way (peft adds the adapter's output)",
    "train_norm": f"{NOT_SUPPORTED}: norm layers are not trained",
}


def _on(value: Any) -> bool | None:
    """A LyCORIS switch (full_matrix, weight_decompose) as LyCORIS reads its JSON: true / false,
    1 / 0 or their text ("true", "1"); None for anything else (not one we can tell)."""
    if isinstance(value, bool) or value is None:
        return bool(value)
    if isinstance(value, int) and value in (0, 1):
        return bool(value)
    if isinstance(value, str) and value.strip().lower() in ("true", "false", "1", "0"):
        return value.strip().lower() in ("true", "1")
    return None


def main_keys_taken(draft: Draft, args: dict[str, Any], names: dict[str, str]) -> None:
    """A lycoris run's main lora_rank / lora_alpha / lora_dropout (SimpleTuner's peft LoRA
    settings, which its LyCORIS run does not read): reported as not needed, taken out of `args`."""
    for key in ("lora_rank", "lora_alpha", "lora_dropout"):
        if key in args:
            args.pop(key)
            draft.drop(
                names[key], f"{NOT_NEEDED}: a LyCORIS run (lora_type lycoris) takes its lycoris_config's"
            )


def lycoris_settings(draft: Draft, peer: str, path: Path) -> None:
    """Carry the LyCORIS settings file `path` (named at `peer`) into draft's adapter settings."""
    doc = read_document(path, where=f"{draft.file.name}: {peer}")
    if not isinstance(doc, dict):
        draft.fail(peer, f"{path.name} is not a table of LyCORIS settings")
        return
    draft.lines.append(
        Line(peer, "changed", "adapter", str(path), "its LyCORIS settings read as the adapter's")
    )
    root = path.name
    algo = str(doc.get("algo", "lora")).lower()
    adapter = _ALGOS.get(algo)
    decompose = _on(doc.get("weight_decompose")) is True
    if adapter is None:
        draft.drop(f"{root}.algo", f"{NOT_SUPPORTED}: {algo!r}: the adapters are lora, dora, loha and lokr")
        for key in doc:
            if key != "algo":
                draft.drop(f"{root}.{key}", f"{NOT_NEEDED}: its algo {algo!r} is not carried")
        return
    if adapter == "lora" and decompose:
        adapter = "dora"
    draft.set(f"{root}.algo" if "algo" in doc else peer, "adapter", adapter,
              "LyCORIS' weight_decompose: peft's DoRA" if adapter == "dora" else "")  # fmt: skip
    if "weight_decompose" in doc:
        if _on(doc["weight_decompose"]) is None:
            draft.drop(
                f"{root}.weight_decompose", f"{doc['weight_decompose']!r} is not true or false (read as off)"
            )
        elif adapter == "dora":
            draft.fold(f"{root}.weight_decompose", "adapter", True)
        elif decompose:
            draft.drop(f"{root}.weight_decompose", f"{NOT_SUPPORTED}: peft's DoRA is a LoRA's (algo lora)")
        else:
            draft.drop(f"{root}.weight_decompose", f"{NOT_NEEDED}: off")
    _rank(draft, root, doc, adapter)
    _options(draft, root, doc, adapter)
    draft.unread(doc, root)


def _rank(draft: Draft, root: str, doc: dict[str, Any], adapter: str) -> None:
    """linear_dim / linear_alpha / full_matrix as lora_rank / lora_alpha."""
    full = adapter == "lokr" and _on(doc.get("full_matrix")) is True
    try:
        dim = values.integer(doc["linear_dim"]) if "linear_dim" in doc else None
    except values.Skip as why:
        draft.drop(f"{root}.linear_dim", str(why))
        dim = None
    if adapter == "lokr" and dim is not None and dim > FULL_RANK:
        full = True
    if full:
        source = f"{root}.full_matrix" if _on(doc.get("full_matrix")) is True else f"{root}.linear_dim"
        draft.set(source, "lora_rank", FULL_RANK, _FULL)
        draft.set(source, "lora_alpha", float(FULL_RANK), _FULL)
        for key in ("linear_dim", "full_matrix", "linear_alpha"):
            if key in doc and f"{root}.{key}" != source:
                draft.drop(f"{root}.{key}", f"{NOT_NEEDED}: a full matrix's scale is 1 (alpha = rank here)")
        return
    if dim is not None:
        draft.set(f"{root}.linear_dim", "lora_rank", dim)
    if "linear_alpha" in doc:
        carry(draft, f"{root}.linear_alpha", doc["linear_alpha"], "lora_alpha", values.number)
    if "full_matrix" in doc:
        on = _on(doc["full_matrix"])
        draft.drop(f"{root}.full_matrix", f"{doc['full_matrix']!r} is not true or false (read as off)" if on is None
                   else f"{NOT_NEEDED}: lokr only" if on else f"{NOT_NEEDED}: off")  # fmt: skip


def _options(draft: Draft, root: str, doc: dict[str, Any], adapter: str) -> None:
    """factor, decompose_both, dropout, multiplier, wd_on_output and the options not carried."""
    for key, ours, conv in (("factor", "lokr_factor", values.integer), ("decompose_both", "lokr_decompose_both", values.flag)):  # fmt: skip
        if key in doc:
            if adapter == "lokr":
                carry(draft, f"{root}.{key}", doc[key], ours, conv)
            else:
                draft.drop(f"{root}.{key}", f"{NOT_NEEDED}: lokr only")
    if "dropout" in doc:
        carry(draft, f"{root}.dropout", doc["dropout"], "lora_dropout", values.number)
    if "multiplier" in doc:
        try:
            one = values.number(doc["multiplier"]) == 1.0
        except values.Skip:
            one = False
        draft.drop(f"{root}.multiplier", f"{NOT_NEEDED}: 1 is the adapter's strength" if one else
                   f"{NOT_SUPPORTED}: the adapter trains at strength 1")  # fmt: skip
    if "wd_on_output" in doc:
        draft.drop(f"{root}.wd_on_output", f"{NOT_NEEDED}: peft's DoRA norms each output row" if doc["wd_on_output"]
                   else f"{NOT_SUPPORTED}: peft's DoRA norms each output row, not each input column")  # fmt: skip
    for key in ("use_tucker", "use_scalar", "use_cp", "rs_lora", "unbalanced_factorization"):
        if key in doc:
            draft.drop(f"{root}.{key}", f"{NOT_SUPPORTED}: {key}" if doc[key] else f"{NOT_NEEDED}: off")
    for key, why in _NOT_CARRIED.items():
        if key in doc:
            draft.drop(f"{root}.{key}", why)
