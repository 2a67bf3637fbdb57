"""The command line, as README and ``--help`` document it: every invocation and exit
code.  In process where the process's own state is what is reported; in a fresh
interpreter for what needs one (the switch off, warnings as errors).  The same
commands against an installed wheel: tests/test_activation.py (slow)."""

from __future__ import annotations

import dataclasses
import json
import re
import sys
from pathlib import Path

import pytest
import torch

import inductor_addmm_fix as fix
from helpers import fresh
from inductor_addmm_fix import cli
from inductor_addmm_fix.cli import check, revision, status
from inductor_addmm_fix.report import WAITING, headline

ROOT = Path(__file__).resolve().parents[1]
WIDTH = 100


def run(capsys, *argv: str) -> tuple[int, str, str]:
    code = cli.main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


# ------------------------------------------------------------------ status
@pytest.mark.parametrize("argv", [[], ["status"]], ids=["default", "status"])
def test_status_is_one_line_per_feature_and_fits_100_columns(capsys, argv):
    code, out, _ = run(capsys, *argv)
    assert code == 0
    lines = out.splitlines()
    assert lines[0] == f"inductor_addmm_fix {revision.package_version()} on torch {torch.__version__}"
    assert lines[1] == "fix active (activated by entry-point)" or lines[1].startswith("fix active (")
    features = [line.split()[0] for line in lines if line.startswith("  ")]
    assert features == list(fix.FEATURES)  # the features as the package names them, in order
    assert max(map(len, lines)) <= WIDTH, max(lines, key=len)
    assert lines[-2].startswith("fresh interpreters: ")


@pytest.mark.parametrize("argv", [["-v"], ["status", "-v"], ["-v", "status"], ["--verbose"]])
def test_status_verbose_gives_each_patch_and_why(capsys, argv):
    code, out, _ = run(capsys, *argv)
    assert code == 0
    report = fix.status()
    for patch in report.patches:
        assert f"] {patch.name}: " in out
    assert "probe: " in out and "routes:" in out and "torch.backends entry point:" in out


@pytest.mark.parametrize("argv", [["--json"], ["status", "--json"], ["--json", "status"], ["-v", "--json"]])
def test_status_json_in_any_position_is_complete(capsys, argv):
    code, out, _ = run(capsys, *argv)
    assert code == 0
    report = json.loads(out)
    assert report["installed"] is True and report["summary"].startswith("fix active")
    assert report["package_version"] == fix.__version__ and report["torch_version"] == torch.__version__
    assert set(report["features"]) == set(fix.FEATURES)
    assert {p["name"] for p in report["patches"]} == {p.name for p in fix.status().patches}
    assert {"reason", "probe", "obsolete_when", "feature", "applied"} <= set(report["patches"][0])
    assert set(report["routes"]) == {"INDUCTOR_ADDMM_FIX", "torch.backends entry point", ".pth start-up line",
                                     "fresh interpreters"}
    assert "git_revision" in report
    assert set(report["idle_here"]) <= {name for name, state in report["features"].items() if state == "applied"}
    assert set(report["settings"]) <= {name for name, state in report["features"].items() if state == "applied"}


def test_status_with_the_switch_off_says_so_and_exits_1():
    result = fresh("-m", "inductor_addmm_fix", INDUCTOR_ADDMM_FIX="0")
    assert result.returncode == 1, result.stderr
    lines = result.stdout.splitlines()
    assert lines[1] == "fix NOT active: turned off by INDUCTOR_ADDMM_FIX=0"
    assert all(f"off (INDUCTOR_ADDMM_FIX=0)" in line for line in lines if line.startswith("  "))
    assert "fresh interpreters: off too (they inherit INDUCTOR_ADDMM_FIX=0)" in lines
    assert "covered (" not in result.stdout
    assert max(map(len, lines)) <= WIDTH


def test_status_with_the_fix_off_says_not_active_and_what_is_on_and_exits_1_as_check_does():
    result = fresh("-m", "inductor_addmm_fix", INDUCTOR_ADDMM_FIX="-out_dtype")
    assert result.returncode == 1, result.stderr
    lines = result.stdout.splitlines()
    assert lines[1] == "fix NOT active (activated by entry-point; INDUCTOR_ADDMM_FIX=-out_dtype): out_dtype off"
    states = dict(line.split(maxsplit=1) for line in lines if line.startswith("  "))
    assert states["out_dtype"] == "off (INDUCTOR_ADDMM_FIX=-out_dtype)"
    assert states["reinplace"].startswith("applied (")
    checked = fresh("-m", "inductor_addmm_fix", "check", INDUCTOR_ADDMM_FIX="-out_dtype")
    assert checked.returncode == check.BROKEN == 1
    assert checked.stdout.splitlines()[1] == lines[1]


