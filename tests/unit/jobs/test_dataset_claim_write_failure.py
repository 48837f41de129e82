"""A dataset claim whose holder record cannot be written (session 28 chaos audit): the file-size
limit (a real RLIMIT_FSIZE below the record's size), a full disk or a read-only claims folder.
`_take_one` had locked the dataset's claim file and then lost the descriptor when the record's
write raised: the lock stayed held by the process, so in a server every later upload, caption
edit or run of that dataset was refused as busy (by nobody: no record names a holder) until the
server restarted, and the staged record stayed. Now the failed take closes its lock and removes
its staging, and the failure names the claim (WriteFailed / NoSpaceLeft)."""

from __future__ import annotations

from pathlib import Path

import pytest

from file_limit import file_size_limit
from lorastudio.errors import WriteFailed
from lorastudio.jobs.dataset_claims import CLAIMS_DIR, WRITE, DatasetClaim


def test_a_claim_whose_record_cannot_be_written_holds_nothing(tmp_path: Path) -> None:
    home = tmp_path / "home"
    datasets = home / "datasets"
    (datasets / "pets").mkdir(parents=True)
    with file_size_limit(10), pytest.raises((WriteFailed, OSError)) as failed:  # noqa: PT012
        DatasetClaim.take(home, datasets, [datasets / "pets"], WRITE, "an upload", brief=True)
    assert str(failed.value).startswith("write failed: the claim on dataset pets could not be recorded (")
    assert str(failed.value).endswith("): File too large")
    assert [p.name for p in (home / CLAIMS_DIR).rglob("*.tmp")] == []
    again = DatasetClaim.take(
        home, datasets, [datasets / "pets"], WRITE, "the upload again", brief=True, wait_s=0.5
    )
    again.release()  # taken: the failed take held nothing
