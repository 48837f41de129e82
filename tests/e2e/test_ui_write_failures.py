"""The server's failed writes as each screen shows them, in a real browser, keyboard only, at 420
and 1280 px (session 28 surfaces audit, RELIABILITY 755-757): a real `lorastudio serve` made under
a 200 KB file-size limit (an upload of a larger image, a 512x512 generation: WriteFailed, EFBIG)
and a dataset folder made immutable (`chattr +i`: a caption edit, an image remove and the
dataset's delete: EPERM, as a read-only folder is to the server's user; that part needs root).

Each screen must say in words which file or dataset, why, and what to do (WriteFailed's advice),
never the request's method and route, a hidden staging file, raw JSON or a traceback; it keeps
what was typed; and a message with a long path wraps inside its card (the caption card's error
ran past the card's edge, clipped)."""

from __future__ import annotations

import io
import shutil
import subprocess
from pathlib import Path

import numpy as np
import pytest
from PIL import Image
from tests.e2e.ui_expect import expect
from tests.e2e.ui_pages import open_page

from live_server import WORKER_TIMEOUT_S

pytestmark = pytest.mark.slow

# An element whose right edge passes the right edge of the card or page it is in (a long path that
# did not wrap), else null.
_PAST_ITS_BOX_JS = """(el) => {
  const box = el.closest('figure, .banner, main') || document.body;
  const r = el.getBoundingClientRect(), b = box.getBoundingClientRect();
  return r.right > b.right + 1 ? `${el.className} right=${Math.round(r.right)} > ${Math.round(b.right)}` : null;
}"""


def _noise_png(side: int) -> bytes:
    pixels = (np.random.default_rng(side).random((side, side, 3)) * 255).astype("uint8")
    buf = io.BytesIO()
    Image.fromarray(pixels).save(buf, format="PNG")
    return buf.getvalue()


def _immutable(folder: Path, on: bool) -> bool:
    """`chattr +i` / `-i` on `folder`; whether it took (root on a file system that has it)."""
    if shutil.which("chattr") is None:
        return False
    done = subprocess.run(["chattr", "+i" if on else "-i", str(folder)], capture_output=True)
    return done.returncode == 0


def _said_in_words(text: str, *named: str) -> None:
    """`text` names each of `named`, says what to do, and is no raw JSON, route or traceback."""
    for part in named:
        assert part in text, (part, text)
    assert "then retry" in text, text  # WriteFailed's advice
    for raw in ('{"', "Traceback", "DELETE /api", "PUT /api", "POST /api", "Errno"):
        assert raw not in text, (raw, text)


def _wraps(page, locator) -> None:
    assert page.evaluate(_PAST_ITS_BOX_JS, locator.element_handle()) is None


@pytest.mark.timeout(600)
@pytest.mark.parametrize("width", [420, 1280])
def test_failed_writes_are_told_in_words_on_every_screen(
    limited_studio, browser, tmp_path: Path, width: int
) -> None:
    url, home = str(limited_studio["url"]), Path(limited_studio["home"])
    name = f"pets{width}"
    folder = home / "datasets" / name
    (tmp_path / "big.png").write_bytes(_noise_png(300))
    (tmp_path / "a.png").write_bytes(_noise_png(16))
    (tmp_path / "a.txt").write_text("a cat")
    with open_page(browser, viewport={"width": width, "height": 900}) as page:
        page.goto(f"{url}/#/datasets/{name}")
        page.get_by_test_id("file-input").set_input_files([str(tmp_path / "a.png"), str(tmp_path / "a.txt")])
        expect(page.get_by_test_id("upload-summary")).to_have_text("2 files stored")
        # an upload past the file-size limit
        page.get_by_test_id("file-input").set_input_files([str(tmp_path / "big.png")])
        stopped = page.get_by_test_id("upload-stopped")
        expect(stopped).to_contain_text("File too large")
        _said_in_words(stopped.inner_text(), "big.png", name, "ulimit -f")
        _wraps(page, stopped)

        if _immutable(folder, True):
            try:
                # a caption edit, typed and left with Tab
                caption = page.get_by_label("caption of a.png")
                caption.focus()
                page.keyboard.press("Control+A")
                page.keyboard.type("a new caption")
                page.keyboard.press("Tab")
                card_error = page.locator('figure.thumb[data-file="a.png"] [role="alert"]')
                expect(card_error).to_contain_text("the caption of a.png could not be written")
                _said_in_words(card_error.inner_text(), str(folder / "a.txt"), "chattr -i")
                assert "/.a.txt" not in card_error.inner_text()  # never the hidden staging file
                _wraps(page, card_error)
                assert caption.input_value() == "a new caption"  # kept, to save again
                # the dataset's delete (Enter on the button, the confirm accepted)
                page.once("dialog", lambda dialog: dialog.accept())
                page.get_by_test_id("delete-dataset").focus()
                page.keyboard.press("Enter")
                deleted = page.get_by_test_id("delete-error")
                expect(deleted).to_contain_text(f"the dataset {name} could not be deleted")
                _said_in_words(deleted.inner_text(), str(folder), "Operation not permitted")
                _wraps(page, deleted)
                # an image's remove
                page.once("dialog", lambda dialog: dialog.accept())
                page.get_by_label("remove a.png").focus()
                page.keyboard.press("Enter")
                expect(card_error).to_contain_text(f"a.png of {name} could not be deleted")
                _said_in_words(card_error.inner_text(), str(folder / "a.txt"))
                _wraps(page, card_error)
            finally:
                _immutable(folder, False)
            assert sorted(p.name for p in folder.iterdir()) == ["a.png", "a.txt"]
            assert (folder / "a.txt").read_text().strip() == "a cat"  # nothing half-done
            # the folder writable again: the kept caption is saved by the next Tab out of it
            page.get_by_label("caption of a.png").focus()
            page.keyboard.press("Tab")
            expect(page.locator('figure.thumb[data-file="a.png"] .caption-state .ok')).to_have_text("saved")
            assert (folder / "a.txt").read_text().strip() == "a new caption"

        # a generation whose PNG passes the limit
        page.goto(f"{url}/#/generate")
        prompt = page.locator('[name="prompt"]')
        prompt.focus()
        page.keyboard.press("Control+A")
        page.keyboard.type("noise, large")
        for field in ("gen_width", "gen_height"):
            page.locator(f'[name="{field}"]').fill("512")
        page.locator('[name="gen_steps"]').fill("20")  # not the family's 28 (RELIABILITY 1820)
        page.get_by_role("button", name="Generate", exact=True).focus()
        page.keyboard.press("Enter")
        failed = page.get_by_role("alert").filter(has_text="write failed")
        failed.wait_for(timeout=WORKER_TIMEOUT_S * 1000)
        _said_in_words(
            failed.inner_text(), "the image could not be written to the gallery", str(home / "gallery")
        )
        _wraps(page, failed)
        assert prompt.input_value() == "noise, large"
        assert page.locator('[name="gen_width"]').input_value() == "512"
