import { samplePromptEntries } from "./samplePrompts";
import { describe, expect, it } from "vitest";
import { CONFIG_DEFAULTS } from "../api/trainConfig.gen";
import { INFO, KONTEXT } from "../test/fixtures";
import { SERVER_RULES } from "../test/serverRules.gen";
import {
  hostForGpus,
  attentionAvailable,
  attentionHint,
  budgetHint,
  buildConfig,
  compileAvailable,
  gpuInput,
  inapplicableFields,
  initialValues,
  numberList,
  numberMapping,
  precisionChoices,
  valuesFromConfig,
  withSetting,
} from "./trainForm";

const flux = INFO.families[1];
const sdxl = INFO.families[0];

describe("train form", () => {
  it("starts from the family's defaults over the config's", () => {
    const v = initialValues(flux);
    expect(v.learning_rate).toBe("0.0004");
    expect(v.lora_rank).toBe("32");
    expect(v.batch_size).toBe("1");
    expect(v.aspect_buckets).toBe(true);
  });

  it("sends the validation split as a fraction or a folder name, and validate_every / validation_seed as numbers", () => {
    const v = { ...initialValues(flux), base_model: "m", data_dir: "shapes", validate_every: "50", validation_seed: "7" };
    expect(buildConfig({ ...v, validation_split: "0.1" }, flux, INFO.config_rules).config).toMatchObject({ validation_split: 0.1, validate_every: 50, validation_seed: 7 });
    expect(buildConfig({ ...v, validation_split: " held-out " }, flux, INFO.config_rules).config.validation_split).toBe("held-out");
    expect(buildConfig({ ...v, validation_split: "" }, flux, INFO.config_rules).config).not.toHaveProperty("validation_split");
  });

  it("builds a config: numbers parsed, steps vs epochs, unsupported family fields left out", () => {
    const v = { ...initialValues(sdxl), base_model: "m", data_dir: "shapes", guidance: "3" };
    const steps = buildConfig({ ...v, unit: "steps", length: "250" }, sdxl, INFO.config_rules);
    expect(steps.problems).toEqual({});
    expect(steps.config).toMatchObject({ family: "sdxl", steps: 250, num_epochs: 0, lora_rank: 16, snr_gamma: 5 });
    expect(steps.config).not.toHaveProperty("guidance");
    const epochs = buildConfig({ ...v, unit: "epochs", length: "3" }, sdxl, INFO.config_rules);
    expect(epochs.config.num_epochs).toBe(3);
    expect(epochs.config).not.toHaveProperty("steps");
  });

  it("a single-file base: base_config as text, v_prediction unset / true / false (SDXL only)", () => {
    const v = { ...initialValues(sdxl), base_model: "/m/pony.safetensors", data_dir: "d", base_config: " /m/sdxl " };
    const unset = buildConfig(v, sdxl, INFO.config_rules);
    expect(unset.config).toMatchObject({ base_model: "/m/pony.safetensors", base_config: "/m/sdxl" });
    expect(unset.config).not.toHaveProperty("v_prediction");
    expect(buildConfig({ ...v, v_prediction: "true" }, sdxl, INFO.config_rules).config.v_prediction).toBe(true);
    expect(buildConfig({ ...v, v_prediction: "false" }, sdxl, INFO.config_rules).config.v_prediction).toBe(false);
    expect(buildConfig({ ...v, family: "flux", v_prediction: "true" }, flux, INFO.config_rules).config).not.toHaveProperty("v_prediction");
  });

  it("reports bad numbers and missing required fields before asking the server", () => {
    const v = { ...initialValues(flux), base_model: "", data_dir: "d", lora_rank: "1.5", learning_rate: "fast" };
    const { problems } = buildConfig({ ...v, length: "0" }, flux, INFO.config_rules);
    expect(problems).toMatchObject({
      base_model: "pick a base model, or type a hub id (owner/name) or a model folder",
      lora_rank: "must be a whole number",
      learning_rate: "must be a number",
      steps: expect.stringMatching(/at least 1/),
    });
  });

  it("sends sample prompts one per non-blank line, with their step settings", () => {
    const v = { ...initialValues(flux), base_model: "m", data_dir: "d" };
    const none = buildConfig({ ...v, sample_prompts: " \n\n" }, flux, INFO.config_rules);
    expect(none.config).not.toHaveProperty("sample_prompts");
    const built = buildConfig(
      { ...v, sample_prompts: "  a red circle \n\na blue square\n", sample_every: "50", sample_steps: "2.5" },
      flux,
      INFO.config_rules,
    );
    expect(built.config.sample_prompts).toEqual(["a red circle", "a blue square"]);
    expect(built.config.sample_every).toBe(50);
    expect(built.problems).toEqual({ sample_steps: "must be a whole number" });
  });
});

