"""A peer's LoRA step beside ours in one GPU call (issue 31 item 4): musubi-tuner's Qwen-Image
LoRA training (its own source and training loop, bench/peer/musubi_run.py) on a random-weight
model of the released config at 1024 px, then bench.probe_speed's rows (the plain diffusers +
peft step and our best plan) in the same call. Writes DIR/peer.json and DIR/peer.md.

Why Qwen-Image through musubi: musubi-tuner documents a LoRA recipe for it (docs/qwen_image.md)
and its trainer runs from cached latents and text-encoder outputs, so neither the 7B text
encoder nor the VAE needs weights here; SimpleTuner would need both loaded (or its own cache
format reverse-engineered), and FLUX Kontext is an edit model (not our FLUX.1 rows).

The peer's settings for an 80+ GB card, with their sources (musubi commit in .peer/musubi/COMMIT):
  - docs/qwen_image.md "LoRA Training": `--sdpa --mixed_precision bf16 --timestep_sampling shift
    --weighting_scheme none --discrete_flow_shift 2.2 --network_module networks.lora_qwen_image
    --network_dim 16 --max_data_loader_n_workers 2 --persistent_data_loader_workers --seed 42`,
    batch 1 (dataset TOML), LoRA on its default targets (every Linear of the 60 blocks but the
    modulation: 14 per block, networks/lora_qwen_image.py);
  - dropped from that command: `--gradient_checkpointing` (the doc's memory saving for a 42 GB
    budget: the step fits an H200 without it), `--fp8_base --fp8_scaled` (listed there as
    memory-saving options; its fp8 path dequantizes to bf16 per matmul, slower);
  - changed: `--optimizer_type adamw8bit` -> `AdamW` (torch's: bitsandbytes is not on the
    device; a rank-16 LoRA's optimizer is < 1 % of the step either way);
  - row `compile`: + `--compile` (docs/torch_compile.md: "Qwen-Image ... Default mode: ~10.5 %
    faster", its per-block regional compile).
Timing: musubi_run's hook after each optimizer step (device-synced); steady = the steps after
`--warm` (5), each row ending once they span `--steady-s` (25 s); samples/s = 1 / mean steady
step (its loop's host work included, as a user sees it); peak = torch.cuda.max_memory_allocated
after the warm-up reset (as bench_step.timed). bench/peer/README.md has the device command.

usage (GPU): python3 -m bench.peer_musubi --out $OUT --deadline-s 550
usage (CPU proof, 2 steps of a 1-block model at 64 px): python3 -m bench.peer_musubi --tiny --out DIR
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
PEER = ROOT / ".peer"  # --peer overrides it (e.g. ../.peer when the tree runs from a copy)
BASE_ARGS = [
    "--sdpa",
    "--mixed_precision",
    "bf16",
    "--timestep_sampling",
    "shift",
    "--weighting_scheme",
    "none",
    "--discrete_flow_shift",
    "2.2",
    "--optimizer_type",
    "AdamW",
    "--learning_rate",
    "5e-5",
    "--max_data_loader_n_workers",
    "2",
    "--persistent_data_loader_workers",
    "--network_module",
    "networks.lora_qwen_image",
    "--network_dim",
    "16",
    "--seed",
    "42",
]
ROWS: dict[str, list[str]] = {
    "bf16": [],
    "compile": ["--compile"],
    "gc": ["--gradient_checkpointing"],
    "fp8": ["--fp8_base", "--fp8_scaled"],
}


def peer_env() -> dict[str, str]:
    """The subprocesses' environment: musubi's source, the installed peer wheels (.peer/site on
    the device, .peerlocal/site on a CPU host) and this repository on PYTHONPATH."""
    paths = [PEER / "musubi" / "src", PEER / "site", ROOT / ".peerlocal" / "site"]
    extra = [str(p) for p in paths if p.is_dir()]
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([*extra, str(ROOT / "src"), str(ROOT), env.get("PYTHONPATH", "")])
    env["PYTHONUNBUFFERED"] = "1"
    return env


def work_dir(requested: str | None, need_gib: float) -> Path:
    """`requested`, else /dev/shm/peer when it has room for the weights (no disk write), else
    /tmp/peer."""
    if requested:
        return Path(requested)
    shm = Path("/dev/shm")
    if shm.is_dir() and shutil.disk_usage(shm).free / 2**30 > need_gib:
        return shm / "peer"
    return Path("/tmp/peer")


def steady(timing: dict[str, Any], warm: int) -> dict[str, Any]:
    """Steady-state figures from musubi_run's per-step end times: step k's time is end k minus
    end k-1 (step 1's is unknown: its start is inside musubi's setup); steps 2..warm are the
    warm-up (`warmup_steps_s`), the rest the steady window."""
    ends = timing.get("step_end_s", [])
    intervals = [b - a for a, b in zip(ends, ends[1:], strict=False)]  # steps 2..N
    cut = max(warm - 1, 0)
    steps = intervals[cut:]
    out: dict[str, Any] = {"steps_done": len(ends), "steps_timed": len(steps)}
    if steps:
        mean = sum(steps) / len(steps)
        out.update(
            s_per_step=round(mean, 4),
            s_per_step_median=round(statistics.median(steps), 4),
            spread=round((max(steps) - min(steps)) / mean, 3),
            samples_per_s=round(1 / mean, 3),
            steady_window_s=round(sum(steps), 1),
            warmup_steps_s=[round(x, 2) for x in intervals[:cut]],
        )
    for key in ("peak_gib_steady", "peak_gib_load_and_warmup", "standins", "finished"):
        if key in timing:
            out[key] = timing[key]
    return out


def run_peer_row(
    name: str, wd: Path, dit: str, args: argparse.Namespace, left_s: float, log: Path
) -> dict[str, Any]:
    """One musubi training run; its log goes to `log`."""
    timing = wd / f"timing_{name}.json"
    musubi_args = [
        "--dit",
        dit,
        "--vae",
        str(wd / "vae-not-loaded.safetensors"),  # musubi loads it only to sample
        "--text_encoder",
        str(wd / "te-not-loaded.safetensors"),  # likewise: the text-encoder outputs are cached
        "--dataset_config",
        str(wd / "dataset.toml"),
        *BASE_ARGS,
        *ROWS[name],
        "--max_train_steps",
        str(args.steps),
        "--output_dir",
        str(wd / f"out_{name}"),
        "--output_name",
        "peer",
    ]
    if args.layers:
        musubi_args += ["--num_layers", str(args.layers)]
    cmd = [
        sys.executable,
        "-m",
        "bench.peer.musubi_run",
        "train",
        str(timing),
        "--warm",
        str(args.warm),
        "--steady-s",
        str(args.steady_s),
        "--",
        *musubi_args,
    ]
    row: dict[str, Any] = {
        "trainer": "musubi-tuner",
        "row": name,
        "batch": 1,
        "musubi_args": BASE_ARGS + ROWS[name],
    }
    t = time.monotonic()
    with log.open("w", encoding="utf-8") as fh:
        try:
            proc = subprocess.run(
                cmd, stdout=fh, stderr=subprocess.STDOUT, env=peer_env(), cwd=ROOT, timeout=left_s
            )
            row["returncode"] = proc.returncode
        except subprocess.TimeoutExpired:
            row["timeout_s"] = round(left_s)
    row["wall_s"] = round(time.monotonic() - t, 1)
    if timing.exists():
        row.update(steady(json.loads(timing.read_text()), args.warm))
    if row.get("returncode") not in (0, None) or "samples_per_s" not in row:
        row["log_tail"] = log.read_text(encoding="utf-8", errors="replace")[-1500:]
    return row


def run_ours(cases: list[str], out: Path, left_s: float) -> list[dict[str, Any]]:
    """bench.probe_speed's rows in this call (it appends to out/probe.jsonl)."""
    if left_s < 60:
        return [{"trainer": "lorastudio", "skipped": "deadline"}]
    cmd = [
        sys.executable,
        "-m",
        "bench.probe_speed",
        "--out",
        str(out),
        "--deadline-s",
        str(int(left_s - 10)),
        *cases,
    ]
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT / "src"), str(ROOT), env.get("PYTHONPATH", "")])
    rows: list[dict[str, Any]] = []
    try:
        subprocess.run(cmd, env=env, cwd=ROOT, timeout=left_s)
    except subprocess.TimeoutExpired:
        rows.append({"trainer": "lorastudio", "timeout_s": round(left_s)})
    jsonl = out / "probe.jsonl"
    for line in jsonl.read_text().splitlines() if jsonl.exists() else []:
        rows.append({"trainer": "lorastudio", **json.loads(line)})
    return rows


