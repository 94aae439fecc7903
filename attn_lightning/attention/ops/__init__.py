"""The kernels the backends compute with: no registry names, no ``Attention`` contract here.

A backend (``attention/<name>.py``) validates its options and calls these with tensors and plain
numbers; nothing here is selectable by name or subclasses ``Attention``. Masks keep the one
polarity: ``key_padding_mask`` is ``(B, S)`` bool, True = real key. Besides the kernels proper,
two small modules the backends compose live here rather than beside them, so that
``attention/`` lists backends only: the sketch maps of ``polysketch`` and the q/k normalisation
that ``polynomial`` and ``polysketch`` share.

* ``causal_product``: the chunked causal product ``Σ_{j≤i} (q_iᵀk_j) v_j``, hand-written backward.
* ``centred_product``: the normalised causal product in bf16 (bf16 GEMMs on centred values).
* ``chunk_tiles``: the tiles both causal products walk.
* ``linear_kernels``: feature-map attention, non-causal, causal (chunked) and one recurrent step.
* ``fla``: flash-linear-attention's fused kernel as the CUDA causal product of the feature-map
  backends (``implementation: auto | torch | fla``), imported on first use.
* ``fla_autotune``: how much first-call autotuning fla's chunk kernels do (``full``/``reduced``).
* ``dispatch``: which causal product runs (``implementation: auto | torch | fla | triton``).
* ``triton_causal`` (+ ``_kernels``, ``_grads``): our chunk-parallel causal product as fused Triton
  kernels (``implementation: triton``), forward and backward.
* ``causal_normaliser``: the adapter's float32 normaliser ``φ(q_i)ᵀΣ_{j≤i}φ(k_j)`` by chunks.
* ``power_exact``: exact normalised power / learned-polynomial attention by tiles.
* ``even_polynomial``: PolySketch's learned even polynomial as (L, S) scores, by those tiles.
* ``block_local``: PolySketch's mixed form, exact inside blocks and features between them.
* ``score_form``: the (L, S) score form of PolySketch and Taylor, and the cost model choosing it.
* ``lasso``: optimization attention's lasso codes by unrolled ADMM and their power weights.
* ``kv_cache``: the preallocated KV cache of the exact backends' ``step``.
* ``local_window``: sliding-window softmax by blocks (``softmax``'s ``window``).
* ``sketches``: the sketch maps s (random, learned) and ``symmetric_square`` of PolySketch.
* ``qk_norm``: the q/k normalisation shared by ``polynomial`` and ``polysketch``.
* ``rotary``: RoFormer's rotary turn of q and k (``net.positional: rotary``) or of features
  (``linear``'s ``rotary``).
"""
