"""``ModuleRegistry``: optional registration for discovery, validation and docs (seed 004).

"Use without registration, register for discovery": every mico API that takes a module also takes
the class itself; registering adds a name, an alias, metadata, config validation and generated
docs. The seed design's flaws are fixed here: aliases resolve everywhere, annotations such as
``Optional[int]`` and ``Literal`` validate, ``*args``/``**kwargs`` are not required fields,
duplicate names and aliases raise unless ``override=True``, searches are case-insensitive, hardware
support is declared rather than assumed, and :meth:`ModuleRegistry.scoped` lets tests register
freely and restores the registry afterwards.
"""

from __future__ import annotations

import contextlib
import difflib
import re
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any, ClassVar, TypeVar

from mico.errors import RegistryError
from mico.registry.schema import ConfigSchema, brief, describe_type, extract_config_schema, matches

T = TypeVar("T")

#: Categories mico itself registers; users may add their own.
KNOWN_CATEGORIES = ("model", "layer", "dataset", "searcher", "target", "planner")

_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.\-]*\Z")


@dataclass
class ModuleMetadata:
    """What the registry knows of one module (the seed's fields plus ``aliases`` and ``extra``)."""

    name: str
    module_class: Any
    category: str
    description: str
    author: str = ""
    version: str = "1.0.0"
    hardware_support: list[str] = field(default_factory=list)
    tags: list[str] = field(default_factory=list)
    config_schema: ConfigSchema | None = None
    performance_hints: dict[str, Any] | None = None
    aliases: list[str] = field(default_factory=list)
    extra: dict[str, Any] = field(default_factory=dict)

    @property
    def summary(self) -> str:
        """The first line of the description."""
        lines = self.description.strip().splitlines()
        return lines[0].strip() if lines else ""

    def searchable_text(self) -> str:
        """Everything a search matches against, lower-case, dashes and underscores as spaces."""
        parts = [self.name, self.category, self.description, *self.tags, *self.aliases]
        return _normalise(" ".join(parts))


def _normalise(text: str) -> str:
    return re.sub(r"[-_]+", " ", text.lower())


def _clean_list(value: Sequence[str] | str | None, what: str, name: str) -> list[str]:
    if value is None:
        return []
    if isinstance(value, str):
        value = [value]
    items = list(value)
    bad = [v for v in items if not isinstance(v, str) or not v.strip()]
    if bad:
        raise RegistryError(f"module '{name}': {what} must be non-empty strings; got {brief(bad)}")
    return [v.strip() for v in items]


