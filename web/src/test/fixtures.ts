/** Test data in the server's shapes, and a fetch double that answers per route. */
import { vi } from "vitest";
import type { CatalogueModel, DatasetDetail, GalleryImage, Info, RunDetail, RunSummary } from "../api/types";
import { CONFIG_DEFAULTS } from "../api/trainConfig.gen";
import { SERVER_RULES } from "./serverRules.gen";

export const INFO: Info = {
  version: "0.1.0",
  datasets_root: "/home/u/.lorastudio/datasets",
  outputs_root: "/home/u/.lorastudio/outputs",
  models_root: "/home/u/.lorastudio/models",
  datasets: [
    { name: "shapes", path: "/home/u/.lorastudio/datasets/shapes", images: 8, captions: 8, markup_captions: 0, markup_counted: true, usable: true, problem: null },
    { name: "faces", path: "/home/u/.lorastudio/datasets/faces", images: 20, captions: 12, markup_captions: 0, markup_counted: true, usable: true, problem: null },
  ],
  families: [
    {
      name: "sdxl",
      title: "Stable Diffusion XL",
      objective: "ddpm",
      latent_channels: 4,
      resolution_multiple: 32,
      lora_targets: ["to_q"],
      defaults: { resolution: 1024, learning_rate: 0.0001, lora_rank: 16, snr_gamma: 5 },
      ...SERVER_RULES.families.sdxl, // supports, refuses: the server's
      wide_compile: true,
      fuse_projections: true,
      guidance: "cfg",
      guidance_default: 5,
      generation_side: 1024,
      generation_steps: 30,
      negative_prompt: true,
      precisions: ["auto", "fp32", "bf16", "int8", "nf4"],
    },
    {
      name: "flux",
      title: "FLUX.1",
      objective: "flow",
      latent_channels: 16,
      resolution_multiple: 16,
      lora_targets: ["to_q"],
      defaults: { resolution: 512, learning_rate: 0.0004, lora_rank: 32, guidance: 1, max_sequence_length: 512 },
      ...SERVER_RULES.families.flux,
      wide_compile: false,
      fuse_projections: true,
      guidance: "embedded",
      guidance_default: 3.5,
      generation_side: 512,
      generation_steps: 28,
      negative_prompt: false,
      precisions: ["auto", "fp32", "bf16", "int8", "nf4"],
    },
  ],
  host: { device: "cpu", name: "cpu", memory_gb: null, precisions: ["auto", "fp32", "bf16", "int8", "nf4"], gpu_count: 0, ...SERVER_RULES.hosts.cpu, run_choices: [] },
  auth: false,
  config_rules: SERVER_RULES.config_rules,
  dataset_name_rule: SERVER_RULES.dataset_name_rule,
  models: [{ name: "tiny-flux", path: "/home/u/.lorastudio/models/tiny-flux", family: "flux" }],
};

/** An edit family (control images 0-1 per sample: the control settings apply), for INFO's families when a test needs one. */
export const KONTEXT: Info["families"][number] = {
  ...INFO.families[1],
  name: "flux-kontext",
  title: "FLUX.1 Kontext",
  ...SERVER_RULES.families["flux-kontext"],
  control_images: [0, 1],
};

/** GET /api/models: the tiny demo model, and a real FLUX.1 download that is incomplete. */
export const CATALOGUE: CatalogueModel[] = [
  {
    id: "tiny-flux",
    name: "tiny-flux",
    source: "tiny",
    path: "/home/u/.lorastudio/models/tiny-flux",
    family: "flux",
    trainable: true,
    reason: null,
    size_bytes: 123456,
    complete: true,
    missing: [],
    deletable: true,
  },
  {
    id: "FLUX.1-dev",
    name: "FLUX.1-dev",
    source: "local",
    path: "/home/u/.lorastudio/models/FLUX.1-dev",
    family: "flux",
    trainable: true,
    reason: null,
    size_bytes: 9_000_000_000,
    complete: false,
    missing: ["transformer/diffusion_pytorch_model.safetensors"],
    deletable: true,
  },
];

