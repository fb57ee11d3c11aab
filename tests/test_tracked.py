"""Nothing built is tracked: no wheel, archive or file over 1 MB in git (`.gpu/`, which
`python -m benchmarks.gpu_check prepare` builds, once made up most of the repository's pack)."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
BUILT = (".whl", ".tar", ".tar.gz", ".tgz", ".tar.xz", ".zip", ".egg", ".safetensors", ".bin", ".pt")


def test_git_tracks_no_wheel_archive_or_large_file() -> None:
    listed = subprocess.run(["git", "ls-files", "-z"], cwd=REPO, capture_output=True)
    if listed.returncode != 0:
        pytest.skip("not a git checkout (an unpacked sdist): nothing is tracked")
    files = [REPO / name for name in listed.stdout.decode().split("\0") if name]
    built = [str(f.relative_to(REPO)) for f in files if f.name.endswith(BUILT)]
    large = [str(f.relative_to(REPO)) for f in files if f.is_file() and f.stat().st_size > 1_000_000]
    assert not built and not large, (built, large)
    ignored = subprocess.run(["git", "check-ignore", "-q", ".gpu/run.sh"], cwd=REPO)
    assert ignored.returncode == 0  # the prepared check's folder is ignored, by a rule of its own
