import { useRef, useState } from "react";
import { ApiError } from "../api/client";
import { api } from "../api/endpoints";
import { useTraining } from "../api/training";
import { type Column, DataTable } from "../components/DataTable";
import { ResumeButton } from "../components/ResumeButton";
import type { RunList, RunSummary } from "../api/types";
import { formatDuration, formatNumber, formatWhen, runDuration } from "../lib/format";
import { href, navigate } from "../lib/route";
import { deleteQuestion } from "../lib/runDelete";
import { isAbort, loadMessage, useAction, useLatest, useLoad, useUnmountSignal } from "../lib/latest";
import { ErrorBanner } from "../components/ErrorBanner";
import { FILTER_FROM, matchesName, NameFilter } from "../components/NameFilter";
import { useDebounced } from "../lib/debounce";

/** The runs the API lists in a page by default (GET /api/runs' `limit`); "Show more" asks for the next. */
export const RUNS_PAGE = 200;
/** The most runs GET /api/runs answers in one page (its `limit`'s maximum). */
const RUNS_LIMIT_MAX = 10_000;

/** How long the search box waits for the typing to pause before it asks the server (GET /api/runs' q). */
export const SEARCH_DELAY_MS = 300;

/** The pages shown below the first: the search they belong to, their runs and the cursor of the page after them (null: none). */
interface Older {
  at: string;
  runs: RunSummary[];
  cursor: string | null;
}

/** Run history: status, final loss, duration; open, download the LoRA, delete. A page at a time
 * (RELIABILITY 1221: the API listed the newest 200 runs and no others): "Show more" adds the next
 * page; a reload asks again for as many runs as are shown, from the newest, in one request. The
 * search box asks the server for the runs whose name, id or base model holds its words (GET
 * /api/runs' q, once the typing pauses), so a run older than the pages loaded is found too; while
 * it waits, the runs shown are narrowed by name at once. */
