"""Which wall-time records a forecast may use as "the same run" (jobs/time_forecast.py): the
exact-match keys of a record's signature and the predicates over them (split out of
time_forecast to keep each module small)."""

from __future__ import annotations

from typing import Any

from lorastudio.timings import PHASES, PLAIN_ADAPTER

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
    "adapter",  # its kind and a LoKr's shape; records before it: a plain LoRA's (RELIABILITY 1861)
)


def same_plan(record: dict[str, Any], now: dict[str, Any]) -> bool:
    """Whether a record ran this run's plan (base precision, checkpointing, block swap; the
    micro-batch is scaled as samples) and compile setting."""
    sig, keys = record["signature"], ("base_precision", "gradient_checkpointing", "offload_blocks")
    plan = sig.get("plan") or {}
    return all(plan.get(k) == now["plan"].get(k) for k in keys) and sig.get("compiled") == now["compiled"]


def signature_key(record: dict[str, Any], name: str) -> Any:
    """A record's signature value (`preservation` False, `adapter` a plain LoRA's in records
    written before them)."""
    absent = {"preservation": False, "adapter": PLAIN_ADAPTER}.get(name)
    return record["signature"].get(name, absent)


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
