#!/usr/bin/env python3
"""The ids the Hugging Face `tokenizers` library gives, for tests/test_hf_tokenizer.c to compare with
bt_data.h's bt_tokenizer_load_hf (run where `tokenizers` is installed, e.g. the GPU machine).

Trains a byte-level BPE on WikiText-2 (train.txt) the way Llama 3's tokenizer is built: pre_tokenizer
Sequence[Split(Regex(LLAMA3), "isolated"), ByteLevel(add_prefix_space=False, use_regex=False)],
decoder ByteLevel, all 256 bytes in the vocabulary, special tokens <|begin_of_text|> and <|end_of_text|>
added after it (ids past the model's vocabulary, as in Llama 3). It writes three variants, each in a
directory of OUT:
    llama3_ignore/   Llama 3's split, model.ignore_merges true (as Llama 3 sets it)
    llama3_merges/   the same model with ignore_merges false
    gpt2/            a BPE trained with GPT-2's pre-tokenizer, ByteLevel(use_regex=True)
and in each: tokenizer.json; for each text NAME.txt (its UTF-8 bytes) and NAME.ids (the ids of
encode(text, add_special_tokens=False), int32 little-endian); index.json
    {"tokenizers": version, "texts": [{"name", "bytes", "count", "splits": [byte lengths]?}],
     "decode": [{"ids": [...], "text": "..."}]}
A text with "splits" is several texts back to back, each encoded alone (the test strings: the
inputs of tests/fixtures/llama3_pretok.txt and gpt2_pretok.txt). Then, on that machine:

    python3 tests/hf_tokenizer_check.py --out /tmp/hf_check           # the whole of WikiText-2
    make build/tests/test_hf_tokenizer && build/tests/test_hf_tokenizer /tmp/hf_check
    # a fixture small enough to commit (tests/fixtures/hf_check is checked by make test):
    python3 tests/hf_tokenizer_check.py --out tests/fixtures/hf_check --subset-bytes 200000

Options: --wikitext DIR (train.txt, valid.txt, test.txt; default ../shared/data/wikitext-2, else
shared/data/wikitext-2), --vocab-size N (8000), --subset-bytes N (0: whole files; else each file cut
at its last newline before N bytes; training always reads all of train.txt)."""
import argparse
import json
import os
import struct
import sys

from tokenizers import Regex, Tokenizer, decoders, models, pre_tokenizers, trainers
import tokenizers

LLAMA3 = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|"
          r"\s*[\r\n]+|\s+(?!\S)|\s+")
SPECIAL = ["<|begin_of_text|>", "<|end_of_text|>"]
HERE = os.path.dirname(os.path.abspath(__file__))


def train(files, vocab_size, llama3):
    tok = Tokenizer(models.BPE())
    if llama3:
        tok.pre_tokenizer = pre_tokenizers.Sequence([
            pre_tokenizers.Split(Regex(LLAMA3), behavior="isolated", invert=False),
            pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)])
    else:
        tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=vocab_size, min_frequency=2, show_progress=False,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), special_tokens=[])
    tok.train(files, trainer)
    tok.add_special_tokens(SPECIAL)
    return tok


def with_ignore_merges(tok, flag):
    d = json.loads(tok.to_str())
    d["model"]["ignore_merges"] = flag
    t2 = Tokenizer.from_str(json.dumps(d))
    if json.loads(t2.to_str())["model"].get("ignore_merges") != flag:
        sys.exit("this tokenizers (%s) does not know model.ignore_merges: install 0.19 or newer" % tokenizers.__version__)
    return t2


def fixture_cases():
    cases = []
    for name in ("llama3_pretok.txt", "gpt2_pretok.txt"):
        path = os.path.join(HERE, "fixtures", name)
        if not os.path.exists(path):
            continue
        for line in open(path, encoding="ascii"):
            if line.startswith("#") or "\t" not in line:
                continue
            s = bytes.fromhex(line.split("\t")[0]).decode("utf-8")
            if s and not any(sp in s for sp in SPECIAL):   # tokenizers would match those as special tokens
                cases.append(s)
    return cases


