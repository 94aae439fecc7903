"""Every YAML under configs/ parses and builds its model and DataModule.

Rule: ``<experiment>/base.yaml`` stands alone; any other file in an experiment folder (or below
it, as ``detection/grid/``) is stacked on that experiment's ``base.yaml``; ``presets/*.yaml``
are stacked on every experiment's base.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
import yaml

from attn_lightning.cli import AttnLightningCLI, cli_options

CONFIGS = Path(__file__).resolve().parent.parent / "configs"
BASES = sorted(CONFIGS.glob("*/base.yaml"))
NEEDS_GPU = {"gpu_ddp.yaml"}


class BuildOnly(AttnLightningCLI):
    """Parse and instantiate model, data and callbacks; no Trainer (presets may ask for GPUs)."""

    def instantiate_trainer(self, **kwargs):
        return None


def stacks() -> list:
    cases = []
    for path in sorted(CONFIGS.rglob("*.yaml")):
        rel = path.relative_to(CONFIGS)
        if rel.parts[0] == "studies":  # study plans (studies.sweep --plan), not train.py configs
            continue
        if rel.parts[0] == "presets":
            cases += [pytest.param([b, path], id=f"{b.parent.name}+{rel}") for b in BASES]
        elif path.name == "base.yaml":
            cases.append(pytest.param([path], id=str(rel)))
        else:
            # an overlay (also in a subfolder: detection/grid/) stacks on its experiment's base
            base = CONFIGS / rel.parts[0] / "base.yaml"
            cases.append(pytest.param([base, path], id=str(rel)))
    return cases


def test_there_are_configs():
    assert BASES, f"no <experiment>/base.yaml under {CONFIGS}"
    assert {p.name for p in (CONFIGS / "presets").glob("*.yaml")} >= {
        "cpu.yaml",
        "gpu_ddp.yaml",
        "bf16.yaml",
        "debug.yaml",
    }


@pytest.mark.parametrize("files", stacks())
def test_config_parses_and_builds(files, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(sys, "argv", ["train.py"])  # the CLI gets its args from `args`
    args = [a for f in files for a in ("--config", str(f))]
    cli = BuildOnly(**cli_options(), args=args, run=False)
    assert cli.model is not None and cli.datamodule is not None
    expected = {}
    for f in files:
        init = (yaml.safe_load(f.read_text()).get("model") or {}).get("init_args") or {}
        expected = init.get("attention", expected)
    if expected and hasattr(cli.model, "attention_config"):
        assert cli.model.attention_config == expected
    if not any(f.name in NEEDS_GPU for f in files):
        trainer = AttnLightningCLI.instantiate_trainer(cli)
        assert trainer.max_steps != 0


def _model_args(path: Path) -> dict:
    return yaml.safe_load(path.read_text())["model"]["init_args"]


@pytest.mark.parametrize(
    "folder", sorted({p.parent.name for p in CONFIGS.glob("*/softmax_no_qk.yaml")})
)
def test_optimization_differs_from_its_control_in_the_mixing_only(folder):
    """``optimization.yaml`` and its ``softmax_no_qk.yaml`` control set the same model options
    (mode, projections, ...) except the attention backend, so a paired delta measures the mixing."""
    paper = _model_args(CONFIGS / folder / "optimization.yaml")
    control = _model_args(CONFIGS / folder / "softmax_no_qk.yaml")
    assert paper.pop("attention")["name"] == "optimization"
    assert control.pop("attention") == {"name": "softmax"}
    assert paper == control
    assert paper["net"]["projections"] == "no_qk"  # the paper removes Q and K only
