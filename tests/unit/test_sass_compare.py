"""benchmarks/sass_compare.py: the cuobjdump listing parser and the per-kernel verdicts (the builds themselves need
nvcc and cuobjdump and are not run here)."""

from benchmarks import sass_compare as sc

LISTING = """
	code for sm_90a
		Function : _ZN47_GLOBAL__N__d634b00e_14_gemm_stream_cu_139f7eaa18gemm_stream_kernelEv
	.headerflags	@"EF_CUDA_TEXMODE_UNIFIED EF_CUDA_64BIT_ADDRESS EF_CUDA_SM90 EF_CUDA_VIRTUAL_SM(EF_CUDA_SM90)"
        /*0000*/                   LDC R1, c[0x0][0x28] ;                      /* 0x00000a00ff017b82 */
                                                                               /* 0x000fe40000000800 */
        /*0010*/              @!PT LDS RZ, [RZ] ;                              /* 0x00000000ff00798c */
        /*0020*/                   EXIT ;                                      /* 0x000000000000794d */
		Function : _Z13plain_kernelPf
        /*0000*/                   IADD3 R2,   R2, 0x1, RZ ;                   /* 0x0000000102027810 */
        /*0010*/                   EXIT ;                                      /* 0x000000000000794d */
"""


def test_parse_names_anonymous_namespaces_by_file_and_drops_addresses():
    kernels = sc.parse_sass(LISTING)
    assert list(kernels) == ["_ZN(gemm_stream.cu)18gemm_stream_kernelEv", "_Z13plain_kernelPf"]
    assert kernels["_ZN(gemm_stream.cu)18gemm_stream_kernelEv"] == ["LDC R1, c[0x0][0x28]", "@!PT LDS RZ, [RZ]", "EXIT"]
    assert kernels["_Z13plain_kernelPf"] == ["IADD3 R2, R2, 0x1, RZ", "EXIT"]


def test_same_kernel_built_in_another_folder_compares_identical():
    other = LISTING.replace("d634b00e", "0badf00d").replace("139f7eaa", "2ce11a55")
    rows, same = sc.compare(sc.parse_sass(LISTING), sc.parse_sass(other))
    assert same and [r[3] for r in rows] == ["identical", "identical"]


def test_one_changed_instruction_and_a_missing_kernel_are_reported():
    changed = LISTING.replace("IADD3 R2,   R2, 0x1, RZ", "IADD3 R2, R2, 0x2, RZ")
    rows, same = sc.compare(sc.parse_sass(LISTING), sc.parse_sass(changed))
    assert not same and dict((r[0], r[3]) for r in rows)["_Z13plain_kernelPf"] == "DIFFERENT"
    head = sc.parse_sass(LISTING)
    del head["_Z13plain_kernelPf"]
    rows, same = sc.compare(sc.parse_sass(LISTING), head)
    assert not same and ("_Z13plain_kernelPf", 2, None, "only in base") in rows
