"""Auto-captioning of a dataset with a vision-language model (transformers).

- options.py: CaptionOptions, the one strict setting set (CLI, API, worker);
- source.py: which captioner a model id or folder is (config.json read, no torch), refusing
  remote code and unsupported classes with the reason;
- targets.py: which images to caption and where a caption goes (.txt or metadata.jsonl),
  written atomically (no torch);
- vlm.py: the model itself (Qwen2.5-VL / Qwen2-VL, Florence-2), greedy decoding (torch);
- run.py: the loop over a dataset with progress events, a cancel check and a summary.
"""
