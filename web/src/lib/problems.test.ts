import { describe, expect, it } from "vitest";
import { placeProblems } from "./problems";

const shown = (f: string) => ["sample_prompts", "datasets", "optimizer_betas", "lora_rank", "report_to"].includes(f);

describe("placing the server's problems", () => {
  it("puts each problem next to the field it names, nested ones next to their top-level field", () => {
    const placed = placeProblems(
      [
        { field: "config.lora_rank", message: "must be at most 1024" },
        { field: "sample_prompts.0.width", message: "40: must be a positive multiple of 16 for flux" },
        { field: "datasets.1.resolution", message: "must be a multiple of 16 for flux" },
        { field: "optimizer_betas.1", message: "Field required" },
        { field: "report_to.0", message: "Input should be 'tensorboard' or 'wandb'" },
      ],
      shown,
    );
    expect(placed.fields).toEqual({
      lora_rank: "must be at most 1024",
      sample_prompts: "#1 width: 40: must be a positive multiple of 16 for flux",
      datasets: "#2 resolution: must be a multiple of 16 for flux",
      optimizer_betas: "#2: Field required",
      report_to: "#1: Input should be 'tensorboard' or 'wandb'",
    });
    expect(placed.general).toEqual([]);
  });

  it("keeps every problem of one field, and lists those no input can show", () => {
    const placed = placeProblems(
      [
        { field: "sample_prompts", message: "sample prompt 0: control image a.png not found in shapes/" },
        { field: "sample_prompts", message: "sample prompt 0: flux takes no reference images" },
        { field: "ema_update_every", message: "needs ema_decay" },
        { field: "", message: "the studio is busy" },
      ],
      shown,
    );
    expect(placed.fields).toEqual({
      sample_prompts: "sample prompt 0: control image a.png not found in shapes/; sample prompt 0: flux takes no reference images",
    });
    expect(placed.general).toEqual(["ema_update_every: needs ema_decay", "the studio is busy"]);
  });
});