class ModuleRegistry:
    """Process-wide registry of modules by name and alias (the only hidden state: scope it)."""

    _registry: ClassVar[dict[str, ModuleMetadata]] = {}
    _aliases: ClassVar[dict[str, str]] = {}

    @staticmethod
    def _ensure_builtin() -> None:
        """Register mico's own modules before the first query (cheap after the first call)."""
        from mico.registry.builtin import load_builtin

        load_builtin()

    # ------------------------------------------------------------------ registration
    @classmethod
    def register(
        cls,
        name: str,
        category: str,
        description: str = "",
        author: str = "",
        version: str = "1.0.0",
        hardware_support: Sequence[str] | None = None,
        tags: Sequence[str] | None = None,
        alias: str | Sequence[str] | None = None,
        *,
        performance_hints: dict[str, Any] | None = None,
        override: bool = False,
        **extra: Any,
    ) -> Callable[[T], T]:
        """Decorator registering a class (or factory function) under ``name`` for discovery.

        Registration is optional: the module works without it. ``extra`` keeps category-specific
        metadata (a model's ``input_shape`` and ``dataset``, a target's memory sizes).
        """

        def decorator(module_class: T) -> T:
            cls.add(
                module_class,
                name,
                category,
                description=description,
                author=author,
                version=version,
                hardware_support=hardware_support,
                tags=tags,
                alias=alias,
                performance_hints=performance_hints,
                override=override,
                **extra,
            )
            return module_class

        return decorator

    @classmethod
    def add(
        cls,
        module_class: Any,
        name: str,
        category: str,
        *,
        description: str = "",
        author: str = "",
        version: str = "1.0.0",
        hardware_support: Sequence[str] | None = None,
        tags: Sequence[str] | None = None,
        alias: str | Sequence[str] | None = None,
        performance_hints: dict[str, Any] | None = None,
        override: bool = False,
        **extra: Any,
    ) -> ModuleMetadata:
        """Register ``module_class`` (the non-decorator form); returns its metadata."""
        if not isinstance(name, str) or not _NAME.match(name):
            raise RegistryError(
                f"module name must start with a letter or digit and hold only letters, digits, "
                f"'-', '_' or '.'; got {brief(name)}"
            )
        if not isinstance(category, str) or not category.strip():
            raise RegistryError(f"module '{name}': category must be a non-empty string")
        if not callable(module_class):
            raise RegistryError(
                f"module '{name}': expected a class or a factory function, got "
                f"{brief(module_class)}"
            )
        aliases = _clean_list(alias, "aliases", name)
        for a in aliases:
            if not _NAME.match(a):
                raise RegistryError(f"module '{name}': alias {brief(a)} is not a valid name")
        if not override:
            cls._check_free(name, aliases)
        if override and name in cls._registry:
            cls._forget(name)
        for a in aliases:  # an alias taken over with override=True leaves its old module
            if override and a in cls._aliases:
                old = cls._registry.get(cls._aliases[a])
                if old is not None and a in old.aliases:
                    old.aliases.remove(a)
            if override and a in cls._registry and a != name:
                raise RegistryError(
                    f"alias '{a}' of module '{name}' is the name of another module; "
                    "choose another alias"
                )
        doc = getattr(module_class, "__doc__", None) or ""
        metadata = ModuleMetadata(
            name=name,
            module_class=module_class,
            category=category.strip(),
            description=(description or doc).strip(),
            author=author,
            version=version,
            hardware_support=_clean_list(hardware_support, "hardware_support", name),
            tags=_clean_list(tags, "tags", name),
            config_schema=_schema_of(module_class),
            performance_hints=dict(performance_hints) if performance_hints else None,
            aliases=aliases,
            extra=dict(extra),
        )
        cls._registry[name] = metadata
        for a in aliases:
            cls._aliases[a] = name
        with contextlib.suppress(AttributeError, TypeError):
            module_class._registry_metadata = metadata
        return metadata

    @classmethod
    def _check_free(cls, name: str, aliases: list[str]) -> None:
        if name in cls._registry:
            raise RegistryError(
                f"module '{name}' is already registered ({_where(cls._registry[name])}); pass "
                "override=True to replace it"
            )
        if name in cls._aliases:
            raise RegistryError(
                f"'{name}' is already an alias of module '{cls._aliases[name]}'; choose another "
                "name or pass override=True"
            )
        for a in aliases:
            taken = cls._aliases.get(a) or (a if a in cls._registry else None)
            if taken is not None and taken != name:
                raise RegistryError(
                    f"alias '{a}' of module '{name}' is already used by module '{taken}'; choose "
                    "another alias or pass override=True"
                )

    @classmethod
    def _forget(cls, name: str) -> None:
        metadata = cls._registry.pop(name)
        for a in metadata.aliases:
            if cls._aliases.get(a) == name:
                del cls._aliases[a]

    @classmethod
    def unregister(cls, name: str) -> None:
        """Remove a module (by name or alias) and its aliases."""
        cls._forget(cls.resolve(name))

    # ------------------------------------------------------------------ lookup
    @classmethod
    def resolve(cls, name: str) -> str:
        """The registered name of ``name`` (a name or an alias); unknown names raise, with hints."""
        cls._ensure_builtin()
        if isinstance(name, str):
            if name in cls._registry:
                return name
            if name in cls._aliases:
                return cls._aliases[name]
        candidates = [*cls._registry, *cls._aliases]
        close = difflib.get_close_matches(str(name), candidates, n=3) if candidates else []
        hint = f"; did you mean {', '.join(repr(c) for c in close)}?" if close else ""
        raise RegistryError(
            f"no module named {brief(name)} is registered{hint} (see `mico list-modules`)"
        )

    @classmethod
    def get_module(cls, name: str) -> Any | None:
        """The class registered under ``name`` or an alias, or ``None`` (the seed's contract)."""
        cls._ensure_builtin()
        if not isinstance(name, str):
            return None
        key = cls._aliases.get(name, name)
        metadata = cls._registry.get(key)
        return metadata.module_class if metadata else None

    @classmethod
    def get_metadata(cls, name: str) -> ModuleMetadata:
        """The metadata of ``name`` or an alias; an unknown name raises :class:`RegistryError`."""
        return cls._registry[cls.resolve(name)]

    @classmethod
    def metadata_of(cls, module_class: Any) -> ModuleMetadata | None:
        """The metadata registered for ``module_class`` itself, if any (not its subclasses')."""
        cls._ensure_builtin()
        for metadata in cls._registry.values():
            if metadata.module_class is module_class:
                return metadata
        return None

    @classmethod
    def list_modules(
        cls,
        category: str | None = None,
        tags: Sequence[str] | str | None = None,
        hardware: str | None = None,
    ) -> list[ModuleMetadata]:
        """Registered modules, sorted by category and name, filtered case-insensitively.

        ``tags``: a module matches when it has any of them. ``hardware``: modules that declare it.
        """
        cls._ensure_builtin()
        modules = sorted(cls._registry.values(), key=lambda m: (m.category, m.name))
        if category:
            modules = [m for m in modules if m.category.lower() == category.lower()]
        if tags:
            wanted = {t.lower() for t in ([tags] if isinstance(tags, str) else tags)}
            modules = [m for m in modules if wanted & {t.lower() for t in m.tags}]
        if hardware:
            modules = [
                m for m in modules if hardware.lower() in {h.lower() for h in m.hardware_support}
            ]
        return modules

    @classmethod
    def categories(cls) -> list[str]:
        """Every category with at least one module, sorted."""
        cls._ensure_builtin()
        return sorted({m.category for m in cls._registry.values()})

    @classmethod
    def search(cls, query: str) -> list[ModuleMetadata]:
        """Modules whose name, alias, category, description or tags hold every word of ``query``.

        Case-insensitive; ``-`` and ``_`` count as spaces, so "sliding window" finds the tag
        ``sliding-window``. Name matches come first.
        """
        cls._ensure_builtin()
        words = _normalise(query).split()
        if not words:
            return []
        hits = [m for m in cls._registry.values() if all(w in m.searchable_text() for w in words)]
        phrase = " ".join(words)
        return sorted(hits, key=lambda m: (phrase not in _normalise(m.name), m.category, m.name))

    # ------------------------------------------------------------------ config validation
    @classmethod
    def validate_config(cls, module_name: str, config: dict[str, Any]) -> list[str]:
        """Every problem of ``config`` for the module ``module_name`` (name or alias), or ``[]``.

        Checks required fields, unknown fields (unless the constructor takes ``**kwargs``) and
        each value against its annotation. An unknown module raises :class:`RegistryError`.
        """
        metadata = cls.get_metadata(module_name)
        return config_errors(metadata.config_schema, config)

    # ------------------------------------------------------------------ docs
    @classmethod
    def generate_docs(cls, category: str | None = None, title: str = "mico modules") -> str:
        """Markdown reference of the registered modules (see :mod:`mico.registry.docs`)."""
        from mico.registry.docs import modules_markdown

        return modules_markdown(cls.list_modules(category=category), title=title)

    # ------------------------------------------------------------------ scoping
    @classmethod
    @contextlib.contextmanager
    def scoped(cls) -> Iterator[type[ModuleRegistry]]:
        """Registrations made inside the block are undone when it ends (for tests)."""
        cls._ensure_builtin()
        saved_registry = dict(cls._registry)
        saved_aliases = dict(cls._aliases)
        saved_lists = {name: list(m.aliases) for name, m in cls._registry.items()}
        try:
            yield cls
        finally:
            cls._registry.clear()
            cls._registry.update(saved_registry)
            cls._aliases.clear()
            cls._aliases.update(saved_aliases)
            for name, aliases in saved_lists.items():
                cls._registry[name].aliases[:] = aliases


