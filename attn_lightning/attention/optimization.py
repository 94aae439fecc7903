"""Optimization-based attention: each query is a sparse combination of the values (lasso by ADMM).

"Optimizing Attention" (Ackermann et al., ICLR 2025 submission). The paper's body was not
available; this is **our reading** of its text and reviews, the reconstructed formulation of
``docs/methods.md``. By default it is the method as described; every departure is an option, off
by default, listed with its reason in ``OptimizationAttention``'s docstring:

    c*(q) = argmin_c ½‖q − Dm c‖² + λ‖c‖₁,   w_j = |z_j|⁵ / Σ_l |z_l|⁵,   out = Σ_j w_j v_j

where the dictionary ``Dm = [v_1 … v_S | r_1 … r_R]`` (D×(S+R)) holds the values as columns (the
reviews: "each query is a sparse linear combination of the values"), plus R random tokens in
training (the paper's regulariser), and ``z`` is the sparse iterate after K unrolled steps of
scaled ADMM, run for all queries at once (``ops/lasso.py``: M = (DmᵀDm + ρI)⁻¹ applied by
Woodbury through one D×D factorisation per batch×head). Cost O(S·D² + K·L·S·D) time, O(K·L·S)
memory for autograd (every iterate is kept); no trainable parameters. The paper removes
the Q and K projections of a layer (``MultiHeadAttention(projections="no_qk")``), so what the
method saves is 2·E² parameters per layer, not FLOPs.
"""

from __future__ import annotations

from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor

from attn_lightning.attention.base import (
    Attention,
    Layout,
    Mask,
    accumulation_dtype,
    check_choice,
    check_int,
)
from attn_lightning.attention.ops.lasso import (
    SOLVERS,
    admm_codes,
    nonzero_coefficients,
    power_weights,
)

DICTIONARIES = ("values", "keys")
# The paper's count is not known (its body was not available). 8 columns are a sizeable share of
# the small dictionaries DETR has here (S = 10 object queries, S = 36 image tokens at 48×48), so
# every code competes with noise, yet few enough that the real tokens still explain most of q.
DEFAULT_RANDOM_TOKENS = 8
KEYS_SHARE = 0.9  # ``keys90``: how many keys carry this share of a query's attention weight
_MASK64 = (1 << 64) - 1


def _splitmix64(x: int) -> int:
    """One SplitMix64 step: a fixed 64-bit mix, so nearby counters give unrelated seeds."""
    x = (x + 0x9E3779B97F4A7C15) & _MASK64
    x = ((x ^ (x >> 30)) * 0xBF58476D1CE4E5B9) & _MASK64
    x = ((x ^ (x >> 27)) * 0x94D049BB133111EB) & _MASK64
    return x ^ (x >> 31)


def random_token_seed(salt: int, draws: int) -> int:
    """The CPU generator seed of draw number ``draws`` of the instance with ``salt`` (63 bits)."""
    return _splitmix64((salt & _MASK64) ^ _splitmix64(draws)) >> 1


def keys_to_carry(weights: Tensor, share: float = KEYS_SHARE) -> Tensor:
    """Per row, the fewest entries whose |w| sum to ``share`` of the row's total (0 for a 0 row).

    ``weights``: ``(..., S)`` -> ``(...)`` int64. A relative slack of 1e-5 keeps float rounding of
    the running sum (0.1 + … + 0.1 nine times is 0.8999…) from counting one entry too many.
    """
    mag = weights.abs()
    total = mag.sum(-1, keepdim=True)
    running = mag.sort(dim=-1, descending=True).values.cumsum(-1)
    short = running < share * total * (1 - 1e-5)  # (..., S): the top n do not carry it yet
    return torch.where(total[..., 0] > 0, short.sum(-1) + 1, 0)


