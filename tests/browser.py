"""Shared helpers for browser tests: a JupyterLab server and a headless Chromium page.

    from browser import chromium_page, jupyter_lab, open_notebook, run_all_cells, cell_errors, require_browser
    # (pytest puts tests/ on sys.path for the modules in it: this works with `pytest` and `python -m pytest`)

    require_browser()                                   # skips with a reason when Chromium/Playwright is missing
    with jupyter_lab(tmp_path) as lab, chromium_page() as page:
        open_notebook(page, lab, "demo.ipynb")
        run_all_cells(page)
        assert cell_errors(page) == []

``jupyter_lab`` starts ``jupyter lab`` from this Python on 127.0.0.1, on a free port, with a random token,
``--allow-root`` when running as root, no browser, and private runtime/config/settings/workspace
directories (so nothing of the user's is read or written); it waits until the server answers and stops
it (the whole process group) on exit. ``jupyter_server`` does the same for any Jupyter server application
(``notebook`` for Notebook 7), with given user settings and environment variables. ``chromium_page`` drives
the system Chromium (``/usr/bin/chromium``, or ``$CHROMIUM``) through the ``playwright`` package, with no
browser download.
"""
from __future__ import annotations

import json
import os
import re
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator

import pytest

ROOT = Path(__file__).resolve().parent.parent
SCREENSHOTS = ROOT / "artifacts" / "screenshots"
PANEL = ".jp-NotebookPanel:not(.lm-mod-hidden)"  # the notebook on show (other tabs stay in the DOM, hidden)
CHROMIUM_ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                 "--disable-background-networking", "--disable-component-update", "--disable-sync"]


def chromium_path() -> str | None:
    """The Chromium executable: ``$CHROMIUM``, else ``/usr/bin/chromium``, else one on ``PATH``."""
    for candidate in (os.environ.get("CHROMIUM"), "/usr/bin/chromium", shutil.which("chromium"),
                      shutil.which("chromium-browser")):
        if candidate and Path(candidate).is_file() and os.access(candidate, os.X_OK):
            return candidate
    return None


def browser_missing() -> str | None:
    """Why browser tests cannot run here, or ``None`` when they can."""
    try:
        import playwright.sync_api  # noqa: F401
    except ImportError:
        return "the playwright Python package is not installed (pip install playwright; no browser download needed)"
    if chromium_path() is None:
        return "Chromium not found at /usr/bin/chromium or $CHROMIUM (Debian: apt-get install chromium)"
    return None


def require_browser() -> None:
    """Skip the calling test, with the reason, when Playwright or Chromium is missing."""
    reason = browser_missing()
    if reason:
        pytest.skip(reason)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@dataclass
class JupyterServer:
    url: str  # http://127.0.0.1:PORT/
    token: str
    root_dir: Path
    process: subprocess.Popen
    log: Path

    def lab_url(self, path: str = "") -> str:
        """The JupyterLab address of ``path`` (relative to ``root_dir``), token included."""
        tree = f"tree/{path}" if path else ""
        return f"{self.url}lab/{tree}?token={self.token}"

    def api(self, endpoint: str) -> object:
        req = urllib.request.Request(f"{self.url}api/{endpoint}", headers={"Authorization": f"token {self.token}"})
        with urllib.request.urlopen(req, timeout=10) as resp:
            return json.loads(resp.read())

    def log_text(self) -> str:
        return self.log.read_text(errors="replace") if self.log.exists() else ""


# Settings a server starts with, as {"<package>:<plugin>": {setting: value}} (the keys of overrides.json).
NO_NEWS = {"@jupyterlab/apputils-extension:notification": {"fetchNews": "false", "checkForUpdates": False}}


@contextmanager
def jupyter_lab(root_dir: str | Path, timeout: float = 120.0, extra_args: tuple[str, ...] = ()
                ) -> Iterator[JupyterServer]:
    """Run JupyterLab serving ``root_dir`` for the duration of the block, with no news pop-up (it would cover
    part of the page in screenshots)."""
    with jupyter_server("jupyterlab", root_dir, timeout, extra_args, settings=NO_NEWS) as server:
        yield server


