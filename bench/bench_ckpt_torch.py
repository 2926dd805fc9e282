#!/usr/bin/env python3
"""bench_ckpt_torch.py - the references for bench/bench_ckpt.c on the same state and disk (make bench-ckpt).

    python3 bench/bench_ckpt_torch.py --dir DIR [--params 124475904] [--reps 3]

A GPT-2 124M training state (fp32 parameters, AdamW m and v: 3 x 124,475,904 floats = 1.49 GB) on
the GPU when there is one, median of --reps runs:
  torch.save / torch.load            (map_location = the device)
  safetensors save_file / load_file  (load_file(device="cuda") on a GPU)
  dcp.async_save                     torch.distributed.checkpoint: the caller's stall and the whole
                                     save (a one-process gloo group), when it is available
  dd                                 dd if=/dev/zero bs=1M conv=fsync: the disk's write speed
Neither torch.save nor save_file fsyncs; bt_ckpt's saves do (atomic: write, fsync, rename).
"""
import argparse
import os
import re
import statistics
import subprocess
import time

import torch


def sync(dev):
    if dev.type == "cuda":
        torch.cuda.synchronize()


def timed(fn, reps):
    out = []
    for _ in range(reps):
        t0 = time.perf_counter()
        fn()
        out.append((time.perf_counter() - t0) * 1e3)
    return statistics.median(out)


def dd_speed(d, mb):
    path = os.path.join(d, "dd.bin")
    r = subprocess.run(["dd", "if=/dev/zero", "of=" + path, "bs=1M", "count=%d" % mb, "conv=fsync"],
                       capture_output=True, text=True)
    os.unlink(path)
    m = re.search(r"copied, ([0-9.]+) s", r.stderr)
    return float(m.group(1)) * 1e3 if m else float("nan")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--dir", default="/tmp/bt_bench_ckpt")
    ap.add_argument("--params", type=int, default=124475904)
    ap.add_argument("--reps", type=int, default=3)
    a = ap.parse_args()
    os.makedirs(a.dir, exist_ok=True)
    dev = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    g = torch.Generator(device=dev).manual_seed(1)
    state = {k: torch.randn(a.params, device=dev, generator=g) for k in ("params", "adamw.m", "adamw.v")}
    sync(dev)
    gb = 3 * a.params * 4 / 1e9
    print("state: 3 x %d f32 = %.3f GB on %s; torch %s; median of %d" % (a.params, gb, dev, torch.__version__, a.reps))

    ms = statistics.median([dd_speed(a.dir, int(3 * a.params * 4 / 2**20)) for _ in range(a.reps)])
    print("dd bs=1M conv=fsync: %.0f ms (%.2f GB/s)" % (ms, gb / (ms / 1e3)))

    pt = os.path.join(a.dir, "state.pt")
    ms = timed(lambda: torch.save(state, pt), a.reps)
    print("torch.save: %.0f ms (%.2f GB/s)" % (ms, gb / (ms / 1e3)))

    def tload():
        s = torch.load(pt, map_location=dev)
        sync(dev)
        return s
    ms = timed(tload, a.reps)
    print("torch.load: %.0f ms (%.2f GB/s)" % (ms, gb / (ms / 1e3)))
    os.unlink(pt)

    try:
        from safetensors.torch import load_file, save_file
        st = os.path.join(a.dir, "state.safetensors")
        ms = timed(lambda: save_file(state, st), a.reps)
        print("safetensors save_file: %.0f ms (%.2f GB/s)" % (ms, gb / (ms / 1e3)))

        def sload():
            s = load_file(st, device=str(dev))
            sync(dev)
            return s
        ms = timed(sload, a.reps)
        print("safetensors load_file (to %s): %.0f ms (%.2f GB/s)" % (dev, ms, gb / (ms / 1e3)))
        os.unlink(st)
    except ImportError:
        print("safetensors is not installed: skipped")

    try:
        import shutil
        import torch.distributed as dist
        import torch.distributed.checkpoint as dcp
        os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
        os.environ.setdefault("MASTER_PORT", "29533")
        dist.init_process_group("gloo", rank=0, world_size=1)
        stalls, totals = [], []
        for r in range(a.reps + 1):                  # the first warms up
            out = os.path.join(a.dir, "dcp_%d" % r)
            t0 = time.perf_counter()
            fut = dcp.async_save(state, checkpoint_id=out)
            t1 = time.perf_counter()
            fut.result()
            t2 = time.perf_counter()
            if r:
                stalls.append((t1 - t0) * 1e3)
                totals.append((t2 - t0) * 1e3)
            shutil.rmtree(out, ignore_errors=True)
        dist.destroy_process_group()
        print("dcp.async_save: stall %.0f ms, whole save %.0f ms" % (statistics.median(stalls), statistics.median(totals)))
    except Exception as e:  # noqa: BLE001 - a reference only: report and go on
        print("dcp.async_save: skipped (%s)" % str(e).splitlines()[0][:120])


if __name__ == "__main__":
    main()
