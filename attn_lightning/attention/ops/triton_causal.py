"""Our chunk-parallel causal product as fused Triton kernels: ``implementation: triton``.

The same algorithm as ``causal_product`` (chunk states at once, a prefix sum over chunks, every
chunk read out in parallel), in two kernels forward and two backward (three when φ is wider
than one 64-column tile, or for float32 inputs), so no
(B, H, N, C) score tensor or per-op pass over memory is made (kernels: ``triton_causal_kernels``,
``triton_causal_grads``)::

    1 states   S_c = Σ_{c'<c in its segment} φ(K_c')ᵀV_c', z too, and the segment's total,
               grid (segments, B·H, F·E tiles), float32, each state written once
    2 readout  out = (tril(Q_cK_cᵀ)V_c + Q_c S_c) / (offset + eps + rowsum tril(Q_cK_cᵀ) + Q_c z_c),
               S_c = s[c] + the totals of the segments before c's (summed in the program); the
               last chunk's program writes the final state (every segment's total)
    backward   R_c = Σ_{c'>c} Q_c'ᵀ(dO_c'/den) (states, reverse, with dDen = −Σ_e dO·out/den
               formed in the program from dO and out − m_c, and its centred form for grad_qk);
               dQ, dK (grid over F tiles) and dV (in grad_qk for one F tile, else its own kernel
               with a grid over E tiles), as in ``causal_product``,
               each adding the totals of the segments after its own to R

Segments: ``states`` walks SEG chunks per program, NS segments in parallel, NS chosen so the
programs fill about ``TARGET_PROGRAMS`` (``_segments``): the serial depth is SEG, not the chunk
count, and each state is written once, in float32 (the readout's rounding to the dot's dtype
happens after the segment offset is added). The NS totals' prefix is summed by each consumer
program from L2 (NS tiles at most) rather than by a kernel of its own: one launch and one pass
over the totals fewer per direction. No torch kernel runs between the launches: the
centring means come from ``states``' float32 sums of v (forward, MEANS), and ``readout`` writes
them for the backward.

Readout and backward run on values centred per chunk (m_c, the mean of the values before chunk
c; exact in value, as ``centred_product``): in bf16 the uncentred terms are of size z·|v̄| and
cancel, and their rounding would cost dq its precision (measured: docs/benchmarks.md).

Fused feature map (``elu_features``, ``linear``'s default φ = elu + 1): the kernels take raw q
and k and apply φ to each tile as they load it (float32, rounded once to the inputs' dtype, as
the unfused bf16 features), so no (B, H, N, F) feature tensor is written, read or saved; padded
keys come as -inf rows (φ = 0, φ' = 0). Backward applies ``φ'(x) = 1 (x > 0) or eˣ`` inside
``grad_qk`` to the float32 sums of dφ(q), dφ(k) before their one rounding to the inputs' dtype:
applying it outside on the kernel's feature-space gradients would round dφ to bf16 and then the
product again (and write and re-read two (B, H, N, F) tensors). The final state is over φ(k).

Contract (as the torch kernel's ``causal_linear_attention``): padded keys are zero rows of φ(k)
(the backend's job) and add nothing; the normaliser is float32 (offset + eps + intra-chunk part
+ φ(q)·z_prev); a query that sees no key gives 0; N needs no padding (a partial last chunk is
masked in the kernels); the final state ``(S, z)``, float32 ``(B, H, F, Dv)`` and ``(B, H, F)``,
is ``linear_attention_step``'s state after the N tokens (``return_state=True``).

Precision: bf16 and fp16 inputs run half ``tl.dot`` operands (tensor cores, ``wgmma`` on
Hopper) with float32 accumulation; the chunk states, their prefix sums, the normaliser and the
backward's dDen are float32, and a state is rounded to the inputs' dtype only as a dot operand (as
the torch kernel does; stored in bf16, dq's ``S − z m_cᵀ`` would cancel its rounded z·|m| part).
Where a rounded operand would cost the result its accuracy it goes in as
two (hi + lo, ``SPLIT``): dO/den in the suffix sums R, and R in dK's ``V' Rᵀ`` (the term that
cancels against ``R m_c`` for values with a mean). Numerator and normaliser use the same rounded
scores, so an output stays a weighted average of values. fp16's range bounds what a rounded
operand may hold: the centred state ``S' = Σ_{j<c} φ(k_j)(v_j − m_c)ᵀ`` grows with the prefix
(as √N for values spread about their running mean, up to N·|φ|·|v − m_c| for values that drift)
and past 65,504 becomes inf in fp16 (bf16 has float32's range). float32 inputs run ``tl.dot``
as 3xTF32 (``input_precision="tf32x3"``: hi + lo TF32 parts, three tensor-core products,
float32's accuracy, which the contract asks for; plain TF32 would err by ~2⁻¹¹, "ieee" compiles
to scalar FMAs that spill); it still spills on sm_90 (``lab/benchmarks/triton_static``): bf16 and
fp16 are the fast paths. float64 has no kernel: refused, as ``fla`` does.

Launch: q, k, v and dO are read in place with their strides (the model's ``(B, N, H, D)``
projections, transposed, are not copied) when their last stride is 1 and their width a multiple
of 16; otherwise they are copied into a buffer as wide as the next multiple of 16 (extra columns
masked: φ = 0), so every load is a vector load. N needs no padding (rows ≥ N are masked). N = 0
launches nothing (an empty output, the zero state). Launches run under ``torch.cuda.device`` of
the tensors (a ``cuda:1`` call runs on device 1 whatever the current device).

Autotuning: each compiled kernel is a ``triton.autotune`` over a few warps / stages / loop-tile
configs (``triton_causal_kernels.CONFIGS``, pruned of what spills on sm_90; readout has one),
keyed by the padded widths, an N bucket (``n_bucket``: ⌈log2 N⌉), the dtypes and the constexprs
that change the kernel (``KEYS``). The first launch per key times each config; the choice is
kept for the process (``Autotuner.cache``) and, with ``cache_results``, in Triton's cache dir
(``TRITON_CACHE_DIR``) for later processes. The grid's tiles (BF, BE here) and the chunk stay
the launcher's: the states' layout and the grid depend on them. Timing launches a kernel several
times: safe, as no kernel reads what it writes. Under the interpreter the default (first) config
runs, never timed.

Devices: CUDA tensors run the compiled kernels. CPU tensors run them through Triton's interpreter
when ``TRITON_INTERPRET=1`` (``triton.knobs.runtime.interpret``) is on — slow, for tests — and are
refused otherwise. ``auto`` never takes this kernel: it has not been timed on a GPU yet, see
``dispatch.AUTO_TAKES_FLA``; its measurements and history: docs/benchmarks.md.
"""

