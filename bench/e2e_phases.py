"""The phase table of an end-to-end run, derived from its recorded events (bench/e2e_run.py).

Input: (seconds since the run started, typed event) pairs, as the engine emitted them (CLI mode:
the event sink in the run's process) or as the job service streamed them (API mode: arrival
times of the server-sent events, <= 0.25 s late: api/sse.py polls its log that often). Only the
product's event names are read: model_load_started / model_load_completed (per component:
text_encoders, vae, denoiser), preparing (conditioning / latents / denoiser), plan_chosen,
progress, sample_ready, complete / error. The attention probe starts as the run begins
(training/speed/attention_early.py): `plan_and_probe_s` (denoiser loaded -> plan_chosen) is what the
run waited for it (and for a memory budget's plan measurement), the first step runs from
plan_chosen to the first progress event.
"""

from __future__ import annotations

from typing import Any

Timed = list[tuple[float, Any]]  # (seconds since the start, event)


def _first(events: Timed, kind: str, **match: Any) -> tuple[float, Any] | None:
    return next(
        (
            (t, e)
            for t, e in events
            if e.type == kind and all(getattr(e, k, None) == v for k, v in match.items())
        ),
        None,
    )


def phase_table(events: Timed, total_s: float) -> dict[str, Any]:
    """Per phase seconds (rounded to 0.1), the plan, steady samples/s and the run's own peak
    memory figure. Phases a run did not reach are absent."""
    loads = {e.component: round(e.seconds, 1) for _, e in events if e.type == "model_load_completed"}
    out: dict[str, Any] = {"weights_load_s": loads, "weights_load_total_s": round(sum(loads.values()), 1)}
    waited = {  # a load beside other work (the denoiser's beside phases 1-2): the part the run waited for
        e.component: round(e.waited_s, 2)
        for _, e in events
        if e.type == "model_load_completed" and getattr(e, "waited_s", None) is not None
    }
    if waited:
        out["weights_waited_s"] = waited
    for phase, after in (("conditioning", "text_encoders"), ("latents", "vae")):  # encoding, after the load
        start = _first(events, "model_load_completed", component=after)
        done = [t for t, e in events if e.type == "preparing" and e.phase == phase and e.done == e.total]
        if start and done:
            out[f"{phase}_s"] = round(done[-1] - start[0], 1)
    loaded = _first(events, "model_load_completed", component="denoiser")
    plan = _first(events, "plan_chosen")
    if loaded and plan:  # the plan's measurement (if any) and the wait for the attention probe
        out["plan_and_probe_s"] = round(plan[0] - loaded[0], 1)
    if plan:
        out["plan"] = {
            k: getattr(plan[1], k)
            for k in ("base_precision", "attention_backend", "decided_by", "fused_projections", "fallbacks")
        }
    progress = [(t, e) for t, e in events if e.type == "progress"]
    if plan and progress:
        out["first_step_s"] = round(progress[0][0] - plan[0], 1)  # compile included
        out["time_to_first_step_s"] = round(progress[0][0], 1)
        if out["weights_load_total_s"]:
            out["ttfs_over_load"] = round(progress[0][0] / out["weights_load_total_s"], 2)
        out["steady_samples_per_s"] = progress[-1][1].samples_per_second
        out["peak_memory_gb_event"] = progress[-1][1].peak_memory_gb
        if len(progress) > 2:
            out["s_per_step_after_first"] = round(
                (progress[-1][0] - progress[0][0]) / (len(progress) - 1), 3
            )  # sample rounds and checkpoints included
        by_step = {e.step: t for t, e in progress}
        out["sample_round_s"] = [
            round(t - by_step[e.step], 1) for t, e in events if e.type == "sample_ready" and e.step in by_step
        ]
        out["steps_run"] = progress[-1][1].step
        out["final_loss"] = progress[-1][1].loss
    end = _first(events, "complete") or _first(events, "error")
    if end is not None:
        out["end"] = end[1].type if end[1].type == "complete" else f"error: {end[1].message[:300]}"
        out["wall_to_end_s"] = round(end[0], 1)
    out["total_s"] = round(total_s, 1)
    return out


def timeline(events: Timed, progress_kept: int = 2) -> list[list[Any]]:
    """Every event but the progress ones after the first `progress_kept`, as [seconds, type, what]
    (what: the component, phase or step it names): where the time between the phases goes."""
    out: list[list[Any]] = []
    steps = 0
    for t, e in events:
        if e.type == "progress":
            steps += 1
            if steps > progress_kept:
                continue
        what = next(
            (getattr(e, k) for k in ("component", "phase", "step") if getattr(e, k, None) is not None), ""
        )
        done = getattr(e, "done", None)
        out.append(
            [round(t, 2), e.type, f"{what} {done}/{getattr(e, 'total', '')}" if done is not None else what]
        )
    return out


def overhead(cli: dict[str, Any], api: dict[str, Any]) -> dict[str, Any]:
    """The job service's overhead: the API run's wall against the CLI run's for the same steps,
    whole and after the first step (the part no cache changes)."""
    result: dict[str, Any] = {}
    a, c = api.get("wall_to_end_s"), cli.get("wall_to_end_s")
    if a and c:
        result["api_vs_cli_wall"] = round(a / c - 1, 4)
    a1, c1 = api.get("time_to_first_step_s"), cli.get("time_to_first_step_s")
    if a and c and a1 is not None and c1 is not None and c > c1:
        result["api_vs_cli_after_first_step"] = round((a - a1) / (c - c1) - 1, 4)
        result["api_vs_cli_time_to_first_step_s"] = round(a1 - c1, 1)
    return result
