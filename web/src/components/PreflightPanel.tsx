import { CONFIG_DESCRIPTIONS } from "../api/trainConfig.gen";
import type { PreflightReport } from "../api/types";
import { formatDuration, formatGb } from "../lib/format";
import { PLAN_FIELD_LABELS, planFieldText } from "../lib/plan";

/**
 * The preflight report: what the run will train on, how long, in what precision, with which memory
 * plan (each setting fixed, a default, or measured at start against the memory budget), the
 * attention setting (auto: the kernel is chosen at the start of the run), how much memory (a
 * rough formula for the accelerator, with its verdict on the GPU's memory: a default plan over it takes the
 * GPU's memory as its budget; a measured forecast of host RAM beside what is free), how long
 * (the wall-time forecast per phase, each with its basis; a guess says so), what training the base model's flavour means (e.g. a step-distilled one)
 * and each check the preflight did not make now (`notes`: the run's start makes it).
 */
/** What a screen reader is told when a Check's report arrives (RELIABILITY 1913): that it is there
 * and its headline numbers; the report itself (its notes and warnings) follows the Check button. */
export function checkAnnouncement({ dataset, schedule, memory }: PreflightReport): string {
  return (
    `Check done: ${dataset.images_used} of ${dataset.images_found} images used, ${schedule.steps} steps, ` +
    `about ${formatGb(memory.estimated_gb)} of GPU memory; the preflight report follows.`
  );
}

