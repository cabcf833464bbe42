"""Writes the profiler test files of testdata/profiler/ on a CPU (no GPU needed).

A small model trains for three steps under `torch.profiler.profile(profile_memory=True,
record_shapes=True, with_stack=True)`, as PyTorch's guide "Understanding GPU Memory 1" does on
a GPU; the trace and the memory timeline (raw and coalesced) of the same run are written:

    python testdata/profiler/record.py testdata/profiler

makes cpu-mlp-adamw.pt.trace.json.gz, cpu-mlp-adamw.raw.json.gz and cpu-mlp-adamw.timeline.json.gz
(the memscape tests read them; regenerate with any recent PyTorch).
"""

import os
import sys

import torch
from torch import nn
from torch.profiler import ProfilerActivity, profile, record_function


def main(out: str) -> None:
    torch.manual_seed(0)
    model = nn.Sequential(
        nn.Linear(512, 1024), nn.ReLU(), nn.Linear(1024, 1024), nn.ReLU(), nn.Linear(1024, 10)
    )
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    loss_fn = nn.CrossEntropyLoss()
    with profile(
        activities=[ProfilerActivity.CPU],
        profile_memory=True,
        record_shapes=True,
        with_stack=True,
    ) as prof:
        for _ in range(3):
            x = torch.randn(256, 512)
            y = torch.randint(0, 10, (256,))
            with record_function("## forward ##"):
                loss = loss_fn(model(x), y)
            with record_function("## backward ##"):
                loss.backward()
            with record_function("## optimizer ##"):
                opt.step()
                opt.zero_grad(set_to_none=True)
    name = os.path.join(out, "cpu-mlp-adamw")
    prof.export_chrome_trace(name + ".pt.trace.json.gz")
    prof.export_memory_timeline(name + ".raw.json.gz", device="cpu")
    prof.export_memory_timeline(name + ".timeline.json.gz", device="cpu")


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else ".")
