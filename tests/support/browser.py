"""Opens a page in headless Chromium (Debian's `chromium` package) through Playwright, and
returns what a test checks: console errors, network requests, images, visible text, a screenshot.

Playwright rather than Selenium: it reports every request and console message as events
(Selenium needs CDP or BiDi logging for requests), and it drives the system Chromium via
`executable_path` with no driver package to match to the browser's version. `playwright
install` is never run: its browser downloads are not needed (nor possible offline).
"""

from __future__ import annotations

import dataclasses
import os
import pathlib
import shutil

CANDIDATES = ("chromium", "chromium-browser", "google-chrome")


def chromium() -> tuple[str | None, str]:
    """The browser executable, or None and why there is none (the skip reason)."""
    try:
        import playwright.sync_api  # noqa: F401
    except ImportError:
        return None, "playwright is not installed (pip install -e '.[test]')"
    path = os.environ.get("PREP_CHROMIUM") or next(filter(None, map(shutil.which, CANDIDATES)), None)
    if not path:
        return None, "no Chromium on PATH (apt-get install chromium; .ci/run installs it when it can)"
    return path, ""


@dataclasses.dataclass
class PageVisit:
    url: str
    errors: list[str]  # console errors and uncaught exceptions
    requests: list[str]  # every URL the page asked for, the page itself included
    images: list[dict]  # {"src": first 40 chars, "natural_width": ..., "complete": ...}
    text: str  # the text a user sees (innerText: hidden elements left out)
    screenshot: bytes  # PNG of the first screenful
    extra: dict


def visit(path: pathlib.Path, actions=None, width: int = 1280, height: int = 900) -> PageVisit:
    """Loads `path` and waits for it; `actions(page)` may click or type and return extra findings."""
    from playwright.sync_api import sync_playwright

    executable, reason = chromium()
    if executable is None:
        raise RuntimeError(reason)
    errors, requests = [], []
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=executable)
        try:
            page = browser.new_page(viewport={"width": width, "height": height})
            page.on("console", lambda m: errors.append(f"console {m.type}: {m.text}") if m.type == "error" else None)
            page.on("pageerror", lambda exc: errors.append(f"page error: {exc}"))
            page.on("request", lambda r: requests.append(r.url))
            url = path.resolve().as_uri()
            page.goto(url, wait_until="load")
            images = page.eval_on_selector_all(
                "img",
                "els => els.map(e => ({src: e.src.slice(0, 40), natural_width: e.naturalWidth, complete: e.complete}))",
            )
            extra = actions(page) if actions else {}
            text = page.inner_text("body")
            shot = page.screenshot()
        finally:
            browser.close()
    return PageVisit(url, errors, requests, images, text, shot, extra or {})


def screenshot(page_path: pathlib.Path, png: pathlib.Path, width: int = 1280, height: int = 1350) -> None:
    """Writes a PNG of the top `height` pixels of the page, as headless Chromium draws it."""
    from playwright.sync_api import sync_playwright

    executable, reason = chromium()
    if executable is None:
        raise RuntimeError(reason)
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=executable)
        try:
            page = browser.new_page(viewport={"width": width, "height": height})
            page.goto(page_path.resolve().as_uri(), wait_until="load")
            page.screenshot(path=str(png), clip={"x": 0, "y": 0, "width": width, "height": height})
        finally:
            browser.close()


if __name__ == "__main__":  # docs/report.png: python -m tests.support.browser out/shapes/report.html docs/report.png
    import sys

    screenshot(pathlib.Path(sys.argv[1]), pathlib.Path(sys.argv[2]))
