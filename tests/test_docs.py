"""The docs live in the repository: README's link table names pages that exist, every page is in
the site's navigation, every repository file a page names exists, the site builds strictly and
renders in headless Chromium, and no code or test cites a design document outside the repository
or an issue number (a reader who clones the project has neither)."""

from __future__ import annotations

import functools
import http.server
import os
import re
import shutil
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

from tests.conftest import REPO
from tests.test_site import _chromium

DOCS = REPO / "docs"
CITATION = re.compile(r"DESIGN\.md|(?i:\bissues?\s*#?\d+)")
SCANNED = ("suite", "tests", "benchmarks", "analysis")
TEXT = {".py", ".md", ".ipynb", ".yaml", ".yml", ".toml", ".json", ".txt", ".cfg"}
# Stored records kept verbatim (a study made by older code, with its own provenance strings): a
# fixture must stay what that code wrote, so what it says is data, not a citation.
VERBATIM = {REPO / "tests" / "fixtures"}
REPO_PATH = re.compile(
    r"`((?:suite|tests|benchmarks|analysis|tasks|sweeps|docs)/[\w./-]+\.(?:py|md|yaml|json|ipynb))`"
)
TEST_FILE = re.compile(r"`(test_\w+\.py)`")


def _scanned_files() -> Iterator[Path]:
    for top in SCANNED:
        for path in sorted((REPO / top).rglob("*")):
            if path.suffix not in TEXT or "__pycache__" in path.parts or path == Path(__file__).resolve():
                continue
            if any(path.is_relative_to(folder) for folder in VERBATIM):
                continue
            yield path
    yield from (REPO / name for name in ("Makefile", "pyproject.toml", "mkdocs.yml", "README.md"))
    yield from sorted(DOCS.glob("*.md"))


def test_no_code_test_or_doc_cites_design_md_or_an_issue_number() -> None:
    found = [
        f"{path.relative_to(REPO)}:{number}: {line.strip()}"
        for path in _scanned_files()
        for number, line in enumerate(path.read_text(errors="replace").splitlines(), 1)
        if CITATION.search(line)
    ]
    advice = "cite a docs page (e.g. 'docs/design.md, Seeds') or say it in words:\n"
    assert not found, advice + "\n".join(found)


def test_the_citation_pattern_catches_what_it_is_meant_to() -> None:
    hits = ["(DESIGN.md section 4)", "since issue 22", "Issue #19", "issues 20 and 21"]
    misses = ["docs/design.md, Seeds", "transformers#22037", "the rerun issue", "issued 3 jobs"]
    assert all(CITATION.search(text) for text in hits)
    assert not any(CITATION.search(text) for text in misses)


def _readme_pages() -> list[str]:
    return re.findall(r"\]\((docs/[\w-]+\.md)\)", (REPO / "README.md").read_text())


def _nav_pages() -> list[str]:
    def walk(entries: list) -> Iterator[str]:
        for entry in entries:
            value = next(iter(entry.values())) if isinstance(entry, dict) else entry
            yield from walk(value) if isinstance(value, list) else [value]

    config = yaml.safe_load((REPO / "mkdocs.yml").read_text())
    return list(walk(config["nav"]))


def test_readme_links_every_docs_page_and_each_is_in_the_site_nav() -> None:
    linked = _readme_pages()
    assert linked and all((REPO / page).is_file() for page in linked), linked
    pages = {f"docs/{p.name}" for p in DOCS.glob("*.md")}
    assert set(linked) == pages, f"README's link table and docs/ differ: {set(linked) ^ pages}"
    assert {f"docs/{p}" for p in _nav_pages()} == pages


def test_the_readme_stays_short() -> None:
    assert len((REPO / "README.md").read_text().splitlines()) <= 300


def test_every_repository_file_the_docs_name_exists() -> None:
    tests = {p.name for p in (REPO / "tests").rglob("test_*.py")}
    missing = []
    for page in [REPO / "README.md", *sorted(DOCS.glob("*.md"))]:
        text = page.read_text()
        missing += [f"{page.name}: {p}" for p in REPO_PATH.findall(text) if not (REPO / p).exists()]
        missing += [f"{page.name}: {name}" for name in TEST_FILE.findall(text) if name not in tests]
    assert not missing, missing


