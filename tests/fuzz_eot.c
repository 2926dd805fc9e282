/* fuzz_eot.c - libFuzzer target: bt_tokenize's --eot document splitting on arbitrary text.
   Built and run by `make fuzz`; not part of make test. The tokenizer files come from
   $BT_ENCODER_JSON / $BT_VOCAB_BPE, else data/, else ../shared/data/gpt2-tokenizer. Check: the
   ids decode to llm.c's "<|endoftext|>" + text.replace("\n\n", "\n\n<|endoftext|>"), with one
   <|endoftext|> id per document and none inside one. */
#define BT_TOKENIZE_NO_MAIN
#include "tools/bt_tokenize.c"
#include "tests/fuzz_tokenizer.h"

static bt_tokenizer *tok;

int LLVMFuzzerInitialize(int *argc, char ***argv) {
    (void)argc; (void)argv;
    tok = fuzz_load_tokenizer("fuzz_eot");
    return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    static const char eot[] = "<|endoftext|>";
    const char *text = (const char *)data;
    int32_t *ids = NULL;
    size_t cap = 0, n = encode_documents(tok, BT_EOT, text, size, &ids, 0, &cap), i, want_len = 13, w = 0, eots = 0, docs = 1, m;
    char *want, *back;
    if (n == (size_t)-1) abort();
    for (i = 0; i + 1 < size; i++) if (text[i] == '\n' && text[i + 1] == '\n') { docs++; i++; }   /* non-overlapping, left to right */
    want = (char *)malloc(size + 13 * docs + 1);
    memcpy(want, eot, 13);
    for (i = 0; i < size; i++) {
        want[13 + w++] = text[i];
        if (text[i] == '\n' && i + 1 < size && text[i + 1] == '\n') { want[13 + w++] = '\n'; i++; memcpy(want + 13 + w, eot, 13); w += 13; }
    }
    want_len = 13 + w;
    for (i = 0; i < n; i++) eots += ids[i] == BT_EOT;
    if (eots != docs) abort();
    m = bt_decode(tok, ids, n, &back);
    if (m != want_len || memcmp(back, want, m) != 0) abort();
    free(back); free(want); free(ids);
    return 0;
}
