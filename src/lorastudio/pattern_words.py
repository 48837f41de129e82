"""Words for a value refused by a field's `pattern` (pydantic's `string_pattern_mismatch`).

Pydantic says "String should match pattern '^[A-Za-z0-9][A-Za-z0-9._-]*$'": the Train form showed
that regex beside Output name, and the push form beside the repo (RELIABILITY 2270). Every
`pattern=` of TrainConfig and of the API's bodies, queries and paths has its words here (a test,
tests/api/test_api_pattern_words.py, walks the OpenAPI schema and TrainConfig's for any without);
`pattern_problem` gives them, and both places that turn pydantic's errors into answers use it
(config_resolve._pydantic_problems, api/errors._invalid_request). No imports: a leaf module.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

PATTERN_MISMATCH = "string_pattern_mismatch"  # pydantic's error type; ctx["pattern"] the regex
_NAME = "letters, digits, '.', '_' and '-' only, starting with a letter or digit"
_CURSOR = "the next_cursor of an earlier page of this list, as it was given"
PATTERN_WORDS: dict[str, str] = {
    r"^[A-Za-z0-9][A-Za-z0-9._-]*$": _NAME,  # TrainConfig.output_name
    r"\S": "must not be blank",  # Preservation.class_word
    r"^[A-Za-z0-9][\w.-]*/[\w.-]+$": "a hub repo id, owner/name: " + _NAME,  # PushBody.repo
    r"^step-[0-9]+$": "a checkpoint folder name, step-N (N its step)",  # ResumeBody.checkpoint
    r"^[0-9a-f]{64}$": "a sha256: 64 lower-case hexadecimal digits",  # LoraRef.sha256
    r"^[0-9a-f]{20}$": "a base model identity: 20 lower-case hexadecimal digits",  # base_identity
    r"^[A-Za-z0-9_-]{1,64}$": "1-64 letters, digits, '-' or '_'",  # a generation's request_id
    r"^[rm][0-9]{1,20}:[^/\x00]{1,255}$": _CURSOR,  # api/lora_pages.CURSOR
    r"^[0-9]{1,12}$": _CURSOR,  # api/sample_pages.CURSOR
    r"^[0-9]{1,19}$": _CURSOR,  # api/routes/runs.RUNS_CURSOR
    r"^[0-9]{1,20}:[^/\\\x00]{1,255}$": _CURSOR,  # jobs/gallery.CURSOR_PATTERN
    # api/routes/session.PATH_PATTERN: the cookie's Path
    r"^/[A-Za-z0-9._~!$&'()*+=:@%/\[\]|^;,-]*$": "a URL path starting with '/', without spaces, quotes "
    "or control characters",
}


def pattern_problem(error: Mapping[str, Any]) -> str | None:
    """The words for a pydantic error item of type `string_pattern_mismatch` whose pattern has
    words in PATTERN_WORDS; None for any other item (its own message stands)."""
    if error.get("type") != PATTERN_MISMATCH:
        return None
    ctx = error.get("ctx")
    pattern = ctx.get("pattern") if isinstance(ctx, Mapping) else None
    return PATTERN_WORDS.get(pattern) if isinstance(pattern, str) else None
