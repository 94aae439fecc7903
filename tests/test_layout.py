"""The house rules, checked: entry points alone at the root, imports run downward, tasks/ holds
LightningModules only, attention/ and models/ import no Lightning, every module says what it
holds."""

from __future__ import annotations

import ast
import importlib
import inspect
from pathlib import Path

import lightning.pytorch as pl
import pytest

PACKAGE = Path(__file__).resolve().parents[1] / "attn_lightning"
# Lower layers never import higher ones; a layer may import its own level.
LAYERS = {
    "results": 0,
    "attention": 0,
    "models": 1,
    "data": 2,
    "callbacks": 2,
    "tasks": 2,
    "benchmarks": 3,
    "cli": 3,
    "studies": 4,
    "benchmark": 4,
}
ENTRY_POINTS = {"__init__.py", "cli.py", "benchmark.py"}
MODULES = sorted(PACKAGE.rglob("*.py"))


def _name(path: Path) -> str:
    parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _layer(module: str) -> int | None:
    parts = module.split(".")
    if parts[0] != "attn_lightning" or len(parts) < 2:
        return None
    return LAYERS[parts[1]]


def _imports(path: Path) -> list[str]:
    tree = ast.parse(path.read_text())
    names: list[str] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names += [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names.append(node.module)
    return names


def test_only_entry_points_and_packages_at_the_root():
    loose = {p.name for p in PACKAGE.glob("*.py")} - ENTRY_POINTS
    assert not loose, f"modules loose at attn_lightning/: {sorted(loose)}"
    packages = {p.name for p in PACKAGE.iterdir() if (p / "__init__.py").is_file()}
    assert packages <= set(LAYERS), f"a package with no layer: {sorted(packages - set(LAYERS))}"


@pytest.mark.parametrize("path", MODULES, ids=lambda p: _name(p) or "attn_lightning")
def test_module_docstring_and_downward_imports(path):
    tree = ast.parse(path.read_text())
    docstring = ast.get_docstring(tree)
    assert docstring and docstring.strip(), f"{path} has no module docstring"
    own = _layer(_name(path))
    if own is None:  # attn_lightning/__init__.py
        return
    for imported in _imports(path):
        layer = _layer(imported)
        assert layer is None or layer <= own, f"{_name(path)} imports upward: {imported}"


@pytest.mark.parametrize("sub", ["attention", "models"])
def test_attention_and_models_import_no_lightning(sub):
    for path in sorted((PACKAGE / sub).rglob("*.py")):
        for imported in _imports(path):
            root = imported.split(".")[0]
            assert root not in ("lightning", "pytorch_lightning"), f"{path} imports {imported}"


def test_tasks_hold_lightning_modules_only():
    for path in sorted((PACKAGE / "tasks").glob("*.py")):
        module = importlib.import_module(_name(path))
        for name, obj in vars(module).items():
            if inspect.isclass(obj) and obj.__module__ == module.__name__:
                assert issubclass(obj, pl.LightningModule), f"{module.__name__}.{name}"
