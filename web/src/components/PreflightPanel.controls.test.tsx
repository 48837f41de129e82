import { screen, waitFor } from "@testing-library/react";
import userEvent from "@testing-library/user-event";
import { beforeEach, describe, expect, it, vi } from "vitest";
import { type Call, INFO, KONTEXT } from "../test/fixtures";
import { input, mockTrainServer, renderTrain } from "../test/trainServer";
import { controlSizes } from "./PreflightPanel";

describe("the preflight's control sizes (control_resolution)", () => {
  let calls: Call[];
  beforeEach(() => {
    vi.unstubAllGlobals();
    calls = mockTrainServer(() => ({ ...INFO, families: [...INFO.families, KONTEXT] }));
  });

  it("sends a rule or a side and shows how the controls are sized", async () => {
    renderTrain();
    await waitFor(() => expect(input("lora_rank")).toHaveValue("32"));
    // a text-to-image family takes no control images: no control setting is offered (the server refuses them)
    expect(document.querySelector('[name="control_resolution"]')).toBeNull();
    expect(document.querySelector('[name="control_dirs"]')).toBeNull();
    await userEvent.click(screen.getByRole("radio", { name: "FLUX.1 Kontext" }));
    await userEvent.type(input("base_model"), "owner/kontext");
    expect(input("control_dirs")).not.toBeNull();
    expect(input("control_resolution")).toHaveValue("pipeline"); // the server's default
    await userEvent.clear(input("control_resolution"));
    await userEvent.type(input("control_resolution"), "target");
    await userEvent.click(screen.getByRole("button", { name: "Check" }));
    expect(await screen.findByTestId("preflight-control-sizes")).toHaveTextContent(
      "controls: 1024x768 -> 512x512 (target bucket) x 8",
    );
    await userEvent.clear(input("control_resolution"));
    await userEvent.type(input("control_resolution"), "768");
    await userEvent.click(screen.getByRole("button", { name: "Check" }));
    await waitFor(() =>
      expect(screen.getByTestId("preflight-control-sizes")).toHaveTextContent("1024x768 -> 896x672 (768x768 area) x 8"),
    );
    const sent = calls.filter((c) => c.url === "/api/train/preflight").map((c) => (c.body as { config: Record<string, unknown> }).config);
    expect(sent.map((c) => c.control_resolution)).toEqual(["target", 768]);
  });

  it("reads only string lines of a report", () => {
    expect(controlSizes(null)).toEqual([]);
    expect(controlSizes({ pairs: 2 })).toEqual([]);
    expect(controlSizes({ sizes: ["64x64 -> 64x64 (pipeline ~1 MP)", 3] })).toEqual(["64x64 -> 64x64 (pipeline ~1 MP)"]);
  });
});