class OptimizationAttention(Attention):
    """Attention weights from a lasso code of each query over the values (unrolled ADMM).

    The paper's form, by default: dictionary = the values, R = 8 random tokens in training,
    power 5, q and the dictionary used as they come (no normalisation, the query's own token
    allowed). Departures, each off by default, and why one would turn it on:

    - ``dictionary="keys"``: Dm = [k_1 … k_S] (with positions, in DETR): the other reading of the
      method, to compare against. In self-attention q_i is then itself a column (q = k = x + pos
      in DETR's self-attention sites without Q/K projections), so the trivial code ∝ e_i, which
      copies v_i, is a solution: pair it with ``exclude_self``.
    - ``exclude_self`` (our addition; self-attention, L == S): the prox step also zeroes z_ii.
      Projection onto {z_i = 0} is the exact ADMM prox for the constrained lasso, so a query
      cannot explain itself by its own token. Random tokens do not rule the trivial code out
      (with q_i a column, c ∝ e_i still meets the optimality conditions unless a random column
      is more aligned with q_i than q_i itself); this does.
    - ``normalize`` (our addition): L2-normalise q and the dictionary columns first, so λ has a
      scale-free meaning (a code coefficient is a fraction of a unit query; without it λ is in
      the units of ‖q‖ and ‖v‖, which LayerNorm and the projections set) and the columns are
      comparable atoms. The output still mixes the raw values.
    - ``random_tokens=0``: turns the paper's regulariser off (eval never draws any anyway).
    - ``signed`` (our variant): weights ``sign(z_j)|z_j|^p / Σ|z_l|^p``, which may be negative.
    - ``solver="svd"``: a thin SVD of Dm instead of Cholesky; the same result in float64, but in
      float32 with unnormalised columns (‖v‖ ≈ 3) outputs drift ~1e-4 from float64 where
      Cholesky's drift ~1e-6 (singular vectors are less accurate than a Cholesky solve, and the
      Woodbury form magnifies the error by s²/ρ). For comparisons of the solve, not training.

    Random tokens: R Gaussian columns join the dictionary in training mode only, at the real
    columns' RMS norm (unit norm with ``normalize``); their coefficients help explain q but carry
    no value and are dropped before the weights. They are reproducible: draw n of an instance
    comes from a CPU generator seeded by ``(salt, n)``, where the persistent buffer ``salt`` is
    drawn from the global torch RNG at construction (equal on every DDP rank under
    ``seed_everything``; always drawn, so turning R on or off does not shift the initialisation of
    later layers) and the persistent counter ``draws`` advances once per training forward. Both
    are in the checkpoint, so a resumed run continues the same sequence. They are read from the
    device once (a sync) and then counted on the host beside the buffer, read again only when the
    buffers were moved or written (a load, a DDP broadcast); ``torch.linalg.cholesky``'s error
    check (``solver="woodbury"``) still syncs on CUDA.
    Activation checkpointing would redraw on recompute: not supported with R > 0.

    Masking: a padded token becomes a zero dictionary column and its coefficient is pinned to 0.
    A zero column is decoupled in DmᵀDm + ρI, so the other coefficients are those of the lasso
    over the real tokens alone, i.e. padding equals dropping the tokens. Causal attention is not
    supported (``supports_causal = False``): M couples every column, so the code of query i
    depends on tokens j > i even if z_j is pinned to 0; a causal form needs one lasso per prefix.

    ``diagnostics()``: ``keys90``, the mean over queries (all-zero rows left out) of how many
    keys carry 90 % of the query's attention weight, and ``keys90_fraction``, that count over the
    number of real keys, from the last training forward (empty before the first one).

    Args:
        head_dim: D.
        dictionary: ``"values"`` (the paper; needs Dv == D) or ``"keys"``.
        iterations: K, the number of unrolled ADMM steps (>= 1).
        lam: λ >= 0, the l1 weight (in the units of q; relative to unit norm with ``normalize``).
        rho: ρ > 0, the ADMM penalty (also the ridge that makes M well defined).
        power: p > 0 of the weights ``|z|^p`` (5 in the paper, in place of softmax's exp).
        signed: see above.
        random_tokens: R >= 0 random dictionary columns added in training mode.
        exclude_self: pin z_ii to 0 (needs L == S).
        solver: ``"woodbury"`` (Cholesky of ρI + DmDmᵀ) or ``"svd"`` (thin SVD of Dm).
        normalize: see above.
    """

    name = "optimization"
    supports_causal = False
    supports_recurrence = False
    supports_any_value_dim = True  # set per instance: False with the values dictionary
    salt: Tensor
    draws: Tensor

    def __init__(
        self,
        *,
        head_dim: int,
        dictionary: str = "values",
        iterations: int = 10,
        lam: float = 0.1,
        rho: float = 1.0,
        power: float = 5.0,
        signed: bool = False,
        random_tokens: int = DEFAULT_RANDOM_TOKENS,
        exclude_self: bool = False,
        solver: str = "woodbury",
        normalize: bool = False,
    ) -> None:
        super().__init__(head_dim=head_dim)
        self.dictionary = check_choice("dictionary", dictionary, DICTIONARIES, backend=self.name)
        self.iterations = check_int("iterations", iterations, minimum=1)
        self.random_tokens = check_int("random_tokens", random_tokens, minimum=0)
        self.solver = check_choice("solver", solver, SOLVERS, backend=self.name)
        if not lam >= 0:
            raise ValueError(f"lam must be >= 0, got {lam!r}")
        if not rho > 0:
            raise ValueError(f"rho must be > 0, got {rho!r}")
        if not power > 0:
            raise ValueError(f"power must be > 0, got {power!r}")
        self.supports_any_value_dim = dictionary == "keys"
        self.lam = float(lam)
        self.rho = float(rho)
        self.power = float(power)
        self.signed = bool(signed)
        self.exclude_self = bool(exclude_self)
        self.normalize = bool(normalize)
        # On the CPU generator explicitly, so the salt does not depend on the default device.
        salt = torch.randint(0, 2**62, (), dtype=torch.int64, device="cpu")
        self.register_buffer("salt", salt)
        self.register_buffer("draws", torch.zeros((), dtype=torch.int64))
        self._sparsity: Tensor | None = None  # (keys90, keys90_fraction) of the last train step
        # (salt, draws) on the host and the buffers' identity when they held them: no device read
        self._host_draws: tuple[tuple[int, ...], int, int] | None = None

    # ------------------------------------------------------------------ public helpers
    def sparse_codes(
        self, q: Tensor, k: Tensor, v: Tensor, *, key_padding_mask: Tensor | None = None
    ) -> Tensor:
        """The sparse ADMM iterate Z after K steps over the real dictionary tokens, as in eval.

        No random tokens are drawn (and ``draws`` does not advance), whatever the mode.

        Args:
            q: ``(B, H, L, D)``; k: ``(B, H, S, D)``; v: ``(B, H, S, Dv)``;
            key_padding_mask: ``(B, S)``, True = real.

        Returns:
            ``(B, H, L, S)`` in the compute dtype (float32 at least); row i is the code of q_i
            over the values (or keys), exactly 0 on padded tokens (and on the diagonal with
            ``exclude_self``).
        """
        atoms = self._dictionary(q, k, v)
        dtype = accumulation_dtype(torch.promote_types(q.dtype, atoms.dtype))
        with torch.autocast(device_type=q.device.type, enabled=False):
            return self._codes(q.to(dtype), atoms.to(dtype), key_padding_mask, draw=False)

    def attention_weights(
        self, q: Tensor, k: Tensor, v: Tensor, *, key_padding_mask: Tensor | None = None
    ) -> Tensor:
        """The weights ``w`` of ``out = w @ v``, ``(B, H, L, S)``, as in eval (no random tokens).

        The values dictionary ties the value dim to the head dim, so the weights cannot be read
        off by attending over identity values as for other backends; this computes them.
        """
        return self._weights(self.sparse_codes(q, k, v, key_padding_mask=key_padding_mask))

    def diagnostics(self) -> dict[str, float]:
        """``keys90`` and ``keys90_fraction`` of the last training forward (see the class doc)."""
        if self._sparsity is None:
            return {}
        keys90, fraction = self._sparsity.tolist()
        return {"keys90": keys90, "keys90_fraction": fraction}

    # ------------------------------------------------------------------ contract
    def _attend(
        self, q: Tensor, k: Tensor, v: Tensor, *, causal: bool, key_padding_mask: Mask, grid: Layout
    ) -> Tensor:
        atoms = self._dictionary(q, k, v)
        dtype = accumulation_dtype(torch.promote_types(torch.result_type(q, k), v.dtype))
        draw = self.training and self.random_tokens > 0
        with torch.autocast(device_type=q.device.type, enabled=False):
            z = self._codes(q.to(dtype), atoms.to(dtype), key_padding_mask, draw=draw)
            w = self._weights(z)  # (B, H, L, S)
            if self.training:
                self._record_sparsity(w, key_padding_mask)
            out = w @ v.to(dtype)  # (B, H, L, Dv)
        return out.to(v.dtype)

    # ------------------------------------------------------------------ the method
    def _dictionary(self, q: Tensor, k: Tensor, v: Tensor) -> Tensor:
        """The tokens whose combination approximates q: v or k, ``(B, H, S, D)``."""
        if self.dictionary == "keys":
            return k
        if v.shape[-1] != q.shape[-1]:
            raise ValueError(
                f"attention {self.name!r} with dictionary='values' approximates each query by a "
                f"combination of the values, so the value dim must equal the query dim: got "
                f"D={q.shape[-1]}, Dv={v.shape[-1]}; use dictionary='keys' or equal sizes"
            )
        return v

    def _codes(
        self, q: Tensor, atoms: Tensor, key_padding_mask: Tensor | None, *, draw: bool
    ) -> Tensor:
        l_q, s = q.shape[2], atoms.shape[2]
        if self.exclude_self and l_q != s:
            raise ValueError(
                f"exclude_self=True needs self-attention with L == S, got L={l_q}, S={s}"
            )
        if self.normalize:
            q, atoms = F.normalize(q, dim=-1), F.normalize(atoms, dim=-1)
        real = None if key_padding_mask is None else key_padding_mask[:, None, :, None]  # (B,1,S,1)
        if real is not None:
            # where, not multiply: a padded token's values (even inf/NaN) must not reach the solve.
            atoms = torch.where(real, atoms, torch.zeros((), dtype=atoms.dtype, device=q.device))
        if draw:
            atoms = torch.cat([atoms, self._random_atoms(atoms, key_padding_mask)], dim=2)
        # atoms: (B, H, S', D), the dictionary's columns as rows, S' = S (+ R in training)

        keep = nonzero_coefficients(
            q, atoms, tokens=s, key_padding_mask=key_padding_mask, exclude_self=self.exclude_self
        )
        options: dict[str, Any] = {"lam": self.lam, "rho": self.rho, "iterations": self.iterations}
        try:
            z = admm_codes(q, atoms, keep=keep, solver=self.solver, **options)
        except torch.linalg.LinAlgError as err:
            if bool(torch.isfinite(atoms).all()):
                raise
            # The bare message ("not positive-definite") hides the cause: say it.
            raise ValueError(
                f"attention {self.name!r}: the {self.solver} solve failed because the dictionary "
                f"({self.dictionary}) holds NaN or inf at an unmasked position ({err}); turn on "
                f"attn_lightning.attention.set_check_finite(True) to find the first one"
            ) from err
        return z[..., :s]  # random-token coefficients carry no value

    def _random_atoms(self, atoms: Tensor, key_padding_mask: Tensor | None) -> Tensor:
        """The next R Gaussian columns per batch×head, ``(B, H, R, D)``, at the real columns' RMS
        norm (unit norm if normalised); advances ``draws``."""
        b, h, s, d = atoms.shape
        seed = random_token_seed(*self._next_draw())
        generator = torch.Generator(device="cpu").manual_seed(seed)
        # Drawn on the CPU in float32 whatever the device and compute dtype: the same tokens on
        # every rank, device and precision.
        noise = torch.randn(b, h, self.random_tokens, d, generator=generator)
        noise = noise.to(device=atoms.device, dtype=atoms.dtype)
        if self.normalize:
            return F.normalize(noise, dim=-1)
        with torch.no_grad():  # the noise's scale is not something to learn through
            # Padded columns are already zero rows, so only the real ones add to the sum.
            count = (
                atoms.new_full((b,), s)
                if key_padding_mask is None
                else key_padding_mask.sum(-1).to(atoms.dtype)
            )
            sq = atoms.square().sum((-1, -2), keepdim=True)  # (B, H, 1, 1)
            rms = (sq / count.clamp_min(1).view(b, 1, 1, 1)).sqrt()
        return noise * rms / d**0.5

    def _next_draw(self) -> tuple[int, int]:
        """``(salt, draws)`` of this draw, then ``draws`` advanced: read from the buffers only when
        they changed since the last draw (a sync), else from the host copy."""

        def identity() -> tuple[int, ...]:
            return tuple(x for t in (self.salt, self.draws) for x in (t.data_ptr(), t._version))

        if self._host_draws is not None and self._host_draws[0] == identity():
            salt, draws = self._host_draws[1:]
        else:
            salt, draws = int(self.salt), int(self.draws)
        self.draws.add_(1)
        self._host_draws = (identity(), salt, draws + 1)
        return salt, draws

    def _weights(self, z: Tensor) -> Tensor:
        """``|z_j|^p / Σ_l |z_l|^p`` (signed: times sign(z_j)); an all-zero row gives 0 weights."""
        return power_weights(z, power=self.power, signed=self.signed)

    @torch.no_grad()
    def _record_sparsity(self, w: Tensor, key_padding_mask: Tensor | None) -> None:
        """Store ``(keys90, keys90_fraction)`` of ``w: (B, H, L, S)`` as a detached tensor."""
        n = keys_to_carry(w).to(w.dtype)  # (B, H, L)
        s = w.shape[-1]
        real = (
            torch.full((w.shape[0],), s, dtype=w.dtype, device=w.device)
            if key_padding_mask is None
            else key_padding_mask.sum(-1).to(w.dtype)
        )
        fraction = n / real.clamp_min(1).view(-1, 1, 1)
        alive = w.ne(0).any(-1)  # rows with some weight: an all-zero code carries none
        rows = alive.sum().clamp_min(1).to(w.dtype)
        self._sparsity = torch.stack([n[alive].sum() / rows, fraction[alive].sum() / rows])

    def extra_repr(self) -> str:
        return (
            f"head_dim={self.head_dim}, dictionary={self.dictionary!r}, "
            f"iterations={self.iterations}, lam={self.lam:g}, rho={self.rho:g}, "
            f"power={self.power:g}, signed={self.signed}, random_tokens={self.random_tokens}, "
            f"exclude_self={self.exclude_self}, solver={self.solver!r}, normalize={self.normalize}"
        )
