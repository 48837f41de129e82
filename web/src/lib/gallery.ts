/**
 * The Generate screen's view of the server's gallery: its images, the one shown, why its latest
 * load failed, and Delete. Reloaded on a generation's end, a delete, and a LoRA-by-step grid's end
 * (lib/stepGridInFlight: also a grid that ended while another screen was open).
 */
import { useCallback, useEffect, useRef, useState } from "react";
import { ApiError } from "../api/client";
import { api } from "../api/endpoints";
import type { GalleryImage } from "../api/types";
import { isAbort, useAction, useLatest } from "./latest";
import { useStepGrid } from "./stepGridInFlight";

/** The gallery; `onError` is told why a delete failed. */
export function useGallery(onError: (message: string) => void) {
  const [gallery, setGallery] = useState<GalleryImage[] | null>(null);
  // why the gallery's latest load failed (its own message: a generation's outcome never hides it)
  const [galleryError, setGalleryError] = useState<string | null>(null);
  const [selected, setSelected] = useState<GalleryImage | null>(null);
  // only the latest reload's answer is shown
  const galleryLoads = useLatest();
  /** Reload the gallery and show `select` (the image just made), else the one shown, else the newest. */
  const loadGallery = useCallback(
    async (select?: string) => {
      const ticket = galleryLoads.begin();
      let images: GalleryImage[];
      try {
        images = (await api.gallery(ticket.signal)).images;
      } catch (err) {
        if (isAbort(err)) return;
        if (ticket.current()) setGalleryError(`Cannot load the gallery: ${err instanceof Error ? err.message : String(err)}`);
        throw err;
      }
      if (!ticket.current()) return;
      setGalleryError(null);
      setGallery(images);
      setSelected((shown) => (select ? images.find((i) => i.file === select) : shown) ?? images[0] ?? null);
    },
    [galleryLoads],
  );
  useEffect(() => {
    loadGallery().catch(() => undefined); // said by galleryError
  }, [loadGallery]);
  // a grid that ended (while this screen was open or not) put its images in the gallery
  const { finished } = useStepGrid();
  const gridsSeen = useRef(finished);
  useEffect(() => {
    if (finished === gridsSeen.current) return;
    gridsSeen.current = finished;
    loadGallery().catch(() => undefined);
  }, [finished, loadGallery]);

  /** Delete `img` from the server's gallery (after asking; one request however often it is clicked); the next image is shown. */
  const remove = useAction(async (img: GalleryImage) => {
    if (!window.confirm(`Delete the image "${img.prompt ?? img.file}" and its settings from the gallery?`)) return;
    try {
      await api.deleteGalleryImage(img.file);
    } catch (err) {
      // deleted meanwhile (another tab): what was asked is done
      if (!(err instanceof ApiError && err.status === 404)) {
        onError(err instanceof Error ? err.message : String(err));
        return;
      }
    }
    const at = gallery?.findIndex((i) => i.file === img.file) ?? -1;
    const next = gallery?.filter((i) => i.file !== img.file) ?? [];
    setSelected(next[Math.min(Math.max(at, 0), next.length - 1)] ?? null);
    setGallery(next);
    await loadGallery(next[Math.min(Math.max(at, 0), next.length - 1)]?.file).catch(() => undefined);
  });
  return { gallery, galleryError, selected, setSelected, loadGallery, remove };
}
