"""A run that is interrupted or times out leaves nothing behind: no worker of the
OpInfo parity script, no grandchild of a command a test runs, no private temporary
folder of the test session (Linux: processes are found in /proc)."""

from __future__ import annotations

import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from processes import alive, children, run_group

ROOT = Path(__file__).resolve().parents[1]
pytestmark = pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="finds processes in /proc")


def wait_for(condition, timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.05)


def test_the_parity_script_stops_its_workers_when_terminated(tmp_path):
    script = subprocess.Popen(
        [sys.executable, str(ROOT / "scripts" / "opinfo_parity.py"), "--ops", "^mm$", "--jobs", "2", "--out", str(tmp_path)],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True,
    )
    try:
        wait_for(lambda: len(children(script.pid)) == 2)
        workers = children(script.pid)
        script.send_signal(signal.SIGTERM)
        assert script.wait(timeout=60) != 0
        wait_for(lambda: not any(alive(pid) for pid in workers), timeout=10)
    finally:
        script.kill()
        script.wait()


def test_a_sigterm_while_the_parity_jobs_start_leaves_no_job_behind(monkeypatch):
    """SIGTERM between a job's fork and its Popen's return (the second job's, here) is
    held until the job is among those the cleanup kills: no job outlives the script."""
    import importlib.util
    import os

    spec = importlib.util.spec_from_file_location("opinfo_parity_script", ROOT / "scripts" / "opinfo_parity.py")
    parity = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(parity)
    started = []
    stock_popen = subprocess.Popen

    def popen_then_sigterm(command, **kwargs):
        job = stock_popen(command, **kwargs)
        started.append(job.pid)
        if len(started) == 2:
            os.kill(os.getpid(), signal.SIGTERM)  # arrives before this Popen returns
        return job

    monkeypatch.setattr(parity.subprocess, "Popen", popen_then_sigterm)
    sleeper = [sys.executable, "-c", "import time; time.sleep(120)"]
    try:
        with pytest.raises(SystemExit):
            parity.run_jobs([sleeper, sleeper, sleeper], env=dict(os.environ))
        assert len(started) >= 2 and not any(alive(pid) for pid in started)
    finally:
        for pid in started:  # what a failure left
            if alive(pid):
                os.kill(pid, signal.SIGKILL)


#: A command that starts a child (writing its pid to the file argv[1]) and waits.
PARENT = """
import subprocess, sys, time
child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)"])
open(sys.argv[1], "w").write(str(child.pid))
time.sleep(120)
"""


def test_a_command_that_times_out_is_killed_with_every_process_it_started(tmp_path):
    pid_file = tmp_path / "pid"
    with pytest.raises(subprocess.TimeoutExpired):
        run_group([sys.executable, "-c", PARENT, str(pid_file)], timeout=5)
    grandchild = int(pid_file.read_text())
    wait_for(lambda: not alive(grandchild), timeout=10)


# Python's own SIGINT handling, as an interactive session has it: a process started by a
# background job (``cmd &`` in a script) inherits SIGINT ignored, and so would this one.
PRIVATE_DIR = """
import signal, sys, time
signal.signal(signal.SIGINT, signal.default_int_handler)
sys.path.insert(0, "tests")
from processes import private_dir
print(private_dir("inductor-addmm-fix-test-"), flush=True)
time.sleep(120)
"""


@pytest.mark.parametrize("how", [signal.SIGTERM, signal.SIGINT], ids=["SIGTERM", "SIGINT"])
def test_a_private_folder_is_removed_when_its_process_is_interrupted(how):
    process = subprocess.Popen([sys.executable, "-c", PRIVATE_DIR], cwd=ROOT, stdout=subprocess.PIPE,
                               stderr=subprocess.DEVNULL, text=True)
    try:
        folder = Path(process.stdout.readline().strip())
        assert folder.is_dir()
        process.send_signal(how)
        process.wait(timeout=30)
        assert not folder.exists()
    finally:
        process.kill()
        process.wait()


def test_a_private_folder_left_by_a_killed_process_is_removed_by_the_next_one():
    first = subprocess.Popen([sys.executable, "-c", PRIVATE_DIR], cwd=ROOT, stdout=subprocess.PIPE,
                             stderr=subprocess.DEVNULL, text=True)
    folder = Path(first.stdout.readline().strip())
    first.kill()  # SIGKILL: no atexit
    first.wait()
    assert folder.is_dir()
    second = subprocess.Popen([sys.executable, "-c", PRIVATE_DIR], cwd=ROOT, stdout=subprocess.PIPE,
                              stderr=subprocess.DEVNULL, text=True)
    try:
        second.stdout.readline()
        assert not folder.exists()
    finally:
        second.kill()
        second.wait()
