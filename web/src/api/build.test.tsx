/**
 * A tab left open across an upgrade (RELIABILITY 2061): its "Train again" filled the form from the
 * run's config, skipping the keys its bundle did not know, and started the copy without them.
 * Now the server's answers name its build; a page of another build says "reload" and starts nothing.
 */
import { screen, waitFor } from "@testing-library/react";
import userEvent from "@testing-library/user-event";
import { beforeEach, describe, expect, it, vi } from "vitest";
import { CONFIG_DEFAULTS } from "./trainConfig.gen";
import { UpdatedBanner } from "../components/UpdatedBanner";
import { TrainScreen } from "../screens/TrainScreen";
import { type Call, INFO } from "../test/fixtures";
import { renderWithProviders } from "../test/render";
import { input, mockTrainServer } from "../test/trainServer";
import { BUILD_HEADER, isStale, setPageBuildForTests, STALE_MESSAGE } from "./build";

const sdxl = INFO.families[0];
const RUN = {
  id: "r9",
  output_name: "portrait",
  family: "sdxl",
  config: { ...CONFIG_DEFAULTS, ...(sdxl.defaults as object), family: "sdxl", base_model: "/models/sdxl", data_dir: "shapes", output_name: "portrait", lora_rank: 4, steps: 300 },
};
const json = (body: unknown, status: number, build: string) =>
  new Response(JSON.stringify(body), { status, headers: { "Content-Type": "application/json", [BUILD_HEADER]: build } });

/** The Train server (trainServer.tsx) of build `served()`: each answer names it, and a start sent
 * by a page of another build is its 409 PageOutdated (api/web_build.py), else a queued run. */
function server(served: () => string): Call[] {
  const calls = mockTrainServer(() => INFO, { r9: RUN });
  const inner = globalThis.fetch;
  vi.stubGlobal(
    "fetch",
    vi.fn(async (url: string, init?: RequestInit) => {
      if (url === "/api/train/start" && init?.method === "POST") {
        const headers = { ...(init.headers as Record<string, string>) };
        calls.push({ method: "POST", url, body: JSON.parse(init.body as string), headers });
        if (headers[BUILD_HEADER] && headers[BUILD_HEADER] !== served()) {
          return json({ error: "PageOutdated", detail: "This page is of another version ... Reload the page and send it again; nothing was started." }, 409, served());
        }
        return json({ id: "r10", status: "queued" }, 201, served());
      }
      const res = await inner(url, init);
      return json(await res.json(), res.status, served());
    }),
  );
  return calls;
}

const starts = (calls: Call[]) => calls.filter((c) => c.url === "/api/train/start");

describe("a page of another build than the server's", () => {
  beforeEach(() => {
    vi.unstubAllGlobals();
    setPageBuildForTests("b1");
  });

  it("asks for a reload and starts no run from its Train again", async () => {
    const calls = server(() => "b2"); // upgraded since this page was loaded
    const reload = vi.fn();
    renderWithProviders(
      <>
        <UpdatedBanner reload={reload} />
        <TrainScreen cloneOf="r9" />
      </>,
    );
    await waitFor(() => expect(input("lora_rank")).toHaveValue("4"));
    const banner = await screen.findByTestId("updated-banner");
    expect(banner).toHaveTextContent(STALE_MESSAGE);
    expect(screen.getByTestId("updated-announcement")).toHaveTextContent(STALE_MESSAGE); // said politely
    await userEvent.type(input("output_name"), "again");
    await userEvent.click(screen.getByRole("button", { name: "Start training" }));
    expect(await screen.findByText(/nothing was started/)).toHaveTextContent(STALE_MESSAGE);
    expect(starts(calls)).toEqual([]); // nothing sent
    await userEvent.click(screen.getByRole("button", { name: "Reload" }));
    expect(reload).toHaveBeenCalledTimes(1);
  });

  it("is refused by the server when its start is the first it hears of the update", async () => {
    let served = "b1";
    const calls = server(() => served);
    renderWithProviders(
      <>
        <UpdatedBanner />
        <TrainScreen cloneOf="r9" />
      </>,
    );
    await waitFor(() => expect(input("lora_rank")).toHaveValue("4"));
    expect(screen.queryByTestId("updated-banner")).toBeNull(); // same build: nothing said
    served = "b2"; // upgraded while the form was open, no answer since
    await userEvent.type(input("output_name"), "again");
    await userEvent.click(screen.getByRole("button", { name: "Start training" }));
    await waitFor(() => expect(starts(calls)).toHaveLength(1));
    expect(starts(calls)[0].headers[BUILD_HEADER]).toBe("b1"); // the page's build, for the server to judge
    expect(await screen.findByText(/Reload the page and send it again/)).toBeInTheDocument();
    expect(await screen.findByTestId("updated-banner")).toHaveTextContent(STALE_MESSAGE);
    expect(isStale()).toBe(true);
    served = "b1"; // rolled back to this page's build: its next answer (a Check's) says so, nothing to reload
    await userEvent.click(screen.getByRole("button", { name: "Check" }));
    await waitFor(() => expect(screen.queryByTestId("updated-banner")).toBeNull());
    await userEvent.click(screen.getByRole("button", { name: "Start training" }));
    await waitFor(() => expect(starts(calls)).toHaveLength(2));
  });

  it("is never compared without a build id of its own (the dev server, an unstamped build)", async () => {
    setPageBuildForTests(null);
    const calls = server(() => "b2");
    renderWithProviders(
      <>
        <UpdatedBanner />
        <TrainScreen cloneOf="r9" />
      </>,
    );
    await waitFor(() => expect(input("lora_rank")).toHaveValue("4"));
    await userEvent.type(input("output_name"), "again");
    await userEvent.click(screen.getByRole("button", { name: "Start training" }));
    await waitFor(() => expect(starts(calls)).toHaveLength(1));
    expect(starts(calls)[0].headers).not.toHaveProperty(BUILD_HEADER);
    expect(screen.queryByTestId("updated-banner")).toBeNull();
  });
});