export function PreflightPanel({ report }: { report: PreflightReport }) {
  const { dataset, schedule, precision, memory, plan } = report;
  const attention = report.config.attention_backend; // the setting; the run reports the kernel it used
  return (
    <div className="card preflight" data-testid="preflight">
      <h2>Preflight</h2>
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
          <span className="stat-value">
            {formatGb(memory.estimated_gb)}
            {memory.lightest_gb != null && <small> down to {formatGb(memory.lightest_gb)}</small>}
          </span>
        </div>
        {memory.host_gb != null && (
          <div className="stat" data-testid="preflight-host-ram" title="forecast peak RAM of this machine (measured on CPU runs; a guide where it only warns)">
            <span className="stat-label">Host RAM (forecast)</span>
            <span className="stat-value">
              {formatGb(memory.host_gb)}
              {memory.available_gb != null && <small> of {formatGb(memory.available_gb)} free</small>}
            </span>
          </div>
        )}
        {report.time && (
          <div className="stat" data-testid="preflight-time" title={report.time.note}>
            <span className="stat-label">Time (forecast)</span>
            <span className="stat-value">
              {formatDuration(report.time.total_s)}
              <small> {report.time.confidence}</small>
            </span>
          </div>
        )}
        <div className="stat">
          <span className="stat-label">Precision</span>
          <span className="stat-value">
            {precision.base_dtype}
            <small> on {precision.device}</small>
          </span>
        </div>
      </div>
      <div className="plan-fields" data-testid="preflight-plan">
        {plan.fields.map((f) => (
          <span className={`chip plan-${f.source}`} key={f.name} title={f.source === "budget" ? "chosen at the start of the run by measuring a few real steps" : undefined}>
            {PLAN_FIELD_LABELS[f.name]}: {planFieldText(f)}
          </span>
        ))}
        <span className="chip" data-testid="preflight-compile" title={plan.compile_shapes != null ? CONFIG_DESCRIPTIONS.compile : undefined}>
          {plan.compile ? "compiled" : "not compiled"}
          {plan.compile_shapes != null && ` (wide): ${plan.compile_shapes} batch ${plan.compile_shapes === 1 ? "shape" : "shapes"} to compile, ~2 min each the first time`}
        </span>
        {plan.fuse_projections !== false && (
          <span className="chip" data-testid="preflight-fuse" title={CONFIG_DESCRIPTIONS.fuse_projections}>
            {plan.fuse_projections ? "projections fused" : "projections fused if the measured plan allows"}
          </span>
        )}
        {report.latent_cache && (
          <span className="chip" data-testid="preflight-latent-cache" title={CONFIG_DESCRIPTIONS.latent_cache}>
            {latentCacheText(report.latent_cache)}
          </span>
        )}
        {attention && (
          <span className="chip" data-testid="preflight-attention" title={CONFIG_DESCRIPTIONS.attention_backend}>
            Attention: {attention === "auto" ? "auto (chosen at start)" : attention}
          </span>
        )}
      </div>
      {plan.decided_by === "measured" && (
        <p className="small">
          Settings left at auto are chosen at the start of the run: the fastest plan that fits the {formatGb(plan.memory_budget_gb)} budget, measured
          on a few real steps.
        </p>
      )}
      <p className="muted small">{memory.note}</p>
      {report.time && (
        <p className="muted small" data-testid="preflight-time-phases">
          Time {report.time.confidence === "guess" ? "(a guess)" : `(${report.time.confidence})`}:{" "}
          {report.time.phases
            .filter((p) => p.seconds >= 0.5)
            .map((p) => (
              <span className="chip" key={p.name} title={p.basis}>
                {p.name.replace(/_/g, " ")} {formatDuration(p.seconds)}
              </span>
            ))}{" "}
          {report.time.note}
        </p>
      )}
      {Object.keys(dataset.buckets_by_resolution ?? {}).length > 1 &&
        Object.entries(dataset.buckets_by_resolution ?? {}).map(([side, buckets]) => (
          <p className="small" key={side} data-testid={`preflight-buckets-${side}`}>
            Buckets at {side}:{" "}
            {Object.entries(buckets).map(([k, n]) => (
              <span className="chip" key={k}>
                {k} × {n}
              </span>
            ))}
          </p>
        ))}
      {Object.keys(dataset.buckets_by_resolution ?? {}).length <= 1 && Object.keys(dataset.buckets).length > 0 && (
        <p className="small">
          Buckets:{" "}
          {Object.entries(dataset.buckets).map(([k, n]) => (
            <span className="chip" key={k}>
              {k} × {n}
            </span>
          ))}
        </p>
      )}
      {dataset.captions && dataset.captions.examples.length > 0 && (
        <div className="small" data-testid="preflight-captions">
          Captions as the model sees them:
          <ul>
            {dataset.captions.examples.map((e, i) => (
              <li key={i}>
                <code>{e}</code>
              </li>
            ))}
          </ul>
          {dataset.captions.cost && <p className="muted">{dataset.captions.cost}</p>}
        </div>
      )}
      {dataset.caption_tokens && <CaptionTokens section={dataset.caption_tokens} />}
      {(dataset.entries ?? []).length > 1 && (
        <table className="small" data-testid="preflight-entries">
          <thead>
            <tr>
              <th>Folder</th>
              <th>Images</th>
              <th>Sampling</th>
              <th>Per epoch</th>
              <th>Share</th>
              <th>Loss weight</th>
            </tr>
          </thead>
          <tbody>
            {(dataset.entries ?? []).map((e) => (
              <tr key={e.label}>
                <td>
                  {e.label}
                  {e.regularisation && <small> (regularisation)</small>}
                </td>
                <td>{e.images}</td>
                <td>{e.weight != null ? `weight ${e.weight}` : `× ${e.repeats ?? 1}`}</td>
                <td>{e.samples_per_epoch}</td>
                <td>{(e.share * 100).toFixed(1)} %</td>
                <td>{e.loss_weight}</td>
              </tr>
            ))}
          </tbody>
        </table>
      )}
      {schedule.preservation && (
        <p className="muted" data-testid="preflight-preservation">
          Output preservation: {schedule.preservation}
        </p>
      )}
      {report.family?.single_file && (
        <p className="small" data-testid="preflight-single-file">
          <strong>Single-file base:</strong> {report.family.single_file}
        </p>
      )}
      {memory.gpu_note && (
        <div className={memory.gpu_fit === "planned" ? "banner" : "banner warn"} data-testid="preflight-gpu-note">
          {memory.gpu_fit === "refused" ? "Will not start: " : ""}
          {memory.gpu_note}
        </div>
      )}
      {memory.host_warning && (
        <div className="banner warn" data-testid="preflight-host-warning">
          {memory.host_certain ? "Will not start: " : ""}
          {memory.host_warning}
        </div>
      )}
      {report.conditioning?.per_step && (
        <div className="banner warn" data-testid="preflight-conditioning">
          <strong>conditioning:</strong> {report.conditioning.note}
        </div>
      )}
      {(report.notes ?? []).map((note) => (
        <div className="banner warn" data-testid="preflight-note" key={note}>
          {note}
        </div>
      ))}
      {report.family?.notes?.map((note) => (
        <div className="banner warn" data-testid="preflight-family-note" key={note}>
          <strong>{report.family?.variant ?? report.family?.name}:</strong> {note}
        </div>
      ))}
      {dataset.mode?.note && (
        <p className="small" data-testid="preflight-mode">
          <strong>{dataset.mode.kind}:</strong> {dataset.mode.note}
          {dataset.controls ? ` · ${String(dataset.controls["pairs"])} pair(s)` : ""}
        </p>
      )}
      {controlSizes(dataset.controls).length > 0 && (
        <p className="small" data-testid="preflight-control-sizes">
          <strong>controls:</strong> {controlSizes(dataset.controls).join("; ")}
        </p>
      )}
      {(dataset.warnings ?? []).map((w) => (
        <div className="banner warn" data-testid="preflight-dataset-warning" key={w}>
          {w}
        </div>
      ))}
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
      {dataset.masks && (
        <p className="small" data-testid="preflight-masks">
          Masked loss: {dataset.masks.images_with_mask} image(s) with a mask ({dataset.masks.source}), unmasked pixels weighted{" "}
          {report.config.unmasked_weight ?? 0}
          {dataset.masks.without_mask.length > 0 && `; ${dataset.masks.without_mask.length} without one train unmasked`}.
        </p>
      )}
      {dataset.validation && (
        <p className="small" data-testid="preflight-validation">
          Validation: {dataset.validation.held_out} image(s) held out of training ({dataset.validation.source}),
          measured {dataset.validation.every ? `every ${dataset.validation.every} steps and ` : ""}after the last step:{" "}
          {dataset.validation.images.map((name) => (
            <code key={name}>{name} </code>
          ))}
        </p>
      )}
      {dataset.missing_captions.length > 0 && (
        <p className="small warn-text">
          {dataset.missing_captions.length} image(s) without a caption use the default caption or trigger word.
        </p>
      )}
    </div>
  );
}

