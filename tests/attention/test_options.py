"""The option checks every backend constructor runs: one wording per mistake, bools refused."""

from __future__ import annotations

import pytest

from attn_lightning.attention.options import check_choice, check_eps, check_int


def test_check_choice_names_the_value_the_backend_and_the_choices():
    assert check_choice("kernel", "relu", ("relu", "elu"), backend="linear") == "relu"
    with pytest.raises(
        ValueError, match=r"^unknown kernel 'gelu' for attention 'linear'; allowed: relu, elu$"
    ):
        check_choice("kernel", "gelu", ("relu", "elu"), backend="linear")
    with pytest.raises(ValueError, match="unknown kernel 1 "):
        check_choice("kernel", 1, ("relu",), backend="linear")


@pytest.mark.parametrize("bad", [0, -1, True, 2.0, "3", None])
def test_check_int_refuses_what_is_not_an_int_at_least_the_minimum(bad):
    with pytest.raises(
        ValueError, match=rf"^block must be an int >= 1 \(tokens per block\), got {bad!r}$"
    ):
        check_int("block", bad, minimum=1, what="tokens per block")


def test_check_int_and_check_eps_return_the_value():
    assert check_int("local_block", 0, minimum=0) == 0
    assert check_eps(0) == 0.0 and isinstance(check_eps(0), float)
    for bad in (-1e-6, True, "0", float("nan")):
        with pytest.raises(ValueError, match="eps must be >= 0"):
            check_eps(bad)
