#!/usr/bin/env python3
"""Run the CPU test suite on every supported torch release, one venv per release.

    python scripts/matrix.py                      # every release, CI fuzz budget
    python scripts/matrix.py 2.8 2.15             # some releases
    python scripts/matrix.py --fuzz-examples 200  # larger property-test budget
    python scripts/matrix.py --clean              # delete each venv after its run
    python scripts/matrix.py 2.8 2.15 -- -m "not subprocess"   # pytest options after --

Torch comes from a local wheel (``--wheels DIR`` or $MATRIX_WHEELS, no default) when
one there matches the release, else from pip's configured index (``torch==X``; the
2.13.0 CPU wheel is found there).  PyPI's Linux wheels are CUDA builds: ``import
torch`` needs the CUDA libraries they link against even on a machine without a GPU.
Those libraries (the wheel's own ``nvidia-*``/``cuda-toolkit`` requirements, without
triton and cuda-bindings) are installed once per CUDA major version into a shared
folder, and each venv sees them through a ``site-packages/nvidia`` symlink, which is
where torch's RPATH looks.  Everything else torch needs is pure Python.

Prints a table (release, torch, passed, failed, errors, skipped, time) and writes it
to ``<venvs>/results.md``; logs and JUnit XML are kept in ``<venvs>/logs``.
Needs Python 3.11 (the wheels are cp311) and ``packaging``.
"""

from __future__ import annotations

import argparse
import dataclasses
import datetime
import email.parser
import os
import re
import shutil
import subprocess
import sys
import time
import tomllib
import xml.etree.ElementTree as ET
import zipfile
from pathlib import Path

from packaging.markers import default_environment
from packaging.requirements import Requirement

ROOT = Path(__file__).resolve().parent.parent

#: release -> the exact version tested (the latest patch release of each).
RELEASES = {
    "2.8": "2.8.0",
    "2.9": "2.9.1",
    "2.10": "2.10.0",
    "2.11": "2.11.0",
    "2.12": "2.12.1",
    "2.13": "2.13.0",
    "2.14": "2.14.1",
    "2.15": "2.15.0",
}
#: What the tests need besides torch: the project's ``test`` extra (pyproject.toml).
TEST_DEPS = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["optional-dependencies"]["test"]
#: Requirements of a CUDA wheel that CPU tests do not need.
SKIPPED_DEPS = {"triton", "cuda-bindings"}
FUZZ_ENV = "INDUCTOR_ADDMM_FIX_FUZZ_EXAMPLES"


def log(message: str) -> None:
    print(f"[matrix] {message}", flush=True)


def run(cmd: list) -> None:
    """Run a command quietly; show its output only if it fails."""
    log(" ".join(str(c) for c in cmd))
    proc = subprocess.run([str(c) for c in cmd], capture_output=True, text=True)
    if proc.returncode != 0:
        print(proc.stdout[-5000:], proc.stderr[-5000:], sep="\n", file=sys.stderr)
        raise subprocess.CalledProcessError(proc.returncode, cmd)


# ------------------------------------------------------------------ wheels
def find_wheel(wheels: Path | None, version: str) -> Path | None:
    if wheels is None:
        return None
    tag = f"cp{sys.version_info.major}{sys.version_info.minor}"
    for path in sorted(wheels.glob(f"torch-{version}*-{tag}-*.whl")):
        # torch-2.10.0-3-cp311-...: a build tag may follow the version
        if re.match(rf"torch-{re.escape(version)}(\+[^-]+)?(-\d+)?-{tag}-", path.name):
            if zipfile.is_zipfile(path):
                return path
            print(f"ignoring {path}: not a wheel (truncated download?)", file=sys.stderr)
    return None


def wheel_requirements(wheel: Path) -> list[Requirement]:
    """The wheel's unconditional requirements whose markers hold here."""
    with zipfile.ZipFile(wheel) as zf:
        name = next(n for n in zf.namelist() if n.endswith(".dist-info/METADATA"))
        metadata = email.parser.Parser().parsestr(zf.read(name).decode())
    env = default_environment()
    env["extra"] = ""
    reqs = []
    for line in metadata.get_all("Requires-Dist") or []:
        req = Requirement(line)
        if req.marker is None or req.marker.evaluate(env):
            reqs.append(req)
    return reqs


def is_cuda_library(req: Requirement) -> bool:
    return req.name.startswith("nvidia-") or req.name == "cuda-toolkit"


