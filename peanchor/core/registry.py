"""One registry type behind every plug-in family (positional encodings, shift kinds, lenses, presets, interventions,
datasets, model sizes, audit checks, backends), and the loading of plug-ins from outside the package.

A :class:`Registry` maps a name to what was registered under it. Every family registers the same way, with one
verb: decorate the class (or pass the object) to :meth:`Registry.register`, and the name is the object's ``name``
attribute (an intervention's ``kind``: its registry reads that), as timm's ``@register_model`` reads the function's
name::

    @LENSES.register
    class Entropy(Lens):
        name = "attention_entropy"

An object that cannot carry a name (a model size's dict) is registered with it: ``MODEL_SIZES.register(size,
name="vit_huge")``. A registry may also hold a name whose object is not imported yet
(:meth:`Registry.register_lazy`, as transformers' lazy modules do): ``PE_REGISTRY.register_lazy("rope",
"peanchor.pe.rotary")`` lists ``rope`` without importing the module (and torch), and the first lookup of ``rope``
imports it, where the class registers itself. So the command line checks a ``--pe`` against the registry itself,
before torch loads.

A name must be an identifier, not taken and not reserved (a lens may not be called ``settings``: the result files
keep their own keys beside the lens records); a refusal is one :class:`RegistryError` line. Lookups
(:meth:`Registry.lookup`) fail with one line that lists the valid names and the closest one ("did you mean").
:meth:`Registry.names` and :class:`NamesView` are live: a name registered later is in them.

Plug-ins outside the package reach a registry three ways, as pytest's do:

* an installed distribution declares entry points in one of :data:`GROUPS` (``[project.entry-points."peanchor.lenses"]``
  in its ``pyproject.toml``, ``name = "module"`` or ``"module:Object"``); a registry loads its group the first
  time it is read (a loaded object that is not yet registered, e.g. a class, is registered then);
* the ``PEANCHOR_PLUGINS`` environment variable, comma-separated module names, imported at the same moment (a
  spawned worker inherits it);
* the command line's ``--plugin MODULE`` (:func:`load_plugins`), which :func:`loaded_plugins` lists for the
  worker processes of ``reproduce``.

Imports: :mod:`peanchor.core.errors`; :mod:`importlib.metadata` and the plug-ins themselves when a registry is first
read.
"""

from __future__ import annotations

import contextlib
import difflib
import importlib
import os
import sys
from collections.abc import Callable, Iterable, Iterator, Mapping, MutableMapping, Sequence
from types import ModuleType
from typing import Any, Generic, TypeVar, overload

from peanchor.core.errors import ConfigError, PeanchorError

__all__ = ["GROUPS", "PLUGINS_ENV", "DerivedView", "NamesView", "Registry", "RegistryError", "entry_point_names",
           "installed_entry_points", "declared_modules", "load_plugins", "loaded_plugins", "plugins_from_env",
           "plugins_in_environment"]  # fmt: skip

T = TypeVar("T")
O = TypeVar("O")

#: The entry-point groups peanchor reads, one per plug-in family.
GROUPS: tuple[str, ...] = ("peanchor.pes", "peanchor.shifts", "peanchor.lenses", "peanchor.presets.catalog",
                           "peanchor.interventions", "peanchor.datasets", "peanchor.model_sizes",
                           "peanchor.audit_checks", "peanchor.backends")  # fmt: skip
#: Comma-separated modules every peanchor process imports before it first reads a registry.
PLUGINS_ENV = "PEANCHOR_PLUGINS"

_LOADED: list[str] = []  # the modules load_plugins imported, in order (the --plugin flags)
_REGISTERED = [0]  # registrations into any registry so far: whether importing a plug-in registered anything


class RegistryError(ConfigError, ValueError):
    """A name that cannot be registered or looked up, or a plug-in that does not load (one line)."""


def _import_plugin(module: str, origin: str) -> ModuleType:
    try:
        return importlib.import_module(module)
    except PeanchorError:  # a plug-in's own one-line error (e.g. a name refused) stays itself
        raise
    except Exception as e:  # noqa: BLE001 - a plug-in's own failure, shown as one line naming it
        raise RegistryError(f"plug-in {module!r} ({origin}) failed to load: {type(e).__name__}: {e}") from e


def plugins_from_env() -> tuple[str, ...]:
    """The modules named by ``PEANCHOR_PLUGINS`` (comma-separated; blanks ignored)."""
    return tuple(m.strip() for m in os.environ.get(PLUGINS_ENV, "").split(",") if m.strip())


