"""compare_fixture.py A B: compares two PyTorch reference states of the same model (tests/gpt2_formats.md:
int32 header[256], then inputs, logits, loss, gradients, losses, hyperparameters): identical bytes, or
the largest relative difference of the float sections. Exit 1 when the headers or sizes differ."""
import struct
import sys

import numpy as np


def read(path):
    raw = open(path, "rb").read()
    head = struct.unpack("<256i", raw[:1024])
    return raw, head


def main():
    a_raw, a_head = read(sys.argv[1])
    b_raw, b_head = read(sys.argv[2])
    if a_raw == b_raw:
        print(f"fixture {sys.argv[1]}: regenerated file is bit-identical")
        return 0
    if a_head != b_head or len(a_raw) != len(b_raw):
        print(f"fixture {sys.argv[1]}: header or size differs from the regenerated one ({len(a_raw)} vs {len(b_raw)} bytes)")
        return 1
    B, T = a_head[2], a_head[3]
    ints = 2 * B * T
    a = np.frombuffer(a_raw[1024 + 4 * ints:], dtype="<f4").astype(np.float64)
    b = np.frombuffer(b_raw[1024 + 4 * ints:], dtype="<f4").astype(np.float64)
    same_ids = a_raw[1024:1024 + 4 * ints] == b_raw[1024:1024 + 4 * ints]
    rel = np.abs(a - b).max() / max(np.abs(a).max(), 1e-30)
    print(f"fixture {sys.argv[1]}: inputs {'equal' if same_ids else 'DIFFER'}, floats differ by at most {rel:.3g} (relative to the largest)")
    return 0 if same_ids else 1


if __name__ == "__main__":
    sys.exit(main())
