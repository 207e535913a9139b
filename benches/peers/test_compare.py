"""Tests of compare.py's matching and of the GPU targets it checks (no bench runs, no PyTorch):

    python3 -m unittest discover -s benches/peers
"""

import unittest

from compare import cuda_targets, side_by_side

KEYS = ("op", "dtype", "shape")


def line(op: str, shape: str, value: float, **extra: float) -> dict:
    return {"op": op, "dtype": "bf16" if op == "gemm" else "f32", "shape": shape, "value": value} | extra


def by_key(*lines: dict) -> dict:
    grouped: dict = {}
    for l in lines:
        grouped.setdefault(tuple(l[k] for k in KEYS), []).append(l)
    return grouped


GEMM = "8192x8192x8192"


class SideBySide(unittest.TestCase):
    def test_medians_and_ratio_of_a_case_both_sides_ran(self):
        ours = by_key(line("gemm", GEMM, 500), line("gemm", GEMM, 700), line("gemm", GEMM, 600))
        theirs = by_key(line("gemm", GEMM, 800), line("gemm", GEMM, 700), line("gemm", GEMM, 750))
        [record] = side_by_side({"headroom": ours, "pytorch": theirs}, KEYS, ("value",))
        self.assertEqual(record["value_headroom"], 600)
        self.assertEqual(record["value_pytorch"], 750)
        self.assertEqual(record["value_ratio"], 0.8)

    def test_a_case_only_one_side_ran_has_no_ratio(self):
        ours = by_key(line("gemm", GEMM, 600), line("gelu_backward", "16", 3.0))
        theirs = by_key(line("gemm", GEMM, 750), line("softmax", "4x4", 2.0))
        records = side_by_side({"headroom": ours, "pytorch": theirs}, KEYS, ("value",))
        self.assertEqual([r["op"] for r in records], ["gemm", "gelu_backward", "softmax"])
        self.assertEqual((records[1]["value_pytorch"], records[1]["value_ratio"]), (None, None))
        self.assertEqual((records[2]["value_headroom"], records[2]["value_ratio"]), (None, None))


def targets(gemm_ours: float, of_copy: float, speedup: float, gemm_shape: str = GEMM) -> dict:
    ours = by_key(
        line("gemm", gemm_shape, gemm_ours),
        line("copy", "268435456", 3000.0),
        line("exp", "268435456", 2500.0, of_copy=0.9),
        line("softmax", "65536x4096", 2400.0, of_copy=of_copy),
        line("alloc_free", "8 sizes", 90.0, speedup=speedup),
    )
    theirs = by_key(line("gemm", gemm_shape, 750.0))
    records = side_by_side({"headroom": ours, "pytorch": theirs}, KEYS, ("value",))
    return {check["target"]: check for check in cuda_targets(ours, records)}


class Targets(unittest.TestCase):
    def test_figures_at_the_targets_meet_them(self):
        checks = targets(gemm_ours=600.0, of_copy=0.7, speedup=100.0)
        self.assertEqual(len(checks), 4)
        self.assertTrue(all(c["met"] for c in checks.values()), checks)

    def test_each_figure_below_its_target_misses_it(self):
        checks = targets(gemm_ours=599.0, of_copy=0.69, speedup=99.0)
        missed = sorted(t for t, c in checks.items() if not c["met"])
        self.assertEqual(
            missed,
            [
                "alloc_free 8 sizes / cuMemAlloc+cuMemFree",
                "gemm bf16 8192x8192x8192 / torch.matmul",
                "softmax f32 65536x4096 / copy bandwidth",
            ],
        )
        self.assertEqual(checks["gemm bf16 8192x8192x8192 / torch.matmul"]["value"], 0.799)

    def test_a_missing_gemm_at_8192_misses_its_target(self):
        checks = targets(gemm_ours=900.0, of_copy=0.9, speedup=500.0, gemm_shape="4096x4096x4096")
        gemm = checks["gemm bf16 8192x8192x8192 / torch.matmul"]
        self.assertEqual((gemm["value"], gemm["met"]), (None, False))


if __name__ == "__main__":
    unittest.main()
