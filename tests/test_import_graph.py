"""The package's import graph has no cycle, counting imports inside functions, and the
role runtimes (``hpcgnn.runtime``) sit above the graph and the samplers."""
import ast
import os

import hpcgnn

ROOT = os.path.dirname(hpcgnn.__file__)


def _modules():
    mods = {}
    for dirpath, _, files in os.walk(ROOT):
        for f in files:
            if f.endswith(".py"):
                path = os.path.join(dirpath, f)
                name = "hpcgnn." + os.path.relpath(path, ROOT)[:-3].replace(os.sep, ".")
                mods[name.removesuffix(".__init__")] = path
    return mods


def _edges(mods):
    """Module -> the package modules it imports (anywhere in it), leaving out imports of
    its own ancestors (initialised before it in any case)."""
    edges = {m: set() for m in mods}
    for m, path in mods.items():
        pkg = m if path.endswith("__init__.py") else m.rsplit(".", 1)[0]
        for node in ast.walk(ast.parse(open(path).read())):
            if isinstance(node, ast.Import):
                targets = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:
                    parts = pkg.split(".")[: len(pkg.split(".")) - node.level + 1]
                    base = ".".join(parts + ([node.module] if node.module else []))
                subs = [f"{base}.{a.name}" for a in node.names]
                targets = [t for t in subs if t in mods] or [base]
            else:
                continue
            for t in targets:
                if t in mods and t != m and not m.startswith(t + "."):
                    edges[m].add(t)
    return edges


def _cycles(edges):
    index, low, stack, on, out = {}, {}, [], set(), []

    def visit(v):
        index[v] = low[v] = len(index)
        stack.append(v)
        on.add(v)
        for w in edges[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                out.append(sorted(comp))

    for v in sorted(edges):
        if v not in index:
            visit(v)
    return out


def test_no_import_cycle_counting_function_level_imports():
    assert _cycles(_edges(_modules())) == []


def test_the_graph_and_the_samplers_do_not_import_the_runtime():
    edges = _edges(_modules())
    below = [m for m in edges if m.startswith(("hpcgnn.graph", "hpcgnn.sampling", "hpcgnn.comm", "hpcgnn.partition"))]
    assert not [(m, t) for m in below for t in edges[m] if t.startswith("hpcgnn.runtime")]


def test_no_module_imports_another_modules_private_names():
    """The seams are public: ``from hpcgnn.x import _name`` appears nowhere (the
    compiled module ``_ext`` and the build record ``_buildinfo`` are modules)."""
    found = []
    for m, path in _modules().items():
        for node in ast.walk(ast.parse(open(path).read())):
            if isinstance(node, ast.ImportFrom) and (node.level or (node.module or "").startswith("hpcgnn")):
                found += [(m, a.name) for a in node.names
                          if a.name.startswith("_") and a.name not in ("_ext", "_buildinfo", "__version__")]
    assert found == []