def cuda_major(reqs: list[Requirement]) -> str | None:
    """cu12 / cu13 from a wheel's CUDA requirements, None for a CPU wheel."""
    for req in reqs:
        match = re.search(r"-cu(\d+)$", req.name)
        if match:
            return f"cu{match.group(1)}"
        if req.name == "cuda-toolkit":
            spec = next(iter(req.specifier), None)
            if spec is not None:
                return f"cu{spec.version.split('.')[0]}"
    return None


def stack_requirements(group: list[list[Requirement]]) -> list[str]:
    """One CUDA library set for every wheel of a CUDA major: the newest wheel's
    pins (libraries keep their sonames within a major; CPU code never calls them),
    with cuda-toolkit's extras unioned so that no older wheel misses a library."""
    newest = group[-1]
    extras = set()
    for reqs in group:
        extras |= {e for r in reqs if r.name == "cuda-toolkit" for e in r.extras}
    out = []
    for req in newest:
        if not is_cuda_library(req):
            continue
        wanted = extras if req.name == "cuda-toolkit" else req.extras
        out.append(f"{req.name}{'[' + ','.join(sorted(wanted)) + ']' if wanted else ''}{req.specifier}")
    return out


# ------------------------------------------------------------------ venvs
@dataclasses.dataclass
class Plan:
    release: str
    version: str
    wheel: Path | None
    reqs: list[Requirement]
    cuda: str | None


def make_plans(releases: list[str], wheels: Path | None) -> list[Plan]:
    plans = []
    for release in releases:
        version = RELEASES[release]
        wheel = find_wheel(wheels, version)
        reqs = wheel_requirements(wheel) if wheel else []
        plans.append(Plan(release, version, wheel, reqs, cuda_major(reqs)))
    return plans


def site_packages(venv: Path) -> Path:
    return next((venv / "lib").glob("python3*/site-packages"))


def ensure_cuda_stack(root: Path, major: str, reqs: list[str]) -> Path:
    stack = root / f"cuda-{major}"
    done = stack / ".complete"
    wanted = "\n".join(reqs)
    if done.exists() and done.read_text() == wanted:
        return stack
    shutil.rmtree(stack, ignore_errors=True)
    run([sys.executable, "-m", "pip", "install", "--quiet", "--no-cache-dir", "--target", stack, *reqs])
    done.write_text(wanted)
    return stack


def ensure_venv(root: Path, plan: Plan, stacks: dict[str, Path], python: str) -> Path:
    venv = root / f"torch-{plan.release}"
    marker = venv / ".complete"  # the torch version, then the test requirements installed
    pip = [venv / "bin" / "python", "-m", "pip", "install", "--quiet", "--no-cache-dir"]
    done = "\n".join([plan.version, *TEST_DEPS])
    installed = marker.read_text() if marker.exists() else ""
    if installed.split("\n", 1)[0] == plan.version:
        if installed != done:  # the same torch, other test requirements
            run([*pip, *TEST_DEPS])
            marker.write_text(done)
        return venv
    shutil.rmtree(venv, ignore_errors=True)
    run([python, "-m", "venv", venv])
    if plan.wheel is None:
        run([*pip, f"torch=={plan.version}", *TEST_DEPS])
    else:
        pure = [str(r) for r in plan.reqs if not is_cuda_library(r) and r.name not in SKIPPED_DEPS]
        run([*pip, "--no-deps", plan.wheel])
        run([*pip, *pure, *TEST_DEPS])
        if plan.cuda:
            (site_packages(venv) / "nvidia").symlink_to(stacks[plan.cuda] / "nvidia")
    marker.write_text(done)
    return venv


# ------------------------------------------------------------------ runs
@dataclasses.dataclass
class Result:
    release: str
    torch: str
    passed: int = 0
    failed: int = 0
    errors: int = 0
    skipped: int = 0
    seconds: float = 0.0
    note: str = ""


