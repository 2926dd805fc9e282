#!/usr/bin/env python3
"""ckpt_interop.py - bt_ckpt.h's files against Python's safetensors, both ways.

    python3 tests/ckpt_interop.py write DIR    # DIR/from_python.safetensors, by safetensors.torch.save_file
    BT_CKPT_INTEROP_DIR=DIR build/tests/test_ckpt   # test_python_interop reads it, writes DIR/from_c.safetensors
    python3 tests/ckpt_interop.py check DIR    # safetensors.torch.load_file(DIR/from_c.safetensors), unchanged

Every tensor of the set (every dtype bt_ckpt.h writes: F32 F64 BF16 F16 I32 I64 U16 U8, a 0-d
tensor, an empty one) holds value(k, i) = (37 i + 11 k) % 200, minus 100 for signed types, over
4 for floats: small integers and quarters, exact in every dtype, so both sides compare bit for bit.
`check` also recomputes our CRC32C of every tensor and of the header here, independently of the C
code. With --pure (or when torch/safetensors are not installed) both modes use a plain-Python
reader/writer of the format instead (the layout safetensors writes: tensors by descending dtype
alignment then name, header padded with spaces to 8 bytes), so the script also runs without torch.
The last line is "ckpt_interop: N passed, N failed".
"""
import json
import struct
import sys

NOTE = "h\u00e9llo \"quoted\"\n"
# (name, dtype, shape) in the order of rt_tensors in tests/test_ckpt.c; k is the index
TENSORS = [("f32", "F32", [3, 5]), ("f64", "F64", [7]), ("bf16", "BF16", [2, 3, 4]), ("f16", "F16", [6]),
           ("i32", "I32", [4, 4]), ("i64", "I64", [5]), ("u16", "U16", [9]), ("u8", "U8", [11]),
           ("scalar", "F32", []), ("empty", "I32", [3, 0])]
SIZES = {"F64": 8, "I64": 8, "F32": 4, "I32": 4, "BF16": 2, "F16": 2, "U16": 2, "U8": 1}
# safetensors' Dtype enum order (its writer sorts by it, descending)
ENUM_ORDER = ["BOOL", "U8", "I8", "I16", "U16", "F16", "BF16", "I32", "U32", "F32", "F64", "I64", "U64"]

passed = failed = 0


def check(cond, what):
    global passed, failed
    if cond:
        passed += 1
    else:
        failed += 1
        print("  FAIL " + what)


def numel(shape):
    n = 1
    for s in shape:
        n *= s
    return n


def value(k, i, dt):
    v = (i * 37 + k * 11) % 200
    if dt not in ("U16", "U8"):
        v -= 100
    return v / 4.0 if dt in ("F32", "F64", "BF16", "F16") else v


def pack(dt, vals):
    """little-endian bytes of vals in dtype dt (values exact in dt)"""
    if dt == "BF16":
        return b"".join(struct.pack("<I", struct.unpack("<I", struct.pack("<f", v))[0])[2:] for v in vals)
    fmt = {"F32": "f", "F64": "d", "F16": "e", "I32": "i", "I64": "q", "U16": "H", "U8": "B"}[dt]
    return struct.pack("<%d%s" % (len(vals), fmt), *vals)


def expected_bytes(k, name, dt, shape):
    return pack(dt, [value(k, i, dt) for i in range(numel(shape))])


# ---- CRC32C, written here from its definition (reflected polynomial 0x82F63B78) ----
_CRC_TABLE = []
for _b in range(256):
    _c = _b
    for _ in range(8):
        _c = (_c >> 1) ^ (0x82F63B78 if _c & 1 else 0)
    _CRC_TABLE.append(_c)


def crc32c(data, crc=0):
    crc ^= 0xFFFFFFFF
    for byte in data:
        crc = (crc >> 8) ^ _CRC_TABLE[(crc ^ byte) & 0xFF]
    return crc ^ 0xFFFFFFFF


# ---- the format in plain Python ----
def read_plain(path):
    with open(path, "rb") as f:
        raw = f.read()
    n = struct.unpack("<Q", raw[:8])[0]
    header = json.loads(raw[8:8 + n].decode("utf-8"))
    meta = header.pop("__metadata__", {})
    data = raw[8 + n:]
    tensors = {name: (e["dtype"], e["shape"], data[e["data_offsets"][0]:e["data_offsets"][1]]) for name, e in header.items()}
    return raw, n, meta, tensors


def write_plain(path, tensors, metadata):
    """tensors: {name: (dtype, shape, bytes)} laid out as safetensors' own writer does"""
    order = sorted(tensors, key=lambda nm: (-ENUM_ORDER.index(tensors[nm][0]), nm))
    header, off = {"__metadata__": metadata}, 0
    for nm in order:
        dt, shape, b = tensors[nm]
        header[nm] = {"dtype": dt, "shape": shape, "data_offsets": [off, off + len(b)]}
        off += len(b)
    text = json.dumps(header, separators=(",", ":"), ensure_ascii=False).encode("utf-8")
    text += b" " * (-len(text) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(text)) + text + b"".join(tensors[nm][2] for nm in order))