@contextmanager
def jupyter_server(app: str, root_dir: str | Path, timeout: float = 120.0, extra_args: tuple[str, ...] = (),
                   settings: dict[str, dict] | None = None, env: dict[str, str] | None = None
                   ) -> Iterator[JupyterServer]:
    """Run the Jupyter server application ``python -m app`` (``jupyterlab``, ``notebook``) serving ``root_dir``
    for the duration of the block: 127.0.0.1, a free port, a random token, private runtime/config/settings/
    workspace directories, the user settings ``settings`` and the environment variables ``env`` added."""
    root_dir = Path(root_dir).resolve()
    port, token = free_port(), secrets.token_hex(16)
    private = Path(tempfile.mkdtemp(prefix="tfm-jupyter-"))
    env = {**os.environ,
           "JUPYTER_RUNTIME_DIR": str(private / "runtime"),
           "JUPYTER_CONFIG_DIR": str(private / "config"),
           "JUPYTERLAB_SETTINGS_DIR": str(private / "settings"),
           "JUPYTERLAB_WORKSPACES_DIR": str(private / "workspaces"),
           "IPYTHONDIR": str(private / "ipython"),
           "PYTHONUNBUFFERED": "1",
           **(env or {})}
    for plugin, values in (settings or {}).items():
        package, name = plugin.split(":")
        path = private / "settings" / package / f"{name}.jupyterlab-settings"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(values))
    cmd = [sys.executable, "-m", app, "--no-browser", "--ip=127.0.0.1", f"--port={port}",
           "--port-retries=0", f"--IdentityProvider.token={token}", f"--ServerApp.root_dir={root_dir}", *extra_args]
    if hasattr(os, "geteuid") and os.geteuid() == 0:
        cmd.append("--allow-root")
    log = private / "jupyter.log"
    with open(log, "wb") as out:
        process = subprocess.Popen(cmd, cwd=root_dir, env=env, stdout=out, stderr=subprocess.STDOUT,
                                   start_new_session=True)
    server = JupyterServer(f"http://127.0.0.1:{port}/", token, root_dir, process, log)
    try:
        deadline = time.monotonic() + timeout
        while True:
            if process.poll() is not None:
                raise RuntimeError(f"{app} exited with {process.returncode}:\n{server.log_text()[-3000:]}")
            try:
                server.api("status")
                break
            except (urllib.error.URLError, ConnectionError, OSError):
                if time.monotonic() > deadline:
                    raise TimeoutError(f"{app} did not answer within {timeout:.0f} s:\n"
                                       f"{server.log_text()[-3000:]}")
                time.sleep(0.3)
        yield server
    finally:
        _stop(process)
        shutil.rmtree(private, ignore_errors=True)


def _stop(process: subprocess.Popen) -> None:
    """SIGTERM the server's process group (server and kernels), then SIGKILL what is left."""
    if process.poll() is None:
        try:
            os.killpg(process.pid, signal.SIGTERM)
            process.wait(timeout=15)
        except (ProcessLookupError, subprocess.TimeoutExpired):
            pass
    try:
        os.killpg(process.pid, signal.SIGKILL)  # kernels the server did not shut down
    except ProcessLookupError:
        pass
    if process.poll() is None:
        process.wait(timeout=5)


@contextmanager
def chromium_page(width: int = 1400, height: int = 1000, timeout_ms: int = 60_000) -> Iterator[object]:
    """A Playwright ``Page`` in headless system Chromium; the browser is closed on exit.

    Playwright's sync API allows one of these per thread at a time: share one page between the tests of a
    module (a module-scoped fixture) rather than nesting them."""
    require_browser()
    from playwright.sync_api import sync_playwright

    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=chromium_path(), headless=True, args=CHROMIUM_ARGS)
        try:
            context = browser.new_context(viewport={"width": width, "height": height})
            page = context.new_page()
            page.set_default_timeout(timeout_ms)
            page.console_errors = []  # JavaScript errors, for diagnosis
            page.on("pageerror", lambda exc: page.console_errors.append(str(exc)))
            yield page
        finally:
            browser.close()


def screenshot(page, name: str, element=None) -> Path:
    """Save a PNG under artifacts/screenshots/ (of ``element`` when given, else the whole page)."""
    SCREENSHOTS.mkdir(parents=True, exist_ok=True)
    path = SCREENSHOTS / f"{re.sub(r'[^A-Za-z0-9_.-]+', '_', name)}.png"
    (element or page).screenshot(path=str(path))
    return path


# -------------------------------------------------------------------------------------------------------
# JupyterLab notebook helpers
def write_notebook(path: str | Path, cells: list[str]) -> Path:
    """A minimal nbformat 4 notebook of code cells (python3 kernel), written to ``path``."""
    nb = {"cells": [{"cell_type": "code", "execution_count": None, "metadata": {}, "outputs": [],
                     "source": src} for src in cells],
          "metadata": {"kernelspec": {"display_name": "Python 3 (ipykernel)", "language": "python",
                                      "name": "python3"},
                       "language_info": {"name": "python"}},
          "nbformat": 4, "nbformat_minor": 5}
    path = Path(path)
    path.write_text(json.dumps(nb, indent=1))
    return path


