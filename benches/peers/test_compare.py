"""Tests of compare.py's matching, launchers and the targets it checks (no bench runs, no PyTorch):

    python3 -m unittest discover -s benches/peers
"""

import unittest

from compare import cuda_targets, fit_targets, launched, limits_targets, shard_targets, side_by_side

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


def fit_record(precision: str, activation_ratio: float, speed_ratio: float) -> dict:
    return {
        "model": "gpt2",
        "precision": precision,
        "micro_batch": "8",
        "activation_bytes_per_sample_ratio": activation_ratio,
        "samples_per_s_ratio": speed_ratio,
        "tokens_per_s_ratio": speed_ratio,
    }


class FitTargets(unittest.TestCase):
    def test_half_the_activations_and_the_speed_meet_them(self):
        for device, precision, least in (("cpu", "f32", 0.85), ("cuda:0", "bf16", 0.9)):
            checks = fit_targets([fit_record(precision, 0.5, least)], device)
            self.assertEqual(len(checks), 2, checks)
            self.assertTrue(all(c["met"] for c in checks), checks)

    def test_more_activations_or_less_speed_miss_them(self):
        [activations, speed] = fit_targets([fit_record("bf16", 0.51, 0.89)], "cuda:0")
        self.assertFalse(activations["met"])
        self.assertIn("activation", activations["target"])
        self.assertFalse(speed["met"])
        self.assertIn("tokens_per_s", speed["target"])
        # On the CPU bf16's speed has no target, f32's samples/s has.
        checks = fit_targets([fit_record("bf16", 0.3, 0.2), fit_record("f32", 0.3, 0.84)], "cpu")
        self.assertEqual([c["met"] for c in checks], [True, True, False], checks)
        self.assertIn("samples_per_s", checks[2]["target"])

    def test_a_missing_ratio_misses_its_target(self):
        record = fit_record("bf16", 0.3, 1.0) | {"tokens_per_s_ratio": None}
        self.assertFalse(fit_targets([record], "cuda:0")[1]["met"])


def torch_limit(limit_gib: int, micro: int, rate: float) -> dict:
    return {"limit_bytes": limit_gib << 30, "precision": "f32", "micro_batch": micro, "samples_per_s": rate}


def ours_limit(limit_gib: int, bench: str, micro: int, rate: float, techniques: str | None = None) -> dict:
    line = {"bench": bench, "limit_bytes": limit_gib << 30, "precision": "f32", "micro_batch": micro, "samples_per_s": rate}
    return line | ({"techniques": techniques} if techniques else {})


class LimitsTargets(unittest.TestCase):
    def test_three_under_4_ten_under_8_and_the_speed_meet_them(self):
        theirs = [torch_limit(4, 1, 0.2), torch_limit(8, 4, 0.3)]
        ours = [
            ours_limit(4, "largest-micro-batch", 3, 0.1, "no-blocks"),
            ours_limit(4, "largest-micro-batch", 6, 0.1, "any"),
            ours_limit(4, "at-size", 1, 0.19),
            ours_limit(8, "largest-micro-batch", 10, 0.1, "any"),
            ours_limit(8, "largest-micro-batch", 8, 0.1, "no-blocks"),
            ours_limit(8, "at-size", 4, 0.27),
        ]
        checks = limits_targets(theirs, ours)
        self.assertEqual(len(checks), 4, checks)
        self.assertTrue(all(c["met"] for c in checks), checks)

    def test_fewer_samples_or_less_speed_or_a_missing_size_miss_them(self):
        theirs = [torch_limit(4, 1, 0.2), torch_limit(8, 4, 0.3)]
        ours = [
            ours_limit(4, "largest-micro-batch", 2, 0.1, "no-blocks"),
            ours_limit(4, "at-size", 1, 0.17),
            ours_limit(8, "largest-micro-batch", 9, 0.1, "any"),
        ]
        checks = limits_targets(theirs, ours)
        self.assertEqual([c["met"] for c in checks], [False, False, False, False], checks)
        self.assertIsNone(checks[3]["value"], "no step at PyTorch's size under 8 GiB")

    def test_on_a_gpu_bf16_speed_alone_is_a_target(self):
        theirs = [torch_limit(8, 4, 0.3) | {"precision": "bf16"}]
        ours = [ours_limit(8, "at-size", 4, 0.28) | {"precision": "bf16"}, ours_limit(8, "largest-micro-batch", 2, 0.1, "any") | {"precision": "bf16"}]
        checks = limits_targets(theirs, ours, "cuda:0")
        self.assertEqual(len(checks), 1, checks)
        self.assertTrue(checks[0]["met"], checks)


def shard_record(recompute: str, peak: float | None, speed: float | None) -> dict:
    return {"model": "llama-shard", "recompute": recompute, "ranks": 2, "peak_bytes_ratio": peak, "samples_per_s_ratio": speed}


class ShardTargets(unittest.TestCase):
    def test_a_fifth_less_peak_and_the_same_speed_meet_them(self):
        checks = shard_targets([shard_record("blocks", 0.8, 1.0), shard_record("none", 0.5, 1.3)])
        self.assertEqual(len(checks), 4, checks)
        self.assertTrue(all(c["met"] for c in checks), checks)

    def test_more_peak_less_speed_or_a_missing_ratio_miss_them(self):
        checks = shard_targets([shard_record("blocks", 0.81, 0.99), shard_record("none", None, None)])
        self.assertEqual([c["met"] for c in checks], [False, False, False, False], checks)
        self.assertIn("peak per rank", checks[0]["target"])
        self.assertIn("recompute none", checks[2]["target"])

    def test_each_side_starts_under_its_own_launcher(self):
        commands = {"headroom": ["shard-compare"], "pytorch": ["python3", "torch_shard.py"]}
        ran = launched("shard", 4, commands)
        self.assertEqual(ran["headroom"][:4], ["mpirun", "-n", "4", "--oversubscribe"])
        self.assertEqual(ran["headroom"][-1], "shard-compare")
        self.assertEqual(ran["pytorch"], ["python3", "-m", "torch.distributed.run", "--nproc_per_node", "4", "torch_shard.py"])
        self.assertEqual(launched("train", 4, commands), commands)

