/**
 * A dataset's upload, kept outside its page: the batches go on being sent while the user looks at
 * another screen of the app, so the dataset's page opened meanwhile shows the upload's progress
 * (and keeps the drop zone closed until it ends) and reloads its files when it ends, instead of an
 * idle page whose list stops at the files there when it opened. An upload that ended is forgotten
 * when its page closes. Per dataset name; per browser tab (module state).
 */
import { useCallback, useEffect, useSyncExternalStore } from "react";
import { holdLeave } from "./leaveGuard";
import type { RefusedFile } from "./upload";

export interface UploadState {
  sentBytes: number;
  totalBytes: number;
  batch: number;
  batches: number;
  done: boolean;
  /** Files the server stored, over every batch of this upload. */
  stored: string[];
}

export interface UploadView {
  upload: UploadState | null;
  /** Files refused (before sending, or by the server), with why. */
  refused: RefusedFile[];
  /** Why the upload ended before its last batch, and how many files it did not send. */
  stopped: string | null;
  /** How many uploads of this dataset ended (a page reloads its files when it grows). */
  finished: number;
}

const EMPTY: UploadView = { upload: null, refused: [], stopped: null, finished: 0 };
const views = new Map<string, UploadView>();
const listeners = new Set<() => void>();

function subscribe(listener: () => void): () => void {
  listeners.add(listener);
  return () => listeners.delete(listener);
}

function update(name: string, change: (view: UploadView) => UploadView): void {
  views.set(name, change(views.get(name) ?? EMPTY));
  holdLeave("upload", uploading()); // a reload or closing the tab would drop the batches not sent: the browser asks first
  for (const listener of listeners) listener();
}

type SetState<T> = (next: T | ((prev: T) => T)) => void;

/** Whether an upload is being sent now (of any dataset). */
export function uploading(): boolean {
  return [...views.values()].some((v) => v.upload != null && !v.upload.done);
}

/** Dataset `name`'s upload view, and its setters (as React's, but kept beside the page, not in it). */
export function useUploadView(name: string) {
  const view = useSyncExternalStore(subscribe, () => views.get(name) ?? EMPTY);
  const setter = useCallback(
    <K extends "upload" | "refused" | "stopped">(key: K): SetState<UploadView[K]> =>
      (next) =>
        update(name, (v) => ({ ...v, [key]: typeof next === "function" ? (next as (prev: UploadView[K]) => UploadView[K])(v[key]) : next })),
    [name],
  );
  // an upload that ended (or none) is forgotten when its page closes; one being sent goes on showing
  useEffect(
    () => () => {
      const v = views.get(name);
      if (!v?.upload || v.upload.done) views.delete(name);
    },
    [name],
  );
  return {
    ...view,
    setUpload: setter("upload"),
    setRefused: setter("refused"),
    setStopped: setter("stopped"),
    /** Say that the upload ended (its page, open now or later, reloads its files). */
    finish: () => update(name, (v) => ({ ...v, finished: v.finished + 1 })),
  };
}

/** Forget every upload view (tests: each starts with none). */
export function forgetUploads(): void {
  views.clear();
  holdLeave("upload", false);
}

/** What a screen reader is told of an upload (its page's live region): each batch, then how it
 * ended; "" while there is none. Not its bytes: those move at every progress event. */
export function uploadNews(upload: UploadState | null, refused: number): string {
  if (!upload) return "";
  if (!upload.done) return `Uploading batch ${upload.batch} of ${upload.batches}`;
  const stored = `${upload.stored.length} file${upload.stored.length === 1 ? "" : "s"} stored`;
  return `Upload finished: ${stored}${refused > 0 ? `, ${refused} refused` : ""}`;
}
