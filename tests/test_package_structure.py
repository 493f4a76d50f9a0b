"""The package's import structure: no module imports another's private names, and no import
cycle (the layering of STYLE.md: layers -> model -> inference -> exporters; nothing imports the
command line)."""

import ast
import pathlib
import re

import pytest

PACKAGE = pathlib.Path(__file__).resolve().parent.parent / "keras_transformer"


def modules() -> dict[str, ast.Module]:
    found = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        name = ".".join(("keras_transformer", *path.relative_to(PACKAGE).with_suffix("").parts))
        found[name.removesuffix(".__init__")] = ast.parse(path.read_text(encoding="utf-8"), str(path))
    return found


def package_imports(tree: ast.Module, top_level_only: bool):
    """(module, names) of each `from keras_transformer... import names` in `tree` (only the
    module's top level with `top_level_only`: the imports that run when it is imported)."""
    nodes = tree.body if top_level_only else ast.walk(tree)
    for node in nodes:
        if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("keras_transformer"):
            yield node.module, [alias.name for alias in node.names]


def test_no_module_imports_another_modules_private_names():
    offences = [
        f"{name} imports {imported}.{names}"
        for name, tree in modules().items()
        for imported, names in package_imports(tree, top_level_only=False)
        if any(n.startswith("_") and not n.startswith("__") for n in names)  # dunders (__version__) are public
    ]
    assert not offences, offences


def test_the_package_has_no_import_cycle():
    """Top-level imports only (a function's import runs when it is called); an import of a package
    counts as one of its __init__."""
    trees = modules()
    graph = {
        name: {imported for imported, _ in package_imports(tree, top_level_only=True) if imported in trees}
        for name, tree in trees.items()
    }
    # `from keras_transformer.inference import alignment` imports the module, not the package's __init__.
    for name, tree in trees.items():
        for imported, names in package_imports(tree, top_level_only=True):
            graph[name] |= {f"{imported}.{n}" for n in names if f"{imported}.{n}" in trees}
    state: dict[str, int] = {}

    def visit(name, path):
        if state.get(name) == 1:
            pytest.fail(f"import cycle: {' -> '.join([*path, name])}")
        if state.get(name) == 2:
            return
        state[name] = 1
        for imported in sorted(graph[name] - {"keras_transformer"}):
            visit(imported, [*path, name])
        state[name] = 2

    for name in graph:
        visit(name, [])
    assert len(graph) > 60


def test_nothing_imports_the_command_line():
    importers = [
        name
        for name, tree in modules().items()
        if not name.startswith(("keras_transformer.cli", "keras_transformer.__main__"))
        for imported, _ in package_imports(tree, top_level_only=False)
        if imported.startswith("keras_transformer.cli")
    ]
    assert not importers, importers


def test_the_readmes_layout_names_every_module():
    """README's Layout block lists each package folder and, on that folder's lines, each of its
    modules (a module added without a word in the Layout fails here)."""
    readme = (PACKAGE.parent / "README.md").read_text(encoding="utf-8")
    block = readme.split("\n## Layout\n")[1].split("```text\n")[1].split("```")[0]
    entries, folder = {}, None
    for line in block.splitlines():
        if not line.startswith("    "):  # a folder's or a top-level module's first line
            folder = line.split()[0]
        entries[folder] = entries.get(folder, "") + line
    missing = []
    for path in sorted(PACKAGE.rglob("*.py")):
        parts = path.relative_to(PACKAGE).parts
        if len(parts) == 1:
            found = any(key == parts[0] for key in entries)
        else:
            found = parts[-1] == "__init__.py" or path.stem in entries.get(f"{parts[0]}/", "").replace("-", "_")
        missing += [] if found else ["/".join(parts)]
    assert missing == []


def test_the_paths_that_pyproject_names_exist():
    pyproject = (PACKAGE.parent / "pyproject.toml").read_text(encoding="utf-8")
    named = set(re.findall(r"keras_transformer/[\w/]+\.py", pyproject))
    assert [p for p in sorted(named) if not (PACKAGE.parent / p).exists()] == []
