"""The trained ``PixelTransformer`` of an image-generation checkpoint, and what labels it."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from attn_lightning.cli.checkpoints import (
    CheckpointError,
    load_checkpoint,
    load_task,
    saved_class,
)
from attn_lightning.models.pixel import PixelTransformer
from attn_lightning.tasks.image import ImageGenerationTask

SIZES = ("image_size", "levels")  # the data's; the model's own are its net spec


def format_attention_spec(attention: Mapping[str, Any]) -> str:
    """A backend dict in the command-line spelling: ``{"name": "performer", "num_features":
    64}`` -> ``"performer:num_features=64"`` (the inverse of ``parse_attention_spec``)."""

    def value(v: Any) -> str:
        return "none" if v is None else str(v).lower() if isinstance(v, bool) else str(v)

    options = [f"{k}={value(v)}" for k, v in attention.items() if k != "name"]
    return str(attention["name"]) + (":" + ",".join(options) if options else "")


def _net_sizes(net: Mapping[str, Any]) -> list[str]:
    return [f"{k}={net[k]}" for k in ("d_model", "num_heads", "num_layers", "d_ff", "output")]


def load_pixel_model(path: str | Path) -> tuple[PixelTransformer, dict[str, Any]]:
    """The trained model (eval mode, CPU) of an ``ImageGenerationTask`` checkpoint, and what
    labels it: ``backend`` (spec), ``name`` (backend name), ``run`` (run folder), ``step``
    (global step) and ``model`` (its sizes).

    Raises:
        CheckpointError: the file is missing, corrupt, or not an image-generation checkpoint;
            the message names the path.
    """
    path = Path(path)
    checkpoint = load_checkpoint(path, flag="--checkpoints")
    foreign = CheckpointError(f"--checkpoints {str(path)!r} is not an image-generation checkpoint")
    class_path = saved_class(checkpoint, "hyper_parameters")
    if class_path is not None and class_path.rsplit(".", 1)[-1] != "ImageGenerationTask":
        raise CheckpointError(f"{foreign} (its task is {class_path})")
    try:
        task = load_task(path, default=ImageGenerationTask, flag="--checkpoints")
    except (TypeError, ValueError, RuntimeError) as err:  # other hparams, missing/extra weights
        reason = " ".join(str(err).split())[:160]
        raise CheckpointError(f"{foreign} ({type(err).__name__}: {reason})") from None
    info = {
        "backend": format_attention_spec(task.attention_config),
        "name": task.attention_config["name"],
        "run": path.parent.name,
        "step": checkpoint.get("global_step", ""),
        "model": " ".join(
            [*(f"{k}={task.hparams[k]}" for k in SIZES), *_net_sizes(task.hparams["net"])]
        ),
    }
    return task.net.eval(), info
