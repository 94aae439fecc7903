"""Decoding: recurrent step == prefix recompute, and the model's step == its causal forward."""

from __future__ import annotations

import pytest
import torch

from attn_lightning.attention import available_attentions
from attn_lightning.models import SequenceTransformer, categorical, generate, greedy
from attn_lightning.models.specs import TransformerSpec

V, P, N = 7, 4, 9
BACKENDS = [
    ("softmax", {}),
    ("linear", {}),
    ("performer", {"num_features": 16}),
    ("polysketch", {"sketch_size": 4}),
    ("polynomial", {}),
]


def cases():
    return [
        pytest.param(name, opts, id=name + "".join(f"-{v}" for v in opts.values()))
        for name, opts in BACKENDS
        if name in available_attentions()
    ]


def make_model(name, options, positional="sinusoidal"):
    torch.manual_seed(0)
    spec = TransformerSpec(d_model=16, num_heads=2, num_layers=2, d_ff=32, positional=positional)
    model = SequenceTransformer(spec, vocab_size=V, max_len=32, attention={"name": name, **options})
    return model.double().eval()


@pytest.mark.parametrize(("name", "options"), cases())
def test_greedy_step_equals_prefix_recompute(name, options):
    model = make_model(name, options)
    assert model.supports_recurrence
    prompt = torch.randint(V, (3, P), generator=torch.Generator().manual_seed(1))
    by_step = generate(model, prompt, N, method="step")
    by_recompute = generate(model, prompt, N, method="recompute")
    assert by_step.shape == (3, N)
    assert torch.equal(by_step, by_recompute)
    assert torch.equal(generate(model, prompt, N), by_step)  # auto picks step


@pytest.mark.parametrize("positional", ["sinusoidal", "learned", "rotary"])
@pytest.mark.parametrize(("name", "options"), cases())
def test_model_step_logits_equal_causal_forward(name, options, positional):
    model = make_model(name, options, positional)
    tokens = torch.randint(V, (2, N), generator=torch.Generator().manual_seed(2))
    full = model(tokens, causal=True)  # (B, N, V)
    state, steps = None, []
    for t in range(N):
        logits, state = model.step(tokens[:, t], state)
        steps.append(logits)
    torch.testing.assert_close(torch.stack(steps, dim=1), full)
    assert state[0] == N


class NoRecurrence(torch.nn.Module):
    """Hides ``step`` to stand in for a causal backend without a recurrent form."""

    supports_recurrence = False

    def __init__(self, model):
        super().__init__()
        self.model = model

    def forward(self, tokens, *, causal):
        return self.model(tokens, causal=causal)


def test_auto_falls_back_to_recompute_and_step_is_refused():
    model = make_model("softmax", {})
    wrapped = NoRecurrence(model)
    prompt = torch.randint(V, (2, P), generator=torch.Generator().manual_seed(3))
    assert torch.equal(generate(wrapped, prompt, N), generate(model, prompt, N, method="step"))
    with pytest.raises(ValueError, match="needs a model whose backends all support recurrence"):
        generate(wrapped, prompt, N, method="step")


def test_samplers():
    model = make_model("linear", {})
    prompt = torch.randint(V, (4, P), generator=torch.Generator().manual_seed(4))
    top1 = categorical(top_k=1, generator=torch.Generator().manual_seed(0))
    assert torch.equal(generate(model, prompt, N, sampler=top1), generate(model, prompt, N))
    draws = [
        generate(model, prompt, N, sampler=categorical(generator=torch.Generator().manual_seed(7)))
        for _ in range(2)
    ]
    assert torch.equal(draws[0], draws[1])  # seeded sampling is reproducible
    assert generate(model, prompt, 0).shape == (4, 0)
    logits = torch.tensor([[0.0, 3.0, 1.0]])
    assert greedy(logits).tolist() == [1]


def test_generate_errors():
    model = make_model("linear", {})
    with pytest.raises(ValueError, match="unknown decoding method 'beam'"):
        generate(model, torch.zeros(1, 1, dtype=torch.long), 2, method="beam")
    with pytest.raises(ValueError, match="P >= 1"):
        generate(model, torch.zeros(1, 0, dtype=torch.long), 2)
    with pytest.raises(ValueError, match="temperature must be > 0"):
        categorical(temperature=0.0)