export interface Call {
  method: string;
  url: string;
  body: unknown;
  headers: Record<string, string>;
}

/** An answer: `headers` added to its Content-Type (a build id, api/build.ts). */
type Handler = (call: Call) => { status?: number; body: unknown; headers?: Record<string, string> } | undefined;

/** The 202 of POST /api/generations for a generation already `state` (done: `image`; failed / cancelled: `error`). */
export function generationStatus(requestId: string, state: string, extra: Record<string, unknown> = {}): Record<string, unknown> {
  return { request_id: requestId, state, step: 0, steps: 0, cancelling: false, created: 1, ended: null, image: null, error: null, ...extra };
}

/**
 * A test answers POST /api/generations with the generated image (201, GenerateOut: what the screen
 * shows in the end); the server answers 202 with the request's status and the screen polls it
 * (lib/generationPoll). Here that 201 becomes the 202 of a generation already done, so a test of
 * what the screen does with an image needs no poll; refusals (4xx) are the POST's own, as they are.
 * Tests of the polling answer GET /api/generations/{id} themselves.
 */
function asynchronous<A extends { status?: number; body: unknown }>(call: Call, answer: A): A {
  if (call.method !== "POST" || call.url !== "/api/generations" || answer.status !== 201) return answer;
  const requestId = String((call.body as { request_id?: string } | null)?.request_id ?? "gen-test");
  return { ...answer, status: 202, body: generationStatus(requestId, "done", { image: answer.body, ended: 2 }) };
}

/** Replace global fetch: `handler` answers each call (undefined -> 404); returns the call log. */
export function mockFetch(handler: Handler): Call[] {
  const calls: Call[] = [];
  vi.stubGlobal(
    "fetch",
    vi.fn(async (url: string, init?: RequestInit) => {
      const raw = init?.body;
      const headers = { ...((init?.headers as Record<string, string> | undefined) ?? {}) };
      const call = { method: init?.method ?? "GET", url, body: typeof raw === "string" ? JSON.parse(raw) : raw, headers };
      calls.push(call);
      const answer = asynchronous(call, handler(call) ?? { status: 404, body: { detail: "not found" } });
      return new Response(JSON.stringify(answer.body), {
        status: answer.status ?? 200,
        headers: { "Content-Type": "application/json", ...answer.headers },
      });
    }),
  );
  return calls;
}

/** A fetch held by `deferFetch` until the test answers it. */
export interface Held {
  call: Call;
  /** Aborted by its AbortSignal (it then rejected with an AbortError, as fetch does). */
  aborted: boolean;
  answer: (body: unknown, status?: number) => void;
}

/**
 * Replace global fetch with one that answers through `handler` at once, or (handler returns
 * undefined) holds the call until the test answers it: `held(url)` takes the oldest held call
 * of that URL not taken yet (an aborted one too: it rejected with an AbortError, as fetch does,
 * and its answer then changes nothing).
 */
export function deferFetch(handler: Handler = () => undefined): { calls: Call[]; held: (url: string | RegExp) => Held } {
  const calls: Call[] = [];
  const waiting: (Held & { taken: boolean })[] = [];
  const respond = (body: unknown, status = 200) =>
    new Response(JSON.stringify(body), { status, headers: { "Content-Type": "application/json" } });
  vi.stubGlobal(
    "fetch",
    vi.fn((url: string, init?: RequestInit) => {
      const raw = init?.body;
      const headers = { ...((init?.headers as Record<string, string> | undefined) ?? {}) };
      const call = { method: init?.method ?? "GET", url, body: typeof raw === "string" ? JSON.parse(raw) : raw, headers };
      calls.push(call);
      const handled = handler(call);
      const now = handled && asynchronous(call, handled);
      if (now) return Promise.resolve(respond(now.body, now.status));
      return new Promise<Response>((resolve, reject) => {
        const entry = {
          call,
          aborted: false,
          taken: false,
          answer: (body: unknown, status?: number) => {
            const late = asynchronous(call, { body, status });
            resolve(respond(late.body, late.status));
          },
        };
        init?.signal?.addEventListener("abort", () => {
          entry.aborted = true; // answering it later does nothing: it already rejected
          reject(new DOMException("The operation was aborted.", "AbortError"));
        });
        waiting.push(entry);
      });
    }),
  );
  const held = (url: string | RegExp) => {
    const hit = waiting.find((w) => !w.taken && (typeof url === "string" ? w.call.url === url : url.test(w.call.url)));
    if (!hit) throw new Error(`no held fetch of ${String(url)} (held: ${waiting.filter((w) => !w.taken).map((w) => w.call.url).join(", ")})`);
    hit.taken = true;
    return hit;
  };
  return { calls, held };
}

