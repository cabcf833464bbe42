"""``memscape predict`` and ``memscape.predict`` on real PyTorch programs, on the CPU.

Needs torch: scripts/test runs this file with the prediction environment
(python/requirements-predict.txt) and ``MEMSCAPE_REQUIRE_TORCH=1``, which turns the skip
into a failure; the package's other tests run without torch and skip it.
"""

from __future__ import annotations

import json
import os
import pickle
import subprocess
import sys
import tempfile
import textwrap
import unittest
from pathlib import Path
from typing import Any, Dict, List

ROOT = Path(__file__).resolve().parents[2]
MODELS = ROOT / "testdata" / "predict" / "models"

try:
    import torch  # noqa: F401

    HAVE_TORCH = True
except ImportError:
    HAVE_TORCH = False
    if os.environ.get("MEMSCAPE_REQUIRE_TORCH"):
        raise

import memscape
from memscape._cli import binary


def run_predict(args: List[str], cwd: Path) -> subprocess.CompletedProcess:  # type: ignore[type-arg]
    env = dict(os.environ, PYTHONPATH=str(ROOT / "python"))
    return subprocess.run([str(binary()), "predict", *args], cwd=cwd, env=env, capture_output=True, text=True)


def load(path: Path) -> Dict[str, Any]:
    with open(path, "rb") as f:
        snap: Dict[str, Any] = pickle.load(f)  # noqa: S301 (written by memscape in this test)
    return snap


