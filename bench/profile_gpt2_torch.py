"""profile_gpt2_torch.py - part of make profile-gpt2 (bench/profile_gpt2.sh): where PyTorch eager's
GPT-2 training step spends GPU time: torch.profiler over one step after 3 warm-up steps, CUDA kernel
time summed per kernel name (train_gpt2's counterpart: bench/profile_gpt2_sum.py over ncu).
Usage: python3 bench/profile_gpt2_torch.py [fp32|tf32|bf16] [B] [T] [config]"""
import sys, os, collections
import torch
sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "tests"))
import gpt2_torch as g

prec = sys.argv[1] if len(sys.argv) > 1 else "fp32"
B = int(sys.argv[2]) if len(sys.argv) > 2 else 16
T = int(sys.argv[3]) if len(sys.argv) > 3 else 1024
autocast = g.configure(prec, "cuda")
cfg = g.CONFIGS[sys.argv[4] if len(sys.argv) > 4 else "d12"]
model = g.GPT(cfg, attention="sdpa").cuda()
opt = g.make_adamw(model, 6e-4, fused=True)
d = torch.randint(0, cfg.vocab_size, (B, T + 1), device="cuda")
x, y = d[:, :-1].contiguous(), d[:, 1:].contiguous()

def step():
    opt.zero_grad(set_to_none=True)
    with autocast():
        loss = model(x, y)[1]
    loss.backward()
    opt.step()

for _ in range(3):
    step()
torch.cuda.synchronize()
with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CUDA]) as prof:
    step()
    torch.cuda.synchronize()
tot, cnt = collections.Counter(), collections.Counter()
for e in prof.events():
    if e.device_type == torch.autograd.DeviceType.CUDA:
        name = e.name.split("(")[0].split("<")[0][:60]
        tot[name] += e.device_time / 1000.0
        cnt[name] += 1
s = sum(tot.values())
print(f"pytorch eager {prec}: kernel time of one step {s:.1f} ms over {sum(cnt.values())} kernels")
for k, v in tot.most_common(22):
    print(f"{v:8.2f} ms {100 * v / s:5.1f}% {cnt[k]:5d}x  {k}")
