#!/usr/bin/env python3
"""What a PyTorch user would write instead of Prism's fused matcher, on the same GPU: FP16 matmul of
each gallery image's 768 descriptors with the query's, topk(2) per query descriptor, Lowe's ratio
test, a score per image; the same in INT8 (torch._int_mm, int8 x int8 -> int32: PyTorch has no
uint8 matmul, so 8-bit RootSIFT would be shifted into int8, and |g|^2 - 2 q.g ranks the
neighbours); plus the measured FP16 and INT8 tensor-core peaks (8192^3). Median of 10."""
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
ai = torch.randint(-128, 127, (8192, 8192), device=dev, dtype=torch.int8)
bi = torch.randint(-128, 127, (8192, 8192), device=dev, dtype=torch.int8)
try:
    ms = median_ms(lambda: torch._int_mm(ai, bi))
    print(f"| INT8 matmul 8192^3 (torch._int_mm, measured peak) | {ms:.3f} ms | {2 * 8192 ** 3 / (ms / 1e3) / 1e12:.0f} TOPS |")
except RuntimeError as err:
    print(f"| INT8 matmul 8192^3 (torch._int_mm) | unavailable: {err} |")
del ai, bi
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

qi = torch.randint(-128, 127, (128, 768), device=dev, dtype=torch.int8)  # query, K x N
qn = (qi.float() ** 2).sum(dim=0)                                          # |q|^2 per query descriptor
for batch in (256, 1024, 4096):
    g = torch.randint(-128, 127, (batch * 768, 128), device=dev, dtype=torch.int8)
    gn = (g.float() ** 2).sum(dim=1).view(batch, 768, 1)
    def search_int8():
        dots = torch._int_mm(g, qi).view(batch, 768, 768)  # [batch, gallery, query], exact int32
        e = gn - 2 * dots.float()                        # |g|^2 - 2 q.g
        top = e.topk(2, dim=1, largest=False).values
        return (top[:, 0] + qn < 0.64 * (top[:, 1] + qn)).sum(dim=1)
    try:
        ms = median_ms(search_int8)
    except RuntimeError as err:
        print(f"| PyTorch INT8 _int_mm + topk(2) + ratio test | {batch} | unavailable: {err} |")
        break
    per_s = batch / (ms / 1e3)
    print(f"| PyTorch INT8 _int_mm + topk(2) + ratio test | {batch} | {ms:.3f} | {per_s:.0f} | {per_s * 2 * 768 * 768 * 128 / 1e12:.1f} |")
    del g, gn