def _mkdocs(root: Path, site: Path) -> subprocess.CompletedProcess:
    """`mkdocs build --strict` of root/mkdocs.yml into `site`, as `make test` runs it."""
    pytest.importorskip("mkdocs", reason="the docs tool is in the dev extra: pip install -e '.[dev]'")
    # Not --quiet: it silences the warnings that strict mode counts, and the build then passes.
    command = [sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(site)]
    env = {**os.environ, "NO_MKDOCS_2_WARNING": "1"}
    return subprocess.run(command, cwd=root, capture_output=True, text=True, env=env)


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder = tmp_path_factory.mktemp("docs-site")
    built = _mkdocs(REPO, folder)
    assert built.returncode == 0, built.stdout + built.stderr
    return folder


def test_a_dead_link_a_missing_anchor_or_an_unlisted_page_fails_the_build(tmp_path: Path) -> None:
    shutil.copytree(DOCS, tmp_path / "docs")
    shutil.copy(REPO / "mkdocs.yml", tmp_path)
    home = tmp_path / "docs" / "index.md"
    home.write_text(home.read_text() + "\n[a](gone.md) [b](guarantees.md#no-such-heading)\n")
    (tmp_path / "docs" / "unlisted.md").write_text("# Not in nav\n")
    built = _mkdocs(tmp_path, tmp_path / "site")
    assert built.returncode != 0
    for culprit in ("gone.md", "#no-such-heading", "unlisted.md"):
        assert culprit in built.stderr, built.stderr


def test_the_site_builds_strictly_with_a_page_per_doc(site: Path) -> None:
    for page in DOCS.glob("*.md"):
        html = site / ("index.html" if page.stem == "index" else f"{page.stem}/index.html")
        assert html.is_file(), html


class _Quiet(http.server.SimpleHTTPRequestHandler):
    def log_message(self, *args: object) -> None:  # no access log on stderr
        pass


@pytest.fixture
def served(site: Path) -> Iterator[str]:
    """The built site over HTTP on a free local port (directory URLs need a server, as when hosted)."""
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), functools.partial(_Quiet, directory=str(site)))
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}/"
    server.shutdown()
    thread.join()


def test_the_docs_pages_render_in_chromium(served: str) -> None:
    executable = _chromium()
    if executable is None:
        pytest.skip("no chromium binary found (CI installs Debian's chromium in .ci/run)")
    from playwright.sync_api import sync_playwright

    failures: list[str] = []
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=executable, args=["--no-sandbox"])
        view = browser.new_page()
        view.on("response", lambda r: failures.append(f"{r.status} {r.url}") if r.status >= 400 else None)
        # A request the page's own navigation cancels (the search worker's script as the next page
        # loads) is aborted, not missing: a missing file is a 404 response, caught above.
        aborted = "net::ERR_ABORTED"
        view.on("requestfailed", lambda r: r.failure == aborted or failures.append(f"failed {r.url}"))
        view.on("pageerror", lambda e: failures.append(str(e)))
        hosts: list[str] = []
        view.on("request", lambda r: hosts.append(r.url))

        def title() -> str:  # the page's h1, without the permalink sign beside it
            return view.locator("article h1").inner_text().replace("\u00b6", "").strip()

        assert view.goto(served).ok
        assert title() == "suite"
        nav = [t.strip() for t in view.locator("nav.md-nav--primary a.md-nav__link").all_inner_texts()]
        for page in ("Guarantees", "Task YAML", "Statistics", "Design notes"):
            assert page in nav, nav

        # A link in the home page's table leads to its page, and that page's own anchors exist.
        view.locator("article table a", has_text="Guarantees").first.click()
        view.wait_for_load_state()
        assert view.url == served + "guarantees/"
        assert title() == "Guarantees"
        assert view.locator("article h2#growing-a-study").count() == 1
        assert view.locator("article table tbody tr").count() == 6  # the six outcomes

        # A link across pages with an anchor lands on that heading.
        assert view.goto(served + "comparisons/").ok
        view.locator("article a[href$='statistics/#tests-and-the-runs-they-need']").first.click()
        view.wait_for_load_state()
        assert view.url == served + "statistics/#tests-and-the-runs-they-need"
        assert view.locator("article h2#tests-and-the-runs-they-need").is_visible()
        table = view.locator("xpath=//h2[@id='tests-and-the-runs-they-need']/following::table[1]")
        assert table.locator("tbody tr").count() >= 10 and table.is_visible()
        browser.close()
    assert not failures, failures
    assert all(url.startswith(served) for url in hosts), [u for u in hosts if not u.startswith(served)]
