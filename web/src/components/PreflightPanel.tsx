import type { PreflightReport } from "../api/types";
import { formatGb } from "../lib/format";

/** The preflight report: what the run will train on, how long, in what precision, how much memory. */
export function PreflightPanel({ report }: { report: PreflightReport }) {
  const { dataset, schedule, precision, memory } = report;
  return (
    <div className="card preflight" data-testid="preflight">
      <h3>Preflight</h3>
      <div className="stats">
        <div className="stat">
          <span className="stat-label">Images used</span>
          <span className="stat-value">
            {dataset.images_used}
            <small> / {dataset.images_found}</small>
          </span>
        </div>
        <div className="stat">
          <span className="stat-label">Steps</span>
          <span className="stat-value">{schedule.steps}</span>
        </div>
        <div className="stat">
          <span className="stat-label">Epochs</span>
          <span className="stat-value">{schedule.epochs}</span>
        </div>
        <div className="stat">
          <span className="stat-label">Steps / epoch</span>
          <span className="stat-value">{schedule.steps_per_epoch}</span>
        </div>
        <div className="stat">
          <span className="stat-label">Memory (est.)</span>
          <span className="stat-value">{formatGb(memory.estimated_gb)}</span>
        </div>
        <div className="stat">
          <span className="stat-label">Precision</span>
          <span className="stat-value">
            {precision.base_dtype}
            <small> on {precision.device}</small>
          </span>
        </div>
      </div>
      <p className="muted small">{memory.note}</p>
      {Object.keys(dataset.buckets).length > 0 && (
        <p className="small">
          Buckets:{" "}
          {Object.entries(dataset.buckets).map(([k, n]) => (
            <span className="chip" key={k}>
              {k} × {n}
            </span>
          ))}
        </p>
      )}
      {dataset.dropped.length > 0 && (
        <div className="banner warn">
          <strong>{dataset.dropped.length} file(s) dropped</strong>
          <ul>
            {dataset.dropped.map((d) => (
              <li key={d.file}>
                <code>{d.file}</code> {d.reason}
              </li>
            ))}
          </ul>
        </div>
      )}
      {dataset.missing_captions.length > 0 && (
        <p className="small warn-text">
          {dataset.missing_captions.length} image(s) without a caption use the default caption or trigger word.
        </p>
      )}
    </div>
  );
}
