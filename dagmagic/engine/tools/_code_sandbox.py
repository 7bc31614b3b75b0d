"""The ``python`` tool's sandbox: bubblewrap (``bwrap``), where it can run.

A sandboxed script gets namespaces of its own (``--unshare-all``): a PID namespace, in which no process of the
machine is visible (not the kernel, its environment or its command line) and whose init, which the script
cannot kill, takes every process of the namespace with it when the script's supervisor ends; a network
namespace with nothing but its own loopback, unless the network is allowed (``DAG_CODE_NETWORK=1``); and a
mount namespace with a read-only view of the system, a fresh ``/proc`` and ``/dev``, empty read-only ``/tmp``,
``/var/tmp`` and ``/run`` (the sockets of the user's session live there: an ssh agent, the session bus, which
could start a process outside the sandbox), Jupyter's runtime directory (the kernels' connection files and
the server's tokens) and the usual credential files in the user's home (``~/.ssh``, ``~/.aws``, ``~/.netrc``...)
hidden; the rest of the home stays readable (the user's data is what scripts are for). The working directory is
the one place it can write. Every capability is dropped and no setuid program gains privileges, so none of this
can be undone from inside.

Whether bubblewrap can run is probed once per process (a missing ``bwrap``, or user namespaces the system
refuses): ``sandbox_problem()`` says why not, and the tool then runs scripts without a sandbox.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

__all__ = ["BWRAP", "sandbox_problem", "sandboxed"]

BWRAP = "bwrap"
"""The bubblewrap command, looked up on PATH."""
_PROBE_SECONDS = 10.0
_HIDDEN = (Path("/tmp"), Path("/var/tmp"), Path("/run"))
"""Replaced by empty read-only directories: the scratch space and the sockets of the machine's users."""
_CREDENTIALS = (
    ".ssh", ".gnupg", ".aws", ".azure", ".kube", ".docker", ".config/gcloud", ".config/gh", ".netrc",
    ".git-credentials", ".pypirc", ".npmrc", ".pgpass", ".vault-token",
)  # fmt: skip
"""Where the user's keys usually live, relative to home: hidden (what a script prints reaches the model)."""

_problems: dict[str, str | None] = {}


def sandbox_problem() -> str | None:
    """None when bubblewrap can sandbox a script here; else why it cannot. Probed once per process."""
    if BWRAP not in _problems:
        _problems[BWRAP] = _probe(BWRAP)
    return _problems[BWRAP]


def sandboxed(command: list[str], workdir: Path, *, network: bool) -> list[str]:
    """``command`` run by bubblewrap in ``workdir``, the only directory it may write to.

    Call it only when ``sandbox_problem()`` is None.
    """
    bwrap = shutil.which(BWRAP)
    if bwrap is None:
        raise RuntimeError(f"bubblewrap ({BWRAP}) is gone since it was found; restart the kernel")
    return [*_arguments(bwrap, workdir.resolve(), network), *command]


def _arguments(bwrap: str, workdir: Path, network: bool) -> list[str]:
    arguments = [bwrap, "--unshare-all", "--die-with-parent", "--new-session", "--cap-drop", "ALL"]
    if network:
        arguments.append("--share-net")
    arguments += ["--ro-bind", "/", "/", "--dev", "/dev", "--proc", "/proc"]
    needed = {*_python_directories(), *([_resolver_configuration()] if network else [])}
    credentials = _credentials(workdir, needed)
    hidden = [path for path in (*_HIDDEN, _jupyter_runtime_directory()) if path is not None and path.is_dir()]
    hidden += [path for path in credentials if path.is_dir()]
    for directory in hidden:
        arguments += ["--tmpfs", str(directory)]
    for file in (path for path in credentials if not path.is_dir()):
        arguments += ["--ro-bind", "/dev/null", str(file)]
    for path in sorted(path for path in needed if any(path.is_relative_to(other) for other in hidden)):
        arguments += ["--ro-bind", str(path), str(path)]  # what the script needs from a hidden directory
    arguments += ["--bind", str(workdir), str(workdir), "--chdir", str(workdir)]
    for directory in hidden:  # last: the mount points above are made in these directories
        arguments += ["--remount-ro", str(directory)]
    return [*arguments, "--"]


def _credentials(workdir: Path, needed: set[Path]) -> list[Path]:
    """The usual credential files and directories in the user's home that exist, and that neither the working
    directory nor what the script needs to run sits in.
    """
    home = Path.home()
    found = [(home / name).resolve() for name in _CREDENTIALS if (home / name).exists()]
    return [path for path in found if not any(kept.is_relative_to(path) for kept in (workdir, *needed))]


def _python_directories() -> set[Path]:
    """Where the interpreter, its standard library and the supervisor live: a virtual environment in /tmp too."""
    prefixes = {sys.prefix, sys.base_prefix, sys.exec_prefix, sys.base_exec_prefix}
    directories = {Path(prefix).resolve() for prefix in prefixes} | {Path(sys.executable).resolve().parent}
    return directories | {Path(__file__).resolve().parent}  # the supervisor's


def _resolver_configuration() -> Path:
    """What /etc/resolv.conf points at (under /run where systemd-resolved writes it): names resolve."""
    return Path("/etc/resolv.conf").resolve()


def _jupyter_runtime_directory() -> Path | None:
    try:
        from jupyter_core.paths import jupyter_runtime_dir
    except ImportError:
        return None
    return Path(jupyter_runtime_dir()).resolve()


def _probe(command: str) -> str | None:
    """Start a Python in a sandbox as scripts are started; None when it ran, else what went wrong."""
    if not sys.platform.startswith("linux"):
        return "bubblewrap, the sandbox used here, runs on Linux only"
    bwrap = shutil.which(command)
    if bwrap is None:
        return (
            f"bubblewrap is not installed (`{command}` is not on PATH; on Debian or Ubuntu: apt-get install bubblewrap)"
        )
    with tempfile.TemporaryDirectory(prefix="dagmagic-sandbox-probe-") as directory:
        try:
            finished = subprocess.run(
                [*_arguments(bwrap, Path(directory).resolve(), False), sys.executable, "-I", "-c", "pass"],
                stdin=subprocess.DEVNULL,
                capture_output=True,
                text=True,
                timeout=_PROBE_SECONDS,
            )
        except subprocess.TimeoutExpired:
            return f"bubblewrap did not start a sandbox within {_PROBE_SECONDS:g}s"
        except OSError as exc:
            return f"bubblewrap ({bwrap}) could not be started: {exc}"
    if finished.returncode != 0:
        said = finished.stderr.strip().splitlines()
        return f"bubblewrap cannot make a sandbox here ({said[-1] if said else f'exit code {finished.returncode}'})"
    return None
