"""What the installed package costs a process that imports torch and never compiles:
the wall time of ``python -c "import torch"`` in fresh interpreters, with the package on
(``INDUCTOR_ADDMM_FIX`` unset), off (``INDUCTOR_ADDMM_FIX=0``: the ``.pth`` line and the
entry point return at once) and not activated at all (``python -S`` with the
site-packages folders put on ``sys.path`` by hand, so that no ``.pth`` line runs, and
``TORCH_DEVICE_BACKEND_AUTOLOAD=0``, so that no entry point runs: nearly as if
uninstalled; the other ``.pth`` lines of the environment do not run either).

The arms alternate, run after run, so that a change in the machine's load falls on all
of them alike; each prints its median.  It also checks that ``torch._dynamo`` and
``torch._inductor`` stay unimported with the package on, and times the activation alone
inside a process (torch imported with the package off, then the entry point's call),
which the noise of whole interpreters hides.

    python benchmarks/startup.py              # 11 runs of each arm
    python benchmarks/startup.py --runs 21
"""

from __future__ import annotations

import argparse
import json
import os
import site
import statistics
import subprocess
import sys
import time

#: What each fresh interpreter runs: import torch, then say which heavy modules came with it.
CODE = (
    "import torch, sys, json; "
    "print(json.dumps([m for m in ('torch._dynamo', 'torch._inductor') if m in sys.modules]))"
)
#: The same without any .pth line (``python -S``): ``site`` imported, as at start-up, and
#: this environment's site-packages folders put on sys.path by hand, which runs no .pth line.
BARE = "import site, sys; sys.path += {folders!r}; " + CODE
#: The activation alone, in milliseconds: what the entry point does at `import torch`.
ACTIVATION = """
import os, time
import torch
del os.environ["INDUCTOR_ADDMM_FIX"]
from inductor_addmm_fix.activation import startup
start = time.perf_counter()
startup.activate(startup.ENTRY_POINT)
print((time.perf_counter() - start) * 1000)
"""


def environment(**changes: str | None) -> dict:
    env = {k: v for k, v in os.environ.items() if k not in ("INDUCTOR_ADDMM_FIX", "TORCH_DEVICE_BACKEND_AUTOLOAD")}
    env.update({k: v for k, v in changes.items() if v is not None})
    return env


def arms() -> dict[str, tuple[list[str], dict]]:
    folders = site.getsitepackages()  # this interpreter's: a venv's, where it runs in one
    return {
        "on": ([sys.executable, "-c", CODE], environment()),
        "off": ([sys.executable, "-c", CODE], environment(INDUCTOR_ADDMM_FIX="0")),
        "not activated": ([sys.executable, "-S", "-c", BARE.format(folders=folders)],
                          environment(TORCH_DEVICE_BACKEND_AUTOLOAD="0")),
    }


def timed(command: list[str], env: dict) -> tuple[float, list[str]]:
    """Milliseconds from start to exit of one fresh interpreter, and the heavy modules it imported."""
    start = time.perf_counter()
    result = subprocess.run(command, env=env, capture_output=True, text=True, check=True)
    return (time.perf_counter() - start) * 1000, json.loads(result.stdout.strip().splitlines()[-1])


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--runs", type=int, default=11, help="runs of each arm (at least 9; default 11)")
    args = parser.parse_args()
    if args.runs < 9:
        parser.error("--runs: at least 9")
    commands = arms()
    for command, env in commands.values():  # warm the file cache: the first run of all is slower
        timed(command, env)
    times: dict[str, list[float]] = {name: [] for name in commands}
    heavy: dict[str, set] = {name: set() for name in commands}
    for _ in range(args.runs):
        for name, (command, env) in commands.items():
            ms, modules = timed(command, env)
            times[name].append(ms)
            heavy[name].update(modules)
    activation = [float(subprocess.run([sys.executable, "-c", ACTIVATION], env=environment(INDUCTOR_ADDMM_FIX="0"),
                                       capture_output=True, text=True, check=True).stdout.split()[-1])
                  for _ in range(args.runs)]
    medians = {name: statistics.median(values) for name, values in times.items()}
    print(f"python -c 'import torch', {args.runs} fresh interpreters per arm, alternating ({sys.executable})")
    for name, median in medians.items():
        spread = f"{min(times[name]):.0f}-{max(times[name]):.0f}"
        imported = ", ".join(sorted(heavy[name])) or "neither torch._dynamo nor torch._inductor"
        print(f"  {name:<14} median {median:7.1f} ms  (range {spread} ms; imported {imported})")
    print(f"on - off:           {medians['on'] - medians['off']:+.1f} ms")
    print(f"on - not activated: {medians['on'] - medians['not activated']:+.1f} ms")
    print(f"the activation alone, in process: median {statistics.median(activation):.1f} ms "
          f"(range {min(activation):.1f}-{max(activation):.1f} ms)")
    return 0 if not heavy["on"] else 1


if __name__ == "__main__":
    sys.exit(main())
