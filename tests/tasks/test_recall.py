"""The associative-recall task: every overlay trains from its YAML, a hand-set two-layer softmax
model solves MQAR exactly (and the task's metrics say so, by distance too), loss and logits only
at the queries."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
import yaml
from torch import Tensor, nn

from attn_lightning.data.mqar import RecallSizes, multiquery_ar
from attn_lightning.models import MultiHeadAttention
from attn_lightning.tasks import AssociativeRecallTask
from attn_lightning.tasks.recall import distance_bins
from tests.runs import CONFIGS, smoke_fit, train

BASE = CONFIGS / "recall" / "base.yaml"
OVERLAYS = sorted(p for p in (CONFIGS / "recall").glob("*.yaml") if p.name != "base.yaml")
TINY = [
    "--data.init_args.train_size=64",
    "--data.init_args.val_size=32",
    "--data.init_args.test_size=32",
    "--data.init_args.batch_size=16",
    "--trainer.enable_progress_bar=false",
]
NET = {"d_model": 16, "num_heads": 2, "num_layers": 2, "d_ff": 32, "max_len": 64}


@pytest.mark.usefixtures("cli_workdir")
@pytest.mark.parametrize("config", OVERLAYS, ids=lambda p: p.stem)
def test_every_overlay_trains_from_its_yaml(config, tmp_path):
    def run(subcommand: str, tmp: Path, *configs: Path, extra=()):
        return train(subcommand, tmp, (BASE, *configs), options=TINY, extra=extra)

    cli = smoke_fit(run, config, tmp_path)
    metrics = cli.trainer.callback_metrics
    assert torch.isfinite(metrics["test/loss"])
    for name in ("query_acc", "example_acc"):
        assert 0.0 <= float(metrics[f"test/{name}"]) <= 1.0
    assert {f"test/query_acc_d{lo}-{hi}" for lo, hi in distance_bins(64)} <= set(metrics)
    data = (yaml.safe_load(config.read_text()).get("data") or {}).get("init_args") or {}
    vocab = data.get("vocab_size", 512)  # base.yaml's unless the overlay sets it (zoology.yaml)
    assert cli.model.vocab_size == cli.datamodule.vocab_size == vocab  # linked from the data


# ---------------------------------------------------------------------------- a hand-set solution
class InductionHeads(nn.Module):
    """Two softmax attention layers with hand-set weights that solve MQAR exactly.

    Width 2V + L: slots ``tok`` (one-hot token), ``prev`` (one-hot previous token), ``pos``
    (one-hot position). Layer 1 attends from position i to i − 1 (q = β·shift(pos), k = pos) and
    writes that token into ``prev``; layer 2 attends from a query token k to the position whose
    previous token is k (q = β·tok, k = prev) — the value after the key — and copies its token.
    The readout scores the value tokens (the upper half of the vocabulary) by the ``tok`` slot of
    layer 2's output. Fillers must be 0 (``random_non_queries=False``): a noise token equal to a
    key would be a second match.
    """

    def __init__(self, vocab_size: int, seq_len: int, beta: float = 50.0) -> None:
        super().__init__()
        v, n = vocab_size, seq_len
        self.v, self.n = v, n
        e = 2 * v + n
        tok, prev, pos = slice(0, v), slice(v, 2 * v), slice(2 * v, e)
        softmax = {"name": "softmax", "scale": 1.0}
        self.layer1 = MultiHeadAttention(d_model=e, num_heads=1, attention=softmax)
        self.layer2 = MultiHeadAttention(d_model=e, num_heads=1, attention=softmax)
        with torch.no_grad():
            for module in (*self.layer1.modules(), *self.layer2.modules()):
                if isinstance(module, nn.Linear):
                    module.weight.zero_()
                    module.bias.zero_()
            eye_v = torch.eye(v)
            # q at position i is β·one_hot(i − 1): rows i − 1, columns i of the position block.
            self.layer1.q_proj.weight[pos, pos][: n - 1, 1:] = beta * torch.eye(n - 1)
            self.layer1.k_proj.weight[pos, pos] = torch.eye(n)
            self.layer1.v_proj.weight[tok, tok] = eye_v
            self.layer1.out_proj.weight[prev, tok] = eye_v
            self.layer2.q_proj.weight[tok, tok] = beta * eye_v
            self.layer2.k_proj.weight[tok, prev] = eye_v
            self.layer2.v_proj.weight[tok, tok] = eye_v
            self.layer2.out_proj.weight[tok, tok] = eye_v

    def forward(
        self, tokens: Tensor, *, causal: bool = True, positions: Tensor | None = None
    ) -> Tensor:
        b, n = tokens.shape
        x = torch.cat(
            [
                nn.functional.one_hot(tokens, self.v).float(),
                torch.zeros(b, n, self.v),
                torch.eye(self.n)[:n].expand(b, -1, -1),
            ],
            dim=-1,
        )
        x = x + self.layer1(x, causal=True)
        out = self.layer2(x, causal=True)[..., : self.v]  # (B, L, V): the copied token
        logits = out.masked_fill(torch.arange(self.v) < self.v // 2, -1.0)  # answers are values
        if positions is not None:
            logits = logits.gather(1, positions[..., None].expand(-1, -1, self.v))
        return logits


@pytest.mark.filterwarnings(r"ignore:You are trying to `self.log\(\)`")
def test_a_hand_set_model_solves_mqar_exactly_and_the_metrics_say_so():
    sizes = RecallSizes(vocab_size=24, seq_len=32, num_kv_pairs=8, random_non_queries=False)
    data = multiquery_ar(sizes, num_examples=64, generator=torch.Generator().manual_seed(0))
    model = InductionHeads(sizes.vocab_size, sizes.seq_len)
    batch = {"inputs": data.inputs, "labels": data.labels, "positions": data.positions}
    task = AssociativeRecallTask(vocab_size=24, seq_len=32, net=NET)
    task.net = model  # the task's loss and metrics around the hand-set model
    out = task._shared_step(batch, "val")
    assert task._metric("val_query_acc").compute() == 1.0
    assert task._metric("val_example_acc").compute() == 1.0
    assert out["loss"] < 3.2  # the value logit leads by ~1 at every query
    predicted = task.predict_step(batch, 0)
    assert torch.equal(predicted["prediction"], predicted["target"])
    assert torch.equal(predicted["query"], data.inputs.gather(1, data.positions))
    # One query answered wrong in one example: query accuracy drops by 1/(64·8), examples by 1/64.
    task.metrics["val_query_acc"].reset()
    task.metrics["val_example_acc"].reset()
    wrong = dict(batch, labels=batch["labels"].clone())
    first = int(data.positions[0, 0])
    wrong["labels"][0, first] = (wrong["labels"][0, first] + 1 - 12) % 12 + 12
    task._shared_step(wrong, "val")
    assert task._metric("val_query_acc").compute() == pytest.approx(1 - 1 / 512)
    assert task._metric("val_example_acc").compute() == pytest.approx(1 - 1 / 64)
    # By distance: the wrong answer counts in its own bin only, over the two batches.
    distance = data.value_distances()
    wrong_at = int(distance[0, 0])
    for lo, hi in distance_bins(32):
        count = int(((distance >= lo) & (distance <= hi)).sum())
        got = task._log_means[f"val/query_acc_d{lo}-{hi}"].compute()
        want = 1 - (1 / (2 * count) if lo <= wrong_at <= hi else 0)
        assert count > 0 and float(got) == pytest.approx(want), (lo, hi)


def test_distance_bins_cover_every_distance_once():
    assert distance_bins(8) == [(1, 7)]
    assert distance_bins(64) == [(1, 7), (8, 15), (16, 31), (32, 63)]
    assert distance_bins(256)[-1] == (128, 255)
    for length in (8, 10, 64, 100, 256):  # the longest distance in an example is L - 3
        bins = distance_bins(length)
        assert [sum(lo <= d <= hi for lo, hi in bins) for d in range(1, length - 2)] == [1] * (
            length - 3
        )


def test_logits_and_loss_only_at_the_queries():
    torch.manual_seed(0)
    task = AssociativeRecallTask(vocab_size=24, seq_len=32, net=NET).eval()
    sizes = RecallSizes(vocab_size=24, seq_len=32, num_kv_pairs=4)
    data = multiquery_ar(sizes, num_examples=3, generator=torch.Generator().manual_seed(1))
    logits = task(data.inputs, data.positions)
    assert logits.shape == (3, 4, 24)
    full = task.net(data.inputs, causal=True)  # (B, L, V)
    torch.testing.assert_close(logits, full.gather(1, data.positions[..., None].expand(-1, -1, 24)))
    # Tokens after the last query change nothing (causal).
    last = int(data.positions[0].max())
    changed = data.inputs.clone()
    changed[0, last + 1 :] = 0
    torch.testing.assert_close(task(changed, data.positions), logits)
    rows = task.sample_rows(
        {"inputs": data.inputs, "labels": data.labels, "positions": data.positions}, 2
    )
    assert len(rows) == 2 and rows[0]["correct"].endswith("/4")


def test_errors_name_the_cause():
    with pytest.raises(ValueError, match="needs vocab_size from its DataModule"):
        AssociativeRecallTask(net=NET)
    with pytest.raises(ValueError, match=r"seq_len=128 is longer than net.max_len=64"):
        AssociativeRecallTask(vocab_size=24, seq_len=128, net=NET)
    with pytest.raises(ValueError, match=r"'optimization' has no causal form.*associative recall"):
        AssociativeRecallTask(vocab_size=24, net=NET, attention={"name": "optimization"})
