"""Session 36 resume audit (slow): `lorastudio train` stopped by a Ctrl-C (a stop with save), a
SIGKILL between checkpoints or a SIGKILL as a checkpoint's state.pt is written, then
`lorastudio train --resume RUN_DIR`, against the same run uninterrupted: the LoRA tensors of every
file outside checkpoints/ (final, raw EMA, snapshots under keep_loras), validation.json and the
run store's curve (each step's loss, avg_loss, lr, grad_norm; each validation round) are the
uninterrupted run's. The child sends itself the signal from a real call of the engine (the Nth
progress record, or the Nth checkpoint state write), so no timing is involved. The Ctrl-C case
found RELIABILITY 1370 (keep_loras removed the best round's snapshot after a resume); its default
guard is test_validation_loss's in-process test."""

from __future__ import annotations

import json
import signal
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file

from cli_runner import run_cli_streams
from signalled_cli import run_signalled

pytestmark = pytest.mark.slow


SETTINGS = dict(
    steps=8, save_every=2, keep_last=2, ema_decay=0.8, validation_split=0.25, validate_every=2,
    save_lora_every=1, keep_loras=3, random_crop=True, caption_dropout=0.3, grad_accum=2, batch_size=1,
    seed=4, lr_scheduler="cosine", lr_warmup_steps=2, learning_rate=5e-3, lora_rank=4,
)  # fmt: skip

STOPS = {
    "ctrl-c": (("lorastudio.training.optimize", "peak_memory_gb", 6), signal.SIGINT, 130),
    "kill": (("lorastudio.training.optimize", "peak_memory_gb", 6), signal.SIGKILL, -9),
    "kill-in-checkpoint": (("lorastudio.training.resume.snapshot", "save_torch_file", 2), signal.SIGKILL, -9),
}


def _files(run_dir: Path) -> dict[str, Path]:
    return {
        str(p.relative_to(run_dir)).replace(run_dir.name, "RUN"): p
        for p in sorted(run_dir.rglob("*"))
        if p.is_file() and p.relative_to(run_dir).parts[0] != "checkpoints"
    }


def _curve(store, name: str) -> tuple[list[tuple], list[tuple]]:
    """The newest record of output `name`: its metric points and validation rounds."""
    runs = [r for r in store.list_runs() if r["output_name"] == name]
    record = store.get_run(max(runs, key=lambda r: r["started_at"] or "")["id"])
    keys = ("step", "epoch", "loss", "avg_loss", "lr", "grad_norm")
    return (
        [tuple(m.get(k) for k in keys) for m in record["metrics"]],
        [(v["step"], v["loss"]) for v in record["validation"]],
    )


@pytest.mark.parametrize("adapter", ["lora", "lokr"])
@pytest.mark.parametrize("stop", list(STOPS))
def test_a_cli_run_stopped_or_killed_resumes_to_the_uninterrupted_run(
    settings, shapes, flux_config, tmp_path, capsys, monkeypatch, stop, adapter
) -> None:
    from lorastudio.jobs.store import RunStore

    def config(name: str) -> str:
        path = tmp_path / f"{name}.json"
        path.write_text(json.dumps(flux_config(output_name=name, adapter=adapter, **SETTINGS)))
        return str(path)

    code, out, err = run_cli_streams(capsys, monkeypatch, "train", config("full"), "--device", "cpu")
    assert code == 0, (out, err)
    (module, name, after), sig, exit_code = STOPS[stop]
    child = run_signalled((module, name, after), sig, "train", config("part"), "--device", "cpu")
    assert child.returncode == exit_code, (child.stdout[-2000:], child.stderr[-2000:])
    run_dir = settings.outputs_dir / "part"
    code, out, err = run_cli_streams(
        capsys, monkeypatch, "train", "--resume", str(run_dir), "--device", "cpu"
    )
    assert code == 0 and "done: 8 step(s)" in out, (out, err)

    full, part = _files(settings.outputs_dir / "full"), _files(run_dir)
    assert set(full) == set(part)  # snapshots every step: the stop's own is the uninterrupted run's too
    for key, path in full.items():
        if key.endswith(".safetensors"):
            a, b = load_file(str(path)), load_file(str(part[key]))
            assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a), key
    assert json.loads((settings.outputs_dir / "full" / "validation.json").read_text()) == json.loads(
        (run_dir / "validation.json").read_text()
    )
    store = RunStore.open(settings.db_path, recover=False)
    assert _curve(store, "part") == _curve(store, "full")
