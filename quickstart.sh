#!/usr/bin/env bash
# Command 1: from a fresh clone, install dagmagic with JupyterLab into .venv and open JupyterLab on the first
# tutorial, which runs offline: no API key needed.
# Usage: bash quickstart.sh [jupyter lab options, e.g. --port 8899 or --no-browser]
#
# JupyterLab opens in workspace/, a working copy kept out of git: the tutorials are copied to
# workspace/notebooks/ (a tutorial already there is the user's and is left as it is: delete it to get the
# committed one back), beside links to the README and the other documents the tutorials point to. Running and
# saving a tutorial, and the notebooks a user makes there, change no file of the repository.
#
# The install is done with uv when it is on PATH, else with a uv fetched from PyPI into a temporary directory
# (a 20 MB download; it then installs in seconds where pip takes minutes), else with pip. A later start skips
# the install while .venv is up to date: .venv/.dagmagic-installed records what it was made from (pyproject.toml,
# the Python, this directory), so a changed pyproject.toml installs again.
set -euo pipefail

cd "$(dirname "${BASH_SOURCE[0]}")"

stamp=.venv/.dagmagic-installed
# what the install depends on: the dependencies, the environment's Python, and where this clone is (an editable
# install points here)
installed_from() {
    .venv/bin/python -c 'import hashlib, os, sys
print(hashlib.sha256(open("pyproject.toml", "rb").read()).hexdigest(), sys.version.split()[0], os.getcwd())'
}

if [ -x .venv/bin/jupyter ] && [ -f "$stamp" ] && [ "$(installed_from 2>/dev/null)" = "$(cat "$stamp")" ]; then
    echo "==> dagmagic and JupyterLab in .venv are up to date with pyproject.toml: nothing to install"
else
    # the Python to make .venv with (an up-to-date .venv needs none)
    python=""
    for candidate in python3.13 python3.12 python3.11 python3 python; do
        if command -v "$candidate" >/dev/null 2>&1 &&
            "$candidate" -c 'import sys; sys.exit(sys.version_info < (3, 11))' 2>/dev/null; then
            python="$candidate"
            break
        fi
    done
    if [ -z "$python" ]; then
        echo "dagmagic needs Python 3.11 or newer, and none was found on PATH." >&2
        echo "Install one (python.org, 'apt install python3.11 python3.11-venv', 'brew install python@3.12'," >&2
        echo "or 'uv python install 3.12'), then run this again." >&2
        exit 1
    fi

    uv="$(command -v uv || true)"
    fetched_uv="" # a temporary directory, removed when this script ends or execs JupyterLab
    trap '[ -z "$fetched_uv" ] || rm -rf "$fetched_uv"' EXIT
    fetch_uv() { # $1: a Python with pip
        echo "==> Fetching uv from PyPI into a temporary directory, to install with (seconds where pip takes minutes)"
        fetched_uv="$(mktemp -d "${TMPDIR:-/tmp}/dagmagic-uv.XXXXXX")"
        if PIP_ROOT_USER_ACTION=ignore "$1" -m pip install --quiet --disable-pip-version-check \
            --target "$fetched_uv" uv >/dev/null 2>&1 && [ -x "$fetched_uv/bin/uv" ]; then
            uv="$fetched_uv/bin/uv"
        else
            rm -rf "$fetched_uv"
            fetched_uv=""
        fi
    }
    if [ -z "$uv" ] && "$python" -m pip --version >/dev/null 2>&1; then
        fetch_uv "$python"
    fi

    if [ ! -x .venv/bin/python ]; then
        echo "==> Creating .venv with $("$python" --version)"
        # the interpreter by its path (given a version, uv may download a Python of its own); --seed: pip in
        # .venv too, as python -m venv gives it
        interpreter="$("$python" -c 'import sys; print(sys.executable)')"
        if [ -z "$uv" ] || ! "$uv" venv --quiet --seed --python "$interpreter" .venv; then
            rm -rf .venv
            if ! "$python" -m venv .venv; then
                echo "Could not create a virtual environment: on Debian or Ubuntu, 'apt install python3-venv' first." >&2
                exit 1
            fi
        fi
    fi
    if [ -z "$uv" ]; then
        fetch_uv .venv/bin/python
    fi

    rm -f "$stamp"
    if [ -n "$uv" ]; then
        echo "==> Installing dagmagic with JupyterLab into .venv with uv (about 15 s the first time)"
        if ! "$uv" pip install --quiet --python .venv/bin/python -e ".[lab]"; then
            echo "==> uv could not install it; trying pip (a few minutes)"
            .venv/bin/python -m pip install --quiet --disable-pip-version-check -e ".[lab]"
        fi
    else
        echo "==> Installing dagmagic with JupyterLab into .venv with pip (a few minutes the first time)"
        .venv/bin/python -m pip install --quiet --disable-pip-version-check -e ".[lab]"
    fi
    if [ -n "$fetched_uv" ]; then
        rm -rf "$fetched_uv"
        fetched_uv=""
    fi
    installed_from >"$stamp"
fi

# litellm otherwise fetches its price list from the network each time a kernel imports it
export LITELLM_LOCAL_MODEL_COST_MAP=True
options=()
if [ "$(id -u)" -eq 0 ]; then
    options+=(--allow-root) # a container's root user; Jupyter refuses root without it
fi
mkdir -p workspace/notebooks
copied=0
for original in notebooks/[0-9][0-9]_*.ipynb notebooks/*.cassette.jsonl; do
    if [ ! -e "workspace/$original" ]; then
        cp "$original" "workspace/$original"
        copied=$((copied + 1))
    fi
done
# the documents the tutorials link to (../README.md, ../docs/*.md), as links: they stay the repository's own
for document in README.md ARCHITECTURE.md benchmarks; do
    [ -e "workspace/$document" ] || ln -s "../$document" "workspace/$document"
done
# the documentation's pages one by one, not docs/ whole: its tutorials/ are links to the committed notebooks,
# which a user would then edit in place
mkdir -p workspace/docs
for page in docs/*.md docs/images; do
    [ -e "workspace/$page" ] || ln -s "../../$page" "workspace/$page"
done
echo "==> The tutorials' working copy is workspace/notebooks/ ($copied copied now; git ignores workspace/)"

echo "==> Opening JupyterLab on workspace/notebooks/01_quickstart.ipynb (Ctrl-C twice to stop it)"
cd workspace
# root_dir said outright: given a file alone, Jupyter serves the file's folder, and the tutorials' ../README.md
# links would lead nowhere
exec ../.venv/bin/jupyter lab notebooks/01_quickstart.ipynb --ServerApp.root_dir=. "${options[@]}" "$@"
