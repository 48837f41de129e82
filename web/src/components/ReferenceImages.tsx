import { useId, useRef, useState } from "react";
import { api } from "../api/endpoints";
import type { GalleryImage, UploadedReference } from "../api/types";
import { IMAGE_EXTENSIONS } from "../lib/upload";
import { isAbort, useAction, useLatest } from "../lib/latest";

interface Props {
  /** The most reference images the family takes (FamilyOut.control_images[1]); 0 hides the field. */
  max: number;
  value: UploadedReference[];
  onChange: (refs: UploadedReference[]) => void;
  error?: string;
}

/** Reference images of an edit family (FLUX.2, Kontext): picked files are uploaded at once
 * (POST /api/generate/references) and shown in slot order, each removable. A refusal (too many,
 * the upload's, the server's `references` problem) is announced when it appears and stays the
 * description of the Add button and the file input (RELIABILITY 2060). */
export function ReferenceImages({ max, value, onChange, error }: Props) {
  const input = useRef<HTMLInputElement | null>(null);
  const [problem, setProblem] = useState<string | null>(null);
  // one upload at a time; its answer is dropped once this field is gone (the family changed: the
  // screen keys it by family), so it never adds references to another family's list
  const uploads = useLatest();
  const upload = useAction(async (files: File[]) => {
    const room = max - value.length;
    if (files.length > room) {
      setProblem(`this model takes at most ${max} reference image${max === 1 ? "" : "s"}`);
      files = files.slice(0, room);
    } else setProblem(null);
    if (!files.length) return;
    const ticket = uploads.begin();
    try {
      const { references } = await api.uploadReferences(files, ticket.signal); // dropped once this field is gone
      if (ticket.current()) onChange([...value, ...references]);
    } catch (err) {
      if (isAbort(err) || !ticket.current()) return;
      setProblem(err instanceof Error ? err.message : String(err));
    }
  });
  const errorId = `${useId()}-error`;
  const busy = upload.pending;
  if (max === 0) return null;
  const add = upload.run;
  const shown = problem ?? error;
  return (
    <div className="field wide" data-testid="reference-images">
      <span className="field-label">
        Reference images <span className="muted small">(edit: up to {max}, in order; none: text-to-image)</span>
      </span>
      <ReferenceStrip urls={value.map((r) => r.url)} onRemove={(i) => onChange(value.filter((_, j) => j !== i))} />
      {value.length < max && (
        <button
          type="button"
          className="secondary small"
          disabled={busy}
          aria-describedby={shown ? errorId : undefined}
          onClick={() => input.current?.click()}
        >
          {busy ? "Uploading…" : "Add reference image"}
        </button>
      )}
      <input
        ref={input}
        type="file"
        multiple
        hidden
        data-testid="reference-input"
        accept={IMAGE_EXTENSIONS.join(",")}
        aria-label="reference images"
        aria-invalid={shown ? true : undefined}
        aria-describedby={shown ? errorId : undefined}
        onChange={(e) => {
          const files = Array.from(e.target.files ?? []);
          e.target.value = "";
          void add(files);
        }}
      />
      {shown && (
        <span className="field-error" role="alert" id={errorId}>
          {shown}
        </span>
      )}
    </div>
  );
}

/** Reference image thumbnails in slot order ("1", "2" ...); removable when `onRemove` is given. */
export function ReferenceStrip({ urls, onRemove }: { urls: readonly string[]; onRemove?: (index: number) => void }) {
  if (!urls.length) return null;
  return (
    <span className="reference-strip" data-testid="reference-strip">
      {urls.map((url, i) => (
        <span className="reference" key={`${url}-${i}`}>
          <img src={api.imageUrl(url)} alt={`reference ${i + 1}`} loading="lazy" />
          {onRemove && (
            <button type="button" className="icon-button remove" aria-label={`remove reference ${i + 1}`} onClick={() => onRemove(i)}>
              ×
            </button>
          )}
        </span>
      ))}
    </span>
  );
}

/** The references a gallery image was made with, as uploaded references (for "reuse"). */
export function referencesOf(img: GalleryImage): UploadedReference[] {
  const urls = img.reference_urls ?? [];
  return (img.references ?? []).map((id, i) => ({ id, url: urls[i] ?? `/gallery/references/${id}` }));
}
