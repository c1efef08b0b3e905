#!/usr/bin/env python3
"""Fail if the import graph of joinlib and services has a cycle (``make lint``).

Which imports count: every ``import`` / ``from ... import`` statement that grimp finds —
module-level ones, function-local ("lazy") ones and those under ``if TYPE_CHECKING:``.
A lazy import that exists only to dodge a circular import at load time still couples the
two modules both ways, so it is a cycle here; type-only imports too, because the types
of a module are part of its interface. (External packages are not part of the graph.)

Two kinds of cycle are reported:

* **module cycles**: modules that import each other, directly or through other modules
  (strongly connected components of the module graph; a package's ``__init__`` is the
  module named like the package, so ``joinlib.planner`` importing its child
  ``joinlib.planner.improved`` and the child importing ``from . import X`` is a cycle);
* **package cycles**: sibling parts of one package (or the top-level packages
  ``joinlib`` and ``services``) that depend on each other, each part taken with
  everything below it, e.g. ``joinlib.cli.main`` → ``joinlib.cli.experiments`` and
  ``joinlib.experiments.common`` → ``joinlib.cli.main``. Layers are only layers if this
  graph is acyclic. A ``__main__`` module is an entry point (``python -m``), imported by
  nothing, so its imports do not count between parts.

For each cycle it prints the import statements that close it (file:line), so the fix is
visible. Exit status 1 if there is any cycle, 0 otherwise.

    python scripts/check_import_cycles.py [PACKAGE ...]   (default: joinlib services)
"""
from __future__ import annotations

import sys
from collections.abc import Iterable, Mapping
from pathlib import Path

import grimp

ROOT = Path(__file__).resolve().parent.parent
DEFAULT_PACKAGES = ("joinlib", "services")

Graph = Mapping[str, set[str]]


def _postorder(nodes: Iterable[str], edges: Graph) -> list[str]:
    """Every node reachable from ``nodes``, each after everything it reaches first (iterative DFS)."""
    seen: set[str] = set()
    order: list[str] = []
    for root in sorted(nodes):
        if root in seen:
            continue
        seen.add(root)
        stack = [(root, iter(sorted(edges.get(root, ()))))]
        while stack:
            node, children = stack[-1]
            child = next((c for c in children if c not in seen), None)
            if child is None:
                stack.pop()
                order.append(node)
            else:
                seen.add(child)
                stack.append((child, iter(sorted(edges.get(child, ())))))
    return order


def _reach(root: str, edges: Graph, taken: set[str]) -> list[str]:
    """The nodes reaching ``root`` (through ``edges`` reversed) not in ``taken``; adds them to it."""
    comp, stack = [], [root]
    taken.add(root)
    while stack:
        node = stack.pop()
        comp.append(node)
        for other in edges.get(node, ()):
            if other not in taken:
                taken.add(other)
                stack.append(other)
    return comp


def strongly_connected(nodes: Iterable[str], edges: Graph) -> list[list[str]]:
    """Components of more than one node of the directed graph (Kosaraju), sorted."""
    reverse: dict[str, set[str]] = {}
    for a, targets in edges.items():
        for b in targets:
            reverse.setdefault(b, set()).add(a)
    taken: set[str] = set()
    comps = []
    for root in reversed(_postorder(nodes, edges)):
        if root not in taken:
            comp = _reach(root, reverse, taken)
            if len(comp) > 1:
                comps.append(sorted(comp))
    return sorted(comps)


def module_edges(graph: grimp.ImportGraph) -> dict[str, set[str]]:
    return {m: set(graph.find_modules_directly_imported_by(m)) for m in graph.modules}


def part_of(module: str, package: str | None) -> str:
    """The child of ``package`` (None: the root) that ``module`` lies in."""
    if package is None:
        return module.split(".")[0]
    return ".".join(module.split(".")[: package.count(".") + 2])


