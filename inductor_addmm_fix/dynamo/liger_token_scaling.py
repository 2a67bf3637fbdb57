"""Liger FLCE's forward with token scaling and no host sync per chunk: what the op of
``dynamo/liger_head_op.py`` runs where a compiled graph calls Liger with
``use_token_scaling=True``.

Liger's chunk loop (0.8.1 through 0.8.5 and the nightly) finds each token's predicted
probability of its target with a boolean mask (:data:`LIGER_FORM`, after
:data:`MASK`).  Each boolean index waits for the GPU to count the mask (three host
syncs a chunk), so the GPU idles while the host launches the next chunk's kernels: on
the Qwen2.5-0.5B head (128 chunks at 4096 tokens) steps took 139-163 ms for 87 ms of
GPU work (H200).  The same values come from a gather over every row, with the ignored
rows' index and result masked (:data:`SYNC_FREE_FORM`): each valid row picks the same
element of the same ``probs``, each ignored row is 0, in ``probs``' dtype: bit for bit
Liger's factors, without a sync.

:func:`without_host_syncs` builds that function from Liger's own: it parses the source
of the forward it is given, replaces those two statements (after ``del`` statements,
which differ between Liger versions, are set aside, they must be :data:`LIGER_FORM`) and
compiles the result in Liger's module, with its file and line numbers.  Any other source
gives Liger's function back unchanged, with the reason (:func:`why_not`).  Liger on disk
and in memory is unchanged, and so is eager code: only the op's kernel runs the result,
and Dynamo traces it for Liger's loop under ``loop`` (``dynamo/liger_head.py``).

Retired by: Liger computing the factors without a boolean index
(docs/upstream/liger-compile-graph-breaks.md, section 4).
"""

from __future__ import annotations

import __future__
import ast
import functools
import inspect
import textwrap
from typing import Callable

#: The statements replaced, as Liger writes them (``del`` statements aside).
LIGER_FORM = """
valid_targets = target_chunk[valid_target_mask]
if len(valid_targets) > 0:
    valid_probs = probs[valid_target_mask]
    pred_probs_valid = torch.gather(valid_probs, -1, valid_targets.unsqueeze(-1)).squeeze(-1)
    pred_probs = torch.zeros_like(target_chunk, dtype=probs.dtype, device=probs.device)
    pred_probs[valid_target_mask] = pred_probs_valid
else:
    pred_probs = torch.zeros_like(target_chunk, dtype=probs.dtype, device=probs.device)
"""
#: What replaces them.
SYNC_FREE_FORM = """
valid_targets = target_chunk.masked_fill(~valid_target_mask, 0)
pred_probs = torch.gather(probs, -1, valid_targets.unsqueeze(-1)).squeeze(-1).masked_fill(~valid_target_mask, 0)
"""
#: The statement that must come right before them.
MASK = "valid_target_mask = target_chunk != ignore_index"


def _without_del(statements: list) -> list:
    """``statements`` with every ``del`` left out, in nested bodies too (a copy)."""
    kept = []
    for statement in statements:
        if isinstance(statement, ast.Delete):
            continue
        if isinstance(statement, ast.If):
            statement = ast.If(test=statement.test, body=_without_del(statement.body), orelse=_without_del(statement.orelse))
        kept.append(statement)
    return kept


def _same(statements: list, form: str) -> bool:
    return [ast.dump(s) for s in _without_del(statements)] == [ast.dump(s) for s in ast.parse(form).body]


def _replace(body: list) -> int:
    """Replace each occurrence of :data:`LIGER_FORM` in ``body`` and the bodies nested in
    it (in place); returns how many."""
    replaced = 0
    for node in body:
        for field in ("body", "orelse", "finalbody"):
            nested = getattr(node, field, None)
            if isinstance(nested, list):
                replaced += _replace(nested)
    for i in range(1, len(body) - 1):
        if ast.unparse(body[i - 1]) == MASK and _same(body[i : i + 2], LIGER_FORM):
            new = ast.parse(SYNC_FREE_FORM).body
            for statement in new:
                ast.copy_location(statement, body[i])
                ast.fix_missing_locations(statement)
            body[i : i + 2] = new
            replaced += 1
    return replaced


@functools.lru_cache(maxsize=8)
def _rewritten(fn: Callable) -> tuple[Callable | None, str | None]:
    """(the rewritten function, None), or (None, why not)."""
    if getattr(fn, "__closure__", None) or not hasattr(fn, "__globals__"):
        return None, "it is not a plain module-level function"
    try:
        lines, first = inspect.getsourcelines(fn)
        filename = inspect.getsourcefile(fn) or "<liger>"
    except (TypeError, OSError) as error:
        return None, f"its source cannot be read ({type(error).__name__})"
    tree = ast.parse(textwrap.dedent("".join(lines)))
    definition = tree.body[0] if len(tree.body) == 1 else None
    if not isinstance(definition, ast.FunctionDef) or definition.decorator_list or definition.name != fn.__name__:
        return None, "its source is not one undecorated function"
    replaced = _replace(definition.body)
    if replaced != 1:
        return None, f"its source has {replaced} boolean-mask blocks of token scaling, not one"
    ast.increment_lineno(tree, first - 1)
    namespace: dict = {}
    flags = fn.__code__.co_flags & __future__.annotations.compiler_flag  # Liger's future import, not this module's
    exec(compile(tree, filename, "exec", flags=flags, dont_inherit=True), fn.__globals__, namespace)  # noqa: S102  (Liger's own source, one block replaced)
    rewritten = namespace[fn.__name__]
    rewritten.__defaults__, rewritten.__kwdefaults__ = fn.__defaults__, fn.__kwdefaults__
    rewritten.__qualname__ = fn.__qualname__
    rewritten.__doc__ = fn.__doc__
    return rewritten, None


def without_host_syncs(fn: Callable) -> Callable:
    """``fn`` (Liger's ``fused_linear_cross_entropy_forward``) with its token scaling's
    boolean indexing replaced (see the module docstring), or ``fn`` where its source is
    not the one this module knows."""
    rewritten, _ = _rewritten(fn)
    return rewritten if rewritten is not None else fn


def why_not(fn: Callable) -> str | None:
    """None where :func:`without_host_syncs` rewrites ``fn``, else why not."""
    return _rewritten(fn)[1]
