#!/usr/bin/env python3
"""mc_torch.py - a multiple-choice set scored by transformers, the reference for --eval-mc.

The same conventions as trainer.h's trainer_eval_mc, written independently here: the context is
"ACTIVITY_LABEL: " + ctx when the item has an activity_label, else ctx; each ending is encoded
as " " + ending; an empty context is <|endoftext|>; an ending's loss is the sum over its tokens of
-log p(token | everything before it), in float64 from fp32 logits (TF32 off). Tokenized by the
`tokenizers` library's byte-level BPE from encoder.json and vocab.bpe (GPT-2's vocab.json and
merges.txt), not by our tokenizer.

    python3 tests/mc_torch.py --model DIR --set tests/fixtures/mc_wikitext.jsonl --tokenizer data \
        [--out ref.json] [--ours OUT/eval_mc.jsonl] [--tol 1e-4]

--out writes {"items": [{"loss": [...], "tokens": [...], "pred_sum": k, "pred_mean": k}, ...]};
--ours compares our per-ending losses (eval_mc.jsonl of --eval-only -o) with these: the largest
relative difference, the predictions, exit 1 when a loss differs by more than --tol or a
prediction differs.
"""
import argparse
import json
import sys

import torch
from tokenizers import Tokenizer, models, pre_tokenizers
from transformers import GPT2LMHeadModel


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", required=True)
    ap.add_argument("--set", required=True)
    ap.add_argument("--tokenizer", required=True, help="a directory with encoder.json and vocab.bpe")
    ap.add_argument("--out")
    ap.add_argument("--ours")
    ap.add_argument("--tol", type=float, default=1e-4)
    ap.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    a = ap.parse_args()
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    bpe = Tokenizer(models.BPE.from_file(a.tokenizer + "/encoder.json", a.tokenizer + "/vocab.bpe"))
    bpe.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)

    def encode(text):
        ids = bpe.encode(text).ids
        if text and not ids:
            sys.exit(f"mc_torch.py: the tokenizer gave no token for {text[:40]!r}")
        return ids
    model = GPT2LMHeadModel.from_pretrained(a.model, torch_dtype=torch.float32).to(a.device).eval()
    items = [json.loads(l) for l in open(a.set, encoding="utf-8") if l.strip()]
    out = []
    with torch.no_grad():
        for it in items:
            ctx = (it["activity_label"] + ": " if "activity_label" in it else "") + it["ctx"]
            cids = encode(ctx) if ctx else [50256]
            losses, counts = [], []
            for e in it["endings"]:
                eids = encode(" " + e)
                ids = torch.tensor([cids + eids], device=a.device)
                logp = model(ids[:, :-1]).logits[0].double().log_softmax(-1)
                tgt = ids[0, 1:]
                lp = logp.gather(1, tgt[:, None])[:, 0]
                losses.append(float(-lp[len(cids) - 1:].sum()))
                counts.append(len(eids))
            ps = min(range(len(losses)), key=lambda k: losses[k])
            pm = min(range(len(losses)), key=lambda k: losses[k] / counts[k])
            out.append({"loss": losses, "tokens": counts, "pred_sum": ps, "pred_mean": pm, "label": int(it["label"])})
    n = len(out)
    acc = sum(o["pred_sum"] == o["label"] for o in out) / n
    accm = sum(o["pred_mean"] == o["label"] for o in out) / n
    print(f"transformers: {n} items, accuracy {acc:.4f} by summed loss, {accm:.4f} by mean loss per token")
    if a.out:
        with open(a.out, "w") as f:
            json.dump({"model": a.model, "set": a.set, "acc": acc, "acc_mean": accm, "items": out}, f)
            f.write("\n")
    if a.ours:
        ours = [json.loads(l) for l in open(a.ours) if l.strip()]
        worst, bad = 0.0, 0
        if len(ours) != n:
            print(f"FAIL: {len(ours)} items in {a.ours}, {n} here")
            sys.exit(1)
        for o, r in zip(ours, out):
            if o["tokens"] != r["tokens"]:
                print(f"FAIL: item {o['item']}: tokens {o['tokens']} here {r['tokens']}")
                bad += 1
            for x, y in zip(o["loss"], r["loss"]):
                worst = max(worst, abs(x - y) / max(abs(y), 1e-12))
            bad += o["pred_sum"] != r["pred_sum"] or o["pred_mean"] != r["pred_mean"]
        ok = worst <= a.tol and bad == 0
        print(f"{'PASS' if ok else 'FAIL'}: ours vs transformers: largest relative loss difference {worst:.3g} (tol {a.tol:g}), "
              f"{bad} items with other tokens or predictions")
        sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()
