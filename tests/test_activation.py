"""The activation routes in real, fresh interpreters.

A wheel is built from a copy of this checkout and installed into a fresh venv
whose only link to the test runner's environment is a ``.pth`` line naming the
folder that holds torch (0.6 s, where installing torch itself takes 15 s or more).
Every test runs ``python`` from that venv in an empty folder with a scrubbed
environment, so the package it sees is the installed wheel and nothing else.  Marked
slow (``pytest -m slow``); the in-process pieces are in test_startup.py.
"""

from __future__ import annotations

import dataclasses
import json
import os
import shutil
import subprocess
import sys
import textwrap
import zipfile
from dataclasses import dataclass
from pathlib import Path

import pytest
import torch

from inductor_addmm_fix.features import NAMES
from inductor_addmm_fix.activation.selection import accepted_words
from helpers import settled
from inductor_addmm_fix.version import __version__

pytestmark = [pytest.mark.subprocess, pytest.mark.slow]

ROOT = Path(__file__).resolve().parents[1]
PTH = "inductor_addmm_fix.pth"
TIMEOUT = 300  # seconds for one subprocess: fail loudly rather than hang CI
#: Variables of the runner's environment that would change what a child does.
SCRUBBED = ("PYTHONPATH", "PYTHONSTARTUP", "PYTHONHOME", "PYTHONSAFEPATH", "PYTHONNOUSERSITE", "PYTHONWARNINGS")
SCRUBBED_PREFIXES = ("INDUCTOR_ADDMM_FIX", "TORCH_DEVICE_BACKEND", "TORCHINDUCTOR_", "TORCH_COMPILE", "TORCH_LOGS")


@dataclass
class Python:
    """An interpreter to run in a fresh process, in an empty folder."""

    executable: Path
    site_packages: Path
    workdir: Path
    cache_dir: Path

    def env(self, **overrides: str) -> dict[str, str]:
        env = {
            k: v
            for k, v in os.environ.items()
            if k not in SCRUBBED and not k.startswith(SCRUBBED_PREFIXES)
        }
        env["TORCHINDUCTOR_CACHE_DIR"] = str(self.cache_dir)  # kernels reused across tests
        env.update(overrides)
        return env

    def run(self, *args: str, expect_rc: int | None = 0, **env: str) -> subprocess.CompletedProcess:
        result = subprocess.run(
            [str(self.executable), *args],
            cwd=self.workdir,
            env=self.env(**env),
            capture_output=True,
            text=True,
            timeout=TIMEOUT,
        )
        if expect_rc is not None and result.returncode != expect_rc:
            pytest.fail(
                f"exit {result.returncode}, expected {expect_rc}: {args}\n"
                f"--- stdout\n{result.stdout[-4000:]}\n--- stderr\n{result.stderr[-4000:]}"
            )
        return result

    def script(self, code: str, *args: str, **kwargs) -> subprocess.CompletedProcess:
        path = self.workdir / "script.py"
        path.write_text(textwrap.dedent(code))
        return self.run(str(path), *args, **kwargs)

    def report(self, code: str, **kwargs) -> dict:
        """Run a script whose last stdout line is a JSON object; return it."""
        result = self.script(code, **kwargs)
        return json.loads(result.stdout.strip().splitlines()[-1])


