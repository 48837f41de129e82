"""bench/e2e_run.py on the CPU with lorastudio.tiny's pipelines: the suite builds, trains through
the CLI's path and through a real `lorastudio serve`, and derives the same phase table from each
run's events; the real-size builders' configs checked on the meta device; the build's choice of
disk or /dev/shm by free space, its refusal, and its host RAM while saving."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from bench import e2e_build, e2e_place
from bench.e2e_run import main

from lorastudio.errors import NoSpaceLeft

REPO = Path(__file__).resolve().parents[2]


def test_the_qwen_image_builder_has_the_released_sizes():
    """20.43 B transformer (60 blocks), Qwen2.5-VL-7B (8.29 B with its vision tower and
    lm_head), the 127 M VAE: ~57.7 GB of bf16, as the device's disk must hold."""
    pipe = e2e_build.real_pipeline("qwen-image", "meta")
    assert e2e_build.param_counts(pipe) == {"vae": 0.127, "text_encoder": 8.292, "transformer": 20.43}
    text = pipe.text_encoder.config.text_config
    assert (text.hidden_size, text.num_hidden_layers, text.vocab_size) == (3584, 28, 152064)
    assert len(pipe.tokenizer) < text.vocab_size  # the tiny tokenizer's ids stay inside the vocab
    assert pipe.transformer.config.num_layers == 60


def test_the_klein_9b_builder_has_the_released_sizes():
    """FLUX.2 [klein] 9B: a 9.08 B transformer (8 + 24 blocks), Qwen3-8B (8.19 B with its untied
    lm_head), the FLUX.2 VAE: 34.7 GB of bf16."""
    pipe = e2e_build.real_pipeline("flux2-klein", "meta")
    assert e2e_build.param_counts(pipe) == {"vae": 0.084, "text_encoder": 8.191, "transformer": 9.079}
    assert round(sum(e2e_build.component_gb(pipe).values()), 1) == 34.7
    config = pipe.transformer.config
    assert (config.num_layers, config.num_single_layers, config.joint_attention_dim) == (8, 24, 12288)
    assert not config.guidance_embeds and pipe.config.is_distilled is False  # the base checkpoint
    assert pipe.vae.config.latent_channels == 32
    assert len(pipe.tokenizer) < pipe.text_encoder.config.vocab_size


def test_the_z_image_builder_has_the_released_sizes():
    """Z-Image: the 6.15 B single-stream DiT (30 blocks + 2 + 2 refiners), Qwen3-4B without its
    tied lm_head (4.02 B), FLUX.1's 16-channel VAE: 20.5 GB of bf16."""
    pipe = e2e_build.real_pipeline("z-image", "meta")
    assert e2e_build.param_counts(pipe) == {"vae": 0.084, "text_encoder": 4.022, "transformer": 6.155}
    assert round(sum(e2e_build.component_gb(pipe).values()), 1) == 20.5
    text = pipe.text_encoder.config
    assert (text.hidden_size, text.num_hidden_layers, text.head_dim) == (2560, 36, 128)
    assert pipe.transformer.config.n_layers == 30 and pipe.vae.config.latent_channels == 16
    assert len(pipe.tokenizer) < text.vocab_size


def test_the_sdxl_builder_has_the_released_sizes():
    """SDXL base 1.0: the 2.57 B U-Net, CLIP-L (123 M) and bigG with its projection (695 M), the
    4-channel VAE at SDXL's scale: 6.9 GB of bf16; an epsilon-prediction Euler scheduler."""
    pipe = e2e_build.real_pipeline("sdxl", "meta")
    assert e2e_build.param_counts(pipe) == {
        "vae": 0.084,
        "text_encoder": 0.123,
        "text_encoder_2": 0.695,
        "unet": 2.567,
    }
    assert round(sum(e2e_build.component_gb(pipe).values()), 1) == 6.9
    assert pipe.vae.config.latent_channels == 4 and pipe.vae.config.scaling_factor == 0.13025
    assert pipe.scheduler.config.prediction_type == "epsilon"
    assert pipe.text_encoder_2.config.projection_dim == 1280


