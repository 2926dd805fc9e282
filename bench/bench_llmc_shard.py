"""bench_llmc_shard.py - part of make bench-llmc (bench/bench_llmc.sh): checks that token shards are
ones llm.c's train_gpt2cu reads as they are.

llm.c's shard: a 1024-byte header of 256 little-endian int32 (magic 20240520, version 1, token count,
the rest 0), then the tokens as uint16. bt_data.h writes its shards (make data) in that layout, so
llm.c trains on data/tinyshakespeare_train.bin itself; this checks the header and the file size and
every token against GPT-2's vocabulary (< 50257), naming the file and what is wrong.

Usage: python3 bench/bench_llmc_shard.py SHARD...   exit status 0 when every shard is good, else 1.
Needs only the standard library.
"""
import array
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


def main(paths):
    if not paths:
        print("usage: python3 bench/bench_llmc_shard.py SHARD...", file=sys.stderr)
        return 1
    try:
        for p in paths:
            print(f"{p}: {len(read_shard(p))} tokens, llm.c layout OK")
    except ShardError as e:
        print(f"bench_llmc_shard: {e}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
