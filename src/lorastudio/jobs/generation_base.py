"""What a gallery image records of its base model's content (jobs/generation.py): the base's
content identity, the fingerprint a run's identity records of its base (training/resume/identity_base
.source_record: each file's name, size and a sample of its bytes, memoised per file version; a
multi-GB pipeline is never hashed whole) with its scheduler's files, so that its settings sent again on a base replaced
under the same name (a models/ folder, a re-fetched snapshot, a single file) are refused, not
rendered as another image, as a LoRA's sha256 is (fix 231). Taken under the fingerprint rule of
now (data/fingerprint.RULE: the same files under any name, a copy or a moved home, give the same
identity); an image's identity taken under an older rule is accepted too (`check_identity`).
No torch here.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
from collections.abc import Callable, Collection
from types import SimpleNamespace
from typing import Any

from lorastudio.basemodels import ResolvedBase
from lorastudio.errors import ConfigError, FieldProblem, ModelSourceError


def base_identity(base: ResolvedBase, denoiser: str, revision: str | None) -> str | None:
    """The content identity of resolved `base` (`denoiser`: the family's "unet" / "transformer"),
    or None when it is a hub id not downloaded yet (its files are not here to read: the worker's
    loaders fetch it, and the identity is taken then): `base_identities`' first."""
    return base_identities(base, denoiser, revision)[0]


def base_identities(
    base: ResolvedBase, denoiser: str, revision: str | None, rule: int | None = None
) -> tuple[str | None, str | None]:
    """(identity, files identity) of resolved `base`, each None for a hub id not downloaded yet,
    under fingerprint rule `rule` (None: data/fingerprint.RULE; an older one: what a gallery
    image of its time recorded). The files identity is the run identity's base fingerprint (its
    denoiser, VAE, text encoders and tokenizers: training/resume/identity_base.source_record), what a
    gallery image recorded before session 28; the identity adds the scheduler's files (its class
    and settings, which decide the sigmas as much as the weights decide the model: a
    scheduler_config.json edited or re-fetched rendered another image under the old identity,
    RELIABILITY 698)."""
    from lorastudio.data.fingerprint import RULE, component_fingerprint
    from lorastudio.training.resume.identity_base import source_record

    rule = RULE if rule is None else rule
    source: Any = base.source
    if base.file is not None:  # a single file: its components from it, the rest from its base config
        source = SimpleNamespace(file=base.source, components=base.file.layout.components, config=base.config)
    record = source_record(source, denoiser, revision, rule)
    if not record["base_on_disk"]:
        return None, None
    files = str(record["base_fingerprint"])
    scheduler = component_fingerprint(source, "scheduler", revision, rule)
    return hashlib.sha256(f"{files}\n{scheduler}".encode()).hexdigest()[:20], files


def check_identity(
    asked: str | None, base: ResolvedBase, denoiser: str, revision: str | None, base_model: str
) -> tuple[str | None, FieldProblem | None]:
    """(the identity of resolved `base` now: `base_identity`; the refusal of a request that named
    identity `asked`, else None). `asked` is accepted as the identity or files identity under
    the rule of now or an older one (1 .. RULE-1: a gallery image made before the rule changed,
    on the same files under the same name; taken only when the rule of now does not match)."""
    from lorastudio.data.fingerprint import RULE

    now, files = base_identities(base, denoiser, revision)
    if asked is None or now is None or asked in (now, files):
        return now, None
    older = {i for rule in range(1, RULE) for i in base_identities(base, denoiser, revision, rule)}
    return now, base_identity_problem(asked, now, base_model, files, older)


def base_identity_problem(
    asked: str | None,
    now: str | None,
    base_model: str,
    files: str | None = None,
    older: Collection[str | None] = (),
) -> FieldProblem | None:
    """The refusal of a request that named base identity `asked` when the base's is `now`
    (None: not comparable, a hub id yet to download; no refusal). `files`: the base's files
    identity (`base_identities`), which a gallery image of before session 28 recorded: still
    accepted for those (they recorded nothing of the scheduler); `older`: its identities under
    older fingerprint rules (`check_identity`), accepted too."""
    if asked is None or now is None or asked in (now, files) or asked in older:
        return None
    return FieldProblem(
        "base_identity",
        f"the base model {base_model!r} is no longer the one this image was made with (its files "
        f"changed: identity {asked} then, {now} now): it was replaced or re-fetched; leave "
        "base_identity out to generate with the base as it is",
    )


def job_at_base(
    job: Any, req: Any, base: ResolvedBase, denoiser: str, meta: Callable[[str | None], dict[str, Any]]
) -> tuple[Any, str | None]:
    """GenerationJob `job` of request `req` with its base's identity taken now (memoised: stats
    only), once the request holds the worker: a base replaced while the request waited in the
    queue is refused when the request named the old identity, and the job carries the identity
    in its key (generation_worker.GenerationJob.key), so the worker loads the new files rather
    than render with the pipeline it kept of the old ones; `meta(identity)` is the PNG's
    settings. Returns (job, identity). Raises ConfigError on "base_identity"."""
    now, changed = check_identity(req.base_identity, base, denoiser, req.revision, req.base_model)
    if changed is not None:
        raise ConfigError([changed])
    return dataclasses.replace(job, base_identity=now, png_meta=json.dumps(meta(now))), now


def refuse_if_base_gone(base: ResolvedBase) -> None:
    """Raise ModelSourceError when the local base model of `base` (or its single file's config
    folder) is gone: a model delete landed after the generation's checks. Called under the lock
    the delete decides and moves the folder under (GenerationService.bases_held)."""
    for path in (base.source, base.config):
        if path and os.path.isabs(path) and not os.path.lexists(path):
            raise ModelSourceError(f"{path} is gone: the model was deleted as this generation started")
