/**
 * A polite live region, visually hidden: a screen reader says `text` each time it changes, and
 * nothing for "". Render it all the time (with "" while there is nothing to say), not only once
 * there is news: a region added with its text already in it is not read by every screen reader.
 * `text` should change at the pace a person wants to hear (a stage, a batch, an outcome), never at
 * every progress tick.
 */
export function LiveStatus({ text, testId }: { text: string; testId?: string }) {
  return (
    <p className="visually-hidden" role="status" aria-live="polite" aria-atomic="true" data-testid={testId}>
      {text}
    </p>
  );
}
