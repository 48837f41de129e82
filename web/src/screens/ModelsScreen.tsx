import { useCallback, useEffect, useState } from "react";
import { api } from "../api/endpoints";
import type { CatalogueModel, Fetch } from "../api/types";
import { AddFolderForm } from "../components/AddFolderForm";
import { type Column, DataTable } from "../components/DataTable";
import { FetchForm } from "../components/FetchForm";
import { FetchProgress } from "../components/FetchProgress";
import { formatBytes } from "../lib/format";
import { ErrorBanner } from "../components/ErrorBanner";
import { ApiError } from "../api/client";
import { isAbort, useAction, useLatest, useUnmountSignal } from "../lib/latest";

const SOURCES: Record<CatalogueModel["source"], string> = {
  local: "models/",
  "hub-cache": "hub cache",
  tiny: "tiny demo",
  added: "added folder",
  catalogue: "not fetched",
};
const POLL_MS = 1000;

/** What removing a model does: delete what lorastudio made, forget an added folder; null when it cannot be removed here. */
export function removal(m: CatalogueModel): { label: string; confirm: string } | null {
  if (m.source === "added") return { label: "Forget", confirm: `Remove ${m.name} from the list? Its files stay in ${m.path}.` };
  if (m.deletable) return { label: "Delete", confirm: `Delete ${m.name} and its files (${formatBytes(m.size_bytes)})?` };
  return null;
}

/** A captioner's state: ready to caption with, incomplete, or not fetched yet. */
export function captionerState(m: CatalogueModel): string {
  if (m.source === "catalogue") return "not fetched";
  return m.complete ? "ready" : `incomplete: ${m.missing.slice(0, 3).join(", ")}`;
}

