import { useEffect, useRef, useState } from "react";
import { ApiError } from "../api/client";
import { api } from "../api/endpoints";
import type { CaptionJob, CatalogueModel } from "../api/types";
import { ProgressBar } from "./ProgressBar";
import { formatDuration } from "../lib/format";
import { ErrorBanner } from "./ErrorBanner";
import { LiveStatus } from "./LiveStatus";
import { useToggleFocus } from "../lib/toggleFocus";
import { isAbort, useAction, useLatest, useUnmountSignal } from "../lib/latest";

const POLL_MS = 1000;
export const DEFAULT_CAPTION_MODEL = "Qwen/Qwen2.5-VL-3B-Instruct";
// the server's defaults (captioning/options.py): the prompt asked when none is given, and max_tokens
export const DEFAULT_CAPTION_PROMPT = "Describe this image in one sentence for a training caption";
export const DEFAULT_MAX_TOKENS = 60;
export const MAX_TOKENS_LIMIT = 512;

/** The label of a catalogue captioner in the model list: fetched ones by title, the others say so. */
export function captionerLabel(m: CatalogueModel): string {
  const title = m.checkpoint?.split(": ")[0] ?? m.name;
  const licence = m.licence ? ` · ${m.licence}` : "";
  if (m.source === "catalogue") return `${title} (not fetched: fetch it on the Models page)${licence}`;
  return `${title}${m.complete ? "" : " (incomplete)"}${licence}`;
}

/** "Caption with AI": caption a dataset's images with a vision-language model (a captioner of the
 * catalogue, a hub id or a model folder), only those without a caption unless `overwrite`; shows
 * the job's progress (and the GPU it runs on), the first captions, the failed files, and can
 * cancel. The catalogue's captioners are offered (those not fetched yet disabled, naming where to
 * fetch them); the first fetched one is preselected. Opened, it shows the dataset's last job (a
 * running one followed, one a server restart interrupted with what it did). `onFinished` runs once
 * the job has ended. */
