"""`suite report RUN_DIR`: fill the shipped analysis/ notebook template, execute it headless with a
Jupyter kernel (nbclient), and save the executed .ipynb and an HTML export next to the results."""

from __future__ import annotations

import copy
import tempfile
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from suite.config.resources import shipped_dir
from suite.errors import SuiteError
from suite.outputs.entries import ENTRY_FIGURES

TEMPLATE = shipped_dir("analysis") / "variance_report.ipynb"  # shipped inside the wheel too


def make_report(
    run_dir: Path, template: Path = TEMPLATE, timeout_s: int = 600, entry_figures: int = ENTRY_FIGURES
) -> tuple[Path, Path]:
    """Execute the report over `run_dir`: a figure per entry for at most `entry_figures` entries
    (0: all; past it each size's best-ranked, suite.outputs.entries), every entry in the tables."""
    import nbformat

    from suite.outputs.board_inputs import current

    run_dir = Path(run_dir).resolve()
    if not (run_dir / "trials.jsonl").is_file():
        raise SuiteError(f"{run_dir}: no trials.jsonl here (expected a runs/<task>/<model> folder)")
    if not template.is_file():
        raise SuiteError(f"{template}: report template not found")
    with _started_kernel(run_dir, template) as kernel:  # it starts while the parent reads
        board = run_dir / "leaderboard.json"
        if not current(board, [run_dir]):  # as `run` wrote it from these trials with this code, or anew
            from suite.outputs.leaderboard import write_leaderboard

            write_leaderboard([run_dir], board)
        notebook = nbformat.read(template, as_version=4)
        for cell in notebook.cells:  # papermill-style: the `parameters` cell gets the run folder
            if "parameters" in cell.get("metadata", {}).get("tags", []):
                cell.source = f"RUN_DIR = {str(run_dir)!r}\nENTRY_FIGURES = {int(entry_figures)}"
        # the HTML exporter is made and warmed on the unexecuted template while the kernel runs the
        # cells: the parent only waits on the kernel then, and its imports and first render cost 0.6 s
        with ThreadPoolExecutor(max_workers=1) as pool:
            warmed = pool.submit(_warm_exporter, copy.deepcopy(notebook))
            _run_cells(notebook, kernel, run_dir, timeout_s, template)
            exporter = warmed.result()
    executed = run_dir / "report.ipynb"
    nbformat.write(notebook, executed)
    html, _ = exporter.from_notebook_node(notebook)
    page = run_dir / "report.html"
    page.write_text(html, encoding="utf-8")
    return executed, page


@contextmanager
def _started_kernel(run_dir: Path, template: Path) -> Iterator[Any]:
    """A python3 kernel started in the run folder, reached over Unix sockets in a private folder
    (IPC), not local TCP ports: nothing listens on the network, and ipykernel prints no "running
    over TCP without encryption" warning before the report's own lines. Started first, its half
    second of start-up runs beside the parent's reading; killed on the way out, however it ends."""
    from jupyter_client import AsyncKernelManager
    from jupyter_client.kernelspec import NoSuchKernel
    from jupyter_core.utils import run_sync
    from traitlets.config import Config

    with tempfile.TemporaryDirectory(prefix="suite-kernel-") as sockets:
        ipc = Config({"KernelManager": {"transport": "ipc", "ip": str(Path(sockets) / "kernel")}})
        kernel = AsyncKernelManager(kernel_name="python3", config=ipc)
        try:  # history in memory, as nbclient starts a kernel: nothing written to ~/.ipython
            run_sync(kernel.start_kernel)(
                cwd=str(run_dir), extra_arguments=["--HistoryManager.hist_file=:memory:"]
            )
        except NoSuchKernel:
            raise SuiteError(_NO_KERNEL.format(template=template.name)) from None
        try:
            yield kernel
        finally:
            if run_sync(kernel.is_alive)():
                run_sync(kernel.shutdown_kernel)(now=True)
            run_sync(kernel.cleanup_resources)()


_NO_KERNEL = "{template}: no 'python3' Jupyter kernel is installed (pip install ipykernel)"


def _run_cells(notebook: Any, kernel: Any, run_dir: Path, timeout_s: int, template: Path) -> None:
    """Execute the notebook, each way it can fail one line naming the template (a missing kernel
    fails before, as `_started_kernel` starts it)."""
    from nbclient.exceptions import CellExecutionError, CellTimeoutError, DeadKernelError

    try:
        _execute(notebook, kernel, run_dir, timeout_s)
    except CellExecutionError as err:
        raise SuiteError(
            f"{template.name}: a report cell failed: {str(err).strip().splitlines()[-1]}"
        ) from None
    except CellTimeoutError:  # nbclient's own message spans the cell's source: one line here
        raise SuiteError(
            f"{template.name}: a report cell ran past the {timeout_s} s timeout; no report written"
        ) from None
    except DeadKernelError:
        raise SuiteError(
            f"{template.name}: the Jupyter kernel died while running the report (out of memory?); "
            "no report written"
        ) from None


def _execute(notebook: Any, kernel: Any, run_dir: Path, timeout_s: int) -> None:
    """Run every cell in the started kernel, which nbclient kills once they have run: a graceful
    shutdown waits a second on it, and nothing it would do on its way out is kept."""
    from nbclient import NotebookClient

    client = NotebookClient(
        notebook,
        km=kernel,
        timeout=timeout_s,
        kernel_name="python3",
        resources={"metadata": {"path": str(run_dir)}},
        shutdown_kernel="immediate",
    )
    client.execute(cleanup_kc=True)


# nbconvert's lab page without the scripts it fetches from a CDN (require.js, MathJax, mermaid):
# the report has no math, widget or diagram, and opens offline like the site, with no request.
_OFFLINE_PAGE = """{%- extends 'lab/index.html.j2' -%}
{%- block html_head_js -%}{%- endblock html_head_js -%}
{%- block html_head_js_mathjax -%}{%- endblock html_head_js_mathjax -%}
{%- block html_head_js_mermaidjs -%}{%- endblock html_head_js_mermaidjs -%}
"""


def _warm_exporter(template: Any) -> Any:
    """The HTML exporter, its templates, markdown and highlighting readied by exporting the
    unexecuted template once (the first export of a notebook costs twice the next)."""
    from jinja2 import DictLoader
    from nbconvert import HTMLExporter

    loader = DictLoader({"offline.html.j2": _OFFLINE_PAGE})
    exporter = HTMLExporter(extra_loaders=[loader], template_file="offline.html.j2")
    exporter.from_notebook_node(template)
    return exporter
