"""The Colab notebooks: stored without outputs, no model code in cells, badges that point at
them, and each one executed top to bottom on a fresh kernel with small settings
(`KT_NOTEBOOK_SMOKE=1`: tiny preset, a few steps, the 400-pair fixture, 2 logical CPUs and
`tfds.testing.mock_data` for the distributed one)."""

import ast
import importlib.metadata
import pathlib
import re
import sys
import time

import nbformat
import pytest
import tomllib
from conftest import FIXTURE

import keras_transformer

ROOT = pathlib.Path(__file__).resolve().parents[1]
COLAB = ROOT / "colab"
NOTEBOOKS = [
    "01_quickstart.ipynb",
    "02_attention.ipynb",
    "03_distributed_training.ipynb",
    "04_export_and_serve.ipynb",
    "05_domain_adaptation.ipynb",
]
REPO = "keras-aiayn/keras-aiayn"  # placeholder GitHub org/repo, the same in every badge
DISTRIBUTION = "keras-aiayn"
# Modules of the package that import an optional dependency, lazily.
OPTIONAL_IMPORTS = {"keras_transformer.plots.visualize": "matplotlib"}
BADGE = "https://colab.research.google.com/github/" + REPO + "/blob/main/colab/{name}"
CELL_TIMEOUT_S = 600


def load(name):
    return nbformat.read(COLAB / name, as_version=4)


def code_cells(name):
    return [cell.source for cell in load(name).cells if cell.cell_type == "code"]


@pytest.mark.parametrize("name", NOTEBOOKS)
def test_notebook_is_stored_valid_and_without_outputs(name):
    notebook = load(name)
    nbformat.validate(notebook)
    for cell in notebook.cells:
        if cell.cell_type == "code":
            assert cell.outputs == [] and cell.execution_count is None, f"{name}: strip the outputs before committing"


@pytest.mark.parametrize("name", NOTEBOOKS)
def test_notebook_has_its_badge_and_a_pinned_install_cell(name):
    first = load(name).cells[0].source
    assert BADGE.format(name=name) in first
    install = code_cells(name)[0]
    assert f"{DISTRIBUTION}[" in install
    assert f"git+https://github.com/{REPO}@v{keras_transformer.__version__}" in install
    assert "except ImportError:" in install  # a local checkout (the suite) is used as installed


def _requirement_name(requirement: str) -> str:
    return re.split(r"[<>=!~\[; @]", requirement, maxsplit=1)[0].lower().replace("_", "-")


def imported_modules(name) -> set[str]:
    """Every module the notebook's cells import (`from a import b` counts a.b too)."""
    modules = set()
    for source in code_cells(name):
        code = "\n".join(line for line in source.splitlines() if not line.lstrip().startswith(("%", "!")))
        for node in ast.walk(ast.parse(code)):
            if isinstance(node, ast.Import):
                modules.update(alias.name for alias in node.names)
            elif isinstance(node, ast.ImportFrom) and node.module:
                modules.add(node.module)
                modules.update(f"{node.module}.{alias.name}" for alias in node.names)
    return modules


@pytest.mark.parametrize("name", NOTEBOOKS)
def test_install_cell_names_the_extras_its_imports_need(name):
    """Every third-party module the cells import comes from a dependency or from an extra that the
    install cell names (on Colab nothing else is installed; here the dev extras hide a gap)."""
    project = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"]
    assert project["name"] == DISTRIBUTION
    extras = re.search(rf"{DISTRIBUTION}\[([^\]]*)\]", code_cells(name)[0]).group(1).split(",")
    installed = {_requirement_name(r) for r in project["dependencies"]}
    for extra in extras:
        installed |= {_requirement_name(r) for r in project["optional-dependencies"][extra.strip()]}
    distributions = importlib.metadata.packages_distributions()
    modules = imported_modules(name)
    modules |= {OPTIONAL_IMPORTS[m] for m in modules if m in OPTIONAL_IMPORTS}
    for module in sorted(modules):
        top = module.split(".")[0]
        if top in sys.stdlib_module_names or top == "keras_transformer":
            continue
        providers = {d.lower().replace("_", "-") for d in distributions.get(top, [top])}
        assert providers & installed, f"{name} imports {module}; the extras {extras} do not install {providers}"


@pytest.mark.parametrize("name", NOTEBOOKS)
def test_no_model_code_in_cells(name):
    for source in code_cells(name):
        assert not re.search(r"^\s*(class|def)\s", source, re.MULTILINE), (
            f"{name}: define code in the package, not in cells"
        )
        assert "keras.layers" not in source and "keras.Model" not in source and "add_weight" not in source


def test_readme_has_an_open_in_colab_badge_per_notebook():
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    for name in NOTEBOOKS:
        assert f"({BADGE.format(name=name)})" in readme


@pytest.fixture(scope="module")
def workdir(tmp_path_factory):
    """One working directory for the notebooks of a run: 02 and 04 share 01's settings, so they
    find its trained model in runs/quickstart (train() has nothing left to do) instead of training
    again. Run alone, each trains its own."""
    return tmp_path_factory.mktemp("notebooks")


@pytest.mark.slow
@pytest.mark.parametrize("name", NOTEBOOKS)
def test_notebook_runs_top_to_bottom(name, workdir, monkeypatch):
    from nbclient import NotebookClient

    monkeypatch.setenv("KT_NOTEBOOK_SMOKE", "1")
    monkeypatch.setenv("KT_NOTEBOOK_DATA", str(FIXTURE))
    monkeypatch.setenv("TF_CPP_MIN_LOG_LEVEL", "3")
    monkeypatch.setenv("MPLBACKEND", "module://matplotlib_inline.backend_inline")
    notebook = load(name)
    client = NotebookClient(
        notebook, timeout=CELL_TIMEOUT_S, kernel_name="python3", resources={"metadata": {"path": str(workdir)}}
    )
    start = time.perf_counter()
    client.execute()  # raises CellExecutionError, with the cell and its traceback, if a cell fails
    print(f"{name} ran in {time.perf_counter() - start:.0f} s")
    outputs = [output for cell in notebook.cells if cell.cell_type == "code" for output in cell.outputs]
    text = "".join(output.get("text", "") for output in outputs)
    # The kernel ran this checkout's package, not another installed copy.
    assert f"from {ROOT / 'keras_transformer' / '__init__.py'}" in text
    assert not [output for output in outputs if output.output_type == "error"]
    figures = [output for output in outputs if "image/png" in output.get("data", {})]
    assert len(figures) >= EXPECTED_FIGURES[name], f"{name}: {len(figures)} figures"


EXPECTED_FIGURES = {
    "01_quickstart.ipynb": 1,  # training curves
    "02_attention.ipynb": 4,  # encoder, decoder self, cross attention, path lengths
    "03_distributed_training.ipynb": 1,  # training curves across the resume
    "04_export_and_serve.ipynb": 0,
    "05_domain_adaptation.ipynb": 0,  # a table of scores
}
