"""Which wall-time records a forecast may use as "the same run" (jobs/time_forecast.py): the
exact-match keys of a record's signature and the predicates over them (split out of
time_forecast to keep each module small)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from lorastudio import json_read
from lorastudio.timings import PHASES, PLAIN_ADAPTER, adapter_signature, record_run

# Exact-match keys of a record (the rest is scaled): what changes the time per unit of work.
SAME_KEYS = (
    "family",
    "base_model",
    "denoiser_bytes",
    "device_name",
    "plan",
    "compiled",
    "attention_backend",
    "lora_rank",
    "preservation",  # records before it: False
    "adapter",  # its kind and a LoKr's shape (1861); records before it: their run's LoRA says (1970)
)


def same_plan(record: dict[str, Any], now: dict[str, Any]) -> bool:
    """Whether a record ran this run's plan (base precision, checkpointing, block swap; the
    micro-batch is scaled as samples) and compile setting."""
    sig, keys = record["signature"], ("base_precision", "gradient_checkpointing", "offload_blocks")
    plan = sig.get("plan") or {}
    return all(plan.get(k) == now["plan"].get(k) for k in keys) and sig.get("compiled") == now["compiled"]


def signature_key(record: dict[str, Any], name: str) -> Any:
    """A record's signature value (`preservation` False, `adapter` a plain LoRA's in records
    written before them: older_adapter fills it from the run's own LoRA where it can)."""
    absent = {"preservation": False, "adapter": PLAIN_ADAPTER}.get(name)
    return record["signature"].get(name, absent)


def older_adapter(record: dict[str, Any], outputs: Path) -> dict[str, Any] | None:
    """The adapter of a record written before the signature kept it (RELIABILITY 1970): its run's
    LoRA sidecar (<outputs>/<run>/<run>.json, the run named by the record's "file",
    timings.read_records) holds the run's config; taken where that config is of the record's
    base model and rank (a folder overwritten since by another run of them could still differ:
    the record is then read as that run's adapter). None: a record that keeps its adapter, or no
    such sidecar (the record reads as a plain LoRA's, as before)."""
    sig, name = record["signature"], record_run(str(record.get("file", "")))
    if "adapter" in sig or not name:
        return None
    try:
        sidecar = json_read.loads((outputs / name / f"{name}.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    cfg = sidecar.get("config") if isinstance(sidecar, dict) else None
    if not isinstance(cfg, dict) or cfg.get("base_model") != sig.get("base_model"):
        return None
    if cfg.get("lora_rank") != sig.get("lora_rank"):
        return None
    adapter = cfg.get("adapter", "lora")
    factor, both = cfg.get("lokr_factor"), cfg.get("lokr_decompose_both")
    if (
        not isinstance(adapter, str)
        or not isinstance(factor, int | None)
        or not isinstance(both, bool | None)
    ):
        return None
    return adapter_signature(adapter, factor, both)


def same_size(record: dict[str, Any], now: dict[str, Any]) -> bool:
    """Whether a record ran this run's pixels, batch size and accumulation."""
    return all(record["signature"][k] == now[k] for k in ("pixels", "batch_size", "grad_accum"))


def usable_record(record: dict[str, Any]) -> bool:
    """A record this module can scale: its signature's numbers, every phase, a steady step time."""
    sig, phases = record.get("signature"), record.get("phases")
    if not isinstance(sig, dict) or not isinstance(phases, dict):
        return False
    numbers = [sig.get(k) for k in ("pixels", "batch_size", "grad_accum", "denoiser_bytes")]
    numbers += [phases.get(k) for k in PHASES if k != "process_start"] + [record.get("s_per_step")]
    return all(isinstance(v, int | float) for v in numbers) and record["s_per_step"] > 0


# what a record of other settings differs in, in the forecast's words (RELIABILITY 1995)
_DIFFER_WORDS = (
    (("family", "base_model", "denoiser_bytes"), "bases"),
    (("adapter",), "adapters"),
    (("lora_rank",), "ranks"),
    (("attention_backend",), "attention backends"),
    (("preservation",), "output preservation settings"),
)


def differ_words(records: list[dict[str, Any]], now: dict[str, Any], *, plans: bool = False) -> str:
    """ "other bases", "other adapters / ranks", ...: what the records a forecast scales from differ
    in from this run (`now`, its signature) among SAME_KEYS but the plan, with "plans" last where
    `plans` (records of another plan); "other bases" where they differ in none of them and not in
    the plan (a caller asks only for records of other settings)."""
    words = [
        word
        for keys, word in _DIFFER_WORDS
        if any(signature_key(r, k) != now[k] for r in records for k in keys)
    ]
    words += ["plans"] if plans else []
    return "other " + " / ".join(words or ["bases"])
