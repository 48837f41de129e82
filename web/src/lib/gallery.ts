/**
 * The Generate screen's view of the server's gallery: its images (the newest page, then the pages
 * asked for with "Show more"), the one shown, why its latest load failed, and Delete. Its newest
 * page is loaded again on a generation's end, a delete, and a LoRA-by-step grid's end
 * (lib/stepGridInFlight: also a grid that ended while another screen was open) and merged with
 * the older pages already shown (mergeNewest): the whole list is never loaded again.
 */
import { useCallback, useEffect, useRef, useState } from "react";
import { ApiError } from "../api/client";
import { api } from "../api/endpoints";
import type { GalleryImage, GalleryList } from "../api/types";
import { isAbort, useAction, useLatest, useUnmountSignal } from "./latest";
import { useStepGrid } from "./stepGridInFlight";

/** The images shown, the cursor of the next page (null: none) and the gallery's image count. */
export interface GalleryPages {
  images: GalleryImage[];
  cursor: string | null;
  total: number;
}

/** Whether `a` is listed before `b` (the server's order: newest first, then by file name, descending). */
function before(a: GalleryImage, b: GalleryImage): boolean {
  return a.created !== b.created ? a.created > b.created : a.file > b.file;
}

/** The pages shown after the gallery's newest page came again as `page`: that page, then the
 * older images shown before that come after it (their pages stay, with their cursor), when what
 * was shown starts within the new page (else, as when more images were made than a page holds,
 * only the new page: no gap is ever shown). An image shown before that is newer than the page's
 * last yet not in it was deleted meanwhile: it goes. */
export function mergeNewest(shown: GalleryPages | null, page: GalleryList): GalleryPages {
  const images = page.images;
  const fresh: GalleryPages = { images, cursor: page.next_cursor ?? null, total: page.total ?? images.length };
  const last = images[images.length - 1];
  if (!shown || !last || fresh.cursor == null || !shown.images.length || before(last, shown.images[0])) return fresh;
  const files = new Set(images.map((i) => i.file));
  const older = shown.images.filter((i) => !files.has(i.file) && before(last, i));
  return older.length ? { images: [...images, ...older], cursor: shown.cursor, total: fresh.total } : fresh;
}

/** The gallery; `onError` is told why a delete failed. */
export function useGallery(onError: (message: string) => void) {
  const [pages, setPages] = useState<GalleryPages | null>(null);
  const shown = useRef<GalleryPages | null>(null);
  const show = useCallback((next: GalleryPages) => {
    shown.current = next;
    setPages(next);
  }, []);
  // why the gallery's latest load failed (its own message: a generation's outcome never hides it)
  const [galleryError, setGalleryError] = useState<string | null>(null);
  const [selected, setSelected] = useState<GalleryImage | null>(null);
  // only the latest reload's answer is shown; a "Show more" answer only on what it was asked for
  const galleryLoads = useLatest();
  const moreLoads = useLatest();
  const mounted = useUnmountSignal(); // a delete answered after the screen was left: nothing shown or reloaded
  /** Load the newest page again and show `select` (the image just made), else the one shown, else the newest. */
  const loadGallery = useCallback(
    async (select?: string) => {
      const ticket = galleryLoads.begin();
      let page: GalleryList;
      try {
        page = await api.gallery(ticket.signal);
      } catch (err) {
        if (isAbort(err)) return;
        if (ticket.current()) setGalleryError(`Cannot load the gallery: ${err instanceof Error ? err.message : String(err)}`);
        throw err;
      }
      if (!ticket.current()) return;
      setGalleryError(null);
      const next = mergeNewest(shown.current, page);
      show(next);
      setSelected((was) => (select ? next.images.find((i) => i.file === select) : was) ?? next.images[0] ?? null);
    },
    [galleryLoads, show],
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

  /** "Show more": the page after those shown (one request however often it is clicked). */
  const more = useAction(async () => {
    const at = shown.current;
    if (!at?.cursor) return;
    const ticket = moreLoads.begin();
    let page: GalleryList;
    try {
      page = await api.gallery(ticket.signal, at.cursor);
    } catch (err) {
      if (!isAbort(err) && ticket.current()) setGalleryError(`Cannot load more of the gallery: ${err instanceof Error ? err.message : String(err)}`);
      return;
    }
    if (!ticket.current() || shown.current !== at) return; // the gallery was loaded again meanwhile
    setGalleryError(null);
    const files = new Set(at.images.map((i) => i.file));
    show({
      images: [...at.images, ...page.images.filter((i) => !files.has(i.file))],
      cursor: page.next_cursor ?? null,
      total: page.total ?? at.total,
    });
  });

  /** Delete `img` from the server's gallery (after asking; one request however often it is clicked); the next image is shown. */
  const remove = useAction(async (img: GalleryImage) => {
    if (!window.confirm(`Delete the image "${img.prompt ?? img.file}" and its settings from the gallery?`)) return;
    try {
      await api.deleteGalleryImage(img.file, mounted());
    } catch (err) {
      if (isAbort(err)) return;
      // deleted meanwhile (another tab): what was asked is done
      if (!(err instanceof ApiError && err.status === 404)) {
        onError(err instanceof Error ? err.message : String(err));
        return;
      }
    }
    const was = shown.current;
    const at = was?.images.findIndex((i) => i.file === img.file) ?? -1;
    const next = was?.images.filter((i) => i.file !== img.file) ?? [];
    setSelected(next[Math.min(Math.max(at, 0), next.length - 1)] ?? null);
    if (was) show({ ...was, images: next, total: Math.max(was.total - (at >= 0 ? 1 : 0), next.length) });
    await loadGallery(next[Math.min(Math.max(at, 0), next.length - 1)]?.file).catch(() => undefined);
  });
  const gallery = pages?.images ?? null;
  return { gallery, galleryTotal: pages?.total ?? 0, hasMore: pages?.cursor != null, more, galleryError, selected, setSelected, loadGallery, remove };
}
