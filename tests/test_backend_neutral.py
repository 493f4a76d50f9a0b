"""The model, its layers and its training step (the loss, the metrics, the schedules, `compile_model`)
are backend-neutral (`keras.ops` only): nothing they import, inside the package or out, is
TensorFlow, so `kt.Transformer` runs and trains on Keras' JAX and PyTorch backends too
(tests/test_backends.py compares the numbers). The one exception is what is chosen under
`if keras.backend.backend() == "tensorflow":`, which other backends never reach: a TensorFlow kernel
for what `keras.ops` computes on every backend (`attention.batch_matmul`, the fused cross-entropy of
`losses`, the argmax of `metrics`) and the `tf.distribute` fixes that `compile_model` applies."""

import ast
import pathlib

PACKAGE = pathlib.Path(__file__).parent.parent / "keras_transformer"


TENSORFLOW_ONLY = ast.unparse(ast.parse('keras.backend.backend() == "tensorflow"', mode="eval"))


def imported_modules(path: pathlib.Path) -> set[str]:
    """The modules a source file imports (absolute names), but those imported inside an `if` on
    `TENSORFLOW_ONLY` (a TensorFlow kernel for what `keras.ops` computes on every backend)."""
    names = set()
    tree = ast.parse(path.read_text(encoding="utf-8"))
    guarded = {
        id(child)
        for node in ast.walk(tree)
        if isinstance(node, ast.If) and ast.unparse(node.test) == TENSORFLOW_ONLY
        for statement in node.body
        for child in ast.walk(statement)
    }
    for node in ast.walk(tree):
        if id(node) in guarded:
            continue
        if isinstance(node, ast.Import):
            names |= {alias.name for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.level == 0:
            names.add(node.module)
            names |= {f"{node.module}.{alias.name}" for alias in node.names}
    return names


def source_of(module: str) -> pathlib.Path | None:
    """The file of a `keras_transformer` module (or package), None for anything else."""
    if module != "keras_transformer" and not module.startswith("keras_transformer."):
        return None
    path = PACKAGE.parent.joinpath(*module.split("."))
    if path.is_dir():
        return path / "__init__.py"
    return path.with_suffix(".py") if path.with_suffix(".py").is_file() else None


ALLOWED = {"__future__", "keras", "numpy", "ml_dtypes", "dataclasses", "typing", "importlib", "os", "re", "gc", "math"}


def reachable(modules: list[str]) -> tuple[set[pathlib.Path], set[str]]:
    """The package's files that `modules` import, transitively, and the top-level names of the
    modules from outside the package that those files import."""
    todo, seen, outside = list(modules), set(), set()
    while todo:
        module = todo.pop()
        path = source_of(module)
        if path is None or path in seen:
            continue
        seen.add(path)
        for name in imported_modules(path):
            if source_of(name) is not None:
                todo.append(name)
            elif name.split(".")[0] != "keras_transformer":  # else a name defined in a package module
                outside.add(name.split(".")[0])
    return seen, outside


def test_the_model_and_its_layers_import_no_tensorflow():
    seen, outside = reachable(
        ["keras_transformer.model", *(f"keras_transformer.layers.{p.stem}" for p in (PACKAGE / "layers").glob("*.py"))]
    )
    assert PACKAGE / "model.py" in seen and PACKAGE / "layers" / "attention.py" in seen
    assert "tensorflow" not in outside, sorted(outside)
    assert outside <= ALLOWED, outside


def test_the_training_step_imports_no_tensorflow():
    """What `compile_model` puts on the model: on a machine without TensorFlow (the GPU machine
    that JAX trains on) `compile_model` imports and `model.fit` runs on tensors and arrays."""
    modules = ["losses", "metrics", "schedules", "optimization"]
    seen, outside = reachable([f"keras_transformer.training.{name}" for name in modules])
    assert {PACKAGE / "training" / f"{name}.py" for name in modules} <= seen
    assert PACKAGE / "model.py" in seen and PACKAGE / "training" / "keras_compat.py" not in seen
    assert "tensorflow" not in outside, sorted(outside)
    assert outside <= ALLOWED, outside


def test_only_a_tensorflow_branch_imports_tensorflow_unseen(tmp_path):
    source = tmp_path / "module.py"
    source.write_text(
        "import keras\n"
        "def kernel():\n"
        '    if keras.backend.backend() == "tensorflow":\n'
        "        import tensorflow\n"
        "    import tensorflow.linalg\n",
        encoding="utf-8",
    )
    assert imported_modules(source) == {"keras", "tensorflow.linalg"}
