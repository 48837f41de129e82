"""The files of a multipart upload (the dataset upload, the generation references): every part
must be a file. A text part was dropped without a word (`strict=true` sent as a form field left
the upload lenient): it is refused, naming it; upload options are query parameters."""

from __future__ import annotations

from starlette.datastructures import FormData, UploadFile

from lorastudio.errors import DatasetError


def file_parts(form: FormData) -> list[tuple[str, UploadFile]]:
    """The (field name, file) parts of `form`, in order. Raises DatasetError naming each text
    field (once, however often it is sent)."""
    texts = [name for name, value in form.multi_items() if isinstance(value, str)]
    if texts:
        raise DatasetError(
            "the upload holds text fields: only files are uploaded (options go in the query, ?strict=true)",
            [f"form field {name!r} is text, not a file" for name in texts],
        )
    return [(name, value) for name, value in form.multi_items() if isinstance(value, UploadFile)]
