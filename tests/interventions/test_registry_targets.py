"""A component's ``_target_`` is imported and checked to be a component class of the expected kind
before anything is called: a function (``os.system``), another library's class
(``subprocess.Popen``) or a component of the other kind is one line and never runs."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from cbm.core.validation import ConfigError
from cbm.interventions import registry

COMPONENTS = '''
from dataclasses import dataclass

CALLS = []


class GoodIntervener:
    @dataclass
    class Config:
        value: float = 1.0

    def __init__(self, value):
        self.value = value

    @classmethod
    def from_config(cls, cfg, ctx):
        return cls(cfg.value)

    def __call__(self, batch, state, mask):
        return state.probs


class PlainConfig:
    class Config:  # not a dataclass
        def __init__(self, **kw):
            CALLS.append(("Config", kw))

    @classmethod
    def from_config(cls, cfg, ctx):
        CALLS.append("from_config")

    def __call__(self, batch, state, mask):
        return None


class StaticFactory:
    @dataclass
    class Config:
        pass

    @staticmethod
    def from_config(cfg, ctx):
        CALLS.append("from_config")

    def __call__(self, batch, state, mask):
        return None


class NoCall:
    @dataclass
    class Config:
        pass

    @classmethod
    def from_config(cls, cfg, ctx):
        CALLS.append("from_config")


def function(**kw):
    CALLS.append(("function", kw))
'''


@pytest.fixture
def components(tmp_path, monkeypatch):
    (tmp_path / "my_components.py").write_text(COMPONENTS)
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.delitem(sys.modules, "my_components", raising=False)
    import my_components

    yield my_components
    sys.modules.pop("my_components", None)


@pytest.fixture
def no_exec(monkeypatch) -> list:
    calls: list = []
    monkeypatch.setattr(os, "system", lambda *a, **k: calls.append(a) or 0)
    monkeypatch.setattr(subprocess, "run", lambda *a, **k: calls.append(a))
    return calls


@pytest.mark.parametrize(
    ("kind", "name", "target", "match"),
    [
        ("intervener", "oracle", "os.system", r"_target_ os.system is a \w+, not an intervener class"),
        ("intervener", "oracle", "subprocess.run", r"_target_ subprocess.run is a \w+, not an intervener class"),
        ("intervener", "oracle", "subprocess.Popen", "_target_ subprocess.Popen is a class, not an intervener class"),
        ("intervener", "oracle", "builtins.eval", "not an intervener class"),
        ("intervener", "oracle", "cbm.interventions.policies.random.RandomPolicy", "is a class, not an intervener class"),
        ("policy", "random", "cbm.interventions.interveners.oracle.OracleIntervener", "is a class, not a policy class with select"),
        ("policy", "random", "os.system", "not a policy class"),
        ("intervener", "oracle", "my_components.PlainConfig", "is a class, not an intervener class"),
        ("intervener", "oracle", "my_components.StaticFactory", "is a class, not an intervener class"),
        ("intervener", "oracle", "my_components.NoCall", "is a class, not an intervener class"),
        ("intervener", "oracle", "my_components.function", "is a function, not an intervener class"),
        ("intervener", "oracle", "my_components.CALLS", "is a list, not an intervener class"),
        ("intervener", "oracle", "no_such_module_x.Thing", "cannot import _target_ no_such_module_x.Thing"),
        ("intervener", "oracle", "cbm.interventions.interveners.base.Intervener", "is the base class itself, not an intervener class"),
        ("intervener", "oracle", "builtins.type", "is a class, not an intervener class"),
        ("intervener", "oracle", "oracle", "must look like 'package.module.Name'"),
    ],
)
def test_a_target_that_is_not_a_component_is_refused_uncalled(components, no_exec, kind, name, target, match):
    for step in (lambda: registry.validate(kind, name, {"_target_": target}),
                 lambda: registry.build(kind, name, {"_target_": target}, registry.BuildContext())):  # fmt: skip
        with pytest.raises(ValueError, match=match) as err:
            step()
        assert "\n" not in str(err.value) and str(err.value).startswith(f"{kind} '{name}': ")
    assert no_exec == [] and components.CALLS == []


def test_a_component_class_of_the_right_kind_is_built(components):
    got = registry.build("intervener", "oracle", {"_target_": "my_components.GoodIntervener", "value": 0.5}, registry.BuildContext())
    assert isinstance(got, components.GoodIntervener) and got.value == 0.5
    for kind in registry.KINDS:  # every shipped component passes the check
        names = shipped(kind)
        assert names, kind
        for name in names:
            assert registry.component_class(kind, name).from_config


def shipped(kind: str) -> list[str]:
    """The package's own components of ``kind``: another xdist worker's test may add (and remove) a
    temporary ``conf/<kind>/<name>.yaml`` naming a module only that worker can import."""
    out = []
    for name in registry.names(kind):
        try:
            target = registry.defaults(kind, name).get("_target_", "")
        except (ConfigError, OSError):  # removed since the listing
            continue
        if str(target).startswith("cbm."):
            out.append(name)
    return out


def test_the_registry_error_is_one_line_through_the_config_error_type(components):
    with pytest.raises(ConfigError):
        registry.validate("intervener", "oracle", {"_target_": "os.system"})
