"""The lasso kernel on its own: ADMM codes against an independent lasso, the pinned
coefficients, both solvers, and the power weights."""

from __future__ import annotations

import pytest
import torch
from sklearn.linear_model import Lasso

from attn_lightning.attention.ops.lasso import (
    admm_codes,
    nonzero_coefficients,
    power_weights,
    ridge_factor,
)

F64 = torch.float64


def problem(l_q=3, s=5, d=4, seed=0):
    g = torch.Generator().manual_seed(seed)
    return torch.randn(1, 1, l_q, d, generator=g, dtype=F64), torch.randn(
        1, 1, s, d, generator=g, dtype=F64
    )


@pytest.mark.parametrize("solver", ["woodbury", "svd"])
def test_many_admm_steps_reach_the_lasso_minimiser(solver):
    q, atoms = problem()
    lam = 0.05
    z = admm_codes(q, atoms, keep=None, lam=lam, rho=1.0, iterations=3000, solver=solver)
    for i in range(q.shape[2]):
        # sklearn minimises ‖y − Xw‖²/(2n) + α‖w‖₁: α = λ/n for ½‖q − Dm c‖² + λ‖c‖₁.
        d = q.shape[-1]
        ref = Lasso(alpha=lam / d, fit_intercept=False, tol=1e-12, max_iter=100_000)
        ref.fit(atoms[0, 0].T.numpy(), q[0, 0, i].numpy())
        torch.testing.assert_close(z[0, 0, i], torch.from_numpy(ref.coef_), atol=1e-5, rtol=0)


def test_ridge_factor_solvers_agree():
    _, atoms = problem(s=6, seed=1)
    torch.testing.assert_close(
        ridge_factor(atoms, rho=0.5, solver="woodbury"), ridge_factor(atoms, rho=0.5, solver="svd")
    )


def test_kept_coefficients_only_are_nonzero():
    q, atoms = problem(l_q=4, s=4, seed=2)
    mask = torch.tensor([[True, True, False, True]])
    assert (
        nonzero_coefficients(q, atoms, tokens=4, key_padding_mask=None, exclude_self=False) is None
    )
    keep = nonzero_coefficients(q, atoms, tokens=4, key_padding_mask=mask, exclude_self=True)
    assert keep is not None and keep.shape == (1, 1, 4, 4)
    assert not keep[..., 2].any() and not keep[0, 0].diagonal().any()
    z = admm_codes(q, atoms, keep=keep, lam=0.0, rho=1.0, iterations=5, solver="woodbury")
    assert (z[~keep.expand_as(z)] == 0).all() and (z[keep.expand_as(z)] != 0).all()


def test_power_weights_sum_to_one_and_a_zero_code_gives_zero_weights():
    z = torch.tensor([[0.0, 2.0, -1.0], [0.0, 0.0, 0.0]], dtype=F64)
    w = power_weights(z, power=2.0, signed=False)
    torch.testing.assert_close(w, torch.tensor([[0.0, 0.8, 0.2], [0.0, 0.0, 0.0]], dtype=F64))
    signed = power_weights(z, power=2.0, signed=True)
    torch.testing.assert_close(signed[0], torch.tensor([0.0, 0.8, -0.2], dtype=F64))
