import { useEffect, useRef, useState } from "react";
import { ApiError } from "../api/client";
import { api } from "../api/endpoints";
import type { DatasetDetail } from "../api/types";
import { useInfo } from "../api/info";
import { BulkCaptions } from "../components/BulkCaptions";
import { AutoCaptionPanel } from "../components/AutoCaptionPanel";
import { CaptionCard } from "../components/CaptionCard";
import { DropZone } from "../components/DropZone";
import { ProgressBar } from "../components/ProgressBar";
import { formatBytes } from "../lib/format";
import { href, navigate } from "../lib/route";
import { CONTROL_SLOTS, planControlUpload, planUpload, type RefusedFile } from "../lib/upload";
import { uploadNews, useUploadView } from "../lib/uploadsInFlight";
import { LiveStatus } from "../components/LiveStatus";
import { Crumb } from "../components/Crumb";
import { isAbort, loadMessage, useAction, useLatest, useLoad, useUnmountSignal } from "../lib/latest";
import { ErrorBanner } from "../components/ErrorBanner";

/** Images asked for at once: a dataset of 10,000 images is shown a page at a time ("Show more"). */
export const PAGE_SIZE = 200;

/** Whether an upload error ends the upload: a refusal of the batch's files (400, 413, 422) lets the
 * next batch go; a full disk (507), a server stopping (503), no answer, a dataset gone (404) or a
 * token refused (401) would refuse every later batch too. */
function stopsUpload(err: unknown): boolean {
  return !(err instanceof ApiError && [400, 413, 422].includes(err.status));
}

/** Refused-file messages from an upload error: "name: reason" strings or field problems. */
function refusedFrom(err: unknown): RefusedFile[] {
  if (err instanceof ApiError && err.problems.length) {
    return err.problems.map((p) => {
      const text = p.field ? `${p.field}: ${p.message}` : p.message;
      const i = text.indexOf(": ");
      return i > 0 ? { file: text.slice(0, i), reason: text.slice(i + 2) } : { file: "", reason: text };
    });
  }
  return [{ file: "", reason: err instanceof Error ? err.message : String(err) }];
}

/** One dataset: upload by drag-and-drop (batched, with progress; the server keeps the good files
 * of a batch and lists the refused ones), thumbnails (each loss mask over its image when "Show
 * masks" is ticked), inline captions, delete. */