def package_edges(edges: Graph, package: str | None, modules: Iterable[str]) -> dict[str, set[str]]:
    """Edges between the children of ``package``, each child squashed with its descendants.
    Imports of the package's own ``__init__`` are left to the module cycles."""
    prefix = "" if package is None else package + "."
    inside = [m for m in modules if m.startswith(prefix)]
    out: dict[str, set[str]] = {}
    for m in inside:
        if m.endswith(".__main__"):
            continue   # an entry point: nothing imports it, so it cannot close a cycle between layers
        a = part_of(m, package)
        for t in edges.get(m, ()):
            if t.startswith(prefix) and (b := part_of(t, package)) != a:
                out.setdefault(a, set()).add(b)
    return out


def statements(graph: grimp.ImportGraph, pairs: Iterable[tuple[str, str]], limit: int = 3) -> list[str]:
    """The import statements behind ``pairs`` (importer, imported), at most ``limit`` per pair."""
    lines = []
    for importer, imported in sorted(set(pairs)):
        details = sorted(graph.get_import_details(importer=importer, imported=imported), key=lambda d: d["line_number"])
        for d in details[:limit]:
            path = _path(importer)
            where = f"{path}:{d['line_number']}" if path else f"{importer}:{d['line_number']}"
            lazy = " (function-local)" if path and _indented(path, d["line_number"]) else ""
            lines.append(f"    {where}: {importer} -> {imported}{lazy}\n      {d['line_contents']}")
        if len(details) > limit:
            lines.append(f"    ... and {len(details) - limit} more {importer} -> {imported}")
    return lines


def part_statements(graph: grimp.ImportGraph, edges: Graph, package: str | None, members: set[str]) -> list[str]:
    """The imports between the parts of a package cycle, grouped by direction, the direction with
    the fewest imports (the likeliest to be the wrong way round) first."""
    groups: dict[tuple[str, str], list[tuple[str, str]]] = {}
    for a, targets in edges.items():
        pa = part_of(a, package)
        if pa not in members:
            continue
        for b in targets:
            pb = part_of(b, package)
            if pb in members and pb != pa:
                groups.setdefault((pa, pb), []).append((a, b))
    lines = []
    for (pa, pb), pairs in sorted(groups.items(), key=lambda kv: (len(kv[1]), kv[0])):
        lines.append(f"  {pa} -> {pb}: {len(pairs)} module pair(s)")
        lines.extend(statements(graph, pairs[:5] if len(pairs) > 5 else pairs, limit=1 if len(pairs) > 5 else 3))
        if len(pairs) > 5:
            lines.append(f"    ... and {len(pairs) - 5} more module pairs")
    return lines


def _path(module: str) -> str | None:
    base = ROOT.joinpath(*module.split("."))
    for p in (base.with_suffix(".py"), base / "__init__.py"):
        if p.is_file():
            return str(p.relative_to(ROOT))
    return None


def _indented(path: str, line: int) -> bool:
    text = (ROOT / path).read_text().splitlines()
    return 0 < line <= len(text) and text[line - 1][:1].isspace()


def find_cycles(packages: Iterable[str]) -> list[str]:
    """Every module and package cycle, as printable reports."""
    graph = grimp.build_graph(*packages, cache_dir=None)
    edges = module_edges(graph)
    modules = sorted(graph.modules)
    reports = []
    for comp in strongly_connected(modules, edges):
        members = set(comp)
        pairs = [(a, b) for a in comp for b in edges[a] if b in members]
        reports.append("module cycle: " + " <-> ".join(comp) + "\n" + "\n".join(statements(graph, pairs)))
    for package in [None, *(m for m in modules if graph.find_children(m))]:
        pedges = package_edges(edges, package, modules)
        for comp in strongly_connected(pedges, pedges):
            where = f"in {package}" if package else "between top-level packages"
            reports.append(f"package cycle {where}: " + " <-> ".join(comp) + "\n"
                           + "\n".join(part_statements(graph, edges, package, set(comp))))
    return reports


def main(argv: list[str]) -> int:
    sys.path.insert(0, str(ROOT))
    packages = argv or list(DEFAULT_PACKAGES)
    reports = find_cycles(packages)
    for r in reports:
        print(r + "\n")
    if reports:
        print(f"{len(reports)} import cycle(s) in {', '.join(packages)}: break each at one of the imports listed")
        return 1
    print(f"no import cycles in {', '.join(packages)}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