def load_plugins(modules: Iterable[str], origin: str = "--plugin") -> None:
    """Import each of ``modules`` (each registers what it defines), once; a module that does not import is one
    :class:`RegistryError` line naming it. Modules named on the command line are recorded for the worker processes
    (:func:`loaded_plugins`); those of ``PEANCHOR_PLUGINS`` reach them through the environment already."""
    for module in modules:
        if not module or not all(part.isidentifier() for part in module.split(".")):
            raise RegistryError(f"{origin} {module!r}: expected a module name such as my_lab.peanchor_plugins")
        before = _REGISTERED[0]
        imported = _import_plugin(module, origin)
        if origin != PLUGINS_ENV and _REGISTERED[0] == before and hasattr(imported, "__path__"):
            _load_declared(module, origin)  # a package whose plug-ins sit in its submodules
        if origin != PLUGINS_ENV and module not in _LOADED:
            _LOADED.append(module)


def declared_modules(package: str) -> tuple[str, ...]:
    """The plug-in modules that installed distributions declare (entry points in :data:`GROUPS`) inside
    ``package``, in the order they are declared."""
    found = (point.value.partition(":")[0].strip() for group in GROUPS for point in installed_entry_points(group))
    return tuple(dict.fromkeys(m for m in found if m == package or m.startswith(package + ".")))


def _load_declared(package: str, origin: str) -> None:
    """Import the plug-in modules ``package`` declares; if there are none, or importing them registers nothing (and
    none was imported before, e.g. by a registry reading its entry points), one :class:`RegistryError` line says so:
    a ``--plugin`` that silently does nothing would hide a typo or a missing install."""
    import sys

    declared = declared_modules(package)
    before, earlier = _REGISTERED[0], [m for m in declared if m in sys.modules]
    for name in declared:
        _import_plugin(name, origin)
    if _REGISTERED[0] == before and not earlier:
        where = (f"its declared modules ({', '.join(declared)}) register nothing" if declared else
                 f"no installed distribution declares peanchor entry points ({', '.join(GROUPS)}) inside it")
        raise RegistryError(f"{origin} {package}: the package registered nothing: {where}; name the module that "
                            f"registers (e.g. {origin} {package}.my_pe)")  # fmt: skip


def loaded_plugins() -> tuple[str, ...]:
    """The modules :func:`load_plugins` imported in this process, in order (what a worker process loads too)."""
    return tuple(_LOADED)


@contextlib.contextmanager
def plugins_in_environment() -> Iterator[None]:
    """``PEANCHOR_PLUGINS`` with the :func:`loaded_plugins` added, while processes are started: a spawned worker
    then imports the same plug-in modules before it reads anything (its arguments included)."""
    previous = os.environ.get(PLUGINS_ENV)
    modules = list(dict.fromkeys((*plugins_from_env(), *_LOADED)))
    if modules:
        os.environ[PLUGINS_ENV] = ",".join(modules)
    try:
        yield
    finally:
        if previous is None:
            os.environ.pop(PLUGINS_ENV, None)
        else:
            os.environ[PLUGINS_ENV] = previous


_POINTS: dict[str, tuple[Any, tuple[Any, ...]]] = {}  # group → (the import path's state read at, its points)


def installed_entry_points(group: str) -> tuple[Any, ...]:
    """The entry points the installed distributions declare in ``group``, as :func:`importlib.metadata.entry_points`
    gives them. Reading every distribution's metadata costs milliseconds and every command line reads several
    groups, so a group's points are read again only when the import path, or a folder on it, changed since (a
    distribution installed or removed)."""
    from importlib.metadata import entry_points

    key = tuple((entry, _mtime(entry)) for entry in sys.path)
    cached = _POINTS.get(group)
    if cached is None or cached[0] != key:
        cached = _POINTS[group] = (key, tuple(entry_points(group=group)))
    return cached[1]


def _mtime(path: str) -> int:
    try:
        return os.stat(path or ".").st_mtime_ns
    except OSError:
        return -1


def entry_point_names(group: str) -> tuple[str, ...]:
    """The names the installed distributions declare in ``group``, read from their metadata without importing
    anything (for help texts that must not load a plug-in's torch)."""
    return tuple(dict.fromkeys(point.name for point in installed_entry_points(group)))


def _label(obj: Any) -> str:
    """``module.Class`` for a class or a function, else the object's repr."""
    qualname = getattr(obj, "__qualname__", None)
    return f"{obj.__module__}.{qualname}" if isinstance(qualname, str) else repr(obj)


class _Lazy:
    """A registered name whose object is not imported yet: the module (and the attribute) that holds it."""

    def __init__(self, module: str, attribute: str | None) -> None:
        self.module, self.attribute = module, attribute

    def __repr__(self) -> str:
        return f"<not imported yet: {self.module}{':' + self.attribute if self.attribute else ''}>"


