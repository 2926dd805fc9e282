/* fuzz_ckpt.c - libFuzzer target: bt_ckpt.h's safetensors reader and strict JSON parser on
   arbitrary bytes. Built and run by `make fuzz` (clang -fsanitize=fuzzer,address,undefined); not
   part of make test. Each input is opened as a checkpoint from memory: the open must either fail
   with a message naming the file, or give tensors that tile the input exactly; every tensor is
   then read and verified. The same bytes go to the JSON parser alone, and a document it accepts
   must come back unchanged through the JSON writer. With BT_FUZZ_SEEDS=DIR set, the first call
   writes seed files there (checkpoints with and without checksums) to start the corpus. */
#define _POSIX_C_SOURCE 200809L
#define BT_ALLOC_IMPLEMENTATION
#define BT_TENSOR_IMPLEMENTATION
#define BT_DATA_IMPLEMENTATION
#define BT_CKPT_IMPLEMENTATION
#include "bt_ckpt.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void write_seeds(const char *dir) {
    static const char *foreign =
        "{\"__metadata__\":{\"format\":\"pt\"},\"b\":{\"dtype\":\"I64\",\"shape\":[2],\"data_offsets\":[0,16]},"
        "\"a\":{\"dtype\":\"F32\",\"shape\":[2,2],\"data_offsets\":[16,32]},\"c\":{\"dtype\":\"U8\",\"shape\":[3],\"data_offsets\":[32,35]}}";
    unsigned char data[35], len8[8];
    char path[1024];
    int64_t shape[2] = {2, 3};
    float f[6] = {1, -2, 3.5f, 0, 1e-3f, 7};
    uint16_t h[3] = {1, 2, 0xffff};
    size_t i, jl = strlen(foreign);
    bt_ckpt_writer *w = bt_ckpt_writer_new();
    FILE *fp;
    bt_ckpt_writer_add(w, "w", BT_CKPT_F32, 2, shape, f);
    bt_ckpt_writer_add(w, "h", BT_CKPT_BF16, 1, (int64_t[]){3}, h);
    bt_ckpt_writer_add(w, "s", BT_CKPT_I32, 0, NULL, f);
    bt_ckpt_meta_set(bt_ckpt_writer_meta(w), "step", "12");
    snprintf(path, sizeof path, "%s/seed_ours.safetensors", dir);
    if (bt_ckpt_writer_save(w, path)) fprintf(stderr, "seed: %s\n", bt_ckpt_error());
    bt_ckpt_writer_free(w);
    for (i = 0; i < sizeof data; i++) data[i] = (unsigned char)(i * 7);
    for (i = 0; i < 8; i++) len8[i] = (unsigned char)((uint64_t)jl >> (8 * i));
    snprintf(path, sizeof path, "%s/seed_foreign.safetensors", dir);
    if ((fp = fopen(path, "wb")) != NULL) {
        fwrite(len8, 1, 8, fp); fwrite(foreign, 1, jl, fp); fwrite(data, 1, sizeof data, fp);
        fclose(fp);
    }
}

int LLVMFuzzerInitialize(int *argc, char ***argv) {
    const char *dir = getenv("BT_FUZZ_SEEDS");
    (void)argc; (void)argv;
    bt_ckpt_set_threads(1);
    if (dir) write_seeds(dir);
    return 0;
}

/* the tree again through the writer; numbers as their value (a finite double) */
static void reemit(bt_json_writer *w, const bt_json *v, const char *key) {
    const bt_json *c;
    switch (v->type) {
    case BT_JSON_OBJECT: bt_json_object(w, key); for (c = v->child; c; c = c->next) reemit(w, c, c->key); bt_json_end(w); break;
    case BT_JSON_ARRAY: bt_json_array(w, key); for (c = v->child; c; c = c->next) reemit(w, c, NULL); bt_json_end(w); break;
    case BT_JSON_STRING: bt_json_string(w, key, v->str); break;
    case BT_JSON_NUMBER: bt_json_number(w, key, v->num == v->num && v->num - v->num == 0 ? v->num : 0); break;
    case BT_JSON_TRUE: bt_json_bool(w, key, 1); break;
    case BT_JSON_FALSE: bt_json_bool(w, key, 0); break;
    default: bt_json_null(w, key);
    }
}
/* a and b have the same structure, keys and strings (strings without a NUL: C strings) */
static int same_tree(const bt_json *a, const bt_json *b) {
    const bt_json *x, *y;
    if (a->type != b->type || a->n != b->n) return 0;
    if (a->type == BT_JSON_STRING && strcmp(a->str, b->str)) return 0;
    for (x = a->child, y = b->child; x && y; x = x->next, y = y->next) {
        if (a->type == BT_JSON_OBJECT && strcmp(x->key, y->key)) return 0;
        if (!same_tree(x, y)) return 0;
    }
    return !x && !y;
}
static int has_nul(const bt_json *v) {
    const bt_json *c;
    if (v->type == BT_JSON_STRING && strlen(v->str) != v->len) return 1;
    if (v->key && strlen(v->key) != v->key_len) return 1;
    for (c = v->child; c; c = c->next) if (has_nul(c)) return 1;
    return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    bt_ckpt_file *f = bt_ckpt_open_memory(data, size, 0);
    bt_json_doc *d;
    if (f) {
        uint64_t covered = 0, first = UINT64_MAX;
        int i, n = bt_ckpt_count(f);
        for (i = 0; i < n; i++) {
            const bt_ckpt_info *t = bt_ckpt_info_at(f, i);
            void *buf;
            if (t->offset < 8 || t->offset > size || t->nbytes > size - t->offset) abort();
            if (bt_ckpt_find(f, t->name) != t) abort();
            if (t->offset < first) first = t->offset;
            covered += t->nbytes;
            buf = malloc(t->nbytes ? (size_t)t->nbytes : 1);
            if (bt_ckpt_read(f, t->name, buf, (size_t)t->nbytes) == 0 && t->has_crc && bt_crc32c(0, buf, (size_t)t->nbytes) != t->crc) abort();
            free(buf);
        }
        if (n && first + covered != size) abort();                    /* the tensors tile the data */
        for (i = 0; i < bt_ckpt_meta_count(bt_ckpt_file_meta(f)); i++)
            if (!bt_ckpt_meta_key(bt_ckpt_file_meta(f), i) || !bt_ckpt_meta_value(bt_ckpt_file_meta(f), i)) abort();
        (void)bt_ckpt_verify(f);
        bt_ckpt_close(f);
    } else if (strncmp(bt_ckpt_error(), "<memory>: ", 10)) abort();   /* every failure names the file */
    if ((d = bt_json_parse((const char *)data, size, 0)) != NULL) {
        const bt_json *r = bt_json_root(d);
        if (r->offset > size || r->end > size || r->offset > r->end) abort();
        if (!has_nul(r)) {
            bt_json_writer w;
            const char *text;
            size_t len;
            bt_json_doc *again;
            bt_json_writer_init(&w, (int)(size & 1) * 2);
            reemit(&w, r, NULL);
            if (!(text = bt_json_text(&w, &len))) abort();          /* the parser only accepts what the writer can write */
            if (!(again = bt_json_parse(text, len, 0)) || !same_tree(r, bt_json_root(again))) abort();
            bt_json_free(again);
            bt_json_writer_free(&w);
        }
        bt_json_free(d);
    }
    return 0;
}
