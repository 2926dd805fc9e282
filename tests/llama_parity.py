#!/usr/bin/env python3
"""llama_parity.py - llama.h / llama_io.h against transformers' LlamaForCausalLM, both ways.

    python3 tests/llama_parity.py [--cpu build/llama_logits] [--cuda build/llama_logits_cuda]
                                  [--out DIR] [--no-build]

Needs torch, transformers and safetensors (the GPU machine has them). Builds the two programs with
make unless --no-build (the CUDA one only where nvcc is). For each of two configs, with random
weights (the norms' too, so that a misplaced tensor shows) and grouped-query attention:
  A  4 layers, 8 heads, 2 key/value heads, C 256, F 512, V 1000, rope_theta 500000, untied head
  B  the same with rope_scaling llama3 (factor 8, low 1, high 4, original 32: T 64 crosses it) and
     tied embeddings
  1. save_pretrained (one file) and save_pretrained(max_shard_size="1MB") (shards and an index);
  2. transformers in fp32 (eager attention, TF32 off, on the CPU) on a fixed batch (B 2, T 64, one
     target ignored): logits, the mean cross-entropy, and every parameter's gradient;
  3. build/llama_logits on the CPU (and build/llama_logits_cuda on the GPU when there is one) on
     both directories: logits within 1e-5 relative (L2), the loss within 1e-5 relative, every
     gradient within 1e-4 relative, the sharded directory's logits identical to the single file's;
  4. our export (--export) read back by LlamaForCausalLM.from_pretrained: no missing or unexpected
     weights, the same loss (1e-6 relative).
The last line is "llama_parity: N passed, N failed" and then PASS or FAIL.
"""
import argparse
import os
import shutil
import subprocess
import sys

import numpy as np
import torch
import torch.nn.functional as F
from safetensors.numpy import load_file
from transformers import LlamaConfig, LlamaForCausalLM

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


def rel(a, b):
    return float(np.linalg.norm(np.asarray(a, np.float64) - np.asarray(b, np.float64)) / max(np.linalg.norm(np.asarray(b, np.float64)), 1e-30))


def make_config(scaled):
    kw = dict(vocab_size=1000, hidden_size=256, intermediate_size=512, num_hidden_layers=4, num_attention_heads=8,
              num_key_value_heads=2, max_position_embeddings=128, rms_norm_eps=1e-5, rope_theta=500000.0,
              tie_word_embeddings=scaled, hidden_act="silu", attention_bias=False, mlp_bias=False)
    if scaled:
        kw["rope_scaling"] = {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
                              "original_max_position_embeddings": 32}
    cfg = LlamaConfig(**kw)
    cfg._attn_implementation = "eager"
    return cfg


def load_hf(path):
    try:
        m, info = LlamaForCausalLM.from_pretrained(path, dtype=torch.float32, output_loading_info=True, attn_implementation="eager")
    except TypeError:   # transformers before 4.56 names it torch_dtype
        m, info = LlamaForCausalLM.from_pretrained(path, torch_dtype=torch.float32, output_loading_info=True, attn_implementation="eager")
    return m.eval(), info


def reference(model, ids, tg):
    """logits [B, T, V], the loss, {name: grad} of transformers in fp32"""
    model.zero_grad(set_to_none=True)
    logits = model(input_ids=torch.tensor(ids, dtype=torch.long)).logits
    loss = F.cross_entropy(logits.reshape(-1, logits.shape[-1]).float(), torch.tensor(tg, dtype=torch.long).reshape(-1), ignore_index=-1)
    loss.backward()
    grads = {n: p.grad.detach().numpy().copy() for n, p in model.named_parameters() if p.grad is not None}
    return logits.detach().numpy(), float(loss), grads


def ours(prog, model_dir, d, tag, device, export=None):
    out = os.path.join(d, f"ours_{tag}.safetensors")
    cmd = [prog, "--model", model_dir, "--tokens", os.path.join(d, "ids.bin"), "--targets", os.path.join(d, "tg.bin"),
           "--batch", "2", "--out", out, "--device", device]
    if export:
        cmd += ["--export", export]
    return load_file(out) if run(cmd) else None


