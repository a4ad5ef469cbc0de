"""A stand-in for a Python package that is not installed.

Copied as NAME/__init__.py for each package that a program imports but a
given run never uses. Any attribute, submodule, call, subclass or iteration
of it gives another stand-in, so importing code that only names the
package's classes and functions at import time works. Nothing it returns
is real: code that actually uses the package gets stand-ins, not results.
"""

import importlib.abc
import importlib.machinery
import sys

__version__ = "0.0.0"


class _Meta(type):
    def __getattr__(cls, name):
        if name.startswith("__") and name.endswith("__"):
            raise AttributeError(name)
        return _make(cls.__qualname__ + "." + name)

    def __iter__(cls):
        return iter(())

    def __len__(cls):
        return 0

    def __bool__(cls):
        return False

    def __or__(cls, other):
        return cls

    __ror__ = __or__

    def __getitem__(cls, item):
        return cls

    def __repr__(cls):
        return "<stand-in %s>" % cls.__qualname__


class Stub(metaclass=_Meta):
    def __init__(self, *args, **kwargs):
        pass

    def __call__(self, *args, **kwargs):
        if len(args) == 1 and not kwargs and callable(args[0]):
            return args[0]  # used as a decorator
        return self

    def __getattr__(self, name):
        if name.startswith("__") and name.endswith("__"):
            raise AttributeError(name)
        return _make(type(self).__qualname__ + "." + name)()

    def __iter__(self):
        return iter(())

    def __bool__(self):
        return False


def _make(qualname):
    return _Meta(qualname.rsplit(".", 1)[-1], (Stub,), {"__qualname__": qualname})


def _module_getattr(module_name):
    def getattr_(name):
        if name.startswith("__") and name.endswith("__"):
            raise AttributeError(name)
        return _make(module_name + "." + name)

    return getattr_


class _Finder(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    def __init__(self, root):
        self.root = root

    def find_spec(self, fullname, path=None, target=None):
        if fullname.startswith(self.root + "."):
            return importlib.machinery.ModuleSpec(fullname, self, is_package=True)
        return None

    def create_module(self, spec):
        return None

    def exec_module(self, module):
        module.__path__ = []
        module.__version__ = __version__
        module.__getattr__ = _module_getattr(module.__name__)


__getattr__ = _module_getattr(__name__)
sys.meta_path.append(_Finder(__name__))
