"""The doctor's what-if predictions against real training runs (run by python/whatif-check).

For each model: a baseline run (AdamW, fp32 activations, zero_grad after the forward pass) is
recorded with ``memscape.record``; ``memscape.doctor`` predicts its peak under each change;
then each change is run for real, recorded, and its measured peak compared with the
prediction. Random weights and data, nothing downloaded. Every run is three training steps
built and recorded from nothing (the model, its optimizer and its data are made inside the
recording), so the peak is that of a real step with last step's gradients and the
optimizer's state alive.

    python3 python/whatif_check.py --out DIR [--models gpt-small,mlp] [--budget 420]
    python3 python/whatif_check.py --dry-run     # on the CPU: every model and change runs tiny

Writes DIR/results.json (one row per model and change, the GPU, driver and versions),
DIR/table.md (the table docs/doctor.md holds) and DIR/snapshots/MODEL/CHANGE.pickle.gz; the
rows are written as they come, so a run stopped by its time budget keeps what it measured.
"""

from __future__ import annotations

import argparse
import gc
import gzip
import json
import os
import platform
import shutil
import subprocess
import sys
import time
from pathlib import Path

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.utils.checkpoint import checkpoint

#: The changes, by the doctor's keys (`Change::key` in core/doctor/src/whatif.rs).
CHANGES = [
    "checkpointing",
    "bf16_activations",
    "optimizer:sgd_momentum",
    "optimizer:adam_8bit",
    "optimizer:adafactor",
    "zero_grad_before_forward",
    "batch:x2",
    "batch:x0.5",
]