PYTHON_AND_COMMAND = """
import io, json, contextlib
import torch
import inductor_addmm_fix as fix
from inductor_addmm_fix import cli
before = str(fix.status()).splitlines()[1]
with contextlib.redirect_stdout(io.StringIO()) as out:
    code = cli.main([])
print(json.dumps(dict(before=before, after=fix.status().summary, command=out.getvalue().splitlines()[1], code=code)))
"""


@pytest.mark.parametrize("value", [None, "-out_dtype", *(pytest.param(v, marks=pytest.mark.slow) for v in ("0", "maybe,-views"))])
def test_python_s_status_and_the_command_give_the_same_line_in_the_same_process(value):
    """Before the first compile Python's status() may say the fix applies then; the
    command, which imports torch._inductor, says what a compile finds; never the contrary."""
    result = fresh("-c", PYTHON_AND_COMMAND, **({} if value is None else {"INDUCTOR_ADDMM_FIX": value}))
    report = json.loads(result.stdout.strip().splitlines()[-1])
    assert report["after"] == report["command"]
    if report["code"] == 0:
        assert report["command"].startswith("fix active (")
        assert report["before"] == report["command"].replace("fix active", "fix applies at first compile")
    else:
        assert report["command"].startswith("fix NOT active") and report["before"] == report["command"]


def test_status_names_a_feature_turned_off(monkeypatch, capsys):
    monkeypatch.setenv("INDUCTOR_ADDMM_FIX", "-views")
    fix.install(features="-views")
    code, out, _ = run(capsys)
    assert code == 0
    assert re.fullmatch(r"  views +off \(install\(features='-views'\)\)", next(l for l in out.splitlines() if l.startswith("  views ")))


@pytest.mark.parametrize("value, shown", [("maybe", "INDUCTOR_ADDMM_FIX=maybe (ignored)"),
                                          ("-views,typo", "INDUCTOR_ADDMM_FIX=-views,typo ('typo' ignored)")])
def test_status_names_the_words_of_the_variable_it_ignores(monkeypatch, value, shown):
    monkeypatch.setenv("INDUCTOR_ADDMM_FIX", value)
    assert status.headline(fix.status()) == f"fix active (activated by {fix.status().activation}; {shown})"


def test_a_feature_waiting_for_its_first_compile_makes_the_status_say_so():
    waiting = f"{WAITING} (when torch._inductor.compile_fx is imported)"
    report = dataclasses.replace(fix.status(), features={name: waiting for name in fix.FEATURES})
    report = dataclasses.replace(report, summary=headline(report))
    assert report.installed and report.active and report.waiting == fix.FEATURES
    assert status.headline(report) == f"fix applies at first compile (activated by {report.activation})"
    assert str(report).splitlines()[1] == f"fix applies at first compile (activated by {report.activation})"


#: A fresh interpreter in which importing torch._inductor warns (as torch 2.13's does): under
#: ``python -W error`` the import fails, so every feature's Inductor stage waits.
INDUCTOR_WARNS = """
import sys, warnings
class Warns:
    def find_spec(self, name, path=None, target=None):
        if name == "torch._inductor.compile_fx":
            warnings.warn("simulated: deprecated", DeprecationWarning)
sys.meta_path.insert(0, Warns())
from inductor_addmm_fix.cli import main
sys.exit(main(sys.argv[1:]))
"""


def test_status_where_inductor_cannot_be_imported_says_it_waits_and_why_and_exits_1():
    result = fresh("-W", "error", "-c", INDUCTOR_WARNS, INDUCTOR_ADDMM_FIX="maybe")
    assert result.returncode == 1, result.stderr
    lines = result.stdout.splitlines()
    assert lines[1:4] == [
        "fix applies at first compile (activated by entry-point; INDUCTOR_ADDMM_FIX=maybe (ignored))",
        "torch._inductor cannot be imported here (a warning that the warnings filters turn into an error):",
        "  DeprecationWarning: simulated: deprecated",
    ]
    features = dict(line.split(maxsplit=1) for line in lines[4:] if line.startswith("  "))
    assert list(features) == list(fix.FEATURES)
    assert all(state.startswith(WAITING) for state in features.values()), features
    report = json.loads(fresh("-W", "error", "-c", INDUCTOR_WARNS, "--json", INDUCTOR_ADDMM_FIX="maybe").stdout)
    assert report["summary"].startswith("fix applies at first compile (")
    assert report["inductor_import_error"] == "DeprecationWarning: simulated: deprecated"


