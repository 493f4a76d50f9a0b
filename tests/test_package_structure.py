"""The package's import structure: no module imports another's private names, and no import
cycle (the layering of STYLE.md: layers -> model -> search -> translation -> exporters; nothing imports the
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
    # `from keras_transformer.translation import alignment` imports the module, not the package's __init__.
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


def imported_modules(tree: ast.Module) -> set[str]:
    """Every package module `tree` imports anywhere (a function's imports too): `import a.b`,
    `from a.b import c` (a.b, and a.b.c where c may be a module)."""
    found = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found |= {alias.name for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module:
            found |= {node.module, *(f"{node.module}.{alias.name}" for alias in node.names)}
    return {name for name in found if name.startswith("keras_transformer")}


def offences(prefix: str, forbidden: str) -> list[str]:
    """ "module imports module" for each module under `prefix` that imports one under `forbidden`."""
    return [
        f"{name} imports {imported}"
        for name, tree in modules().items()
        if name.startswith(prefix)
        for imported in sorted(imported_modules(tree))
        if imported == forbidden or imported.startswith(forbidden + ".")
    ]


def test_no_importer_imports_an_exporter():
    """The importers write the model's weights through the model's own map of them
    (`weight_names`), not through an exporter's."""
    assert offences("keras_transformer.importers", "keras_transformer.exporters") == []


def test_data_knows_nothing_of_model_directories():
    """`data/` reads pairs and counts shortlists; what belongs to a model dir (its held-out pairs,
    its shortlist.npz) is `model_dir/`'s."""
    assert offences("keras_transformer.data", "keras_transformer.model_dir") == []


def code_strings(tree: ast.Module):
    """The string literals of `tree` that are not docstrings."""
    docstrings = {
        id(node.body[0].value)
        for node in ast.walk(tree)
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef))
        and node.body
        and isinstance(node.body[0], ast.Expr)
        and isinstance(node.body[0].value, ast.Constant)
    }
    for node in ast.walk(tree):
        if isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in docstrings:
            yield node


PACKAGE_IMPORT = re.compile(r"^\s*(import keras_transformer\b|from keras_transformer[\w.]* import )", re.MULTILINE)


def test_no_string_of_code_imports_the_package():
    """A process that runs the package's code runs one of its modules (`python -m`), never a script
    in a string: an import inside a string is a dependency (and a cycle) no import graph shows."""
    found = [
        f"{name}:{node.lineno}"
        for name, tree in modules().items()
        for node in code_strings(tree)
        if PACKAGE_IMPORT.search(node.value)
    ]
    assert found == []


def test_the_search_engine_knows_no_text_files_or_entry_points():
    """`search/` takes tensors and gives tensors: translation (text and documents), evaluation,
    plots, the file formats, the service, the corpus jobs and the command line are built on it,
    never the reverse (issue 49 item 4). Imports inside functions count."""
    rooms = ["translation", "evaluation", "plots", "files", "service", "corpus", "cli"]
    found = [offence for room in rooms for offence in offences("keras_transformer.search", f"keras_transformer.{room}")]
    assert found == []
    assert any(name.startswith("keras_transformer.search.") for name in modules())  # the room exists