class Block(nn.Module):
    """A GPT-2 style pre-norm decoder block (attention through scaled_dot_product_attention)."""

    def __init__(self, d: int, heads: int) -> None:
        super().__init__()
        self.heads = heads
        self.ln1, self.ln2 = nn.LayerNorm(d), nn.LayerNorm(d)
        self.qkv, self.proj = nn.Linear(d, 3 * d), nn.Linear(d, d)
        self.fc, self.out = nn.Linear(d, 4 * d), nn.Linear(4 * d, d)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, t, d = x.shape
        q, k, v = self.qkv(self.ln1(x)).split(d, dim=2)
        q, k, v = (z.view(b, t, self.heads, d // self.heads).transpose(1, 2) for z in (q, k, v))
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        x = x + self.proj(y.transpose(1, 2).reshape(b, t, d))
        return x + self.out(F.gelu(self.fc(self.ln2(x))))


class Gpt(nn.Module):
    def __init__(self, vocab: int, seq: int, d: int, layers: int, heads: int) -> None:
        super().__init__()
        self.wte, self.wpe = nn.Embedding(vocab, d), nn.Embedding(seq, d)
        self.blocks = nn.ModuleList(Block(d, heads) for _ in range(layers))
        self.ln, self.head = nn.LayerNorm(d), nn.Linear(d, vocab, bias=False)
        self.checkpointing = False

    def forward(self, idx: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
        x = self.wte(idx) + self.wpe(torch.arange(idx.shape[1], device=idx.device))
        x = run_layers(self.blocks, x, self.checkpointing)
        logits = self.head(self.ln(x))
        return F.cross_entropy(logits.view(-1, logits.size(-1)), targets.reshape(-1))


class Residual(nn.Module):
    """A ResNet basic block: two 3x3 convolutions with batch norm, and the shortcut."""

    def __init__(self, cin: int, cout: int, stride: int) -> None:
        super().__init__()
        self.c1 = nn.Conv2d(cin, cout, 3, stride, 1, bias=False)
        self.b1 = nn.BatchNorm2d(cout)
        self.c2 = nn.Conv2d(cout, cout, 3, 1, 1, bias=False)
        self.b2 = nn.BatchNorm2d(cout)
        self.down = None
        if stride != 1 or cin != cout:
            self.down = nn.Sequential(nn.Conv2d(cin, cout, 1, stride, bias=False), nn.BatchNorm2d(cout))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = self.b2(self.c2(F.relu(self.b1(self.c1(x)))))
        return F.relu(y + (x if self.down is None else self.down(x)))


class ConvNet(nn.Module):
    """ResNet-18's shape: a 7x7 stem, four stages of two residual blocks, 1000 classes."""

    def __init__(self, width: int) -> None:
        super().__init__()
        w = width
        self.stem = nn.Sequential(nn.Conv2d(3, w, 7, 2, 3, bias=False), nn.BatchNorm2d(w), nn.ReLU(), nn.MaxPool2d(3, 2, 1))
        chans = [w, w, 2 * w, 2 * w, 4 * w, 4 * w, 8 * w, 8 * w]
        strides = [1, 1, 2, 1, 2, 1, 2, 1]
        self.blocks = nn.ModuleList(Residual(chans[max(i - 1, 0)], c, s) for i, (c, s) in enumerate(zip(chans, strides)))
        self.fc = nn.Linear(8 * w, 1000)
        self.checkpointing = False

    def forward(self, images: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
        x = run_layers(self.blocks, self.stem(images), self.checkpointing)
        return F.cross_entropy(self.fc(x.mean(dim=(2, 3))), labels)


class Mlp(nn.Module):
    """A deep MLP: layers of Linear, LayerNorm and GELU, and a classifier."""

    def __init__(self, width: int, layers: int) -> None:
        super().__init__()
        self.blocks = nn.ModuleList(nn.Sequential(nn.Linear(width, width), nn.LayerNorm(width), nn.GELU()) for _ in range(layers))
        self.fc = nn.Linear(width, 1000)
        self.checkpointing = False

    def forward(self, x: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
        return F.cross_entropy(self.fc(run_layers(self.blocks, x, self.checkpointing)), labels)


def run_layers(blocks: nn.ModuleList, x: torch.Tensor, checkpointing: bool) -> torch.Tensor:
    for block in blocks:
        x = checkpoint(block, x, use_reentrant=False) if checkpointing else block(x)
    return x


#: The models: how each is made and what one batch of it is. `batch` is the baseline's.
MODELS = {
    "gpt-small": dict(kind="gpt", vocab=50304, seq=1024, d=768, layers=12, heads=12, batch=16),
    "convnet": dict(kind="conv", width=64, image=224, batch=256),
    "mlp": dict(kind="mlp", width=4096, layers=12, batch=32768),
    "gpt-large": dict(kind="gpt", vocab=50304, seq=2048, d=2048, layers=24, heads=16, batch=8),
}
#: The same models, tiny, for --dry-run on a CPU.
TINY = {
    "gpt-small": dict(kind="gpt", vocab=512, seq=64, d=64, layers=2, heads=4, batch=4),
    "convnet": dict(kind="conv", width=8, image=32, batch=4),
    "mlp": dict(kind="mlp", width=64, layers=3, batch=32),
    "gpt-large": dict(kind="gpt", vocab=512, seq=64, d=128, layers=3, heads=4, batch=4),
}


def describe(spec: dict) -> str:
    k = spec["kind"]
    if k == "gpt":
        return f"GPT decoder ({spec['layers']} layers, d {spec['d']}, seq {spec['seq']}, batch {spec['batch']})"
    if k == "conv":
        return f"ResNet-18 shape (width {spec['width']}, {spec['image']}px, batch {spec['batch']})"
    return f"MLP ({spec['layers']} x {spec['width']}, batch {spec['batch']})"


def make(spec: dict, device: str) -> nn.Module:
    """The model, its parameters made on the device (in the recording, with their frames; and
    fast: the large GPT's 1.4 billion values initialised on a CPU take seconds)."""
    k = spec["kind"]
    with torch.device(device):
        if k == "gpt":
            return Gpt(spec["vocab"], spec["seq"], spec["d"], spec["layers"], spec["heads"])
        if k == "conv":
            return ConvNet(spec["width"])
        return Mlp(spec["width"], spec["layers"])


def data(spec: dict, batch: int, device: str) -> tuple:
    """One batch, made on the device as a data loader's .to(device) would leave it."""
    k = spec["kind"]
    if k == "gpt":
        idx = torch.randint(spec["vocab"], (batch, spec["seq"] + 1), device=device)
        return idx[:, :-1], idx[:, 1:]
    if k == "conv":
        s = spec["image"]
        return torch.randn(batch, 3, s, s, device=device), torch.randint(1000, (batch,), device=device)
    return torch.randn(batch, spec["width"], device=device), torch.randint(1000, (batch,), device=device)


def optimizer(change: str, params) -> torch.optim.Optimizer:
    if change == "optimizer:sgd_momentum":
        return torch.optim.SGD(params, lr=1e-3, momentum=0.9)
    if change == "optimizer:adafactor":
        return torch.optim.Adafactor(params, lr=1e-3)
    if change == "optimizer:adam_8bit":
        import bitsandbytes  # noqa: PLC0415 (optional: only where it installs)

        return bitsandbytes.optim.AdamW8bit(params, lr=1e-4)
    return torch.optim.AdamW(params, lr=1e-4)


def applicable(change: str) -> str | None:
    """Why a change cannot run here, or None."""
    if change == "optimizer:adam_8bit":
        try:
            import bitsandbytes  # noqa: F401, PLC0415
        except Exception as e:  # noqa: BLE001 (any failure to load it means: not here)
            return f"bitsandbytes does not load here ({type(e).__name__})"
    if change == "optimizer:adafactor" and not hasattr(torch.optim, "Adafactor"):
        return f"torch {torch.__version__} has no torch.optim.Adafactor"
    return None


def train(spec: dict, change: str, device: str, steps: int) -> None:
    """Three training steps of the model under `change` (the baseline: change "")."""
    batch = spec["batch"]
    if change.startswith("batch:x"):
        batch = max(1, round(batch * float(change[len("batch:x") :])))
    model = make(spec, device)
    model.checkpointing = change == "checkpointing"
    opt = optimizer(change, model.parameters())
    bf16 = change == "bf16_activations"
    for _ in range(steps):
        x, y = data(spec, batch, device)
        if change == "zero_grad_before_forward":
            opt.zero_grad(set_to_none=True)
        with torch.autocast(device_type=device, dtype=torch.bfloat16, enabled=bf16):
            loss = model(x, y)
        if change != "zero_grad_before_forward":
            opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        del x, y, loss
    if device == "cuda":
        torch.cuda.synchronize()


def warm_up(device: str) -> None:
    """Kernels' workspaces (cuBLAS, cuDNN) made once, before any recording, so that each
    recorded run holds its own memory alone."""
    for spec in TINY.values():
        for change in ("", "bf16_activations", "checkpointing"):
            train(spec, change, device, 2)
    gc.collect()
    if device == "cuda":
        torch.cuda.empty_cache()


def record(spec: dict, change: str, path: Path, steps: int) -> dict:
    """Runs and records one training run; returns its measured peak and how it ended."""
    import memscape  # noqa: PLC0415 (the installed wheel)

    gc.collect()
    torch.cuda.empty_cache()
    torch.cuda.reset_peak_memory_stats()
    before = torch.cuda.memory_allocated()
    t0 = time.monotonic()
    outcome = "ok"
    rec = memscape.record(path)
    try:
        with rec:
            train(spec, change, "cuda", steps)
    except torch.OutOfMemoryError as e:
        outcome = "oom: " + str(e).splitlines()[0][:160]
    except Exception as e:  # noqa: BLE001 (one change failing, e.g. an optimizer's kernels, is a row)
        outcome = f"error: {type(e).__name__}: {str(e).splitlines()[0][:160] if str(e) else ''}"
    seconds = time.monotonic() - t0
    max_allocated = torch.cuda.max_memory_allocated() - before
    gc.collect()
    torch.cuda.empty_cache()
    if not path.exists():
        return dict(outcome=outcome + " (no snapshot written)", measured_peak_bytes=0, seconds=round(seconds, 2))
    stats = memscape.stats(path)
    dev = stats["devices"][0]
    return dict(
        outcome=outcome,
        measured_peak_bytes=dev["timeline"]["peak_bytes"],
        torch_max_allocated_bytes=max_allocated,
        alive_before_bytes=before,
        trace_entries=dev["trace_entries"],
        seconds=round(seconds, 2),
    )


def versions() -> dict:
    v = dict(torch=torch.__version__, python=platform.python_version(), cuda=torch.version.cuda)
    if torch.cuda.is_available():
        p = torch.cuda.get_device_properties(0)
        v.update(gpu=p.name, gpu_memory_bytes=p.total_memory)
        try:
            v["driver"] = subprocess.run(
                ["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"],
                capture_output=True, text=True, check=True,
            ).stdout.strip()
        except (OSError, subprocess.CalledProcessError):
            v["driver"] = "unknown"
    try:
        import memscape  # noqa: PLC0415

        v["memscape"] = subprocess.run([memscape.binary(), "--version"], capture_output=True, text=True).stdout.strip()
    except Exception:  # noqa: BLE001 (a dry run on a CPU may have no wheel)
        v["memscape"] = "not installed"
    return v


def gib(b: float) -> str:
    return f"{b / 2**30:.2f} GiB"


def table(results: dict) -> str:
    v = results["versions"]
    where = (f"Predicted by execution on a CPU (`memscape predict --gpu ... -- python python/whatif_check.py`: "
             f"'measured' is the executed prediction) for {v.get('gpu', '?')}"
             if os.environ.get("MEMSCAPE_PREDICTING") else f"Measured on {v.get('gpu', '?')} (driver {v.get('driver', '?')})")
    lines = [
        f"{where}, PyTorch {v['torch']} (CUDA {v['cuda']}), "
        f"Python {v['python']}, {v['memscape']}; `python/whatif-check`, {results['date']}.",
        "",
        "| model | change | baseline | predicted | measured | error |",
        "|---|---|---:|---:|---:|---:|",
    ]
    for r in results["rows"]:
        if r.get("skipped"):
            lines.append(f"| {r['model']} | {r['change']} | | | | not run: {r['skipped']} |")
            continue
        ok, oom = r["outcome"] == "ok", r["outcome"].startswith("oom")
        measured = gib(r["measured_peak_bytes"]) if ok else "out of memory" if oom else "failed"
        err = f"{r['error_pct']:+.1f}%" if ok else "OOM" if oom else r["outcome"]
        lines.append(
            f"| {r['model']} | {r['change']} | {gib(r['baseline_peak_bytes'])} | {gib(r['predicted_peak_bytes'])} | "
            f"{measured} | {err} |"
        )
    return "\n".join(lines) + "\n"


def save(out: Path, results: dict) -> None:
    (out / "results.json").write_text(json.dumps(results, indent=1) + "\n")
    (out / "table.md").write_text(table(results))


def gzip_to(src: Path, dst: Path) -> None:
    if not src.exists():
        return
    with open(src, "rb") as f, gzip.open(dst, "wb", compresslevel=6) as g:
        shutil.copyfileobj(f, g)
    src.unlink()


def check(args: argparse.Namespace) -> int:
    import memscape  # noqa: PLC0415

    out = Path(args.out)
    snaps = out / "snapshots"
    snaps.mkdir(parents=True, exist_ok=True)
    torch.backends.cuda.matmul.allow_tf32 = True
    torch.backends.cudnn.allow_tf32 = True
    torch.manual_seed(0)
    start = time.monotonic()
    warm_up("cuda")
    results = dict(date=time.strftime("%Y-%m-%d"), versions=versions(), steps=args.steps, rows=[])
    print(json.dumps(results["versions"]), flush=True)
    for name in args.models.split(","):
        spec = MODELS[name]
        (snaps / name).mkdir(exist_ok=True)
        raw = snaps / name / "baseline.pickle"
        base = record(spec, "", raw, args.steps)
        predicted = {w["key"]: w for w in memscape.doctor(raw)["what_if"]} if base["outcome"] == "ok" else {}
        gzip_to(raw, snaps / name / "baseline.pickle.gz")
        print(f"{name}: baseline {gib(base['measured_peak_bytes'])} ({base['outcome']}, {base['seconds']} s)", flush=True)
        results.setdefault("baselines", {})[name] = dict(model=describe(spec), spec=spec, **base)
        for change in CHANGES:
            row = dict(model=name, description=describe(spec), change=change)
            why = applicable(change)
            if base["outcome"] != "ok":
                why = f"the baseline did not run ({base['outcome']})"
            if time.monotonic() - start > args.budget:
                why = f"the time budget ({args.budget} s) ran out"
            w = predicted.get(change)
            if why is None and (w is None or not w["applies"]):
                why = "the doctor says it does not apply: " + (w["assumption"] if w else "no prediction")
            if why:
                row["skipped"] = why
                results["rows"].append(row)
                print(f"  {change}: not run ({why})", flush=True)
                continue
            raw = snaps / name / (change.replace(":", "-") + ".pickle")
            m = record(spec, change, raw, args.steps)
            gzip_to(raw, raw.with_suffix(".pickle.gz"))
            row.update(m, baseline_peak_bytes=w["baseline_peak_bytes"], predicted_peak_bytes=w["predicted_peak_bytes"])
            if m["outcome"] == "ok":
                row["error_pct"] = 100.0 * (w["predicted_peak_bytes"] - m["measured_peak_bytes"]) / m["measured_peak_bytes"]
            results["rows"].append(row)
            save(out, results)
            print(
                f"  {change}: predicted {gib(w['predicted_peak_bytes'])}, measured {gib(m['measured_peak_bytes'])} "
                f"({m['outcome']}, {row.get('error_pct', float('nan')):+.1f}%, {m['seconds']} s)",
                flush=True,
            )
    save(out, results)
    print(table(results))
    bad = [r for r in results["rows"] if r.get("outcome") == "ok" and abs(r["error_pct"]) > 10]
    print(f"whatif-check: {len(results['rows'])} rows, {len(bad)} over 10%")
    return 0


def dry_run(args: argparse.Namespace) -> int:
    """Every model and change, tiny, on the CPU: the script's own code checked without a GPU."""
    torch.manual_seed(0)
    for name in args.models.split(","):
        for change in [""] + CHANGES:
            why = applicable(change)
            if why:
                print(f"{name} {change}: not run ({why})")
                continue
            t0 = time.monotonic()
            train(TINY[name], change, "cpu", args.steps)
            print(f"{name} {change or 'baseline'}: ran ({time.monotonic() - t0:.2f} s)")
    return 0


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--out", default="whatif-out", help="where results.json, table.md and snapshots/ go")
    p.add_argument("--models", default=",".join(MODELS), help=f"comma-separated, of {', '.join(MODELS)}")
    p.add_argument("--steps", type=int, default=3, help="training steps per run")
    p.add_argument("--budget", type=float, default=420.0, help="seconds after which no new change is run")
    p.add_argument("--dry-run", action="store_true", help="run every model and change tiny on the CPU, record nothing")
    args = p.parse_args()
    for name in args.models.split(","):
        if name not in MODELS:
            p.error(f"unknown model {name!r}: the models are {', '.join(MODELS)}")
    if args.dry_run:
        return dry_run(args)
    if not torch.cuda.is_available():
        print("whatif-check needs a CUDA GPU (use --dry-run on a CPU)", file=sys.stderr)
        return 2
    return check(args)


if __name__ == "__main__":
    sys.exit(main())