export function AutoCaptionPanel({ dataset, onFinished }: { dataset: string; onFinished: () => void }) {
  const [open, setOpen] = useState(false);
  const [model, setModel] = useState(DEFAULT_CAPTION_MODEL);
  const [prefix, setPrefix] = useState("");
  const [overwrite, setOverwrite] = useState(false);
  const [prompt, setPrompt] = useState("");
  const [maxTokens, setMaxTokens] = useState(String(DEFAULT_MAX_TOKENS));
  const [job, setJob] = useState<CaptionJob | null>(null);
  const [error, setError] = useState<string | null>(null);
  const [captioners, setCaptioners] = useState<CatalogueModel[]>([]);
  const finished = useRef(onFinished);
  finished.current = onFinished;

  useEffect(() => {
    if (!open) return;
    let live = true;
    api.models().then(
      (list) => {
        if (!live) return;
        const found = list.filter((m) => m.kind === "captioner");
        setCaptioners(found);
        const ready = found.find((m) => m.source !== "catalogue" && m.complete);
        if (ready) setModel((now) => (now === DEFAULT_CAPTION_MODEL ? ready.id : now));
      },
      () => undefined, // no catalogue: the model is typed
    );
    return () => {
      live = false;
    };
  }, [open]);

  // the dataset's last job (recorded across restarts): a job still running is followed again, one
  // the server died during reads "interrupted" with what it did; a job started meanwhile wins
  useEffect(() => {
    if (!open) return;
    const ask = new AbortController();
    api.latestCaption(dataset, ask.signal).then(
      (last) => setJob((now) => now ?? last),
      () => undefined, // none yet (404) or not reachable: the panel starts empty
    );
    return () => ask.abort();
  }, [open, dataset]);

  const running = job?.status === "running";
  // the focus to the panel opened, back to the button on Close (or Escape)
  const toggled = useToggleFocus(open, running ? undefined : () => setOpen(false));
  // a failed poll: shown, and the next poll is made all the same (`retries`), so a blip does not
  // freeze the panel at "running"; a job that ended with a restart comes back "interrupted" from
  // its record; one the server no longer knows at all (404: its record was pruned or could not be
  // written) has ended there, so the panel ends it too
  const [pollError, setPollError] = useState<string | null>(null);
  const [retries, setRetries] = useState(0);
  // the poll in flight: a Cancel's answer supersedes it (a slow "running" must not bring the job back)
  const polls = useLatest();
  useEffect(() => {
    if (!job || job.status !== "running") return;
    const timer = setTimeout(async () => {
      const ticket = polls.begin();
      try {
        const next = await api.captionJob(job.id, ticket.signal);
        if (!ticket.current()) return;
        setPollError(null);
        setJob(next);
        if (next.status !== "running") finished.current();
      } catch (err) {
        if (isAbort(err) || !ticket.current()) return;
        const message = err instanceof Error ? err.message : String(err);
        if (err instanceof ApiError && err.status === 404) {
          setPollError(null);
          setJob({
            ...job,
            status: "failed",
            error: `${message}: the server restarted and has no record of this job; the captions written before are kept (start again to caption the rest)`,
          });
          finished.current();
          return;
        }
        setPollError(message);
        setRetries((n) => n + 1);
      }
    }, POLL_MS);
    return () => clearTimeout(timer);
  }, [job, polls, retries]);

  const mounted = useUnmountSignal(); // left meanwhile: the job starts (or stops), its answer is dropped
  // one request per click: a double click starts one job
  const start = useAction(async () => {
    setError(null);
    try {
      // the prompt and max tokens as typed: the server refuses what it cannot honour (422), named
      const body = { model: model.trim(), prefix: prefix.trim() || null, overwrite, prompt: prompt.trim() || null, max_tokens: Number(maxTokens) };
      setJob(await api.captionDataset(dataset, body, mounted()));
    } catch (err) {
      if (!isAbort(err)) setError(err instanceof Error ? err.message : String(err));
    }
  });

  const cancel = useAction(async () => {
    if (!job) return;
    try {
      const ended = await api.cancelCaption(job.id, mounted());
      polls.cancel();
      setJob(ended);
      if (ended.status !== "running") finished.current();
    } catch (err) {
      if (isAbort(err)) return;
      setError(err instanceof Error ? err.message : String(err));
    }
  });

  if (!open)
    return (
      <button ref={toggled} className="ghost" onClick={() => setOpen(true)} data-testid="caption-ai">
        Caption with AI
      </button>
    );
  return (
    <div ref={toggled} className="card auto-caption" data-testid="caption-panel">
      <div className="row-between">
        <strong>Caption with AI</strong>
        <button className="ghost small" onClick={() => setOpen(false)} disabled={running}>
          Close
        </button>
      </div>
      {captioners.length > 0 && (
        <label>
          Captioning model
          <select
            value={captioners.some((m) => m.id === model) ? model : ""}
            onChange={(e) => e.target.value && setModel(e.target.value)}
            disabled={running}
            data-testid="caption-catalogue"
          >
            <option value="">other (type a hub id or folder below)</option>
            {captioners.map((m) => (
              <option key={m.id} value={m.id} disabled={m.source === "catalogue" || !m.complete}>
                {captionerLabel(m)}
              </option>
            ))}
          </select>
        </label>
      )}
      <label>
        Model (catalogue id, hub id or folder)
        <input value={model} onChange={(e) => setModel(e.target.value)} disabled={running} data-testid="caption-model" />
      </label>
      <label>
        Prefix (e.g. a trigger word)
        <input value={prefix} onChange={(e) => setPrefix(e.target.value)} disabled={running} data-testid="caption-prefix" />
      </label>
      <label>
        Prompt (what the model is asked; empty: its default)
        <input
          value={prompt}
          onChange={(e) => setPrompt(e.target.value)}
          placeholder={`${DEFAULT_CAPTION_PROMPT} (Florence-2: <CAPTION>)`}
          disabled={running}
          data-testid="caption-prompt"
        />
      </label>
      <label>
        Max tokens per caption (a longer caption is cut there, and said)
        <input
          type="number"
          min={1}
          max={MAX_TOKENS_LIMIT}
          step={1}
          value={maxTokens}
          onChange={(e) => setMaxTokens(e.target.value)}
          disabled={running}
          data-testid="caption-max-tokens"
        />
      </label>
      <label>
        <input
          type="checkbox"
          checked={overwrite}
          onChange={(e) => setOverwrite(e.target.checked)}
          disabled={running}
          data-testid="caption-overwrite"
        />{" "}
        Replace existing captions
      </label>
      <div className="head-actions">
        <button
          className="primary"
          onClick={() => void start.run()}
          disabled={running || start.pending || !model.trim() || !maxTokens.trim()}
          data-testid="caption-start"
        >
          Start captioning
        </button>
        {running && (
          <button className="ghost danger" onClick={() => void cancel.run()} disabled={cancel.pending} data-testid="caption-cancel">
            Cancel
          </button>
        )}
      </div>
      <ErrorBanner message={error} testId="caption-error" />
      <ErrorBanner message={pollError && `Cannot reach the caption job (trying again): ${pollError}`} testId="caption-poll-error" />
      {job && <CaptionJobStatus job={job} />}
      <LiveStatus text={captionAnnouncement(job)} testId="caption-announcement" />
    </div>
  );
}

