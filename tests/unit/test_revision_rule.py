"""One revision rule (config.revision_problem) for the model fetch, training configs and generate:
every candidate gets the same verdict from all three (issue 24, part 8)."""

from __future__ import annotations

import pytest

from lorastudio.basemodels.fetch import check_fetch_request
from lorastudio.config import parse_train_config
from lorastudio.errors import ConfigError, ModelSourceError
from lorastudio.jobs.generation import GenerationService
from lorastudio.jobs.generation_inputs import GenerationRequest
from lorastudio.jobs.gpu import GpuArbiter
from lorastudio.settings import Settings

GOOD = ["main", "v1.0", "refs/pr/1", "0123456789abcdef0123456789abcdef01234567", "a" * 200]
BAD = ["", " ", "../../etc", "a..b", "-x", ".hidden", "main\n", "x y", "a" * 201, "ünï", "a;rm"]


def _verdicts(revision: str, settings: Settings) -> dict[str, bool]:
    """Whether each place refuses `revision` (as a revision problem)."""
    out = {}
    try:
        check_fetch_request("acme/flux", revision)
        out["fetch"] = False
    except ConfigError as err:
        out["fetch"] = [p.field for p in err.problems] == ["revision"]
    try:
        parse_train_config(
            {"family": "flux", "base_model": "acme/flux", "data_dir": "d", "revision": revision}
        )
        out["train"] = False
    except ConfigError as err:
        out["train"] = [p.field for p in err.problems] == ["revision"]
    service = GenerationService(settings, GpuArbiter())
    try:
        service.check(GenerationRequest(family="flux", base_model="acme/flux", prompt="x", width=64, height=64,
                                        revision=revision))  # fmt: skip
        out["generate"] = False
    except ConfigError as err:
        out["generate"] = [p.field for p in err.problems] == ["revision"]
    except ModelSourceError:  # past the revision check: the hub model is not on this disk (offline)
        out["generate"] = False
    finally:
        service.shutdown()
    return out


@pytest.mark.parametrize("revision", GOOD + BAD)
def test_fetch_training_and_generate_agree(revision: str, studio_home) -> None:
    verdicts = _verdicts(revision, Settings(home=studio_home))
    assert verdicts == dict.fromkeys(("fetch", "train", "generate"), revision in BAD), verdicts
