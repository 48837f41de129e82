"""Base models: find, fetch, recognise and vet them (torch-free; the family table is read from
the registry on first use).

Public API:
    inspect_folder(folder) -> Recognition                  what a folder holds, never raises
    vet_pipeline_folder(folder, family) -> Recognition     THE base-model folder check (raises
                                                           ModelSourceError with what is accepted)
    accepted_families() / accepted_text()                  what lorastudio trains
    list_models(settings) -> list[ModelEntry]              the catalogue (models/, added, hub cache)
    get_model(settings, id) / delete_model(settings, id, in_use=...)
    add_folder(settings, path) / forget_folder(settings, id)
    plan_fetch(settings, repo_id, revision) -> FetchPlan   metadata only; refusals happen here
    run_fetch(settings, plan, ...) / fetch_model(settings, repo_id, ...) -> FetchOutcome
    FetchManager(settings)                                 fetches as background server tasks
    resolve_hub_id(settings, repo_id, revision)            where a hub id's files are on disk
    resolve_base(value, family, settings, base_config=)   THE base-model resolution (folder,
                                                           single file + its base config, name
                                                           under models/, hub id); resolve_base_model
                                                           its (source, folder) short form
"""

from lorastudio.basemodels.accepted import AcceptedFamily, accepted_families, accepted_text
from lorastudio.basemodels.added import add_folder, added_folders, forget_folder
from lorastudio.basemodels.catalogue import ModelEntry, get_model, list_models
from lorastudio.basemodels.fetch import FetchOutcome, FetchPlan, fetch_model, plan_fetch, run_fetch
from lorastudio.basemodels.fetches import FetchManager
from lorastudio.basemodels.hubcache import hub_offline, is_hub_id
from lorastudio.basemodels.model_delete import delete_model
from lorastudio.basemodels.resolve import ResolvedBase, resolve_base, resolve_base_model, resolve_hub_id
from lorastudio.basemodels.vetting import Recognition, inspect_folder, vet_pipeline_folder

__all__ = [
    "AcceptedFamily",
    "FetchManager",
    "FetchOutcome",
    "FetchPlan",
    "ModelEntry",
    "Recognition",
    "ResolvedBase",
    "accepted_families",
    "accepted_text",
    "add_folder",
    "added_folders",
    "delete_model",
    "fetch_model",
    "forget_folder",
    "get_model",
    "hub_offline",
    "inspect_folder",
    "is_hub_id",
    "list_models",
    "plan_fetch",
    "resolve_base",
    "resolve_base_model",
    "resolve_hub_id",
    "run_fetch",
    "vet_pipeline_folder",
]
