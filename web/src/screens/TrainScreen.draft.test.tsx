import { screen, waitFor } from "@testing-library/react";
import userEvent from "@testing-library/user-event";
import { beforeEach, describe, expect, it, vi } from "vitest";
import { INFO } from "../test/fixtures";
import { input, mockTrainServer, renderTrain } from "../test/trainServer";

/** The fake server, also starting a run (201). */
function server() {
  const calls = mockTrainServer(() => INFO);
  const inner = globalThis.fetch;
  vi.stubGlobal(
    "fetch",
    vi.fn(async (url: string, init?: RequestInit) => {
      if (url === "/api/train/start" && init?.method === "POST") {
        calls.push({ method: "POST", url, body: JSON.parse(init.body as string), headers: {} });
        return new Response(JSON.stringify({ id: "r1", status: "queued" }), { status: 201, headers: { "Content-Type": "application/json" } });
      }
      return inner(url, init);
    }),
  );
  return calls;
}

async function fill(name: string, value: string) {
  await userEvent.clear(input(name));
  await userEvent.type(input(name), value);
}

describe("TrainScreen: what the user typed survives leaving the screen", () => {
  beforeEach(() => vi.unstubAllGlobals());

  it("keeps the form as it was left (another screen, Back, a reload), until a run starts from it", async () => {
    const calls = server();
    const first = renderTrain();
    await waitFor(() => expect(input("resolution")).toHaveValue("512"));
    await fill("resolution", "32");
    await fill("output_name", "my-lora");
    await fill("lora_rank", "8");
    await userEvent.selectOptions(input("data_dir"), "faces");
    first.unmount(); // the user opened another screen of the app

    const back = renderTrain();
    await waitFor(() => expect(input("resolution")).toHaveValue("32"));
    expect(input("output_name")).toHaveValue("my-lora");
    expect(input("lora_rank")).toHaveValue("8");
    expect(input("data_dir")).toHaveValue("faces");
    back.unmount();

    // Train from a dataset's page: that dataset, the rest as typed
    const fromDataset = renderTrain({ dataset: "shapes" });
    await waitFor(() => expect(input("resolution")).toHaveValue("32"));
    expect(input("data_dir")).toHaveValue("shapes");
    await userEvent.click(screen.getByRole("button", { name: "Start training" }));
    await waitFor(() => expect(calls.some((c) => c.url === "/api/train/start")).toBe(true));
    const sent = calls.find((c) => c.url === "/api/train/start")?.body as { config: Record<string, unknown> };
    expect(sent.config).toMatchObject({ resolution: 32, output_name: "my-lora", lora_rank: 8, data_dir: "shapes" });
    fromDataset.unmount();

    // started: the next visit is a fresh form (the run's page repeats its settings with Clone)
    renderTrain();
    await waitFor(() => expect(input("resolution")).toHaveValue("512"));
    expect(input("output_name")).toHaveValue("");
  });

  it("Train on it from a dataset's page wins over a kept several-folders list", async () => {
    const calls = server();
    const first = renderTrain();
    await waitFor(() => expect(input("data_dir")).toHaveValue("shapes"));
    await fill("resolution", "32");
    await userEvent.click(screen.getByRole("button", { name: "Several folders…" }));
    await userEvent.selectOptions(screen.getByLabelText("folder 1"), "faces");
    await userEvent.selectOptions(screen.getByLabelText("folder 2"), "shapes");
    first.unmount(); // the user opened the dataset "faces" and pressed "Train on it"

    renderTrain({ dataset: "faces" });
    await waitFor(() => expect(input("resolution")).toHaveValue("32")); // the rest as typed
    expect(input("data_dir")).toHaveValue("faces"); // the one dataset shown, the list gone
    expect(screen.queryByLabelText("folder 2")).toBeNull();
    expect(screen.getByRole("button", { name: "Several folders…" })).toBeInTheDocument();
    await userEvent.click(screen.getByRole("button", { name: "Start training" }));
    await waitFor(() => expect(calls.some((c) => c.url === "/api/train/start")).toBe(true));
    const sent = calls.find((c) => c.url === "/api/train/start")?.body as { config: Record<string, unknown> };
    expect(sent.config).toMatchObject({ resolution: 32, data_dir: "faces" });
    expect(sent.config).not.toHaveProperty("datasets"); // nothing hidden is sent
  });

  it("a draft of a family the server no longer has, or unreadable, is a fresh form", async () => {
    server();
    window.sessionStorage.setItem("lorastudio.draft.train", JSON.stringify({ family: "gone", resolution: "32" }));
    const one = renderTrain();
    await waitFor(() => expect(input("resolution")).toHaveValue("512"));
    one.unmount();
    window.sessionStorage.setItem("lorastudio.draft.train", "{not json");
    renderTrain();
    await waitFor(() => expect(input("resolution")).toHaveValue("512"));
  });

  it("a form never edited is not kept; a draft's blank model and dataset follow what is there now", async () => {
    server();
    const fresh = renderTrain();
    await waitFor(() => expect(input("resolution")).toHaveValue("512"));
    const model = input("base_model").value;
    const data = input("data_dir").value;
    expect(model).not.toBe("");
    fresh.unmount();
    expect(window.sessionStorage.getItem("lorastudio.draft.train")).toBeNull();
    // a draft made before any model or dataset was there (a model fetched, a dataset made since)
    window.sessionStorage.setItem(
      "lorastudio.draft.train",
      JSON.stringify({ family: "flux", unit: "steps", length: "77", base_model: "", data_dir: "" }),
    );
    renderTrain();
    await waitFor(() => expect(input("length")).toHaveValue("77"));
    expect(input("base_model")).toHaveValue(model);
    expect(input("data_dir")).toHaveValue(data);
  });
});
