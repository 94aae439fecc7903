"""SequenceTransformer's tied head: one table for embedding and head, in training, in a state
dict and in decoding; refused where outputs are not the input tokens (and by the tasks)."""

from __future__ import annotations

import pytest
import torch

from attn_lightning.models.sequence import SequenceTransformer
from attn_lightning.models.specs import SequenceSpec
from attn_lightning.tasks import AssociativeRecallTask, SequenceReversalTask

SPEC = SequenceSpec(d_model=16, num_heads=2, num_layers=2, d_ff=0, tie_embeddings=True)


def test_the_head_is_the_embedding_table():
    net = SequenceTransformer(
        SPEC, vocab_size=11, max_len=8, attention={"name": "linear"}, tie_embeddings=True
    )
    assert net.head.weight is net.embed.weight and net.head.bias is None
    tokens = torch.randint(11, (3, 8))
    hidden = net.encoder(net.positional(net.embed(tokens)), causal=True)
    torch.testing.assert_close(net(tokens, causal=True), hidden @ net.embed.weight.T)
    net(tokens, causal=True).sum().backward()  # one gradient: the embedding's and the head's
    assert net.embed.weight.grad is not None and net.head.weight.grad is net.embed.weight.grad
    ids = {id(p) for p in net.parameters()}
    assert len(ids) == len(list(net.parameters()))  # counted once: the optimiser steps it once


def test_a_state_dict_loads_into_a_tied_model_and_decoding_matches():
    source = SequenceTransformer(
        SPEC, vocab_size=11, max_len=8, attention={"name": "linear"}, tie_embeddings=True
    )
    target = SequenceTransformer(
        SPEC, vocab_size=11, max_len=8, attention={"name": "linear"}, tie_embeddings=True
    )
    target.load_state_dict(source.state_dict())
    assert target.head.weight is target.embed.weight
    torch.testing.assert_close(target.embed.weight, source.embed.weight)
    tokens = torch.randint(11, (2, 5))
    target.eval()
    full, state = target(tokens, causal=True), None
    for t in range(5):
        logits, state = target.step(tokens[:, t], state)
        torch.testing.assert_close(logits, full[:, t], atol=1e-5, rtol=1e-4)


def test_tying_needs_as_many_outputs_as_tokens():
    with pytest.raises(ValueError, match="got 10 outputs and vocab_size=11"):
        SequenceTransformer(
            SPEC, vocab_size=11, num_outputs=10, max_len=8, attention={"name": "softmax"},
            tie_embeddings=True,
        )  # fmt: skip
    with pytest.raises(ValueError, match="tie_embeddings needs as many outputs"):
        SequenceReversalTask(net=SPEC, num_symbols=10, attention={"name": "softmax"})
    task = AssociativeRecallTask(net=SPEC, vocab_size=32, attention={"name": "softmax"})
    assert task.net.head.weight is task.net.embed.weight


def test_gpt2_init_draws_every_weight_at_0_02_and_residual_outputs_smaller():
    torch.manual_seed(0)
    spec = SequenceSpec(d_model=64, num_heads=2, num_layers=2, d_ff=128, init="gpt2")
    net = SequenceTransformer(
        spec, vocab_size=512, max_len=64, attention={"name": "linear"}, init="gpt2"
    )
    block = net.encoder.layers[0]
    ends = [block.attn.out_proj.weight, block.mlp[-1].weight]
    for weight in (
        net.embed.weight,
        net.head.weight,
        block.attn.q_proj.weight,
        block.mlp[0].weight,
    ):
        assert abs(weight.std().item() - 0.02) < 0.002
    for weight in ends:  # 0.02 / sqrt(2 · 2 layers)
        assert abs(weight.std().item() - 0.01) < 0.001
    assert all(float(b.abs().max()) == 0 for b in (block.attn.q_proj.bias, net.head.bias))
    assert float(block.norm1.weight.min()) == 1.0  # norms keep theirs
    default = SequenceTransformer(spec, vocab_size=512, max_len=64, attention={"name": "linear"})
    assert (
        default.embed.weight.std() > 0.5
    )  # PyTorch's N(0, 1) embedding: the option is what moved it


def test_init_is_checked_by_name():
    with pytest.raises(ValueError, match=r"net.init must be one of pytorch, gpt2, got 'xavier'"):
        SequenceSpec(init="xavier")
    with pytest.raises(ValueError, match=r"init must be one of pytorch, gpt2, got 'xavier'"):
        SequenceTransformer(
            SPEC, vocab_size=11, max_len=8, attention={"name": "softmax"}, init="xavier"
        )
    task = AssociativeRecallTask(
        net=SequenceSpec(d_model=16, num_heads=2, d_ff=0, init="gpt2", tie_embeddings=True),
        vocab_size=32,
        attention={"name": "softmax"},
    )
    assert abs(task.net.embed.weight.std().item() - 0.02) < 0.005


@pytest.mark.parametrize("embed_dropout", [None, 0.0, 0.5])
def test_embed_dropout_drops_the_embeddings_only(embed_dropout):
    spec = SequenceSpec(d_model=16, num_heads=2, d_ff=32, dropout=0.2, embed_dropout=embed_dropout)
    task = AssociativeRecallTask(net=spec, vocab_size=32, attention={"name": "softmax"})
    modules = [m for m in task.net.modules() if isinstance(m, torch.nn.Dropout)]
    embedding = task.net.dropout
    assert embedding.p == (0.2 if embed_dropout is None else embed_dropout)
    assert all(m.p == 0.2 for m in modules if m is not embedding)  # residual branches, MLP
    # In training the embeddings reaching the first block are dropped at rate p, scaled by 1/(1-p).
    tokens = torch.randint(32, (64, 16))
    seen = []
    task.net.encoder.layers[0].register_forward_pre_hook(lambda _, args: seen.append(args[0]))
    task.net.train()(tokens, causal=True)
    clean = task.net.positional(task.net.embed(tokens))
    kept = seen[0] != 0
    torch.testing.assert_close(seen[0][kept], clean[kept] / (1 - embedding.p))
    assert abs(kept.double().mean().item() - (1 - embedding.p)) < 0.03


def test_a_bad_embed_dropout_is_named():
    with pytest.raises(ValueError, match=r"net.embed_dropout must be in \[0, 1\), got 1.0"):
        SequenceSpec(embed_dropout=1.0)
