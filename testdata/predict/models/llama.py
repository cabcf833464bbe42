"""A Llama-shaped decoder trained for a step on the GPU, written as people write it with
torch.nn (RMSNorm, rotary embeddings, grouped-query attention through
scaled_dot_product_attention, SwiGLU), bf16 autocast and AdamW: the program `memscape predict`
runs for sizes from tiny to 70B parameters (testdata/predict/README.md, docs/predict.md).

python llama.py [--size tiny|1b|7b|70b] [--batch N] [--seq N] [--steps N] [--out FILE]
"""

import argparse
import math

import torch
import torch.nn as nn
import torch.nn.functional as F

SIZES = {
    # layers, d_model, heads, kv heads, ffn, vocab
    "tiny": (2, 256, 4, 2, 688, 1000),
    "1b": (16, 2048, 32, 8, 8192, 128256),
    "7b": (32, 4096, 32, 32, 11008, 32000),
    "70b": (80, 8192, 64, 8, 28672, 32000),
}


class RMSNorm(nn.Module):
    def __init__(self, d, eps=1e-5):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(d))
        self.eps = eps

    def forward(self, x):
        x32 = x.float()
        return (x32 * torch.rsqrt(x32.pow(2).mean(-1, keepdim=True) + self.eps)).type_as(x) * self.weight


def rope(x, cos, sin):
    x1, x2 = x[..., : x.shape[-1] // 2], x[..., x.shape[-1] // 2 :]
    return x * cos + torch.cat((-x2, x1), dim=-1) * sin


class Attention(nn.Module):
    def __init__(self, d, heads, kv_heads):
        super().__init__()
        self.heads, self.kv_heads, self.hd = heads, kv_heads, d // heads
        self.q = nn.Linear(d, d, bias=False)
        self.k = nn.Linear(d, kv_heads * self.hd, bias=False)
        self.v = nn.Linear(d, kv_heads * self.hd, bias=False)
        self.o = nn.Linear(d, d, bias=False)

    def forward(self, x, cos, sin):
        b, t, _ = x.shape
        q = self.q(x).view(b, t, self.heads, self.hd).transpose(1, 2)
        k = self.k(x).view(b, t, self.kv_heads, self.hd).transpose(1, 2)
        v = self.v(x).view(b, t, self.kv_heads, self.hd).transpose(1, 2)
        q, k = rope(q, cos, sin), rope(k, cos, sin)
        if self.kv_heads != self.heads:
            k = k.repeat_interleave(self.heads // self.kv_heads, dim=1)
            v = v.repeat_interleave(self.heads // self.kv_heads, dim=1)
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        return self.o(y.transpose(1, 2).reshape(b, t, -1))


class Block(nn.Module):
    def __init__(self, d, heads, kv_heads, ffn):
        super().__init__()
        self.norm1, self.norm2 = RMSNorm(d), RMSNorm(d)
        self.attn = Attention(d, heads, kv_heads)
        self.gate = nn.Linear(d, ffn, bias=False)
        self.up = nn.Linear(d, ffn, bias=False)
        self.down = nn.Linear(ffn, d, bias=False)

    def forward(self, x, cos, sin):
        x = x + self.attn(self.norm1(x), cos, sin)
        h = self.norm2(x)
        return x + self.down(F.silu(self.gate(h)) * self.up(h))


class Llama(nn.Module):
    def __init__(self, layers, d, heads, kv_heads, ffn, vocab, seq):
        super().__init__()
        self.embed = nn.Embedding(vocab, d)
        self.blocks = nn.ModuleList(Block(d, heads, kv_heads, ffn) for _ in range(layers))
        self.norm = RMSNorm(d)
        self.head = nn.Linear(d, vocab, bias=False)
        hd = d // heads
        inv = 1.0 / (10000 ** (torch.arange(0, hd, 2).float() / hd))
        ang = torch.outer(torch.arange(seq).float(), inv)
        self.register_buffer("cos", torch.cat((ang, ang), dim=-1).cos(), persistent=False)
        self.register_buffer("sin", torch.cat((ang, ang), dim=-1).sin(), persistent=False)

    def forward(self, tokens):
        x = self.embed(tokens)
        t = tokens.shape[1]
        cos, sin = self.cos[:t], self.sin[:t]
        for block in self.blocks:
            x = block(x, cos, sin)
        return self.head(self.norm(x))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--size", default="tiny", choices=sorted(SIZES))
    ap.add_argument("--batch", type=int, default=1)
    ap.add_argument("--seq", type=int, default=4096)
    ap.add_argument("--steps", type=int, default=1)
    ap.add_argument("--out", default="llama.pickle")
    args = ap.parse_args()
    layers, d, heads, kv, ffn, vocab = SIZES[args.size]
    torch.manual_seed(0)
    model = Llama(layers, d, heads, kv, ffn, vocab, args.seq).to("cuda")
    params = sum(p.numel() for p in model.parameters())
    print(f"{args.size}: {params / 1e9:.2f}B parameters")
    optimizer = torch.optim.AdamW(model.parameters(), lr=3e-4, weight_decay=0.1)
    torch.cuda.memory._record_memory_history(max_entries=1_000_000)
    for step in range(args.steps):
        tokens = torch.randint(0, vocab, (args.batch, args.seq + 1), device="cuda")
        with torch.autocast("cuda", dtype=torch.bfloat16):
            logits = model(tokens[:, :-1])
            loss = F.cross_entropy(logits.float().view(-1, vocab), tokens[:, 1:].reshape(-1))
        loss.backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        print(f"step {step}: peak {torch.cuda.max_memory_allocated() / 2**30:.1f} GiB")
    torch.cuda.memory._dump_snapshot(args.out)


if __name__ == "__main__":
    main()
