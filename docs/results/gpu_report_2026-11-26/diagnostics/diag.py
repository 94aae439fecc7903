"""Device diagnostics after the first gpu-report: bf16 error sizes, the performer val NaN, fla op speed."""
import math, os, sys, time, traceback
import torch
sys.path.insert(0, os.getcwd())
DEV = os.environ.get("DIAG_DEVICE", "cuda")
KERNELS = ("fla", "torch") if DEV == "cuda" else ("torch",)
section = sys.argv[1]

def p(*a):
    print(*a, flush=True)

if section == "accuracy":
    import tests.attention.test_fla_cuda as T
    T.CUDA = torch.device(DEV)
    for name, opts in T.BACKENDS:
        for dtype in (torch.bfloat16,):
            for case in ("causal", "causal-padded"):
                causal, padded = T.CASES[case]
                row = []
                for kernel in KERNELS:
                    try:
                        attn = T.build(name, opts, kernel)
                        qkv = T.inputs(dtype)
                        mask = T.padding() if padded else None
                        out = attn(*qkv, causal=causal, key_padding_mask=mask)
                        want, leaves = T.reference(attn, qkv, causal=causal, mask=mask)
                        g = [x for x in T.grads(out, qkv)]
                        gw = T.grads(want, leaves)
                        errs = [T.rel(out, want)] + [T.rel(a, b) if b is not None else float("nan") for a, b in zip(g, gw)]
                        fin = all(torch.isfinite(t).all().item() for t in [out, *[x for x in g if x is not None]])
                        row.append(f"{kernel}: out {errs[0]:.2e} dq {errs[1]:.2e} dk {errs[2]:.2e} dv {errs[3]:.2e} finite={fin}")
                    except Exception as e:
                        row.append(f"{kernel}: ERROR {type(e).__name__}: {str(e)[:150]}")
                p(f"{name}{opts} {str(dtype)[6:]} {case} | " + " | ".join(row))

elif section == "nan":
    import pytest
    from attn_lightning.attention.ops import fla
    mode = sys.argv[2]
    if mode == "torch":
        fla.choose = lambda *a, **k: "torch"
    orig = fla.fla_causal_linear_attention
    count = [0]
    def wrapped(phi_q, phi_k, v, **kw):
        out = orig(phi_q, phi_k, v, **kw)
        count[0] += 1
        if count[0] <= 6:
            p(f"  fla call {count[0]}: v {tuple(v.shape)} {v.dtype} |phi_q|max {phi_q.abs().max().item():.3e} |phi_k|max {phi_k.abs().max().item():.3e} "
              f"phi_k>0 min {phi_k[phi_k > 0].min().item() if (phi_k > 0).any() else 0:.3e} out finite {torch.isfinite(out).all().item()} grad={out.requires_grad}")
            for nm, t in (("phi_q", phi_q), ("phi_k", phi_k), ("v", v)):
                if t.requires_grad:
                    t.register_hook(lambda g, nm=nm, c=count[0]: p(f"  call {c} grad {nm}: finite {torch.isfinite(g).all().item()} max {g.abs().max().item():.3e}") or None)
        return out
    fla.fla_causal_linear_attention = wrapped
    rc = pytest.main(["tests/attention/test_fla_cuda.py", "-q", "-p", "no:cacheprovider", "--tb=line",
                      "-k", "training_step and reversal-performer", "-W", "ignore"])
    p(f"nan mode={mode}: pytest rc {rc}")

elif section == "speed":
    import torch.nn.functional as F
    from attn_lightning.attention import build_attention
    from attn_lightning.attention.ops import fla
    op = fla.chunk_op()
    def bench(fn, reps=10, warm=3):
        for _ in range(warm):
            fn()
        torch.cuda.synchronize()
        ts = []
        for _ in range(reps):
            a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            a.record(); fn(); b.record(); torch.cuda.synchronize(); ts.append(a.elapsed_time(b))
        ts.sort(); return ts[len(ts) // 2]
    D = 64
    for H, tokens in ((4, 65536), (32, 8192)):
        for N in (1024, 4096, 16384, 65536):
            B = max(1, tokens // N)
            if B * N != tokens: continue
            g = torch.Generator(device="cuda").manual_seed(0)
            q, k, v = (torch.randn(B, H, N, D, device="cuda", dtype=torch.bfloat16, generator=g).requires_grad_() for _ in range(3))
            do = torch.randn_like(v)
            res = {}
            def sdpa():
                F.scaled_dot_product_attention(q, k, v, is_causal=True).backward(do)
            def fla_op():
                o, _ = op(F.elu(q.transpose(1, 2)) + 1, F.elu(k.transpose(1, 2)) + 1, v.transpose(1, 2), scale=1.0, normalize=True)
                o.backward(do.transpose(1, 2))
            def fla_raw():  # no feature map, no normaliser: the kernel alone
                o, _ = op(q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2), scale=1.0, normalize=False)
                o.backward(do.transpose(1, 2))
            attn_f = build_attention("linear", head_dim=D, implementation="fla").cuda()
            attn_t = build_attention("linear", head_dim=D, implementation="torch").cuda()
            def ours_f():
                attn_f(q, k, v, causal=True).backward(do)
            def ours_t():
                attn_t(q, k, v, causal=True).backward(do)
            for nm, fn in (("sdpa", sdpa), ("fla_raw", fla_raw), ("fla_op", fla_op), ("ours_fla", ours_f), ("ours_torch", ours_t)):
                try:
                    res[nm] = bench(fn)
                except Exception as e:
                    res[nm] = f"ERR {type(e).__name__} {str(e)[:80]}"
            p(f"speed fwd+bwd bf16 causal B={B} H={H} N={N} D={D}: " + " ".join(f"{k}={v:.2f}ms" if isinstance(v, float) else f"{k}={v}" for k, v in res.items()))
