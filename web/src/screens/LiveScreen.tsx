import { useEffect, useRef, useState } from "react";
import { api } from "../api/endpoints";
import { useTraining } from "../api/training";
import type { Job } from "../api/types";
import { LineChart } from "../components/LineChart";
import { LoraSaved } from "../components/LoraSaved";
import { PlanSummary } from "../components/PlanSummary";
import { ProgressBar } from "../components/ProgressBar";
import { ConnectionAnnouncer, ProgressAnnouncer } from "../components/ProgressAnnouncer";
import { SampleHistory } from "../components/SampleHistory";
import { roundTiles, SampleRound, samplePrompts } from "../components/SamplePreviews";
import { Stat } from "../components/Stat";
import { StopDialog } from "../components/StopDialog";
import { formatDuration, formatGb, formatNumber, secondsBetween } from "../lib/format";
import {
  anchorElapsed,
  elapsedAt,
  etaSeconds,
  observeStep,
  stepClockNow,
  type ElapsedAnchor,
  type StepClock,
} from "../lib/stepClock";
import { describePhase } from "../lib/phase";
import { forecastLeft, forecastOf } from "../lib/runForecast";
import { chartData } from "../lib/series";
import { isAbort, useAction, useUnmountSignal } from "../lib/latest";
import { ErrorBanner } from "../components/ErrorBanner";
import { DatasetWarnings } from "../components/DatasetWarnings";
import { NoLiveJob } from "../components/NoLiveJob";
import { href } from "../lib/route";

const LIVE = new Set(["queued", "preparing", "running", "stopping"]);
/** Ended runs whose record (the run's page) holds what comes next: Resume, Train longer, Clone, its files. */
const ENDED = new Set(["completed", "stopped", "failed", "interrupted"]);

/** Why a stopped run kept nothing (null when it kept what it wrote, or is not stopped). */
function nothingKept(job: Job): string | null {
  if (job.status !== "stopped" || job.lora_path) return null;
  if (job.stop_requested?.save === false) {
    return "Stopped and discarded: no LoRA was written, and the checkpoints, LoRA snapshots and sample previews this run wrote were deleted (a resumed run keeps what it resumed from).";
  }
  if (job.steps_run === 0) return "Stopped before the first step: nothing was trained, so no LoRA was written.";
  return null;
}

/** The preparing banner's text (null once the job runs). */
function phaseText(job: Job): string | null {
  return job.status === "preparing" ? describePhase(job.phase) : null;
}

