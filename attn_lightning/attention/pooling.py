"""Local average pooling, PoolFormer's token mixer: the parameter-free, similarity-free local mixer.

PoolFormer ("MetaFormer Is Actually What You Need for Vision", Yu et al., CVPR 2022) replaces
attention by ``out = AvgPool_{k×k}(x) − x`` over the h×w feature map (stride 1, padding k//2,
``count_include_pad=False``). The reviewers of optimization-based attention asked for pooling
baselines; this is the local one (``mean`` is the global one):

    out_i = mean_{j ∈ W(i), j real} v_j − v_i        (the "− v_i" only with ``subtract_input``)

with W(i) the k×k window around token i on the grid (a window of k tokens on the sequence when
no grid is given). Cost O(S·k²·Dv), no parameters, q and k unused.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor

from attn_lightning.attention.base import Attention, Layout, Mask, accumulation_dtype


class PoolAttention(Attention):
    """Average of the values in a local window around each token, minus the token's own value.

    Where the window lies: the backend sees only ``(B, H, L, D)``, so the model owning the
    tokens passes their map per call, ``forward(..., grid=(h, w))`` (DETR passes this batch's
    feature-map size: images, hence grids, may change size between batches, so a build-time
    option could not hold it). With a grid the window is k×k on the h×w map and L must equal
    h·w; with ``grid=None`` the window is k consecutive tokens of the sequence, which is only
    meaningful where the sequence order is a 1-D neighbourhood (text, a row of pixels), not for
    DETR's object queries (which DETR therefore refuses to pool).

    ``subtract_input`` (default True, as PoolFormer): PoolFormer's block is ``x + mixer(norm x)``,
    so subtracting the input leaves the residual path to carry x and the mixer to carry only how
    the neighbourhood differs from the token; without it the mixer also re-adds (a smoothed) x.

    Self-attention only (L == S: a token is mixed with its own neighbours), no causal form and no
    ``step``. ``key_padding_mask``: padded tokens leave the window (like the padding at the grid's
    border, ``count_include_pad=False``); a window with no real token averages to 0. Use it with
    ``projections`` ``"no_qk"`` or ``False``: q and k are ignored, so Q/K projections would get
    no gradient (and DDP would complain about unused parameters).

    Args:
        head_dim: D (unused by the mixing, checked by the contract).
        pool_size: k, an odd window size >= 1 (odd, so the window is centred on the token).
        subtract_input: return ``pool(v) − v`` (PoolFormer) instead of ``pool(v)``.
    """

    name = "pool"
    supports_causal = False
    supports_recurrence = False
    positional = True  # a token's window is set by its index
    supports_cross_attention = False  # L != S has no meaning for a window over the tokens

    def __init__(self, *, head_dim: int, pool_size: int = 3, subtract_input: bool = True) -> None:
        super().__init__(head_dim=head_dim)
        if isinstance(pool_size, bool) or not isinstance(pool_size, int) or pool_size < 1:
            raise ValueError(f"pool_size must be an odd int >= 1, got {pool_size!r}")
        if pool_size % 2 == 0:
            raise ValueError(
                f"pool_size must be odd (a window centred on its token), got {pool_size}"
            )
        self.pool_size = pool_size
        self.subtract_input = bool(subtract_input)

    def _attend(
        self, q: Tensor, k: Tensor, v: Tensor, *, causal: bool, key_padding_mask: Mask, grid: Layout
    ) -> Tensor:
        b, h, _, _ = q.shape
        s, dv = v.shape[2], v.shape[3]  # L == S: the forward checked it
        shape = (s,) if grid is None else grid  # the forward checked rows·cols == S
        dtype = accumulation_dtype(v.dtype)
        # (B, H, S, Dv) -> (B, H·Dv, *grid): every head×channel is an image (or a 1-D signal).
        x = v.to(dtype).permute(0, 1, 3, 2).reshape(b, h * dv, *shape)
        pooled = self._pool(x, include_pad=key_padding_mask is not None)
        if key_padding_mask is not None:
            # Padded values are zeroed by ``forward``, so the window sum counts real tokens only;
            # dividing by the pooled mask turns the k·k mean into the mean over real tokens.
            real = key_padding_mask.to(dtype).view(b, 1, *shape)  # (B, 1, *shape)
            share = self._pool(real, include_pad=True)
            pooled = torch.where(share > 0, pooled / share.clamp_min(1e-12), 0.0)
        out = pooled.reshape(b, h, dv, s).transpose(-1, -2)  # (B, H, S, Dv)
        if self.subtract_input:
            out = out - v.to(dtype)
        return out.to(v.dtype)

    def _pool(self, x: Tensor, *, include_pad: bool) -> Tensor:
        """Stride-1 average over the centred window; ``include_pad`` divides by k (k²) always."""
        size, pad = self.pool_size, self.pool_size // 2
        if x.dim() == 3:
            return F.avg_pool1d(x, size, stride=1, padding=pad, count_include_pad=include_pad)
        return F.avg_pool2d(x, size, stride=1, padding=pad, count_include_pad=include_pad)

    def extra_repr(self) -> str:
        return (
            f"head_dim={self.head_dim}, pool_size={self.pool_size}, "
            f"subtract_input={self.subtract_input}"
        )
