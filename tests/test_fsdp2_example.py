"""examples/fsdp2_flce_train.py under torchrun on the CPU (gloo, 2 ranks).

The example never imports inductor_addmm_fix. In CI the package is pip-installed,
so its entry point fires in every rank; to be independent of that, the subprocess
also gets the ``sitecustomize.py`` recipe of docs/activation.md (it imports the
package) from a temp folder, with the checkout root, on PYTHONPATH.

Marked slow (``pytest -m slow``).  Two runs (about 35 s + 20 s on 2 cores, mostly
Inductor's cold compile):
* the fix on: 3 steps with ``--check``; every rank reports the fix active and
  ``addmm.dtype`` lowered by the plugin, rank 0 prints the losses, the check
  against the single-process eager run says PASS, exit 0;
* ``INDUCTOR_ADDMM_FIX=0``, 1 step, no check: the ranks report the fix inactive
  and the run fails (the stock Inductor error), exit non-zero.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time
from pathlib import Path

import pytest

from processes import run_group

pytestmark = [pytest.mark.distributed, pytest.mark.slow]

ROOT = Path(__file__).resolve().parents[1]
EXAMPLE = ROOT / "examples" / "fsdp2_flce_train.py"
TIMEOUT = 300
SCRUBBED = ("PYTHONPATH", "PYTHONSTARTUP", "PYTHONHOME", "PYTHONSAFEPATH", "PYTHONWARNINGS")
SCRUBBED_PREFIXES = ("INDUCTOR_ADDMM_FIX", "TORCH_DEVICE_BACKEND", "TORCHINDUCTOR_", "TORCH_COMPILE", "TORCH_LOGS")
SITECUSTOMIZE = """\
# The recipe of docs/activation.md: the fix in every process, installed or not.
try:
    import inductor_addmm_fix  # noqa: F401
except ImportError:
    pass
"""


@pytest.fixture(scope="module")
def launch(tmp_path_factory):
    site = tmp_path_factory.mktemp("site")
    (site / "sitecustomize.py").write_text(SITECUSTOMIZE)
    cache = tmp_path_factory.mktemp("inductor-cache")

    def run(*args: str, **overrides: str) -> subprocess.CompletedProcess:
        env = {k: v for k, v in os.environ.items() if k not in SCRUBBED and not k.startswith(SCRUBBED_PREFIXES)}
        env.update(
            PYTHONPATH=os.pathsep.join([str(site), str(ROOT)]),
            TORCHINDUCTOR_CACHE_DIR=str(cache),
            OMP_NUM_THREADS="1",
        )
        env.update(overrides)
        command = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node=2",
                   str(EXAMPLE), "--device", "cpu", *args]
        start = time.monotonic()
        # torchrun and its ranks in one process group, killed if the test is interrupted or times out
        result = run_group(command, timeout=TIMEOUT, cwd=ROOT, env=env)
        print(f"{' '.join(command[3:])}: exit {result.returncode} in {time.monotonic() - start:.1f} s")
        return result

    return run


def rank_reports(output: str) -> dict[int, dict]:
    reports = {}
    for match in re.finditer(r"^\[rank (\d+)\] fix (\{.*\})$", output, re.MULTILINE):
        reports[int(match.group(1))] = json.loads(match.group(2))
    return reports


def explain(result: subprocess.CompletedProcess) -> str:
    return f"exit {result.returncode}\n--- stdout\n{result.stdout[-4000:]}\n--- stderr\n{result.stderr[-4000:]}"


def test_two_ranks_compiled_match_eager_with_fix_active(launch):
    result = launch("--steps", "3", "--check")
    out = result.stdout
    assert result.returncode == 0, explain(result)

    reports = rank_reports(out)
    assert sorted(reports) == [0, 1], explain(result)
    for rank, report in reports.items():
        assert report["installed"] is True, (rank, report)
        assert report["activation"] in ("entry-point", ".pth", "import"), (rank, report)
        assert report["error"] is None, (rank, report)
        assert any(k.startswith("addmm.dtype:") and v > 0 for k, v in report["addmm_lowerings"].items()), (rank, report)
    assert "fix active and addmm.dtype lowered on all 2 ranks: yes" in out, explain(result)

    losses = [float(x) for x in re.findall(r"^step \d+: loss (\S+)$", out, re.MULTILINE)]
    assert len(losses) == 3 and all(0 < x < 20 for x in losses), explain(result)
    assert len(re.findall(r"^check step \d+: .* ok$", out, re.MULTILINE)) == 3, explain(result)
    assert out.strip().splitlines()[-1] == "PASS", explain(result)


def test_switched_off_reports_inactive_and_fails(launch):
    result = launch("--steps", "1", INDUCTOR_ADDMM_FIX="0")
    assert result.returncode != 0, explain(result)
    reports = rank_reports(result.stdout)
    assert sorted(reports) == [0, 1], explain(result)
    for rank, report in reports.items():
        assert report["installed"] is False, (rank, report)
        assert report["addmm_lowered"] is False, (rank, report)
    assert "fix active and addmm.dtype lowered on all 2 ranks: NO" in result.stdout, explain(result)
