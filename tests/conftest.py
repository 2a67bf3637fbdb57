"""Each test compiles from a fresh Dynamo with every feature installed, in a private
Inductor cache, with torch seeded: by default from the test's name (the same inputs on
every run); ``INDUCTOR_ADDMM_FIX_TEST_SEED=<int>`` or ``=random`` draws others.  A failing
test prints its seed."""

import os
import random
import sys
import zlib
from pathlib import Path

sys.path.insert(0, os.path.dirname(__file__))

from processes import private_dir  # noqa: E402

# A private Inductor cache for the session: /tmp/torchinductor_<user> is shared by
# every process on the machine, and an artifact compiled elsewhere (with a patched
# torch and no cache tag) once made the stock failure vanish after uninstall().  It is
# removed when the session ends, also by Ctrl-C or SIGTERM (and, after a SIGKILL, by
# the next session).
if "TORCHINDUCTOR_CACHE_DIR" not in os.environ:
    os.environ["TORCHINDUCTOR_CACHE_DIR"] = private_dir("inductor-cache-tests-")

import pytest  # noqa: E402
import torch  # noqa: E402

# Without a GPU, Inductor compiles the C++ kernels in this process: a pool of compile
# workers per test process only adds start-up and contention on a 2-core machine (the
# default run took 273 s with it, 246 s without).  Read when torch._inductor is first
# imported, which is after this.
if not torch.cuda.is_available():
    os.environ.setdefault("TORCHINDUCTOR_COMPILE_THREADS", "1")

import inductor_addmm_fix  # noqa: E402  (the import applies the fix)


def _differences_from_the_checkout(used: Path, checkout: Path) -> list[str]:
    """The package's source files that differ between the copy Python imported and this
    checkout (missing on either side, or other bytes)."""
    names = {p.relative_to(root).as_posix() for root in (used, checkout) for p in root.rglob("*.py")}
    return sorted(n for n in names if not ((used / n).is_file() and (checkout / n).is_file() and (used / n).read_bytes() == (checkout / n).read_bytes()))


def pytest_configure(config):
    """A non-editable install (README's first command) is imported at interpreter
    start-up by its .pth line, before this checkout is on sys.path: after an edit, the
    tests would check the installed copy.  Stop instead, saying how to refresh it."""
    used = Path(inductor_addmm_fix.__file__).resolve().parent
    checkout = Path(__file__).resolve().parent.parent / "inductor_addmm_fix"
    if used != checkout and (stale := _differences_from_the_checkout(used, checkout)):
        raise pytest.UsageError(
            f"the tests would run the installed inductor_addmm_fix at {used}, which differs from this "
            f"checkout in {len(stale)} file(s) ({', '.join(stale[:3])}{', ...' if len(stale) > 3 else ''}); "
            f"reinstall it: {sys.executable} -m pip install --no-deps {checkout.parent}"
        )


@pytest.fixture(autouse=True)
def fresh_dynamo(request):
    """Each test compiles from scratch, with every feature installed, or those its
    ``@pytest.mark.features(spec)`` selects (a spec as ``install(features=...)`` takes)."""
    marker = request.node.get_closest_marker("features")
    inductor_addmm_fix.install(marker.args[0] if marker else None)
    torch._dynamo.reset()
    yield
    torch._dynamo.reset()
    if marker:
        inductor_addmm_fix.install()


@pytest.fixture(autouse=True)
def seeded_random(request):
    """Seed torch for every test; the seed is printed when a test fails."""
    choice = os.environ.get("INDUCTOR_ADDMM_FIX_TEST_SEED")
    if choice == "random":
        seed = random.randrange(2**31)
    elif choice:
        seed = int(choice)
    else:
        seed = zlib.crc32(request.node.nodeid.encode())
    torch.manual_seed(seed)
    request.node.user_properties.append(("seed", seed))
    yield seed


def pytest_runtest_makereport(item, call):
    if call.excinfo is not None:
        for name, value in item.user_properties:
            if name == "seed":
                item.add_report_section(call.when, "seed", f"torch.manual_seed({value})")


@pytest.fixture
def head_mode(monkeypatch):
    """``head_mode("loop")``: ``INDUCTOR_ADDMM_FIX_LIGER_HEAD`` for the test's duration."""
    from inductor_addmm_fix import settings

    def choose(value):
        monkeypatch.setenv(settings.LIGER_HEAD.variable, value)

    return choose
