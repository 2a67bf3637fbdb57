"""The one parser of a feature selection, as the environment variable INDUCTOR_ADDMM_FIX
(every activation route), ``install(features=...)`` and the command line take it:

* unset, empty, ``1``, ``true``, ``on``, ``yes``, ``all`` (any case): every feature;
* ``0``, ``false``, ``off``, ``no`` (any case, as the whole value): none (for the
  variable: every activation route is off);
* a comma list of words: ``-name`` removes a feature, a bare ``name`` (or ``+name``)
  selects only the named ones (``1,-slice_writes``, ``-chunk_order``,
  ``out_dtype,reinplace``).  ``install(features=...)`` also takes an iterable of such
  words.

Any other word is unknown: it is ignored, with one warning per process and selection
(:func:`resolve`), whose text names every word this parser takes.

Imported at interpreter start-up (by the ``.pth`` line's module): imports nothing
but ``features``, which imports nothing.
"""

from __future__ import annotations

from ..features import BY_NAME, NAMES

ON = ("1", "true", "on", "yes", "all")  # and the empty value
OFF = ("0", "false", "off", "no")

_warned: set = set()  # the selections (who selected them) with unknown words warned about


def is_off(value: str) -> bool:
    """Whether a value of the variable turns every route off."""
    return value.strip().lower() in OFF


def words(value: str) -> list[str]:
    """The words of a value: split at commas, stripped, lower case, empty ones dropped."""
    return [w for w in (w.strip().lower() for w in value.split(",")) if w]


def parse(spec) -> tuple[frozenset, tuple]:
    """(the selected feature names, the unknown words) of a spec: a string as above,
    None (every feature), or an iterable of words."""
    if spec is None:
        return frozenset(NAMES), ()
    if isinstance(spec, str):
        given = words(spec)
        if not given:
            return frozenset(NAMES), ()
        if len(given) == 1 and given[0] in OFF:
            return frozenset(), ()
    else:
        given = [str(w).strip().lower() for w in spec]
    chosen, removed, unknown, everything = set(), set(), [], False
    for word in given:
        name = word[1:] if word[:1] in "+-" else word
        if word in ON:
            everything = True
        elif name in BY_NAME:
            (removed if word.startswith("-") else chosen).add(name)
        else:
            unknown.append(word)
    # Only removals (or only unknown words): from every feature.  An empty iterable: none.
    everything = everything or (not chosen and bool(given))
    selected = set(NAMES) if everything else chosen
    return frozenset(selected - removed), tuple(unknown)


def accepted_words() -> str:
    """Every word :func:`parse` takes, as the unknown-word warning names them."""
    return (
        f"a feature ({', '.join(NAMES)}), a feature after '-' (off) or '+', "
        f"{', '.join(ON)} (every feature), or alone {', '.join(OFF)} (none)"
    )


def unknown_words_message(source: str, unknown, selected) -> str:
    """The warning for words of a selection that :func:`parse` does not take."""
    applied = [n for n in NAMES if n in selected]
    effect = "every feature" if len(applied) == len(NAMES) else ", ".join(applied) or "no feature"
    return (
        f"inductor_addmm_fix: {source}: ignoring {', '.join(map(repr, unknown))}; the words taken are "
        f"{accepted_words()}; applying {effect}"
    )


def resolve(spec, source: str, **where) -> frozenset:
    """The feature names a spec selects.  Its unknown words are warned about once per
    process and ``source`` (``INDUCTOR_ADDMM_FIX=...``, ``install(features=...)``), where
    ``where`` says (``filename=``, or ``stacklevel=`` counted from the caller of this
    function, as for :func:`warnings.warn`); the warning never raises."""
    selected, unknown = parse(spec)
    if unknown and source not in _warned:
        _warned.add(source)
        from .startup import warn

        if "stacklevel" in where:
            where["stacklevel"] += 1
        warn(unknown_words_message(source, unknown, selected), **where)
    return selected