def config_errors(schema: ConfigSchema | None, config: Any) -> list[str]:
    """The problems of ``config`` against ``schema`` (empty when it fits)."""
    if not isinstance(config, dict):
        return [f"config must be a mapping of argument names to values, got {brief(config)}"]
    if schema is None:
        return []
    errors = []
    for name, spec in schema.items():
        if spec.required and name not in config:
            errors.append(f"missing required field '{name}' ({spec.type_name()})")
    for key, value in config.items():
        if key not in schema:
            if not schema.accepts_extra:
                close = difflib.get_close_matches(str(key), list(schema), n=1)
                hint = f" (did you mean '{close[0]}'?)" if close else ""
                known = ", ".join(schema) or "none"
                errors.append(f"unknown field {brief(key)}{hint}; fields: {known}")
            continue
        annotation = schema[key].annotation
        if not matches(value, annotation):
            errors.append(
                f"field '{key}' should be {describe_type(annotation)}, got "
                f"{type(value).__name__} {brief(value)}"
            )
    return errors


def _schema_of(module_class: Any) -> ConfigSchema | None:
    return extract_config_schema(module_class)


def _where(metadata: ModuleMetadata) -> str:
    target = metadata.module_class
    return f"{getattr(target, '__module__', '?')}.{getattr(target, '__qualname__', '?')}"


def register_module(name: str, category: str, **kwargs: Any) -> Callable[[T], T]:
    """Decorator: the seed's convenience form of :meth:`ModuleRegistry.register`."""
    return ModuleRegistry.register(name, category, **kwargs)
