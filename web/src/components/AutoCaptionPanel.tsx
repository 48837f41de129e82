import { useEffect, useRef, useState } from "react";
import { api } from "../api/endpoints";
import type { CaptionJob } from "../api/types";
import { ProgressBar } from "./ProgressBar";
import { ErrorBanner } from "./ErrorBanner";

const POLL_MS = 1000;
export const DEFAULT_CAPTION_MODEL = "Qwen/Qwen2.5-VL-3B-Instruct";

/** "Caption with AI": caption a dataset's images with a vision-language model (hub id or model
 * folder), only those without a caption unless `overwrite`; shows the job's progress, the first
 * captions, the failed files, and can cancel. `onFinished` runs once the job has ended. */
export function AutoCaptionPanel({ dataset, onFinished }: { dataset: string; onFinished: () => void }) {
  const [open, setOpen] = useState(false);
  const [model, setModel] = useState(DEFAULT_CAPTION_MODEL);
  const [prefix, setPrefix] = useState("");
  const [overwrite, setOverwrite] = useState(false);
  const [job, setJob] = useState<CaptionJob | null>(null);
  const [error, setError] = useState<string | null>(null);
  const finished = useRef(onFinished);
  finished.current = onFinished;

  const running = job?.status === "running";
  useEffect(() => {
    if (!job || job.status !== "running") return;
    const timer = setTimeout(async () => {
      try {
        const next = await api.captionJob(job.id);
        setJob(next);
        if (next.status !== "running") finished.current();
      } catch (err) {
        setError(err instanceof Error ? err.message : String(err));
      }
    }, POLL_MS);
    return () => clearTimeout(timer);
  }, [job]);

  const start = async () => {
    setError(null);
    try {
      setJob(await api.captionDataset(dataset, { model: model.trim(), prefix: prefix.trim() || null, overwrite }));
    } catch (err) {
      setError(err instanceof Error ? err.message : String(err));
    }
  };

  const cancel = async () => {
    if (!job) return;
    try {
      setJob(await api.cancelCaption(job.id));
    } catch (err) {
      setError(err instanceof Error ? err.message : String(err));
    }
  };

  if (!open)
    return (
      <button className="ghost" onClick={() => setOpen(true)} data-testid="caption-ai">
        Caption with AI
      </button>
    );
  return (
    <div className="card auto-caption" data-testid="caption-panel">
      <div className="row-between">
        <strong>Caption with AI</strong>
        <button className="ghost small" onClick={() => setOpen(false)} disabled={running}>
          Close
        </button>
      </div>
      <label>
        Model (hub id or folder)
        <input value={model} onChange={(e) => setModel(e.target.value)} disabled={running} data-testid="caption-model" />
      </label>
      <label>
        Prefix (e.g. a trigger word)
        <input value={prefix} onChange={(e) => setPrefix(e.target.value)} disabled={running} data-testid="caption-prefix" />
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
        <button className="primary" onClick={() => void start()} disabled={running || !model.trim()} data-testid="caption-start">
          Start captioning
        </button>
        {running && (
          <button className="ghost danger" onClick={() => void cancel()} data-testid="caption-cancel">
            Cancel
          </button>
        )}
      </div>
      <ErrorBanner message={error} testId="caption-error" />
      {job && <CaptionJobStatus job={job} />}
    </div>
  );
}

function CaptionJobStatus({ job }: { job: CaptionJob }) {
  const total = job.total ?? 0;
  return (
    <div data-testid="caption-status">
      <p>
        {job.status === "running"
          ? job.total == null
            ? `Loading ${job.model} on ${job.device}…`
            : `Captioning ${job.done} / ${total} on ${job.device}`
          : `Caption job ${job.status}: ${job.captioned} captioned, ${job.skipped} kept their caption, ${job.failures.length} failed`}
        {job.cancel_reason && job.status !== "running" && ` (${job.cancel_reason})`}
      </p>
      {job.status === "running" && job.total != null && <ProgressBar value={job.done} max={total} label="caption progress" />}
      {job.error && <div className="banner error">{job.error}</div>}
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
        </ul>
      )}
    </div>
  );
}