def test_qwen_image_on_the_h200_goes_to_dev_shm_and_its_home_to_the_disk():
    """The H200's case (57.7 GB folder, ~40 GB left on its 64 GiB disk): /dev/shm when it and
    the run's RAM fit beside it, else the disk, else a refusal naming needed vs free."""
    need, run = 57.7, 44.8
    assert e2e_place.choose(need, run, 40.0, 68.0, 130.0) == {"pipeline": "shm", "home": "disk"}
    assert e2e_place.choose(need, run, 100.0, 68.0, 130.0, "disk") == {"pipeline": "disk", "home": "disk"}
    # RAM too short for the folder in /dev/shm beside the run: the disk, when it has room
    assert e2e_place.choose(need, run, 65.0, 68.0, 100.0) == {"pipeline": "disk", "home": "shm"}
    with pytest.raises(NoSpaceLeft) as refused:
        e2e_place.choose(need, run, 40.0, 68.0, 100.0)
    assert "needs 57.7 GB" in str(refused.value) and "free: disk 40.0 GB, /dev/shm 68.0 GB" in str(
        refused.value
    )
    with pytest.raises(NoSpaceLeft):  # no /dev/shm at all
        e2e_place.choose(need, run, 40.0, None, 130.0)


def test_a_build_that_fits_nowhere_is_refused_before_anything_is_written(tmp_path: Path):
    sizes = {"transformer": 1e6}  # a petabyte: more than any disk here
    with pytest.raises(NoSpaceLeft, match=r"needs 1000000.0 GB .* free: disk \d"):
        e2e_place.place(tmp_path / "e2e", "flux", sum(sizes.values()), e2e_place.run_host_gb(sizes))
    assert not (tmp_path / "e2e").exists()


def test_a_real_size_build_without_room_is_refused_before_building(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
):
    """The real-size path (no GPU here): sized on the meta device, refused with exit 3 and the
    reason in its JSON before CUDA is touched; nothing of the pipeline or home is written."""
    monkeypatch.setattr(e2e_place, "SHM", tmp_path / "no-shm")  # a machine without /dev/shm
    root = tmp_path / "e2e"
    assert main(["build", str(root), "--family", "flux", "--place", "shm"]) == 3
    out = json.loads((root / "e2e-flux-build.json").read_text())
    assert "the pipeline needs 33.7 GB" in out["refused"] and "/dev/shm none" in out["refused"]
    assert sorted(p.name for p in root.iterdir()) == ["e2e-flux-build.json"]


