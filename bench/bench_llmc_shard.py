"""llmc_data.py - writes a token shard in the layout llm.c's train_gpt2cu reads, from one of ours.

llm.c's shard: a 1024-byte header of 256 little-endian int32 (magic 20240520, version 1, token
count, the rest 0), then the tokens as uint16. bt_data.h writes its shards (make data ->
data/tinyshakespeare_{train,val}.bin) in that same layout, so the conversion is a checked copy:
the header and the file size are verified (a shard that llm.c would misread is refused with a
message naming the file), every token is checked against GPT-2's vocabulary (< 50257), and the
output is written to a temporary beside the target and renamed over it.

Usage (from the repository root):
  python3 bench/llmc_data.py data/tinyshakespeare_train.bin OUT/llmc_train.bin
  python3 bench/llmc_data.py data/tinyshakespeare_val.bin OUT/llmc_val.bin
  python3 bench/llmc_data.py --check FILE...      only verify FILE(s), write nothing
Exit status 0 on success, 1 with a message on stderr otherwise. Needs only the standard library.
"""
import array
import os
import struct
import sys

MAGIC, VERSION, HEADER_INTS = 20240520, 1, 256
HEADER_BYTES = 4 * HEADER_INTS
VOCAB = 50257   # GPT-2's vocabulary: train_gpt2cu embeds ids below this


class ShardError(Exception):
    pass


def read_shard(path):
    """the shard's tokens (array of uint16) after checking header, size and vocabulary"""
    try:
        with open(path, "rb") as f:
            raw = f.read()
    except OSError as e:
        raise ShardError(f"{path}: cannot read ({e.strerror})")
    if len(raw) < HEADER_BYTES:
        raise ShardError(f"{path}: {len(raw)} bytes, shorter than the {HEADER_BYTES}-byte shard header")
    magic, version, count = struct.unpack_from("<3i", raw, 0)
    if magic != MAGIC:
        raise ShardError(f"{path}: header magic {magic}, expected {MAGIC} (not a token shard)")
    if version != VERSION:
        raise ShardError(f"{path}: header version {version}, expected {VERSION} (uint16 tokens)")
    if count <= 0 or len(raw) != HEADER_BYTES + 2 * count:
        raise ShardError(f"{path}: header says {count} tokens, so {HEADER_BYTES + 2 * count} bytes, "
                         f"but the file has {len(raw)}")
    tokens = array.array("H")
    tokens.frombytes(raw[HEADER_BYTES:])
    if sys.byteorder != "little":
        tokens.byteswap()
    top = max(tokens)
    if top >= VOCAB:
        raise ShardError(f"{path}: token id {top} at index {tokens.index(top)} is outside GPT-2's vocabulary (< {VOCAB})")
    return tokens


def write_shard(path, tokens):
    header = struct.pack("<3i", MAGIC, VERSION, len(tokens)) + bytes(HEADER_BYTES - 12)
    body = array.array("H", tokens)
    if sys.byteorder != "little":
        body.byteswap()
    tmp = f"{path}.tmp.{os.getpid()}"
    try:
        with open(tmp, "wb") as f:
            f.write(header)
            f.write(body.tobytes())
        os.replace(tmp, path)
    except OSError as e:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise ShardError(f"{path}: cannot write ({e.strerror})")


def main(argv):
    if len(argv) >= 2 and argv[0] == "--check":
        for p in argv[1:]:
            n = len(read_shard(p))
            print(f"{p}: {n} tokens, llm.c layout OK")
        return 0
    if len(argv) != 2:
        print("usage: python3 bench/llmc_data.py SHARD OUT.bin   (or --check SHARD...)", file=sys.stderr)
        return 1
    src, dst = argv
    tokens = read_shard(src)
    write_shard(dst, tokens)
    read_shard(dst)   # what llm.c will read back
    print(f"{dst}: {len(tokens)} tokens from {src}")
    return 0


if __name__ == "__main__":
    try:
        sys.exit(main(sys.argv[1:]))
    except ShardError as e:
        print(f"llmc_data: {e}", file=sys.stderr)
        sys.exit(1)
