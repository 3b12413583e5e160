"""Package attributes that import their module on first use (PEP 562), for `__init__.py`s."""

from __future__ import annotations

import importlib
from collections.abc import Callable
from typing import Any


def lazy_attributes(namespace: dict[str, Any], names: dict[str, str],
                    moved: dict[str, str] | None = None
                    ) -> tuple[Callable[[str], Any], Callable[[], list[str]]]:
    """(`__getattr__`, `__dir__`) for the package whose `globals()` is `namespace`: each public
    name in `names` ({name: module}) imports its module when first read, then stays. A name in
    `moved` ({name: where it is now}) is an AttributeError saying where (it is not imported:
    it lives above this package)."""
    package = namespace["__name__"]

    def __getattr__(name: str) -> Any:
        if name in names:
            module = importlib.import_module(names[name])
            # a subpackage listed under its own name is the module itself
            value = module if names[name] == f"{package}.{name}" else getattr(module, name)
            namespace[name] = value   # later look-ups skip this hook
            return value
        if moved and name in moved:
            raise AttributeError(f"{package}.{name} has moved: use {moved[name]}")
        raise AttributeError(f"module {package!r} has no attribute {name!r}")

    def __dir__() -> list[str]:
        return sorted(list(namespace) + list(names))
    return __getattr__, __dir__
