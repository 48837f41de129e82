/** The words for a dataset's `markup_captions` (GET /api/datasets, RELIABILITY 1862): its captions
 * holding a `{trigger}`-like placeholder or kohya's `|||`, which a fresh run refuses. */
export function markupWords(count: number): string {
  const captions = count === 1 ? "1 caption holds" : `${count} captions hold`;
  return `${captions} {trigger}-like text or kohya's |||, which a fresh run refuses`;
}