class Registry(MutableMapping[str, T], Generic[T]):
    """Name → registered object, for one plug-in family (``what``: "lens", "shift kind", ...; ``group``: its
    entry-point group).

    ``make`` turns what is decorated into what is stored (a shift kind's class into its instance); ``check``
    refuses a malformed object (raise :class:`ValueError` with the reason); ``order`` sorts the names (lenses: by
    their ``order``, then name), otherwise they keep the order of registration. ``reserved`` names are refused.

    >>> shapes = Registry("shape", "example.shapes", reserved=("settings",))
    >>> @shapes.register
    ... class Square:
    ...     name = "square"
    >>> shapes.names(), shapes.lookup("square") is Square
    (('square',), True)
    >>> shapes.lookup("sqare")
    Traceback (most recent call last):
    peanchor.core.registry.RegistryError: unknown shape 'sqare' (did you mean 'square'?); valid: square
    """

    def __init__(
        self,
        what: str,
        group: str,
        *,
        reserved: Iterable[str] = (),
        make: Callable[[Any], T] | None = None,
        check: Callable[[Any], None] | None = None,
        order: Callable[[T], Any] | None = None,
        name_attribute: str = "name",
    ) -> None:
        self.what = what
        self.group = group
        self.reserved = frozenset(reserved)
        self._make = make
        self._check = check
        self._order = order
        self._name_attribute = name_attribute  # where a registered object says its name
        self._items: dict[str, Any] = {}  # name → the object, or a _Lazy not imported yet
        self._registered: dict[str, Any] = {}  # name → what was decorated (before ``make``)
        self._discovered = False

    # ---- registering -------------------------------------------------------------------------------------------
    @overload
    def register(self, obj: O, *, name: str | None = None) -> O: ...
    @overload
    def register(self, obj: None = None, *, name: str) -> Callable[[O], O]: ...

    def register(self, obj: Any = None, *, name: str | None = None) -> Any:
        """Register ``obj`` under its ``name`` attribute (the registry's ``name_attribute``) and return it unchanged
        (a class decorator). With ``name=``, under that name: for an object that cannot carry one (a dict), or, as
        a decorator (``@register(name="x")``), setting the object's ``name`` first."""
        if obj is None:
            if name is None:
                raise TypeError("register() needs an object, or name=")

            def decorate(target: Any) -> Any:
                setattr(target, self._name_attribute, name)
                return self.register(target)

            return decorate
        own = getattr(obj, self._name_attribute, None)
        if name is not None and own is not None and own != name:
            raise RegistryError(f"{_label(obj)} says its name is {own!r}, not {name!r}")
        key = own if name is None else name
        if not isinstance(key, str) or not key.isidentifier():
            raise RegistryError(f"{key!r} cannot name a {self.what} ({_label(obj)}): the name is not an identifier")
        if key in self.reserved:
            raise RegistryError(f"{key!r} cannot name a {self.what}: the result files use it "
                                f"(reserved: {', '.join(sorted(self.reserved))})")  # fmt: skip
        self._refuse_taken(key, obj)
        if self._check is not None:
            self._check(obj)
        self[key] = self._make(obj) if self._make is not None else obj
        self._registered[key] = obj
        _REGISTERED[0] += 1
        return obj

    def _refuse_taken(self, key: str, obj: Any) -> None:
        """One line when ``key`` is taken by another object; a lazy name is taken by its own module only."""
        taken = self._registered.get(key, self._items.get(key))
        if isinstance(taken, _Lazy):
            if getattr(obj, "__module__", taken.module) != taken.module:
                raise RegistryError(f"a {self.what} named {key!r} is already registered (from {taken.module}); "
                                    "registered twice")  # fmt: skip
        elif key in self._items and taken is not obj:
            raise RegistryError(f"a {self.what} named {key!r} is already registered ({_label(taken)}); "
                                "registered twice")  # fmt: skip

    def register_lazy(self, name: str, target: str) -> None:
        """List ``name`` now and import it on its first lookup: ``target`` is ``"module"`` (importing it registers
        ``name``, e.g. a decorated class) or ``"module:attribute"`` (the object, registered then if importing did
        not). The object must say the same name, or its lookup is one :class:`RegistryError` line."""
        if self._order is not None:
            raise TypeError(f"the {self.what} registry orders its objects: it cannot hold names not imported yet")
        module, _, attribute = target.partition(":")
        if not name.isidentifier() or name in self._items:
            raise RegistryError(f"{name!r} cannot name a {self.what} lazily: not an identifier, or taken")
        self._items[name] = _Lazy(module, attribute or None)

    def _resolve(self, key: str) -> Any:
        """The object of a lazy name: its module imported (a failure is one line naming it)."""
        lazy = self._items[key]
        module = _import_plugin(lazy.module, f"the {self.what} {key!r}")
        if isinstance(self._items.get(key), _Lazy) and lazy.attribute is not None:
            obj = getattr(module, lazy.attribute, None)
            if obj is not None and getattr(obj, self._name_attribute, key) == key:
                self.register(obj, name=key)
        if isinstance(self._items.get(key), _Lazy):
            raise RegistryError(f"importing {lazy.module} did not register the {self.what} {key!r}")
        return self._items[key]

    def __setitem__(self, key: str, value: T) -> None:
        self._items[key] = value
        self._registered.pop(key, None)
        if self._order is not None:
            ordered = sorted(self._items.items(), key=lambda item: self._order(item[1]))  # type: ignore[misc]
            self._items = dict(ordered)

    def __delitem__(self, key: str) -> None:
        del self._items[key]
        self._registered.pop(key, None)

    # ---- reading (each read first loads the installed plug-ins, once) --------------------------------------
    def discover(self) -> None:
        """Load this family's entry points and the ``PEANCHOR_PLUGINS`` modules (once per process)."""
        if self._discovered:
            return
        self._discovered = True  # before loading: a plug-in that reads the registry while it loads sees no loop
        try:
            self._load_group()
        except BaseException:
            self._discovered = False  # a broken plug-in stays an error at every read, never a silent absence
            raise

    def _load_group(self) -> None:
        load_plugins(plugins_from_env(), origin=PLUGINS_ENV)
        for point in installed_entry_points(self.group):
            try:
                obj = point.load()
            except PeanchorError:
                raise
            except Exception as e:  # noqa: BLE001 - the distribution's fault: one line naming it
                where = f"{point.dist.name} " if point.dist is not None else ""
                raise RegistryError(f"plug-in {where}entry point {point.name} = {point.value} ({self.group}) failed "
                                    f"to load: {type(e).__name__}: {e}") from e  # fmt: skip
            if not isinstance(obj, ModuleType) and getattr(obj, self._name_attribute, None) not in self._items:
                self.register(obj)  # an object named by the entry point, not registered by its module

    def __getitem__(self, key: str) -> T:
        self.discover()
        value = self._items[key]
        return self._resolve(key) if isinstance(value, _Lazy) else value

    def __iter__(self) -> Iterator[str]:
        self.discover()
        return iter(list(self._items))

    def __len__(self) -> int:
        self.discover()
        return len(self._items)

    def __contains__(self, key: object) -> bool:
        self.discover()
        return key in self._items

    def __repr__(self) -> str:
        return f"Registry({self.what!r}, {self.group!r}, names={list(self._items)})"

    def names(self) -> tuple[str, ...]:
        """Every registered name, now (built-ins and plug-ins alike)."""
        return tuple(self)

    def declared_names(self) -> tuple[str, ...]:
        """The names registered so far (lazy ones too) and those installed plug-ins declare in the registry's
        entry-point group, importing nothing (for help texts, which must not load a plug-in's torch)."""
        return tuple(dict.fromkeys((*self._items, *entry_point_names(self.group))))

    def lookup(self, name: str) -> T:
        """The object registered as ``name``, or one :class:`RegistryError` line with the valid names."""
        if name in self:
            return self[name]
        raise RegistryError(self.unknown(name))

    def unknown(self, name: Any, valid_word: str = "valid:") -> str:
        """``unknown lens 'x' (did you mean 'y'?); valid: a, b``: the message for a name not registered."""
        names = self.names()
        close = difflib.get_close_matches(str(name), names, n=1)
        hint = f" (did you mean {close[0]!r}?)" if close else ""
        return f"unknown {self.what} {name!r}{hint}; {valid_word} {', '.join(names)}"


