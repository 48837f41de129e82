import { screen, waitFor } from "@testing-library/react";
import userEvent from "@testing-library/user-event";
import { beforeEach, describe, expect, it, vi } from "vitest";
import type { Call } from "../test/fixtures";
import { INFO } from "../test/fixtures";
import { input, mockTrainServer, renderTrain } from "../test/trainServer";

/** POST /api/config/import's answer for a kohya config (the shape of api/schemas_config_import.py). */
const IMPORTED = {
  trainer: "kohya",
  config: { family: "sdxl", base_model: "/models/sdxl-other", lora_rank: 8, learning_rate: 0.0003, steps: 1234, output_name: "from-kohya" },
  report: [
    { peer: "network_dim", outcome: "carried", ours: "lora_rank", value: 8, note: "" },
    { peer: "fp8_base", outcome: "changed", ours: "base_precision", value: "int8", note: "the frozen base in 8 bits" },
    { peer: "dataset_config", outcome: "not carried", ours: null, value: null, note: "not supported here by the web import, which reads the one file" },
  ],
  toml: 'family = "sdxl"\n',
};

/** The Train fake server, answering the import route with `answer` (status 200 or a refusal). */
function serve(answer: { status?: number; body: unknown }): Call[] {
  const calls = mockTrainServer(() => INFO);
  const inner = globalThis.fetch;
  vi.stubGlobal("fetch", (url: string, init?: RequestInit) => {
    if (url === "/api/config/import") {
      calls.push({ method: init?.method ?? "GET", url, body: JSON.parse(String(init?.body)), headers: {} });
      return Promise.resolve(new Response(JSON.stringify(answer.body), { status: answer.status ?? 200, headers: { "Content-Type": "application/json" } }));
    }
    return inner(url, init);
  });
  return calls;
}

const file = (name: string, text: string) => new File([text], name, { type: "text/plain" });

describe("TrainScreen: import another trainer's config", () => {
  beforeEach(() => vi.unstubAllGlobals());

  it("sends the file's text, fills the form with its settings and shows the report", async () => {
    const calls = serve({ body: IMPORTED });
    renderTrain();
    await waitFor(() => expect(input("lora_rank")).toBeTruthy());
    const dataset = input("data_dir").value;
    await userEvent.upload(input("import_config"), file("flux_lora.toml", "network_dim = 8\n"));
    await waitFor(() => expect(input("lora_rank")).toHaveValue("8"));
    expect(calls.find((c) => c.url === "/api/config/import")?.body).toEqual({ name: "flux_lora.toml", text: "network_dim = 8\n" });
    expect(input("learning_rate")).toHaveValue("0.0003");
    expect(input("length")).toHaveValue("1234");
    expect(input("output_name")).toHaveValue("from-kohya");
    expect(input("data_dir")).toHaveValue(dataset); // no folder brought: the chosen dataset stays
    const note = screen.getByTestId("import-note");
    expect(note).toHaveTextContent("Settings of flux_lora.toml (kohya): 1 carried, 1 changed in meaning, 1 not carried.");
    expect(note).toHaveTextContent("choose the dataset");
    expect(note).toHaveTextContent("dataset_config: not carried: not supported here by the web import");
  });

  it("shows a refusal with its file and key, the form unchanged", async () => {
    serve({ status: 400, body: { error: "ConfigError", detail: [{ field: "config", message: "bomb.yaml: its YAML holds over 100000 values" }] } });
    renderTrain();
    await waitFor(() => expect(input("lora_rank")).toBeTruthy());
    const rank = input("lora_rank").value;
    await userEvent.upload(input("import_config"), file("bomb.yaml", "a: &a [1]"));
    expect(await screen.findByTestId("import-error")).toHaveTextContent("bomb.yaml: its YAML holds over 100000 values");
    expect(input("lora_rank")).toHaveValue(rank);
    expect(screen.queryByTestId("import-note")).toBeNull();
  });

  it("refuses a file that is not UTF-8 before sending it", async () => {
    const calls = serve({ body: IMPORTED });
    renderTrain();
    await waitFor(() => expect(input("lora_rank")).toBeTruthy());
    await userEvent.upload(input("import_config"), new File([new Uint8Array([0x6e, 0x3d, 0xff, 0xfe])], "latin1.toml"));
    expect(await screen.findByTestId("import-error")).toHaveTextContent("latin1.toml is not UTF-8 text");
    expect(calls.some((c) => c.url === "/api/config/import")).toBe(false);
  });
});
