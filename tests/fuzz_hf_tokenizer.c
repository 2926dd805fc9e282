/* fuzz_hf_tokenizer.c - libFuzzer target: bt_data.h's tokenizer.json reader (bt_tokenizer_load_hf)
   and Llama 3's pre-tokenizer on arbitrary bytes. Built and run by `make fuzz`; not part of make
   test. An input whose first byte is even is a tokenizer.json: the load fails with a message naming
   the file, or gives a tokenizer under which a probe text and the input round-trip with every id
   below the vocabulary size. An odd first byte: the rest is a text for a small Llama 3 tokenizer
   (bytes and a few merges, ignore_merges on): its pieces tile the text, each non-empty, and
   decode(encode(x)) == x. */
#define _POSIX_C_SOURCE 200809L
#define BT_DATA_IMPLEMENTATION
#include "bt_data.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static char path[64];
static bt_tokenizer *llama3;

static void put(const char *p, const void *d, size_t n) {
    FILE *f = fopen(p, "wb");
    if (!f || (n && fwrite(d, 1, n, f) != n)) abort();
    fclose(f);
}

/* 256 byte tokens (GPT-2's characters, ids in byte order), "ab", "abc", "12"; Llama 3's split */
static bt_tokenizer *small_llama3(void) {
    bt_json_writer w;
    bt_tokenizer *t;
    int b;
    bt_json_writer_init(&w, 0);
    bt_json_object(&w, NULL);
    bt_json_array(&w, "added_tokens");
    bt_json_object(&w, NULL); bt_json_int(&w, "id", 259); bt_json_string(&w, "content", "<|end_of_text|>"); bt_json_end(&w);
    bt_json_end(&w);
    bt_json_object(&w, "pre_tokenizer"); bt_json_string(&w, "type", "Sequence"); bt_json_array(&w, "pretokenizers");
    bt_json_object(&w, NULL); bt_json_string(&w, "type", "Split");
    bt_json_object(&w, "pattern"); bt_json_string(&w, "Regex", BT__LLAMA3_PATTERN); bt_json_end(&w);
    bt_json_string(&w, "behavior", "Isolated"); bt_json_bool(&w, "invert", 0); bt_json_end(&w);
    bt_json_object(&w, NULL); bt_json_string(&w, "type", "ByteLevel"); bt_json_bool(&w, "add_prefix_space", 0); bt_json_bool(&w, "use_regex", 0); bt_json_end(&w);
    bt_json_end(&w); bt_json_end(&w);
    bt_json_object(&w, "model"); bt_json_string(&w, "type", "BPE"); bt_json_bool(&w, "ignore_merges", 1);
    bt_json_object(&w, "vocab");
    for (b = 0; b < 256; b++) {
        uint32_t cp;
        char s[3];
        for (cp = 0; bt__gpt2_char_to_byte(cp) != b; cp++) {}
        if (cp < 0x80) { s[0] = (char)cp; s[1] = 0; } else { s[0] = (char)(0xC0 | (cp >> 6)); s[1] = (char)(0x80 | (cp & 0x3F)); s[2] = 0; }
        bt_json_int(&w, s, b);
    }
    bt_json_int(&w, "ab", 256); bt_json_int(&w, "abc", 257); bt_json_int(&w, "12", 258);
    bt_json_end(&w);
    bt_json_array(&w, "merges"); bt_json_string(&w, NULL, "a b"); bt_json_string(&w, NULL, "ab c"); bt_json_string(&w, NULL, "1 2"); bt_json_end(&w);
    bt_json_end(&w); bt_json_end(&w);
    if (bt_json_save(&w, path)) abort();
    bt_json_writer_free(&w);
    if (!(t = bt_tokenizer_load_hf(path))) { fprintf(stderr, "%s\n", bt_data_error()); abort(); }
    return t;
}

static void roundtrip(bt_tokenizer *t, const char *s, size_t n) {
    int32_t *ids;
    char *back;
    size_t k = bt_encode(t, s, n, &ids), i, m;
    if (k == (size_t)-1) abort();
    for (i = 0; i < k; i++) if (ids[i] < 0 || ids[i] >= bt_tokenizer_vocab_size(t)) abort();
    m = bt_decode(t, ids, k, &back);
    if (m != n || memcmp(back, s, n) != 0) abort();
    free(ids); free(back);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    static const char probe[] = "Hello, world! IT'S 2024:\r\n\r\n\tcaf\xc3\xa9 \xe4\xb8\xad \xff\x80 'll  x 1234567";
    if (!path[0]) {
        snprintf(path, sizeof path, "%s/bt_fuzz_hf.%ld.json", access("/dev/shm", W_OK) == 0 ? "/dev/shm" : "/tmp", (long)getpid());
        llama3 = small_llama3();
    }
    if (!size) return 0;
    if (data[0] & 1) {   /* a text for Llama 3's split */
        const unsigned char *s = data + 1;
        size_t n = size - 1, i = 0;
        while (i < n) {
            size_t e = bt__piece_end_llama3(llama3, s, n, i);
            if (e <= i || e > n) abort();
            i = e;
        }
        roundtrip(llama3, (const char *)s, n);
        return 0;
    }
    put(path, data + 1, size - 1);
    {
        bt_tokenizer *t = bt_tokenizer_load_hf(path);
        if (!t) { if (!strstr(bt_data_error(), path)) abort(); }   /* errors name the file */
        else {
            roundtrip(t, probe, sizeof probe - 1);
            roundtrip(t, (const char *)data, size);
            bt_tokenizer_free(t);
        }
    }
    remove(path);
    return 0;
}
