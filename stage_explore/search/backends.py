"""Finding the evaluator a study names: built-ins, registered plug-ins, ``module:attribute``.

Contents:
    :data:`BUILTIN_BACKENDS`
        the reserved names and where their classes live (imported only when used).
    :func:`register_backend`
        make a plug-in factory available under a name (in this process).
    :func:`resolve_backend`
        a name or ``module:attribute`` → the factory (a class or function returning a backend).
    :func:`create_backend`
        the factory called with the study's ``[backend] options``.
    :func:`preflight`
        let a backend that needs an external program fail before any trial.

The registry is the one piece of process state of the explorer: plug-ins register at import
time, as with entry points. Workers never look names up: the driver resolves the factory and
sends it to them (by reference, so it must be importable there too).
"""

from __future__ import annotations

import difflib
import importlib
from collections.abc import Callable, Mapping
from types import MappingProxyType
from typing import Any

from stage_core.errors import ConfigError
from stage_explore.evaluation import BaseBackend

BackendFactory = Callable[..., BaseBackend]

#: Reserved names → ``module:attribute`` of the built-in backends.
BUILTIN_BACKENDS: Mapping[str, str] = MappingProxyType(
    {
        "analytical": "stage_explore.analytical.backend:AnalyticalBackend",
        "astra-sim": "stage_explore.astrasim:AstraSimBackend",
    }
)

_REGISTERED: dict[str, BackendFactory] = {}


def register_backend(name: str, factory: BackendFactory) -> None:
    """Make ``factory`` the backend called ``name`` in study files (``[backend] name``).

    The built-in names (:data:`BUILTIN_BACKENDS`) are reserved; registering a name twice with
    a different factory is an error.
    """
    if name in BUILTIN_BACKENDS:
        raise ConfigError(
            f"backend name {name!r} is reserved for the built-in backend {BUILTIN_BACKENDS[name]}"
        )
    if ":" in name or not name:
        raise ConfigError(f"backend name {name!r} must be a non-empty word without ':'")
    if not callable(factory):
        raise ConfigError(f"backend factory for {name!r} must be callable, got {factory!r}")
    known = _REGISTERED.get(name)
    if known is not None and known is not factory:
        raise ConfigError(f"backend name {name!r} is already registered to {known!r}")
    _REGISTERED[name] = factory


def _import(reference: str, what: str) -> BackendFactory:
    module_name, _, attribute = reference.partition(":")
    try:
        target: Any = importlib.import_module(module_name)
    except ImportError as error:
        raise ConfigError(f"{what}: cannot import module {module_name!r} ({error})") from None
    for part in attribute.split("."):
        if not hasattr(target, part):
            raise ConfigError(f"{what}: module {module_name!r} has no attribute {attribute!r}")
        target = getattr(target, part)
    if not callable(target):
        raise ConfigError(f"{what}: {reference!r} is not callable")
    if isinstance(target, type) and not callable(getattr(target, "evaluate", None)):
        raise ConfigError(
            f"{what}: class {reference!r} has no evaluate(); expected a backend class (one with "
            "evaluate(model, parallel, system)) or a factory that returns one"
        )
    factory: BackendFactory = target
    return factory


def resolve_backend(name: str) -> BackendFactory:
    """The factory for a built-in name, a registered name, or ``module:attribute``."""
    if name in BUILTIN_BACKENDS:
        return _import(BUILTIN_BACKENDS[name], f"built-in backend {name!r}")
    if name in _REGISTERED:
        return _REGISTERED[name]
    if ":" in name:
        return _import(name, f"backend {name!r}")
    names = sorted([*BUILTIN_BACKENDS, *_REGISTERED])
    close = difflib.get_close_matches(name, names, n=1)
    hint = f" (did you mean {close[0]!r}?)" if close else ""
    raise ConfigError(
        f"unknown backend {name!r}{hint}; expected one of {', '.join(names)} or 'module:Class'"
    )


def preflight(backend: Any) -> None:
    """Let a backend that depends on an external program fail fast (ASTRA-sim's binary)."""
    check = getattr(backend, "preflight", None)
    if callable(check):
        check()


def _name(factory: BackendFactory) -> str:
    """``module:qualname`` of a factory where it has them, else its repr."""
    module, qualname = getattr(factory, "__module__", None), getattr(factory, "__qualname__", None)
    return f"{module}:{qualname}" if module and qualname else repr(factory)


def create_backend(factory: BackendFactory, options: Mapping[str, Any]) -> BaseBackend:
    """Call ``factory(**options)``; wrong options are a :class:`ConfigError`."""
    try:
        backend = factory(**dict(options))
    except TypeError as error:
        given = ", ".join(sorted(options)) or "none"
        raise ConfigError(
            f"[backend] options: {error} (backend factory {_name(factory)} called with the "
            f"options {given}; expected a backend class or factory taking them as keywords)"
        ) from None
    if not hasattr(backend, "evaluate"):
        raise ConfigError(
            f"backend factory {factory!r} returned {backend!r}, which has no evaluate()"
        )
    return backend