def table(peer: list[dict[str, Any]], ours: list[dict[str, Any]]) -> str:
    """The markdown table: one line per row, ratios to our plain step of the same call."""
    base = next((r.get("samples_per_s") for r in ours if r.get("variant") == "base"), None)
    lines = [
        "| trainer | row | s/step | samples/s | x plain diffusers+peft | peak GiB (steady) | note |",
        "|---|---|---|---|---|---|---|",
    ]
    for r in peer + ours:
        sps = r.get("samples_per_s")
        ratio = f"{sps / base:.2f}x" if sps and base else "-"
        name = r.get("row") or f"{r.get('family')}:{r.get('variant')}@{r.get('batch')}"
        peak = r.get("peak_gib_steady", r.get("peak_gib", "-"))
        note = "; ".join(
            f"{k}={r[k]}"
            for k in (
                "spread",
                "steps_timed",
                "timeout_s",
                "returncode",
                "skipped",
                "crash",
                "timeout",
                "error",
            )
            if k in r
        )
        s_step = r.get("s_per_step", "-")
        lines.append(f"| {r['trainer']} | {name} | {s_step} | {sps or '-'} | {ratio} | {peak} | {note} |")
    return "\n".join(lines) + "\n"


def write_result(out: Path, result: dict[str, Any], t0: float) -> str:
    """out/peer.json and out/peer.md (each staged, then renamed); returns the table."""
    result["total_s"] = round(time.monotonic() - t0, 1)
    base = next((r.get("samples_per_s") for r in result["ours"] if r.get("variant") == "base"), None)
    for r in result["peer"] + result["ours"]:
        if base and r.get("samples_per_s"):
            r["x_plain"] = round(r["samples_per_s"] / base, 3)
    md = table(result["peer"], result["ours"])
    for name, text in (("peer.json", json.dumps(result, indent=1)), ("peer.md", md)):
        staged = out / f".{name}.tmp"
        staged.write_text(text)
        staged.replace(out / name)
    return md