def have_torch():
    try:
        import safetensors.torch  # noqa: F401
        import torch  # noqa: F401
        return True
    except ImportError:
        return False


def torch_tensor(k, dt, shape):
    import torch
    tdt = {"F32": torch.float32, "F64": torch.float64, "BF16": torch.bfloat16, "F16": torch.float16, "I32": torch.int32,
           "I64": torch.int64, "U16": torch.uint16, "U8": torch.uint8}[dt]
    vals = [value(k, i, dt) for i in range(numel(shape))]
    base = torch.tensor(vals, dtype=torch.float64 if dt in ("F32", "F64", "BF16", "F16") else torch.int64)
    return base.to(tdt).reshape(shape)


def tensor_bytes(t):
    """the raw little-endian bytes of a CPU tensor (bf16 and uint16 seen as int16 for numpy)"""
    import torch
    t = t.contiguous().reshape(-1)
    if t.dtype in (torch.bfloat16, torch.uint16):
        t = t.view(torch.int16)
    return t.numpy().tobytes()


def do_write(d, pure):
    path = d + "/from_python.safetensors"
    if pure:
        write_plain(path, {nm: (dt, sh, expected_bytes(k, nm, dt, sh)) for k, (nm, dt, sh) in enumerate(TENSORS)}, {"note": NOTE})
    else:
        from safetensors.torch import save_file
        save_file({nm: torch_tensor(k, dt, sh) for k, (nm, dt, sh) in enumerate(TENSORS)}, path, metadata={"note": NOTE})
    print("wrote " + path + (" (plain Python)" if pure else " (safetensors.torch.save_file)"))


def check_checksums(raw, n, meta, tensors):
    """our CRC32C of each tensor and of the header, recomputed here"""
    check(meta.get("bt.checksum") == "crc32c", "bt.checksum is crc32c")
    for nm, (dt, sh, b) in tensors.items():
        check(meta.get("bt.crc32c." + nm) == "%08x" % crc32c(b), "checksum of " + nm)
    key = b'"bt.header_crc32c":"'
    pos = raw.index(key, 8) + len(key)
    stored = raw[pos:pos + 8].decode()
    computed = crc32c(raw[:pos] + b"00000000" + raw[pos + 8:8 + n])
    check(stored == "%08x" % computed, "header checksum: stored %s, computed %08x" % (stored, computed))
    check(n % 8 == 0, "header length %d is a multiple of 8" % n)


def do_check(d, pure):
    path = d + "/from_c.safetensors"
    raw, n, meta, tensors = read_plain(path)
    check_checksums(raw, n, meta, tensors)
    check(meta.get("note") == NOTE and meta.get("format") == "pt", "metadata note and format")
    if pure:
        for k, (nm, dt, sh) in enumerate(TENSORS):
            got = tensors.get(nm)
            check(got is not None and got[0] == dt and got[1] == sh and got[2] == expected_bytes(k, nm, dt, sh), "tensor " + nm)
        return
    import torch
    from safetensors import safe_open
    from safetensors.torch import load_file
    loaded = load_file(path)
    check(set(loaded) == {nm for nm, _, _ in TENSORS}, "tensor names: %s" % sorted(loaded))
    for k, (nm, dt, sh) in enumerate(TENSORS):
        want = torch_tensor(k, dt, sh)
        got = loaded.get(nm)
        ok = got is not None and got.dtype == want.dtype and list(got.shape) == sh
        check(ok and tensor_bytes(got) == expected_bytes(k, nm, dt, sh) == tensor_bytes(want),
              "tensor %s (%s %s) loads with safetensors.torch.load_file, bit-exact" % (nm, dt, sh))
    with safe_open(path, framework="pt") as f:
        m = f.metadata()
    check(m.get("note") == NOTE, "safe_open().metadata()['note']")
    if torch.cuda.is_available():
        g = load_file(path, device="cuda")
        check(torch.equal(g["f32"].cpu(), loaded["f32"]), "load_file to cuda")


def main():
    args = [a for a in sys.argv[1:] if not a.startswith("--")]
    pure = "--pure" in sys.argv or not have_torch()
    if len(args) != 2 or args[0] not in ("write", "check"):
        print(__doc__)
        return 2
    if args[0] == "write":
        do_write(args[1], pure)
        return 0
    do_check(args[1], pure)
    print("ckpt_interop%s: %d passed, %d failed" % (" (plain Python)" if pure else "", passed, failed))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
