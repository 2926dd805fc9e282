"""gpt2_ref.py: writes the PyTorch fixture that train_gpt2.c's GPT-2 step is checked against.

    python3 tests/gpt2_ref.py --config tiny                 # tests/fixtures/gpt2_tiny{,_state}.bin
    python3 tests/gpt2_ref.py --config d12 --B 4 --T 64     # GPT-2 124M (~1 GB of files)

Writes the initial model (or copies --model-in) and a state file: one fixed batch,
its logits, loss and gradients, then the losses of --steps AdamW steps on that
batch. Always fp32 with TF32 off and explicit (math) attention, so the numbers do
not depend on which fused kernels a torch build picks. Formats: tests/gpt2_formats.md.
"""
import argparse
import math
import os
import sys

os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")  # needed for deterministic cuBLAS
import torch  # noqa: E402

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import gpt2_torch as g  # noqa: E402

FIXTURES = os.path.join(os.path.dirname(os.path.abspath(__file__)), "fixtures")
DEFAULT_LR = {"tiny": 1e-3, "d12": 1e-4}


def parse_args():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--config", choices=sorted(g.CONFIGS),
                   help="model size (default tiny; with --model-in, must match the file if given)")
    p.add_argument("--B", type=int, default=4, help="batch size (default 4)")
    p.add_argument("--T", type=int, default=64, help="sequence length, <= maxT (default 64)")
    p.add_argument("--steps", type=int, default=10, help="AdamW steps on the batch (default 10)")
    p.add_argument("--lr", type=float, help="learning rate (default 1e-3 tiny, 1e-4 d12)")
    p.add_argument("--seed", type=int, default=1337, help="seed of the init and the batch")
    p.add_argument("--device", choices=["cuda", "cpu"],
                   default="cuda" if torch.cuda.is_available() else "cpu")
    p.add_argument("--no-logits", action="store_true", help="leave the (B,T,Vp) logits out of the state file")
    p.add_argument("--model-in", help="start from this model file instead of a fresh init")
    p.add_argument("--model-out", help="model file to write (default tests/fixtures/gpt2_<config>.bin)")
    p.add_argument("--state-out", help="state file to write (default tests/fixtures/gpt2_<config>_state.bin)")
    return p.parse_args()


def build_model(args):
    """Returns (model, config name or None)."""
    if args.model_in:
        model = g.read_model(args.model_in, attention="math")
        name = next((n for n, c in g.CONFIGS.items() if c == model.config), None)
        if args.config and g.CONFIGS[args.config] != model.config:
            sys.exit(f"--config {args.config} does not match {args.model_in}: {model.config}")
        return model, name
    name = args.config or "tiny"
    model = g.GPT(g.CONFIGS[name], attention="math")
    g.init_weights(model, args.seed)
    return model, name


def write_state(path, args, x, y, logits, loss, grads, losses, lr, cfg):
    B, T = x.shape
    with open(path, "wb") as f:
        f.write(g.pack_header(g.STATE_MAGIC, g.STATE_VERSION, B, T, cfg.vocab_size,
                              cfg.padded_vocab_size, len(losses), 0 if args.no_logits else 1))
        for ids in (x, y):
            f.write(ids.to("cpu", torch.int32).numpy().astype("<i4").tobytes())
        if not args.no_logits:
            g.write_floats(f, logits)
        g.write_floats(f, torch.tensor([loss]))
        for _, t in grads:
            g.write_floats(f, t)
        g.write_floats(f, torch.tensor(losses))
        g.write_floats(f, torch.tensor([lr, *g.BETAS, g.ADAM_EPS, g.WEIGHT_DECAY, 0.0, 0.0, 0.0]))
    expected = (4 * g.HEADER_INTS + 8 * B * T + (0 if args.no_logits else 4 * B * T * cfg.padded_vocab_size)
                + 4 + 4 * g.num_params(cfg) + 4 * len(losses) + 32)
    assert os.path.getsize(path) == expected, (path, os.path.getsize(path), expected)


def main():
    args = parse_args()
    g.configure("fp32", args.device)                  # TF32 off: the reference is plain fp32
    torch.use_deterministic_algorithms(True, warn_only=True)
    model, name = build_model(args)
    cfg = model.config
    lr = args.lr if args.lr is not None else DEFAULT_LR.get(name)
    if lr is None:
        sys.exit("the model file is not a named config: give --lr")
    if not 1 <= args.T <= cfg.max_seq_len or args.B < 1 or args.steps < 1:
        sys.exit(f"need B >= 1, 1 <= T <= maxT={cfg.max_seq_len}, steps >= 1")
    tag = name or "custom"
    model_out = args.model_out or os.path.join(FIXTURES, f"gpt2_{tag}.bin")
    state_out = args.state_out or os.path.join(FIXTURES, f"gpt2_{tag}_state.bin")
    for path in (model_out, state_out):
        os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    g.write_model(model_out, model)                   # the weights before any update
    model.to(args.device).train()

    # One batch like a real one: each row is a random sequence of T+1 tokens, y = x shifted by one.
    gen = torch.Generator().manual_seed(args.seed + 1)
    seq = torch.randint(0, cfg.vocab_size, (args.B, args.T + 1), generator=gen)
    x, y = seq[:, :-1].contiguous(), seq[:, 1:].contiguous()
    xd, yd = x.to(args.device), y.to(args.device)

    # AdamW on the same batch; step 0's forward/backward is the one recorded in detail,
    # so losses[0] equals the recorded loss bit for bit.
    opt = g.make_adamw(model, lr)
    losses = []
    for step in range(args.steps):
        opt.zero_grad(set_to_none=True)
        logits, loss = model(xd, yd)
        loss.backward()
        losses.append(loss.item())
        if step == 0:
            logits0 = None if args.no_logits else logits.detach().cpu()
            grads0 = [(n, t.cpu()) for n, t in g.file_tensors(model, grads=True)]
        opt.step()
        print(f"step {step:3d}  loss {losses[-1]:.6f}")

    write_state(state_out, args, x, y, logits0, losses[0], grads0, losses, lr, cfg)
    grad_norm = math.sqrt(sum(float(t.double().pow(2).sum()) for _, t in grads0))
    print(f"config {tag} {cfg}\nB={args.B} T={args.T} lr={lr} seed={args.seed} device={args.device}")
    print(f"loss {losses[0]:.6f} (ln V = {math.log(cfg.vocab_size):.6f})  grad norm {grad_norm:.6f}")
    print("losses " + " ".join(f"{l:.6f}" for l in losses))
    print(f"wrote {model_out}\nwrote {state_out}")


if __name__ == "__main__":
    main()