def test_a_build_placed_in_shm_is_linked_from_the_e2e_folder(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    """--place shm: the pipeline is written under <shm>/lorastudio-e2e/ and DIR/<family> links
    to it (here <shm> is a folder of tmp_path standing for /dev/shm)."""
    monkeypatch.setattr(e2e_place, "SHM", tmp_path / "shm")
    (tmp_path / "shm").mkdir()
    root = tmp_path / "e2e"
    assert main(["build", str(root), "--family", "flux2-klein", "--tiny", "--place", "shm"]) == 0
    out = json.loads((root / "e2e-flux2-klein-build.json").read_text())
    target = tmp_path / "shm" / "lorastudio-e2e" / "flux2-klein"
    assert out["placement"]["pipeline"] == "shm" and out["pipeline_at"] == str(target)
    assert (root / "flux2-klein").is_symlink() and (root / "flux2-klein").resolve() == target
    assert (target / "model_index.json").is_file() and not list(target.parent.glob(".*partial"))
    from diffusers import Flux2KleinPipeline

    pipe = Flux2KleinPipeline.from_pretrained(root / "flux2-klein")  # loads through the link
    assert pipe.transformer.config.num_layers == 1
    # a rebuild on the disk replaces the linked build: the old folder in <shm> goes
    assert main(["build", str(root), "--family", "flux2-klein", "--tiny", "--place", "disk"]) == 0
    assert not (root / "flux2-klein").is_symlink() and (root / "flux2-klein" / "model_index.json").is_file()
    assert not target.exists()


RSS_PROBE = """
import json, resource, sys
from pathlib import Path
import torch
from bench import e2e_build
from lorastudio.tiny import build_tiny_pipeline

def rss_gb():
    for line in open("/proc/self/status"):
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1e6

pipe = build_tiny_pipeline("flux")
torch.manual_seed(0)
with torch.device("cpu"):
    big = __import__("diffusers").FluxTransformer2DModel(num_layers=1, num_single_layers=1).to(torch.bfloat16)
pipe.transformer = big  # a scaled-down real FLUX.1 transformer: 2 of its 57 blocks
size = sum(p.numel() * p.element_size() for p in big.parameters()) / 1e9
built = rss_gb()
Path("/proc/self/clear_refs").write_text("5")  # resets VmHWM: the peak from here on
e2e_build.save_pipeline(pipe, Path(sys.argv[1]), shard="100MB")
peak = [int(l.split()[1]) / 1e6 for l in open("/proc/self/status") if l.startswith("VmHWM:")][0]
print(json.dumps({"component_gb": size, "rss_built_gb": built, "save_peak_gb": peak}))
"""


@pytest.mark.slow  # ~20 s: a 0.9 GB transformer built and saved on the CPU
def test_saving_holds_no_second_copy_of_a_component(tmp_path: Path):
    """Host RSS peak while save_pipeline writes a scaled-down real FLUX.1 transformer (bf16, CPU,
    100 MB shards, 4 writers): it stays within 20 % of the component's size above what the
    process held before saving (a second copy would add 100 %)."""
    env = {"PYTHONPATH": f"{REPO / 'src'}:{REPO}", "PATH": "/usr/bin:/bin"}
    done = subprocess.run(
        [sys.executable, "-c", RSS_PROBE, str(tmp_path / "flux")],
        capture_output=True,
        text=True,
        env=env,
        check=True,
    )
    row = json.loads(done.stdout.strip().splitlines()[-1])
    print(row)
    assert row["component_gb"] > 0.5
    assert row["save_peak_gb"] - row["rss_built_gb"] < 0.2 * row["component_gb"]
    assert len(list((tmp_path / "flux" / "transformer").glob("*.safetensors"))) > 5  # shard by shard


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


@pytest.mark.slow  # ~60 s on 2 shared cores: a build, two runs and a server
def test_tiny_flux2_klein_suite_runs_the_cli_and_the_api_to_the_same_end(tmp_path: Path):
    """The new family (FLUX.2 [klein], base) through build + CLI + API like the others, with the
    df of each part recorded."""
    argv = ["suite", str(tmp_path), "--family", "flux2-klein", "--tiny", "--steps", "2", "--modes", "cli,api"]
    main([*argv, "--deadline-s", "400"])
    out = json.loads((tmp_path / "e2e-flux2-klein-suite.json").read_text())
    assert out["skipped"] == []
    assert out["build"]["placement"]["pipeline"] == "disk"  # a tiny build stays in DIR
    assert set(out["df"]) == {"build", "cli", "api"}
    for part in out["df"].values():
        assert part["before"]["dir"]["free_gb"] > 0 and part["after"]["ram_available_gb"] > 0
    cli, api = out["cli"], out["api"]
    for run in (cli, api):
        assert run["end"] == "complete" and run["steps_run"] == 2
        assert {"conditioning_s", "latents_s", "first_step_s"} <= set(run)
        lora = tmp_path / "home" / "outputs" / f"e2e-flux2-klein-{run['mode']}"
        assert (lora / f"e2e-flux2-klein-{run['mode']}.safetensors").is_file()
    assert cli["final_loss"] == api["final_loss"]
    assert set(out["overhead"]) == {"api_vs_cli"}
