"""The LoRA study's parts as runner variants: which runs, from which checkpoints."""

from __future__ import annotations

from pathlib import Path

from lab.studies.lora import jobs
from lab.studies.lora.cli import build_parser
from lab.studies.runner import Runner


def _args(tmp_path: Path, part: str, *extra: str):
    base = ["--out", str(tmp_path / "lora"), "--work", str(tmp_path / "work"), "--seeds", "0"]
    return build_parser().parse_args([part, *base, *extra])


def test_mlp_jobs_adapt_the_seed_base_checkpoint(tmp_path):
    args = _args(tmp_path, "mlp", "--ranks", "1", "4", "--domains", "rotated")
    planned = jobs.mlp_jobs(args)
    assert [v.name for v, _, _ in planned] == [
        "base-mlp",
        "rotated-before",
        "rotated-full",
        "rotated-lora-r1",
        "rotated-lora-r4",
        "rotated-lora_scratch-r1",
        "rotated-lora_scratch-r4",
    ]
    by_name = {v.name: (v, info) for v, _, info in planned}
    before, info = by_name["rotated-before"]
    assert "ckpt_path=initial" in before.overrides  # the base's weights, on purpose
    assert before.subcommand == "test" and info == {
        "part": "mlp",
        "domain": "rotated",
        "rank": 0,
        "adaptation": "before",
    }
    lora_r4, info = by_name["rotated-lora-r4"]
    ckpt = tmp_path / "work" / "checkpoints" / "lora-study" / "base-mlp-s0" / "last.ckpt"
    assert f"--model.init_args.base_checkpoint={ckpt}" in Runner().train_args(lora_r4, 0)
    assert {"model.init_args.adaptation=lora", "model.init_args.lora_r=4"} <= set(lora_r4.overrides)
    assert not any("mode=" in o for v, _, _ in planned for o in v.overrides)
    assert info["rank"] == 4 and info["adaptation"] == "lora"
    assert by_name["base-mlp"][1]["_keep"] == str(ckpt)  # later runs load it


def test_variant_jobs_load_the_mlp_bases(tmp_path):
    args = _args(tmp_path, "variants", "--variant-domains", "inverted", "--variant-rank", "2")
    planned = jobs.variant_jobs(args)
    assert [v.name for v, _, _ in planned] == [
        "inverted-lora_head_frozen-r2",
        "inverted-lora_head_saved-r2",
        "inverted-lora_bias_all-r2",
    ]
    saved, info = planned[1][0], planned[1][2]
    assert "model.init_args.modules_to_save=[fc3]" in saved.overrides
    ckpt = tmp_path / "work" / "checkpoints" / "lora-study" / "base-mlp-s0" / "last.ckpt"
    assert f"--model.init_args.base_checkpoint={ckpt}" in Runner().train_args(saved, 0)
    assert info == {"part": "variants", "domain": "inverted", "adaptation": "lora_head_saved"} | {
        "rank": 2
    }


def test_transformer_jobs_share_one_base(tmp_path):
    args = _args(tmp_path, "transformer", "--seeds", "0", "1", "--transformer-ranks", "2")
    planned = jobs.transformer_jobs(args)
    assert [(v.name, seed) for v, seed, _ in planned][:5] == [
        ("base-reversal", 0),
        ("rev-before", 0),
        ("rev-full", 0),
        ("rev-lora-r2", 0),
        ("rev-lora_scratch-r2", 0),
    ]
    assert sum(v.name == "base-reversal" for v, _, _ in planned) == 1
    full = next(v for v, _, _ in planned if v.name == "rev-full")
    assert "model.init_args.adaptation=full" in full.overrides
