import { render, screen } from "@testing-library/react";
import { describe, expect, it, vi } from "vitest";
import { chartSummary, decimate, extent, LineChart, seriesPath } from "./LineChart";

describe("LineChart", () => {
  it("draws one path per series with a vertex per point, and a gap for null", () => {
    render(
      <LineChart
        xs={[1, 2, 3, 4]}
        series={[
          { name: "loss", color: "red", values: [0.5, 0.4, null, 0.2] },
          { name: "lr", color: "green", values: [1e-4, 1e-4, 1e-4, 1e-4], axis: "right" },
        ]}
      />,
    );
    const paths = document.querySelectorAll("path.series");
    expect(paths).toHaveLength(2);
    const loss = paths[0].getAttribute("d") ?? "";
    expect(loss.match(/M/g)).toHaveLength(2); // the null splits the line
    expect(loss.match(/[ML]/g)).toHaveLength(3);
    expect(screen.getByTestId("chart").dataset.points).toBe("4");
  });

  it("shows the empty message without points", () => {
    render(<LineChart xs={[]} series={[]} empty="nothing yet" />);
    expect(screen.getByText("nothing yet")).toBeInTheDocument();
  });

  it("decimates to at most the pixel budget, keeping both ends", () => {
    const idx = decimate(10_000, 500);
    expect(idx).toHaveLength(500);
    expect(idx[0]).toBe(0);
    expect(idx[idx.length - 1]).toBe(9_999);
    expect(decimate(3, 500)).toEqual([0, 1, 2]);
  });

  it("maps values through the scales", () => {
    expect(seriesPath([0, 10], [1, 2], [0, 1], (x) => x * 2, (y) => 100 - y)).toBe("M0.0,99.0L20.0,98.0");
  });

  it("keeps the axis of a non-negative series at or above zero", () => {
    const [lo, hi] = extent([0.01, 0.5, 1.2, null]) ?? [NaN, NaN];
    expect(lo).toBe(0); // 0.01 - 6 % of the span would be below zero
    expect(hi).toBeCloseTo(1.2 + 0.0714, 3);
    expect(extent([0, 0])).toEqual([0, 0.05]);
    expect(extent([2, 3])?.[0]).toBeCloseTo(1.94, 5); // far from zero: padded as before
    expect(extent([-1, 1])?.[0]).toBeCloseTo(-1.12, 5); // a negative series keeps its padding
    expect(extent([null, NaN])).toBeNull();
  });

  it("gives the chart a text alternative: its loss history in words, its description, kept current but not live", () => {
    const lines = (loss: (number | null | undefined)[], val: (number | null | undefined)[]) => [
      { name: "loss", color: "red", values: loss },
      { name: "avg loss", color: "orange", values: loss },
      { name: "val loss", color: "pink", values: val },
      { name: "lr", color: "green", values: loss.map(() => 1e-4), axis: "right" as const },
    ];
    const { rerender } = render(
      <LineChart xs={[1, 2, 3, 4]} series={lines([0.5, 0.25, null, 0.3], [undefined, 0.4, undefined, undefined])} />,
    );
    const svg = screen.getByRole("img", { name: "training chart" });
    const summary = screen.getByTestId("chart-summary");
    expect(svg.getAttribute("aria-describedby")).toBe(summary.id);
    expect(summary).not.toHaveAttribute("aria-live"); // a step a second would flood a screen reader (fix 794)
    expect(summary).toHaveClass("visually-hidden");
    expect(svg).toHaveAccessibleDescription(
      "loss over 3 steps (to step 4): first 0.5, lowest 0.25 at step 2, latest 0.3. " +
        "val loss: lowest 0.4 at step 2, latest 0.4 (step 2).",
    );
    rerender(<LineChart xs={[1, 2, 3, 4, 5]} series={lines([0.5, 0.25, null, 0.3, 0.125], [undefined, 0.4])} />);
    expect(summary.textContent).toBe(
      "loss over 4 steps (to step 5): first 0.5, lowest 0.125 at step 5, latest 0.125. " +
        "val loss: lowest 0.4 at step 2, latest 0.4 (step 2).",
    );
  });

  it("summarises nothing without a point", () => {
    expect(chartSummary([1, 2], [{ name: "loss", color: "red", values: [null, NaN] }])).toBeNull();
    expect(chartSummary([7], [{ name: "loss", color: "red", values: [0.5] }])).toBe(
      "loss over 1 step (to step 7): first 0.5, lowest 0.5 at step 7, latest 0.5.",
    );
  });
});

describe("LineChart's x axis (session 30 web audit, RELIABILITY 872)", () => {
  it("names each step of a short run once, where its step is", () => {
    render(<LineChart xs={[1, 2, 3]} series={[{ name: "loss", color: "red", values: [0.5, 0.4, 0.3] }]} />);
    const labels = [...document.querySelectorAll<SVGTextElement>('text.tick[text-anchor="middle"]')];
    expect(labels.map((t) => t.textContent)).toEqual(["1", "2", "3"]);
    const xs = labels.map((t) => Number(t.getAttribute("x")));
    expect(xs[1] - xs[0]).toBeCloseTo(xs[2] - xs[1]); // evenly spaced: each at its step
  });
});

describe("LineChart on a narrow page", () => {
  it("draws at its container's width from its first paint, not 640 px (RELIABILITY 1481)", () => {
    // a 300 px container (a phone's page); jsdom has no layout, so the measure is stood in for
    const measure = vi
      .spyOn(HTMLElement.prototype, "getBoundingClientRect")
      .mockReturnValue({ width: 300, height: 240, x: 0, y: 0, top: 0, left: 0, right: 300, bottom: 240 } as DOMRect);
    try {
      render(<LineChart xs={[1, 2, 3]} series={[{ name: "loss", color: "red", values: [0.5, 0.4, 0.3] }]} />);
      const svg = screen.getByRole("img", { name: "training chart" });
      expect(svg.getAttribute("width")).toBe("300");
      const rights = [...document.querySelectorAll("line.grid")].map((l) => Number(l.getAttribute("x2")));
      expect(Math.max(...rights)).toBeLessThanOrEqual(300);
    } finally {
      measure.mockRestore();
    }
  });
});