/** A run j1 ("shapes-lora", FLUX.1) at step 1 of its training, as /api/train/status reports it. */
export const JOB = {
  id: "j1",
  status: "running",
  output_name: "shapes-lora",
  family: "flux",
  created_at: "2025-01-01T00:00:00Z",
  started_at: "2025-01-01T00:00:00Z",
  finished_at: null,
  phase: null,
  progress: null,
  metrics: [{ step: 1, epoch: 1, loss: 0.9, avg_loss: 0.9, lr: 1e-4, grad_norm: 1, samples_per_second: null, peak_memory_gb: 0.5 }],
  lora_path: null,
  steps_run: 1,
  error: null,
  stop_requested: null,
  config: {},
};

/** A stopped FLUX.1 run ("portrait", id abc123) resumable from step 100, as the run list gives it. */
export function stoppedRun(extra: Partial<RunSummary> = {}): RunSummary {
  return {
    id: "abc123",
    output_name: "portrait",
    family: "flux",
    status: "stopped",
    created_at: "2025-01-01T00:00:00Z",
    started_at: "2025-01-01T00:00:01Z",
    finished_at: "2025-01-01T00:10:00Z",
    steps_run: 120,
    total_steps: 1000,
    last_loss: 0.1,
    error: null,
    resume_step: 100,
    lora_file: true,
    ...extra,
  };
}

/** A stopped FLUX.1 run ("portrait", id r1) whose files are under `out`, with two loss points. */
export function runDetail(out = "/home/u/.lorastudio/outputs/portrait"): RunDetail {
  return {
    ...stoppedRun({ id: "r1", resume_step: 120 }),
    config: { ...CONFIG_DEFAULTS, family: "flux", base_model: "/m", data_dir: "/d", save_every: 40 } as RunDetail["config"],
    metrics: [
      { step: 1, loss: 0.5 },
      { step: 2, loss: 0.4 },
    ],
    outputs: [{ kind: "lora", path: `${out}/portrait.safetensors` }],
  };
}

/** Dataset `name`'s detail: one captioned 24x16 image, a.png. */
export function datasetDetail(name: string): DatasetDetail {
  return {
    name,
    path: `/home/u/.lorastudio/datasets/${name}`,
    usable: true,
    problem: null,
    images: 1,
    captions: 1,
    markup_captions: 0,
    markup_counted: true,
    masked: 0,
    with_alpha: 0,
    total_files: 1,
    offset: 0,
    limit: 200,
    files: [{ file: "a.png", caption: "a red square", bytes: 100, width: 24, height: 16 }],
    dropped: [],
  };
}

/** A 64x64 gallery image of the tiny FLUX.1 (old.png, "an old cat", seed 7) made with `loras`. */
export function galleryImage(loras: GalleryImage["loras"]): GalleryImage {
  return {
    file: "old.png",
    url: "/gallery/old.png",
    created: 1,
    width: 64,
    height: 64,
    prompt: "an old cat",
    seed: 7,
    family: "flux",
    base_model: "/home/u/.lorastudio/models/tiny-flux",
    steps: 4,
    loras,
  };
}