def run_suite(venv: Path, plan: Plan, logs: Path, pytest_args: list[str], fuzz_examples: int | None) -> Result:
    python = venv / "bin" / "python"
    probe = subprocess.run([python, "-c", "import torch; print(torch.__version__)"], capture_output=True, text=True)
    if probe.returncode != 0:
        return Result(plan.release, plan.version, note="import torch failed: " + probe.stderr.strip().splitlines()[-1])
    result = Result(plan.release, probe.stdout.strip())
    junit = logs / f"torch-{plan.release}.xml"
    env = dict(os.environ)
    env.pop("INDUCTOR_ADDMM_FIX", None)
    if fuzz_examples is not None:
        env[FUZZ_ENV] = str(fuzz_examples)
    start = time.monotonic()
    with open(logs / f"torch-{plan.release}.log", "w") as out:
        proc = subprocess.run(
            [python, "-m", "pytest", "-q", "-p", "no:cacheprovider", f"--junitxml={junit}", "tests", *pytest_args],
            cwd=ROOT, stdout=out, stderr=subprocess.STDOUT, env=env,
        )
    result.seconds = time.monotonic() - start
    try:
        suites = ET.parse(junit).getroot()
        suites = [suites] if suites.tag == "testsuite" else list(suites)
        for s in suites:
            total = int(s.get("tests", 0))
            result.failed += int(s.get("failures", 0))
            result.errors += int(s.get("errors", 0))
            result.skipped += int(s.get("skipped", 0))
            result.passed += total - int(s.get("failures", 0)) - int(s.get("errors", 0)) - int(s.get("skipped", 0))
    except (OSError, ET.ParseError) as error:
        result.note = f"no JUnit report ({error}); pytest exit {proc.returncode}"
    if proc.returncode not in (0, 1) and not result.note:
        result.note = f"pytest exit {proc.returncode}"
    return result


def table(results: list[Result]) -> str:
    rows = ["| release | torch | passed | failed | errors | skipped | time | note |",
            "|---|---|---:|---:|---:|---:|---:|---|"]
    for r in results:
        rows.append(f"| {r.release} | {r.torch} | {r.passed} | {r.failed} | {r.errors} | {r.skipped} "
                    f"| {r.seconds:.0f} s | {r.note} |")
    return "\n".join(rows)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("releases", nargs="*", default=list(RELEASES), help="e.g. 2.8 2.13 (default: all)")
    wheels = os.environ.get("MATRIX_WHEELS")
    parser.add_argument("--wheels", type=Path, default=Path(wheels) if wheels else None,
                        help="a folder of torch wheels to prefer over pip's index (default: $MATRIX_WHEELS)")
    parser.add_argument("--venvs", type=Path, default=Path(os.environ.get("MATRIX_VENVS", ROOT / ".matrix")))
    parser.add_argument("--python", default=sys.executable, help="interpreter for the venvs (3.11)")
    parser.add_argument("--fuzz-examples", type=int, default=None, help=f"sets ${FUZZ_ENV}")
    parser.add_argument("--clean", action="store_true", help="delete each venv after its run")
    # Everything after "--" goes to pytest; split it off first (argparse would mix it
    # with the positional releases).
    argv = list(sys.argv[1:] if argv is None else argv)
    pytest_args = argv[argv.index("--") + 1 :] if "--" in argv else []
    argv = argv[: argv.index("--")] if "--" in argv else argv
    args = parser.parse_args(argv)
    unknown = [r for r in args.releases if r not in RELEASES]
    if unknown:
        parser.error(f"unknown release(s) {unknown}; known: {list(RELEASES)}")

    args.venvs.mkdir(parents=True, exist_ok=True)
    logs = args.venvs / "logs"
    logs.mkdir(exist_ok=True)
    plans = make_plans(sorted(args.releases, key=lambda r: tuple(map(int, r.split(".")))), args.wheels)

    # CUDA stacks: the group of every known release's wheel, so the stack does not
    # depend on which releases this run selected.
    everything = [p for p in make_plans(list(RELEASES), args.wheels) if p.cuda]
    stacks = {}
    for major in {p.cuda for p in plans if p.cuda}:
        group = [p.reqs for p in everything if p.cuda == major]
        stacks[major] = ensure_cuda_stack(args.venvs, major, stack_requirements(group))

    results = []
    for plan in plans:
        log(f"torch {plan.version} from {plan.wheel or 'the pip index'}")
        try:
            venv = ensure_venv(args.venvs, plan, stacks, args.python)
        except subprocess.CalledProcessError as error:
            results.append(Result(plan.release, plan.version, note=f"venv failed: {error}"))
            continue
        result = run_suite(venv, plan, logs, pytest_args, args.fuzz_examples)
        results.append(result)
        log(f"{plan.release}: {result.passed} passed, {result.failed} failed, {result.errors} errors, "
            f"{result.skipped} skipped in {result.seconds:.0f} s {result.note}")
        if args.clean:
            shutil.rmtree(venv, ignore_errors=True)

    stamp = datetime.datetime.now().isoformat(timespec="minutes")
    text = f"Run {stamp}, Python {sys.version.split()[0]}\n\n{table(results)}\n"
    (args.venvs / "results.md").write_text(text)
    print()
    print(text)
    return 0 if all(r.failed == r.errors == 0 and not r.note and r.passed for r in results) else 1


if __name__ == "__main__":
    sys.exit(main())
