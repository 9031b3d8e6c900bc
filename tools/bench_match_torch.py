#!/usr/bin/env python3
"""What a PyTorch user would write instead of Prism's fused matcher, on the same GPU: FP16 matmul of
each gallery image's 768 descriptors with the query's, topk(2) per query descriptor, Lowe's ratio
test, a score per image; plus the measured FP16 tensor-core peak (8192^3 matmul). Median of 10."""
import sys
import time

import torch

def median_ms(f, n=10):
    for _ in range(2):
        f()
    torch.cuda.synchronize()
    ts = []
    for _ in range(n):
        s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        s.record(); f(); e.record(); torch.cuda.synchronize()
        ts.append(s.elapsed_time(e))
    ts.sort()
    return ts[len(ts) // 2]

dev = torch.device("cuda")
print("device:", torch.cuda.get_device_name(0), "torch", torch.__version__)
a = torch.randn(8192, 8192, device=dev, dtype=torch.float16)
b = torch.randn(8192, 8192, device=dev, dtype=torch.float16)
ms = median_ms(lambda: a @ b)
peak = 2 * 8192 ** 3 / (ms / 1e3) / 1e12
print(f"| FP16 matmul 8192^3 (measured peak) | {ms:.3f} ms | {peak:.0f} TFLOP/s |")
del a, b
q = torch.rand(768, 128, device=dev, dtype=torch.float16)
q = q / q.float().norm(dim=1, keepdim=True).half()
print("| method | gallery images per batch | median ms | gallery images/s | TFLOP/s |")
print("|---|---|---|---|---|")
for batch in (256, 1024, 4096):
    g = torch.rand(batch, 768, 128, device=dev, dtype=torch.float16)
    def search():
        dots = torch.matmul(g, q.t())             # [batch, 768 gallery, 768 query]
        top = dots.topk(2, dim=1).values.float()  # two largest per query descriptor
        d1, d2 = (2 - 2 * top[:, 0]).clamp_min(0), (2 - 2 * top[:, 1]).clamp_min(0)
        return (d1 < 0.64 * d2).sum(dim=1)
    ms = median_ms(search)
    per_s = batch / (ms / 1e3)
    print(f"| PyTorch matmul + topk(2) + ratio test | {batch} | {ms:.3f} | {per_s:.0f} | {per_s * 2 * 768 * 768 * 128 / 1e12:.1f} |")
    del g
