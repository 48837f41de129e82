import { describe, expect, it } from "vitest";
import { ApiError } from "../api/client";
import { generationStatus, mockFetch } from "../test/fixtures";
import { generateWithRetry } from "./generateRequest";
import { followGeneration, GenerationGone } from "./generationPoll";

const BODY = { family: "flux", base_model: "/m", prompt: "p", request_id: "gen-first" };
const IMAGE = { file: "n.png", url: "/gallery/n.png", path: "/g/n.png", seconds: 1, seed: 0, width: 32, height: 32, prompt: "p", loras: [] };

describe("generateWithRetry", () => {
  it("sends each retry of a refused POST under a new request id (RELIABILITY 1051)", async () => {
    // the server retires the id of a request it refused (a cancel meant for it must never stop
    // another): the same id sent again was refused for 10 minutes, so the retries never ran
    let posts = 0;
    const calls = mockFetch(({ method, url }) => {
      if (method !== "POST" || url !== "/api/generations") return undefined;
      posts += 1;
      return posts === 1
        ? { status: 409, body: { error: "JobActive", detail: "training job j1 is using the GPU; generation is available when it ends" } }
        : { status: 201, body: IMAGE };
    });
    const ids: string[] = [];
    let waited = 0;
    const image = await generateWithRetry(BODY, false, () => (waited += 1), () => false, (id) => ids.push(id));
    expect(image.file).toBe("n.png");
    const sent = calls.filter((c) => c.url === "/api/generations").map((c) => (c.body as { request_id: string }).request_id);
    expect(sent).toHaveLength(2);
    expect(sent[0]).toBe("gen-first");
    expect(sent[1]).not.toBe("gen-first");
    expect(ids).toEqual(sent); // the flight's id (Cancel, the tab's storage) follows each one
    expect(waited).toBe(1);
  });
});

describe("followGeneration", () => {
  it("polls through a dropped answer to the image, telling each state", async () => {
    let polls = 0;
    mockFetch(({ url }) => {
      if (url !== "/api/generations/g-1") return undefined;
      polls += 1;
      if (polls === 1) return { status: 502, body: "<html>Bad Gateway</html>" }; // a proxy's blip
      if (polls === 2) return { body: generationStatus("g-1", "generating", { step: 1, steps: 2 }) };
      return { body: generationStatus("g-1", "done", { step: 2, steps: 2, image: IMAGE }) };
    });
    const seen: string[] = [];
    const image = await followGeneration("g-1", generationStatus("g-1", "queued") as never, (s) => seen.push(`${s.state} ${s.step}/${s.steps}`));
    expect(image.url).toBe("/gallery/n.png");
    expect(seen).toEqual(["queued 0/0", "generating 1/2", "done 2/2"]);
  });

  it("rejects with the generation's own error, or GenerationGone when the server forgot it", async () => {
    const error = { error: "ConfigError", detail: "1 problem", status: 400, problems: [{ field: "loras.0", message: "changed" }] };
    mockFetch(({ url }) => (url === "/api/generations/g-2" ? { body: generationStatus("g-2", "failed", { error }) } : undefined));
    const failed = await followGeneration("g-2", null).catch((e: unknown) => e);
    expect(failed).toBeInstanceOf(ApiError);
    expect((failed as ApiError).status).toBe(400);
    expect((failed as ApiError).problems).toEqual([{ field: "loras.0", message: "changed" }]);
    await expect(followGeneration("g-3", null)).rejects.toBeInstanceOf(GenerationGone);
  });

  it("rejects with the server's word when a restart interrupted it, found again after a reload (RELIABILITY 1095)", async () => {
    const error = { error: "ServerStopping", detail: "the server stopped before generation 'g-4' ended", status: 503 };
    mockFetch(({ url }) => (url === "/api/generations/g-4" ? { body: generationStatus("g-4", "interrupted", { step: 3, steps: 20, error }) } : undefined));
    const stopped = await followGeneration("g-4", null).catch((e: unknown) => e);
    expect(stopped).toBeInstanceOf(ApiError);
    expect(stopped).not.toBeInstanceOf(GenerationGone);
    expect((stopped as ApiError).status).toBe(503);
    expect((stopped as ApiError).message).toContain("the server stopped before generation 'g-4' ended");
  }, 3000);
});
