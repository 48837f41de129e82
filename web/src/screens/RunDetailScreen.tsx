import { useEffect, useState } from "react";
import { ApiError } from "../api/client";
import { api } from "../api/endpoints";
import { CheckpointsCard } from "../components/CheckpointsCard";
import { LineChart } from "../components/LineChart";
import { PlanSummary } from "../components/PlanSummary";
import { RunFiles } from "../components/RunFiles";
import { RunLog } from "../components/RunLog";
import { PushToHub } from "../components/PushToHub";
import { groupByStep, SampleRound } from "../components/SamplePreviews";
import { Stat } from "../components/Stat";
import { formatDuration, formatNumber, formatWhen, runDuration } from "../lib/format";
import { href, navigate } from "../lib/route";
import { deleteQuestion } from "../lib/runDelete";
import { chartData, fromPoints } from "../lib/series";
import { ErrorBanner } from "../components/ErrorBanner";
import { Crumb } from "../components/Crumb";
import { isAbort, loadMessage, useAction, useLoad, useUnmountSignal } from "../lib/latest";
import { DatasetWarnings } from "../components/DatasetWarnings";
import { OlderRounds } from "../components/OlderRounds";
import { useSamplePages } from "../lib/samplePages";
import { setPageTitle } from "../lib/pageTitle";

/**
 * One run: the plan it used, its chart, sample previews, its worker log, checkpoints (resume from a picked
 * one, train longer), config and outputs; clone it, download its config or LoRA, push it to the hub; delete.
 */
