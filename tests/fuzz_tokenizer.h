/* fuzz_tokenizer.h - the GPT-2 tokenizer the libFuzzer targets load once: the files named by
   $BT_ENCODER_JSON and $BT_VOCAB_BPE, else data/'s, else ../shared/data/gpt2-tokenizer's.
   Include after bt_data.h (or tools/bt_tokenize.c). */
#ifndef FUZZ_TOKENIZER_H
#define FUZZ_TOKENIZER_H
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

/* the tokenizer, or the process ends naming who could not load it and why */
static bt_tokenizer *fuzz_load_tokenizer(const char *who) {
    const char *e = getenv("BT_ENCODER_JSON"), *v = getenv("BT_VOCAB_BPE");
    if (!e || !v) {
        if (access("data/encoder.json", R_OK) == 0) { e = "data/encoder.json"; v = "data/vocab.bpe"; }
        else { e = "../shared/data/gpt2-tokenizer/encoder.json"; v = "../shared/data/gpt2-tokenizer/vocab.bpe"; }
    }
    bt_tokenizer *tok = bt_tokenizer_load(e, v);
    if (!tok) { fprintf(stderr, "%s: %s\n", who, bt_data_error()); exit(1); }
    return tok;
}
#endif