describe("train form: checkpoints, speed and every other setting", () => {
  const base = () => ({ ...initialValues(flux), base_model: "m", data_dir: "d" });

  it("starts every setting from the config's generated defaults (blank where the default is null)", () => {
    const v = initialValues(flux);
    for (const key of ["keep_last", "max_bad_steps", "latent_cache_max_gb", "sample_seed", "seed"] as const) {
      expect(v[key]).toBe(String(CONFIG_DEFAULTS[key]));
    }
    expect(v.compile).toBe(CONFIG_DEFAULTS.compile);
    expect(v.attention_backend).toBe("auto");
    expect(v.lora_format).toBe(CONFIG_DEFAULTS.lora_format);
    expect(v.enable_tf32).toBe(CONFIG_DEFAULTS.enable_tf32);
    expect(v.save_every).toBeUndefined();
    expect(v.cache_variants).toBeUndefined();
  });

  it("sends the checkpoint, format, compile and data settings with their types", () => {
    const built = buildConfig(
      {
        ...base(),
        save_every: "50",
        keep_last: "3",
        max_bad_steps: "9",
        lora_format: "kohya",
        compile: "off",
        seed: "7",
        lora_targets: " to_q, to_k  to_v,",
        revision: " refs/pr/1 ",
        cache_variants: "4",
        latent_cache_max_gb: "0.5",
        random_crop: true,
        enable_tf32: false,
        sample_seed: "3",
      },
      flux,
      INFO.config_rules,
    );
    expect(built.problems).toEqual({});
    expect(built.config).toMatchObject({
      save_every: 50,
      keep_last: 3,
      max_bad_steps: 9,
      lora_format: "kohya",
      compile: "off",
      seed: 7,
      lora_targets: ["to_q", "to_k", "to_v"],
      revision: "refs/pr/1",
      cache_variants: 4,
      latent_cache_max_gb: 0.5,
      random_crop: true,
      enable_tf32: false,
      sample_seed: 3,
    });
  });

  it("blank: null where null means off, left out where the server fills a default", () => {
    const v = { ...initialValues(sdxl), base_model: "m", data_dir: "d" };
    const built = buildConfig({ ...v, max_grad_norm: "", snr_gamma: " ", save_every: "", lora_targets: "", keep_last: "" }, sdxl, INFO.config_rules);
    expect(built.config.max_grad_norm).toBeNull();
    expect(built.config.snr_gamma).toBeNull();
    for (const key of ["save_every", "lora_targets", "keep_last", "flow_shift"]) expect(built.config).not.toHaveProperty(key);
    // a family that does not support snr_gamma never sends it, blank or not
    expect(buildConfig({ ...base(), snr_gamma: "" }, flux, INFO.config_rules).config).not.toHaveProperty("snr_gamma");
    // which settings those are is the server's (config_rules.null_means_off): FLUX.1's flow_shift too
    expect(INFO.config_rules.null_means_off).toContain("flow_shift");
    expect(buildConfig({ ...base(), flow_shift: "" }, flux, INFO.config_rules).config.flow_shift).toBeNull();
    expect(buildConfig({ ...base(), flow_shift: "3" }, flux, INFO.config_rules).config.flow_shift).toBe(3);
  });

  it("refuses fractions for whole-number settings before asking the server", () => {
    const { problems } = buildConfig({ ...base(), save_every: "2.5", keep_last: "x", cache_variants: "1e400" }, flux, INFO.config_rules);
    expect(problems).toEqual({ save_every: "must be a whole number", keep_last: "must be a number", cache_variants: "must be a number" });
  });

  it("a family switch keeps the family-independent settings and resets the family's", () => {
    const mine = { ...base(), seed: "7", save_every: "25", compile: "off", attention_backend: "math", lora_format: "kohya", lora_rank: "99" };
    const next = initialValues(sdxl, mine);
    expect(next).toMatchObject({ seed: "7", save_every: "25", compile: "off", attention_backend: "math", lora_format: "kohya", base_model: "m" });
    expect(next.lora_rank).toBe(String(sdxl.defaults.lora_rank));
  });

  it("compile=on is offered only on a CUDA host", () => {
    expect(compileAvailable("on", INFO.host)).toBe(INFO.host.device === "cuda");
    expect(compileAvailable("on", { ...INFO.host, device: "cuda", ...SERVER_RULES.hosts.cuda })).toBe(true);
    expect(compileAvailable("auto", INFO.host)).toBe(true);
  });

  it("a family switch keeps compile=wide only for a family that has wide regions", () => {
    const picked = { ...initialValues(sdxl), compile: "wide" };
    expect(initialValues(sdxl, picked).compile).toBe("wide");
    expect(initialValues(flux, picked).compile).toBe("auto");
    expect(initialValues(flux, { ...picked, compile: "off" }).compile).toBe("off");
  });

  it("compile=wide is offered only for a family with wide regions (SDXL), on a CUDA host", () => {
    const cuda = { ...INFO.host, device: "cuda", ...SERVER_RULES.hosts.cuda };
    expect(sdxl.wide_compile).toBe(true);
    expect(compileAvailable("wide", cuda, sdxl)).toBe(true);
    expect(compileAvailable("wide", cuda, flux)).toBe(false);
    expect(compileAvailable("wide", { ...INFO.host, device: "cpu" }, sdxl)).toBe(false);
    expect(compileAvailable("wide", cuda)).toBe(false);
  });

  it("attention: the kernels the host lists (the server's: cuDNN and memory-efficient on CUDA, flash on CUDA or the CPU)", () => {
    const cpu = { ...INFO.host, device: "cpu", ...SERVER_RULES.hosts.cpu };
    const cuda = { ...INFO.host, device: "cuda", name: "NVIDIA H200", ...SERVER_RULES.hosts.cuda };
    const mps = { ...INFO.host, device: "mps", name: "Apple M2" };
    const offered = (host: typeof cpu) => (["auto", "cudnn", "flash", "efficient", "math"] as const).filter((b) => attentionAvailable(b, host));
    expect(offered(cuda)).toEqual(["auto", "cudnn", "flash", "efficient", "math"]);
    expect(offered(cpu)).toEqual(["auto", "flash", "math"]);
    expect(attentionHint(cpu)).toBe("auto = torch's default here; cuDNN, FlashAttention-4 and memory-efficient need a CUDA GPU (this host: cpu)");
    expect(attentionHint(mps)).toMatch(/flash a CUDA GPU or the CPU \(this host: Apple M2\)/);
    expect(attentionHint(cuda)).not.toMatch(/need/);
  });
});

