#!/usr/bin/env python3
"""make_mc_fixture.py - tests/fixtures/mc_wikitext.jsonl: a multiple-choice set in HellaSwag's
JSON-lines format built from WikiText-2's test split, for the --eval-mc tests.

Each item is a sentence cut into a context (its first words, or the sentence before it too) and
its true ending (the rest), with distractor endings taken from other sentences of the split: a
model that has learned English ranks the true ending first more often than chance. The items vary
on purpose: contexts of 1 to ~60 words, endings of 1 to ~40 words, 2 to 6 endings (HellaSwag has
4), about a third with an "activity_label", labels in every position, text with quotes, unicode
and digits (WikiText's). Deterministic (a fixed seed): run it again and the file is the same.

    python3 tests/make_mc_fixture.py ../shared/data/wikitext-2/test.txt tests/fixtures/mc_wikitext.jsonl
"""
import json
import random
import re
import sys


def sentences(text):
    out = []
    for line in text.split("\n"):
        line = line.strip()
        if not line or line.startswith("="):
            continue
        for s in re.split(r"(?<=[.!?]) (?=[A-Z])", line):
            w = s.split()
            if 4 <= len(w) <= 70:
                out.append(s)
    return out


def main():
    src, dst = sys.argv[1], sys.argv[2]
    rng = random.Random(20261202)
    sents = sentences(open(src, encoding="utf-8").read())
    labels = ["Reading an article", "History", "Music", "Sports", "Science"]
    items = []
    picks = rng.sample(range(1, len(sents)), 64)
    for n, i in enumerate(picks):
        words = sents[i].split()
        cut = rng.randint(1, len(words) - 1) if n % 7 else 1          # some one-word contexts
        ctx = " ".join(words[:cut])
        if n % 5 == 0:                                               # some long contexts: the sentence before too
            ctx = sents[i - 1] + " " + ctx
        true_end = " ".join(words[cut:])
        k = [4, 4, 4, 2, 3, 5, 6][n % 7]
        endings = [true_end]
        while len(endings) < k:
            w = sents[rng.randrange(len(sents))].split()
            a = rng.randint(0, max(0, len(w) - 2))
            e = " ".join(w[a:a + rng.randint(1, 40)])
            if e and e not in endings:
                endings.append(e)
        order = list(range(k))
        rng.shuffle(order)
        item = {"ind": n, "ctx": ctx, "endings": [endings[j] for j in order], "label": order.index(0), "split": "test"}
        if n % 3 == 0:
            item = {"activity_label": labels[n % len(labels)], **item}
        items.append(item)
    with open(dst, "w", encoding="utf-8") as f:
        for it in items:
            f.write(json.dumps(it, ensure_ascii=(it["ind"] % 2 == 0)) + "\n")   # both escaped and raw unicode


if __name__ == "__main__":
    main()
