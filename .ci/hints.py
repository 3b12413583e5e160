"""The share of kbert's public functions and methods with type hints on every parameter and
the return, printed; exits 1 under the floor (`make lint` runs it).

    python .ci/hints.py [--floor 95] [--list]

Public: a function or method whose name has no leading underscore, in a module and a class
without one, at module or class level (nested helpers are not API). `self`/`cls` and the
`*args`/`**kwargs` a method passes on to Keras need no hint.
"""

import argparse
import ast
import pathlib
import sys

ROOT = pathlib.Path(__file__).resolve().parents[1] / "kbert"


def public_functions(path):
    """(qualified name, hinted, line) of each public function of one module file."""
    tree = ast.parse(path.read_text(encoding="utf-8"))

    def walk(body, prefix):
        for node in body:
            if isinstance(node, ast.ClassDef) and not node.name.startswith("_"):
                yield from walk(node.body, f"{prefix}{node.name}.")
            elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and \
                    not node.name.startswith("_"):
                yield f"{prefix}{node.name}", hinted(node, method=bool(prefix)), node.lineno
    yield from walk(tree.body, "")


def hinted(node, method):
    a = node.args
    params = a.posonlyargs + a.args + a.kwonlyargs
    if method and params and params[0].arg in ("self", "cls") and not any(
            isinstance(d, ast.Name) and d.id == "staticmethod" for d in node.decorator_list):
        params = params[1:]
    setter = any(isinstance(d, ast.Attribute) and d.attr == "setter" for d in node.decorator_list)
    return all(p.annotation is not None for p in params) and (
        node.returns is not None or setter)


def modules():
    for path in sorted(ROOT.rglob("*.py")):
        parts = path.relative_to(ROOT.parent).with_suffix("").parts
        if not any(p.startswith("_") and p != "__init__" for p in parts):
            yield ".".join(p for p in parts if p != "__init__"), path


def main(argv=None):
    parser = argparse.ArgumentParser()
    parser.add_argument("--floor", type=float, default=95.0, help="the least share, percent")
    parser.add_argument("--list", action="store_true", help="list the functions without hints")
    args = parser.parse_args(argv)
    rows = [(f"{module}.{name}", ok, f"{path.relative_to(ROOT.parent)}:{line}")
            for module, path in modules() for name, ok, line in public_functions(path)]
    done = sum(ok for _, ok, _ in rows)
    share = 100.0 * done / max(len(rows), 1)
    print(f"type hints: {done} of {len(rows)} public functions and methods ({share:.1f}%)")
    if args.list:
        for name, ok, where in rows:
            if not ok:
                print(f"  {where}  {name}")
    return 0 if share >= args.floor else 1


if __name__ == "__main__":
    sys.exit(main())
