import { describe, expect, it } from "vitest";
import { INFO } from "../test/fixtures";
import { guidanceBody } from "./GuidanceFields";

const SDXL = INFO.families[0];
const QWEN = { ...SDXL, name: "qwen-image", title: "Qwen-Image", guidance: "true_cfg" as const, guidance_default: 4 };

describe("guidanceBody", () => {
  it("sends a space as Qwen-Image's negative prompt, which its true CFG needs, and none for the others", () => {
    // the server refuses a true-CFG scale without a negative prompt and names " " as the way to guide
    expect(guidanceBody(QWEN, "7", " ")).toEqual({ guidance: 7, negative_prompt: " " });
    expect(guidanceBody(QWEN, "", "")).toEqual({ guidance: null, negative_prompt: null });
    expect(guidanceBody(SDXL, "7", " ")).toEqual({ guidance: 7, negative_prompt: null });
    expect(guidanceBody(SDXL, "7", "blurry")).toEqual({ guidance: 7, negative_prompt: "blurry" });
    expect(guidanceBody(INFO.families[1], "3", "blurry")).toEqual({ guidance: 3, negative_prompt: null });
  });
});