export function RunDetailScreen({ id }: { id: string }) {
  // each keyed by the run: an answer for the run shown before never shows under this one
  const loaded = useLoad((signal) => api.run(id, signal), id);
  const samplePages = useSamplePages(id); // the newest 100 rounds, "Show older rounds" the page before them
  const samples = samplePages.samples ?? [];
  const checkpoints = useLoad((signal) => api.runCheckpoints(id, signal).then((c) => c.checkpoints, () => []), id).data;
  const loras = useLoad((signal) => api.runLoras(id, signal).then((l) => l.loras, () => []), id).data ?? [];
  // a refused action (resume, delete): shown above the run, which stays on screen
  const [actionError, setActionError] = useState<string | null>(null);
  const mounted = useUnmountSignal(); // whom its actions' answers are for (client.AnswerTo)
  const remove = useAction(async () => {
    const run = loaded.data;
    if (!run || !window.confirm(deleteQuestion(run))) return;
    try {
      await api.deleteRun(run.id, mounted()); // left meanwhile: it is deleted, no jump to Runs
      navigate("runs");
    } catch (err) {
      if (isAbort(err)) return;
      // deleted meanwhile (another tab, the CLI): what was asked is done
      if (err instanceof ApiError && err.status === 404) navigate("runs");
      else setActionError(err instanceof Error ? err.message : String(err));
    }
  });

  const run = loaded.data;
  const name = run?.output_name;
  useEffect(() => {
    if (name) setPageTitle(`Run ${name}`); // the tab's title names the run (App's says "Run" until it is loaded)
  }, [name]);
  if (!run && loaded.error) {
    return (
      <section className="screen">
        <div className="banner error" role="alert" data-testid="run-load-error">
          {loadMessage(loaded.error, `Run ${id} does not exist (any more): it was deleted, in another tab or with the CLI.`)}
        </div>
        <a className="button ghost" href={href("runs")}>
          Back to the runs
        </a>
      </section>
    );
  }
  if (!run) return <section className="screen muted">Loading…</section>;
  const series = fromPoints(run.metrics);
  const download = run.lora_file ? api.loraFileUrl(run.output_name) : null;
  return (
    <section className="screen">
      <div className="screen-head">
        <h1>
          <Crumb to="runs" label="Runs" />
          {run.output_name} <span className={`status status-${run.status}`}>{run.status}</span>
          {run.source === "cli" && <span className="chip source" title="started with lorastudio train">CLI</span>}
        </h1>
        <div className="head-actions">
          <RunFiles runId={run.id} />
          {download && (
            <a className="button primary" href={download} download>
              Download LoRA
            </a>
          )}
          {download && (
            <a className="button secondary" href={api.loraSidecarUrl(run.output_name)} download>
              Sidecar .json
            </a>
          )}
          {download && (
            <a className="button secondary" href={href("generate", run.id)}>
              Generate with it
            </a>
          )}
          <button className="danger" disabled={remove.pending} onClick={() => void remove.run()}>
            Delete
          </button>
        </div>
      </div>
      <ErrorBanner message={actionError} />
      <ErrorBanner message={run.error} />
      {(run.warnings ?? []).map((w) => (
        <div key={w} className="banner warn" data-testid="run-warning">
          {w}
        </div>
      ))}
      <DatasetWarnings warnings={run.dataset_warnings} />
      <div className="card">
        <div className="stats">
          <Stat label="Family">{run.family}</Stat>
          <Stat label="Steps">
            {run.steps_run}
            {run.total_steps ? <small> / {run.total_steps}</small> : null}
          </Stat>
          <Stat label="Final loss">{formatNumber(run.last_loss)}</Stat>
          <Stat label="Duration">{formatDuration(runDuration(run))}</Stat>
          <Stat label="Started">{formatWhen(run.started_at ?? run.created_at)}</Stat>
        </div>
        {run.plan && <PlanSummary plan={run.plan} />}
        {download && (
          <div className="push-hub-slot">
            <PushToHub name={run.output_name} />
          </div>
        )}
      </div>
      <div className="card">
        <LineChart {...chartData(series, run.validation)} empty="No metric points recorded." />
      </div>
      {/* what comes next (Resume, Train longer) above the samples and the log: not a phone's screens below them */}
      <CheckpointsCard run={run} checkpoints={checkpoints} onResumed={() => navigate("live")} />
      {samples.length > 0 && (
        <div className="card">
          <h2>Sample previews</h2>
          {groupByStep(samples).map((r) => (
            <SampleRound key={r.step} runId={run.id} step={r.step} tiles={r.tiles} />
          ))}
          <OlderRounds key={run.id} pages={samplePages} shown={new Set(samples.map((s) => s.step)).size} />
        </div>
      )}
      {loras.length > 1 && (
        <div className="card" data-testid="lora-steps">
          <h2>LoRA by step</h2>
          <ul className="plain lora-steps">
            {loras.map((l) => (
              <li key={l.path}>
                <a
                  href={api.imageUrl(l.url)}
                  download
                  aria-label={`${l.final ? `final (step ${l.step ?? "?"})` : `step ${l.step}`}: download the ${l.weights === "ema" ? "EMA " : ""}LoRA of step ${l.step ?? "?"}`}
                >
                  {l.final ? `final (step ${l.step ?? "?"})` : `step ${l.step}`}
                </a>{" "}
                <span
                  className="chip"
                  data-testid="lora-weights"
                  title={l.weights === "ema" ? "EMA of the adapter weights (not measured by validation)" : "raw trained weights"}
                >
                  {l.weights === "ema" ? "EMA" : "raw"}
                </span>{" "}
                {l.validation_loss != null && <span className="small">val {formatNumber(l.validation_loss)} </span>}
                {l.best && <span className="chip ok" data-testid="lora-best">best</span>}
                {l.last && <span className="chip" data-testid="lora-last">last</span>}{" "}
                <code className="muted small">{l.path.split(/[\\/]/).pop()}</code>
              </li>
            ))}
          </ul>
        </div>
      )}
      <RunLog runId={run.id} />
      <div className="two-col">
        <div className="card">
          <h2>Outputs</h2>
          {run.outputs.length ? (
            <ul className="plain outputs">
              {run.outputs.map((o) => (
                <li key={o.path}>
                  <span className="chip">{o.kind}</span>
                  <span className="output-file">
                    <b>{o.path.split(/[\\/]/).pop()}</b>
                    <code className="muted">{o.path}</code>
                  </span>
                </li>
              ))}
            </ul>
          ) : (
            <p className="muted small">No files.</p>
          )}
        </div>
        <div className="card">
          <h2>Config</h2>
          <table className="kv">
            <tbody>
              {Object.entries(run.config)
                .filter(([, v]) => v !== null)
                .map(([k, v]) => (
                  <tr key={k}>
                    <th>{k}</th>
                    <td>{typeof v === "object" ? JSON.stringify(v) : String(v)}</td>
                  </tr>
                ))}
            </tbody>
          </table>
        </div>
      </div>
    </section>
  );
}