from __future__ import annotations

import contextlib

import torch
import triton
import triton.language as tl
from torch import Tensor

from attn_lightning.attention.base import State
from attn_lightning.attention.ops.triton_causal_kernels import kernels, n_bucket

DEFAULT_CHUNK = 64
MAX_TILE = 64  # F and E tiles: wider φ loops over tiles (registers bound the tile, not F)
TARGET_PROGRAMS = 264  # the states kernel's programs (two per SM of an H100) when N allows


def interpreter_on() -> bool:
    """Whether Triton's CPU interpreter is on (``TRITON_INTERPRET=1`` or the knob set)."""
    return bool(triton.knobs.runtime.interpret)


def check_runnable(v: Tensor, *, backend: str) -> None:
    """Refuse a call the Triton kernels cannot run, naming the value and what is allowed.

    Raises:
        ValueError: a float64 tensor, or a tensor neither on CUDA nor on the CPU under
            ``TRITON_INTERPRET=1``.
    """
    if v.dtype == torch.float64:
        raise ValueError(
            f"attention {backend!r}: implementation 'triton' has no float64 kernel; use "
            "implementation: auto or torch for float64"
        )
    if v.device.type == "cuda" or (v.device.type == "cpu" and interpreter_on()):
        return
    raise ValueError(
        f"attention {backend!r}: implementation 'triton' runs on CUDA tensors (or CPU tensors "
        f"under TRITON_INTERPRET=1, for tests), got a {v.device.type} tensor; use "
        "implementation: auto or torch"
    )


