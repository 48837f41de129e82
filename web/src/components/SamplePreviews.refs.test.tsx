import { render, screen } from "@testing-library/react";
import { describe, expect, it } from "vitest";
import { groupByStep, SampleRound, samplePrompts } from "./SamplePreviews";

describe("sample previews of an edit family", () => {
  it("reads {prompt, controls} entries and shows the references each sample used", () => {
    const config = { sample_prompts: ["plain", { prompt: "make it blue", controls: ["control/a.png"] }, { controls: [] }] };
    expect(samplePrompts(config)).toEqual(["plain", "make it blue", ""]); // a malformed entry keeps its index
    const [round] = groupByStep([
      { step: 2, index: 1, prompt: "make it blue", name: "step-000002-1.png", url: "/api/runs/r/samples/step-000002-1.png", references: ["/api/runs/r/samples/ref-1-0.png"] },
      { step: 2, index: 0, prompt: "plain", name: "step-000002-0.png", url: "/api/runs/r/samples/step-000002-0.png" },
    ]);
    render(<SampleRound runId="r" step={round.step} tiles={round.tiles} />);
    expect(screen.getByAltText("reference 1")).toHaveAttribute("src", "/api/runs/r/samples/ref-1-0.png");
    expect(screen.getAllByRole("img").map((i) => i.getAttribute("alt"))).toEqual(["plain", "make it blue", "reference 1"]);
  });
});
