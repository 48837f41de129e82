"""bench/e2e_run.py on the CPU with lorastudio.tiny's pipelines: the suite builds, trains through
the CLI's path and through a real `lorastudio serve`, and derives the same phase table from each
run's events; the real-size builders' configs checked on the meta device."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from bench import e2e_build
from bench.e2e_run import main


def test_the_qwen_image_builder_has_the_released_sizes():
    """20.43 B transformer (60 blocks), Qwen2.5-VL-7B (8.29 B with its vision tower and
    lm_head), the 127 M VAE: ~57.7 GB of bf16, as the device's disk must hold."""
    pipe = e2e_build.real_pipeline("qwen-image", "meta")
    assert e2e_build.param_counts(pipe) == {"vae": 0.127, "text_encoder": 8.292, "transformer": 20.43}
    text = pipe.text_encoder.config.text_config
    assert (text.hidden_size, text.num_hidden_layers, text.vocab_size) == (3584, 28, 152064)
    assert len(pipe.tokenizer) < text.vocab_size  # the tiny tokenizer's ids stay inside the vocab
    assert pipe.transformer.config.num_layers == 60


def test_a_suite_past_its_deadline_skips_each_part_and_says_so(tmp_path: Path):
    main(["suite", str(tmp_path), "--family", "flux", "--tiny", "--deadline-s", "1"])
    out = json.loads((tmp_path / "e2e-flux-suite.json").read_text())
    assert [s.split(":")[0] for s in out["skipped"]] == ["build", "cli", "api"]
    assert "cli" not in out and "overhead" not in out
    assert not (tmp_path / "flux").exists()


@pytest.mark.slow  # ~60 s on 2 shared cores: a build, two runs and a server
def test_tiny_suite_runs_the_cli_and_the_api_to_the_same_end(tmp_path: Path):
    argv = ["suite", str(tmp_path), "--family", "flux", "--tiny", "--steps", "2", "--modes", "cli,api,cli"]
    main([*argv, "--deadline-s", "400"])
    out = json.loads((tmp_path / "e2e-flux-suite.json").read_text())
    assert out["skipped"] == []
    assert out["build"]["tiny"] and (tmp_path / "flux" / "model_index.json").is_file()
    cli, api, again = out["cli"], out["api"], out["cli2"]
    for run in (cli, api, again):
        assert run["end"] == "complete" and run["steps_run"] == 2
        assert set(run["weights_load_s"]) == {"text_encoders", "vae", "denoiser"}
        assert {"conditioning_s", "latents_s", "plan_and_probe_s", "first_step_s"} <= set(run)
        assert 0 < run["time_to_first_step_s"] <= run["wall_to_end_s"]
        assert run["plan"]["attention_backend"] == "default"  # auto on a CPU
        assert len(run["sample_round_s"]) == 2  # every steps // 2 = 1 step: after steps 1 and 2
        lora = (
            tmp_path / "home" / "outputs" / f"e2e-flux-{run['mode']}" / f"e2e-flux-{run['mode']}.safetensors"
        )
        assert lora.is_file()
    assert cli["final_loss"] == api["final_loss"] == again["final_loss"]  # the same run, every path
    assert cli["checkpoint_write_s"] and api["job_id"]
    assert set(out["overhead"]) == {"api_vs_cli", "api_vs_cli2"}
    assert set(out["overhead"]["api_vs_cli"]) == {
        "api_vs_cli_wall",
        "api_vs_cli_after_first_step",
        "api_vs_cli_time_to_first_step_s",
    }