describe("train form: the memory plan and GPUs", () => {
  const base = () => ({ ...initialValues(flux), base_model: "m", data_dir: "d" });

  it("starts the plan settings at auto: precision and checkpointing 'auto', the numbers blank", () => {
    const v = initialValues(flux);
    expect(v).toMatchObject({ base_precision: "auto", gradient_checkpointing: "auto", num_gpus: "1" });
    for (const key of ["offload_blocks", "micro_batch_size", "memory_budget_gb"] as const) expect(v[key]).toBeUndefined();
  });

  it("sends the plan settings with their types and refuses fractions of blocks and samples", () => {
    const built = buildConfig(
      { ...base(), base_precision: "int8", gradient_checkpointing: "full", offload_blocks: "6", micro_batch_size: "2", memory_budget_gb: "10.5", num_gpus: "2" },
      flux,
      INFO.config_rules,
    );
    expect(built.problems).toEqual({});
    expect(built.config).toMatchObject({
      base_precision: "int8",
      gradient_checkpointing: "full",
      offload_blocks: 6,
      micro_batch_size: 2,
      memory_budget_gb: 10.5,
      num_gpus: 2,
    });
    const bad = buildConfig({ ...base(), offload_blocks: "1.5", micro_batch_size: "x" }, flux, INFO.config_rules);
    expect(bad.problems).toEqual({ offload_blocks: "must be a whole number", micro_batch_size: "must be a number" });
  });

  it("a family switch keeps the plan settings (they belong to the host, not the family)", () => {
    const mine = { ...base(), base_precision: "nf4", gradient_checkpointing: "selective", memory_budget_gb: "12", offload_blocks: "3", num_gpus: "2" };
    expect(initialValues(sdxl, mine)).toMatchObject({
      base_precision: "nf4",
      gradient_checkpointing: "selective",
      memory_budget_gb: "12",
      offload_blocks: "3",
      num_gpus: "2",
    });
  });

  it("offers the host's precisions in the config's order, labelled", () => {
    expect(Object.keys(precisionChoices(["nf4", "auto", "bf16", "fp8"]))).toEqual(["auto", "bf16", "fp8", "nf4"]);
    expect(precisionChoices(["auto", "int8"]).int8).toMatch(/quantised/);
  });

  it("limits the GPUs to the host's count and explains a disabled input", () => {
    const cuda = (gpu_count: number) => ({ ...INFO.host, device: "cuda", name: "H200", memory_gb: 139.8, gpu_count });
    expect(gpuInput(INFO.host)).toMatchObject({ max: 1, disabled: true, hint: expect.stringMatching(/has none/) });
    expect(gpuInput(cuda(1))).toMatchObject({ max: 1, disabled: true, hint: "this host has 1 GPU" });
    expect(gpuInput(cuda(8))).toMatchObject({ max: 8, disabled: false });
    expect(budgetHint(cuda(1))).toMatch(/139.8 GB/);
    // blank is no budget only while the default plan fits the GPU (jobs/card_fit.py)
    expect(budgetHint(cuda(1))).toMatch(/the GPU's memory less 1 GiB where the default plan does not fit it/);
    expect(budgetHint(INFO.host)).toMatch(/needs a CUDA GPU/);
  });
  it("offers a num_gpus run what the weakest of its GPUs runs (RELIABILITY 1188)", () => {
    const strong = { precisions: ["auto", "bf16", "fp8"], optimizers: ["adamw"], compile_modes: ["auto", "on"], attention_backends: ["auto", "cudnn"] };
    const weak = { precisions: ["auto", "fp32"], optimizers: ["adamw"], compile_modes: ["auto", "on"], attention_backends: ["auto", "efficient"] };
    const box = { ...INFO.host, device: "cuda", gpu_count: 2, ...strong, run_choices: [strong, weak] };
    expect(hostForGpus(box, 1)).toBe(box);
    expect(hostForGpus(box, 2).precisions).toEqual(["auto", "fp32"]);
    expect(attentionAvailable("cudnn", hostForGpus(box, 2))).toBe(false);
    expect(attentionAvailable("cudnn", hostForGpus(box, 1))).toBe(true);
    expect(hostForGpus({ ...box, run_choices: [] }, 2)).toEqual({ ...box, run_choices: [] }); // an older server's answer
  });
  it("parses betas and per-module patterns, and reports malformed ones", () => {
    expect(numberList("0.9, 0.99")).toEqual([0.9, 0.99]);
    expect(numberList(" ")).toBeUndefined();
    expect(numberList("0.9, high")).toMatch(/numbers/);
    expect(numberMapping("to_k=8, attn.to_v = 2")).toEqual({ to_k: 8, "attn.to_v": 2 });
    expect(numberMapping("to_k")).toMatch(/module=number/);
    expect(numberMapping("to_k=8=9")).toMatch(/module=number/);
    const v = { ...initialValues(flux), base_model: "m", data_dir: "d", optimizer_betas: "0.9 0.95", alpha_pattern: "to_q=x" };
    const built = buildConfig(v, flux, INFO.config_rules);
    expect(built.config.optimizer_betas).toEqual([0.9, 0.95]);
    expect(built.problems.alpha_pattern).toMatch(/module=number/);
  });

  it("leaves out the options of an optimizer or adapter that is not chosen", () => {
    expect([...inapplicableFields({}, INFO.config_rules)].sort()).toEqual(
      ["adafactor_relative_step", "adafactor_scale_parameter", "adafactor_warmup_init", "lokr_decompose_both", "lokr_factor",
        "prodigy_d_coef", "prodigy_safeguard_warmup", "prodigy_use_bias_correction", "huber_c", "huber_schedule",
        "lr_cycles", "lr_power"].sort(),
    );
    const restarts = buildConfig({ ...initialValues(flux), base_model: "m", data_dir: "d", lr_scheduler: "cosine_with_restarts", lr_cycles: "3", lr_power: "2" }, flux, INFO.config_rules).config;
    expect(restarts).toMatchObject({ lr_scheduler: "cosine_with_restarts", lr_cycles: 3 });
    expect(restarts).not.toHaveProperty("lr_power");
    const v = { ...initialValues(flux), base_model: "m", data_dir: "d", optimizer_eps: "1e-6", prodigy_d_coef: "2", lokr_factor: "4" };
    const adamw = buildConfig(v, flux, INFO.config_rules).config;
    expect(adamw).toMatchObject({ optimizer: "adamw", optimizer_eps: 1e-6 });
    expect(adamw).not.toHaveProperty("prodigy_d_coef");
    expect(adamw).not.toHaveProperty("lokr_factor");
    const lokr = buildConfig({ ...v, optimizer: "adafactor", adapter: "lokr" }, flux, INFO.config_rules).config;
    expect(lokr).toMatchObject({ adapter: "lokr", lokr_factor: 4 });
    expect(lokr).not.toHaveProperty("optimizer_eps");
  });

  it("sends text-encoder training for SDXL, never for a family without it", () => {
    const te = { train_text_encoder: true, text_encoder_lr: "1e-5" };
    const forSdxl = buildConfig({ ...initialValues(sdxl), base_model: "m", data_dir: "d", ...te }, sdxl, INFO.config_rules).config;
    expect(forSdxl).toMatchObject({ train_text_encoder: true, text_encoder_lr: 1e-5 });
    const forFlux = buildConfig({ ...initialValues(flux), base_model: "m", data_dir: "d", ...te }, flux, INFO.config_rules).config;
    expect(forFlux).not.toHaveProperty("train_text_encoder");
    expect(forFlux).not.toHaveProperty("text_encoder_lr");
  });

  it("sends the control settings for an edit family only (the server refuses them for the others)", () => {
    const controls = { control_dirs: "shapes_control", control_resolution: "target" };
    const forFlux = buildConfig({ ...initialValues(flux), base_model: "m", data_dir: "d", ...controls }, flux, INFO.config_rules).config;
    expect(forFlux).not.toHaveProperty("control_dirs");
    expect(forFlux).not.toHaveProperty("control_resolution");
    const kontext = buildConfig({ ...initialValues(KONTEXT), base_model: "m", data_dir: "d", ...controls }, KONTEXT, INFO.config_rules).config;
    expect(kontext).toMatchObject({ control_dirs: ["shapes_control"], control_resolution: "target" });
  });

  it("sends the Huber settings only with a Huber loss", () => {
    const v = { ...initialValues(flux), base_model: "m", data_dir: "d", huber_c: "0.2", huber_schedule: "snr" };
    const mse = buildConfig(v, flux, INFO.config_rules).config;
    expect(mse.loss).toBe("mse");
    expect(mse).not.toHaveProperty("huber_c");
    expect(mse).not.toHaveProperty("huber_schedule");
    expect(buildConfig({ ...v, loss: "l1" }, flux, INFO.config_rules).config).not.toHaveProperty("huber_c");
    expect(buildConfig({ ...v, loss: "smooth_l1" }, flux, INFO.config_rules).config).toMatchObject({ loss: "smooth_l1", huber_c: 0.2, huber_schedule: "snr" });
  });

  it("gives Prodigy a learning rate of 1 and the family's back when leaving it", () => {
    const v = initialValues(flux);
    const prodigy = withSetting(v, "optimizer", "prodigy", flux);
    expect(prodigy.learning_rate).toBe("1");
    expect(withSetting(prodigy, "optimizer", "adamw", flux).learning_rate).toBe("0.0004");
    const mine = withSetting({ ...v, learning_rate: "0.5" }, "optimizer", "prodigy", flux);
    expect(mine.learning_rate).toBe("0.5"); // a rate the user chose stays
  });

  it("a cloned run's config fills the form and builds back the same settings, with a new output name", () => {
    const run = {
      ...CONFIG_DEFAULTS,
      ...(flux.defaults as object),
      family: "flux",
      base_model: "/models/flux",
      data_dir: "/data/shapes",
      output_name: "portrait",
      lora_rank: 8,
      max_grad_norm: null,
      sample_prompts: ["a cat", "a dog"],
      rank_pattern: { to_k: 4 },
      num_epochs: 3,
    };
    const v = valuesFromConfig(flux, run);
    expect(v.output_name).toBe("");
    expect([v.unit, v.length]).toEqual(["epochs", "3"]);
    expect(v.sample_prompts).toBe("a cat\na dog");
    const built = buildConfig(v, flux, INFO.config_rules);
    expect(built.problems).toEqual({});
    expect(built.config).toMatchObject({
      base_model: "/models/flux",
      data_dir: "/data/shapes",
      lora_rank: 8,
      max_grad_norm: null, // off in the run: off in the clone
      sample_prompts: ["a cat", "a dog"],
      rank_pattern: { to_k: 4 },
      num_epochs: 3,
    });
    expect(built.config).not.toHaveProperty("output_name");
    const bySteps = valuesFromConfig(flux, { ...run, num_epochs: 0, steps: 750 });
    expect([bySteps.unit, bySteps.length]).toEqual(["steps", "750"]);
  });

  it("sample prompts: a line starting with { is an object with its own settings; shown back compactly", () => {
    expect(samplePromptEntries('a cat\n{"prompt": "a dog", "width": 768, "seed": 3}\n')).toEqual(["a cat", { prompt: "a dog", width: 768, seed: 3 }]);
    expect(samplePromptEntries("a cat\n{not json")).toBe('line 2 starts with "{" but is not a JSON object like {"prompt": "a cat", "seed": 3}');
    const v = valuesFromConfig(flux, { sample_prompts: ["a cat", { prompt: "a dog", width: null, height: null, seed: 3, guidance: null }] });
    expect(v.sample_prompts).toBe('a cat\n{"prompt":"a dog","seed":3}');
    const built = buildConfig({ ...v, base_model: "m", data_dir: "d", sample_prompts: "a cat\n{oops" }, flux, INFO.config_rules);
    expect(built.problems.sample_prompts).toMatch(/line 2/);
    expect(buildConfig({ ...v, base_model: "m", data_dir: "d" }, flux, INFO.config_rules).config.sample_prompts).toEqual(["a cat", { prompt: "a dog", seed: 3 }]);
  });
});
