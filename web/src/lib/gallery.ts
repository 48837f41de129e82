/** The Generate screen's gallery of earlier images, kept in this browser (newest first). */
import type { GenerateResult } from "../api/types";

export interface GalleryItem {
  url: string;
  prompt: string;
  seed: number;
  width: number;
  height: number;
  loras: { name: string; scale: number }[];
  created: number;
}

const KEY = "lorastudio.gallery";
const MAX = 60;

export function loadGallery(): GalleryItem[] {
  try {
    const raw = JSON.parse(window.localStorage.getItem(KEY) ?? "[]");
    return Array.isArray(raw) ? (raw as GalleryItem[]) : [];
  } catch {
    return [];
  }
}

/** Add a generated image at the front (at most MAX kept); returns the new list. */
export function addToGallery(result: GenerateResult, prompt: string): GalleryItem[] {
  const item: GalleryItem = {
    url: result.url,
    prompt,
    seed: result.seed,
    width: result.width,
    height: result.height,
    loras: result.loras,
    created: Date.now(),
  };
  const next = [item, ...loadGallery().filter((g) => g.url !== item.url)].slice(0, MAX);
  window.localStorage.setItem(KEY, JSON.stringify(next));
  return next;
}
