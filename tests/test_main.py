"""``python -m dagmagic``: the demo runs offline in a terminal; without a command, the usage."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def run_module(*arguments: str) -> subprocess.CompletedProcess[str]:
    # no provider key and an Ollama address nothing answers: the demo must need neither
    environment = {
        name: value
        for name, value in os.environ.items()
        if not name.startswith("DAG_") and not name.endswith("_API_KEY") and not name.startswith("OLLAMA_")
    }
    environment.update(PYTHONIOENCODING="utf-8", OLLAMA_HOST="127.0.0.1:9")
    return subprocess.run(
        [sys.executable, "-m", "dagmagic", *arguments],
        capture_output=True,
        text=True,
        encoding="utf-8",
        cwd=ROOT,
        env=environment,
        check=False,
    )


def test_demo_prints_each_step_the_replan_and_the_answer() -> None:
    done = run_module("demo")
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert lines[0] == "Goal: Which city has more inhabitants per square kilometre, Paris or Berlin, and by how much?"
    for expected in (
        "[round 1] s1 completed",
        "[round 1] s2 completed",
        "[round 1] s3 failed: RuntimeError: the area source for Berlin is unavailable",
        "[round 1] s4 skipped: Skipped — dependency s3 failed",
        "[round 2] s2 completed",
        "Paris is far denser: about 19,950 inhabitants per km² against 4,210 in Berlin, so roughly 4.7 times as "
        "many people per square kilometre.",
        # issue 41: the answer's Markdown table, as a terminal shows it: aligned, numbers to the right
        "city    inhabitants  area (km²)  per km²",
        "------  -----------  ----------  -------",
        "Paris     2,102,650       105.4   19,949",
        "Berlin    3,755,251       891.1    4,214",
    ):
        assert expected in lines, f"{expected!r} missing from:\n{done.stdout}"
    assert "**" not in done.stdout and "|" not in done.stdout  # no raw Markdown
    replanned = next(index for index, line in enumerate(lines) if line.startswith("[round 1] replanning: "))
    assert lines.index("[round 1] s4 skipped: Skipped — dependency s3 failed") < replanned
    assert replanned < lines.index("[round 2] s1 started (demo-model)")
    assert lines[-1] == "[done] achieved=True confidence=0.92"
    assert done.stderr == ""


def test_without_a_command_the_usage_names_demo() -> None:
    done = run_module()
    assert done.returncode == 2
    assert done.stderr.startswith("usage: python -m dagmagic [-h] COMMAND ...")
    assert "required: COMMAND" in done.stderr


def test_help_lists_demo() -> None:
    done = run_module("--help")
    assert done.returncode == 0
    assert re.search(r"demo +watch a whole run offline", done.stdout)


def test_the_demo_help_names_the_magic_it_mirrors() -> None:
    done = run_module("demo", "--help")
    assert done.returncode == 0
    assert "Run the scripted demo of `%dag demo` in this terminal" in done.stdout


FIRST_SIGNS = """
import runpy, sys

class Marker:
    '''Prints a line when one of the heavy imports starts, so its order among the demo's lines shows.'''

    def find_spec(self, name, path=None, target=None):
        if name in ("litellm", "dagmagic.engine"):
            print(f"<importing {name}>", flush=True)
        return None

sys.meta_path.insert(0, Marker())
sys.argv = ["dagmagic", "demo"]
runpy.run_module("dagmagic", run_name="__main__", alter_sys=True)
"""


def test_the_demo_shows_the_goal_and_the_planning_before_the_engine_loads_and_never_loads_litellm() -> None:
    environment = {name: value for name, value in os.environ.items() if not name.startswith("DAG_")}
    environment["PYTHONIOENCODING"] = "utf-8"
    done = subprocess.run(
        [sys.executable, "-c", FIRST_SIGNS],
        capture_output=True,
        text=True,
        encoding="utf-8",
        cwd=ROOT,
        env=environment,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    lines = [line for line in done.stdout.splitlines() if line]
    # the goal is on screen before the engine's imports (seconds in an environment not compiled yet)
    assert lines[0].startswith("Goal: Which city"), done.stdout
    assert lines.index("<importing dagmagic.engine>") > 0, done.stdout
    # then what the run does while the scripted planner writes (1.2 s): the plan is coming
    first_event = next(line for line in lines if line.startswith("["))
    assert first_event == "[round 1] planning…", done.stdout
    assert lines.index(first_event) < lines.index("[round 1] s1 started (demo-model)")
    # a scripted model needs no litellm (seconds of CPU to import)
    assert "<importing litellm>" not in lines, done.stdout
