/* fuzz_tokenizer_files.c - libFuzzer target: bt_data.h's encoder.json and vocab.bpe readers on
   arbitrary bytes. Built and run by `make fuzz`; not part of make test. An input is a 4-byte
   little-endian length k, then k bytes of encoder.json, then vocab.bpe (a k past the end takes
   everything). Checks: the load fails with a message naming one of the two files, or it gives
   a tokenizer under which any bytes round-trip (decode(encode(x)) == x: every byte has a token)
   and every id is below the vocabulary size. */
#define _POSIX_C_SOURCE 200809L
#define BT_DATA_IMPLEMENTATION
#include "bt_data.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static char enc_path[64], voc_path[64];

static void put(const char *path, const uint8_t *p, size_t n) {
    FILE *f = fopen(path, "wb");
    if (!f || (n && fwrite(p, 1, n, f) != n)) abort();
    fclose(f);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    static const char probe[] = "Hello, world! It's 2024:\n\n\tcaf\xc3\xa9 \xe4\xb8\xad \xff\x80 'll  x";
    uint32_t k = 0;
    bt_tokenizer *t;
    if (!enc_path[0]) {
        const char *dir = access("/dev/shm", W_OK) == 0 ? "/dev/shm" : "/tmp";
        snprintf(enc_path, sizeof enc_path, "%s/bt_fuzz_enc.%ld.json", dir, (long)getpid());
        snprintf(voc_path, sizeof voc_path, "%s/bt_fuzz_voc.%ld.bpe", dir, (long)getpid());
    }
    if (size >= 4) { memcpy(&k, data, 4); data += 4; size -= 4; }
    if (k > size) k = (uint32_t)size;
    put(enc_path, data, k);
    put(voc_path, data + k, size - k);
    t = bt_tokenizer_load(enc_path, voc_path);
    if (!t) {
        if (!strstr(bt_data_error(), enc_path) && !strstr(bt_data_error(), voc_path)) abort();   /* errors name the file */
    } else {
        int32_t *ids;
        char *back;
        size_t n = bt_encode(t, probe, sizeof probe - 1, &ids), i, m;
        if (n == (size_t)-1) abort();
        for (i = 0; i < n; i++) if (ids[i] < 0 || ids[i] >= bt_tokenizer_vocab_size(t)) abort();
        m = bt_decode(t, ids, n, &back);
        if (m != sizeof probe - 1 || memcmp(back, probe, m) != 0) abort();
        free(ids); free(back);
        n = bt_encode(t, (const char *)data, size, &ids);   /* the input itself as text */
        if (n == (size_t)-1) abort();
        m = bt_decode(t, ids, n, &back);
        if (m != size || memcmp(back, data, size) != 0) abort();
        free(ids); free(back);
        bt_tokenizer_free(t);
    }
    remove(enc_path); remove(voc_path);
    return 0;
}