/** Where a caption job runs: the CPU, or its GPU (and the training run it shares it with). */
function where(job: CaptionJob): string {
  if (job.device !== "cuda" || job.gpu == null) return job.device;
  return `GPU ${job.gpu}${job.beside_training ? ` (beside training job ${job.beside_training})` : ""}`;
}

/** What a screen reader is told of a caption job (RELIABILITY 1913): its stage (loading the model,
 * captioning N images), then how it ended; not each image done (a poll a second would flood it). */
export function captionAnnouncement(job: CaptionJob | null): string {
  if (!job) return "";
  if (job.status === "running") return job.total == null ? `Loading ${job.model}…` : `Captioning ${job.total} images on ${where(job)}…`;
  return `Caption job ${job.status}: ${job.captioned} captioned, ${job.skipped} kept their caption, ${job.failed} failed.`;
}

function CaptionJobStatus({ job }: { job: CaptionJob }) {
  const total = job.total ?? 0;
  return (
    <div data-testid="caption-status">
      <p>
        {job.status === "running"
          ? job.total == null
            ? `Loading ${job.model} on ${where(job)}…`
            : `Captioning ${job.done} / ${total} on ${where(job)}${job.eta_s != null ? `, about ${formatDuration(job.eta_s)} left` : ""}`
          : `Caption job ${job.status}: ${job.captioned} captioned, ${job.skipped} kept their caption, ${job.failed} failed`}
        {job.cancel_reason && job.status !== "running" && ` (${job.cancel_reason})`}
        {job.status === "interrupted" && " (the server or command running it stopped; start again to caption the rest)"}
      </p>
      {(job.kohya_kept ?? 0) > 0 && (
        <p className="banner warn" data-testid="caption-kohya">
          {job.kohya_kept} image(s) kept a kohya .caption file as their caption, which a run of this dataset does not
          read: rename each to .txt (same name), or replace them with “Replace existing captions”.
        </p>
      )}
      {(job.cut ?? 0) > 0 && (
        <p className="banner warn" data-testid="caption-cut">
          {job.cut} caption(s) stopped at the max tokens{job.max_tokens != null ? ` (${job.max_tokens})` : ""}, not at the
          model's end: likely cut mid-sentence (written as made). Raise max tokens and caption them again.
        </p>
      )}
      {job.status === "running" && job.total != null && <ProgressBar value={job.done} max={total} label="caption progress" />}
      <ErrorBanner message={job.error} />
      {job.preview.length > 0 && (
        <ul data-testid="caption-preview">
          {job.preview.map((p) => (
            <li key={p.file}>
              <code>{p.file}</code> {p.caption}
            </li>
          ))}
        </ul>
      )}
      {job.failures.length > 0 && (
        <ul className="banner warn" data-testid="caption-failures">
          {job.failures.map((f) => (
            <li key={f.file}>
              <code>{f.file}</code> {f.reason}
            </li>
          ))}
          {job.failed > job.failures.length && <li>and {job.failed - job.failures.length} more</li>}
        </ul>
      )}
    </div>
  );
}
