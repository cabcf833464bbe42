"""A small MLP trained for three steps on the GPU, as people write it: the program
`memscape predict` runs in tests (testdata/predict/README.md).

python mlp.py [--batch N] [--width N] [--steps N] [--out FILE]
"""

import argparse

import torch
import torch.nn as nn

parser = argparse.ArgumentParser()
parser.add_argument("--batch", type=int, default=64)
parser.add_argument("--width", type=int, default=4096)
parser.add_argument("--steps", type=int, default=3)
parser.add_argument("--out", default="mlp.pickle")
args = parser.parse_args()

device = torch.device("cuda")
model = nn.Sequential(nn.Linear(1024, args.width), nn.ReLU(), nn.Linear(args.width, 1024)).to(device)
optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
torch.cuda.memory._record_memory_history(max_entries=100_000)
for step in range(args.steps):
    x = torch.randn(args.batch, 1024, device=device)
    with torch.autocast("cuda", dtype=torch.bfloat16):
        y = model(x)
    loss = y.float().pow(2).mean()
    loss.backward()
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)
    print(f"step {step}: loss {loss.item():.3f}, peak {torch.cuda.max_memory_allocated() / 2**20:.1f} MiB")
torch.cuda.memory._dump_snapshot(args.out)
