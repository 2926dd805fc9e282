#!/usr/bin/env python3
"""fuzz_seeds.py - seed inputs for the fuzz targets of files (make fuzz runs it).

    python3 tests/fuzz_seeds.py OUT_DIR ENCODER.json VOCAB.bpe

OUT_DIR/corpus_tokenizer_files: small tokenizers (GPT-2's first 300 tokens and their 44 merges)
in fuzz_tokenizer_files's format (4-byte little-endian length of encoder.json, encoder.json,
vocab.bpe). OUT_DIR/corpus_model_file: tiny model files of llm.c's layout (fuzz_model_file).
OUT_DIR/corpus_eot: texts with blank lines (fuzz_eot)."""
import json
import os
import struct
import sys


def model_file(L, H, C, maxT, V, Vp):
    n = Vp * C + maxT * C + L * (2 * C + 3 * C * C + 3 * C + C * C + C + 2 * C + 4 * C * C + 4 * C + 4 * C * C + C) + 2 * C
    header = [20240326, 3, maxT, V, L, H, C, Vp] + [0] * 248
    return struct.pack("<256i", *header) + struct.pack("<%df" % n, *[0.01 * ((i * 7) % 13 - 6) for i in range(n)])


def main():
    out, enc_path, voc_path = sys.argv[1:4]
    for d in ("corpus_tokenizer_files", "corpus_model_file", "corpus_eot"):
        os.makedirs(os.path.join(out, d), exist_ok=True)
    enc = json.load(open(enc_path, encoding="utf-8"))
    merges = open(voc_path, encoding="utf-8").read().split("\n")
    for k, (ntok, nmerge) in enumerate([(300, 44), (256, 0), (280, 24)]):
        e = json.dumps({t: i for t, i in enc.items() if i < ntok}).encode()
        v = ("\n".join(merges[: 1 + nmerge]) + "\n").encode()
        open(os.path.join(out, "corpus_tokenizer_files", "seed_%d" % k), "wb").write(struct.pack("<I", len(e)) + e + v)
    for k, cfg in enumerate([(1, 2, 4, 8, 100, 128), (2, 1, 2, 4, 60, 64), (1, 1, 1, 1, 1, 1)]):
        open(os.path.join(out, "corpus_model_file", "seed_%d" % k), "wb").write(model_file(*cfg))
    for k, text in enumerate(["First doc.\n\nSecond doc.\n\n\nThird\n\n", "a\n\n\n\nb", "\n\n", "no blank lines\n",
                              "caf\u00e9 \u4e2d\n\n'll 2024\r\n\r\n\n\n\t x"]):
        open(os.path.join(out, "corpus_eot", "seed_%d" % k), "wb").write(text.encode())


if __name__ == "__main__":
    main()
