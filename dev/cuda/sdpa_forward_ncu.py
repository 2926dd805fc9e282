"""sdpa_forward_ncu.py - one causal SDPA forward at the GPT-2 shape (B 16, H 12, T 1024, D 64, bf16, q k v
views of one [B, T, 3, H, D] buffer) inside cudaProfilerStart/Stop, for
`ncu --profile-from-start off python3 dev/cuda/sdpa_forward_ncu.py [cudnn|flash]`: the backend's kernel alone,
after warm-up calls outside the profiled range."""
import sys
import torch
import torch.nn.functional as F
from torch.nn.attention import sdpa_kernel, SDPBackend

backend = {"cudnn": SDPBackend.CUDNN_ATTENTION, "flash": SDPBackend.FLASH_ATTENTION}[sys.argv[1] if len(sys.argv) > 1 else "cudnn"]
B, H, T, D = 16, 12, 1024, 64
g = torch.Generator(device="cuda").manual_seed(1)
qkv = torch.randn(B, T, 3, H, D, device="cuda", dtype=torch.bfloat16, generator=g)
q, k, v = (qkv[:, :, i].transpose(1, 2) for i in range(3))
with sdpa_kernel([backend]), torch.no_grad():
    for _ in range(3):
        F.scaled_dot_product_attention(q, k, v, is_causal=True)
    torch.cuda.synchronize()
    torch.cuda.cudart().cudaProfilerStart()
    F.scaled_dot_product_attention(q, k, v, is_causal=True)
    torch.cuda.synchronize()
    torch.cuda.cudart().cudaProfilerStop()