def compare(got, ref, what, tied):
    logits, loss, grads = ref
    if got is None:
        check(False, f"{what}: the program failed")
        return
    e = rel(got["logits"], logits)
    check(e <= 1e-5, f"{what}: logits relative error {e:.2e} (max abs {float(np.abs(got['logits'] - logits).max()):.2e}, tolerance 1e-5)")
    e = abs(float(got["loss"][0]) - loss) / abs(loss)
    check(e <= 1e-5, f"{what}: loss {float(got['loss'][0]):.8f} vs {loss:.8f}, relative {e:.2e}")
    names = {k[len("grad."):] for k in got if k.startswith("grad.")}
    check(names == set(grads), f"{what}: gradients of the same tensors (ours only {sorted(names - set(grads))[:3]}, "
                               f"transformers' only {sorted(set(grads) - names)[:3]})")
    worst, wname = 0.0, ""
    for n in sorted(names & set(grads)):
        e = rel(got["grad." + n], grads[n])
        if e > worst:
            worst, wname = e, n
    check(worst <= 1e-4, f"{what}: every gradient within 1e-4 relative (worst {worst:.2e}, {wname})")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--cpu", default="build/llama_logits")
    ap.add_argument("--cuda", default="build/llama_logits_cuda")
    ap.add_argument("--out", default="/tmp/bt_llama_parity")
    ap.add_argument("--no-build", action="store_true")
    a = ap.parse_args()
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    nvcc = shutil.which("nvcc") or (os.path.exists("/usr/local/cuda/bin/nvcc") and "/usr/local/cuda/bin/nvcc")
    gpu = torch.cuda.is_available()
    if not a.no_build:
        targets = [a.cpu] + ([a.cuda] if nvcc else [])
        check(run(["make", "-j16", *targets]), "make " + " ".join(targets))
    os.makedirs(a.out, exist_ok=True)
    B, T = 2, 64
    for tag, scaled in (("A", False), ("B", True)):
        d = os.path.join(a.out, tag)
        shutil.rmtree(d, ignore_errors=True)
        os.makedirs(d)
        torch.manual_seed(1 + scaled)
        cfg = make_config(scaled)
        model = LlamaForCausalLM(cfg).float().eval()
        with torch.no_grad():
            for n, p in model.named_parameters():
                p.copy_(1.0 + 0.1 * torch.randn_like(p) if n.endswith("norm.weight") else 0.02 * torch.randn_like(p))
        what = f"{tag} ({'tied, llama3 rope' if scaled else 'untied'})"
        one, sharded = os.path.join(d, "hf"), os.path.join(d, "hf_sharded")
        model.save_pretrained(one)
        model.save_pretrained(sharded, max_shard_size="1MB")
        check(os.path.exists(os.path.join(sharded, "model.safetensors.index.json")), f"{what}: save_pretrained(max_shard_size) made shards and an index")
        g = torch.Generator().manual_seed(7)
        ids = torch.randint(0, cfg.vocab_size, (B, T), generator=g).numpy().astype(np.int32)
        tg = torch.randint(0, cfg.vocab_size, (B, T), generator=g).numpy().astype(np.int32)
        tg[0, 5] = -1
        ids.tofile(os.path.join(d, "ids.bin"))
        tg.tofile(os.path.join(d, "tg.bin"))
        ref = reference(model, ids, tg)

        exp = os.path.join(d, "export")
        cpu_one = ours(a.cpu, one, d, "cpu", "cpu", export=exp)
        compare(cpu_one, ref, f"{what} cpu, model.safetensors", scaled)
        cpu_sh = ours(a.cpu, sharded, d, "cpu_sharded", "cpu")
        compare(cpu_sh, ref, f"{what} cpu, shards + index", scaled)
        if cpu_one is not None and cpu_sh is not None:
            check(np.array_equal(cpu_one["logits"], cpu_sh["logits"]), f"{what}: the sharded directory gives the single file's logits bit for bit")
        if gpu and os.path.exists(a.cuda):
            compare(ours(a.cuda, sharded, d, "cuda", "cuda"), ref, f"{what} cuda, shards + index", scaled)
        else:
            print(f"skip {what} cuda: {'no GPU' if not gpu else a.cuda + ' not built'}")

        if os.path.exists(os.path.join(exp, "model.safetensors")):
            mx, info = load_hf(exp)
            missing = [k for k in info.get("missing_keys", []) if not (scaled and k == "lm_head.weight")]
            check(not missing and not info.get("unexpected_keys") and not info.get("mismatched_keys"),
                  f"{what}: from_pretrained(our export) loads every weight (missing {missing[:3]}, unexpected {list(info.get('unexpected_keys', []))[:3]})")
            _, loss_x, _ = reference(mx, ids, tg)
            e = abs(loss_x - ref[1]) / abs(ref[1])
            check(e <= 1e-6, f"{what}: transformers on our export: loss {loss_x:.8f} vs {ref[1]:.8f} (relative {e:.2e})")
        else:
            check(False, f"{what}: no export in {exp}")
    print(f"llama_parity: {passed} passed, {failed} failed")
    print("PASS" if not failed else "FAIL")
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
