#!/usr/bin/env bash
# Command 1: from a fresh clone, install dagmagic with JupyterLab into .venv and open JupyterLab on the first
# tutorial (notebooks/01_quickstart.ipynb), which runs offline: no API key needed.
# Usage: bash quickstart.sh [jupyter lab options, e.g. --port 8899 or --no-browser]
set -euo pipefail

cd "$(dirname "${BASH_SOURCE[0]}")"

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

if [ ! -x .venv/bin/python ]; then
    echo "==> Creating .venv with $("$python" --version)"
    if ! "$python" -m venv .venv; then
        echo "Could not create a virtual environment: on Debian or Ubuntu, 'apt install python3-venv' first." >&2
        exit 1
    fi
fi

echo "==> Installing dagmagic with JupyterLab into .venv (a minute or two the first time)"
.venv/bin/python -m pip install --quiet --disable-pip-version-check -e ".[lab]"

# litellm otherwise fetches its price list from the network each time a kernel imports it
export LITELLM_LOCAL_MODEL_COST_MAP=True
options=()
if [ "$(id -u)" -eq 0 ]; then
    options+=(--allow-root) # a container's root user; Jupyter refuses root without it
fi
echo "==> Opening JupyterLab on notebooks/01_quickstart.ipynb (Ctrl-C twice to stop it)"
exec .venv/bin/jupyter lab notebooks/01_quickstart.ipynb "${options[@]}" "$@"
