import type { Plan } from "../api/types";
import { formatGb, formatNumber } from "../lib/format";
import { isChosenTrial, planDecidedText, planLine } from "../lib/plan";
import { ScrollRegion } from "./ScrollRegion";

/**
 * The plan a run uses, in one compact line ("bf16 · checkpointing off · 0 blocks offloaded ·
 * micro-batch 2 · compiled · attention cudnn") with how it was decided, the speed features that
 * fell back (each with its reason) and, when a memory budget chose it, the measured trials.
 */
export function PlanSummary({ plan }: { plan: Plan }) {
  const measured = plan.decided_by === "measured" && plan.trials.length > 0;
  return (
    <div className="plan" data-testid="plan">
      <p className="plan-line">
        <span className="stat-label">Plan</span> <b data-testid="plan-line">{planLine(plan)}</b>{" "}
        <span className="muted small">({planDecidedText(plan)})</span>
      </p>
      {plan.fallbacks.length > 0 && (
        <ul className="plan-fallbacks small warn-text" data-testid="plan-fallbacks">
          {plan.fallbacks.map((f) => (
            <li key={f}>fell back: {f}</li>
          ))}
        </ul>
      )}
      {measured && (
        <ScrollRegion label="memory plan trials">
          <table className="table stack plan-trials" data-testid="plan-trials">
            <thead>
              <tr>
                <th>Precision</th>
                <th>Checkpointing</th>
                <th className="num">Offloaded</th>
                <th className="num">Micro-batch</th>
                <th className="num">s / sample</th>
                <th className="num">Peak</th>
                <th>Result</th>
              </tr>
            </thead>
            <tbody>
              {plan.trials.map((t, i) => {
                const chosen = isChosenTrial(plan, t);
                return (
                  <tr key={i} className={chosen ? "chosen" : undefined}>
                    <td data-label="Precision">{t.base_precision}</td>
                    <td data-label="Checkpointing">{t.gradient_checkpointing}</td>
                    <td data-label="Offloaded" className="num">
                      {t.offload_blocks}
                    </td>
                    <td data-label="Micro-batch" className="num">
                      {t.micro_batch_size}
                    </td>
                    <td data-label="s / sample" className="num">
                      {formatNumber(t.seconds_per_sample, 3)}
                    </td>
                    <td data-label="Peak" className="num">
                      {formatGb(t.peak_memory_gb)}
                    </td>
                    <td data-label="Result">
                      {chosen ? <span className="ok">chosen</span> : t.fits ? "fits" : <span className="danger-text">does not fit</span>}
                      {t.note ? <span className="muted small"> · {t.note}</span> : null}
                    </td>
                  </tr>
                );
              })}
            </tbody>
          </table>
        </ScrollRegion>
      )}
    </div>
  );
}
