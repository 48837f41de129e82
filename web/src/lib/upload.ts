/**
 * Upload planning: which dropped files the server will accept, and how they are split into
 * batches (one multipart request each) so large sets upload with a progress bar.
 * Pure functions, no React and no network.
 */
import type { DroppedFile } from "../api/types";

/** The server's image types (data/discovery.py IMAGE_EXTENSIONS; a Python test compares them). */
export const IMAGE_EXTENSIONS = [".png", ".jpg", ".jpeg", ".webp"] as const;
export const SIDECAR_EXTENSIONS = [".txt", ".jsonl"] as const;
/** Images the server refuses by name (data/uploads.py REFUSED_IMAGE_EXTENSIONS). */
export const REFUSED_IMAGE_EXTENSIONS = [".bmp", ".dib"] as const;
/** The file picker's `accept` list: exactly what the server takes. */
export const PICKER_ACCEPT = [...IMAGE_EXTENSIONS, ...SIDECAR_EXTENSIONS].join(",");
export const BMP_REASON = "BMP images are not accepted: convert it to PNG, JPEG or WebP";
/** Hugging Face imagefolder's CSV caption table (data/peer_files.py: the import stores it). */
export const CSV_REASON =
  "a Hugging Face imagefolder caption table: not read by an upload (`lorastudio datasets import DIR` stores it as metadata.jsonl; or upload a .txt caption per image)";
/** A folder dropped whole: a browser drop does not read it. */
export const FOLDER_REASON =
  "a folder: open it and drop the images and captions inside (kohya N_name folders: `lorastudio datasets import DIR --kohya`, or `kohya_folders = true` for a folder on the server)";

/** A file left out, and why: refused here before upload, or by the server (same shape). */
export type RefusedFile = DroppedFile;

export interface UploadPlan {
  /** Batches of files, each a list sent in one request; a caption travels with its image. */
  batches: File[][];
  /** Files refused before upload, with the reason shown to the user. */
  refused: RefusedFile[];
  /** Number of images in the plan. */
  images: number;
  /** Total bytes in the plan. */
  bytes: number;
}

function extension(name: string): string {
  const dot = name.lastIndexOf(".");
  return dot < 0 ? "" : name.slice(dot).toLowerCase();
}

function stem(name: string): string {
  const dot = name.lastIndexOf(".");
  return dot < 0 ? name : name.slice(0, dot);
}

export function isImageName(name: string): boolean {
  return (IMAGE_EXTENSIONS as readonly string[]).includes(extension(name));
}

/**
 * Split `files` into batches of at most `maxFiles` images and `maxBytes` bytes (a single image
 * larger than maxBytes gets a batch of its own). Each .txt caption goes in the batch of the
 * image with the same stem; captions without an image and files of other types are refused;
 * metadata.jsonl goes in the first batch. `folders`: the names of dropped entries that are
 * folders (DropZone), refused as "name/" with FOLDER_REASON.
 */
export function planUpload(files: File[], maxFiles = 32, maxBytes = 48 * 1024 * 1024, folders: readonly string[] = []): UploadPlan {
  const refused: RefusedFile[] = folders.map((name) => ({ file: `${name}/`, reason: FOLDER_REASON }));
  files = files.filter((f) => !folders.includes(f.name));
  const images: File[] = [];
  const captions = new Map<string, File>();
  const extra: File[] = [];
  const seen = new Set<string>();
  for (const f of files) {
    if (seen.has(f.name)) {
      refused.push({ file: f.name, reason: "duplicate file name in this upload" });
      continue;
    }
    seen.add(f.name);
    const ext = extension(f.name);
    if (isImageName(f.name)) {
      if (f.size === 0) refused.push({ file: f.name, reason: "empty file" });
      else images.push(f);
    } else if ((REFUSED_IMAGE_EXTENSIONS as readonly string[]).includes(ext)) {
      refused.push({ file: f.name, reason: BMP_REASON });
    } else if (ext === ".txt") captions.set(stem(f.name), f);
    else if (f.name === "metadata.jsonl") extra.push(f);
    else if (ext === ".caption") refused.push({ file: f.name, reason: `a kohya .caption file: only .txt captions are read (rename it ${stem(f.name)}.txt)` });
    else if (f.name.toLowerCase() === "metadata.csv") refused.push({ file: f.name, reason: CSV_REASON });
    else refused.push({ file: f.name, reason: `not an image or caption (${ext || "no extension"})` });
  }
  const imageStems = new Set(images.map((f) => stem(f.name)));
  const refusedImages = new Map(refused.filter((r) => isImageName(r.file) || r.reason === BMP_REASON).map((r) => [stem(r.file), r.file]));
  for (const [s, f] of captions) {
    if (imageStems.has(s)) continue;
    const image = refusedImages.get(s);
    refused.push({ file: f.name, reason: image ? `its image ${image} was refused` : "caption without a matching image" });
  }
  images.sort((a, b) => a.name.localeCompare(b.name));
  const batches: File[][] = [];
  let current: File[] = [...extra];
  let count = 0;
  let size = extra.reduce((n, f) => n + f.size, 0);
  for (const img of images) {
    const cap = captions.get(stem(img.name));
    const add = img.size + (cap?.size ?? 0);
    if (count > 0 && (count >= maxFiles || size + add > maxBytes)) {
      batches.push(current);
      current = [];
      count = 0;
      size = 0;
    }
    current.push(img);
    if (cap) current.push(cap);
    count += 1;
    size += add;
  }
  if (current.length) batches.push(current);
  const bytes = batches.flat().reduce((n, f) => n + f.size, 0);
  return { batches, refused, images: images.length, bytes };
}

/** The control folders a paired upload can fill (data/pairs.py: control, control_2 ... control_10;
 * MAX_CONTROL_SLOTS there is the most any family takes: FLUX.2 dev's 10 references). */
export const CONTROL_SLOTS = [
  "control",
  "control_2",
  "control_3",
  "control_4",
  "control_5",
  "control_6",
  "control_7",
  "control_8",
  "control_9",
  "control_10",
] as const;

/** Whether `path` (a control image as the dataset detail lists it) is in one of the dataset's
 * control folders (a thumbnail is served for it), not in a control_dirs folder or metadata path. */
export function inControlFolder(path: string): boolean {
  const slash = path.indexOf("/");
  return slash > 0 && (CONTROL_SLOTS as readonly string[]).includes(path.slice(0, slash));
}

/**
 * Plan an upload of control images (one control folder): images only, batched like targets;
 * captions and other files are refused (a control pairs with its target by file name).
 */
export function planControlUpload(
  files: File[],
  maxFiles = 32,
  maxBytes = 48 * 1024 * 1024,
  folders: readonly string[] = [],
  kind: "control images" | "loss masks" = "control images",
): UploadPlan {
  const images = files.filter((f) => isImageName(f.name) && !folders.includes(f.name));
  const plan = planUpload(images, maxFiles, maxBytes, folders);
  const others = files.filter((f) => !isImageName(f.name) && !folders.includes(f.name));
  const reason = `${kind} only (PNG, JPEG, WebP): captions go with the ${kind === "loss masks" ? "images" : "targets"}`;
  return { ...plan, refused: [...others.map((f) => ({ file: f.name, reason })), ...plan.refused] };
}
