#!/usr/bin/env python3
"""Times the copies `servetune fabric p2p` measured, with PyTorch, and prints the ratio per size.
Used by scripts/gpu-check on a GPU machine; the ratio must be near 1.

usage: torch-copies.py FABRIC_P2P_JSON
"""
import json
import sys

import torch

rep = json.load(open(sys.argv[1]))
p2p = rep.get("p2p") or {}
ngpu = torch.cuda.device_count()
print(f"torch {torch.__version__}, {ngpu} GPU(s)")
for s in p2p.get("series", []):
    if s["bidir"] or s["mode"] != "host_staged" and s["src"] != s["dst"]:
        continue
    src, dst = s["src"], s["dst"]
    for nbytes, secs in s["points"]:
        if nbytes < 4096:
            continue
        a = torch.empty(nbytes, dtype=torch.uint8, device=f"cuda:{src}")
        b = torch.empty(nbytes, dtype=torch.uint8, device=f"cuda:{dst}")
        b.copy_(a)
        torch.cuda.synchronize(src)
        iters = max(3, min(100, (256 << 20) // nbytes))
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        for _ in range(iters):
            b.copy_(a)
        end.record()
        torch.cuda.synchronize(src)
        t = start.elapsed_time(end) / 1e3 / iters
        print(f"GPU{src}->GPU{dst} {nbytes:>11} B  servetune {secs * 1e6:10.2f} us  torch {t * 1e6:10.2f} us  ratio {secs / t:5.2f}")
