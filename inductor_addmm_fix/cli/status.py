"""``python -m inductor_addmm_fix status``: is the fix active in this Python, feature by
feature, and will fresh interpreters have it.

Short by default (one line per feature, no line over ``WIDTH`` columns); ``-v`` adds
each patch with its reason, probe and retiring upstream change, and every activation
route; ``--json`` gives everything (``Status.as_dict()``, the routes, the summary).
The first line is ``inductor_addmm_fix.status().summary``, the words of Python's
``status()`` in the same state: "fix active", "fix applies at first compile" (a stage
of some feature waits for the imports of the first compile: this command imports
``torch._inductor`` first, so only where that import fails), "fix partly active",
"fix NOT active" (off, failed, or its out_dtype feature off).  ``check`` starts with the
same line.  The variable is read through ``activation.env``.
"""

from __future__ import annotations

import json
import textwrap

from ..activation import env, routes
from ..features import NAMES

WIDTH = 100
NAME_WIDTH = max(len(name) for name in NAMES) + 2  # the feature column


def headline(report) -> str:
    """``fix active (activated by entry-point)``, or why it is not: the report's summary."""
    return report.summary


def inductor_unavailable(error: BaseException) -> list[str]:
    """Why no feature's Inductor stage applies: ``torch._inductor`` cannot be imported."""
    cause = " (a warning that the warnings filters turn into an error)" if isinstance(error, Warning) else ""
    return [f"torch._inductor cannot be imported here{cause}:", _fit(f"  {type(error).__name__}: {error}")]


def feature_states(report) -> dict[str, str]:
    """Each feature's state, with the number of its patches where applied."""
    from ..installer import idle_here, settings

    states, idle, settings_ = {}, idle_here(), settings()
    for name, state in report.features.items():
        if state == "applied":
            count = sum(1 for p in report.patches if p.feature == name and p.applied)
            state = f"applied ({count} patch{'es' if count != 1 else ''})"
            if name in settings_:
                state += f"; {settings_[name]}"
            if name in idle:
                state += f"; idle: {idle[name]}"
        states[name] = state
    return states


def fresh_interpreters() -> str:
    """Whether a fresh interpreter of this Python (a spawned worker, a torchrun rank,
    Inductor's compile subprocess) gets the fix, and through which routes."""
    if env.off_by():
        return f"off too (they inherit {env.off_by()})"
    via = []
    if routes.entry_point_registered() and routes.autoload_enabled():
        via.append("torch.backends entry point")
    if routes.pth_file() is not None:
        via.append(".pth start-up line")
    if via:
        return f"covered ({', '.join(via)})"
    return "NOT covered: the package is not installed here, only imported (docs/activation.md)"


def _routes_report() -> dict[str, str]:
    value = env.raw()
    autoload = "on" if routes.autoload_enabled() else "off (TORCH_DEVICE_BACKEND_AUTOLOAD)"
    return {
        env.VARIABLE: "unset (every feature)" if value is None else repr(value),
        "torch.backends entry point": ("registered" if routes.entry_point_registered() else "not installed")
        + f", autoload {autoload}",
        ".pth start-up line": routes.pth_file() or "not installed",
        "fresh interpreters": fresh_interpreters(),
    }


def _fit(line: str) -> str:
    return line if len(line) <= WIDTH else line[: WIDTH - 3] + "..."


def _wrapped(text: str, indent: int) -> list[str]:
    return textwrap.wrap(text, WIDTH, initial_indent=" " * indent, subsequent_indent=" " * (indent + 2),
                         break_long_words=False, break_on_hyphens=False) or [""]


def format_text(report, verbose: bool = False, inductor_error: BaseException | None = None) -> list[str]:
    from .revision import package_version

    lines = [
        _fit(f"inductor_addmm_fix {package_version()} on torch {report.torch_version}"),
        _fit(headline(report)),
    ]
    if inductor_error is not None:
        lines += inductor_unavailable(inductor_error)
    for name, state in feature_states(report).items():
        line = f"  {name:<{NAME_WIDTH}}{state}"
        lines += _wrapped(line, 0) if verbose else [_fit(line)]
        if verbose:
            lines += _patch_lines([p for p in report.patches if p.feature == name])
    shared = [p for p in report.patches if p.feature not in report.features]
    if verbose and shared:
        lines.append(f"  {'(shared)':<{NAME_WIDTH}}machinery of the features above")
        lines += _patch_lines(shared)
    if verbose:
        lines.append("routes:")
        for name, value in _routes_report().items():
            lines.append(f"  {name + ':':<28}{value}")  # a path stays on one line
    else:
        lines.append(_fit(f"fresh interpreters: {fresh_interpreters()}"))
        lines.append("each patch and why: -v; everything: --json")
    return lines


def _patch_lines(patches) -> list[str]:
    lines = []
    for p in patches:
        mark = "applied" if p.applied else "not needed"
        lines += _wrapped(f"[{mark}] {p.name}: {p.reason}", 4)
        lines += _wrapped(f"probe: {p.probe}; obsolete when: {p.obsolete_when}", 6)
    return lines


def run(as_json: bool, verbose: bool = False) -> int:
    """Print the report; exit code 0 when the fix is active, 1 when not (out_dtype off, a
    feature failed, or a stage still waits for torch._inductor, which cannot be imported
    here), 2 without torch."""
    try:
        import torch  # noqa: F401  (activates the fix through whichever route is on)
    except Exception as error:
        print(f"could not run: torch cannot be imported ({type(error).__name__}: {error})")
        return 2
    import inductor_addmm_fix as fix

    inductor_error = None
    try:
        import torch._inductor.compile_fx  # noqa: F401  (the Inductor part of each feature waits for it)
    except Exception as error:
        inductor_error = error
    report = fix.status()
    if as_json:
        from .revision import git_revision

        unimportable = None if inductor_error is None else f"{type(inductor_error).__name__}: {inductor_error}"
        from ..installer import idle_here, settings

        print(json.dumps({**report.as_dict(), "summary": headline(report), "idle_here": idle_here(), "settings": settings(),
                          "git_revision": git_revision(),
                          "inductor_import_error": unimportable, "routes": _routes_report()}, indent=2))
    else:
        print("\n".join(format_text(report, verbose, inductor_error)))
    return 0 if report.active and report.installed and not report.waiting else 1
