"""The session 28 fuzz audit's check-only part in the default suite: 20 generated TrainConfig
documents (tests/config_fuzz.py, seed 28, two per tiny family, mixed valid / wrong values) each get
the same answer from `lorastudio train --check`, POST /api/train/preflight and the engine's own
validation (parse_train_config + training.preflight.preflight): accepted by all three, or refused
by all three naming every deliberately wrong field; never a traceback, a 5xx or a field-less
refusal. The large runs (thousands of documents, and a trained sample) are in RELIABILITY.md's
"Session 28 fuzz audit" and tests/unit/training/test_config_fuzz_train.py (slow)."""

from __future__ import annotations

from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from config_fuzz import documents
from config_fuzz_check import api_answer, check_doc, cli_answer, engine_answer, fuzz_datasets
from live_server import LOOPBACK
from lorastudio.api.app import create_app
from lorastudio.settings import Settings

SEED = 35  # 28 until init_lora, 31 until validation_seed (a new field moves every draw); 35 keeps both answers in the sample
DOCUMENTS = 20
# lora_targets / rank_pattern / alpha_pattern: the API asks a torch child process about them (~5-30 s
# on a busy host; jobs/target_check.py, its own tests); the slow sample draws them
NOT_HERE = frozenset({"lora_targets", "rank_pattern", "alpha_pattern"})


@pytest.fixture
def datasets(studio_home: Path, sample_dataset: Path) -> tuple[Settings, dict[str, str]]:
    return fuzz_datasets(studio_home, sample_dataset)


def test_generated_documents_get_one_answer_from_the_cli_the_api_and_the_engine(
    tiny_model, datasets, tmp_path
) -> None:
    settings, data = datasets
    docs = documents(SEED, DOCUMENTS, tiny_model, data, exclude=NOT_HERE)
    assert sum(bool(d.wrong) for d in docs) >= 5 and sum(not d.wrong for d in docs) >= 5
    broken: list[str] = []
    verdicts = []
    with TestClient(create_app(settings), base_url=LOOPBACK) as client:
        for doc in docs:
            answers = [cli_answer(doc, tmp_path), api_answer(client, doc), engine_answer(doc, settings)]
            broken += check_doc(doc, answers)
            verdicts.append(answers[0].accepted)
    assert not broken, "\n".join(broken)
    assert 3 <= sum(verdicts) <= DOCUMENTS - 5  # the sample holds both answers
