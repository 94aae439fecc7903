"""The kernels the backends compute with: no registry names, no ``Attention`` contract here.

A backend (``attention/<name>.py``) turns its options into calls of these; these know nothing
of options, masks' polarity conventions beyond ``(B, S)`` True = real, or the registry.

* ``causal_product``: the chunked causal product ``Σ_{j≤i} (q_iᵀk_j) v_j``, hand-written backward.
* ``linear_kernels``: feature-map attention, non-causal, causal (chunked) and one recurrent step.
* ``power_exact``: exact normalised power / learned-polynomial attention by tiles.
* ``block_local``: PolySketch's mixed form, exact inside blocks and features between them.
* ``kv_cache``: the preallocated KV cache of the exact backends' ``step``.
* ``sketches``: the sketch maps s (random, learned) and ``symmetric_square`` of PolySketch.
* ``qk_norm``: the q/k normalisation shared by ``polynomial`` and ``polysketch``.
"""