def _make_venv(root: Path, workdir: Path, cache_dir: Path) -> Python:
    """A venv without pip that sees torch through a .pth line."""
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(root)], check=True, timeout=TIMEOUT)
    executable = root / ("Scripts/python.exe" if os.name == "nt" else "bin/python")
    purelib = subprocess.run(
        [str(executable), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
        check=True, capture_output=True, text=True, timeout=TIMEOUT,
    ).stdout.strip()
    torch_home = Path(torch.__file__).resolve().parents[1]
    (Path(purelib) / "_torch_of_the_test_runner.pth").write_text(f"{torch_home}\n")
    return Python(executable, Path(purelib), workdir, cache_dir)


def _checkout_files() -> list[str] | None:
    """The files of the checkout, as git sees them (tracked, and untracked but not
    ignored), or None where git cannot say."""
    try:
        listed = subprocess.run(
            ["git", "-C", str(ROOT), "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
            check=True, capture_output=True, text=True, timeout=TIMEOUT,
        ).stdout
    except (OSError, subprocess.SubprocessError):
        return None
    return [name for name in listed.split("\0") if name and (ROOT / name).is_file()]


def _copy_checkout(dest: Path) -> Path:
    """The checkout's own files, without what git ignores: build leftovers (a stale
    build/ or egg-info would leak in) and local environments (venvs of other torch
    releases, many GB each)."""
    files = _checkout_files()
    if files is None:
        ignore = shutil.ignore_patterns(".git", "build", "dist", "*.egg-info", "__pycache__", ".venv", ".pytest_cache",
                                        ".matrix", ".whl", ".hypothesis")  # fmt: skip
        shutil.copytree(ROOT, dest, ignore=ignore)
        return dest
    for name in files:
        (dest / name).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(ROOT / name, dest / name)
    return dest


@pytest.fixture(scope="session")
def source_copy(tmp_path_factory) -> Path:
    """A clean copy to put on PYTHONPATH: importable, not installed (no metadata)."""
    return _copy_checkout(tmp_path_factory.mktemp("source") / "inductor_addmm_fix-src")


@pytest.fixture(scope="session")
def wheel(tmp_path_factory) -> Path:
    """A wheel built from its own copy (setuptools writes egg-info into the tree it builds)."""
    tree = _copy_checkout(tmp_path_factory.mktemp("build") / "inductor_addmm_fix-src")
    return _build_wheel(tree, tmp_path_factory.mktemp("dist"))


def _build_wheel(tree: Path, out: Path) -> Path:
    subprocess.run(
        [sys.executable, "-m", "pip", "wheel", str(tree), "--no-deps", "--no-build-isolation",
         "--no-index", "-q", "-w", str(out)],
        check=True, timeout=TIMEOUT,
    )
    (built,) = out.glob("inductor_addmm_fix-*.whl")
    return built


def _install(wheel: Path, python: Python) -> None:
    """--ignore-installed: the venv sees the runner's site-packages (for torch), where this
    package may be installed too; pip must still put the wheel into the venv."""
    subprocess.run(
        [sys.executable, "-m", "pip", "--python", str(python.executable), "install", "--no-deps", "--ignore-installed",
         "--no-index", "-q", str(wheel)],
        check=True, timeout=TIMEOUT,
    )


@pytest.fixture(scope="session")
def cache_dir(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("inductor-cache")


@pytest.fixture(scope="session")
def venv(wheel, tmp_path_factory, cache_dir) -> Python:
    """A fresh venv with the wheel installed (pip >= 22.3 of the runner installs it)."""
    base = tmp_path_factory.mktemp("venv")
    python = _make_venv(base / "venv", tmp_path_factory.mktemp("work"), cache_dir)
    _install(wheel, python)
    assert (python.site_packages / PTH).is_file()
    return python


# ------------------------------------------------------------------ the wheel
def test_wheel_ships_the_pth_at_the_top_and_declares_the_entry_point(wheel):
    with zipfile.ZipFile(wheel) as archive:
        names = archive.namelist()
        assert PTH in names  # the wheel's root is site-packages
        assert archive.read(PTH).decode() == (ROOT / PTH).read_text()
        (entry_points,) = [n for n in names if n.endswith(".dist-info/entry_points.txt")]
        text = archive.read(entry_points).decode()
    assert "[torch.backends]" in text
    assert "inductor_addmm_fix = inductor_addmm_fix.activation.startup:entry_point" in text
    (license_file,) = [n for n in names if n.endswith(".dist-info/licenses/LICENSE")]
    with zipfile.ZipFile(wheel) as archive:
        assert archive.read(license_file).decode() == (ROOT / "LICENSE").read_text()


# ------------------------------------------------------------------ the routes
ACTIVE_WITHOUT_IMPORT = """
    import json, sys
    import torch
    imported_by_routes = "inductor_addmm_fix" in sys.modules
    from torch._dynamo.utils import counters

    def f(c, a, b):
        return torch.addmm(c, a, b, out_dtype=torch.float32)

    a, b, c = torch.randn(32, 64).bfloat16(), torch.randn(64, 16).bfloat16(), torch.randn(32, 16)
    with torch._inductor.config.patch(fx_graph_cache=False), torch._functorch.config.patch(enable_autograd_cache=False):
        out = torch.compile(f, backend="inductor", fullgraph=True)(c, a, b)
    ref = c.double() + a.double() @ b.double()

    import inductor_addmm_fix as fix  # only now, to read the report
    status = fix.status()
    print(json.dumps(dict(
        imported_by_routes=imported_by_routes, installed=status.installed, activation=status.activation,
        features=status.features, file=fix.__file__, dtype=str(out.dtype),
        error=((out.double() - ref).norm() / ref.norm()).item(),
        lowered=counters["inductor_addmm_fix"]["addmm.dtype:product_then_epilogue"],
    )))
"""


def test_active_after_import_torch_with_no_import_of_the_package(venv):
    report = venv.report(ACTIVE_WITHOUT_IMPORT)
    assert report["imported_by_routes"]
    assert Path(report["file"]).is_relative_to(venv.site_packages)  # the wheel, not the checkout
    assert report["installed"] and report["activation"] == "entry-point"
    assert settled(report["features"]), report["features"]
    assert report["dtype"] == "torch.float32" and report["error"] < 1e-5
    assert report["lowered"] >= 1


STATE = """
    import json, sys
    before = "inductor_addmm_fix" in sys.modules
    import torch
    import inductor_addmm_fix as fix
    from inductor_addmm_fix.core.probes import meta_kernel_works
    import torch._inductor.compile_fx
    print(json.dumps(dict(pth_imported_it=before, installed=fix.is_installed(),
                          activation=fix.status().activation, torch_before="torch" in sys.modules,
                          features=fix.status().features, baddbmm_meta_fixed=meta_kernel_works("baddbmm"))))
"""


@pytest.mark.parametrize("value", ["0", "off"])
def test_env_var_off_disables_every_route(venv, value):
    report = venv.report(STATE, INDUCTOR_ADDMM_FIX=value)
    assert not report["pth_imported_it"]
    assert not report["installed"] and report["activation"] is None
    assert not report["baddbmm_meta_fixed"]  # broken in stock torch up to 2.15: torch left as it was


@pytest.mark.parametrize("autoload", ["1", "0"])
def test_the_env_var_turns_one_feature_off_for_every_route(venv, autoload):
    report = venv.report(STATE, INDUCTOR_ADDMM_FIX="-slice_writes", TORCH_DEVICE_BACKEND_AUTOLOAD=autoload)
    assert report["installed"] and report["activation"] == ("entry-point" if autoload == "1" else ".pth")
    assert report["features"]["slice_writes"] == "off (INDUCTOR_ADDMM_FIX=-slice_writes)"
    assert report["features"]["out_dtype"] == "applied" and report["baddbmm_meta_fixed"]


@pytest.mark.parametrize("autoload", ["1", "0"])
def test_sitecustomize_can_turn_it_off_after_startup(venv, tmp_path, autoload):
    """The variable as set when torch is imported decides, for every route."""
    (tmp_path / "sitecustomize.py").write_text("import os\nos.environ['INDUCTOR_ADDMM_FIX'] = 'off'\n")
    report = venv.report(STATE, PYTHONPATH=str(tmp_path), TORCH_DEVICE_BACKEND_AUTOLOAD=autoload)
    assert report["pth_imported_it"]  # the .pth ran before sitecustomize
    assert not report["installed"] and not report["baddbmm_meta_fixed"]


def test_pth_route_when_torch_backend_autoload_is_off(venv):
    report = venv.report(STATE, TORCH_DEVICE_BACKEND_AUTOLOAD="0")
    assert report["pth_imported_it"]
    assert report["installed"] and report["activation"] == ".pth"
    assert report["baddbmm_meta_fixed"]


def test_interpreter_startup_imports_no_torch_and_nothing_heavy(venv):
    importtime = venv.run("-X", "importtime", "-c", "pass").stderr
    assert "inductor_addmm_fix.activation.startup" in importtime  # the .pth line ran
    assert "torch" not in importtime.replace("inductor_addmm_fix", "")
    modules = "import sys; print(' '.join(sorted(sys.modules)))"
    on = set(venv.run("-c", modules).stdout.split())
    off = set(venv.run("-c", modules, INDUCTOR_ADDMM_FIX="0").stdout.split())
    added = {m for m in on - off if m != "inductor_addmm_fix" and not m.startswith("inductor_addmm_fix.")}
    assert added <= {"__future__"}, f"start-up imports {sorted(added)}"


SPAWNED = """
    import json, multiprocessing

    def fix_state(_=None):
        import torch, inductor_addmm_fix as fix
        from inductor_addmm_fix.core.probes import meta_kernel_works
        return fix.status().activation, fix.is_installed(), meta_kernel_works("baddbmm")

    class Dataset:  # a DataLoader worker reports its own state
        def __len__(self):
            return 1

        def __getitem__(self, i):
            return fix_state()

    def first(batch):
        return batch[0]

    if __name__ == "__main__":
        with multiprocessing.get_context("spawn").Pool(1) as pool:  # the parent has no torch
            child = pool.apply(fix_state)
        import torch.utils.data
        loader = torch.utils.data.DataLoader(Dataset(), num_workers=1, multiprocessing_context="spawn",
                                             collate_fn=first)
        print(json.dumps(dict(child=child, worker=list(next(iter(loader))))))
"""


def test_spawned_child_and_dataloader_worker_get_the_fix(venv):
    report = venv.report(SPAWNED)
    assert report["child"] == ["entry-point", True, True]
    assert report["worker"] == ["entry-point", True, True]


def test_inductor_subprocess_compile_lowers_with_the_fix(venv):
    """TORCHINDUCTOR_FX_COMPILE_MODE=SUBPROCESS lowers in a fresh interpreter: the routes cover it."""
    result = venv.run("-m", "inductor_addmm_fix", "check", TORCHINDUCTOR_FX_COMPILE_MODE="SUBPROCESS")
    assert "FIXED" in result.stdout and "compile subprocess" in result.stdout, result.stdout


def test_explicit_import_only_warns_under_subprocess_compile(source_copy, tmp_path, cache_dir):
    """Not installed, only imported: Inductor's compile child will lack the fix, and we say so."""
    python = _make_venv(tmp_path / "bare", tmp_path, cache_dir)
    code = "import inductor_addmm_fix, torch, inductor_addmm_fix.activation.routes as r; print(r.fresh_interpreters_covered())"
    result = python.run("-c", code, PYTHONPATH=str(source_copy), TORCHINDUCTOR_FX_COMPILE_MODE="SUBPROCESS")
    if result.stdout.split()[-1] == "True":
        pytest.skip("the test runner's environment has inductor_addmm_fix installed: nothing is uncovered")
    assert "active in this process only" in result.stderr
    assert result.stderr.count("inductor_addmm_fix:") == 1


# ------------------------------------------------------------------ failures stay warnings
FAKE_TORCH = '''
__version__ = "2.99.0+fake"  # no ops, no _decomp, no _inductor
from importlib.metadata import entry_points
for ep in entry_points(group="torch.backends"):  # what torch does at the end of its import
    ep.load()()
'''


@pytest.mark.parametrize("autoload", ["1", "0"])
def test_torch_without_the_internals_we_patch_still_imports(venv, tmp_path, autoload):
    (tmp_path / "torch").mkdir()
    (tmp_path / "torch" / "__init__.py").write_text(FAKE_TORCH)
    result = venv.run("-c", "import torch; print(torch.__version__)", PYTHONPATH=str(tmp_path),
                      TORCH_DEVICE_BACKEND_AUTOLOAD=autoload)
    assert result.stdout.strip() == "2.99.0+fake"
    warnings = [line for line in result.stderr.splitlines() if "RuntimeWarning: inductor_addmm_fix" in line]
    assert len(warnings) == 1, result.stderr
    assert "torch was left as it was" in warnings[0]


BREAK_DECOMP = '''
"""Break torch._decomp the moment it is imported, before our hook can run."""
import sys

class Broken(dict):
    def get(self, key, default=None):
        if ".dtype" in str(key):
            raise RuntimeError("simulated: torch internals changed under us")
        return super().get(key, default)

class Finder:
    def find_spec(self, name, path, target=None):
        if name != "torch._decomp":
            return None
        for finder in sys.meta_path:
            if finder is not self and hasattr(finder, "find_spec"):
                spec = finder.find_spec(name, path, target)
                if spec is not None:
                    run = spec.loader.exec_module
                    def exec_module(module, run=run):
                        run(module)
                        module.decomposition_table = Broken(module.decomposition_table)
                    spec.loader.exec_module = exec_module
                    return spec

sys.meta_path.insert(0, Finder())
'''


def test_exception_inside_the_patch_does_not_break_import_torch(venv, tmp_path):
    (tmp_path / "sitecustomize.py").write_text(BREAK_DECOMP)
    code = (
        "import json, torch, torch._dynamo; import inductor_addmm_fix as fix; s = fix.status(); "
        "print(json.dumps(dict(sum=torch.ones(3).sum().item(), out_dtype=s.features['out_dtype'], activation=s.activation)))"
    )
    result = venv.run("-c", code, PYTHONPATH=str(tmp_path))
    report = json.loads(result.stdout.strip().splitlines()[-1])
    assert report["sum"] == 3.0  # torch works
    assert report["out_dtype"].startswith("failed: RuntimeError: simulated")
    assert report["activation"] == "entry-point"
    assert result.stderr.count("RuntimeWarning: inductor_addmm_fix") == 1, result.stderr


def test_pth_line_is_silent_when_the_package_is_gone_and_warns_once_when_it_is_broken(venv, tmp_path):
    """Run the installed .pth as Python would (site.addsitedir) without the package."""
    lonely = tmp_path / "site"
    lonely.mkdir()
    shutil.copy(venv.site_packages / PTH, lonely / PTH)
    code = f"import site, sys; site.addsitedir({str(lonely)!r}); print(sorted(m for m in sys.modules if 'addmm' in m))"
    gone = venv.run("-S", "-c", code)  # -S: no site-packages, so no package
    assert gone.stdout.strip() == "[]" and gone.stderr == ""

    broken = tmp_path / "broken"
    (broken / "inductor_addmm_fix").mkdir(parents=True)
    (broken / "inductor_addmm_fix" / "__init__.py").write_text("raise RuntimeError('half-uninstalled')\n")
    result = venv.run("-S", "-c", code, PYTHONPATH=str(broken))
    assert result.stdout.strip() == "[]"
    assert result.stderr.count("RuntimeWarning: inductor_addmm_fix: start-up hook skipped") == 1, result.stderr


@pytest.mark.parametrize(
    "value, imported",
    [("0", False), ("false", False), ("off", False), ("no", False), (" OFF ", False), ("False", False), ("1", True)],
)
def test_pth_line_checks_the_env_var_before_importing_anything(venv, tmp_path, value, imported):
    code = "import site, sys; site.addsitedir(sys.argv[1]); print('inductor_addmm_fix' in sys.modules)"
    shutil.copy(venv.site_packages / PTH, tmp_path / PTH)
    result = venv.run("-S", "-c", code, str(tmp_path), INDUCTOR_ADDMM_FIX=value, PYTHONPATH=str(venv.site_packages))
    assert result.stdout.strip() == str(imported)


# ------------------------------------------------------------------ warnings as errors
@pytest.mark.parametrize("autoload", ["1", "0"])
@pytest.mark.parametrize("flag", ["error", "error::RuntimeWarning"])
def test_warnings_as_errors_never_break_start_up_or_import_torch(venv, flag, autoload):
    """A failure is one warning, never an error, also under ``python -W error``: a warning
    turned into an exception is one line on stderr (never torch's "Failed to load the
    backend extension" and a 45-line traceback); a clean start stays silent."""
    assert venv.run("-W", flag, "-c", "pass").stderr == ""
    clean = venv.run("-W", flag, "-c", "import torch, inductor_addmm_fix as f; print(f.is_installed())",
                     TORCH_DEVICE_BACKEND_AUTOLOAD=autoload)
    assert clean.stdout.strip() == "True" and clean.stderr == ""
    maybe = venv.run("-W", flag, "-c", "import torch, inductor_addmm_fix as f; print(f.is_installed())",
                     TORCH_DEVICE_BACKEND_AUTOLOAD=autoload, INDUCTOR_ADDMM_FIX="maybe")
    assert maybe.stdout.strip() == "True"
    assert maybe.stderr.splitlines() == [
        f"inductor_addmm_fix: INDUCTOR_ADDMM_FIX=maybe: ignoring 'maybe'; the words taken are {accepted_words()}; "
        "applying every feature [RuntimeWarning, not raised]"
    ]


def test_unknown_env_value_warns_once_pointing_at_the_variable(venv):
    result = venv.run("-c", "import torch, torch._inductor.compile_fx", INDUCTOR_ADDMM_FIX="maybe,-views")
    (line,) = result.stderr.splitlines()
    assert line.startswith("<environment variable INDUCTOR_ADDMM_FIX>:1: RuntimeWarning: inductor_addmm_fix: "
                           "INDUCTOR_ADDMM_FIX=maybe,-views: ignoring 'maybe'")
    assert line.endswith("; applying " + ", ".join(f for f in NAMES if f != "views"))


def test_a_failure_under_warnings_as_errors_is_one_line(venv, tmp_path):
    (tmp_path / "torch").mkdir()
    (tmp_path / "torch" / "__init__.py").write_text(FAKE_TORCH)
    result = venv.run("-W", "error", "-c", "import torch; print(torch.__version__)", PYTHONPATH=str(tmp_path))
    assert result.stdout.strip() == "2.99.0+fake"
    (line,) = result.stderr.splitlines()
    assert "torch was left as it was" in line and line.endswith("[RuntimeWarning, not raised]")

    broken = tmp_path / "broken"
    (broken / "inductor_addmm_fix").mkdir(parents=True)
    (broken / "inductor_addmm_fix" / "__init__.py").write_text("raise RuntimeError('half-uninstalled')\n")
    result = venv.run("-W", "error", "-c", "print('ok')", PYTHONPATH=str(broken))
    assert result.stdout.strip() == "ok" and result.stderr == ""  # the .pth line: silent then


# ------------------------------------------------------------------ stale metadata
STALE_ENTRY_POINTS = "[torch.backends]\ninductor_addmm_fix = inductor_addmm_fix._startup:entry_point\n"


def test_stale_metadata_naming_the_0_1_0_start_up_module_does_not_break_import_torch(venv, tmp_path):
    """An ``inductor_addmm_fix.egg-info`` of 0.1.0 left in a source tree on ``sys.path``
    (here the current folder) shadows the installed metadata and names the old module;
    torch raises from ``import torch`` when an entry point cannot be loaded."""
    egg_info = tmp_path / "inductor_addmm_fix.egg-info"
    egg_info.mkdir()
    (egg_info / "PKG-INFO").write_text("Metadata-Version: 2.1\nName: inductor-addmm-fix\nVersion: 0.1.0\n")
    (egg_info / "entry_points.txt").write_text(STALE_ENTRY_POINTS)
    here = dataclasses.replace(venv, workdir=tmp_path)
    code = ("import torch, json, importlib.metadata as m, inductor_addmm_fix as f; "
            "print(json.dumps([[e.value for e in m.entry_points(group='torch.backends')], f.status().activation]))")
    result = here.run("-c", code)
    entry_points, activation = json.loads(result.stdout)
    assert entry_points == ["inductor_addmm_fix._startup:entry_point"]  # the stale one is what torch loads
    assert activation == "entry-point" and result.stderr == ""


# ------------------------------------------------------------------ the command line
def test_status_command_reports_route_and_patches(venv):
    report = json.loads(venv.run("-m", "inductor_addmm_fix", "status", "--json").stdout)
    assert report["installed"] and report["activation"] == "entry-point"
    assert report["torch_version"] == torch.__version__
    applied = {p["name"] for p in report["patches"] if p["applied"]}
    assert "inductor.lowering.addmm.dtype" in applied
    assert report["routes"]["fresh interpreters"].startswith("covered")

    text = venv.run("-m", "inductor_addmm_fix", expect_rc=1, INDUCTOR_ADDMM_FIX="0").stdout
    assert "fix NOT active: turned off by INDUCTOR_ADDMM_FIX=0" in text
    assert "fresh interpreters: off too" in text and "covered" not in text
    text = venv.run("-m", "inductor_addmm_fix", "-v").stdout
    assert "fix active (activated by entry-point)" in text
    assert f".pth start-up line:         {venv.site_packages / PTH}" in text
    assert "fresh interpreters:         covered (torch.backends entry point, .pth start-up line)" in text


def test_check_command_exit_codes(venv, tmp_path):
    fixed = venv.run("-m", "inductor_addmm_fix", "check", expect_rc=0).stdout
    assert "FIXED" in fixed and "addmm.dtype:product_then_epilogue" in fixed

    broken = venv.run("-m", "inductor_addmm_fix", "check", expect_rc=1, INDUCTOR_ADDMM_FIX="0").stdout
    assert "BROKEN" in broken and "fix NOT active: turned off by INDUCTOR_ADDMM_FIX=0" in broken
    usage = venv.run("-m", "inductor_addmm_fix", "chekc", expect_rc=64)
    assert usage.stdout == "" and "invalid choice: 'chekc'" in usage.stderr
    version = venv.run("-m", "inductor_addmm_fix", "--version").stdout
    assert version.strip() == f"inductor_addmm_fix {__version__}"  # an installed wheel: no git revision

    (tmp_path / "torch").mkdir()
    (tmp_path / "torch" / "__init__.py").write_text("raise ImportError('simulated: no torch here')\n")
    missing = venv.run("-m", "inductor_addmm_fix", "check", expect_rc=2, PYTHONPATH=str(tmp_path)).stdout
    assert "could not run" in missing


def test_a_wheel_built_from_a_git_checkout_reports_its_revision(tmp_path_factory, cache_dir):
    tree = _copy_checkout(tmp_path_factory.mktemp("git-build") / "inductor_addmm_fix-src")
    git = ["git", "-C", str(tree), "-c", "user.name=test", "-c", "user.email=test@example.com", "-c", "commit.gpgsign=false"]
    for args in (["init", "-q"], ["add", "-A"], ["commit", "-q", "-m", "the checkout"]):
        subprocess.run([*git, *args], check=True, timeout=TIMEOUT)
    head = subprocess.run([*git, "rev-parse", "HEAD"], check=True, capture_output=True, text=True).stdout[:10]
    wheel = _build_wheel(tree, tmp_path_factory.mktemp("git-dist"))
    with zipfile.ZipFile(wheel) as archive:
        assert archive.read("inductor_addmm_fix/BUILD_REVISION").decode().strip() == head
    python = _make_venv(tmp_path_factory.mktemp("git-venv") / "venv", tmp_path_factory.mktemp("git-work"), cache_dir)
    _install(wheel, python)
    version = python.run("-m", "inductor_addmm_fix", "--version").stdout
    assert version.strip() == f"inductor_addmm_fix {__version__} (git {head})"
    report = json.loads(python.run("-m", "inductor_addmm_fix", "--version", "--json").stdout)
    assert report == {"package_version": __version__, "git_revision": head}