export function RunsScreen() {
  const { job } = useTraining();
  const [query, setQuery] = useState(""); // as typed
  const typed = query.trim();
  const debounced = useDebounced(typed, SEARCH_DELAY_MS);
  const searched = typed ? debounced : ""; // the search the list is the server's answer for (cleared at once)
  const shownCount = useRef({ at: "", count: RUNS_PAGE });
  const [older, setOlder] = useState<Older | null>(null);
  const moreLoads = useLatest(); // a "Show more" in flight is dropped when the list loads again
  // reloaded when the live job changes status (a run finishing shows up here) and keyed by the search:
  // only the latest answer is shown, so a slow one from before the change cannot bring back an older list
  const loaded = useLoad(
    (signal) => {
      moreLoads.cancel();
      const shown = shownCount.current.at === searched ? shownCount.current.count : RUNS_PAGE;
      const limit = Math.min(shown, RUNS_LIMIT_MAX);
      return api.runs(signal, { ...(limit > RUNS_PAGE ? { limit } : {}), ...(searched ? { q: searched } : {}) }).then((page) => {
        setOlder(null); // the first page now holds every run shown
        return page;
      });
    },
    ["runs", searched],
    [job?.id, job?.status],
  );
  // while another search loads, the last answer stays shown, narrowed by name (no "Loading" per keystroke)
  const last = useRef<{ any: RunList | null; all: RunList | null }>({ any: null, all: null });
  if (loaded.data) last.current = { any: loaded.data, all: searched ? last.current.all : loaded.data };
  const first = loaded.data ?? (searched ? null : last.current.all) ?? last.current.any; // a cleared search: the whole list at once
  const extra = loaded.data && older?.at === searched ? older : null;
  const listed = first ? [...first.runs, ...(extra?.runs ?? [])] : null;
  const cursor = loaded.data ? (extra ? extra.cursor : (loaded.data.next_cursor ?? null)) : null;
  if (loaded.data && listed) shownCount.current = { at: searched, count: Math.max(RUNS_PAGE, listed.length) };
  const settled = loaded.data != null && searched === typed; // the list is the server's answer for the words typed
  const runs = listed && typed && !settled ? listed.filter((r) => matchesName(r.output_name, typed)) : listed;
  const [actionError, setError] = useState<string | null>(null);
  const error = actionError ?? (loaded.error ? loadMessage(loaded.error, "") : null);
  const load = loaded.reload;
  const more = useAction(async () => {
    if (!cursor || !listed) return;
    const ticket = moreLoads.begin();
    const at = searched;
    try {
      const page = await api.runs(ticket.signal, { cursor, ...(at ? { q: at } : {}) });
      if (!ticket.current()) return;
      const ids = new Set(listed.map((r) => r.id));
      setOlder((was) => ({ at, runs: [...(was?.at === at ? was.runs : []), ...page.runs.filter((r) => !ids.has(r.id))], cursor: page.next_cursor ?? null }));
    } catch (err) {
      if (!isAbort(err) && ticket.current()) setError(`Cannot load more runs: ${err instanceof Error ? err.message : String(err)}`);
    }
  });

  const mounted = useUnmountSignal(); // whom its actions' answers are for (client.AnswerTo)
  const remove = useAction(async (run: RunSummary) => {
    if (!window.confirm(deleteQuestion(run))) return;
    try {
      await api.deleteRun(run.id, mounted()); // left meanwhile: it is deleted, the list gone is not reloaded
      setError(null);
    } catch (err) {
      if (isAbort(err)) return;
      // deleted meanwhile (another tab, the CLI): what was asked is done
      if (!(err instanceof ApiError && err.status === 404)) setError(err instanceof Error ? err.message : String(err));
    }
    await load();
  });

  const columns: Column<RunSummary>[] = [
    {
      header: "Name",
      kind: "primary",
      cell: (r) => (
        <>
          <a href={href("runs", r.id)}>{r.output_name}</a>
          {r.source === "cli" && <span className="chip source" title="started with lorastudio train">CLI</span>}
        </>
      ),
    },
    { header: "Family", cell: (r) => r.family },
    { header: "Status", cell: (r) => <span className={`status status-${r.status}`}>{r.status}</span> },
    {
      header: "Steps",
      num: true,
      cell: (r) => (
        <>
          {r.steps_run}
          {r.total_steps ? <span className="muted">/{r.total_steps}</span> : null}
        </>
      ),
    },
    { header: "Final loss", num: true, cell: (r) => formatNumber(r.last_loss) },
    { header: "Duration", num: true, cell: (r) => formatDuration(runDuration(r)) },
    { header: "Started", cell: (r) => formatWhen(r.created_at) },
    {
      header: "",
      kind: "actions",
      cell: (r) => (
        <>
          {r.lora_file && (
            <a className="button ghost small" href={api.loraFileUrl(r.output_name)} download aria-label={`download LoRA ${r.output_name}`}>
              Download
            </a>
          )}
          <ResumeButton run={r} onResumed={() => navigate("live")} onError={setError} />
          <a className="button ghost small" href={href("runs", r.id)} aria-label={`Open: ${r.output_name}`}>
            Open
          </a>
          <button className="ghost small danger-text" disabled={remove.pending} onClick={() => void remove.run(r)} aria-label={`Delete: ${r.output_name}`}>
            Delete
          </button>
        </>
      ),
    },
  ];

  return (
    <section className="screen">
      <div className="screen-head">
        <h1>Runs</h1>
        <button
          className="ghost"
          onClick={() => {
            setError(null);
            void load();
          }}
        >
          Refresh
        </button>
      </div>
      <ErrorBanner message={error} />
      {!runs && !error && (
        <p className="muted" role="status" data-testid="runs-loading">
          Loading the runs…
        </p>
      )}
      {runs && runs.length === 0 && !typed && !searched && (
        <div className="empty card">
          <strong>No runs yet</strong>
          <p>Every training run lands here with its loss curve, settings and LoRA file.</p>
          <a className="button primary" href={href("train")}>
            Train a LoRA
          </a>
        </div>
      )}
      {listed && (listed.length >= FILTER_FROM || (first?.total ?? 0) > listed.length || query || searched) && (
        <NameFilter value={query} onChange={setQuery} what="runs" />
      )}
      {typed && runs && (
        <p className="muted small wrap-anywhere" data-testid="runs-found" role="status">
          {settled
            ? runs.length
              ? `${first?.total ?? runs.length} runs have “${typed}” in their name, id or base model.`
              : `No run has “${typed}” in its name, id or base model.`
            : `Searching every run for “${typed}”…`}
        </p>
      )}
      {runs && runs.length > 0 && <DataTable rows={runs} rowKey={(r) => r.id} stack testId="runs-table" columns={columns} />}
      {runs && runs.length > 0 && (settled || !typed) && (
        <p className="muted" data-testid="runs-count">
          {runs.length} of {first?.total ?? runs.length} {typed ? "runs found" : "runs"}
          {cursor && (
            <>
              {" "}
              <button className="ghost small" disabled={more.pending} onClick={() => void more.run()}>
                Show more
              </button>
            </>
          )}
        </p>
      )}
    </section>
  );
}
