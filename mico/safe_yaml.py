"""Read a user's YAML file without trusting it: bounded size, bounded alias expansion, no
duplicate keys, UTF-8 only, and every failure a one-line mico error naming the file.

A 459-byte file of nested aliases stands for a billion values, and a 13 MB file takes minutes
to parse: both are refused before any value is built, with the limit in the message.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from mico.errors import MicoError
from mico.userfiles import check_input_file

MAX_YAML_BYTES = 1 << 20  # 1 MiB: a plan is one line per layer, a run config a page
MAX_YAML_NODES = 100_000  # values after expanding every alias


class RecursiveAliasError(ValueError):
    """A YAML alias refers to a node that contains it (``&x [1, *x]``)."""


class _UniqueKeyLoader(yaml.SafeLoader):
    """SafeLoader that refuses a mapping key given twice (YAML would keep the last silently)."""


def _unique_mapping(loader: _UniqueKeyLoader, node: yaml.MappingNode, deep: bool = False) -> dict:
    seen: dict[Any, int] = {}
    for key_node, _ in node.value:
        key = loader.construct_object(key_node, deep=deep)
        line = key_node.start_mark.line + 1
        try:
            first = seen.get(key)
        except TypeError:  # an unhashable key: construct_mapping reports it below
            continue
        if first is not None:
            raise yaml.constructor.ConstructorError(
                None, None, f"duplicate key {key!r} at line {line} (first at line {first})"
            )
        seen[key] = line
    return loader.construct_mapping(node, deep=deep)


_UniqueKeyLoader.add_constructor(yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG, _unique_mapping)


def expanded_size(root: yaml.Node, limit: int) -> int:
    """How many nodes ``root`` stands for once every alias is copied out; stops past ``limit``.

    Raises RecursiveAliasError for a node that contains itself.
    """
    sizes: dict[int, int] = {}
    on_path: set[int] = set()
    stack: list[tuple[yaml.Node, bool]] = [(root, False)]
    while stack:
        node, done = stack.pop()
        key = id(node)
        children = _children(node)
        if done:
            on_path.discard(key)
            sizes[key] = 1 + sum(sizes[id(c)] for c in children)
            if sizes[key] > limit:
                return sizes[key]
            continue
        if key in sizes:
            continue
        if key in on_path:
            raise RecursiveAliasError
        on_path.add(key)
        stack.append((node, True))
        for child in children:
            if id(child) in on_path:
                raise RecursiveAliasError
            if id(child) not in sizes:
                stack.append((child, False))
    return sizes[id(root)]


def _children(node: yaml.Node) -> list[yaml.Node]:
    if isinstance(node, yaml.SequenceNode):
        return list(node.value)
    if isinstance(node, yaml.MappingNode):
        return [part for pair in node.value for part in pair]
    return []


def read_yaml(
    path: str | Path,
    what: str,
    error: type[MicoError],
    *,
    max_bytes: int = MAX_YAML_BYTES,
    max_nodes: int = MAX_YAML_NODES,
    fix: str = "",
) -> Any:
    """Parse the YAML file ``path`` (called ``what`` in messages); problems raise ``error``."""
    p = check_input_file(path, what, error, fix)
    name = repr(str(p)) if len(str(p)) <= 120 else repr(str(p)[:117] + "...")
    with open(p, "rb") as handle:  # read at most the cap, even from a pipe or a device
        raw = handle.read(max_bytes + 1)
    if len(raw) > max_bytes:
        raise error(
            f"{what} {name} is larger than the {max_bytes}-byte limit; "
            "a YAML file this big is not a plan or config, check the path"
        )
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise error(
            f"{what} {name} is not UTF-8 text (bad byte at offset {exc.start}); save it as UTF-8"
        ) from None
    try:
        node = yaml.compose(text, Loader=_UniqueKeyLoader)
        if node is None:
            return None
        size = expanded_size(node, max_nodes)
        if size > max_nodes:
            raise error(
                f"{what} {name} expands to more than {max_nodes} values (nested aliases?); "
                "write the values out instead of aliasing them"
            )
        loader = _UniqueKeyLoader(text)
        try:
            return loader.construct_document(node)
        finally:
            loader.dispose()
    except MicoError:
        raise
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" at line {mark.line + 1}" if mark is not None else ""
        problem = getattr(exc, "problem", None) or "invalid YAML"
        raise error(f"{what} {name} is not valid YAML: {problem}{where}; fix it") from None
    except RecursiveAliasError:
        raise error(
            f"{what} {name} holds a recursive alias (a value that contains itself); "
            "write the value out"
        ) from None
    except ValueError as exc:  # e.g. an integer of more than 4300 digits
        raise error(f"{what} {name} holds a value that cannot be read ({exc}); fix it") from None
    except RecursionError:
        raise error(f"{what} {name} is nested too deeply; flatten it") from None
