"""Hungarian matcher and set criterion against naive float64 references from the formulas."""

from __future__ import annotations

import itertools

import pytest
import torch
import torch.nn.functional as F

from attn_lightning.models.matcher import HungarianMatcher, SetCriterion

C, N = 3, 5


def naive_giou(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """GIoU of two cxcywh boxes from the definition: IoU − (|hull| − |union|) / |hull|."""
    ax0, ay0, ax1, ay1 = a[0] - a[2] / 2, a[1] - a[3] / 2, a[0] + a[2] / 2, a[1] + a[3] / 2
    bx0, by0, bx1, by1 = b[0] - b[2] / 2, b[1] - b[3] / 2, b[0] + b[2] / 2, b[1] + b[3] / 2
    inter = (torch.minimum(ax1, bx1) - torch.maximum(ax0, bx0)).clamp(min=0) * (
        torch.minimum(ay1, by1) - torch.maximum(ay0, by0)
    ).clamp(min=0)
    union = a[2] * a[3] + b[2] * b[3] - inter
    hull = (torch.maximum(ax1, bx1) - torch.minimum(ax0, bx0)) * (
        torch.maximum(ay1, by1) - torch.minimum(ay0, by0)
    )
    return inter / union - (hull - union) / hull


def naive_cost(logits, boxes, target) -> torch.Tensor:
    """(N, M) matching cost −p(class) + 5·L1 − 2·GIoU, in float64, one pair at a time."""
    prob = logits.double().softmax(-1)
    cost = torch.zeros(len(boxes), len(target["labels"]), dtype=torch.float64)
    for i, j in itertools.product(range(len(boxes)), range(len(target["labels"]))):
        b, t = boxes[i].double(), target["boxes"][j].double()
        cost[i, j] = -prob[i, target["labels"][j]] + 5 * (b - t).abs().sum() - 2 * naive_giou(b, t)
    return cost


def random_boxes(n: int, generator: torch.Generator) -> torch.Tensor:
    centre = 0.25 + 0.5 * torch.rand(n, 2, generator=generator)
    size = 0.05 + 0.4 * torch.rand(n, 2, generator=generator)
    return torch.cat([centre, size], dim=1)


def make_batch(sizes, seed=0):
    g = torch.Generator().manual_seed(seed)
    b = len(sizes)
    outputs = {
        "pred_logits": torch.randn(b, N, C + 1, generator=g),
        "pred_boxes": random_boxes(b * N, g).view(b, N, 4),
    }
    targets = [
        {"labels": torch.randint(C, (m,), generator=g), "boxes": random_boxes(m, g)} for m in sizes
    ]
    return outputs, targets


def test_batched_assignment_equals_per_image():
    outputs, targets = make_batch([2, 0, 3, 1, 5])
    matcher = HungarianMatcher()
    batched = matcher(outputs, targets)
    for i, target in enumerate(targets):
        single = matcher({k: v[i : i + 1] for k, v in outputs.items()}, [target])[0]
        assert torch.equal(batched[i][0], single[0]) and torch.equal(batched[i][1], single[1])


def test_assignment_is_optimal_against_brute_force():
    outputs, targets = make_batch([1, 2, 3], seed=3)
    indices = HungarianMatcher()(outputs, targets)
    for i, target in enumerate(targets):
        cost = naive_cost(outputs["pred_logits"][i], outputs["pred_boxes"][i], target)
        m = len(target["labels"])
        best = min(
            sum(cost[p, j] for j, p in enumerate(perm))
            for perm in itertools.permutations(range(N), m)
        )
        rows, cols = indices[i]
        assert len(rows) == m and sorted(cols.tolist()) == list(range(m))
        assert float(cost[rows, cols].sum()) == pytest.approx(float(best), abs=1e-5)


def test_images_without_objects_get_empty_indices():
    outputs, targets = make_batch([0, 0])
    for rows, cols in HungarianMatcher()(outputs, targets):
        assert rows.numel() == cols.numel() == 0 and rows.dtype == torch.int64
    outputs, targets = make_batch([0, 2])
    (r0, _), (r1, c1) = HungarianMatcher()(outputs, targets)
    assert r0.numel() == 0 and len(r1) == len(c1) == 2


def test_all_zero_costs_are_rejected():
    with pytest.raises(ValueError, match="nonzero"):
        HungarianMatcher(cost_class=0, cost_bbox=0, cost_giou=0)


def test_criterion_matches_naive_formula():
    outputs, targets = make_batch([2, 0, 3], seed=5)
    logits = outputs["pred_logits"].double().requires_grad_()
    boxes = outputs["pred_boxes"].double().requires_grad_()
    criterion = SetCriterion(num_classes=C)
    total, parts = criterion({"pred_logits": logits, "pred_boxes": boxes}, targets)
    total.backward()
    grads = logits.grad.clone(), boxes.grad.clone()

    ref_logits = outputs["pred_logits"].double().requires_grad_()
    ref_boxes = outputs["pred_boxes"].double().requires_grad_()
    indices = HungarianMatcher()(outputs, targets)
    num_boxes = 5.0
    weight = torch.ones(C + 1, dtype=torch.float64)
    weight[-1] = 0.1
    ce_num = ce_den = l1 = giou = 0.0
    for i, (target, (rows, cols)) in enumerate(zip(targets, indices, strict=True)):
        classes = [C] * N
        for r, c in zip(rows.tolist(), cols.tolist(), strict=True):
            classes[r] = int(target["labels"][c])
            l1 = l1 + (ref_boxes[i, r] - target["boxes"][c].double()).abs().sum()
            giou = giou + 1 - naive_giou(ref_boxes[i, r], target["boxes"][c].double())
        for q in range(N):
            ce_num = ce_num - weight[classes[q]] * ref_logits[i, q].log_softmax(-1)[classes[q]]
            ce_den = ce_den + weight[classes[q]]
    ce = ce_num / ce_den
    ref = ce + 5 * l1 / num_boxes + 2 * giou / num_boxes
    ref.backward()
    # The criterion computes in float32 (safe under autocast); the reference in float64.
    close = {"rtol": 1e-5, "atol": 1e-6, "check_dtype": False}
    torch.testing.assert_close(total, ref.detach(), **close)
    torch.testing.assert_close(parts["ce"], ce.detach(), **close)
    torch.testing.assert_close(grads[0], ref_logits.grad, **close)
    torch.testing.assert_close(grads[1], ref_boxes.grad, **close)


def test_criterion_with_empty_targets_is_finite_and_gradient_safe():
    outputs, targets = make_batch([0, 0], seed=7)
    logits = outputs["pred_logits"].requires_grad_()
    boxes = outputs["pred_boxes"].requires_grad_()
    aux = [{"pred_logits": logits * 2, "pred_boxes": boxes}]
    total, parts = SetCriterion(num_classes=C)(
        {"pred_logits": logits, "pred_boxes": boxes, "aux_outputs": aux}, targets
    )
    total.backward()
    assert torch.isfinite(total) and float(parts["bbox"]) == float(parts["giou"]) == 0.0
    assert torch.isfinite(logits.grad).all() and logits.grad.abs().sum() > 0
    assert torch.equal(boxes.grad, torch.zeros_like(boxes))  # nothing to regress
    no_object = torch.full((2, N), C)
    expected = F.cross_entropy(logits.detach().transpose(1, 2), no_object)
    torch.testing.assert_close(parts["ce"], expected)


def test_aux_losses_add_one_term_per_decoder_layer():
    outputs, targets = make_batch([1, 2], seed=9)
    criterion = SetCriterion(num_classes=C)
    single, _ = criterion(outputs, targets)
    double, _ = criterion({**outputs, "aux_outputs": [dict(outputs)]}, targets)
    torch.testing.assert_close(double, 2 * single)


def test_bad_eos_coef_is_rejected():
    with pytest.raises(ValueError, match="eos_coef"):
        SetCriterion(num_classes=C, eos_coef=0.0)
