"""The CUDA backend's padding ladder (pure Python: no library, no GPU)."""

from startlux_native.cuda_backend import PAD_LADDER, ladder_lengths, padded_length


def test_ladder_is_increasing_and_fine_where_prompts_are():
    assert list(PAD_LADDER) == sorted(set(PAD_LADDER))
    assert all(b - a <= 16 for a, b in zip(PAD_LADDER, PAD_LADDER[1:], strict=False) if b <= 512)
    # relative padding above 512 stays under 1/8 (the step never exceeds an eighth of the length it pads to)
    assert all((b - a) / b <= 1 / 8 for a, b in zip(PAD_LADDER, PAD_LADDER[1:], strict=False) if a >= 512)


def test_padded_length_covers_and_never_shrinks():
    cap = 32768
    for T in list(range(1, 1200)) + [2047, 2048, 2049, 4097, 8191, 8192, 8193, 20000, 32768]:
        L = padded_length(T, cap)
        assert T <= L <= cap, (T, L)
        assert L in PAD_LADDER or L % 1024 == 0 or L == cap
    assert padded_length(147, cap) == 160  # the Public231 median prompt pads by 13 rows, not 45
    assert padded_length(891, cap) == 896
    assert padded_length(5000, 4096) == 4096  # never above the cap (the backend splits larger calls)


def test_ladder_lengths_are_exactly_the_padded_lengths():
    for cap in (1, 16, 100, 512, 8192, 9000, 32768):
        want = sorted({padded_length(T, cap) for T in range(1, cap + 1)})
        assert ladder_lengths(cap) == want, cap
    assert ladder_lengths(32768)[-25:] == list(range(8192, 32769, 1024))
