"""Shared by the tests (not a test file; imports no torch, so that conftest can use it
before torch is imported): child processes and temporary folders that an interrupted
or timed-out run leaves nothing of."""

from __future__ import annotations

import atexit
import os
import shutil
import signal
import subprocess
import tempfile
from pathlib import Path


def run_group(command: list[str], timeout: float, **kwargs) -> subprocess.CompletedProcess:
    """``subprocess.run(command, capture_output=True, text=True, timeout=timeout)``, with
    the command and every process it starts in a process group of their own: when the
    command ends, times out or the test is interrupted, the whole group is killed, so
    that no grandchild (a worker of a script) is left running."""
    process = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                               start_new_session=True, **kwargs)
    try:
        stdout, stderr = process.communicate(timeout=timeout)
        return subprocess.CompletedProcess(command, process.returncode, stdout, stderr)
    finally:
        kill_group(process.pid)
        process.communicate()


def kill_group(pgid: int) -> None:
    """SIGKILL every process of a process group still alive (none: nothing happens)."""
    try:
        os.killpg(pgid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass


def children(pid: int) -> list[int]:
    """The live child processes of ``pid`` (Linux: read from /proc)."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(fields[1]) == pid and fields[0] != "Z":  # ppid; a zombie has exited
            found.append(int(entry.name))
    return found


def alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state != "Z"


def private_dir(prefix: str) -> str:
    """A new temporary folder named ``<prefix>pid<pid>-...``, removed when this process
    exits, also by SIGTERM (turned into KeyboardInterrupt where nothing else handles it,
    so that pytest stops cleanly and ``atexit`` runs).  Folders of the same prefix left
    by processes that no longer exist (killed with SIGKILL) are removed first."""
    root = Path(tempfile.gettempdir())
    for old in root.glob(f"{prefix}*"):
        owner = old.name[len(prefix):].split("-", 1)[0]
        if owner.startswith("pid") and owner[3:].isdigit() and not alive(int(owner[3:])) and old.is_dir():
            shutil.rmtree(old, ignore_errors=True)
    path = tempfile.mkdtemp(prefix=f"{prefix}pid{os.getpid()}-")
    atexit.register(shutil.rmtree, path, ignore_errors=True)
    if signal.getsignal(signal.SIGTERM) is signal.SIG_DFL:
        signal.signal(signal.SIGTERM, _interrupt)
    return path


def _interrupt(signum, frame):
    raise KeyboardInterrupt(f"signal {signum}")
