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

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "attn_lightning"
LAB = ROOT / "lab"
# Lower layers never import higher ones; a layer may import its own level.
# Tasks sit above callbacks (a task may use a callback's hook protocol; a callback never imports
# a task, so the two never import each other). The lab sits above the whole package.
LAYERS = {
    "attn_lightning": {
        "records": 0,
        "attention": 0,
        "models": 1,
        "data": 2,
        "callbacks": 3,
        "tasks": 4,
        "cli": 5,
    },
    "lab": {"results": 0, "benchmarks": 1, "studies": 2, "benchmark": 3},
}
ENTRY_POINTS = {"__init__.py", "cli.py", "benchmark.py"}
MODULES = sorted([*PACKAGE.rglob("*.py"), *LAB.rglob("*.py")])


def _name(path: Path) -> str:
    parts = path.relative_to(ROOT).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _layer(module: str) -> tuple[int, int] | None:
    """(tree, layer): the package is tree 0, the lab tree 1, each above the one before."""
    parts = module.split(".")
    if parts[0] not in LAYERS or len(parts) < 2:
        return None
    return list(LAYERS).index(parts[0]), LAYERS[parts[0]][parts[1]]


def _imports(path: Path) -> list[str]:
    tree = ast.parse(path.read_text())
    names: list[str] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names += [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names.append(node.module)
    return names


@pytest.mark.parametrize("tree", [PACKAGE, LAB], ids=lambda p: p.name)
def test_only_entry_points_and_packages_at_the_root(tree):
    loose = {p.name for p in tree.glob("*.py")} - ENTRY_POINTS
    assert not loose, f"modules loose at {tree.name}/: {sorted(loose)}"
    packages = {p.name for p in tree.iterdir() if (p / "__init__.py").is_file()}
    layers = set(LAYERS[tree.name])
    assert packages <= layers, f"a package with no layer: {sorted(packages - layers)}"


def test_the_package_imports_nothing_from_the_lab():
    for path in sorted(PACKAGE.rglob("*.py")):
        for imported in _imports(path):
            assert imported.split(".")[0] != "lab", f"{_name(path)} imports the lab: {imported}"


@pytest.mark.parametrize("path", MODULES, ids=_name)
def test_module_docstring_and_downward_imports(path):
    tree = ast.parse(path.read_text())
    docstring = ast.get_docstring(tree)
    assert docstring and docstring.strip(), f"{path} has no module docstring"
    own = _layer(_name(path))
    if own is None:  # attn_lightning/__init__.py, lab/__init__.py
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


# ----------------------------------------------------------------------------- second pass rules
MAX_LINES = 400
# A CSV or markdown table written by hand: the results room (attn_lightning/records) owns these.
HAND_WRITTEN = ("import csv", "csv.writer", "csv.DictWriter", '" | ".join', '"| " +', '"|---')
# studies/: the runner, the sweep, its plans' stages and report kinds; then one folder per study.
STUDY_MODULES = {
    "__init__.py",
    "runner.py",
    "sweep.py",
    "plan.py",
    "stages.py",
    "select.py",
    # report kinds of one module (a study with more has a folder)
    "reversal.py",
    "recall.py",
    "reversal_traces.py",
    "trajectories.py",
}
# attention/: the contract, the table, the shared feature-map base, option checks and one file per
# backend; every kernel lives in attention/ops/, the float64 references in attention/naive/.
ATTENTION_MODULES = {
    "__init__.py",
    "base.py",
    "registry.py",
    "feature_map.py",
}


@pytest.mark.parametrize("path", MODULES, ids=_name)
def test_no_module_over_the_limit(path):
    lines = len(path.read_text().splitlines())
    assert lines <= MAX_LINES, f"{_name(path)} has {lines} lines (> {MAX_LINES}): split it"


@pytest.mark.parametrize("path", MODULES, ids=_name)
def test_only_the_results_room_writes_csv_and_tables(path):
    if path.is_relative_to(PACKAGE / "records") or path.is_relative_to(LAB / "results"):
        return
    text = path.read_text()
    found = [pattern for pattern in HAND_WRITTEN if pattern in text]
    assert not found, f"{_name(path)} writes CSV or tables by hand ({found}): use records/"


@pytest.mark.parametrize("path", MODULES, ids=_name)
def test_no_issue_numbers_or_machine_paths_in_code(path):
    import re

    text = path.read_text()
    assert not re.search(r"\bissues? ?#?\d+", text, re.I), f"{_name(path)} cites an issue number"
    assert not re.search(r"(?<![\w.])/(work|home|root|tmp)/", text), f"{_name(path)}: a path"


def test_no_study_folder_has_a_command_line():
    loose = {p.name for p in (LAB / "studies").glob("*.py")}
    assert loose == STUDY_MODULES, "a study module outside a study's folder"
    folders = [p for p in (LAB / "studies").iterdir() if (p / "__init__.py").is_file()]
    assert {p.name for p in folders} >= {"detection", "image", "lora", "warm_start"}
    # The sweep is the one command: a study is a plan (configs/studies/), and its folder holds
    # the report kinds its pages select (studies.sweep.REPORTS).
    cli = ("__main__.py", "cli.py")
    with_cli = {f.name for f in folders if any((f / name).is_file() for name in cli)}
    assert not with_cli, f"studies/{sorted(with_cli)}: a CLI of its own"


def test_attention_holds_the_contract_and_one_file_per_backend():
    from attn_lightning.attention import ATTENTIONS

    files = {p.name for p in (PACKAGE / "attention").glob("*.py")}
    backends = {inspect.getmodule(cls).__name__.rsplit(".", 1)[1] + ".py"  # type: ignore[union-attr]
                for cls in ATTENTIONS.values()}  # fmt: skip
    assert files == ATTENTION_MODULES | backends, "a kernel or helper outside attention/ops/"
    for cls in ATTENTIONS.values():
        module = inspect.getmodule(cls).__name__  # type: ignore[union-attr]
        assert ".ops." not in module, f"backend {cls.__name__} lives among the kernels"


def test_every_benchmark_command_is_one_row_of_the_table():
    from lab.benchmarks.cli import COMMANDS

    for name, row in COMMANDS.items():
        module = inspect.getmodule(row.run).__name__  # type: ignore[union-attr]
        assert inspect.getmodule(row.add_arguments).__name__ == module, name  # type: ignore[union-attr]
        assert module.startswith("lab.benchmarks."), name


README = ROOT / "README.md"


def _layout_table() -> dict[str, set[str]]:
    """The README's Layout table: folder -> the modules it lists."""
    text = README.read_text()
    section = text[text.index("## Layout") :]
    rows = {}
    for line in section.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) >= 2 and cells[0].startswith(("`attn_lightning/", "`lab/")):
            modules = {m.strip(" `") for m in cells[1].split(",") if m.strip(" `")}
            rows[cells[0].strip("`")] = modules
    return rows


def test_readme_layout_lists_every_package_and_module():
    table = _layout_table()
    folders = {
        str(p.relative_to(ROOT)) + "/"
        for tree in (PACKAGE, LAB)
        for p in [tree, *tree.rglob("*")]
        if p.is_dir() and (p / "__init__.py").is_file()
    }
    assert set(table) == folders, f"README Layout rows differ: {sorted(set(table) ^ folders)}"
    for folder, listed in table.items():
        present = {p.stem for p in (ROOT / folder).glob("*.py")} - {"__init__"}
        assert listed == present, f"README Layout, {folder}: {sorted(listed ^ present)}"
