"""The CUDA backend's padding ladders (pure Python: no library, no GPU)."""

import pytest

from startlux_native.cuda_backend import COARSE_LADDER, FINE_LADDER, PAD_LADDER, ladder_lengths, padded_length

LADDERS = pytest.mark.parametrize("ladder", [FINE_LADDER, COARSE_LADDER], ids=["fine", "coarse"])


@LADDERS
def test_ladder_is_increasing_and_fine_where_prompts_are(ladder):
    assert list(ladder) == sorted(set(ladder))
    assert all(b - a <= 16 for a, b in zip(ladder, ladder[1:], strict=False) if b <= 512)
    # relative padding above 512 stays under 1/8 (the step never exceeds an eighth of the length it pads to)
    assert all((b - a) / b <= 1 / 8 for a, b in zip(ladder, ladder[1:], strict=False) if a >= 512)


def test_fine_ladder_is_the_coarse_one_with_64_row_steps_up_to_4096():
    assert PAD_LADDER is FINE_LADDER
    assert set(COARSE_LADDER) <= set(FINE_LADDER)
    assert all(b - a == 64 for a, b in zip(FINE_LADDER, FINE_LADDER[1:], strict=False) if 512 <= a < 4096)
    assert [m for m in FINE_LADDER if m > 4096] == [m for m in COARSE_LADDER if m > 4096]
    assert len(FINE_LADDER) == 96 and len(COARSE_LADDER) == 64  # the graphs captured at start-up
    # a Public231 p95 prompt (2,641 tokens): 2,816 rows on the coarse ladder, 2,688 on the fine one
    assert padded_length(2641, 32768, COARSE_LADDER) == 2816 and padded_length(2641, 32768) == 2688


@LADDERS
def test_padded_length_covers_and_never_shrinks(ladder):
    cap = 32768
    for T in list(range(1, 1200)) + [2047, 2048, 2049, 2641, 4095, 4097, 8191, 8192, 8193, 20000, 32768]:
        L = padded_length(T, cap, ladder)
        assert T <= L <= cap, (T, L)
        assert L in ladder or L % 1024 == 0 or L == cap
        assert L <= padded_length(T, cap, COARSE_LADDER)  # the fine ladder never pads more
    assert padded_length(147, cap, ladder) == 160  # the Public231 median prompt pads by 13 rows, not 45
    assert padded_length(891, cap, ladder) == 896
    assert padded_length(5000, 4096, ladder) == 4096  # never above the cap (the backend splits larger calls)


@LADDERS
def test_ladder_lengths_are_exactly_the_padded_lengths(ladder):
    for cap in (1, 16, 100, 512, 3000, 8192, 9000, 32768):
        want = sorted({padded_length(T, cap, ladder) for T in range(1, cap + 1)})
        assert ladder_lengths(cap, ladder) == want, cap
    assert ladder_lengths(32768, ladder)[-25:] == list(range(8192, 32769, 1024))