def open_notebook(page, server: JupyterServer, path: str, timeout: float = 90) -> None:
    """Open ``path`` in JupyterLab and wait until its kernel is connected and idle.

    JupyterLab sometimes asks which kernel to start ("Select Kernel") although the notebook names one:
    the dialog's default (the notebook's own kernel) is accepted."""
    page.goto(server.lab_url(path) + "&reset")  # reset: no other notebook of an earlier visit is reopened
    page.wait_for_selector(f"{PANEL} .jp-Notebook .jp-Cell", timeout=timeout * 1000)
    deadline = time.monotonic() + timeout
    idle = 0
    while idle < 3:  # idle and no dialog, three times in a row
        if time.monotonic() > deadline:
            raise TimeoutError(f"the kernel of {path} did not become idle within {timeout:.0f} s")
        if accept_kernel_dialog(page) or not _kernel_idle(page):
            idle = 0
        else:
            idle += 1
        page.wait_for_timeout(500)


def accept_kernel_dialog(page) -> bool:
    """Accept a "Select Kernel" dialog if one is open; True if there was one."""
    dialog = page.locator(".jp-Dialog", has_text="Select Kernel")
    if dialog.count() and dialog.first.is_visible():
        dialog.first.locator("button.jp-mod-accept").click()
        return True
    return False


KERNEL_IDLE = f"""() => {{ const el = document.querySelector('{PANEL} .jp-Notebook-ExecutionIndicator');
                          return !!el && el.getAttribute('data-status') === 'idle'; }}"""
# JupyterLab 4 renders an error output like stderr (data-mime-type="application/vnd.jupyter.stderr"); what tells
# them apart is IPython's traceback text: "Traceback (most recent call last)" or "Cell In[n], line m".
ERROR_OUTPUTS = f"""() => [...document.querySelectorAll('{PANEL} .jp-OutputArea-output')].filter(e =>
    e.matches('[data-mime-type="application/vnd.jupyter.error"]')
    || (e.matches('[data-mime-type="application/vnd.jupyter.stderr"]')
        && /Traceback \\(most recent call last\\)|Cell In\\[\\d+\\], line \\d+/.test(e.textContent))
    || /Error displaying widget|Failed to display Jupyter Widget/.test(e.textContent))"""
# every code cell numbered, or (Run All stops at an error) an error shown and no cell still queued or running.
# A folded cell (a solution: its input hidden) keeps its prompt out of view and never numbered: it is left out.
ALL_RUN = f"""() => {{ const prompts = [...document.querySelectorAll('{PANEL} .jp-CodeCell')]
        .filter(c => !c.querySelector('.jp-InputPlaceholder')).map(c => c.querySelector('.jp-InputPrompt'));
    if (prompts.length > 0 && prompts.every(p => /\\[\\d+\\]/.test(p.textContent))) return true;
    return ({ERROR_OUTPUTS})().length > 0 && !prompts.some(p => p.textContent.includes('*')); }}"""


def _kernel_idle(page) -> bool:
    return page.evaluate(KERNEL_IDLE)


def wait_kernel_idle(page, timeout: float = 120) -> None:
    """Wait until the notebook's kernel status says idle (the toolbar's kernel indicator)."""
    page.wait_for_function(KERNEL_IDLE, timeout=timeout * 1000)


def run_all_cells(page, timeout: float = 300) -> None:
    """Run > Run All Cells from the menu bar, then wait until every code cell has an execution count, or
    until a cell failed (JupyterLab stops there): check :func:`cell_errors` afterwards."""
    page.locator(".lm-MenuBar-itemLabel", has_text=re.compile(r"^Run$")).click()
    page.locator(".lm-Menu-itemLabel", has_text=re.compile(r"^Run All Cells$")).click()
    page.wait_for_timeout(500)
    accept_kernel_dialog(page)
    page.wait_for_function(ALL_RUN, timeout=timeout * 1000)
    wait_kernel_idle(page, timeout)


def cell_errors(page) -> list[str]:
    """Texts of error outputs (tracebacks) and of widgets that failed to display, in the open notebook."""
    return page.evaluate(f"() => ({ERROR_OUTPUTS})().map(e => e.textContent.slice(0, 800))")
