"""The patch registry's attribute slots: two of this package's wrappers of one function
(two features that torch reaches through one name) roll back in either order, each
leaving the other working; a wrapper someone else put over ours is left in place."""

import types

import pytest

from inductor_addmm_fix.patching.registry import Patch, Registry
from inductor_addmm_fix.patching.slots import Attribute, innermost


def stock(x):
    return [x]


def spliceable(tag):
    """A patch factory: a wrapper appending ``tag`` that calls what it wraps through
    its ``stock`` attribute."""

    def factory(inner):
        def wrapper(x):
            return wrapper.stock(x) + [tag]

        wrapper.stock, wrapper.splices = inner, True
        return wrapper

    return factory


@pytest.fixture
def owner():
    return types.SimpleNamespace(analyse=stock)


def patch(owner, tag):
    return Patch(tag, Attribute(owner, "analyse", "owner"), spliceable(tag))


@pytest.mark.parametrize("first_rolled_back", ["a", "b"])
def test_two_wrappers_of_one_function_roll_back_in_either_order(owner, first_rolled_back):
    registry = Registry(after_change=())
    a, b = patch(owner, "a"), patch(owner, "b")
    registry.apply([a])
    registry.apply([b])
    assert owner.analyse(0) == [0, "a", "b"]
    assert registry.restore(only=[{"a": a, "b": b}[first_rolled_back]]) == []
    other = "b" if first_rolled_back == "a" else "a"
    assert owner.analyse(0) == [0, other]
    assert innermost(owner.analyse) is stock
    assert registry.restore() == []
    assert owner.analyse is stock


def test_a_rolled_back_wrapper_applied_again_goes_over_the_other(owner):
    registry = Registry(after_change=())
    a, b = patch(owner, "a"), patch(owner, "b")
    registry.apply([a])
    registry.apply([b])
    registry.restore(only=[a])
    again = patch(owner, "a")
    registry.apply([again])
    assert owner.analyse(0) == [0, "b", "a"]
    registry.restore()
    assert owner.analyse is stock


def test_a_wrapper_someone_else_put_over_ours_is_left_in_place(owner):
    registry = Registry(after_change=())
    registry.apply([patch(owner, "a")])
    ours = owner.analyse

    def theirs(x):
        return ours(x) + ["theirs"]

    owner.analyse = theirs
    (problem,) = registry.restore()
    assert "changed by someone else" in problem
    assert owner.analyse is theirs
