import { api } from "../api/endpoints";
import type { GalleryImage } from "../api/types";
import { ErrorBanner } from "./ErrorBanner";
import { ReferenceStrip } from "./ReferenceImages";

/** "seed 3 · 512×512 · 20 steps" for an image (parts it lacks are left out). */
export function imageMeta(img: GalleryImage): string {
  const parts = [];
  if (img.seed != null) parts.push(`seed ${img.seed}`);
  if (img.width != null && img.height != null) parts.push(`${img.width}×${img.height}`);
  if (img.steps != null) parts.push(`${img.steps} steps`);
  if (img.guidance != null) parts.push(`guidance ${img.guidance}`);
  if (img.negative_prompt) parts.push(`not: ${img.negative_prompt}`);
  if (img.max_sequence_length != null) parts.push(`${img.max_sequence_length} text tokens`);
  return parts.join(" · ");
}

/** The LoRAs of an image as chips ("name ×0.80", "name @400 ×0.80" for the raw weights of a step). */
export function LoraChips({ loras }: { loras: GalleryImage["loras"] }) {
  if (!loras?.length) return <span className="chip muted-chip">no LoRA</span>;
  return (
    <>
      {loras.map((l) => (
        <span className="chip" key={`${l.name}@${l.step ?? ""}${l.weights === "ema" ? "-ema" : ""}`}>
          {l.name}
          {l.step != null ? ` @${l.step}${l.weights === "ema" ? " EMA" : ""}` : ""} ×{(l.scale ?? 1).toFixed(2)}
        </span>
      ))}
    </>
  );
}

interface Props {
  images: readonly GalleryImage[];
  selected: string | null;
  onSelect: (img: GalleryImage) => void;
}

/** The server's gallery: a thumbnail per image with its prompt, seed and LoRAs; pick one to view it. */
export function Gallery({ images, selected, onSelect }: Props) {
  return (
    <ul className="gallery" data-testid="gallery">
      {images.map((img) => (
        <li key={img.file}>
          <button
            type="button"
            className={img.file === selected ? "gallery-item selected" : "gallery-item"}
            aria-pressed={img.file === selected}
            onClick={() => onSelect(img)}
            title={img.prompt ?? img.file}
          >
            <img src={api.imageUrl(img.url)} alt={img.prompt ?? img.file} loading="lazy" />
            <span className="gallery-text">
              <span className="gallery-prompt">{img.prompt || <i className="muted">no prompt recorded</i>}</span>
              <span className="muted small">{imageMeta(img)}</span>
              <span className="gallery-loras">
                <LoraChips loras={img.loras} />
              </span>
              <ReferenceStrip urls={img.reference_urls ?? []} />
            </span>
          </button>
        </li>
      ))}
    </ul>
  );
}

/** The gallery's section: its count, the images, or why there are none (not loaded yet, none
 * made, or its load failed: said, with a retry, never "Loading…" for ever), and "Show more" while
 * the server has older pages. `images` null: not loaded; `total`: the gallery's image count. */
export function GallerySection({
  images,
  total,
  error,
  selected,
  onSelect,
  onRetry,
  onMore,
  loadingMore,
}: Omit<Props, "images"> & {
  images: readonly GalleryImage[] | null;
  total?: number;
  error: string | null;
  onRetry: () => void;
  /** Load the next page (absent: every image is shown). */
  onMore?: () => void;
  loadingMore?: boolean;
}) {
  const count = Math.max(total ?? 0, images?.length ?? 0);
  return (
    <>
      <div className="section-head">
        <h2>Gallery</h2>
        {images != null && (
          <span className="muted small">
            {count > images.length ? `${images.length} of ` : ""}
            {count} {count === 1 ? "image" : "images"}
          </span>
        )}
      </div>
      {error && (
        <>
          <ErrorBanner message={error} />
          <button type="button" className="secondary small" onClick={onRetry}>
            Load the gallery again
          </button>
        </>
      )}
      {images?.length ? (
        <>
          <Gallery images={images} selected={selected} onSelect={onSelect} />
          {onMore && (
            <button type="button" className="secondary small" onClick={onMore} disabled={loadingMore}>
              {loadingMore ? "Loading…" : "Show more"}
            </button>
          )}
        </>
      ) : (
        <div className="empty card">
          {images
            ? "No images yet. Every image you generate is kept here with its prompt, seed and LoRAs."
            : error
              ? "The gallery is not loaded."
              : "Loading…"}
        </div>
      )}
    </>
  );
}
