#!/usr/bin/env python3
"""hf_interop.py - train_gpt2's Hugging Face GPT-2 files against transformers, both ways.

    python3 tests/hf_interop.py --train build/train_gpt2_cuda --logits build/hf_logits_cuda \
        [--device cuda|cpu] [--out DIR]

Needs torch, transformers and safetensors (the GPU machine has them), and the Tiny Shakespeare
shards in data/ (train_gpt2 opens them even for -x 0). make test-gpu runs it (tests/gpu_suite.sh).
  1. transformers -> train_gpt2: a randomly initialised GPT2LMHeadModel of GPT-2 124M's config
     (every parameter drawn at random, biases and layernorms too, so that a transposed or
     misplaced tensor shows), saved with save_pretrained, loads with --init-from: hf_logits gives
     transformers' logits on 64 random tokens (fp32: relative error of the logits <= 1e-5).
  2. train_gpt2 -> transformers: that model exported again (--init-from A -x 0 --export-hf B), and a
     model that train_gpt2 trained a few steps (-e s4 -x 3 --export-hf C --save c.bin), load with
     GPT2LMHeadModel.from_pretrained (no missing or unexpected weights) and give our logits.
  3. safetensors.torch.load_file reads a train_gpt2 checkpoint unchanged.
The last line is "hf_interop: N passed, N failed".
"""
import argparse
import os
import subprocess
import sys

import numpy as np
import torch
from safetensors.torch import load_file
from transformers import GPT2Config, GPT2LMHeadModel

passed = failed = 0


def check(cond, what):
    global passed, failed
    passed += bool(cond)
    failed += not cond
    print(("ok   " if cond else "FAIL ") + what, flush=True)


def run(cmd):
    r = subprocess.run(cmd, capture_output=True, text=True)
    if r.returncode:
        print(f"  {' '.join(cmd)}: exit {r.returncode}\n{r.stdout[-2000:]}\n{r.stderr[-2000:]}")
    return r.returncode == 0


def load_hf(path, device):
    try:
        m, info = GPT2LMHeadModel.from_pretrained(path, dtype=torch.float32, output_loading_info=True)
    except TypeError:   # transformers before 4.56 names it torch_dtype
        m, info = GPT2LMHeadModel.from_pretrained(path, torch_dtype=torch.float32, output_loading_info=True)
    return m.to(device).eval(), info


def hf_logits(model, ids, device):
    with torch.no_grad():
        return model(torch.tensor(ids, dtype=torch.long, device=device)[None]).logits[0].float().cpu().numpy()


def our_logits(a, source, ids_path, out, n, V):
    flag = ["--init-from", source] if not source.endswith(".bin") else ["-e", source]
    if not run([a.logits, *flag, "--tokens", ids_path, "--out", out, "--device", a.device]):
        return None
    return np.fromfile(out, dtype=np.float32).reshape(n, V)


def compare(ours, ref, what, tol=1e-5):
    if ours is None:
        check(False, what + ": no logits")
        return
    rel = float(np.linalg.norm(ours - ref) / np.linalg.norm(ref))
    check(rel <= tol, f"{what}: relative error {rel:.2e} (max abs {float(np.abs(ours - ref).max()):.2e}, tolerance {tol:g})")


def clean_load(info, what):
    missing = [k for k in info.get("missing_keys", []) if k != "lm_head.weight"]
    unexpected = [k for k in info.get("unexpected_keys", []) if not k.endswith((".attn.bias", ".attn.masked_bias"))]
    check(not missing and not unexpected and not info.get("mismatched_keys"),
          f"{what}: from_pretrained loads every weight (missing {missing[:3]}, unexpected {unexpected[:3]})")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--train", default="build/train_gpt2_cuda")
    ap.add_argument("--logits", default="build/hf_logits_cuda")
    ap.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    ap.add_argument("--out", default="/tmp/bt_hf_interop")
    a = ap.parse_args()
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    os.makedirs(a.out, exist_ok=True)
    d = lambda *p: os.path.join(a.out, *p)
    dev = a.device
    run_args = ["-b", "1", "-t", "64", "-d", "64", "-v", "0", "-g", "0", "--device", dev, "--precision", "fp32"]

    # 1. transformers -> train_gpt2
    torch.manual_seed(0)
    cfg = GPT2Config()                    # GPT-2 124M: 12 layers, 12 heads, 768 wide, 1024 positions
    model = GPT2LMHeadModel(cfg).eval()
    with torch.no_grad():
        for name, p in model.named_parameters():
            ln = ".ln_" in name or "ln_f" in name
            p.copy_((1.0 if ln and name.endswith("weight") else 0.0) + (0.1 if ln else 0.02) * torch.randn_like(p))
    model.save_pretrained(d("a"))
    model = model.to(dev)
    n, V = 64, cfg.vocab_size
    ids = torch.randint(0, V, (n,), generator=torch.Generator().manual_seed(1)).tolist()
    np.array(ids, dtype=np.int32).tofile(d("ids.bin"))
    ref = hf_logits(model, ids, dev)
    compare(our_logits(a, d("a"), d("ids.bin"), d("ours_a.bin"), n, V), ref, "save_pretrained -> --init-from: our logits vs transformers'")

    # 2. train_gpt2 -> transformers: the same model exported back, and one we trained
    check(run([a.train, "--init-from", d("a"), "-x", "0", "--export-hf", d("b"), *run_args]), "--init-from A -x 0 --export-hf B")
    mb, info = load_hf(d("b"), dev)
    clean_load(info, "our export of the transformers model")
    compare(hf_logits(mb, ids, dev), ref, "--export-hf -> from_pretrained: its logits vs the original's")
    check(run([a.train, "-e", "s4", "-x", "3", "-b", "4", "-t", "64", "-v", "0", "-g", "0", "--device", dev,
               "--export-hf", d("c"), "--save", d("c.bin"), "--ckpt-dir", d("ckpt")]), "train s4 3 steps, --export-hf C")
    mc, info = load_hf(d("c"), dev)
    clean_load(info, "our export of a trained model")
    compare(our_logits(a, d("c.bin"), d("ids.bin"), d("ours_c.bin"), n, V), hf_logits(mc, ids, dev),
            "a trained model: from_pretrained(C) logits vs ours")

    # 3. a checkpoint, read by safetensors unchanged
    ck = d("ckpt", "ckpt_000000003.safetensors")
    t = load_file(ck) if os.path.exists(ck) else {}
    np_ = sum(p.numel() for p in mc.parameters()) + (50304 - V) * 128   # s4's padded vocabulary
    check(set(t) == {"params", "adamw.m", "adamw.v"} and all(v.dtype == torch.float32 and v.numel() == np_ for v in t.values()),
          f"safetensors.torch.load_file({ck}): params, adamw.m, adamw.v of {np_} f32 each")
    print(f"hf_interop: {passed} passed, {failed} failed")
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
