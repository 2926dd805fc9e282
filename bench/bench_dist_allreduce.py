"""bench_dist_allreduce.py - part of make bench-dist (bench/bench_dist.sh), run under torchrun: how
long NCCL takes to all-reduce GPT-2 124M's whole gradient (124,475,904 elements, fp32 and bf16) on
this machine's GPUs, median of 10 after 3 warm-ups, CUDA events. bench/bench_dist_table.py compares
it with the time a data-parallel step loses, to get the share of the communication that the
backward pass hides. Rank 0 appends one JSON line to argv[1]."""
import json
import os
import statistics
import sys

import torch
import torch.distributed as dist

torch.cuda.set_device(int(os.environ["LOCAL_RANK"]))
dist.init_process_group("nccl")
res = {"world": dist.get_world_size(), "gpu": torch.cuda.get_device_name()}
for dt, name in ((torch.float32, "fp32"), (torch.bfloat16, "bf16")):
    x = torch.randn(124475904, device="cuda").to(dt)
    t = []
    for i in range(13):
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record(); dist.all_reduce(x); b.record(); b.synchronize()
        if i >= 3:
            t.append(a.elapsed_time(b))
    res[f"allreduce_{name}_ms"] = round(statistics.median(t), 3)
if dist.get_rank() == 0:
    with open(sys.argv[1], "a") as f:
        f.write(json.dumps(res) + "\n")
    print(json.dumps(res))
dist.destroy_process_group()
