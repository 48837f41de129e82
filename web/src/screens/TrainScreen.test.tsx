import { screen, waitFor } from "@testing-library/react";
import userEvent from "@testing-library/user-event";
import { beforeEach, describe, expect, it, vi } from "vitest";
import type { Info } from "../api/types";
import { CONTROL_SETTINGS, FIELD_KINDS, inapplicableFields, takesControls } from "../lib/trainForm";
import { CATALOGUE, type Call, INFO } from "../test/fixtures";
import { input, mockTrainServer, renderTrain } from "../test/trainServer";

let info: Info = INFO;

describe("TrainScreen", () => {
  let calls: Call[];
  beforeEach(() => {
    vi.unstubAllGlobals();
    info = INFO;
    calls = mockTrainServer(() => info);
  });

  it("loads the family defaults, preselects the tiny model and switches defaults with the family", async () => {
    renderTrain();
    await waitFor(() => expect(input("learning_rate")).toHaveValue("0.0004"));
    expect(input("lora_rank")).toHaveValue("32");
    // from the catalogue: the incomplete real model is shown but disabled, so the demo one is chosen
    expect(input("base_model")).toHaveValue(CATALOGUE[0].path);
    const incomplete = screen.getByRole("option", { name: /FLUX.1-dev \(incomplete: transformer/ }) as HTMLOptionElement;
    expect(incomplete.disabled).toBe(true);
    expect(input("data_dir")).toHaveValue("shapes");
    // flux-only setting: present, inside the collapsed advanced section
    expect((input("guidance").closest("details") as HTMLDetailsElement).open).toBe(false);
    expect(document.querySelector('[name="noise_offset"]')).toBeNull();
    await userEvent.click(screen.getByRole("radio", { name: "Stable Diffusion XL" }));
    expect(input("learning_rate")).toHaveValue("0.0001");
    expect(input("lora_rank")).toHaveValue("16");
    expect(input("snr_gamma")).toHaveValue("5");
    expect(input("noise_offset")).toHaveValue(""); // off unless set
    expect(document.querySelector('[name="guidance"]')).toBeNull();
  });

  it("the family radio group is one Tab stop and follows the arrow keys", async () => {
    renderTrain();
    await waitFor(() => expect(input("lora_rank")).toHaveValue("32"));
    const flux = screen.getByRole("radio", { name: "FLUX.1" });
    expect(flux).toHaveAttribute("tabindex", "0");
    expect(screen.getByRole("radio", { name: "Stable Diffusion XL" })).toHaveAttribute("tabindex", "-1");
    flux.focus();
    await userEvent.keyboard("{ArrowLeft}");
    const sdxl = screen.getByRole("radio", { name: "Stable Diffusion XL" });
    expect(sdxl).toHaveAttribute("aria-checked", "true");
    expect(sdxl).toHaveFocus();
    expect(input("lora_rank")).toHaveValue("16");
  });

  it("Check sends the config and shows the preflight report", async () => {
    renderTrain();
    await waitFor(() => expect(input("lora_rank")).toHaveValue("32"));
    await userEvent.selectOptions(screen.getByLabelText("length unit"), "epochs");
    await userEvent.clear(input("length"));
    await userEvent.type(input("length"), "5");
    const said = screen.getByTestId("check-announcement"); // RELIABILITY 1913: a polite status there before the Check
    expect(said).toHaveAttribute("role", "status");
    expect(said).toHaveTextContent(/^$/);
    await userEvent.click(screen.getByRole("button", { name: "Check" }));
    const report = await screen.findByTestId("preflight");
    expect(said).toHaveTextContent(/^Check done: 8 of 9 images used, 40 steps, about 1.25 GB of GPU memory; the preflight report follows\.$/);
    expect(report).toHaveTextContent("bad.png");
    expect(report).toHaveTextContent("1.25 GB");
    expect(screen.getByTestId("preflight-family-note")).toHaveTextContent(
      "Tiny (step-distilled): train the base checkpoint instead",
    );
    const sent = calls.find((c) => c.url === "/api/train/preflight")?.body as { config: Record<string, unknown> };
    expect(sent.config).toMatchObject({ family: "flux", num_epochs: 5, lora_rank: 32, data_dir: "shapes" });
    expect(sent.config).not.toHaveProperty("steps");
  });

  it("shows each 400 problem next to its field", async () => {
    renderTrain();
    await waitFor(() => expect(input("lora_rank")).toHaveValue("32"));
    await userEvent.clear(input("lora_rank"));
    await userEvent.type(input("lora_rank"), "4096");
    await userEvent.click(screen.getByRole("button", { name: "Check" }));
    const rankField = input("lora_rank").closest("label") as HTMLElement;
    await waitFor(() => expect(rankField).toHaveTextContent("less than or equal to 1024"));
    expect(input("data_dir").closest("label")).toHaveTextContent("dataset has no images");
    expect(screen.queryByTestId("preflight")).toBeNull();
  });

  it("shows the form's own problems and the server's together, and starts nothing while any is left", async () => {
    renderTrain();
    await waitFor(() => expect(input("lora_rank")).toHaveValue("32"));
    await userEvent.clear(input("lora_rank"));
    await userEvent.type(input("lora_rank"), "4096"); // the server's problem
    await userEvent.clear(input("batch_size"));
    await userEvent.type(input("batch_size"), "two"); // the form's own problem
    await userEvent.click(screen.getByRole("button", { name: "Start training" }));
    const rankField = input("lora_rank").closest("label") as HTMLElement;
    await waitFor(() => expect(rankField).toHaveTextContent("less than or equal to 1024"));
    expect(input("batch_size").closest("label")).toHaveTextContent("must be a number");
    expect(input("data_dir").closest("label")).toHaveTextContent("dataset has no images");
    const asked = calls.find((c) => c.url === "/api/train/preflight")?.body as { config: Record<string, unknown> };
    expect(asked.config).not.toHaveProperty("batch_size"); // the server judges the rest
    expect(calls.some((c) => c.url === "/api/train/start")).toBe(false);
    // the server finds nothing more: the form's own problem stays, no report, no run
    await userEvent.clear(input("lora_rank"));
    await userEvent.type(input("lora_rank"), "8");
    await userEvent.click(screen.getByRole("button", { name: "Check" }));
    await waitFor(() => expect(rankField).not.toHaveTextContent("less than or equal to 1024"));
    expect(input("batch_size").closest("label")).toHaveTextContent("must be a number");
    expect(screen.queryByTestId("preflight")).toBeNull();
    expect(calls.some((c) => c.url === "/api/train/start")).toBe(false);
  });

  it("shows a checkbox's problem beside it, a nested field's next to its field, and drops none", async () => {
    renderTrain();
    await waitFor(() => expect(input("lora_rank")).toHaveValue("32"));
    await userEvent.click(screen.getByText("Advanced settings"));
    await userEvent.selectOptions(input("optimizer"), "adafactor");
    await userEvent.click(input("adafactor_warmup_init"));
    await userEvent.click(screen.getByRole("button", { name: "Check" }));
    await waitFor(() =>
      expect(input("adafactor_warmup_init").closest("label")).toHaveTextContent("needs adafactor_relative_step"),
    );
    await userEvent.click(input("adafactor_warmup_init")); // fixed
    await userEvent.selectOptions(input("optimizer"), "adamw");
    await userEvent.clear(input("sample_seed"));
    await userEvent.type(input("sample_seed"), "99");
    await userEvent.click(screen.getByRole("button", { name: "Check" }));
    const prompts = input("sample_prompts").closest("label") as HTMLElement;
    await waitFor(() => expect(prompts).toHaveTextContent("#1 width: 40: must be a positive multiple of 16 for flux"));
    expect(prompts).toHaveTextContent("flux takes no reference images"); // both problems of the field
    expect(input("optimizer_betas").closest("label")).toHaveTextContent("#2: Field required");
    expect(screen.getByTestId("form-errors")).toHaveTextContent("(config): a problem of the whole config");
    expect(screen.getByTestId("form-errors")).not.toHaveTextContent("sample_prompts");
    // the refusal of the whole config is the buttons' description (RELIABILITY 2060)
    expect(screen.getByRole("button", { name: "Check" })).toHaveAccessibleDescription(/a problem of the whole config/);
    expect(screen.getByRole("button", { name: "Start training" })).toHaveAccessibleDescription(/a problem of the whole config/);
  });

  it("has an input for every TrainConfig field (family-specific ones for the families that use them)", async () => {
    renderTrain();
    await waitFor(() => expect(input("lora_rank")).toHaveValue("32"));
    const missing = (family: (typeof INFO.families)[number]) =>
      (Object.keys(FIELD_KINDS) as (keyof typeof FIELD_KINDS)[]).filter((key) => {
        if (FIELD_KINDS[key] === "length" || key === "family") return false;
        if (family.refuses.includes(key)) return false; // the server refuses it for this family: see below
        if (CONTROL_SETTINGS.includes(key) && !takesControls(family)) return false; // edit families' (PreflightPanel.controls.test)
        if (inapplicableFields({}, INFO.config_rules).has(key)) return false; // another optimizer's / adapter's: see below
        return document.querySelector(`[name="${key}"]`) === null;
      });
    expect(missing(INFO.families[1])).toEqual([]);
    await userEvent.click(screen.getByRole("radio", { name: "Stable Diffusion XL" }));
    expect(missing(INFO.families[0])).toEqual([]);
    // the length input stands for steps / num_epochs; the radio group for the family
    expect(input("length")).not.toBeNull();
    expect(screen.getByRole("radio", { name: "Stable Diffusion XL" })).toHaveAttribute("aria-checked", "true");
  });

  it("offers no setting the server says the family refuses, and sends none", async () => {
    renderTrain();
    await waitFor(() => expect(input("lora_rank")).toHaveValue("32"));
    const offered = (keys: readonly string[]) => keys.filter((key) => document.querySelector(`[name="${key}"]`) !== null);
    for (const family of INFO.families) {
      await userEvent.click(screen.getByRole("radio", { name: family.title }));
      expect(family.refuses.length).toBeGreaterThan(0); // the server's (test/serverRules.gen.ts): each refuses some
      expect(offered(family.refuses)).toEqual([]);
      expect(offered(family.supports)).toEqual(family.supports); // and offers what it honours
      if (!(input("base_model") as HTMLInputElement).value) await userEvent.type(input("base_model"), "owner/base");
      calls.length = 0;
      await userEvent.click(screen.getByRole("button", { name: "Check" }));
      await screen.findByTestId("preflight");
      const sent = calls.find((c) => c.url === "/api/train/preflight")?.body as { config: Record<string, unknown> };
      expect(family.refuses.filter((key) => key in sent.config)).toEqual([]);
      expect(sent.config.family).toBe(family.name);
    }
  });

  it("offers the family's trained LoRAs to start from, and sends the one picked", async () => {
    renderTrain();
    await waitFor(() => expect(input("lora_rank")).toHaveValue("32"));
    await userEvent.click(screen.getByText("Advanced settings"));
    const offered = async () =>
      [...(await screen.findByTestId("init_lora-suggestions")).querySelectorAll("option")].map((o) => o.getAttribute("value"));
    expect(await offered()).toEqual(["smooth-flux"]); // FLUX.1's only
    await userEvent.type(input("init_lora"), "smooth-flux");
    await userEvent.click(screen.getByRole("button", { name: "Check" }));
    await screen.findByTestId("preflight");
    const sent = calls.find((c) => c.url === "/api/train/preflight")?.body as { config: Record<string, unknown> };
    expect(sent.config.init_lora).toBe("smooth-flux");
    await userEvent.click(screen.getByRole("radio", { name: "Stable Diffusion XL" }));
    await waitFor(async () => expect(await offered()).toEqual(["sharp-sdxl"]));
  });

  it("greys out the optimizers the host cannot run, as the server lists them", async () => {
    renderTrain();
    await waitFor(() => expect(input("lora_rank")).toHaveValue("32"));
    await userEvent.click(screen.getByText("Advanced settings"));
    const options = [...input("optimizer").querySelectorAll("option")] as HTMLOptionElement[];
    const enabled = options.filter((o) => !o.disabled).map((o) => o.value);
    expect(enabled).toEqual(INFO.host.optimizers); // a CPU host: no 8-bit (CUDA) optimizer
    expect(enabled).not.toContain("adamw8bit");
    expect(input("optimizer").closest("label")).toHaveTextContent("8-bit ones need a CUDA GPU and bitsandbytes (this host: cpu)");
  });

  it("shows seed, checkpoint interval and compile up front; compile=on only with CUDA", async () => {
    renderTrain();
    await waitFor(() => expect(input("lora_rank")).toHaveValue("32"));
    for (const key of ["seed", "save_every", "keep_last", "compile", "lora_format"]) {
      expect(input(key).closest("details")).toBeNull();
    }
    expect(input("compile")).toHaveValue("auto");
    const on = screen.getByRole("option", { name: "On" }) as HTMLOptionElement;
    expect(on.disabled).toBe(true);
    expect(input("compile").closest("label")).toHaveTextContent("On / Wide need a CUDA GPU");
  });

  it("sends the checkpoint, format and advanced settings the user set", async () => {
    renderTrain();
    await waitFor(() => expect(input("lora_rank")).toHaveValue("32"));
    await userEvent.type(input("save_every"), "100");
    await userEvent.clear(input("keep_last"));
    await userEvent.type(input("keep_last"), "4");
    await userEvent.clear(input("seed"));
    await userEvent.type(input("seed"), "7");
    await userEvent.selectOptions(input("compile"), "off");
    await userEvent.selectOptions(input("lora_format"), "kohya");
    await userEvent.click(screen.getByText("Advanced settings"));
    await userEvent.type(input("lora_targets"), "to_q, to_v");
    await userEvent.clear(input("max_grad_norm"));
    await userEvent.click(screen.getByRole("button", { name: "Check" }));
    await screen.findByTestId("preflight");
    const sent = calls.find((c) => c.url === "/api/train/preflight")?.body as { config: Record<string, unknown> };
    expect(sent.config).toMatchObject({
      save_every: 100,
      keep_last: 4,
      seed: 7,
      compile: "off",
      lora_format: "kohya",
      lora_targets: ["to_q", "to_v"],
      max_grad_norm: null,
    });
  });

  it("opens the advanced settings when the server refuses one of them", async () => {
    renderTrain();
    await waitFor(() => expect(input("lora_rank")).toHaveValue("32"));
    const details = input("cache_variants").closest("details") as HTMLDetailsElement;
    expect(details.open).toBe(false);
    // typed while collapsed is impossible for a user; set it the way the form would
    details.open = true;
    await userEvent.type(input("cache_variants"), "3");
    details.open = false;
    await userEvent.click(screen.getByRole("button", { name: "Check" }));
    await waitFor(() => expect(input("cache_variants").closest("label")).toHaveTextContent("needs random_crop"));
    expect(details.open).toBe(true);
  });
  it("shows only the chosen optimizer's and adapter's options, and sends only those", async () => {
    renderTrain();
    await waitFor(() => expect(input("lora_rank")).toHaveValue("32"));
    await userEvent.click(screen.getByText("Advanced settings"));
    const shown = (key: string) => document.querySelector(`[name="${key}"]`) !== null;
    expect(shown("optimizer_eps") && shown("optimizer_betas")).toBe(true); // AdamW's
    expect(shown("prodigy_d_coef") || shown("adafactor_relative_step") || shown("lokr_factor")).toBe(false);
    await userEvent.selectOptions(input("optimizer"), "prodigy");
    expect(INFO.config_rules.choice_settings.optimizer.prodigy.every(shown)).toBe(true);
    expect(input("learning_rate")).toHaveValue("1"); // Prodigy's LR multiplies the step size it learns
    await userEvent.type(input("prodigy_d_coef"), "2");
    await userEvent.selectOptions(input("optimizer"), "adafactor");
    expect(shown("prodigy_d_coef") || shown("optimizer_eps") || shown("optimizer_betas")).toBe(false);
    expect(input("learning_rate")).toHaveValue("0.0004"); // the family's again
    await userEvent.click(input("adafactor_relative_step"));
    expect(input("learning_rate")).toBeDisabled();
    await userEvent.selectOptions(input("adapter"), "lokr");
    await userEvent.type(input("lokr_factor"), "4");
    await userEvent.type(input("rank_pattern"), "to_k=8, to_v=2");
    await userEvent.type(input("ema_decay"), "0.999");
    await userEvent.click(screen.getByRole("button", { name: "Check" }));
    await screen.findByTestId("preflight");
    const sent = calls.find((c) => c.url === "/api/train/preflight")?.body as { config: Record<string, unknown> };
    expect(sent.config).toMatchObject({
      optimizer: "adafactor",
      adafactor_relative_step: true,
      adapter: "lokr",
      lokr_factor: 4,
      rank_pattern: { to_k: 8, to_v: 2 },
      ema_decay: 0.999,
    });
    for (const key of ["prodigy_d_coef", "learning_rate", "optimizer_eps"]) expect(sent.config).not.toHaveProperty(key);
  });

  it("trains several dataset folders: the list editor sends datasets with their repeats, the preflight shows their shares", async () => {
    renderTrain();
    await waitFor(() => expect(input("data_dir")).toHaveValue("shapes"));
    await userEvent.click(screen.getByRole("button", { name: "Several folders…" }));
    expect(document.querySelector('[name="data_dir"]')).toBeNull(); // the entries name every folder
    expect(screen.getByLabelText("folder 1")).toHaveValue("shapes");
    await userEvent.selectOptions(screen.getByLabelText("folder 2"), "faces");
    await userEvent.type(screen.getByLabelText("repeats 1"), "3");
    await userEvent.type(screen.getByLabelText("loss weight 2"), "0.5");
    // each folder's own caption options (blank: the run's)
    await userEvent.selectOptions(screen.getByLabelText("shuffle tags 2"), "on");
    await userEvent.type(screen.getByLabelText("keep tokens 2"), "1");
    await userEvent.type(screen.getByLabelText("tag dropout 2"), "0.2");
    await userEvent.type(screen.getByLabelText("default caption 2"), "a face");
    await userEvent.click(screen.getByRole("button", { name: "Check" }));
    const table = await screen.findByTestId("preflight-entries");
    expect(table).toHaveTextContent("shapes4× 31275.0 %");
    expect(table).toHaveTextContent("faces4× 1425.0 %0.5");
    const sent = calls.find((c) => c.url === "/api/train/preflight")?.body as { config: Record<string, unknown> };
    expect(sent.config.datasets).toEqual([
      { path: "shapes", repeats: 3 },
      { path: "faces", loss_weight: 0.5, shuffle_tags: true, keep_tokens: 1, tag_dropout: 0.2, default_caption: "a face" },
    ]);
    expect(sent.config).not.toHaveProperty("data_dir");
    await userEvent.click(screen.getByRole("button", { name: "remove folder 2" }));
    await userEvent.click(screen.getByRole("button", { name: "remove folder 1" }));
    expect(input("data_dir")).toHaveValue("shapes"); // no entries: back to the one folder
  });

  it("marks a folder as regularisation images, sets the prior loss weight and output preservation, and shows them in the preflight", async () => {
    renderTrain();
    await waitFor(() => expect(input("data_dir")).toHaveValue("shapes"));
    await userEvent.click(screen.getByRole("button", { name: "Several folders…" }));
    await userEvent.selectOptions(screen.getByLabelText("folder 2"), "faces");
    expect(screen.queryByLabelText("prior prediction 2")).toBeNull(); // offered for reg folders only
    await userEvent.click(screen.getByLabelText("regularisation 2"));
    await userEvent.click(screen.getByLabelText("prior prediction 2"));
    await userEvent.clear(input("prior_loss_weight")); // the default, 1
    await userEvent.type(input("prior_loss_weight"), "0.5");
    await userEvent.type(input("trigger_word"), "sks");
    await userEvent.click(screen.getByText("Advanced settings"));
    await userEvent.type(screen.getByLabelText("preservation class word"), "person");
    await userEvent.type(screen.getByLabelText("preservation weight"), "2");
    await userEvent.click(screen.getByRole("button", { name: "Check" }));
    expect(await screen.findByTestId("preflight-entries")).toHaveTextContent("faces (regularisation)");
    expect(screen.getByTestId("preflight-preservation")).toHaveTextContent(
      "Output preservation: the base model's output on the captions with the trigger word replaced by 'person', weight 2: one extra no-grad forward",
    );
    const sent = calls.find((c) => c.url === "/api/train/preflight")?.body as { config: Record<string, unknown> };
    expect(sent.config).toMatchObject({
      datasets: [{ path: "shapes" }, { path: "faces", regularisation: true, prior_prediction: true }],
      prior_loss_weight: 0.5,
      preservation: { class_word: "person", weight: 2 },
    });
  });

  it("offers text-encoder training for SDXL only", async () => {
    renderTrain();
    await waitFor(() => expect(input("lora_rank")).toHaveValue("32"));
    await userEvent.click(screen.getByText("Advanced settings"));
    expect(document.querySelector('[name="train_text_encoder"]')).toBeNull(); // FLUX.1: not offered
    await userEvent.click(screen.getByRole("radio", { name: "Stable Diffusion XL" }));
    await userEvent.click(input("train_text_encoder"));
    expect(input("train_text_encoder")).toBeChecked();
    expect(input("text_encoder_lr")).toHaveValue("");
  });

  it("shows the Huber threshold and schedule only for a Huber loss, and sends them", async () => {
    renderTrain();
    await waitFor(() => expect(input("lora_rank")).toHaveValue("32"));
    await userEvent.click(screen.getByText("Advanced settings"));
    const shown = (key: string) => document.querySelector(`[name="${key}"]`) !== null;
    expect(input("loss")).toHaveValue("mse");
    expect(shown("huber_c") || shown("huber_schedule")).toBe(false);
    await userEvent.selectOptions(input("loss"), "huber");
    await userEvent.type(input("huber_c"), "0.05");
    await userEvent.selectOptions(input("huber_schedule"), "snr");
    await userEvent.click(screen.getByRole("button", { name: "Check" }));
    await screen.findByTestId("preflight");
    const sent = calls.find((c) => c.url === "/api/train/preflight")?.body as { config: Record<string, unknown> };
    expect(sent.config).toMatchObject({ loss: "huber", huber_c: 0.05, huber_schedule: "snr" });
  });
});