/** The running (else the latest) job: stats, the plan it runs with, live chart, queue, and the Stop dialog. */
export function LiveScreen() {
  const { job, series, status, refresh, connected, retryInS, error: statusError } = useTraining();
  const [asking, setAsking] = useState(false);
  const [error, setError] = useState<string | null>(null);
  const mounted = useUnmountSignal();
  // one stop request per click (Stop and save clicked twice sends one)
  const stopAction = useAction(async (save: boolean, jobId: string) => {
    try {
      await api.stop({ save, job_id: jobId }, mounted()); // left meanwhile: the stop stands, its answer is dropped
      setAsking(false);
      await refresh();
    } catch (err) {
      if (isAbort(err)) return;
      setError(err instanceof Error ? err.message : String(err));
    }
  });
  const stopping = stopAction.pending;
  // cancel a queued job: one request per click; a refusal is shown
  const dequeue = useAction(async (jobId: string) => {
    try {
      await api.stop({ save: false, job_id: jobId }, mounted());
    } catch (err) {
      if (isAbort(err)) return;
      setError(err instanceof Error ? err.message : String(err));
    }
    await refresh().catch(() => undefined);
  });
  const [, setTick] = useState(0);
  const steps = useRef<StepClock | null>(null); // the pace of the steps this page saw (the ETA)
  const since = useRef<ElapsedAnchor | null>(null); // the server's elapsed seconds and when they came (Elapsed)
  const ticking = job != null && LIVE.has(job.status);
  useEffect(() => {
    if (!ticking) return;
    const timer = window.setInterval(() => setTick((t) => t + 1), 1000); // Elapsed and ETA move between events
    return () => window.clearInterval(timer);
  }, [ticking]);
  useEffect(() => {
    if (!ticking) setAsking(false); // the Stop dialog of a run that ended must not open again for the next one
  }, [ticking]);
  if (job?.progress) steps.current = observeStep(steps.current, job.id, job.progress.step, stepClockNow());
  if (job?.elapsed_s != null) since.current = anchorElapsed(since.current, job.id, job.elapsed_s, stepClockNow());

  const statusMessage = statusError && `Cannot load the training status: ${statusError}`;
  if (!job) {
    return (
      <section className="screen">
        <h1>Live</h1>
        {statusMessage ? (
          <>
            <ErrorBanner message={statusMessage} />
            <button type="button" className="secondary" onClick={() => void refresh().catch(() => undefined)}>
              Try again
            </button>
          </>
        ) : (
          <NoLiveJob />
        )}
      </section>
    );
  }
  const p = job.progress;
  const live = LIVE.has(job.status);
  // a live job's on the server's monotonic clock (never Date.now() less the server's started_at: RELIABILITY 1023)
  const anchored = live && job.elapsed_s != null && since.current?.jobId === job.id ? since.current : null;
  const elapsed = anchored ? elapsedAt(anchored, stepClockNow()) : secondsBetween(job.started_at, live ? null : job.finished_at);
  const total = p?.total_steps ?? 0;
  const step = Math.max(p?.step ?? 0, job.steps_run); // the record may be ahead of the last event seen (a restart)
  // stopped without saving: the files this session wrote (samples, snapshots, checkpoints) are gone
  const discarded = job.status === "stopped" && job.stop_requested?.save === false;

  const measured = live && p ? etaSeconds(steps.current, total, stepClockNow()) : null;
  // while the run prepares (no step to measure a pace by): the Check's forecast, labelled so
  const underway = job.status === "preparing" || job.status === "running";
  const forecast = underway && measured == null ? forecastLeft(forecastOf(job.id), elapsed) : null;
  const stop = (save: boolean) => stopAction.run(save, job.id);

  return (
    <section className="screen">
      <div className="screen-head">
        <h1>
          {job.output_name} <span className={`status status-${job.status}`}>{job.status}</span>
        </h1>
        <div className="head-actions">
          {!connected && (
            <span className="muted small">{retryInS == null ? "reconnecting…" : `reconnecting in ${retryInS} s…`}</span>
          )}
          {live && (
            <button className="danger" onClick={() => setAsking(true)} disabled={job.status === "stopping"}>
              {job.status === "stopping" ? "Stopping…" : "Stop"}
            </button>
          )}
        </div>
      </div>
      <ErrorBanner message={error ?? statusMessage} />
      <ErrorBanner message={job.error} />
      {(job.warnings ?? []).map((w) => (
        <div key={w} className="banner warn" data-testid="run-warning">
          {w}
        </div>
      ))}
      <DatasetWarnings warnings={job.dataset_warnings} />
      {job.lora_path && <LoraSaved jobId={job.id} path={job.lora_path} outputName={job.output_name} />}
      {nothingKept(job) && (
        <div className="banner info" data-testid="nothing-kept">
          {nothingKept(job)}
        </div>
      )}
      {ENDED.has(job.status) && (
        <p className="muted small wrap-anywhere" data-testid="live-run-page">
          What next (resume, train longer, clone its settings, its files):{" "}
          <a href={href("runs", job.id)}>the page of {job.output_name ?? "this run"}</a>
        </p>
      )}
      {phaseText(job) && <div className="banner info">{phaseText(job)}</div>}
      {job.status === "stopping" && job.busy && (
        <div className="banner info" data-testid="stop-waits">
          Stopping: waiting for the {job.busy.work} in progress to finish.
        </div>
      )}
      <div className="card">
        <div className="stats dense">
          <Stat label="Step" testId="stat-step">
            {step}
            {total ? <small> / {total}</small> : null}
          </Stat>
          <Stat label="Epoch">{p?.epoch ?? "–"}</Stat>
          <Stat label="Loss">{formatNumber(p?.loss)}</Stat>
          <Stat label="Avg loss">{formatNumber(p?.avg_loss)}</Stat>
          {job.validation?.length ? (
            <Stat label="Val loss" testId="stat-val-loss">
              {formatNumber(job.validation[job.validation.length - 1].loss)}
              <small> best {formatNumber(Math.min(...job.validation.map((v) => v.loss ?? Infinity)))}</small>
            </Stat>
          ) : null}
          <Stat label="Learning rate">{formatNumber(p?.lr, 3)}</Stat>
          <Stat label="Samples/s">{formatNumber(p?.samples_per_second, 3)}</Stat>
          <Stat label="Peak memory">{formatGb(p?.peak_memory_gb)}</Stat>
          <Stat label="Elapsed" testId="stat-elapsed">{formatDuration(elapsed)}</Stat>
          <Stat label="ETA" testId="stat-eta">
            {measured != null || forecast == null ? (
              formatDuration(measured)
            ) : (
              <span title="the Check's time forecast of this run, until its steps measure a pace">
                {formatDuration(forecast)}
                <small> forecast</small>
              </span>
            )}
          </Stat>
        </div>
        {total > 0 && <ProgressBar value={step} max={total} label="training progress" />}
        <ProgressAnnouncer
          jobId={job.id}
          name={job.output_name ?? "training"}
          status={job.status}
          step={step}
          total={total}
          loss={p?.loss}
          eta={measured}
        />
        <ConnectionAnnouncer connected={connected} />
        {job.plan && <PlanSummary plan={job.plan} />}
      </div>
      <div className="card">
        <LineChart {...chartData(series, job.validation)} empty={live ? "Waiting for the first step…" : "No step ran."} />
      </div>
      {job.samples && !discarded && (
        <div className="card">
          <h2>Sample previews</h2>
          <SampleRound live runId={job.id} step={job.samples.step} tiles={roundTiles(job.id, job.samples.images, samplePrompts(job.config))} />
        </div>
      )}
      {/* after a discard: only the rounds still on disk (a resumed run's earlier ones), read again */}
      <SampleHistory
        key={discarded ? "discarded" : "kept"}
        runId={job.id}
        latest={discarded ? null : (job.samples ?? null)}
        prompts={samplePrompts(job.config)}
      />
      {status?.queue.length ? (
        <div className="card">
          <h2>Queue</h2>
          <ol className="queue">
            {status.queue.map((q) => (
              <li key={q.id}>
                {q.output_name}{" "}
                <button className="ghost small" disabled={dequeue.pending} onClick={() => void dequeue.run(q.id)} aria-label={`Cancel: ${q.output_name}`}>
                  Cancel
                </button>
              </li>
            ))}
          </ol>
        </div>
      ) : null}
      {asking && live && ( // a run that ends while the dialog is open takes it away: nothing left to stop
        <StopDialog
          step={step}
          busy={stopping}
          work={job.busy?.work}
          onStop={(s) => void stop(s)}
          onCancel={() => setAsking(false)}
        />
      )}
    </section>
  );
}
