/**
 * What may hurt a run about its dataset (images upscaled, cut to their bucket, a validation image
 * that is a training image too, ...): the preflight's `dataset.warnings` (PreflightPanel shows
 * them before a start), as the run said them when it started (its record's `dataset_warnings`),
 * on the Live screen and the run's page. Nothing when there is none.
 */
export function DatasetWarnings({ warnings }: { warnings: readonly string[] | undefined }) {
  if (!warnings?.length) return null;
  return (
    <section aria-label="dataset warnings">
      {warnings.map((w) => (
        <div key={w} className="banner warn" data-testid="dataset-warning">
          <strong>Dataset:</strong> {w}
        </div>
      ))}
    </section>
  );
}
