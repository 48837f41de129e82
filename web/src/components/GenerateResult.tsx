import { api } from "../api/endpoints";
import type { GalleryImage } from "../api/types";
import { imageMeta, LoraChips } from "./Gallery";
import { LiveStatus } from "./LiveStatus";
import { ReferenceStrip } from "./ReferenceImages";

interface Props {
  /** The image shown (null: none yet). */
  selected: GalleryImage | null;
  /** How long it took, when it is the one just made (null: not said). */
  seconds: number | null;
  /** What the server said of how the image just made was made, each naming its file (GenerateOut.warnings). */
  warnings?: string[];
  /** A generation in flight (said while no image is shown). */
  busy: boolean;
  galleryEmpty: boolean;
  onReuse: (img: GalleryImage) => void;
  /** A delete in flight (its button disabled). */
  deleting: boolean;
  onDelete: (img: GalleryImage) => void;
}

/** The Generate screen's result card: the image shown, its prompt, settings, LoRAs and references,
 * "Reuse these settings" and "Delete this image"; or what to do while there is none. */
export function GenerateResult({ selected, seconds, warnings = [], busy, galleryEmpty, onReuse, deleting, onDelete }: Props) {
  // said to a screen reader: the generation running, then the image it made (not an image picked)
  const news = busy ? "Generating…" : selected && seconds != null ? `Image generated in ${seconds.toFixed(1)} s: ${selected.prompt ?? "no prompt"}` : "";
  return (
    <div className="card result">
      <LiveStatus text={news} testId="generate-status" />
      {selected ? (
        <figure>
          <a href={api.imageUrl(selected.url)} target="_blank" rel="noreferrer" title="open full size">
            <img src={api.imageUrl(selected.url)} alt={selected.prompt ?? "generated image"} data-testid="result-image" />
          </a>
          <figcaption>
            <p className="result-prompt">{selected.prompt}</p>
            <p className="muted small">
              {imageMeta(selected)}
              {seconds != null ? ` · ${seconds.toFixed(1)} s` : ""}
            </p>
            {warnings.map((w) => (
              <p key={w} className="banner warn" data-testid="generate-warning">
                {w}
              </p>
            ))}
            <p>
              <LoraChips loras={selected.loras} />
              <ReferenceStrip urls={selected.reference_urls ?? []} />
            </p>
            <button type="button" className="secondary small" onClick={() => onReuse(selected)}>
              Reuse these settings
            </button>{" "}
            <button type="button" className="secondary small danger" disabled={deleting} onClick={() => onDelete(selected)}>
              Delete this image
            </button>
          </figcaption>
        </figure>
      ) : (
        <div className="empty">
          {busy ? "Generating…" : galleryEmpty ? "Your image appears here." : "Pick an image from the gallery, or generate a new one."}
        </div>
      )}
    </div>
  );
}
