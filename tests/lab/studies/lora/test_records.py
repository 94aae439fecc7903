"""The LoRA study's run records as its report reads them: the study's values from a record's
test metrics and curves, a missing folder, runs named by stage. The runs CSVs' order is proven
by their byte-for-byte rebuild from the committed records (``tests/docs/test_plan_pages.py``)."""

from __future__ import annotations

import pytest

from attn_lightning.records.run_files import write_curves, write_record
from lab.studies.lora import records


def test_best_validation_reads_the_lowest_val_loss_epoch():
    points = ((1.0, 0.6), (0.5, 0.8), (0.5, 0.85), (0.7, 0.9))
    scalars = {
        "val/loss": [(20 * i, loss) for i, (loss, _) in enumerate(points, 1)],
        "val/acc": [(20 * i, acc) for i, (_, acc) in enumerate(points, 1)],
    }
    # The first minimum: ModelCheckpoint keeps a checkpoint only on a strictly lower val/loss;
    # one validation per epoch: 4 epochs trained.
    best = {"epochs": 4, "val_loss": 0.5, "best_epoch": 2}
    assert records.best_validation(scalars) == {**best, "val_acc": 0.8}
    assert records.best_validation({"val/loss": scalars["val/loss"]}) == best
    assert records.best_validation({}) == {}
    # A NaN validation loss never is the best (ModelCheckpoint ranks it as +inf).
    nan_first = {"val/loss": [(20, float("nan")), (40, 0.9), (60, 1.2)]}
    assert records.best_validation(nan_first) == {"epochs": 3, "val_loss": 0.9, "best_epoch": 2}


def test_read_run_names_the_test_metrics_and_curves_as_the_tables_do(tmp_path):
    folder = tmp_path / "run"
    folder.mkdir()
    write_curves(folder, {(epoch, "val/loss"): loss for epoch, loss in enumerate((0.9, 0.4, 0.6))})
    record = {"schema": 1, "run": "r-s0", "seed": 0, "tags": {"variant": "r"}, "status": "ok"}
    write_record(folder, {**record, "metrics": {"test": {"test/acc": 0.9, "test/loss": 0.2}}})
    fit = {"epochs": 3, "val_loss": pytest.approx(0.4), "best_epoch": 2}
    assert records.read_run(folder).metrics == {**fit, "acc": 0.9}
    (folder / "curves.csv").unlink()
    test = {"test/token_acc": 0.7, "test/trainable_params": 512.0}
    write_record(folder, {**record, "metrics": {"test": test}})
    assert records.read_run(folder).metrics == {"acc": 0.7, "trainable_params": 512}
    # A record converted from a runs CSV carries the values by the study's names.
    write_record(folder, {**record, "metrics": {"fit": {"acc": 0.8, "best_epoch": 4}}})
    assert records.read_run(folder).metrics == {"acc": 0.8, "best_epoch": 4}


def test_load_parts_names_a_folder_without_records(tmp_path):
    with pytest.raises(FileNotFoundError, match=r"runs folder .*none does not exist"):
        records.load_parts([tmp_path / "none"])


def test_a_plan_run_is_named_by_its_stage_so_two_stages_variants_stay_two_rows(tmp_path):
    # mlp_before and mlp_full both run "full,domain=rotated" (the before run tests full.yaml's
    # model as built): the report's rows group runs by name.
    names = []
    for stage in ("mlp_before", "mlp_full"):
        folder = tmp_path / stage / "full_domain-rotated-s0"
        folder.mkdir(parents=True)
        tags = {"variant": "full,domain=rotated", "stage": stage, "part": "mlp"}
        write_record(folder, {"schema": 1, "run": folder.name, "seed": 0, "tags": tags})
        names.append(records.read_run(folder).variant)
    assert names == ["mlp_before/full,domain=rotated", "mlp_full/full,domain=rotated"]