/** Models: the base models on this server (models/, the hub cache, tiny demos, added folders) and the captioning models (kind "captioner": fetched, or to fetch), hub downloads with progress, add or remove. */
export function ModelsScreen() {
  const [models, setModels] = useState<CatalogueModel[] | null>(null);
  const [fetches, setFetches] = useState<Fetch[]>([]);
  // an action's refusal (kept until the next action) and the model list's load failure (until it loads)
  const [error, setError] = useState<string | null>(null);
  const [loadError, setLoadError] = useState<string | null>(null);
  // reloads overlap (Refresh, a poll, after an action): only the latest answer of each list applies
  const modelLoads = useLatest();
  const fetchLoads = useLatest();
  const loadModels = useCallback(() => {
    const ticket = modelLoads.begin();
    api.models(ticket.signal).then(
      (m) => {
        if (!ticket.current()) return;
        setModels(m);
        setLoadError(null);
      },
      (err: unknown) => !isAbort(err) && ticket.current() && setLoadError(`Cannot load the models: ${err instanceof Error ? err.message : String(err)}`),
    );
  }, [modelLoads]);
  /** `polling`: the models are reloaded once no fetch runs (a download just ended). */
  const loadFetches = useCallback(
    (polling = false) => {
      const ticket = fetchLoads.begin();
      api.fetches(ticket.signal).then((f) => {
        if (!ticket.current()) return;
        setFetches(f.fetches);
        if (polling && !f.fetches.some((x) => x.status === "running")) loadModels();
      }, () => undefined);
    },
    [fetchLoads, loadModels],
  );
  const load = useCallback(() => {
    loadModels();
    loadFetches();
  }, [loadModels, loadFetches]);
  useEffect(load, [load]);
  const running = fetches.some((f) => f.status === "running");
  useEffect(() => {
    if (!running) return;
    const timer = window.setInterval(() => loadFetches(true), POLL_MS);
    return () => window.clearInterval(timer);
  }, [running, loadFetches]);

  // one request per click for each action below; a model removed meanwhile (another tab) is gone as asked
  const mounted = useUnmountSignal(); // whom its actions' answers are for (client.AnswerTo)
  const act = useAction(async (m: CatalogueModel) => {
    const what = removal(m);
    if (!what || !window.confirm(what.confirm)) return;
    setError(null);
    try {
      await (m.source === "added" ? api.forgetModelFolder(m.id, mounted()) : api.deleteModel(m.id, mounted()));
    } catch (err) {
      if (isAbort(err)) return; // left meanwhile: done as asked, nothing reloaded
      if (!(err instanceof ApiError && err.status === 404)) setError(err instanceof Error ? err.message : String(err));
    }
    load();
  });
  const cancelFetch = useAction(async (id: string) => {
    setError(null);
    try {
      await api.cancelFetch(id, mounted());
    } catch (err) {
      if (isAbort(err)) return;
      setError(err instanceof Error ? err.message : String(err));
    }
    load();
  });
  const cancel = (id: string) => void cancelFetch.run(id);
  const fetchCaptioner = useAction(async (m: CatalogueModel) => {
    setError(null);
    try {
      const started = await api.fetchModel({ repo_id: m.repo_id ?? m.name, revision: null }, mounted());
      fetchLoads.cancel(); // a poll sent before this fetch began must not drop it from the list
      setFetches((now) => [...now.filter((x) => x.id !== started.id), started]);
    } catch (err) {
      if (isAbort(err)) return;
      setError(err instanceof Error ? err.message : String(err));
    }
  });
  const bases = models?.filter((m) => m.kind !== "captioner") ?? null;
  const captioners = models?.filter((m) => m.kind === "captioner") ?? [];
  const busyRepos = new Set(fetches.filter((f) => f.status === "running").map((f) => f.repo_id));
  const captionerColumns: Column<CatalogueModel>[] = [
    {
      header: "Name",
      kind: "primary",
      cell: (m) => (
        <>
          <span title={m.path || m.repo_id || m.name}>{m.name}</span>
          {m.checkpoint && <div className="muted small">{m.checkpoint}</div>}
        </>
      ),
    },
    { header: "Id", cell: (m) => <code>{m.id}</code> },
    { header: "Licence", cell: (m) => m.licence ?? "–" },
    { header: "Size", num: true, cell: (m) => `${m.source === "catalogue" ? "~" : ""}${formatBytes(m.size_bytes)}` },
    { header: "State", cell: (m) => <span className={m.complete ? "status status-completed" : "muted small"}>{captionerState(m)}</span> },
    {
      header: "",
      kind: "actions",
      cell: (m) =>
        m.source === "catalogue" ? (
          <button className="ghost small" disabled={busyRepos.has(m.repo_id ?? "") || fetchCaptioner.pending} onClick={() => void fetchCaptioner.run(m)} aria-label={`Fetch ${m.name}`}>
            Fetch
          </button>
        ) : (
          removal(m) && (
            <button className="ghost small danger-text" disabled={act.pending} onClick={() => void act.run(m)} aria-label={`${removal(m)?.label} ${m.name}`}>
              {removal(m)?.label}
            </button>
          )
        ),
    },
  ];

  const columns: Column<CatalogueModel>[] = [
    {
      header: "Name",
      kind: "primary",
      cell: (m) => (
        <>
          <span title={m.path}>{m.name}</span>
          {m.checkpoint && <div className="muted small">{m.checkpoint}</div>}
        </>
      ),
    },
    { header: "Family", cell: (m) => m.family ?? "–" },
    { header: "Source", cell: (m) => SOURCES[m.source] },
    { header: "Size", num: true, cell: (m) => formatBytes(m.size_bytes) },
    {
      header: "State",
      cell: (m) => (m.trainable ? <span className="status status-completed">trainable</span> : <span className="muted small">{m.reason}</span>),
    },
    {
      header: "",
      kind: "actions",
      cell: (m) =>
        removal(m) && (
          <button className="ghost small danger-text" disabled={act.pending} onClick={() => void act.run(m)} aria-label={`${removal(m)?.label} ${m.name}`}>
            {removal(m)?.label}
          </button>
        ),
    },
  ];

  return (
    <section className="screen">
      <div className="screen-head">
        <h1>Base models</h1>
        <button className="ghost" onClick={load}>
          Refresh
        </button>
      </div>
      <ErrorBanner message={error} />
      <ErrorBanner message={loadError} />
      <div className="two-col">
        <FetchForm
          onStarted={(f) => {
            fetchLoads.cancel(); // a poll sent before this fetch began must not drop it from the list
            setFetches((now) => [...now.filter((x) => x.id !== f.id), f]);
          }}
        />
        <AddFolderForm onAdded={load} />
      </div>
      <FetchProgress fetches={fetches} onCancel={cancel} />
      {!models && !loadError && (
        <p className="muted" role="status" data-testid="models-loading">
          Loading the models…
        </p>
      )}
      {bases && bases.length === 0 && (
        <div className="empty card">
          <strong>No base models yet</strong>
          <p>Fetch one from the hub above, add a folder, or make the tiny demo model with <code>lorastudio tiny model flux</code>.</p>
        </div>
      )}
      {bases && bases.length > 0 && <DataTable rows={bases} rowKey={(m) => m.id} stack testId="models-table" columns={columns} />}
      {captioners.length > 0 && (
        <>
          <h2 className="section-title">Captioning models</h2>
          <p className="muted small">
            For &quot;Caption with AI&quot; on a dataset (or <code>lorastudio datasets caption NAME --model ID</code>); fetched like base models.
          </p>
          <DataTable rows={captioners} rowKey={(m) => m.id} stack testId="captioners-table" columns={captionerColumns} />
        </>
      )}
    </section>
  );
}
