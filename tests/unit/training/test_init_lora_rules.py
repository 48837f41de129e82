"""The checks of TrainConfig.init_lora before any model loads (training/adapters/init_lora_rules.py, read
from the file's header, and the job service's verdict, jobs/validation.validate_run, that the API,
`train --check` and the engine share): each refusal names its field and both sides, all at once;
an unset lora_rank / lora_alpha takes the file's."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from safetensors.torch import save_file

from lorastudio import families
from lorastudio.config import parse_train_config, resolve_train_config
from lorastudio.errors import ConfigError
from lorastudio.jobs.validation import validate_run
from lorastudio.settings import get_settings
from lorastudio.training.adapters.init_lora_rules import init_lora_problems

LAYERS = ("transformer_blocks.0.attn.to_q", "transformer_blocks.0.attn.to_k")


def _lora(
    path: Path, *, rank: int = 4, family: str = "flux", header: dict | None = None, extra: dict | None = None
) -> Path:
    """A diffusers-named LoRA file of `LAYERS` at `rank` (lorastudio's header: family, rank, alpha)."""
    g = torch.Generator().manual_seed(0)
    tensors = {}
    for layer in LAYERS:
        tensors[f"transformer.{layer}.lora_A.weight"] = torch.randn(rank, 16, generator=g)
        tensors[f"transformer.{layer}.lora_B.weight"] = torch.randn(16, rank, generator=g)
    tensors.update(extra or {})
    meta = {"lorastudio.family": family, "lorastudio.rank": str(rank), "lorastudio.alpha": str(2.0 * rank)}
    save_file(tensors, str(path), metadata={**meta, **(header or {})})
    return path


def _kohya(path: Path, alphas: tuple[float, float]) -> Path:
    """A kohya-named FLUX.1 file of two layers of rank 4, each with its own alpha, no lorastudio header."""
    g = torch.Generator().manual_seed(0)
    tensors = {}
    for name, alpha, rank in zip(
        ("double_blocks_0_img_attn_proj", "double_blocks_0_txt_attn_proj"), alphas, (4, 2), strict=True
    ):
        tensors[f"lora_unet_{name}.lora_down.weight"] = torch.randn(rank, 16, generator=g)
        tensors[f"lora_unet_{name}.lora_up.weight"] = torch.randn(16, rank, generator=g)
        tensors[f"lora_unet_{name}.alpha"] = torch.tensor(alpha)
    save_file(tensors, str(path), metadata={"ss_base_model_version": "flux1", "ss_network_dim": "4"})
    return path


def _problems(make_config, **settings: object) -> dict[str, str]:
    """{field: message} of init_lora_problems for a flux run with `settings` as given."""
    given = make_config(**settings)
    explicit = {k for k in given.model_fields_set if getattr(given, k) is not None}
    problems = init_lora_problems(resolve_train_config(given), get_settings(), explicit)
    return {p.field: p.message for p in problems}


def test_a_file_of_the_run_passes_and_sets_an_unset_rank_and_alpha(make_config, tmp_path):
    path = _lora(tmp_path / "mine.safetensors", rank=8)
    assert _problems(make_config, init_lora=str(path), lora_rank=None) == {}
    resolved = resolve_train_config(make_config(init_lora=str(path), lora_rank=None))
    assert (resolved.lora_rank, resolved.lora_alpha) == (8, 16.0)  # the file's, not the family's
    kept = resolve_train_config(make_config(init_lora=str(path), lora_rank=8, lora_alpha=4.0))
    assert (kept.lora_rank, kept.lora_alpha) == (8, 4.0)  # the user's (refused beside: alpha)


def test_a_kohya_files_alpha_is_its_layers_one_scale(make_config, tmp_path):
    path = _kohya(tmp_path / "k.safetensors", (8.0, 4.0))  # 8 / 4 = 4 / 2: one scale, 2
    resolved = resolve_train_config(make_config(init_lora=str(path), lora_rank=None))
    assert (resolved.lora_rank, resolved.lora_alpha) == (4, 8.0)
    uneven = _kohya(tmp_path / "u.safetensors", (8.0, 8.0))  # 2 and 4: no one alpha; the rank's
    assert resolve_train_config(make_config(init_lora=str(uneven), lora_rank=None)).lora_alpha == 4.0


def test_a_missing_file_or_name_is_refused_naming_it(make_config, tmp_path):
    missing = _problems(make_config, init_lora=str(tmp_path / "gone.safetensors"))
    assert "gone.safetensors" in missing["init_lora"] and "not found" in missing["init_lora"]
    unknown = _problems(make_config, init_lora="no-such-run")
    assert "no trained LoRA named 'no-such-run'" in unknown["init_lora"]
    inside = _problems(make_config, init_lora="some-run/loras/x.safetensors")  # a path under outputs/
    assert "not found" in inside["init_lora"] and str(get_settings().outputs_dir) in inside["init_lora"]


@pytest.mark.parametrize("value", ["runs/weights.bin", "../elsewhere.safetensors", "x\x00/y.safetensors"])
def test_the_form_is_refused_when_the_config_is_read(make_config, value):
    with pytest.raises(ConfigError) as err:
        parse_train_config(make_config(init_lora=value).model_dump(exclude_unset=True))
    assert [p.field for p in err.value.problems] == ["init_lora"]


def test_a_file_of_another_family_is_refused_naming_both(make_config, tmp_path):
    path = _lora(tmp_path / "sdxl.safetensors", family="sdxl")
    message = _problems(make_config, init_lora=str(path))["init_lora"]
    assert "is not a flux LoRA: it is a sdxl one" in message


def test_an_adapter_of_another_kind_is_refused_saying_which_to_set(make_config, tmp_path):
    lokr = tmp_path / "lokr.safetensors"
    prefix = "lycoris_transformer_blocks_0_attn_to_q"
    save_file(
        {
            f"{prefix}.lokr_w1": torch.randn(4, 4),
            f"{prefix}.lokr_w2": torch.randn(4, 4),
            f"{prefix}.alpha": torch.tensor(4.0),
        },
        str(lokr),
        metadata={"lorastudio.family": "flux"},
    )
    assert "set adapter = 'lokr'" in _problems(make_config, init_lora=str(lokr))["init_lora"]
    assert _problems(make_config, init_lora=str(lokr), adapter="lokr", lora_format="kohya") == {}
    dora = tmp_path / "dora.safetensors"
    prefix = "lycoris_transformer_blocks_0_attn_to_q"
    parts = {
        "lora_down.weight": torch.randn(4, 16),
        "lora_up.weight": torch.randn(16, 4),
        "dora_scale": torch.ones(16, 1),
    }
    save_file(
        {f"{prefix}.{k}": v for k, v in parts.items()}, str(dora), metadata={"lorastudio.family": "flux"}
    )
    assert "set adapter = 'dora'" in _problems(make_config, init_lora=str(dora))["init_lora"]
    # a DoRA file in the LyCORIS layout starts a DoRA run (session 36: training/adapters/init_lycoris.py)
    assert _problems(make_config, init_lora=str(dora), adapter="dora", lora_format="kohya") == {}
    # a dora_scale rule its header names that no reader knows: refused before any model loads
    odd = tmp_path / "dora-odd-rule.safetensors"
    save_file(
        {f"{prefix}.{k}": v for k, v in parts.items()},
        str(odd),
        metadata={"lorastudio.family": "flux", "lorastudio.dora_scale": "forge"},
    )
    said = _problems(make_config, init_lora=str(odd), adapter="dora", lora_format="kohya")["init_lora"]
    assert str(odd) in said and "lorastudio.dora_scale is 'forge', not one of comfyui, lycoris" in said


def test_another_explicit_rank_alpha_or_pattern_is_refused_naming_both(make_config, tmp_path):
    path = _lora(tmp_path / "r4.safetensors", rank=4)  # alpha 8
    found = _problems(
        make_config, init_lora=str(path), lora_rank=8, lora_alpha=4.0, alpha_pattern={"to_k": 2.0}
    )
    assert "is 8 but r4.safetensors is of rank 4" in found["lora_rank"]
    assert "is 4 but r4.safetensors's alpha is 8" in found["lora_alpha"]
    assert "remove it" in found["alpha_pattern"]
    assert _problems(make_config, init_lora=str(path), lora_rank=4, lora_alpha=8.0) == {}


def test_a_text_encoder_part_is_refused(make_config, tmp_path):
    te = {"text_encoder.text_model.encoder.layers.0.self_attn.q_proj.lora_A.weight": torch.randn(4, 16)}
    te["text_encoder.text_model.encoder.layers.0.self_attn.q_proj.lora_B.weight"] = torch.randn(16, 4)
    path = _lora(tmp_path / "te.safetensors", extra=te)
    assert "holds text-encoder layers" in _problems(make_config, init_lora=str(path))["init_lora"]


def test_the_verdict_names_every_problem_at_once(make_config, tmp_path):
    path = _lora(tmp_path / "r4.safetensors", rank=4)
    raw = make_config(init_lora=str(path), lora_rank=8, lora_alpha=3.0, output_name="verdict").model_dump(
        exclude_unset=True
    )
    raw["data_dir"] = str(tmp_path / "no-such-dataset")  # refused beside the file's problems
    with pytest.raises(ConfigError) as err:
        validate_run(
            raw, get_settings(), live_output_names=set(), allow_outside_root=True, decode_budget_s=0.0
        )
    fields = {p.field for p in err.value.problems}
    assert {"data_dir", "lora_rank", "lora_alpha"} <= fields, err.value.problems


def test_the_cli_takes_a_relative_path_from_its_directory_and_keeps_a_name(tmp_path, monkeypatch):
    from lorastudio.cli.config_file import localize_paths

    monkeypatch.chdir(tmp_path)
    assert localize_paths({"init_lora": "loras/a.safetensors"})["init_lora"] == str(
        tmp_path / "loras/a.safetensors"
    )
    assert localize_paths({"init_lora": "./a.safetensors"})["init_lora"] == str(tmp_path / "a.safetensors")
    assert localize_paths({"init_lora": "my-run"})["init_lora"] == "my-run"  # a trained LoRA's name


def test_a_file_in_the_runs_own_folder_is_refused_before_overwrite_removes_it(make_config, tmp_path):
    from lorastudio.cli.train_check import check_run

    folder = get_settings().outputs_dir / "again"
    folder.mkdir(parents=True)
    _lora(folder / "again.safetensors")
    raw = make_config(init_lora="again", output_name="again").model_dump(mode="json", exclude_unset=True)
    for overwrite in (True, False):
        with pytest.raises(ConfigError) as err:
            check_run(raw, get_settings(), overwrite=overwrite, device="cpu")
        assert any(p.field == "init_lora" and "own output folder" in p.message for p in err.value.problems)
    assert (folder / "again.safetensors").is_file()  # nothing replaced


def test_a_header_rank_or_alpha_no_run_takes_is_refused_not_resolved(make_config, tmp_path):
    path = _lora(
        tmp_path / "huge.safetensors", header={"lorastudio.rank": "100000", "lorastudio.alpha": "1e9"}
    )
    resolved = resolve_train_config(make_config(init_lora=str(path), lora_rank=None))  # no ValidationError
    assert resolved.lora_rank == families.get("flux").spec.defaults["lora_rank"]  # the file's is refused
    message = _problems(make_config, init_lora=str(path), lora_rank=None)["init_lora"]
    assert "rank 100000" in message or "alpha is 1e+09" in message


def test_train_check_names_the_layers_the_targets_miss(make_config, tmp_path):
    from lorastudio.cli.train_check import check_run

    path = _lora(tmp_path / "wide.safetensors")  # to_q and to_k
    raw = make_config(init_lora=str(path), lora_targets=["to_q"], output_name="check").model_dump(
        mode="json", exclude_unset=True
    )
    with pytest.raises(ConfigError) as err:
        check_run(raw, get_settings(), overwrite=False, device="cpu")
    (problem,) = [p for p in err.value.problems if p.field == "init_lora"]
    assert "transformer_blocks.0.attn.to_k" in problem.message


@pytest.mark.parametrize(("stated", "run_rank"), [("8", 8), ("2", 2), ("0.5", None)])
def test_a_header_rank_not_its_layers_is_refused_before_any_model(make_config, tmp_path, stated, run_rank):
    """A header stating another rank than its weights' (rank 4) was taken as the run's rank and
    passed every check: the run loaded its model, then failed on the first layer's shape. A stated
    rank that is no whole number ("0.5", once int()'d to 0: "not told") is none: the weights' is taken."""
    from lorastudio.training.adapters.init_lora import preflight_init

    path = _lora(tmp_path / "m.safetensors", rank=4, header={"lorastudio.rank": stated})
    given = make_config(init_lora=str(path), lora_rank=None, lora_targets=["to_q", "to_k"])
    cfg, _, problems = preflight_init(given, resolve_train_config(given), get_settings(), ("to_q", "to_k"))
    if run_rank is None:
        assert (cfg.lora_rank, problems) == (4, [])
    else:
        assert cfg.lora_rank == run_rank
        assert [p.field for p in problems] == ["init_lora"]
        assert "layers are of rank 4 but the run's lora_rank is" in problems[0].message


def test_a_file_replaced_between_the_check_and_the_read_is_refused(tmp_path, monkeypatch):
    """load_init_lora compared the file's sha256 with the preflight's, then opened it again to
    read it: a file replaced in between was loaded, recorded under the old file's sha256."""
    from lorastudio.errors import ModelSourceError
    from lorastudio.training.adapters import init_lora
    from lorastudio.training.adapters.init_lora_rules import file_sha256

    path = _lora(tmp_path / "m.safetensors", rank=4)
    source = init_lora.InitSource(path, file_sha256(path))
    read = init_lora.read_init_lora

    def replaced_first(p: Path, family: str):
        _lora(tmp_path / "other.safetensors", rank=8).replace(path)  # after the check, before the read
        return read(p, family)

    monkeypatch.setattr(init_lora, "read_init_lora", replaced_first)
    with pytest.raises(ModelSourceError, match="changed since the run's preflight read it"):
        init_lora.load_init_lora(torch.nn.Linear(2, 2), source, "flux")


def test_a_file_of_several_adapter_kinds_is_refused_before_the_run(make_config, tmp_path):
    """A LyCORIS file whose preset gave its layers different algos (LoKr attention, LoRA
    elsewhere: `module_algo_map`) passed as a LoKr file; the load then crashed ('Linear' object
    has no attribute 'lora_A') on its first LoRA layer."""
    g = torch.Generator().manual_seed(0)
    path = tmp_path / "mixed.safetensors"
    save_file(
        {
            "lora_unet_double_blocks_0_img_attn_proj.lokr_w1": torch.randn(2, 2, generator=g),
            "lora_unet_double_blocks_0_img_attn_proj.lokr_w2": torch.randn(8, 8, generator=g),
            "lora_unet_double_blocks_0_txt_attn_proj.lora_up.weight": torch.randn(16, 4, generator=g),
            "lora_unet_double_blocks_0_txt_attn_proj.lora_down.weight": torch.randn(4, 16, generator=g),
        },
        str(path),
        metadata={"ss_base_model_version": "flux1"},
    )
    message = _problems(make_config, init_lora=str(path), adapter="lokr", lokr_factor=2)["init_lora"]
    assert "mixes layers of several adapter kinds: lokr (lora_unet_double_blocks_0_img_attn_proj)" in message
    assert "lora (lora_unet_double_blocks_0_txt_attn_proj)" in message
