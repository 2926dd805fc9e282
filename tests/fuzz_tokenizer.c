/* fuzz_tokenizer.c - libFuzzer target: bt_data.h's encode and decode on arbitrary bytes.
   Built and run by `make fuzz`; not part of make test. The tokenizer files come from
   $BT_ENCODER_JSON / $BT_VOCAB_BPE, else data/, else ../shared/data/gpt2-tokenizer.
   Checks: decode(encode(x)) == x for any bytes; encode never gives <|endoftext|> or an id out of
   range; decoding the input read as ids fails exactly when one id is out of range. */
#define _POSIX_C_SOURCE 200809L
#define BT_DATA_IMPLEMENTATION
#include "bt_data.h"
#include "tests/fuzz_tokenizer.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static bt_tokenizer *tok;

int LLVMFuzzerInitialize(int *argc, char ***argv) {
    (void)argc; (void)argv;
    tok = fuzz_load_tokenizer("fuzz_tokenizer");
    return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    int32_t *ids;
    char *back;
    size_t n = bt_encode(tok, (const char *)data, size, &ids), m, i;
    int bad = 0;
    if (n == (size_t)-1) abort();
    for (i = 0; i < n; i++) if (ids[i] < 0 || ids[i] >= BT_EOT) abort();
    m = bt_decode(tok, ids, n, &back);
    if (m != size || memcmp(back, data, size) != 0) abort();
    free(ids); free(back);
    /* the same bytes as little-endian uint16 ids, shifted so that some fall outside the vocabulary */
    {
        size_t k = size / 2;
        int32_t *x = (int32_t *)malloc((k ? k : 1) * sizeof(int32_t));
        for (i = 0; i < k; i++) {
            x[i] = (int32_t)(data[2 * i] | (data[2 * i + 1] << 8)) - 8;
            bad |= x[i] < 0 || x[i] > BT_EOT;
        }
        m = bt_decode(tok, x, k, &back);
        if ((m == (size_t)-1) != bad) abort();
        if (back) free(back);
        free(x);
    }
    return 0;
}
