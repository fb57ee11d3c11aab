"""Provenance helpers: content hashes of files and folders, and the suite's git commit."""

from __future__ import annotations

import hashlib
import subprocess
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent

# (path, size, mtime_ns) -> sha256: a file is read once per process unless it changes.
_DIGESTS: dict[tuple[str, int, int], str] = {}


def file_sha256(path: str | Path) -> str | None:
    """sha256 of a local file's content; None for hub sources (not a local file)."""
    path = Path(path)
    if not path.is_file():
        return None
    stat = path.stat()
    key = (str(path.resolve()), stat.st_size, stat.st_mtime_ns)
    if key not in _DIGESTS:
        digest = hashlib.sha256()
        with path.open("rb") as handle:
            for block in iter(lambda: handle.read(1 << 20), b""):
                digest.update(block)
        _DIGESTS[key] = digest.hexdigest()
    return _DIGESTS[key]


def folder_sha256(folder: str | Path, patterns: tuple[str, ...]) -> str:
    """One hash over the named files of a folder (e.g. a local model's config and weights)."""
    folder = Path(folder)
    digest = hashlib.sha256()
    for path in sorted(p for pattern in patterns for p in folder.glob(pattern) if p.is_file()):
        digest.update(f"{path.relative_to(folder)}:{file_sha256(path)}\n".encode())
    return digest.hexdigest()


def git_commit() -> str | None:
    """The commit of the suite's checkout (None when installed without git)."""
    try:
        out = subprocess.run(
            ["git", "-C", str(REPO), "rev-parse", "HEAD"], capture_output=True, text=True, timeout=5
        )
    except (OSError, subprocess.TimeoutExpired):
        return None
    return out.stdout.strip() or None if out.returncode == 0 else None
