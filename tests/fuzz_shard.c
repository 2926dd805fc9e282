/* fuzz_shard.c - libFuzzer target: bt_data.h's shard reader and loader on arbitrary file bytes
   (either layout: uint16 tokens, magic 20240520, or uint32, magic 20240801).
   Built and run by `make fuzz` (clang -fsanitize=fuzzer,address,undefined); not part of make test.
   Each input is written to a private temp file and opened as a shard: the open must either fail
   with a message naming the file, or give n tokens that all lie inside the file; then a loader
   over it (B and T from the input) must read batches within the shard. */
#define _POSIX_C_SOURCE 200809L
#define BT_DATA_IMPLEMENTATION
#include "bt_data.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static char path[64];

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    FILE *f;
    bt_shard s;
    if (!path[0]) {
        snprintf(path, sizeof path, "%s/bt_fuzz_shard.%ld.bin", access("/dev/shm", W_OK) == 0 ? "/dev/shm" : "/tmp", (long)getpid());
    }
    f = fopen(path, "wb");
    if (!f) abort();
    if (size && fwrite(data, 1, size, f) != size) abort();
    fclose(f);
    if (bt_shard_open(&s, path) == 0) {
        size_t i;
        unsigned sum = 0;
        if (s.n * (size_t)s.width + BT_SHARD_HEADER_BYTES != size || (s.width == 4 ? !s.tokens32 || s.tokens : !s.tokens || s.tokens32)) abort();
        for (i = 0; i < s.n; i++) sum += bt_shard_token(&s, i);
        if (sum == 0xFFFFFFFFu) fprintf(stderr, "%u\n", sum);   /* keep the reads */
        (void)bt_shard_check_vocab(&s, path, 50257);
        bt_shard_close(&s);
        {
            int B = 1 + (size > 20 ? data[20] % 4 : 0), T = 1 + (size > 21 ? data[21] % 16 : 0);
            int world = 1 + (size > 22 ? data[22] % 3 : 0), rank = size > 23 ? data[23] % world : 0;
            bt_loader *L = bt_loader_open(path, B, T, rank, world, size > 24 ? data[24] & 1 : 1, 99);
            /* uint32 ids past int32 are refused (naming the file) by check_vocab and by next */
            if (L && bt_loader_check_vocab(L, 0x7FFFFFFF) != 0) {
                if (!strstr(bt_data_error(), path)) abort();
                bt_loader_close(L);
            } else if (L) {
                int32_t in[4 * 16], tg[4 * 16];
                size_t k, nb = bt_loader_num_batches(L);
                bt_loader_state st;
                for (k = 0; k < 2 * nb + 1 && k < 64; k++)
                    if (bt_loader_next(L, in, tg) != 0) abort();
                bt_loader_get_state(L, &st);
                if (bt_loader_set_state(L, &st) != 0) abort();
                bt_loader_close(L);
            } else if (!strstr(bt_data_error(), path)) abort();
        }
    } else {
        if (!strstr(bt_data_error(), path)) abort();   /* every error names the file */
        if (s.tokens || s.tokens32 || s.n || s.width) abort();
    }
    remove(path);
    return 0;
}
