import { render, screen } from "@testing-library/react";
import { describe, expect, it } from "vitest";
import { decimate, extent, LineChart, seriesPath } from "./LineChart";

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
});
