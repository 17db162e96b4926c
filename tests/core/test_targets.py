"""``cbm.core.targets``: a user-named target is imported and checked, never called, unless it is
a class of the expected kind or carries the kind's mark (one rule for the ``llm`` client, the EDCT
segmenter, the registry's ``_target_`` and torchvision dataset names)."""

from __future__ import annotations

import inspect
import sys

import pytest

from cbm.core.targets import accepts, is_marked, mark, resolve

MODULE = '''
import abc

from cbm.core.targets import mark

CALLS = []


class Base(abc.ABC):
    @abc.abstractmethod
    def run(self): ...


class Good(Base):
    def run(self):
        CALLS.append("run")


class Abstract(Base):
    pass


class Lookalike:
    """Has ``run`` but does not derive from Base."""
    def run(self):
        CALLS.append("lookalike")


@mark("widget_factory")
def marked(**kw):
    CALLS.append("marked")


@mark("widget_factory")
class MarkedClass:
    pass


@mark("other_factory")
def other_mark(**kw):
    CALLS.append("other")


def plain(**kw):
    CALLS.append("plain")


class Liar:
    """Claims every attribute, the mark included."""
    def __getattr__(self, name):
        return True


liar = Liar()
marked_instance = MarkedClass()


class Outer:
    class Inner(Base):
        def run(self):
            pass
'''


@pytest.fixture
def widgets(tmp_path, monkeypatch):
    (tmp_path / "my_widgets.py").write_text(MODULE)
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.delitem(sys.modules, "my_widgets", raising=False)
    import my_widgets

    yield my_widgets
    sys.modules.pop("my_widgets", None)


def check(spec, **kw):
    import my_widgets

    return resolve(spec, "widget.target", kinds=(my_widgets.Base,), mark="widget_factory", need="a widget", **kw)


@pytest.mark.parametrize(
    ("spec", "what"),
    [("os:system", "a builtin_function_or_method"), ("builtins:eval", "a builtin_function_or_method"),
     ("builtins:type", "a class"), ("subprocess:run", "a function"), ("subprocess:Popen", "a class"), ("os:path", "a module"),
     ("my_widgets:plain", "a function"), ("my_widgets:Lookalike", "a class"), ("my_widgets:Base", "the base class itself"),
     ("my_widgets:Abstract", "a class"), ("my_widgets:other_mark", "a function"), ("my_widgets:liar", "a Liar"),
     ("my_widgets:marked_instance", "a MarkedClass"), ("my_widgets:CALLS", "a list")],
)  # fmt: skip
def test_anything_but_a_class_of_the_kind_or_a_marked_target_is_refused_uncalled(widgets, spec, what):
    with pytest.raises(ValueError) as err:
        check(spec, check=lambda cls: not inspect.isabstract(cls))
    assert str(err.value) == f"widget.target: '{spec}' is {what}, not a widget; it was not called"
    assert widgets.CALLS == []


def test_classes_of_the_kind_and_marked_targets_are_returned(widgets):
    assert check("my_widgets:Good") is widgets.Good
    assert check("my_widgets:Outer.Inner") is widgets.Outer.Inner  # a nested class
    assert check("my_widgets:marked") is widgets.marked and check("my_widgets:MarkedClass") is widgets.MarkedClass
    assert check("my_widgets.Good", sep=".") is widgets.Good
    assert widgets.CALLS == []
    assert is_marked(widgets.marked, "widget_factory") and not is_marked(widgets.liar, "widget_factory")
    assert not accepts(widgets.Lookalike, (widgets.Base,)) and accepts(widgets.Good, (widgets.Base,))


@pytest.mark.parametrize(
    ("spec", "sep", "match"),
    [("my_widgets", ":", "must look like 'module:Name' \\(a widget\\), got 'my_widgets'"), (5, ":", "must look like .*, got 5"),
     (None, ":", "must look like .*, got None"), ("a:b:c", ":", "must look like"), (":Good", ":", "must look like"),
     ("my_widgets:", ":", "must look like"), ("Good", ".", "must look like 'package.module.Name'"),
     ("my_widgets:Nope", ":", "cannot import 'my_widgets:Nope' \\(AttributeError: "),
     ("no_such_module_xyz:X", ":", "cannot import 'no_such_module_xyz:X' \\(ModuleNotFoundError: ")],
)  # fmt: skip
def test_a_bad_spec_is_one_line(widgets, spec, sep, match):
    with pytest.raises(ValueError, match=f"^widget.target: {match}") as err:
        check(spec, sep=sep)
    assert "\n" not in str(err.value)


def test_a_name_inside_a_given_module(widgets):
    assert resolve("Good", "w", kinds=(widgets.Base,), module="my_widgets", need="a widget") is widgets.Good
    with pytest.raises(ValueError, match="^w: 'plain' of my_widgets is a function, not a widget; it was not called$"):
        resolve("plain", "w", kinds=(widgets.Base,), module="my_widgets", need="a widget")
    for bad in ("_private", "a.b", "", 3):
        with pytest.raises(ValueError, match="^w: must be the name of a widget in my_widgets, got "):
            resolve(bad, "w", kinds=(widgets.Base,), module="my_widgets", need="a widget")
    assert widgets.CALLS == []


def test_mark_sets_one_attribute_per_kind():
    @mark("thing_factory")
    def f():
        return None

    assert f.__cbm_thing_factory__ is True and is_marked(f, "thing_factory") and not is_marked(f, "other")