export function DatasetDetailScreen({ name }: { name: string }) {
  const { reload: reloadInfo } = useInfo();
  /** Images shown now: a reload (after an edit) asks for as many again, at least a page. */
  const shown = useRef(0);
  // keyed by the dataset: an answer for the one shown before never shows under this one; a 404 is a new dataset
  // a reload (after an edit) asks for as many images as are shown, at least a page
  const loaded = useLoad(
    (signal) => api.dataset(name, { offset: 0, limit: Math.max(PAGE_SIZE, shown.current) }, signal),
    name,
  );
  /** The pages "Show more" added to `base` (ignored once a reload replaced it). */
  const [more, setMore] = useState<{ base: DatasetDetail; merged: DatasetDetail } | null>(null);
  const [moreError, setMoreError] = useState<string | null>(null);
  const moreLatest = useLatest();
  const missing = loaded.error instanceof ApiError && loaded.error.status === 404;
  const data = missing ? null : more && more.base === loaded.data ? more.merged : loaded.data;
  const loadError = (missing || !loaded.error ? null : loadMessage(loaded.error, "")) ?? moreError;
  const load = loaded.reload;
  // the upload (its progress, refused files, why it stopped): outlives this page while it is sent
  const { upload, refused, stopped, setUpload, setRefused, setStopped, finished, finish } = useUploadView(name);
  // an upload that ends while this page is open (sent from it, or before it was left and opened again): its files
  const seenFinished = useRef(finished);
  useEffect(() => {
    if (finished === seenFinished.current) return;
    seenFinished.current = finished;
    load();
  }, [finished, load]);
  const [deleteError, setDeleteError] = useState<string | null>(null);
  /** Where dropped files go: "files" (targets and captions) or a control folder. */
  const [slot, setSlot] = useState("files");
  const [showMasks, setShowMasks] = useState(false);

  const onFiles = async (files: File[], folders: string[] = []) => {
    const field = slot;
    const plan =
      field === "files"
        ? planUpload(files, undefined, undefined, folders)
        : planControlUpload(files, undefined, undefined, folders, field === "mask" ? "loss masks" : "control images");
    const problems = [...plan.refused];
    setRefused(problems);
    setStopped(null);
    if (!plan.batches.length) return;
    let sentBefore = 0;
    const stored: string[] = [];
    setUpload({ sentBytes: 0, totalBytes: plan.bytes, batch: 1, batches: plan.batches.length, done: false, stored });
    for (const [i, batch] of plan.batches.entries()) {
      const batchBytes = batch.reduce((n, f) => n + f.size, 0);
      try {
        const result = await api.upload(
          name,
          batch,
          (sent, total) => {
            const frac = total > 0 ? sent / total : 0;
            setUpload((u) => u && { ...u, batch: i + 1, sentBytes: sentBefore + frac * batchBytes });
          },
          field,
          null, // the upload outlives this page (lib/uploadsInFlight): its answers are for the page open then
        );
        stored.push(...result.committed);
        problems.push(...result.refused);
        setRefused([...problems]);
        setUpload((u) => u && { ...u, stored: [...stored] });
      } catch (err) {
        if (stopsUpload(err)) {
          const left = plan.batches.slice(i).reduce((n, b) => n + b.length, 0);
          const why = err instanceof Error ? err.message : String(err);
          setStopped(`Upload stopped: ${why}. ${left} file${left === 1 ? "" : "s"} not stored (drop ${left === 1 ? "it" : "them"} again once that is solved).`);
          break;
        }
        problems.push(...refusedFrom(err));
        setRefused([...problems]);
      }
      sentBefore += batchBytes;
      setUpload((u) => u && { ...u, sentBytes: sentBefore });
    }
    setUpload((u) => u && { ...u, done: true });
    finish(); // this page, or the one open now if the user left and came back, reloads its files
    await reloadInfo();
  };

  const mounted = useUnmountSignal(); // whom its actions' answers are for (client.AnswerTo)
  const onDelete = useAction(async () => {
    if (!window.confirm(`Delete dataset ${name} and every file in it?`)) return;
    try {
      await api.deleteDataset(name, mounted()); // left meanwhile: it is deleted, no jump to Datasets
    } catch (err) {
      if (isAbort(err)) return;
      // deleted meanwhile (another tab, the CLI): what was asked is done
      if (!(err instanceof ApiError && err.status === 404)) {
        setDeleteError(err instanceof Error ? err.message : String(err));
        return;
      }
    }
    await reloadInfo();
    navigate("datasets");
  });

  const onMore = async () => {
    const base = loaded.data;
    if (!data || !base) return;
    const ticket = moreLatest.begin();
    try {
      const next = await api.dataset(name, { offset: data.files.length, limit: PAGE_SIZE }, ticket.signal);
      if (!ticket.current()) return;
      const seen = new Set(data.dropped.map((d) => `${d.file}\n${d.reason}`));
      const dropped = [...data.dropped, ...next.dropped.filter((d) => !seen.has(`${d.file}\n${d.reason}`))];
      setMore({ base, merged: { ...next, offset: 0, files: [...data.files, ...next.files], dropped } });
      setMoreError(null);
    } catch (err) {
      if (isAbort(err) || !ticket.current()) return;
      setMoreError(err instanceof Error ? err.message : String(err));
    }
  };


  const files = data?.files ?? [];
  shown.current = files.length;
  // totals over every page (the server counts them)
  const total = data?.total_files ?? 0;
  const captioned = data?.captions ?? 0;
  const masked = data?.masked ?? 0;
  const alpha = data?.with_alpha ?? 0; // alpha_mask's masks
  return (
    <section className="screen">
      <div className="screen-head">
        <h1>
          <Crumb to="datasets" label="Datasets" />
          {name}
        </h1>
        <div className="head-actions">
          {loaded.data == null && loaded.error == null && (
            <span className="muted" role="status" data-testid="dataset-loading">
              Loading its images…
            </span>
          )}
          {data && (
            <span className="muted" data-testid="dataset-counts">
              {total} {total === 1 ? "image" : "images"} · {captioned} captioned{masked > 0 && ` · ${masked} masked`}
              {alpha > 0 && ` · ${alpha} with alpha`}
            </span>
          )}
          {masked + alpha > 0 && (
            <label className="small" data-testid="mask-toggle" title="masks/ folder masks, else each image's alpha channel (alpha_mask)">
              <input type="checkbox" checked={showMasks} onChange={(e) => setShowMasks(e.target.checked)} /> Show masks
            </label>
          )}
          {files.length > 0 && (
            <a className="button primary" href={href("train", name)}>
              Train on it
            </a>
          )}
          {data && (
            <button
              className="ghost danger"
              disabled={onDelete.pending}
              onClick={() => void onDelete.run()}
              aria-describedby={deleteError ? "dataset-delete-error" : undefined} // its refusal, read with it (RELIABILITY 2060)
              data-testid="delete-dataset"
            >
              Delete dataset
            </button>
          )}
        </div>
      </div>
      <ErrorBanner message={loadError} />
      {deleteError && (
        <div className="banner error" role="alert" id="dataset-delete-error" data-testid="delete-error">
          Not deleted: {deleteError}
        </div>
      )}
      {missing && loaded.data != null && (
        <div className="banner warn" role="alert" data-testid="dataset-gone">
          This dataset was deleted (in another tab or with the CLI). Drop images to create it again, or go back to the{" "}
          <a href={href("datasets")}>datasets</a>.
        </div>
      )}
      {missing && loaded.data == null && <p className="muted">New dataset: drop images (and their .txt captions) to create it.</p>}
      {files.length > 0 && <AutoCaptionPanel dataset={name} onFinished={() => void Promise.all([load(), reloadInfo()])} />}
      <label className="upload-slot small">
        Upload as{" "}
        <select aria-label="upload as" value={slot} onChange={(e) => setSlot(e.target.value)}>
          <option value="files">images and captions (targets)</option>
          {CONTROL_SLOTS.map((c, i) => (
            <option key={c} value={c}>
              control images, slot {i + 1} ({c}/, paired by file name)
            </option>
          ))}
          <option value="mask">loss masks (masks/, by file name and size)</option>
        </select>
      </label>
      <DropZone onFiles={(f, folders) => void onFiles(f, folders)} disabled={upload != null && !upload.done} control={slot === "files" ? undefined : slot} />
      <LiveStatus text={uploadNews(upload, refused.length)} testId="upload-announcement" />
      {upload && (
        <div className="upload-status card" data-testid="upload-status">
          <div className="row-between">
            <span>
              {upload.done ? "Upload finished" : `Uploading batch ${upload.batch} of ${upload.batches}`}
            </span>
            <span className="muted">
              {formatBytes(upload.sentBytes)} / {formatBytes(upload.totalBytes)}
            </span>
          </div>
          <ProgressBar value={upload.sentBytes} max={upload.totalBytes} label="upload progress" />
          {upload.done && (
            <p data-testid="upload-summary">
              {upload.stored.length} file{upload.stored.length === 1 ? "" : "s"} stored
              {refused.length > 0 && `, ${refused.length} refused (listed below)`}
            </p>
          )}
          {upload.stored.length > 0 && (
            <details data-testid="stored-files">
              <summary>Stored files</summary>
              <ul>
                {upload.stored.map((f) => (
                  <li key={f}>
                    <code>{f}</code>
                  </li>
                ))}
              </ul>
            </details>
          )}
        </div>
      )}
      <ErrorBanner message={stopped} testId="upload-stopped" />
      {refused.length > 0 && (
        <div className="banner error" role="alert" data-testid="refused">
          <strong>
            {refused.length} file{refused.length > 1 ? "s" : ""} refused (not stored)
          </strong>
          <ul>
            {refused.map((r, i) => (
              <li key={`${r.file}-${i}`}>
                {r.file && <code>{r.file}</code>} {r.reason}
              </li>
            ))}
          </ul>
          <button className="ghost small" onClick={() => setRefused([])}>
            Dismiss
          </button>
        </div>
      )}
      {data && data.dropped.length > 0 && (
        <div className="banner warn">
          Not used for training:{" "}
          {data.dropped.map((d) => (
            <span key={d.file} className="chip">
              {d.file}: {d.reason}
            </span>
          ))}
        </div>
      )}
      {files.length > 0 && <BulkCaptions name={name} onDone={() => void load()} />}
      <div className="thumb-grid" data-testid="thumb-grid">
        {files.map((f) => (
          // keyed by the caption too: a bulk edit's reload shows the new captions in the cards
          <CaptionCard
            key={`${f.file}\n${f.caption ?? ""}`}
            dataset={name}
            image={f}
            showMask={showMasks}
            onRemoved={() => void Promise.all([load(), reloadInfo()])}
          />
        ))}
      </div>
      {data && files.length < total && (
        <button className="ghost" onClick={() => void onMore()} data-testid="show-more">
          Show {Math.min(PAGE_SIZE, total - files.length)} more ({files.length} of {total} shown)
        </button>
      )}
    </section>
  );
}