def _tile(width: int) -> int:
    """A power of two ≥ 16 (``tl.dot``'s minimum) covering ``width``, at most ``MAX_TILE``."""
    return min(max(16, triton.next_power_of_2(width)), MAX_TILE)


def _segments(nc: int, programs: int) -> tuple[int, int]:
    """``(NS, SEG)``: the NC chunks cut into NS segments of SEG, enough that ``NS · programs``
    (``programs``: B·H·tiles) fill about ``TARGET_PROGRAMS`` — the serial depth of ``_states`` is
    SEG chunks, its parallelism NS·B·H·tiles programs."""
    ns = max(1, min(nc, -(-TARGET_PROGRAMS // programs)))
    seg = -(-nc // ns)
    return -(-nc // seg), seg


def _device_guard(device: torch.device) -> contextlib.AbstractContextManager[object]:
    """The CUDA device of the tensors made current for the launches (a ``cuda:1`` tensor's
    kernels launch on device 1, whatever the current device); nothing off CUDA."""
    return torch.cuda.device(device) if device.type == "cuda" else contextlib.nullcontext()


def _aligned(x: Tensor, width: int, fill: float) -> Tensor:
    """``x`` as the kernels read it: in place when its last stride is 1 and its width a multiple of
    16 (every stride of the model's ``(B, N, H, D)`` views then is: vector loads), else copied
    into a ``width``-wide buffer whose extra columns hold ``fill``."""
    if x.shape[-1] == width and x.stride(-1) == 1:
        return x
    out = x.new_full((*x.shape[:-1], width), fill)
    out[..., : x.shape[-1]] = x
    return out


def _strided(x: Tensor) -> tuple[Tensor | int, ...]:
    """A ``(B, H, N, ·)`` tensor as a kernel takes it: itself, its batch, head and row strides."""
    if x.shape[2] * x.stride(2) >= 2**31:  # the kernels index a head's rows in int32
        raise ValueError(
            f"triton kernel: a head's rows span {x.shape[2] * x.stride(2)} elements (N = "
            f"{x.shape[2]}, row stride {x.stride(2)}); at most 2**31 - 1 are allowed"
        )
    return x, x.stride(0), x.stride(1), x.stride(2)


class _TritonProduct(torch.autograd.Function):
    """``(num / den, S_end, z_end)`` on ``(B, H, N, ·)`` inputs of one dtype; module docstring."""

    @staticmethod
    def forward(ctx, q: Tensor, k: Tensor, v: Tensor, shift: float, chunk: int, elu: bool):
        b, h, n, f0 = q.shape
        e0 = v.shape[-1]
        ctx.widths = (f0, e0)
        if n == 0:  # nothing to launch: an empty output, the zero state
            s0 = q.new_zeros(b, h, f0, e0, dtype=torch.float32)
            z0 = q.new_zeros(b, h, f0, dtype=torch.float32)
            ctx.mark_non_differentiable(s0, z0)
            return v.new_empty(b, h, 0, e0), s0, z0
        # Widths padded to 16 (masked loads: padded q, k columns are φ = 0 features, -inf raw)
        f, e = -(-f0 // 16) * 16, -(-e0 // 16) * 16
        q, k = (_aligned(x, f, float("-inf") if elu else 0.0) for x in (q, k))
        v = _aligned(v, e, 0.0)
        bh, nc = b * h, triton.cdiv(n, chunk)
        bf, be = _tile(f), _tile(e)
        nft, net = triton.cdiv(f, bf), triton.cdiv(e, be)
        sizes = {"C": chunk, "BF": bf, "BE": be}  # the launcher's tiles (``CONFIGS``)
        nb = n_bucket(n)  # the autotuner's N bucket (``KEYS``)
        interpreted = q.device.type != "cuda"
        kn = kernels(interpreted)
        dots = _dots(q.dtype, interpreted) | {"ELU1": elu}  # ELU1: φ = elu + 1 on load
        split = {"SPLIT": q.dtype != torch.float32}
        f32 = torch.float32
        ns, seg = _segments(nc, bh * nft * net)
        s, z = q.new_empty(bh, nc, f, e, dtype=f32), q.new_empty(bh, nc, f, dtype=f32)
        t, tz = q.new_empty(bh, ns, f, e, dtype=f32), q.new_empty(bh, ns, f, dtype=f32)
        tp, tzp = torch.empty_like(t), torch.empty_like(tz)  # their prefix, for the backward
        vsum, tv = q.new_empty(bh, nc, e, dtype=f32), q.new_empty(bh, ns, e, dtype=f32)
        s_end, z_end = q.new_empty(b, h, f, e, dtype=f32), q.new_empty(b, h, f, dtype=f32)
        out, den = v.new_empty(b, h, n, e), q.new_empty(bh, n, dtype=f32)
        mean = q.new_empty(bh, nc, e, dtype=f32)  # the centring means, written by readout
        keep = v.dtype != torch.float32  # backward's out − m_c in the inputs' dtype (``_readout``)
        resid = v.new_empty(bh, n, e) if keep else out
        qs, ks, vs = _strided(q), _strided(k), _strided(v)
        with _device_guard(q.device):
            kn.states[(ns, bh, nft * net)](*ks, *vs, h, s, s, s, s, s, z, vsum, t, tz, tv, n, f, e,
                                           nc, ns, net, seg, nb, SCALED=False, REVERSE=False,
                                           MEANS=True, CENTRED=False, **split, **dots,
                                           **sizes)  # fmt: skip
            kn.readout[(nc, bh, net)](*qs, *ks, *vs, h, mean, s, z, t, tz, vsum, tv, tp, tzp,
                                      s_end, z_end, out, resid,
                                      den, shift, n, f, e, nc, ns, nft, seg, nb, KEEP=keep,
                                      **dots, **sizes)  # fmt: skip
        ctx.save_for_backward(q, k, v, mean, s, z, tp, tzp, resid, den)
        ctx.meta = (nc, ns, seg, nb, nft, net, sizes, dots | split, keep)
        ctx.mark_non_differentiable(s_end, z_end)
        ctx.set_materialize_grads(False)  # no zero gradients made for the states
        return out[..., :e0], s_end[..., :f0, :e0], z_end[..., :f0]

    @staticmethod
    def backward(ctx, grad_out: Tensor, *_state_grads: Tensor):
        f0, e0 = ctx.widths
        if grad_out is None:  # only the final state was used: it has no gradient
            return None, None, None, None, None, None
        if grad_out.shape[2] == 0:
            b, h = grad_out.shape[:2]
            empty = [grad_out.new_empty(b, h, 0, w) for w in (f0, f0, e0)]
            return *empty, None, None, None
        q, k, v, mean, s, z, t, tz, out, den = ctx.saved_tensors
        nc, ns, seg, nb, nft, net, sizes, dots, keep = ctx.meta
        b, h, n, f = q.shape
        bh, e = b * h, v.shape[-1]
        kn = kernels(q.device.type != "cuda")
        grad = _aligned(grad_out.to(v.dtype), e, 0.0)
        gden_c = torch.empty_like(den)  # dDen', written by states for grad_qk
        r, rz = torch.empty_like(s), torch.empty_like(z)  # R_c, r_c: sums over later chunks
        tr, trz = torch.empty_like(t), torch.empty_like(tz)
        dq, dk = q.new_empty(bh, n, f), k.new_empty(bh, n, f)
        dv = v.new_empty(bh, n, e)
        qs, ks, vs, gs = _strided(q), _strided(k), _strided(v), _strided(grad)
        unsplit = {key: val for key, val in dots.items() if key != "SPLIT"}
        with _device_guard(q.device):
            # dDen and dDen' come from dO, out (or out − m_c: CENTRED) and the means in states
            kn.states[(ns, bh, nft * net)](*qs, *gs, h, den, out, mean, gden_c, r, rz, rz, tr, trz,
                                           trz, n, f, e, nc, ns, net, seg, nb, SCALED=True,
                                           REVERSE=True, MEANS=False, CENTRED=keep, **dots,
                                           **sizes)  # fmt: skip
            # One F tile (F ≤ 64): grad_qk forms dV too, from the tiles it holds; wider φ needs
            # every F tile's scores for dV, so grad_v does it. float32 (3xTF32) keeps grad_v:
            # merged, grad_qk spills 1288 B per thread at D 64 (448 B apart)
            merge = nft == 1 and q.dtype != torch.float32
            kn.grad_qk[(nc, bh, nft)](*qs, *ks, *vs, *gs, h, mean, den, gden_c, s, z, t, tz, r,
                                      rz, tr, trz, dq, dk, dv, n, f, e, nc, ns, seg, nb,
                                      MERGE_V=merge, **dots, C=sizes["C"],
                                      BF=sizes["BF"])  # fmt: skip
            if not merge:
                kn.grad_v[(nc, bh, net)](*qs, *ks, *gs, h, den, r, tr, dv, n, f, e, nc, ns, seg,
                                         nb, **unsplit, C=sizes["C"], BE=sizes["BE"])  # fmt: skip
        grads = (x.view(b, h, n, -1)[..., :w] for x, w in ((dq, f0), (dk, f0), (dv, e0)))
        return *grads, None, None, None


def _dots(dtype: torch.dtype, interpreted: bool) -> dict[str, object]:
    """``tl.dot``'s operand type and precision for inputs of ``dtype``: bf16 and fp16 operands
    (tensor cores, float32 accumulation); float32 as 3xTF32 (``"tf32x3"``: each operand split in
    a TF32 hi and lo, three tensor-core products, float32's accuracy; ``"ieee"`` compiles to
    scalar FMAs that spill 10–17 KB per thread). The interpreter's ``tl.dot``
    multiplies half bit patterns as integers (Triton 3.8), so there the (half-rounded) operands
    go in as float32."""
    half = {torch.bfloat16: tl.bfloat16, torch.float16: tl.float16}.get(dtype)
    dot = tl.float32 if interpreted or half is None else half
    return {"PREC": "tf32x3" if half is None else "tf32", "DOT": dot}


def triton_causal_linear_attention(
    phi_q: Tensor,
    phi_k: Tensor,
    v: Tensor,
    *,
    offset: float,
    eps: float,
    chunk_size: int = DEFAULT_CHUNK,
    return_state: bool = False,
    elu_features: bool = False,
) -> Tensor | tuple[Tensor, State]:
    """``linear_kernels.causal_linear_attention`` with the fused Triton kernels.

    Args:
        phi_q, phi_k: ``(B, H, N, F)`` features (padded keys already zero rows), or with
            ``elu_features`` the raw q and k (padded keys -inf rows: φ(-inf) = 0).
        v: ``(B, H, N, Dv)``; the output has its dtype.
        offset, eps: the normaliser is ``offset + eps + φ(q_i)ᵀΣ_{j≤i}φ(k_j)``.
        chunk_size: tokens per chunk, a power of two ≥ 16 (``tl.dot``'s minimum tile).
        return_state: also return the final ``(S, z)`` (float32, ``linear_attention_step``'s).
        elu_features: the kernels apply φ(x) = elu(x) + 1 to q and k as they load them (and its
            derivative to dq, dk): ``linear``'s default map without a feature tensor in memory.

    Raises:
        ValueError: ``chunk_size`` not a power of two ≥ 16, a float64 tensor, or a device the
            kernels cannot run on (``check_runnable``).
    """
    valid = isinstance(chunk_size, int) and not isinstance(chunk_size, bool)
    if not valid or chunk_size < 16 or chunk_size & (chunk_size - 1):
        raise ValueError(f"chunk_size must be a power of two >= 16, got {chunk_size!r}")
    check_runnable(v, backend="triton kernel")
    dtype = v.dtype if v.dtype in (torch.bfloat16, torch.float16) else torch.float32
    with torch.autocast(device_type=v.device.type, enabled=False):
        q, k, vv = phi_q.to(dtype), phi_k.to(dtype), v.to(dtype)
        shift = float(offset + eps)
        out, s_end, z_end = _TritonProduct.apply(q, k, vv, shift, chunk_size, elu_features)
    out = out.to(v.dtype)
    return (out, (s_end, z_end)) if return_state else out
