/** The Models screen under the server's refusals (RELIABILITY 284): a failed load is said until the
 * list loads (Refresh), and an action's refusal (409: the model is in use) until the next action. */
import { render, screen, waitFor, within } from "@testing-library/react";
import userEvent from "@testing-library/user-event";
import { afterEach, describe, expect, it, vi } from "vitest";
import { CATALOGUE, mockFetch } from "../test/fixtures";
import { ModelsScreen } from "./ModelsScreen";

afterEach(() => vi.unstubAllGlobals());

describe("ModelsScreen refusals", () => {
  it("a load refused while the server stopped is said, and goes once Refresh loads the list", async () => {
    let up = false;
    mockFetch(({ url, method }) => {
      if (url === "/api/models/fetch" && method === "GET") return { body: { fetches: [], offline: false } };
      if (url === "/api/models" && method === "GET") {
        return up ? { body: CATALOGUE } : { status: 503, body: { error: "ServerStopping", detail: "the server is stopping" } };
      }
      return undefined;
    });
    render(<ModelsScreen />);
    expect(await screen.findByRole("alert")).toHaveTextContent("Cannot load the models: the server is stopping");
    up = true;
    await userEvent.click(screen.getByRole("button", { name: "Refresh" }));
    await screen.findByTestId("models-table");
    expect(screen.queryByRole("alert")).toBeNull();
  });

  it("a delete refused (409: in use) is said, and goes when the next delete succeeds", async () => {
    let inUse = true;
    mockFetch(({ url, method }) => {
      if (url === "/api/models/fetch" && method === "GET") return { body: { fetches: [], offline: false } };
      if (url === "/api/models" && method === "GET") return { body: CATALOGUE };
      if (method === "DELETE") {
        return inUse ? { status: 409, body: { error: "JobActive", detail: "tiny-flux is in use by run r1: stop it first" } } : { body: {} };
      }
      return undefined;
    });
    vi.spyOn(window, "confirm").mockReturnValue(true);
    render(<ModelsScreen />);
    const table = await screen.findByTestId("models-table");
    await userEvent.click(within(table).getByRole("button", { name: "Delete tiny-flux" }));
    expect(await screen.findByRole("alert")).toHaveTextContent("tiny-flux is in use by run r1: stop it first");
    inUse = false;
    await userEvent.click(within(table).getByRole("button", { name: "Delete tiny-flux" }));
    await waitFor(() => expect(screen.queryByRole("alert")).toBeNull());
  });
});
