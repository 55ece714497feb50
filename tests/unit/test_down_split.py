"""How many K batches the down projection gets (pure Python: no library, no GPU): every slice of K must be a whole
number of 8 bf16 columns (16 bytes) for cuBLASLt's strided batches, else fewer batches, else none."""

import pytest

from startlux_native.cuda_backend import DOWN_SPLITS, CudaBackend


@pytest.mark.parametrize("inter, splits", [(9216, DOWN_SPLITS), (24, 3), (256, 2), (16, 2), (8, 0), (12, 0), (40, 0)])
def test_split_count(inter, splits):
    assert CudaBackend.split_count(inter) == splits
    if splits:
        assert inter % splits == 0 and (inter // splits) % 8 == 0