def main() -> None:
    global PEER  # --peer: peer_env and the checks below read it
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--deadline-s", type=float, default=560.0)
    parser.add_argument(
        "--tiny", action="store_true", help="CPU proof: 1 block, 64 px, 2 steps, no probe rows"
    )
    parser.add_argument(
        "--rows", default=None, help=f"musubi rows, of {sorted(ROWS)} (default bf16,compile; --tiny: bf16)"
    )
    parser.add_argument(
        "--ours", default="qwen:base,fp8+cudnn+lag", help="bench.probe_speed cases ('' for none)"
    )
    parser.add_argument("--ours-s", type=float, default=240.0, help="seconds kept for our rows")
    parser.add_argument("--steps", type=int, help="musubi's max_train_steps, an upper bound (150; --tiny: 2)")
    parser.add_argument(
        "--steady-s", type=float, help="a musubi row ends once its steady steps span this (25)"
    )
    parser.add_argument("--warm", type=int, help="warm-up steps left out of the figures (5; --tiny: 0)")
    parser.add_argument("--peer", type=Path, default=PEER, help="the folder fetch_musubi.sh filled")
    parser.add_argument(
        "--work", default=None, help="folder for the weights and caches (default: /dev/shm or /tmp)"
    )
    args = parser.parse_args()
    PEER = args.peer.resolve()
    t0 = time.monotonic()
    deadline = t0 + args.deadline_s
    resolution, tokens, device, shards = 1024, 128, "cuda", 4
    args.layers = None
    if args.tiny:
        resolution, tokens, device, shards = 64, 8, "cpu", 2
        args.layers, args.ours = 1, ""
    tiny = args.tiny
    args.steps = args.steps if args.steps is not None else (2 if tiny else 150)
    args.warm = args.warm if args.warm is not None else (0 if tiny else 5)
    args.steady_s = args.steady_s if args.steady_s is not None else (0.0 if tiny else 25.0)
    args.rows = args.rows or ("bf16" if args.tiny else "bf16,compile")
    rows = [r for r in args.rows.split(",") if r]
    unknown = set(rows) - set(ROWS)
    if unknown:
        raise SystemExit(f"--rows: unknown {sorted(unknown)}; known {sorted(ROWS)}")
    if not (PEER / "musubi" / "src" / "musubi_tuner").is_dir():
        raise SystemExit(f"{PEER / 'musubi'} is missing: run bash bench/peer/fetch_musubi.sh")
    args.out.mkdir(parents=True, exist_ok=True)
    wd = work_dir(args.work, 45.0 if not args.tiny else 2.0)
    shutil.rmtree(wd, ignore_errors=True)
    result: dict[str, Any] = {
        "musubi_commit": (PEER / "musubi" / "COMMIT").read_text().strip()
        if (PEER / "musubi" / "COMMIT").exists()
        else None,
        "resolution": resolution,
        "text_tokens": tokens,
        "work_dir": str(wd),
        "peer": [],
        "ours": [],
    }
    prep = [
        sys.executable,
        "-m",
        "bench.peer.musubi_run",
        "prepare",
        str(wd),
        "--device",
        device,
        "--resolution",
        str(resolution),
        "--tokens",
        str(tokens),
        "--steps",
        str(args.steps),
        "--shards",
        str(shards),
    ]
    if args.layers:
        prep += ["--layers", str(args.layers)]
    t = time.monotonic()
    try:
        proc = subprocess.run(
            prep, capture_output=True, text=True, env=peer_env(), cwd=ROOT, timeout=max(deadline - t, 1)
        )
    except subprocess.TimeoutExpired:
        proc = subprocess.CompletedProcess(prep, -9, "", "prepare ran past the deadline")
    result["prepare_s"] = round(time.monotonic() - t, 1)
    if proc.returncode != 0:
        result["prepare_error"] = (proc.stdout[-1000:], proc.stderr[-2000:])
        print(proc.stderr[-2000:], flush=True)
    else:
        result["prepare"] = json.loads(proc.stdout.strip().splitlines()[-1])
        for name in rows:
            left = deadline - time.monotonic() - (args.ours_s if args.ours else 0)
            if left < 60 and not args.tiny:
                result["peer"].append({"trainer": "musubi-tuner", "row": name, "skipped": "deadline"})
                continue
            row = run_peer_row(
                name, wd, result["prepare"]["dit"], args, max(left, 30), args.out / f"musubi_{name}.log"
            )
            result["peer"].append(row)
            print(json.dumps(row), flush=True)
    shutil.rmtree(wd, ignore_errors=True)  # the weights leave RAM / disk before our rows
    md = write_result(args.out, result, t0)  # the peer's rows stay even if ours do not finish
    if args.ours:
        result["ours"] = run_ours(args.ours.split(), args.out, deadline - time.monotonic())
        md = write_result(args.out, result, t0)
    print(md)
    ok = all("samples_per_s" in r for r in result["peer"]) and "prepare" in result
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()