@unittest.skipUnless(HAVE_TORCH, "needs torch (scripts/test runs it with python/requirements-predict.txt)")
class PredictTest(unittest.TestCase):
    def setUp(self) -> None:
        self.dir = Path(tempfile.mkdtemp(prefix="memscape-predict-test-"))

    def test_a_training_script_runs_unchanged_and_its_own_dump_is_the_prediction(self) -> None:
        """The MLP script builds its model on the CPU, moves it, trains under autocast and
        AdamW, prints `.item()` and the peak, and dumps its snapshot: all as on a GPU."""
        out = self.dir / "mlp.pickle"
        p = run_predict(["--gpu", "a100", "--", sys.executable, str(MODELS / "mlp.py"), "--out", str(out)], self.dir)
        self.assertEqual(p.returncode, 0, p.stderr)
        self.assertIn("step 2: loss 1.000", p.stdout)
        self.assertIn("plausible ones", p.stderr)
        snap = load(out)
        info = snap["memscape_prediction"]
        self.assertEqual(info["gpu"], "NVIDIA A100-SXM4-80GB")
        self.assertNotIn("incomplete", info)
        trace = snap["device_traces"][0]
        allocs = [e for e in trace if e["action"] == "alloc"]
        # Parameters of Linear(1024, 4096) + Linear(4096, 1024) in fp32, made before recording.
        params = (1024 * 4096 + 4096 + 4096 * 1024 + 1024) * 4
        live = sum(b["requested_size"] for s in snap["segments"] for b in s["blocks"] if b["state"] == "active_allocated")
        self.assertGreaterEqual(live, params * 3, "parameters and AdamW's two states are alive at the end")
        # The bf16 casts of autocast, and the cuBLAS workspace of each thread that multiplied.
        self.assertTrue(any(e["size"] == 4096 * 1024 * 2 for e in allocs), "a bf16 copy of a weight")
        self.assertEqual(sum(1 for e in allocs if e["size"] == 4096 * 1024 * 2 + 16 * 1024 * 8), 2)
        # The printed peak is the prediction's: the program asked torch.cuda for it.
        stats = json.loads(subprocess.run([str(binary()), "stats", "--json", str(out)], capture_output=True, text=True,
                                          check=True).stdout)
        self.assertEqual(stats["prediction"]["gpu"], "NVIDIA A100-SXM4-80GB")
        printed = float(p.stdout.strip().splitlines()[-1].split("peak ")[1].split(" MiB")[0])
        self.assertGreater(printed, 0)
        frames = [f["filename"] for e in allocs for f in e["frames"]]
        self.assertTrue(any(f.endswith("mlp.py") for f in frames))
        self.assertFalse(any("memscape/_" in f for f in frames), "the predictor's own frames are not the program's")

    def test_a_program_that_stops_leaves_what_was_predicted_marked_incomplete(self) -> None:
        script = self.dir / "dynamic.py"
        script.write_text(textwrap.dedent("""\
            import torch
            x = torch.randn(1000, 1000, device="cuda")
            y = x @ x
            idx = torch.nonzero(y > 0)   # its size depends on the data
            print("unreachable")
            """))
        out = self.dir / "dynamic.pickle"
        p = run_predict(["--out", str(out), "--", sys.executable, str(script)], self.dir)
        self.assertNotEqual(p.returncode, 0)
        self.assertIn(f"{script}:4", p.stderr)
        self.assertIn("nonzero", p.stderr)
        info = load(out)["memscape_prediction"]
        self.assertIn(f"{script}:4", info["incomplete"])
        self.assertIn("INCOMPLETE", p.stderr)

    @unittest.skipUnless(sys.version_info >= (3, 12), "sys.monitoring (Python 3.12) tells main()'s return")
    def test_out_ends_as_main_returns_not_after_its_objects_die(self) -> None:
        """A model and optimizer that live in main() die as it returns, before --out is
        written at exit: the file shows them alive (as main() left them), so the doctor counts
        a parameter as one, and says what it left out."""
        script = self.dir / "train.py"
        script.write_text(textwrap.dedent("""\
            import torch

            def step(model, opt):
                x = torch.randn(64, 1024, device="cuda")
                model(x).sum().backward()
                opt.step()

            def main():
                model = torch.nn.Linear(1024, 1024).cuda()
                opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
                for _ in range(2):
                    step(model, opt)
                    opt.zero_grad()

            if __name__ == "__main__":
                main()
            """))
        out = self.dir / "train.pickle"
        p = run_predict(["--out", str(out), "--", sys.executable, str(script)], self.dir)
        self.assertEqual(p.returncode, 0, p.stderr)
        snap = load(out)
        weight = 1024 * 1024 * 4
        # Alive in the file's last state: the weight and SGD's momentum buffer for it.
        alive = [b for s in snap["segments"] for b in s["blocks"]
                 if b["state"] == "active_allocated" and b["requested_size"] == weight]
        self.assertEqual(len(alive), 2, [(b["size"], b["requested_size"]) for s in snap["segments"] for b in s["blocks"]])
        info = snap["memscape_prediction"]
        self.assertTrue(any("teardown" in a for a in info["assumptions"]), info["assumptions"])

    def test_past_the_gpu_memory_the_program_gets_pytorchs_error(self) -> None:
        script = self.dir / "big.py"
        script.write_text(textwrap.dedent("""\
            import torch
            torch.cuda.memory._record_memory_history()
            keep = []
            try:
                for i in range(100):
                    keep.append(torch.empty(256 * 2**20, dtype=torch.uint8, device="cuda"))
            except torch.OutOfMemoryError as e:
                print("OOM after", len(keep), str(e).split(".")[0])
            torch.cuda.memory._dump_snapshot("big.pickle")
            """))
        p = run_predict(["--gpu-memory", "2GiB", "--", sys.executable, str(script)], self.dir)
        self.assertEqual(p.returncode, 0, p.stderr)
        self.assertIn("OOM after 6 CUDA out of memory", p.stdout)
        snap = load(self.dir / "big.pickle")
        self.assertEqual([e["action"] for e in snap["device_traces"][0]][-1], "oom")
        report = memscape.doctor(str(self.dir / "big.pickle"))
        self.assertEqual(len(report["ooms"]), 1)
        self.assertEqual(report["ooms"][0]["requested_bytes"], 256 * 2**20)

    def test_a_prediction_gates_memory_growth_in_a_cpu_only_ci_job(self) -> None:
        """docs/agents.md's recipe: predictions of the baseline and of a change, `check`ed."""
        runs = {}
        for name, width in (("base", 4096), ("same", 4096), ("wider", 4608)):
            out = self.dir / f"{name}.pickle"
            p = run_predict(["--out", str(out), "--", sys.executable, str(MODELS / "mlp.py"), "--width", str(width),
                             "--out", str(self.dir / f"{name}-own.pickle")], self.dir)
            self.assertEqual(p.returncode, 0, p.stderr)
            runs[name] = out
        check = [str(binary()), "check", "--baseline", str(runs["base"]), "--max-growth", "2%"]
        same = subprocess.run([*check, str(runs["same"])], capture_output=True, text=True)
        self.assertEqual(same.returncode, 0, same.stdout + same.stderr)
        wider = subprocess.run([*check, str(runs["wider"])], capture_output=True, text=True)
        self.assertEqual(wider.returncode, 1, wider.stdout + wider.stderr)
        self.assertIn("FAIL max-growth", wider.stdout)
        self.assertIn("mlp.py", wider.stdout, "the call sites that grew are named")

    def test_cudas_autocast_rules_name_every_operator_pytorch_casts_on_cuda(self) -> None:
        """The table of CUDA's autocast policies (`_autocast._CUDA`) is PyTorch's: the same
        operators the installed PyTorch registers at AutocastCUDA. A new PyTorch that adds
        one fails here until the table says how it casts."""
        from memscape import _autocast

        self.assertEqual(sorted(_autocast._CUDA), _autocast.registered("AutocastCUDA"))

    def test_doctor_verify_executes_the_what_ifs_it_can_make(self) -> None:
        """`memscape doctor --verify`: the changes `_whatif` can make run, each with a peak;
        checkpointing a stack of blocks lowers it; the others are said not executed."""
        from memscape import _whatif

        cmd = [str(binary()), "doctor", "--verify", "--json", "--", sys.executable, str(MODELS / "llama.py"),
               "--size", "tiny", "--seq", "256", "--steps", "2", "--out", str(self.dir / "own.pickle")]
        env = dict(os.environ, PYTHONPATH=str(ROOT / "python"))
        p = subprocess.run(cmd, cwd=self.dir, env=env, capture_output=True, text=True)
        self.assertEqual(p.returncode, 0, p.stderr)
        v = json.loads(p.stdout)
        rows = {r["key"]: r for r in v["rows"]}
        executed = sorted(k for k, r in rows.items() if r["by_execution"] is not None)
        self.assertEqual(executed, sorted(_whatif.EXECUTABLE))
        self.assertLess(rows["checkpointing"]["by_execution"], v["baseline_peak_bytes"])
        self.assertLess(rows["optimizer:sgd_momentum"]["by_execution"], v["baseline_peak_bytes"])
        self.assertIn("not executed", rows["batch:x2"]["note"])

    def test_python_dash_m_memscape_predict_runs_the_command(self) -> None:
        out = self.dir / "m.pickle"
        code = "import torch; torch.cuda.memory._record_memory_history(); x = torch.zeros(1000, device='cuda')"
        env = dict(os.environ, PYTHONPATH=str(ROOT / "python"))
        p = subprocess.run([sys.executable, "-m", "memscape", "predict", "--out", str(out), "--", sys.executable, "-c", code],
                           cwd=self.dir, env=env, capture_output=True, text=True)
        self.assertEqual(p.returncode, 0, p.stderr)
        self.assertIn("peak allocated", p.stderr)
        sizes = [e["size"] for e in load(out)["device_traces"][0] if e["action"] == "alloc"]
        self.assertEqual(sizes, [4000])

    def test_a_memory_fraction_is_a_limit_as_on_the_gpu(self) -> None:
        script = self.dir / "fraction.py"
        script.write_text(textwrap.dedent("""\
            import torch
            torch.cuda.set_per_process_memory_fraction(0.25)
            total = torch.cuda.get_device_properties(0).total_memory
            try:
                x = torch.empty(total // 2, dtype=torch.uint8, device="cuda")
                print("allocated")
            except torch.OutOfMemoryError:
                print("refused")
            y = torch.empty(total // 8, dtype=torch.uint8, device="cuda")
            print("then allocated", y.numel())
            """))
        p = run_predict(["--gpu", "l4", "--", sys.executable, str(script)], self.dir)
        self.assertEqual(p.returncode, 0, p.stderr)
        self.assertIn("refused", p.stdout)
        self.assertIn("then allocated", p.stdout)

    def test_memscape_record_under_prediction_dumps_at_the_predicted_oom(self) -> None:
        """`memscape.record` attaches PyTorch's out-of-memory observer; under prediction the
        observer is called before the predicted error raises, as PyTorch calls it."""
        script = self.dir / "rec.py"
        script.write_text(textwrap.dedent("""\
            import memscape, torch
            keep = []
            try:
                with memscape.record("rec.pickle"):
                    for i in range(100):
                        keep.append(torch.empty(512 * 2**20, dtype=torch.uint8, device="cuda"))
            except torch.OutOfMemoryError:
                print("raised")
            """))
        p = run_predict(["--gpu-memory", "4GiB", "--", sys.executable, str(script)], self.dir)
        self.assertEqual(p.returncode, 0, p.stderr)
        self.assertIn("raised", p.stdout)
        trace = load(self.dir / "rec.pickle")["device_traces"][0]
        self.assertEqual(trace[-1]["action"], "oom")
        self.assertEqual(sum(1 for e in trace if e["action"] == "alloc"), 7)

    def test_the_context_manager_predicts_a_block_in_this_process(self) -> None:
        import torch

        out = self.dir / "block.pickle"
        with memscape.predict(out, gpu="h100"):
            self.assertTrue(torch.cuda.is_available())
            w = torch.randn(4096, 4096, device="cuda", requires_grad=True)
            x = torch.randn(512, 4096).cuda()
            (x @ w).sum().backward()
            self.assertEqual(w.device.type, "cuda")
            peak = torch.cuda.max_memory_allocated()
        self.assertFalse(torch.cuda.is_available() and not torch.backends.cuda.is_built() and False)
        snap = load(out)
        self.assertEqual(snap["memscape_prediction"]["gpu"], "NVIDIA H100 80GB HBM3")
        sizes = [e["size"] for e in snap["device_traces"][0] if e["action"] == "alloc"]
        self.assertIn(4096 * 4096 * 4, sizes)
        self.assertIn(32 * 2**20, sizes, "an H100's cuBLAS workspace")
        self.assertGreaterEqual(peak, 4096 * 4096 * 4 * 2 + 512 * 4096 * 4)
        # Outside the block, PyTorch is itself again.
        self.assertEqual(torch.randn(2).device.type, "cpu")


if __name__ == "__main__":
    unittest.main()