const CUT_SHOWN = 20; // cut captions listed, longest first

/** Captions longer than the text encoder reads (each cut image with its count), or why they are counted at the start. */
function CaptionTokens({ section }: { section: NonNullable<PreflightReport["dataset"]["caption_tokens"]> }) {
  if (!section.counted) {
    return (
      <p className="small muted" data-testid="preflight-caption-tokens">
        {section.note}
      </p>
    );
  }
  if (section.cut.length === 0) return null;
  return (
    <div className="banner warn" data-testid="preflight-caption-tokens">
      <strong>{section.note}</strong>
      <ul>
        {section.cut.slice(0, CUT_SHOWN).map((c) => (
          <li key={c.file}>
            <code>{c.file}</code> {c.tokens} tokens (limit {section.limit})
          </li>
        ))}
        {section.cut.length > CUT_SHOWN && <li>and {section.cut.length - CUT_SHOWN} more</li>}
      </ul>
    </div>
  );
}

/** Where the run caches its latents (latent_cache), and on disk how many images are cached already. */
export function latentCacheText(cache: NonNullable<PreflightReport["latent_cache"]>): string {
  if (cache.mode === "per_step") return "Latents: encoded every step";
  if (cache.mode === "memory") return `Latents: in RAM (${formatGb(cache.ram_gb)})`;
  const size = formatGb((cache.disk_bytes ?? 0) / 1e9);
  return `Latents: on disk, ${cache.images_cached ?? 0} of ${cache.images ?? 0} images cached (${size}), reused by later runs`;
}

/** The preflight's control sizing lines ("1024x1024 -> 1056x992 (pipeline ~1 MP)"), [] for none. */
export function controlSizes(controls: Record<string, unknown> | null | undefined): string[] {
  const sizes = controls?.["sizes"];
  return Array.isArray(sizes) ? sizes.filter((s): s is string => typeof s === "string") : [];
}
