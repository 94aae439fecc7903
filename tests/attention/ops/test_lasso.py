"""The lasso kernel on its own: converged ADMM codes against the optimality conditions, FISTA and
sklearn, both solvers, the pinned coefficients, and the power weights."""

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


def problem(b=2, h=2, l_q=4, s=12, d=8, seed=5):
    g = torch.Generator().manual_seed(seed)
    q = torch.randn(b, h, l_q, d, generator=g, dtype=F64)
    return q, torch.randn(b, h, s, d, generator=g, dtype=F64)


def fista_lasso(q, atoms, lam, iterations=20_000):
    """argmin_c ½‖q − Dm c‖² + λ‖c‖₁ by plain FISTA in float64, written independently of the
    backend: q (..., L, D), atoms (..., S, D) rows = the dictionary's columns -> (..., L, S)."""
    q, dm = q.detach().to(F64), atoms.detach().to(F64).transpose(-1, -2)  # (..., D, S)
    step = 1 / torch.linalg.matrix_norm(dm, ord=2)[..., None, None] ** 2  # 1 / Lipschitz
    c = y = torch.zeros(*q.shape[:-1], dm.shape[-1], dtype=F64)
    t = 1.0
    for _ in range(iterations):
        grad = (y @ dm.transpose(-1, -2) - q) @ dm  # rows of Dmᵀ(Dm y − q)
        x = y - step * grad
        c_next = x.sign() * (x.abs() - step * lam).clamp_min(0)
        t_next = (1 + (1 + 4 * t * t) ** 0.5) / 2
        y = c_next + (t - 1) / t_next * (c_next - c)
        c, t = c_next, t_next
    return c


@pytest.mark.parametrize("solver", ["woodbury", "svd"])
@pytest.mark.parametrize("lam", [0.5, 0.05])
def test_converged_codes_are_the_lasso_minimiser(lam, solver):
    q, atoms = problem()
    z = admm_codes(q, atoms, keep=None, lam=lam, rho=1.0, iterations=3000, solver=solver)
    support = z != 0
    assert support.any() and (~support).any()  # a genuinely sparse, nonempty solution
    # KKT: |Dmᵀ(q − Dm z)| ≤ λ everywhere, = λ·sign(z) on the support.
    grad = (q - z @ atoms) @ atoms.transpose(-1, -2)
    assert (grad.abs() <= lam + 1e-8).all()
    torch.testing.assert_close(grad[support], lam * z[support].sign(), rtol=0, atol=1e-8)
    # An independent float64 solver agrees on every code.
    torch.testing.assert_close(z, fista_lasso(q, atoms, lam), rtol=0, atol=1e-6)
    # sklearn minimises (1/(2n))‖y − Xw‖² + α‖w‖₁ with n = D samples: α = λ / D.
    d = q.shape[-1]
    for b, h, i in [(0, 0, 0), (1, 1, 3), (0, 1, 2)]:
        lasso = Lasso(alpha=lam / d, fit_intercept=False, tol=1e-14, max_iter=200_000)
        lasso.fit(atoms[b, h].T.numpy(), q[b, h, i].numpy())
        torch.testing.assert_close(z[b, h, i], torch.from_numpy(lasso.coef_), rtol=0, atol=1e-6)


def test_ridge_factor_solvers_agree():
    _, atoms = problem(b=1, h=1, s=6, d=4, seed=1)
    torch.testing.assert_close(
        ridge_factor(atoms, rho=0.5, solver="woodbury"), ridge_factor(atoms, rho=0.5, solver="svd")
    )


def test_kept_coefficients_only_are_nonzero():
    q, atoms = problem(b=1, h=1, l_q=4, s=4, d=4, seed=2)
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