class NamesView(Sequence[str]):
    """The names of a registry as a tuple-like sequence that is always current (the old ``PE_NAMES`` and friends:
    ``name in PE_NAMES``, iteration and ``==`` with a tuple read the registry at that moment)."""

    def __init__(self, registry: Registry[Any]) -> None:
        self._registry = registry

    def __getitem__(self, index: Any) -> Any:
        return self._registry.names()[index]

    def __len__(self) -> int:
        return len(self._registry)

    def __iter__(self) -> Iterator[str]:
        return iter(self._registry.names())

    def __contains__(self, name: object) -> bool:
        return name in self._registry

    def __eq__(self, other: object) -> bool:
        if isinstance(other, (tuple, list, NamesView)):
            return tuple(self) == tuple(other)
        return NotImplemented

    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        return repr(self._registry.names())


class DerivedView(Mapping[str, Any]):
    """A mapping rebuilt from the registries at every read (the old ``SHIFT_PARAMS`` and ``SEVERITY_TABLES``)."""

    def __init__(self, build: Callable[[], Mapping[str, Any]]) -> None:
        self._build = build

    def __getitem__(self, key: str) -> Any:
        return self._build()[key]

    def __iter__(self) -> Iterator[str]:
        return iter(self._build())

    def __len__(self) -> int:
        return len(self._build())

    def __repr__(self) -> str:
        return repr(dict(self._build()))
