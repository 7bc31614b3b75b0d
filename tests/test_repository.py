"""What a user's work and the build leave in the clone stays out of git: the tutorials' working copy, the
user's own notebooks beside it, Jupyter's checkpoints, build output and the extra environments CI makes.
"""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


@pytest.mark.parametrize(
    "path",
    [
        "workspace/notebooks/01_quickstart.ipynb",  # a tutorial as quickstart.sh copies it, run and saved
        "workspace/notebooks/my_analysis.ipynb",  # a notebook of the user's own
        "notebooks/.ipynb_checkpoints/01_quickstart-checkpoint.ipynb",
        "dist/dagmagic-0.1.0.tar.gz",
        "build/lib/dagmagic/__init__.py",
        ".venv-tutorials/bin/python",
    ],
)
def test_leftovers_are_ignored(path: str) -> None:
    ignored = subprocess.run(["git", "check-ignore", "--no-index", "-q", path], cwd=ROOT, check=False)
    assert ignored.returncode == 0, f"{path} is not ignored: .gitignore should cover it"


def test_the_tutorials_themselves_are_tracked() -> None:
    ignored = subprocess.run(["git", "check-ignore", "--no-index", "-q", "notebooks/01_quickstart.ipynb"], cwd=ROOT)
    assert ignored.returncode == 1