def write_variant(out, tok, texts, cases):
    os.makedirs(out, exist_ok=True)
    tok.save(os.path.join(out, "tokenizer.json"))
    index = {"tokenizers": tokenizers.__version__, "texts": [], "decode": []}
    for name, text in texts:
        ids = tok.encode(text, add_special_tokens=False).ids
        data = text.encode("utf-8")
        open(os.path.join(out, name + ".txt"), "wb").write(data)
        open(os.path.join(out, name + ".ids"), "wb").write(struct.pack("<%di" % len(ids), *ids))
        index["texts"].append({"name": name, "bytes": len(data), "count": len(ids)})
    ids, splits = [], []
    for s in cases:
        ids += tok.encode(s, add_special_tokens=False).ids
        splits.append(len(s.encode("utf-8")))
    open(os.path.join(out, "cases.txt"), "wb").write("".join(cases).encode("utf-8"))
    open(os.path.join(out, "cases.ids"), "wb").write(struct.pack("<%di" % len(ids), *ids))
    index["texts"].append({"name": "cases", "bytes": sum(splits), "count": len(ids), "splits": splits})
    bos, eos = tok.token_to_id(SPECIAL[0]), tok.token_to_id(SPECIAL[1])
    for s in ["Hello world", "I'M HERE 1234567\r\n\r\n", "na\u00efve \u4e2d\u6587 \U0001f600"]:
        d_ids = [bos] + tok.encode(s, add_special_tokens=False).ids + [eos]
        index["decode"].append({"ids": d_ids, "text": tok.decode(d_ids, skip_special_tokens=False)})
    json.dump(index, open(os.path.join(out, "index.json"), "w"), indent=1, ensure_ascii=False)
    return {name: tok.encode(text, add_special_tokens=False).ids for name, text in texts[:1]}


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--wikitext", default=None)
    ap.add_argument("--out", default=os.path.join(HERE, "fixtures", "hf_check"))
    ap.add_argument("--vocab-size", type=int, default=8000)
    ap.add_argument("--subset-bytes", type=int, default=0)
    a = ap.parse_args()
    wt = a.wikitext or next((d for d in ("../shared/data/wikitext-2", "shared/data/wikitext-2")
                             if os.path.exists(os.path.join(d, "train.txt"))), None)
    if not wt:
        sys.exit("WikiText-2 not found: give --wikitext DIR (with train.txt, valid.txt, test.txt)")
    texts = []
    for name in ("valid", "test", "train"):
        text = open(os.path.join(wt, name + ".txt"), encoding="utf-8", newline="").read()
        if a.subset_bytes and len(text.encode("utf-8")) > a.subset_bytes:
            cut = text.encode("utf-8")[:a.subset_bytes].decode("utf-8", "ignore")
            text = cut[:cut.rfind("\n") + 1] or cut
        texts.append(("wikitext2_" + name, text))
    cases = fixture_cases()
    print("tokenizers %s; WikiText-2 from %s; %d test strings" % (tokenizers.__version__, wt, len(cases)))
    files = [os.path.join(wt, "train.txt")]
    l3 = train(files, a.vocab_size, True)
    first = {}
    for sub, tok in (("llama3_ignore", with_ignore_merges(l3, True)), ("llama3_merges", with_ignore_merges(l3, False)),
                     ("gpt2", train(files, a.vocab_size, False))):
        first[sub] = write_variant(os.path.join(a.out, sub), tok, texts, cases)
        print("wrote", os.path.join(a.out, sub), "vocab", tok.get_vocab_size())
    x, y = first["llama3_ignore"]["wikitext2_valid"], first["llama3_merges"]["wikitext2_valid"]
    print("ignore_merges changes the ids of WikiText-2 valid: %d vs %d tokens%s" %
          (len(x), len(y), "" if x != y else " (no difference: ignore_merges is not exercised by this text)"))


if __name__ == "__main__":
    main()
