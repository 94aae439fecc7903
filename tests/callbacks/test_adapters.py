"""AdapterExport: writes through the task's export_adapter, skips tasks without it."""

from __future__ import annotations

from types import SimpleNamespace

from attn_lightning.callbacks import AdapterExport
from attn_lightning.tasks import LoRAClassifierTask


def _trainer(dirpath, rank_zero=True):
    checkpoint = SimpleNamespace(dirpath=None if dirpath is None else str(dirpath))
    return SimpleNamespace(checkpoint_callback=checkpoint, is_global_zero=rank_zero)


def test_adapter_written_beside_the_checkpoints(tmp_path):
    task = LoRAClassifierTask(adaptation="lora_scratch", lora_r=1)
    AdapterExport(dirname="lora").on_fit_end(_trainer(tmp_path), task)
    assert (tmp_path / "lora" / "adapter_config.json").is_file()


def test_nothing_written_without_adapter_folder_or_rank_zero(tmp_path):
    callback = AdapterExport()
    callback.on_fit_end(_trainer(tmp_path), LoRAClassifierTask(adaptation="base"))
    callback.on_fit_end(_trainer(tmp_path), object())  # a task without export_adapter
    adapted = LoRAClassifierTask(adaptation="lora_scratch", lora_r=1)
    callback.on_fit_end(_trainer(tmp_path, rank_zero=False), adapted)
    callback.on_fit_end(_trainer(None), adapted)
    assert not list(tmp_path.iterdir())
