"""Layout figures of joinlib (issue 26): root modules, adapters lines, largest module, longest function,
function-local imports and public names defined in more than one module.

    python scripts/layout_stats.py [--json]

Why a script: the closing note's before/after counts must come from one command anyone can rerun.
"""

from __future__ import annotations

import ast
import json
import sys
from collections import defaultdict
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent / "joinlib"
PARSER_BUILDERS = ("parser", "add_", "_args", "build_parser")


def _modules() -> list[Path]:
    return sorted(p for p in ROOT.rglob("*.py") if "__pycache__" not in p.parts)


def _functions(tree: ast.AST) -> list[ast.FunctionDef | ast.AsyncFunctionDef]:
    return [n for n in ast.walk(tree) if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))]


def _is_parser_builder(name: str) -> bool:
    return any(tag in name for tag in PARSER_BUILDERS)


def _local_imports(fn: ast.AST) -> int:
    count = 0
    for node in ast.walk(fn):
        if node is not fn and isinstance(node, (ast.Import, ast.ImportFrom)):
            count += 1
    return count


def _public_defs(tree: ast.Module) -> list[str]:
    names = []
    for node in tree.body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)) and not node.name.startswith("_"):
            names.append(node.name)
    return names


def stats() -> dict[str, object]:
    """Every figure of the issue's 'done when' that a script can count."""
    lines: dict[str, int] = {}
    longest: tuple[int, str] = (0, "")
    local_imports = 0
    defined: dict[str, list[str]] = defaultdict(list)
    for path in _modules():
        rel = str(path.relative_to(ROOT.parent))
        text = path.read_text()
        lines[rel] = len(text.splitlines())
        tree = ast.parse(text)
        for name in _public_defs(tree):
            defined[name].append(rel)
        for fn in _functions(tree):
            length = (fn.end_lineno or fn.lineno) - fn.lineno + 1
            if not _is_parser_builder(fn.name) and length > longest[0]:
                longest = (length, f"{rel}:{fn.name}")
        top_level_fns = [n for n in tree.body if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef))]
        local_imports += sum(_local_imports(n) for n in top_level_fns)
    root_modules = [p.name for p in ROOT.glob("*.py")]
    adapters = sum(n for rel, n in lines.items() if rel.startswith("joinlib/adapters/"))
    largest = max(lines.items(), key=lambda kv: kv[1])
    dups = {name: where for name, where in defined.items() if len(where) > 1}
    over_600 = sorted(rel for rel, n in lines.items() if n > 600)
    return {
        "root_modules": len(root_modules),
        "adapters_lines": adapters,
        "largest_module": {"path": largest[0], "lines": largest[1]},
        "modules_over_600": over_600,
        "longest_function": {"where": longest[1], "lines": longest[0]},
        "function_local_imports": local_imports,
        "duplicate_public_names": len(dups),
        "duplicates": dict(sorted(dups.items())),
        "total_lines": sum(lines.values()),
    }


def main(argv: list[str]) -> int:
    s = stats()
    if "--json" in argv:
        print(json.dumps(s, indent=2))
        return 0
    for key, value in s.items():
        if key != "duplicates":
            print(f"{key}: {value}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
