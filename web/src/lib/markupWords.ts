/** The words for a dataset's `markup_captions` (GET /api/datasets, RELIABILITY 1862): its captions
 * holding a `{trigger}`-like placeholder or kohya's `|||`, which a fresh run refuses. */
export function markupWords(count: number): string {
  const captions = count === 1 ? "1 caption holds" : `${count} captions hold`;
  return `${captions} {trigger}-like text or kohya's |||, which a fresh run refuses`;
}

/** What the listing says of a dataset whose metadata.jsonl is too large for it to read
 * (`markup_counted` false, RELIABILITY 2072): its rows' markup is not in `markup_captions`. */
export const MARKUP_UNCOUNTED =
  "the captions of its metadata.jsonl (over 8 MB) are not counted here: its page marks each, a Check names each";
