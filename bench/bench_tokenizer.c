/* bench_tokenizer.c - GPT-2 encoding speed of bt_data.h (make bench-tokenizer), measured like bench_tokenizer.js:
   the same input files, wall time of encoding only (the file is already in memory and the
   tokenizer loaded), one thread. "cold" is the first pass with an empty merge cache (as in a
   fresh process); "warm" is the median of 5 further passes.
     build/bench_tokenizer ENCODER.json VOCAB.bpe FILE...       (make bench-tokenizer) */
#define _POSIX_C_SOURCE 200809L
#define BT_DATA_IMPLEMENTATION
#include "bt_data.h"

#include <stdio.h>
#include <stdlib.h>
#include <time.h>

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

int main(int argc, char **argv) {
    bt_tokenizer *tok;
    double t0, tl;
    int a;
    if (argc < 4) { fprintf(stderr, "usage: %s ENCODER.json VOCAB.bpe FILE...\n", argv[0]); return 2; }
    t0 = now_s();
    tok = bt_tokenizer_load(argv[1], argv[2]);
    tl = now_s() - t0;
    if (!tok) { fprintf(stderr, "%s\n", bt_data_error()); return 1; }
    printf("bt_data.h (C): tokenizer load %.1f ms\n", 1e3 * tl);
    for (a = 3; a < argc; a++) {
        FILE *f = fopen(argv[a], "rb");
        char *text;
        long len;
        size_t n = 0;
        double cold, warm[5];
        int r;
        if (!f) { perror(argv[a]); return 1; }
        fseek(f, 0, SEEK_END); len = ftell(f); fseek(f, 0, SEEK_SET);
        text = (char *)malloc((size_t)len + 1);
        if (!text || fread(text, 1, (size_t)len, f) != (size_t)len) { fprintf(stderr, "%s: read error\n", argv[a]); return 1; }
        fclose(f);
        for (r = -1; r < 5; r++) {
            int32_t *ids;
            double t;
            if (r < 0) bt_tokenizer_clear_cache(tok);
            t = now_s();
            n = bt_encode(tok, text, (size_t)len, &ids);
            t = now_s() - t;
            free(ids);
            if (r < 0) cold = t; else warm[r] = t;
        }
        qsort(warm, 5, sizeof warm[0], cmp_double);
        printf("bt_data.h (C)  %-45s %9ld bytes %8zu tokens  cold %7.1f MB/s  warm %7.1f MB/s\n", argv[a], len, n,
               (double)len / cold / 1e6, (double)len / warm[2] / 1e6);
        free(text);
    }
    bt_tokenizer_free(tok);
    return 0;
}