def test_status_under_warnings_as_errors_says_active_only_when_no_feature_waits():
    """The command of the report: torch's own warnings may stop torch._inductor's import."""
    result = fresh("-W", "error", "-m", "inductor_addmm_fix", INDUCTOR_ADDMM_FIX="maybe")
    lines = result.stdout.splitlines()
    waiting = any(WAITING in line for line in lines[2:])
    assert lines[1].startswith("fix applies at first compile (" if waiting else "fix active (")
    assert result.returncode == (1 if waiting else 0)


def test_status_without_torch_cannot_run(monkeypatch, capsys):
    monkeypatch.setitem(sys.modules, "torch", None)  # import torch raises ImportError
    code, out, _ = run(capsys, "status")
    assert code == 2 and out.startswith("could not run: torch cannot be imported")


# ------------------------------------------------------------------ check
def test_check_fixed_in_text_and_json(capsys):
    code, out, _ = run(capsys, "check")
    assert code == check.FIXED
    assert "\nfix active (" in out and "\nFIXED: compiled, torch.float32" in out
    assert max(map(len, out.splitlines())) <= WIDTH
    # The same, as JSON (the kernel is compiled now: this one is quick).
    code, out, _ = run(capsys, "--json", "check", "--device", "cpu")
    report = json.loads(out)
    assert code == 0 and report["result"] == "FIXED" and report["exit_code"] == 0
    assert any(line.startswith("FIXED: ") for line in report["lines"])


def test_check_without_the_device_asked_for_cannot_run(monkeypatch, capsys):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    code, out, _ = run(capsys, "check", "--device", "cuda")
    assert code == check.CANNOT_RUN == 2
    assert "could not run" in out


# ------------------------------------------------------------------ options anywhere, usage errors
@pytest.mark.parametrize(
    "argv, command, verbose, as_json",
    [
        ([], None, 0, False),
        (["-v", "check"], "check", 1, False),
        (["check", "-v"], "check", 1, False),
        (["check", "--device", "cpu", "--json"], "check", 0, True),
        (["--json", "check"], "check", 0, True),
        (["status", "-vv"], "status", 2, False),
        (["-v", "--json", "status"], "status", 1, True),
    ],
)
def test_options_go_before_or_after_the_command(argv, command, verbose, as_json):
    args = cli._parser().parse_args(argv)
    assert (args.command, args.verbose, args.json) == (command, verbose, as_json)


def test_version(capsys):
    code, out, _ = run(capsys, "--version")
    assert code == 0
    assert out.strip() == f"inductor_addmm_fix {revision.package_version()}"
    assert out.startswith(f"inductor_addmm_fix {fix.__version__}")


@pytest.mark.parametrize("argv", [["--version", "--json"], ["--json", "--version"]])
def test_version_as_json_has_the_keys_of_status_json(capsys, argv):
    code, out, _ = run(capsys, *argv)
    assert code == 0
    assert json.loads(out) == {"package_version": fix.__version__, "git_revision": revision.git_revision()}


@pytest.mark.parametrize("argv", [["--help"], ["status", "--help"], ["check", "-h"]])
def test_help_documents_the_exit_codes(capsys, argv):
    code, out, _ = run(capsys, *argv)
    assert code == 0
    assert "exit codes:" in out and "64  usage error" in out and "2   could not run" in out


@pytest.mark.parametrize(
    "argv",
    [["bogus"], ["--bogus"], ["status", "--device", "cpu"], ["check", "--device", "tpu"], ["check", "extra"]],
)
def test_usage_errors_exit_64_not_2(capsys, argv):
    code, out, err = run(capsys, *argv)
    assert code == cli.USAGE_ERROR == 64
    assert out == "" and "usage: python -m inductor_addmm_fix" in err and "error:" in err


def test_the_exit_codes_are_documented_alike_in_the_readme_and_help():
    readme = (ROOT / "README.md").read_text()
    for line in cli.EXIT_CODES.splitlines()[1:]:
        code = line.split()[0]
        if code.isdigit():
            assert f"`{code}`" in readme, f"README does not document exit code {code}"


# ------------------------------------------------------------------ warnings as errors
def test_warnings_as_errors_never_break_import_torch():
    """``python -W error`` with an unknown INDUCTOR_ADDMM_FIX value: torch's entry point
    must not fail (torch would raise "Failed to load the backend extension").  The .pth
    route, in an installed wheel: tests/test_activation.py (slow)."""
    code = "import torch, inductor_addmm_fix as f; print(f.is_installed())"
    result = fresh("-W", "error", "-c", code, INDUCTOR_ADDMM_FIX="maybe")
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "True"
    assert result.stderr.count("\n") == 1 and "ignoring 'maybe'" in result.stderr, result.stderr
