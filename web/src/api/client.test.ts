import { afterEach, describe, expect, it, vi } from "vitest";
import { ApiError, get } from "./client";

describe("request", () => {
  afterEach(() => vi.unstubAllGlobals());

  it("says in words that the server did not answer, instead of the browser's 'Failed to fetch'", async () => {
    vi.stubGlobal("fetch", vi.fn(async () => Promise.reject(new TypeError("Failed to fetch"))));
    const err = await get("/api/runs").catch((e: unknown) => e);
    expect(err).toBeInstanceOf(ApiError);
    expect((err as ApiError).status).toBe(0);
    expect((err as ApiError).message).toMatch(/^no answer from the server \(is `lorastudio serve` running/);
    expect((err as ApiError).message).toContain("Failed to fetch");
  });
});
