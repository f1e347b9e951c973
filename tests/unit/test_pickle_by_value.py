"""``fabric.rayio.instances.pickle_by_value`` pickles a user's class by value and leaves the pickling
registry as it found it: a module the user registered stays registered (a test module registers
itself so that its functions reach workers that cannot import it), one it registered itself does not."""

from __future__ import annotations

import importlib
import sys

from ray import cloudpickle

from fabric.rayio.instances import pickle_by_value


def _module(tmp_path, name: str):
    (tmp_path / f"{name}.py").write_text("class Job:\n    pass\n\n\ndef where():\n    return 'here'\n")
    sys.path.insert(0, str(tmp_path))
    try:
        return importlib.import_module(name)
    finally:
        sys.path.remove(str(tmp_path))


def test_a_module_the_user_registered_stays_registered(tmp_path):
    mod = _module(tmp_path, "fabric_user_mod_registered")
    cloudpickle.register_pickle_by_value(mod)
    try:
        blob = pickle_by_value(mod.Job)
        assert mod.__name__ in cloudpickle.list_registry_pickle_by_value()
        del sys.modules[mod.__name__]  # a process that cannot import it still loads both
        assert cloudpickle.loads(blob).__name__ == "Job"
    finally:
        if mod.__name__ in cloudpickle.list_registry_pickle_by_value():
            cloudpickle.unregister_pickle_by_value(mod)
        sys.modules.pop(mod.__name__, None)


def test_a_module_registered_for_the_pickle_alone_is_unregistered_after(tmp_path):
    mod = _module(tmp_path, "fabric_user_mod_plain")
    try:
        blob = pickle_by_value(mod.Job)
        assert mod.__name__ not in cloudpickle.list_registry_pickle_by_value()
        del sys.modules[mod.__name__]
        assert cloudpickle.loads(blob).__name__ == "Job"
    finally:
        sys.modules.pop(mod.__name__, None)
