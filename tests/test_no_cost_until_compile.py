"""A process that imports torch and never compiles does not pay for Dynamo or Inductor:
activation, on every route, imports neither ``torch._dynamo`` nor ``torch._inductor``.
The features still apply before a compile uses the ops: the first compile after it
gets the fix.  Fresh interpreters of this Python, where the package is installed (its
entry point and ``.pth`` line); the ``import`` and ``install()`` routes alone run with
``python -S`` and the site-packages folders on ``sys.path`` by hand (no ``.pth`` line)
and torch's autoload off (no entry point)."""

from __future__ import annotations

import json
import site
import textwrap

import pytest

from helpers import fresh

ACTIVATE_THEN_COMPILE = """
    import json, sys
    sys.path += {folders!r}
    {activate}
    heavy = sorted(m for m in ("torch._dynamo", "torch._inductor") if m in sys.modules)
    import inductor_addmm_fix as fix
    before = fix.status()

    def f(c, a, b):
        return torch.addmm(c, a, b, out_dtype=torch.float32)

    a, b, c = torch.randn(32, 64).bfloat16(), torch.randn(64, 16).bfloat16(), torch.randn(32, 16)
    out = torch.compile(f, backend="inductor", fullgraph=True)(c, a, b)
    ref = c.double() + a.double() @ b.double()
    print(json.dumps(dict(heavy=heavy, activation=before.activation, before=before.summary,
                          after=fix.status().summary, dtype=str(out.dtype),
                          error=((out.double() - ref).norm() / ref.norm()).item())))
"""

#: route -> (the interpreter's options, the code that activates, the environment)
ROUTES = {
    "entry-point": ((), "import torch", {}),
    ".pth": ((), "import torch", {"TORCH_DEVICE_BACKEND_AUTOLOAD": "0"}),
    "import": (("-S",), "import inductor_addmm_fix, torch", {"TORCH_DEVICE_BACKEND_AUTOLOAD": "0"}),
    "install()": (("-S",), "import inductor_addmm_fix; inductor_addmm_fix.install(); import torch",
                  {"TORCH_DEVICE_BACKEND_AUTOLOAD": "0"}),
}


def activate_then_compile(route: str) -> dict:
    options, activate, env = ROUTES[route]
    folders = site.getsitepackages() if "-S" in options else []
    code = textwrap.dedent(ACTIVATE_THEN_COMPILE).format(folders=folders, activate=activate)
    result = fresh(*options, "-c", code, **env)
    assert result.returncode == 0, result.stderr[-3000:]
    return json.loads(result.stdout.strip().splitlines()[-1])


@pytest.mark.parametrize("route", ROUTES)
def test_activation_imports_neither_dynamo_nor_inductor_and_the_first_compile_gets_the_fix(route):
    report = activate_then_compile(route)
    assert report["activation"] == route
    assert report["heavy"] == []
    assert report["before"] == f"fix applies at first compile (activated by {route})"
    assert report["after"] == f"fix active (activated by {route})"
    assert report["dtype"] == "torch.float32" and report["error"] < 1e-5
