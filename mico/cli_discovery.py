"""The discovery verbs of the ``mico`` command (seed 004): list-modules, search, info, docs.

Kept apart from :mod:`mico.cli` so that the module registry's commands stay one small file; they
register on the same Typer app and report errors the same way (one line, exit code 2).
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from mico.cli import _friendly_errors, app
from mico.errors import RegistryError


def _console():  # -> rich.console.Console; rich is imported only when a table is printed
    from rich.console import Console

    return Console(width=120, highlight=False, soft_wrap=False)


def _modules_table(modules, title: str):
    from rich.table import Table

    table = Table(title=title, show_lines=False, title_justify="left")
    for column in ("name", "category", "version", "hardware", "tags", "description"):
        table.add_column(column, overflow="fold")
    for m in modules:
        name = m.name + (f" ({', '.join(m.aliases)})" if m.aliases else "")
        table.add_row(
            name,
            m.category,
            m.version,
            ", ".join(m.hardware_support) or "-",
            ", ".join(m.tags) or "-",
            m.summary,
        )
    return table


@app.command("list-modules")
@_friendly_errors
def list_modules(
    category: Annotated[
        str | None, typer.Option(help="Only this category: model, layer, dataset, searcher, ...")
    ] = None,
    tag: Annotated[
        list[str] | None, typer.Option(help="Only modules with this tag (repeatable).")
    ] = None,
    hardware: Annotated[
        str | None, typer.Option(help="Only modules declaring this hardware (host, rv32, ...).")
    ] = None,
) -> None:
    """List registered modules (models, layers, datasets, searchers, targets, planners).

    Example: mico list-modules --category model --hardware rv32
    """
    from mico.registry import ModuleRegistry

    if category and category.lower() not in {c.lower() for c in ModuleRegistry.categories()}:
        raise RegistryError(
            f"no module has category '{category}'; categories: "
            f"{', '.join(ModuleRegistry.categories())}"
        )
    modules = ModuleRegistry.list_modules(category=category, tags=tag, hardware=hardware)
    _console().print(_modules_table(modules, f"{len(modules)} module(s)"))


@app.command("search")
@_friendly_errors
def search(
    query: Annotated[str, typer.Argument(help="Words to find in names, tags and descriptions.")],
) -> None:
    """Find registered modules by name, alias, tag or description (case-insensitive).

    Example: mico search "depthwise conv"
    """
    from mico.registry import ModuleRegistry

    results = ModuleRegistry.search(query)
    if not results:
        typer.echo(f"no module matches '{query}'; `mico list-modules` lists them all")
        raise typer.Exit(1)
    _console().print(_modules_table(results, f"{len(results)} match(es) for '{query}'"))


@app.command("info")
@_friendly_errors
def info(
    name: Annotated[str, typer.Argument(help="A registered module name or alias.")],
) -> None:
    """Everything the registry knows of one module: metadata and configuration fields.

    Example: mico info small_cnn
    """
    from rich.markdown import Markdown

    from mico.registry import ModuleRegistry
    from mico.registry.docs import module_markdown

    metadata = ModuleRegistry.get_metadata(name)
    _console().print(Markdown(module_markdown(metadata, level=1)))


@app.command("docs")
@_friendly_errors
def docs(
    out: Annotated[
        Path, typer.Option("--out", "-o", help="Folder of the generated reference pages.")
    ] = Path("docs/reference"),
    check: Annotated[
        bool, typer.Option("--check", help="Write nothing; exit 1 if the pages are stale.")
    ] = False,
) -> None:
    """Generate the reference pages (modules, ops) from the registries.

    Example: mico docs --check   (what CI runs: fails when docs/reference is out of date)
    """
    from mico.registry.reference import stale_pages, write_reference

    if check:
        stale = stale_pages(out)
        if stale:
            typer.echo(f"stale reference page(s) in {out}: {', '.join(stale)}; run `mico docs`")
            raise typer.Exit(1)
        typer.echo(f"{out}: up to date")
        return
    for path in write_reference(out):
        typer.echo(f"wrote {path}")
