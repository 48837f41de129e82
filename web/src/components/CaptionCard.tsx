import { useEffect, useId, useRef, useState } from "react";
import { ApiError } from "../api/client";
import { api } from "../api/endpoints";
import type { DatasetImage } from "../api/types";
import { holdLeave } from "../lib/leaveGuard";
import { inControlFolder } from "../lib/upload";
import { isAbort, useAction, useUnmountSignal } from "../lib/latest";

interface Props {
  dataset: string;
  image: DatasetImage;
  onRemoved: () => void;
  /** Lay the image's loss mask (if it has one) over it: the unmasked part darkened. */
  showMask?: boolean;
}

type SaveState = "idle" | "saving" | "saved" | "error";

/** A thumbnail (with its loss mask over it when asked: masks/, else its alpha channel) and its caption, editable in place (saved on blur or Ctrl/Cmd+Enter),
 * with the server's reason a fresh run refuses the caption (`markup`: another trainer's markup) until it is edited. */
export function CaptionCard({ dataset, image, onRemoved, showMask = false }: Props) {
  const [text, setText] = useState(image.caption ?? "");
  const [saved, setSaved] = useState(image.caption ?? "");
  const [state, setState] = useState<SaveState>("idle");
  /** Why a fresh run refuses the saved caption (the server's words: another trainer's markup), or null. */
  const [markup, setMarkup] = useState<string | null>(image.markup ?? null);
  const [error, setError] = useState<string | null>(null);
  const errorId = useId(); // the error is read with the caption it concerns
  /** The caption another editor wrote since this card read it (the server's 409): keep mine or use theirs. */
  const [theirs, setTheirs] = useState<string | null>(null);
  const mounted = useUnmountSignal(); // left meanwhile (the page, a reload of its list): the write stands, its answer is dropped

  // the save in flight, and the caption the server holds (for the next save's `expected`): a save
  // asked while one is in flight (Ctrl+Enter, then the blur) waits for it, then writes only if the
  // text still differs, over the caption the first one wrote; else its stale `expected` would be
  // refused as another editor's change
  const inFlight = useRef<Promise<void> | null>(null);
  const savedRef = useRef(saved);
  // typed and not saved yet (saved on blur, which a reload or a closed tab never fires): the
  // browser asks before the tab is left; moving to another screen blurs it, which saves
  const unsaved = text !== saved;
  useEffect(() => {
    const reason = `caption:${dataset}/${image.file}`;
    holdLeave(reason, unsaved);
    return () => holdLeave(reason, false);
  }, [unsaved, dataset, image.file]);

  /** Write `text` over the caption `base` (the one this card last read); another one there now is a conflict. */
  const save = async (base?: string) => {
    while (inFlight.current) await inFlight.current;
    const from = base ?? savedRef.current;
    if (text === from && theirs === null) return;
    const write = (async () => {
      setState("saving");
      try {
        await api.setCaption(dataset, image.file, text, from, mounted());
        setMarkup(null); // a caption with markup is refused by the edit (400): the one saved has none
        savedRef.current = text;
        setSaved(text);
        setTheirs(null);
        setState("saved");
        setError(null);
      } catch (err) {
        if (isAbort(err)) return;
        setState("error");
        const current = err instanceof ApiError && err.status === 409 ? (err.body as { current?: unknown }).current : undefined;
        setTheirs(typeof current === "string" ? current : null);
        setError(err instanceof Error ? err.message : String(err));
      }
    })();
    inFlight.current = write;
    await write;
    inFlight.current = null;
  };

  const useTheirs = () => {
    if (theirs === null) return;
    setText(theirs);
    savedRef.current = theirs;
    setSaved(theirs);
    setTheirs(null);
    setError(null);
    setState("idle");
  };

  // one request however often it is clicked; an image removed meanwhile (another tab) is gone as asked
  const remove = useAction(async () => {
    const paired = (image.controls ?? []).length > 0;
    const what = paired ? `${image.file}, its caption and its control images` : `${image.file} and its caption`;
    if (!window.confirm(`Remove ${what}?`)) return;
    try {
      await api.removeImage(dataset, image.file, mounted());
      onRemoved();
    } catch (err) {
      if (isAbort(err)) return;
      if (err instanceof ApiError && err.status === 404) onRemoved();
      else setError(err instanceof Error ? err.message : String(err));
    }
  });

  return (
    <figure className="thumb" data-file={image.file}>
      <div className="thumb-img">
        <img src={api.thumbnailUrl(dataset, image.file)} alt={image.file} loading="lazy" />
        {showMask && image.mask && (
          <img className="mask-overlay" src={api.maskThumbnailUrl(dataset, image.mask)} alt={`mask of ${image.file}`} loading="lazy" />
        )}
        {showMask && !image.mask && image.alpha && (
          <img className="mask-overlay" src={api.alphaThumbnailUrl(dataset, image.file)} alt={`alpha of ${image.file}`} loading="lazy" />
        )}
        {image.mask && <span className="chip mask-chip" title={`masks/${image.mask}`}>mask</span>}
        {!image.mask && image.alpha && (
          <span className="chip mask-chip" title="its alpha channel: the loss mask with alpha_mask">
            alpha
          </span>
        )}
        <button className="icon-button remove" title={`remove ${image.file}`} aria-label={`remove ${image.file}`} disabled={remove.pending} onClick={() => void remove.run()}>
          ×
        </button>
      </div>
      <figcaption>
        {(image.controls ?? []).length > 0 && (
          <div className="pair-controls small" data-testid={`controls-of-${image.file}`}>
            <span className="muted">controls</span>
            {(image.controls ?? []).map((c) =>
              inControlFolder(c) ? (
                <img key={c} src={api.controlThumbnailUrl(dataset, c)} alt={c} title={c} loading="lazy" />
              ) : (
                <code key={c}>{c}</code>
              ),
            )}
          </div>
        )}
        <div className="row-between small">
          <span className="filename" title={image.file}>
            {image.file}
          </span>
          <span className="muted">
            {image.repeats != null && (
              <span title="its kohya folder's repeats: a run with kohya_folders trains it this many times an epoch" data-testid={`repeats-of-${image.file}`}>
                ×{image.repeats}{" "}
              </span>
            )}
            {image.width && image.height ? `${image.width}×${image.height}` : ""}
          </span>
        </div>
        <textarea
          aria-label={`caption of ${image.file}`}
          aria-invalid={error ? true : undefined}
          aria-describedby={error ? errorId : undefined}
          placeholder="no caption"
          value={text}
          rows={3}
          onChange={(e) => {
            setText(e.target.value);
            setState("idle");
          }}
          onBlur={() => {
            if (theirs === null) void save();
          }}
          onKeyDown={(e) => {
            if (e.key === "Enter" && (e.ctrlKey || e.metaKey) && theirs === null) void save();
          }}
        />
        {/* the server's word on the caption saved (another trainer's markup, which a fresh run
            refuses): shown while the text is the saved one */}
        {markup && text === saved && (
          <p className="warn-text small caption-markup" data-testid={`markup-of-${image.file}`}>
            A fresh run refuses this caption: it {markup}.
          </p>
        )}
        <div className="caption-state small">
          {/* a polite region, always there: "saving…", then "saved" are said as a save goes */}
          <span role="status" aria-live="polite">
            {state === "saving" && <span className="muted">saving…</span>}
            {state === "saved" && <span className="ok">saved</span>}
            {text !== saved && state === "idle" && <span className="muted">unsaved</span>}
          </span>
          {error && (
            <span className="field-error" role="alert" id={errorId}>
              {error}
            </span>
          )}
          {theirs !== null && (
            <span className="caption-conflict">
              <button type="button" onClick={() => void save(theirs)}>
                Keep mine
              </button>
              <button type="button" onClick={useTheirs}>
                Use theirs
              </button>
            </span>
          )}
        </div>
      </figcaption>
    </figure>
  );
}
