/* test_data.c - bt_data.h: the GPT-2 tokenizer (against gpt-3-encoder's ids and tiktoken's counts),
   shards (round trip, corrupt and truncated files), the loader (rank disjointness, exact resume),
   and the bt_tokenize tool. Run from the repository root. The tokenizer files are taken from
   ../shared/data/gpt2-tokenizer or data/; the full-corpus checks need ../shared/data. */
#define _XOPEN_SOURCE 700   /* POSIX.1-2008 and mknod */
#define BT_DATA_IMPLEMENTATION
#include "bt_data.h"
#include "tests/bt_test.h"
#include "tests/bt_test_files.h"

#include <stdlib.h>
#include <unistd.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <sys/wait.h>

static bt_tokenizer *tok;
static const char *enc_path, *voc_path;

static int file_exists(const char *p) { return access(p, R_OK) == 0; }

static int run(const char *cmd) {
    int rc = system(cmd);
    return rc == -1 ? -1 : WIFEXITED(rc) ? WEXITSTATUS(rc) : -1;
}

static uint64_t rng_state = 0x1234567;
static uint32_t rnd(void) { return (uint32_t)(bt__rng_next(&rng_state) >> 32); }

/* ---- tokenizer ---- */

static void test_unicode_table(void) {
    size_t i;
    struct { uint32_t cp; int cls; } cases[] = {
        {'A', BT__LETTER}, {'z', BT__LETTER}, {'5', BT__NUMBER}, {' ', BT__SPACE}, {'\t', BT__SPACE}, {'\r', BT__SPACE},
        {0x0B, BT__SPACE}, {0x0C, BT__SPACE}, {'\'', BT__OTHER}, {'_', BT__OTHER}, {0x85, BT__SPACE}, {0xA0, BT__SPACE},
        {0x1680, BT__SPACE}, {0x2000, BT__SPACE}, {0x200A, BT__SPACE}, {0x2028, BT__SPACE}, {0x2029, BT__SPACE},
        {0x202F, BT__SPACE}, {0x205F, BT__SPACE}, {0x3000, BT__SPACE},
        {0xFEFF, BT__OTHER}, {0x200B, BT__OTHER}, {0x180E, BT__OTHER},        /* not White_Space */
        {0xE9, BT__LETTER}, {0xAA, BT__LETTER}, {0xB5, BT__LETTER}, {0x1C5, BT__LETTER}, {0x2B0, BT__LETTER},
        {0x301, BT__OTHER}, {0x94D, BT__OTHER},                                /* combining marks */
        {0x663, BT__NUMBER}, {0x2167, BT__NUMBER}, {0xB2, BT__NUMBER}, {0xBD, BT__NUMBER}, {0x1D7CE, BT__NUMBER},
        {0x4E2D, BT__LETTER}, {0x3400, BT__LETTER}, {0x4DBF, BT__LETTER}, {0xAC00, BT__LETTER}, {0xD7A3, BT__LETTER},
        {0x20000, BT__LETTER}, {0x2A6DF, BT__LETTER}, {0x1D400, BT__LETTER},
        {0x1F600, BT__OTHER}, {0x2764, BT__OTHER}, {0xE000, BT__OTHER}, {0x10FFFF, BT__OTHER}, {0xFFFD, BT__OTHER},
    };
    for (i = 0; i < sizeof cases / sizeof cases[0]; i++)
        BT_CHECK(bt__unicode_class(cases[i].cp) == cases[i].cls, "U+%04X: class %d, expected %d", (unsigned)cases[i].cp,
                 bt__unicode_class(cases[i].cp), cases[i].cls);
    for (i = 0; i < BT__UNICODE_NRUNS; i++) {
        uint32_t lo = bt__unicode_runs[i][0], hi = bt__unicode_runs[i][1] >> 8;
        BT_CHECK(lo <= hi && hi <= 0x10FFFF, "run %zu: %X..%X", i, (unsigned)lo, (unsigned)hi);
        if (i) BT_CHECK(lo > (bt__unicode_runs[i - 1][1] >> 8), "runs %zu and %zu overlap or are unsorted", i - 1, i);
    }
}

static void test_tokenizer_load(void) {
    size_t l;
    const char *s;
    char path[512], path2[512];
    BT_CHECK(bt_tokenizer_vocab_size(tok) == 50257, "vocab %d", bt_tokenizer_vocab_size(tok));
    s = bt_decode_token(tok, BT_EOT, &l);
    BT_CHECK(s && l == 13 && !memcmp(s, "<|endoftext|>", 13), "EOT decodes to <|endoftext|>");
    s = bt_decode_token(tok, 220, &l);
    BT_CHECK(s && l == 1 && s[0] == ' ', "220 is a space");
    s = bt_decode_token(tok, 188, &l);
    BT_CHECK(s && l == 1 && s[0] == 0, "188 is byte 0");
    BT_CHECK(bt_decode_token(tok, 50257, &l) == NULL && strstr(bt_data_error(), "50257"), "out of range id: %s", bt_data_error());
    BT_CHECK(bt_decode_token(tok, -1, &l) == NULL, "negative id");
    /* errors name the file */
    BT_CHECK(bt_tokenizer_load("/nonexistent/encoder.json", voc_path) == NULL && strstr(bt_data_error(), "/nonexistent/encoder.json"),
             "missing file: %s", bt_data_error());
    snprintf(path, sizeof path, "%s/bad_encoder.json", bt_test_dir);
    bt_test_write_file(path, "{\"a\": 0, \"b\": ", 14);
    BT_CHECK(bt_tokenizer_load(path, voc_path) == NULL && strstr(bt_data_error(), path), "truncated json: %s", bt_data_error());
    bt_test_write_file(path, "{\"a\": 0, \"b\": 0}", 16);
    BT_CHECK(bt_tokenizer_load(path, voc_path) == NULL && strstr(bt_data_error(), path), "short vocab: %s", bt_data_error());
    bt_test_write_file(path, "[1, 2]", 6);
    BT_CHECK(bt_tokenizer_load(path, voc_path) == NULL && strstr(bt_data_error(), "JSON object"), "not an object: %s", bt_data_error());
    snprintf(path2, sizeof path2, "%s/bad_vocab.bpe", bt_test_dir);
    bt_test_write_file(path2, "#version: 0.2\nzzzq qqqz\n", 24);
    BT_CHECK(bt_tokenizer_load(enc_path, path2) == NULL && strstr(bt_data_error(), path2) && strstr(bt_data_error(), ":2:"),
             "unknown merge: %s", bt_data_error());
    bt_test_write_file(path2, "#version: 0.2\nabc\n", 19);
    BT_CHECK(bt_tokenizer_load(enc_path, path2) == NULL && strstr(bt_data_error(), "two tokens"), "one-token line: %s", bt_data_error());
}

static size_t unhex(const char *h, size_t n, char *out) {
    size_t i;
    for (i = 0; i + 1 < n; i += 2) {
        unsigned v;
        sscanf(h + i, "%2x", &v);
        out[i / 2] = (char)v;
    }
    return n / 2;
}

/* tests/fixtures/gpt2_cases.txt: inputs and the ids gpt-3-encoder gives them */
static void test_fixture_cases(void) {
    size_t len, ncases = 0;
    char *txt = bt_test_read_file("tests/fixtures/gpt2_cases.txt", &len), *line, *save = NULL;
    BT_CHECK(txt != NULL, "tests/fixtures/gpt2_cases.txt missing");
    if (!txt) return;
    for (line = strtok_r(txt, "\n", &save); line; line = strtok_r(NULL, "\n", &save)) {
        char *tab = strchr(line, '\t'), *p, *input, *dec;
        int32_t want[4096], *ids;
        size_t nw = 0, n, ilen, i;
        if (line[0] == '#' || !tab) continue;
        input = (char *)malloc((size_t)(tab - line) / 2 + 1);
        ilen = unhex(line, (size_t)(tab - line), input);
        for (p = tab + 1; *p && nw < 4096;) {
            char *e;
            long v = strtol(p, &e, 10);
            if (e == p) break;
            want[nw++] = (int32_t)v;
            p = e;
        }
        n = bt_encode(tok, input, ilen, &ids);
        for (i = 0; i < n && i < nw && ids[i] == want[i];) i++;
        BT_CHECK(n == nw && i == n, "case %zu (%.*s): %zu ids, expected %zu; first difference at %zu", ncases,
                 (int)(ilen < 60 ? ilen : 60), input, n, nw, i);
        BT_CHECK(bt_decode(tok, ids, n, &dec) == ilen && !memcmp(dec, input, ilen), "case %zu round trip", ncases);
        free(dec); free(ids); free(input);
        ncases++;
    }
    BT_CHECK(ncases >= 60, "only %zu cases", ncases);
    free(txt);
}

/* tests/fixtures/gpt2_pretok.txt: pieces cut by the Python regex module (OpenAI's encoder.py engine) */
static void test_pretokenizer_vs_regex(void) {
    size_t len, ncases = 0, bad = 0;
    char *txt = bt_test_read_file("tests/fixtures/gpt2_pretok.txt", &len), *line, *save = NULL;
    BT_CHECK(txt != NULL, "tests/fixtures/gpt2_pretok.txt missing");
    if (!txt) return;
    for (line = strtok_r(txt, "\n", &save); line; line = strtok_r(NULL, "\n", &save)) {
        char *tab = strchr(line, '\t'), *p, input[512];
        size_t ilen, i = 0, want;
        int ok = 1;
        if (line[0] == '#' || !tab || tab - line >= 1024) continue;
        ilen = unhex(line, (size_t)(tab - line), input);
        for (p = tab + 1; ok && sscanf(p, "%zu", &want) == 1;) {
            size_t e = i < ilen ? bt__piece_end(tok, (const unsigned char *)input, ilen, i) : i;
            ok = e - i == want;
            i = e;
            while (*p == ' ') p++;
            while (*p >= '0' && *p <= '9') p++;
        }
        if (!ok || i != ilen) {
            if (bad < 5) BT_CHECK(0, "pieces of %.*s differ from the regex module's (%s)", (int)(tab - line), line, tab + 1);
            bad++;
        }
        ncases++;
    }
    BT_CHECK(bad == 0 && ncases >= 400, "%zu of %zu cases differ", bad, ncases);
    free(txt);
}

static size_t enc(const char *s, size_t n, int32_t *out, size_t cap) {
    int32_t *ids;
    size_t k = bt_encode(tok, s, n, &ids), i;
    for (i = 0; i < k && i < cap; i++) out[i] = ids[i];
    free(ids);
    return k;
}

/* ids(a ++ b ++ c) == ids(a) ++ ids(b) ++ ids(c): the pre-tokenizer cuts there */
static int splits_as(const char *whole, const char *const *parts, int nparts) {
    int32_t a[256], b[256];
    size_t na = enc(whole, strlen(whole), a, 256), nb = 0;
    int i;
    for (i = 0; i < nparts; i++) nb += enc(parts[i], strlen(parts[i]), b + nb, 256 - nb);
    return na == nb && !memcmp(a, b, na * sizeof(int32_t));
}

/* White_Space, not JavaScript's \s: U+0085 is a space, U+FEFF is not (gpt-3-encoder differs) */
static void test_white_space_semantics(void) {
    const char *p1[] = {"a", "\xc2\x85", "b"};             /* one space unit before a letter: "\s+" */
    const char *p2[] = {"x", "\xc2\x85", " y"};            /* "\s+(?!\S)" leaves the last space to " y" */
    const char *p3[] = {" \xef\xbb\xbf", "b"};             /* U+FEFF is "other": " ?[^\s\p{L}\p{N}]+" */
    const char *p4[] = {"a", "\xc2\x85\xc2\x85"};          /* trailing run stays whole */
    const char *p5[] = {"it", " '", "s", "'s", "'ll", "'LL"};
    const char *p6[] = {"e", "\xcc\x81", " cafe", "\xcc\x81"};
    BT_CHECK(splits_as("a\xc2\x85" "b", p1, 3), "U+0085 is White_Space");
    BT_CHECK(splits_as("x\xc2\x85 y", p2, 3), "U+0085 before ' y'");
    BT_CHECK(splits_as(" \xef\xbb\xbf" "b", p3, 2), "U+FEFF is not White_Space");
    BT_CHECK(splits_as("a\xc2\x85\xc2\x85", p4, 2), "trailing White_Space run");
    BT_CHECK(splits_as("it 's's'll'LL", p5, 6), "contractions");
    {   /* 'LL is not a contraction: "'" then "LL" is wrong too: "'" joins nothing, L-run "LL" */
        int32_t a[16], b[16];
        size_t na = enc("'LL", 3, a, 16), nb = enc("'", 1, b, 16);
        nb += enc("LL", 2, b + nb, 16 - nb);
        BT_CHECK(na == nb && !memcmp(a, b, na * 4), "'LL");
    }
    BT_CHECK(splits_as("e\xcc\x81 cafe\xcc\x81", p6, 4), "combining marks are not letters");
    {   /* where gpt-3-encoder (JS \s) gives 87 1587 227 88 and 220 171 119 123 65 */
        int32_t a[16];
        const int32_t w1[5] = {87, 220, 126, 227, 88}, w2[4] = {27332, 119, 123, 65};
        BT_CHECK(enc("x \xc2\x85y", 5, a, 16) == 5 && !memcmp(a, w1, sizeof w1), "'x U+0085 y'");
        BT_CHECK(enc(" \xef\xbb\xbf" "b", 5, a, 16) == 4 && !memcmp(a, w2, sizeof w2), "' U+FEFF b'");
    }
}

/* OpenAI's bpe(): merge every occurrence of the lowest-ranked bigram, left to right; O(n^2) */
static size_t naive_bpe(const unsigned char *s, size_t n, int32_t *w) {
    size_t k = n, i;
    for (i = 0; i < n; i++) w[i] = tok->byte_id[s[i]];
    for (;;) {
        uint32_t best = 0xFFFFFFFFu, r;
        int32_t m, bm = -1, a = -1, b = -1;
        size_t o = 0;
        for (i = 0; i + 1 < k; i++)
            if (bt__merge_lookup(tok, w[i], w[i + 1], &r, &m) && r < best) { best = r; a = w[i]; b = w[i + 1]; bm = m; }
        if (bm < 0) break;
        for (i = 0; i < k;) {
            if (i + 1 < k && w[i] == a && w[i + 1] == b) { w[o++] = bm; i += 2; }
            else w[o++] = w[i++];
        }
        k = o;
    }
    return k;
}

static void test_bpe_matches_naive(void) {
    static unsigned char buf[600];
    static int32_t x[600], y[600];
    const char *alpha[] = {"ab", " e", "aaaa", "the", "0123456789", ",.!", "\xe2\x80\x99", "Ġ"};
    int iter, v, bad = 0, unreachable = 0;
    for (iter = 0; iter < 3000; iter++) {
        size_t n = 1 + rnd() % (iter < 2500 ? 24 : 500), i, kx, ky;
        const char *al = alpha[rnd() % 8];
        size_t an = strlen(al);
        for (i = 0; i < n; i++) buf[i] = (rnd() % 4) ? (unsigned char)al[rnd() % an] : (unsigned char)(rnd() % 128);
        bt__bpe_scratch(tok, n);
        kx = bt__bpe(tok, buf, n, x);
        ky = naive_bpe(buf, n, y);
        if (kx != ky || memcmp(x, y, kx * 4)) bad++;
    }
    BT_CHECK(bad == 0, "%d random pieces differ from the naive BPE", bad);
    /* every token's own bytes: heap BPE == naive BPE (and count the tokens BPE never reaches) */
    bad = 0;
    for (v = 0; v < 50256; v++) {
        size_t l, kx, ky;
        const unsigned char *s = (const unsigned char *)bt_decode_token(tok, v, &l);
        bt__bpe_scratch(tok, l);
        kx = bt__bpe(tok, s, l, x);
        ky = naive_bpe(s, l, y);
        if (kx != ky || memcmp(x, y, kx * 4)) bad++;
        if (kx != 1 || x[0] != v) unreachable++;
    }
    BT_CHECK(bad == 0, "%d vocabulary tokens: heap and naive BPE differ", bad);
    fprintf(stderr, "  (BPE of a token's own bytes gives another split for %d of 50256 tokens)\n", unreachable);
}

static void test_roundtrip_random(void) {
    static char buf[4096];
    int iter, bad = 0, eot = 0, n_iter = bt_test_quick() ? 800 : 3000;
    for (iter = 0; iter < n_iter; iter++) {
        size_t n = rnd() % 2000, i = 0, m, k, j;
        int mode = iter % 4;
        int32_t *ids;
        char *back;
        while (i < n) {
            if (mode == 0) buf[i++] = (char)(rnd() & 0xFF);                                  /* any bytes */
            else if (mode == 1) { const char *c = " \n\t\r'sabcXYZ09.,!\xc2\xa0"; buf[i++] = c[rnd() % 20]; }
            else {                                                                             /* UTF-8, some broken */
                uint32_t cp = rnd() % (mode == 2 ? 0x110000u : 0x3000u);
                unsigned char u[4];
                size_t ul = 0;
                if (cp >= 0xD800 && cp < 0xE000) cp = 'x';
                if (cp < 0x80) u[ul++] = (unsigned char)cp;
                else if (cp < 0x800) { u[ul++] = (unsigned char)(0xC0 | (cp >> 6)); u[ul++] = (unsigned char)(0x80 | (cp & 0x3F)); }
                else if (cp < 0x10000) { u[ul++] = (unsigned char)(0xE0 | (cp >> 12)); u[ul++] = (unsigned char)(0x80 | ((cp >> 6) & 0x3F)); u[ul++] = (unsigned char)(0x80 | (cp & 0x3F)); }
                else { u[ul++] = (unsigned char)(0xF0 | (cp >> 18)); u[ul++] = (unsigned char)(0x80 | ((cp >> 12) & 0x3F)); u[ul++] = (unsigned char)(0x80 | ((cp >> 6) & 0x3F)); u[ul++] = (unsigned char)(0x80 | (cp & 0x3F)); }
                if (rnd() % 16 == 0) ul = 1 + rnd() % ul;                                      /* truncate it */
                if (rnd() % 32 == 0) { u[0] = (unsigned char)(0x80 + rnd() % 0x80); }           /* stray continuation */
                for (j = 0; j < ul && i < n; j++) buf[i++] = (char)u[j];
                if (rnd() % 4 == 0 && i < n) buf[i++] = ' ';
            }
        }
        k = bt_encode(tok, buf, n, &ids);
        for (j = 0; j < k; j++) eot += ids[j] == BT_EOT;
        m = bt_decode(tok, ids, k, &back);
        if (m != n || memcmp(back, buf, n)) bad++;
        free(ids); free(back);
    }
    BT_CHECK(bad == 0, "%d of %d random buffers do not round-trip", bad, n_iter);
    BT_CHECK(eot == 0, "encode produced <|endoftext|> %d times", eot);
    {   /* known hard inputs: overlong, surrogates, > U+10FFFF, lone bytes, NULs, a long space run */
        const char *hard[] = {"\xc0\x80", "\xed\xa0\x80", "\xf4\x90\x80\x80", "\xff\xfe", "\x80 \x80", "a\0b\0 \0", "\xe2\x82",
                              "\xf0\x9f\x98", "'\xff's"};
        size_t h;
        for (h = 0; h < sizeof hard / sizeof hard[0]; h++) {
            size_t n = strlen(hard[h]) + (h == 5 ? 6 - strlen(hard[h]) : 0), k, m;
            int32_t *ids; char *back;
            k = bt_encode(tok, hard[h], n, &ids);
            m = bt_decode(tok, ids, k, &back);
            BT_CHECK(m == n && !memcmp(back, hard[h], n), "hard case %zu", h);
            free(ids); free(back);
        }
    }
    {
        static char spaces[100001];
        int32_t *ids; char *back; size_t k, m;
        memset(spaces, ' ', 100000); spaces[99999] = 'x';
        k = bt_encode(tok, spaces, 100000, &ids);
        m = bt_decode(tok, ids, k, &back);
        BT_CHECK(m == 100000 && !memcmp(back, spaces, m), "100k spaces round trip");
        free(ids); free(back);
    }
    {
        int32_t bad_ids[3] = {1, 50257, 2};
        char *back = (char *)1;
        BT_CHECK(bt_decode(tok, bad_ids, 3, &back) == (size_t)-1 && back == NULL && strstr(bt_data_error(), "position 1"),
                 "decode of an out-of-range id: %s", bt_data_error());
    }
}

static uint32_t fnv_ids(const int32_t *ids, size_t n) {
    uint32_t h = 0x811c9dc5u;
    size_t i;
    for (i = 0; i < n; i++) h = (h ^ (uint32_t)ids[i]) * 0x01000193u;
    return h;
}

/* whole corpora: counts (tiktoken, README), first ids, and the gpt-3-encoder hash of all ids */
static void test_full_corpora(void) {
    size_t len;
    char *fx = bt_test_read_file("tests/fixtures/gpt2_corpus.txt", &len), *line, *save = NULL;
    struct { const char *name; size_t count; } readme[] = {
        {"tinyshakespeare", 338025}, {"wikitext2_train", 2448382}, {"wikitext2_valid", 258659}, {"wikitext2_test", 295877}};
    int done = 0;
    if (!file_exists("../shared/data/tinyshakespeare/input.txt")) { BT_SKIP("../shared/data is absent"); free(fx); return; }
    BT_CHECK(fx != NULL, "tests/fixtures/gpt2_corpus.txt missing");
    if (!fx) return;
    for (line = strtok_r(fx, "\n", &save); line; line = strtok_r(NULL, "\n", &save)) {
        char name[64], rel[128], path[256], *text;
        size_t count, n, tl, r;
        unsigned hash;
        int32_t first[16], *ids;
        int off, i;
        if (line[0] == '#' || sscanf(line, "%63s %127s %zu %x%n", name, rel, &count, &hash, &off) != 4) continue;
        for (i = 0; i < 16; i++) { int o2; if (sscanf(line + off, "%d%n", &first[i], &o2) != 1) break; off += o2; }
        if (bt_test_quick() && strcmp(name, "tinyshakespeare")) continue;   /* ASan runs: one corpus */
        snprintf(path, sizeof path, "../shared/data/%s", rel);
        text = bt_test_read_file(path, &tl);
        BT_CHECK(text != NULL, "%s missing", path);
        if (!text) continue;
        n = bt_encode(tok, text, tl, &ids);
        BT_CHECK(n == count, "%s: %zu tokens, gpt-3-encoder gives %zu", name, n, count);
        for (r = 0; r < 4; r++)
            if (!strcmp(readme[r].name, name)) BT_CHECK(n == readme[r].count, "%s: %zu tokens, README (tiktoken) says %zu", name, n, readme[r].count);
        if (!strcmp(name, "tinyshakespeare")) {   /* the README's first ids */
            const int32_t rd[16] = {5962, 22307, 25, 198, 8421, 356, 5120, 597, 2252, 11, 3285, 502, 2740, 13, 198, 198};
            BT_CHECK(n >= 16 && !memcmp(ids, rd, sizeof rd), "tinyshakespeare: first ids differ from the README");
        }
        BT_CHECK(fnv_ids(ids, n) == hash, "%s: id hash %08x, expected %08x", name, fnv_ids(ids, n), hash);
        for (i = 0; i < 16 && (size_t)i < n; i++) BT_CHECK(ids[i] == first[i], "%s: id %d is %d, expected %d", name, i, ids[i], first[i]);
        {
            char *back;
            size_t m = bt_decode(tok, ids, n, &back);
            BT_CHECK(m == tl && !memcmp(back, text, tl), "%s: decode(encode(x)) != x", name);
            free(back);
        }
        free(ids); free(text);
        done++;
    }
    BT_CHECK(done >= 1, "no corpus checked");
    free(fx);
}

/* ---- multiple-choice sets ---- */

static int write_text(const char *path, const char *text) { bt_test_write_file(path, text, strlen(text)); return 0; }

static void test_mc_load(void) {
    const char *p = bt_test_path("mc.jsonl");
    bt_mc_set s;
    /* the activity label before the context, " " before each ending; a string label; a blank line;
       5 endings next to 2 (the stride is the most) */
    BT_CHECK(write_text(p, "{\"activity_label\": \"Baking\", \"ctx\": \"Mix the flour\", \"endings\": [\"and eggs.\", \"\\u00e9t\\u00e9\"], \"label\": \"1\"}\n"
                                   "\n"
                                   "{\"ctx\": \"\", \"endings\": [\"a\", \"b\", \"c\", \"d\", \"e\"], \"label\": 4, \"ind\": 9}\n") == 0, "write");
    BT_CHECK(bt_mc_load(&s, p, tok) == 0, "load: %s", bt_data_error());
    BT_CHECK(s.n_items == 2 && s.max_endings == 5 && s.label[0] == 1 && s.label[1] == 4 && s.n_endings[0] == 2 && s.n_endings[1] == 5,
             "items %lld, stride %d", (long long)s.n_items, s.max_endings);
    int32_t *want;
    size_t n = bt_encode(tok, "Baking: Mix the flour", 21, &want);
    BT_CHECK(n == (size_t)s.ctx_len[0] && !memcmp(want, s.tokens + s.ctx_off[0], n * 4), "context tokens: LABEL: ctx");
    free(want);
    n = bt_encode(tok, " \xc3\xa9t\xc3\xa9", 6, &want);
    BT_CHECK(n == (size_t)s.end_len[1] && !memcmp(want, s.tokens + s.end_off[1], n * 4), "ending tokens: \" \" + ending, escapes decoded");
    free(want);
    BT_CHECK(s.ctx_len[1] == 0 && s.end_len[1 * 5 + 4] == 1, "an empty context; the fifth ending at stride 5");
    int64_t total = 0;
    for (int64_t i = 0; i < s.n_items; i++) {
        total += s.ctx_len[i];
        for (int k = 0; k < s.n_endings[i]; k++) total += s.end_len[i * s.max_endings + k];
    }
    BT_CHECK(total == s.n_tokens, "n_tokens %lld, the parts hold %lld", (long long)s.n_tokens, (long long)total);
    bt_mc_free(&s);
    bt_mc_free(&s);   /* a freed set can be freed again */
    /* every bad line names the file and its line */
    struct { const char *text, *msg; } bad[] = {
        {"{\"ctx\": \"a\", \"endings\": [\"b\", \"c\"], \"label\": 0}\n[1]\n", ":2: the line is not a JSON object"},
        {"{\"ctx\": \"a\", \"endings\": [\"b\", \"c\"]}\n", ":1: no member \"label\""},
        {"{\"ctx\": 3, \"endings\": [\"b\", \"c\"], \"label\": 0}\n", ":1: no string member \"ctx\""},
        {"{\"ctx\": \"a\", \"endings\": [\"b\"], \"label\": 0}\n", ":1: \"endings\" must hold 2 to 16"},
        {"{\"ctx\": \"a\", \"endings\": [\"b\", \"c\"], \"label\": 2}\n", ":1: \"label\" is not the index"},
        {"{\"ctx\": \"a\", \"endings\": [\"b\", \"c\"], \"label\": -1}\n", ":1: \"label\" is not the index"},
        {"{\"ctx\": \"a\", \"endings\": [\"b\", 5], \"label\": 0}\n", ":1: an ending is not a string"},
        {"{\"ctx\": \"a\", \"endings\": [\"b\", \"c\"], \"label\": 0\n", ":1: JSON, byte"},
        {"\n\n", "no item"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        BT_CHECK(write_text(p, bad[i].text) == 0, "write");
        int r = bt_mc_load(&s, p, tok);
        BT_CHECK(r == -1 && strstr(bt_data_error(), "mc.jsonl") && strstr(bt_data_error(), bad[i].msg), "case %zu: %d, \"%s\" (expected \"%s\")",
                 i, r, bt_data_error(), bad[i].msg);
        BT_CHECK(s.n_items == 0 && s.tokens == NULL, "case %zu: the set is left empty", i);
    }
    BT_CHECK(bt_mc_load(&s, bt_test_path("absent.jsonl"), tok) == -1 && strstr(bt_data_error(), "absent.jsonl"), "missing file");
}

/* ---- shards ---- */

static void test_shard_roundtrip(void) {
    char path[512];
    uint16_t toks[5000];
    bt_shard s;
    size_t i;
    for (i = 0; i < 5000; i++) toks[i] = (uint16_t)(i * 37 + 11);
    snprintf(path, sizeof path, "%s/rt.bin", bt_test_dir);
    BT_CHECK(bt_shard_write(path, toks, 5000) == 0, "write: %s", bt_data_error());
    BT_CHECK(bt_shard_open(&s, path) == 0, "open: %s", bt_data_error());
    BT_CHECK(s.n == 5000 && s.width == 2 && !s.tokens32 && !memcmp(s.tokens, toks, sizeof toks) && bt_shard_token(&s, 4999) == toks[4999], "tokens read back");
    bt_shard_close(&s);
    bt_shard_close(&s);   /* twice is fine */
    {   /* llm.c's header layout, byte for byte */
        size_t len;
        char *raw = bt_test_read_file(path, &len);
        int32_t h[3];
        memcpy(h, raw, sizeof h);
        BT_CHECK(len == 1024 + 10000 && h[0] == 20240520 && h[1] == 1 && h[2] == 5000, "header %d %d %d, %zu bytes", h[0], h[1], h[2], len);
        free(raw);
    }
    /* overwrite atomically with a shorter shard; no temp file is left behind */
    BT_CHECK(bt_shard_write(path, toks, 3) == 0, "rewrite");
    BT_CHECK(bt_shard_open(&s, path) == 0 && s.n == 3 && s.tokens[2] == toks[2], "rewritten shard");
    bt_shard_close(&s);
    {
        char cmd[600];
        snprintf(cmd, sizeof cmd, "ls %s | grep -q '[.]tmp[.]'", bt_test_dir);
        BT_CHECK(run(cmd) == 1, "temp file left behind");
    }
    BT_CHECK(bt_shard_write(path, NULL, 0) == 0 && bt_shard_open(&s, path) == 0 && s.n == 0, "empty shard");
    bt_shard_close(&s);
    BT_CHECK(bt_shard_write("/nonexistent/dir/x.bin", toks, 3) == -1 && strstr(bt_data_error(), "/nonexistent/dir/x.bin"),
             "unwritable: %s", bt_data_error());
    BT_CHECK(bt_shard_check_vocab(&s, path, 50257) == 0, "empty shard is in vocab");
    toks[1] = 60000;
    BT_CHECK(bt_shard_write(path, toks, 3) == 0 && bt_shard_open(&s, path) == 0, "write 60000");
    BT_CHECK(bt_shard_check_vocab(&s, path, 50257) == -1 && strstr(bt_data_error(), "60000") && strstr(bt_data_error(), path),
             "vocab check: %s", bt_data_error());
    bt_shard_close(&s);
}

static void expect_bad_shard(const char *path, const void *bytes, size_t n, const char *what) {
    bt_shard s;
    bt_test_write_file(path, bytes, n);
    s.n = 123;
    BT_CHECK(bt_shard_open(&s, path) == -1, "%s: opened", what);
    BT_CHECK(strstr(bt_data_error(), path) != NULL && strstr(bt_data_error(), what) != NULL, "error \"%s\" lacks the file or \"%s\"",
             bt_data_error(), what);
    BT_CHECK(s.tokens == NULL && s.tokens32 == NULL && s.n == 0 && s.width == 0, "%s: shard not zeroed", what);
}

static void test_shard_corrupt(void) {
    char path[512];
    static unsigned char buf[1024 + 200];
    int32_t h[3] = {20240520, 1, 100};
    bt_shard s;
    snprintf(path, sizeof path, "%s/bad.bin", bt_test_dir);
    memset(buf, 0, sizeof buf);
    memcpy(buf, h, sizeof h);
    expect_bad_shard(path, buf, 1024 + 150, "truncated: header says 100 tokens (1224 bytes) but the file has 1174 bytes");
    h[2] = 90; memcpy(buf, h, sizeof h);
    expect_bad_shard(path, buf, 1024 + 200, "wrong size: header says 90 tokens (1204 bytes) but the file has 1224 bytes");
    h[2] = 100; memcpy(buf, h, sizeof h);
    expect_bad_shard(path, buf, 1000, "truncated");
    expect_bad_shard(path, buf, 0, "truncated");
    h[0] = 20240521; memcpy(buf, h, sizeof h);
    expect_bad_shard(path, buf, 1024 + 200, "bad magic");
    h[0] = 20240520; h[1] = 2; memcpy(buf, h, sizeof h);
    expect_bad_shard(path, buf, 1024 + 200, "wrong version");
    h[1] = 1; h[2] = -5; memcpy(buf, h, sizeof h);
    expect_bad_shard(path, buf, 1024 + 200, "negative");
    BT_CHECK(bt_shard_open(&s, "/nonexistent.bin") == -1 && strstr(bt_data_error(), "/nonexistent.bin"), "missing: %s", bt_data_error());
    BT_CHECK(bt_shard_open(&s, bt_test_dir) == -1 && strstr(bt_data_error(), "not a regular file"), "directory: %s", bt_data_error());
    /* the loader reports the same */
    h[2] = 100; h[0] = 7; memcpy(buf, h, sizeof h);
    bt_test_write_file(path, buf, 1024 + 200);
    BT_CHECK(bt_loader_open(path, 1, 4, 0, 1, 0, 0) == NULL && strstr(bt_data_error(), "bad magic"), "loader: %s", bt_data_error());
}

/* ---- uint32 shards (llm.c's Llama 3 layout: magic 20240801, version 7; issue 36) ---- */

static void test_shard32_roundtrip(void) {
    static uint32_t toks[5000];
    char path[512];
    bt_shard s;
    size_t i;
    int ok = 1;
    for (i = 0; i < 5000; i++) toks[i] = (uint32_t)(i * 7919 % 128256);   /* up to 128,255: Llama 3's vocabulary */
    toks[17] = 65535; toks[18] = 65536; toks[19] = 128255;
    snprintf(path, sizeof path, "%s/rt32.bin", bt_test_dir);
    BT_CHECK(bt_shard_write_u32(path, toks, 5000) == 0, "write: %s", bt_data_error());
    BT_CHECK(bt_shard_open(&s, path) == 0, "open: %s", bt_data_error());
    BT_CHECK(s.n == 5000 && s.width == 4 && !s.tokens && s.tokens32 && !memcmp(s.tokens32, toks, sizeof toks), "uint32 tokens read back");
    for (i = 0; i < s.n; i++) ok &= bt_shard_token(&s, i) == toks[i];
    BT_CHECK(ok && s.tokens32[18] == 65536 && s.tokens32[19] == 128255, "ids past uint16 intact");
    BT_CHECK(bt_shard_check_vocab(&s, path, 128256) == 0, "Llama 3's vocabulary: %s", bt_data_error());
    BT_CHECK(bt_shard_check_vocab(&s, path, 128255) == -1 && strstr(bt_data_error(), "token 128255 at position 19 (byte offset 1100)") &&
             strstr(bt_data_error(), path), "vocab 128255: %s", bt_data_error());
    {   /* the first id past uint16 */
        char want[96];
        for (i = 0; toks[i] < 65536; i++) {}
        snprintf(want, sizeof want, "token %u at position %zu (byte offset %zu)", (unsigned)toks[i], i, 1024 + 4 * i);
        BT_CHECK(bt_shard_check_vocab(&s, path, 65536) == -1 && strstr(bt_data_error(), want), "vocab 65536: %s", bt_data_error());
    }
    bt_shard_close(&s);
    BT_CHECK(s.tokens32 == NULL && s.width == 0, "closed");
    {   /* llm.c's Llama 3 header, byte for byte */
        size_t len;
        char *raw = bt_test_read_file(path, &len);
        int32_t h[4];
        memcpy(h, raw, sizeof h);
        BT_CHECK(len == 1024 + 20000 && h[0] == 20240801 && h[1] == 7 && h[2] == 5000 && h[3] == 0, "header %d %d %d, %zu bytes", h[0], h[1], h[2], len);
        free(raw);
    }
    BT_CHECK(bt_shard_write_u32(path, NULL, 0) == 0 && bt_shard_open(&s, path) == 0 && s.n == 0 && s.width == 4 &&
             bt_shard_check_vocab(&s, path, 1) == 0, "empty uint32 shard: %s", bt_data_error());
    bt_shard_close(&s);
    BT_CHECK(bt_shard_write_u32("/nonexistent/dir/x.bin", toks, 3) == -1 && strstr(bt_data_error(), "/nonexistent/dir/x.bin"), "unwritable: %s", bt_data_error());
    BT_CHECK(bt_shard_write_u32(path, NULL, 3) == -1 && strstr(bt_data_error(), "bt_shard_write_u32"), "NULL tokens: %s", bt_data_error());
}

static void test_shard32_corrupt(void) {
    char path[512];
    static unsigned char buf[1024 + 800];
    int32_t h[3] = {20240801, 7, 100};
    snprintf(path, sizeof path, "%s/bad32.bin", bt_test_dir);
    memset(buf, 0, sizeof buf);
    memcpy(buf, h, sizeof h);
    /* the size of 100 uint16 tokens under a uint32 header, and sizes that are no whole number of 4-byte tokens */
    expect_bad_shard(path, buf, 1024 + 200, "truncated: header says 100 tokens (1424 bytes of uint32 tokens) but the file has 1224 bytes");
    expect_bad_shard(path, buf, 1024 + 401, "wrong size: header says 100 tokens (1424 bytes of uint32 tokens) but the file has 1425 bytes");
    expect_bad_shard(path, buf, 1024 + 399, "truncated");
    expect_bad_shard(path, buf, 1024 + 800, "wrong size");
    expect_bad_shard(path, buf, 1000, "truncated");
    /* a version that does not go with the magic, either way */
    h[1] = 1; memcpy(buf, h, sizeof h);
    expect_bad_shard(path, buf, 1024 + 400, "wrong version 1 for magic 20240801 (expected 7, uint32 tokens)");
    h[0] = 20240520; h[1] = 7; memcpy(buf, h, sizeof h);
    expect_bad_shard(path, buf, 1024 + 200, "wrong version 7 for magic 20240520 (expected 1, uint16 tokens)");
    h[0] = 20240802; memcpy(buf, h, sizeof h);
    expect_bad_shard(path, buf, 1024 + 400, "bad magic 20240802 (expected 20240520 for uint16 tokens or 20240801 for uint32)");
    h[0] = 20240801; h[1] = 7; h[2] = -1; memcpy(buf, h, sizeof h);
    expect_bad_shard(path, buf, 1024 + 400, "negative");
    /* the loader says the same */
    h[2] = 100; memcpy(buf, h, sizeof h);
    bt_test_write_file(path, buf, 1024 + 200);
    BT_CHECK(bt_loader_open(path, 1, 4, 0, 1, 0, 0) == NULL && strstr(bt_data_error(), "1424 bytes of uint32 tokens") && strstr(bt_data_error(), path),
             "loader: %s", bt_data_error());
}

/* The loader over uint32 shards: the same batches as over uint16 shards of the same ids (shuffled,
   3 ranks, two epochs, a resumed state); ids past uint16 come back intact; a glob mixing the layouts
   is refused naming a file of each; check_vocab with Llama 3's 128,256; a shard cut short under
   the loader; a uint32 id that does not fit an int32 batch. */
static void test_loader_u32(void) {
    static uint16_t t16[3000];
    static uint32_t t32[3000];
    static int32_t a_in[2 * 16], a_tg[2 * 16], b_in[2 * 16], b_tg[2 * 16];
    char p16[512], p32[512], g16[512], g32[512], gmix[512];
    int k, r, same = 1, steps;
    size_t i;
    bt_loader *A, *B;
    for (k = 0; k < 3; k++) {
        for (i = 0; i < 3000; i++) { t16[i] = (uint16_t)((k * 3000 + i) * 31 % 65536); t32[i] = t16[i]; }
        snprintf(p16, sizeof p16, "%s/w16_%d.bin", bt_test_dir, k);
        snprintf(p32, sizeof p32, "%s/w32_%d.bin", bt_test_dir, k);
        BT_CHECK(bt_shard_write(p16, t16, 1000 + 700 * (size_t)k) == 0 && bt_shard_write_u32(p32, t32, 1000 + 700 * (size_t)k) == 0, "write: %s", bt_data_error());
    }
    snprintf(g16, sizeof g16, "%s/w16_*.bin", bt_test_dir);
    snprintf(g32, sizeof g32, "%s/w32_*.bin", bt_test_dir);
    for (r = 0; r < 3; r++) {
        bt_loader_state st;
        A = bt_loader_open(g16, 2, 8, r, 3, 1, 77); B = bt_loader_open(g32, 2, 8, r, 3, 1, 77);
        BT_CHECK(A && B && bt_loader_num_batches(A) == bt_loader_num_batches(B), "open: %s", bt_data_error());
        if (!A || !B) { bt_loader_close(A); bt_loader_close(B); return; }
        BT_CHECK(bt_loader_check_vocab(B, 65536) == 0, "check_vocab: %s", bt_data_error());
        steps = 2 * (int)bt_loader_num_batches(A) + 3;   /* into the third epoch */
        for (k = 0; k < steps; k++) {
            same &= bt_loader_next(A, a_in, a_tg) == 0 && bt_loader_next(B, b_in, b_tg) == 0;
            same &= !memcmp(a_in, b_in, sizeof a_in) && !memcmp(a_tg, b_tg, sizeof a_tg);
            if (k == 5) bt_loader_get_state(B, &st);
        }
        bt_loader_reset(A);
        BT_CHECK(bt_loader_set_state(B, &st) == 0, "set_state: %s", bt_data_error());
        for (k = 0; k < 6; k++) bt_loader_next(A, a_in, a_tg);
        for (k = 0; k < 20; k++) {   /* A from step 6 on, B resumed there */
            same &= bt_loader_next(A, a_in, a_tg) == 0 && bt_loader_next(B, b_in, b_tg) == 0 && !memcmp(a_in, b_in, sizeof a_in);
        }
        bt_loader_close(A); bt_loader_close(B);
    }
    BT_CHECK(same, "the uint32 shards give other batches than the uint16 shards of the same ids");
    /* a mix of the layouts in one glob */
    snprintf(p16, sizeof p16, "%s/mix_a.bin", bt_test_dir);
    snprintf(p32, sizeof p32, "%s/mix_b.bin", bt_test_dir);
    bt_shard_write(p16, t16, 500);
    bt_shard_write_u32(p32, t32, 500);
    snprintf(gmix, sizeof gmix, "%s/mix_*.bin", bt_test_dir);
    BT_CHECK(bt_loader_open(gmix, 1, 8, 0, 1, 0, 0) == NULL && strstr(bt_data_error(), "mixes shard layouts") && strstr(bt_data_error(), p16) &&
             strstr(bt_data_error(), p32) && strstr(bt_data_error(), "uint16") && strstr(bt_data_error(), "uint32"), "mixed glob: %s", bt_data_error());
    /* ids past uint16, in file order; check_vocab at Llama 3's size and one below */
    for (i = 0; i < 3000; i++) t32[i] = (uint32_t)(65536 + i * 41 % 62720);   /* 65,536 .. 128,255 */
    t32[2999] = 128255;
    snprintf(p32, sizeof p32, "%s/big32.bin", bt_test_dir);
    bt_shard_write_u32(p32, t32, 3000);
    A = bt_loader_open(p32, 2, 8, 0, 1, 0, 0);
    BT_CHECK(A && bt_loader_check_vocab(A, 128256) == 0, "check_vocab 128256: %s", bt_data_error());
    if (!A) return;
    same = 1;
    for (k = 0; k < (int)bt_loader_num_batches(A); k++) {
        int b, t;
        same &= bt_loader_next(A, a_in, a_tg) == 0;
        for (b = 0; b < 2; b++)
            for (t = 0; t < 8; t++) same &= a_in[b * 8 + t] == (int32_t)t32[k * 16 + b * 8 + t] && a_tg[b * 8 + t] == (int32_t)t32[k * 16 + b * 8 + t + 1];
    }
    BT_CHECK(same, "ids past 65535 changed on the way");
    BT_CHECK(bt_loader_check_vocab(A, 128255) == -1 && strstr(bt_data_error(), "token 128255 at position 2999 (byte offset 13020)") &&
             strstr(bt_data_error(), p32), "check_vocab 128255: %s", bt_data_error());
    bt_loader_close(A);
    /* cut short while in use: an error naming the file and the offset */
    A = bt_loader_open(p32, 2, 8, 0, 1, 0, 0);
    BT_CHECK(A && bt_loader_next(A, a_in, a_tg) == 0, "open: %s", bt_data_error());
    if (!A) return;
    BT_CHECK(truncate(p32, 1024 + 4 * 1000) == 0, "truncate");
    for (k = 0, r = 0; k < 500 && r == 0; k++) r = bt_loader_next(A, a_in, a_tg);
    BT_CHECK(r == -1 && strstr(bt_data_error(), p32) && strstr(bt_data_error(), "byte offset") && strstr(bt_data_error(), "truncated"), "cut: %s", bt_data_error());
    bt_loader_close(A);
    /* an id that no int32 batch holds: refused by next even without check_vocab */
    t32[40] = 0x80000000u;
    bt_shard_write_u32(p32, t32, 3000);
    A = bt_loader_open(p32, 2, 8, 0, 1, 0, 0);
    BT_CHECK(A != NULL, "open: %s", bt_data_error());
    if (!A) return;
    BT_CHECK(bt_loader_next(A, a_in, a_tg) == 0 && bt_loader_next(A, a_in, a_tg) == 0, "windows 0 and 1: %s", bt_data_error());
    BT_CHECK(bt_loader_next(A, a_in, a_tg) == -1 && strstr(bt_data_error(), "token 2147483648 at position 40") && strstr(bt_data_error(), p32),
             "window 2 holds 2^31: %s", bt_data_error());
    BT_CHECK(bt_loader_check_vocab(A, 0x7FFFFFFF) == -1 && strstr(bt_data_error(), "token 2147483648"), "check_vocab: %s", bt_data_error());
    bt_loader_close(A);
}

/* finding 7: special files are refused without blocking; a directory given as encoder.json is a
   clear error. Finding 8 (test_loader_truncated_shard): a shard cut short under a running
   loader is an error naming the file and the offset, not a SIGBUS. */
static void test_special_files(void) {
    char fifo[512];
    bt_shard s;
    snprintf(fifo, sizeof fifo, "%s/fifo.bin", bt_test_dir);
    if (enc_path)
        BT_CHECK(bt_tokenizer_load(bt_test_dir, voc_path) == NULL && strstr(bt_data_error(), bt_test_dir) && strstr(bt_data_error(), "is a directory"),
                 "encoder.json directory: %s", bt_data_error());
    BT_CHECK(mkfifo(fifo, 0644) == 0, "mkfifo");
    alarm(30);   /* a blocking open would hang: the alarm ends the test binary instead */
    BT_CHECK(bt_shard_open(&s, fifo) == -1 && strstr(bt_data_error(), fifo) && strstr(bt_data_error(), "FIFO"), "shard FIFO: %s", bt_data_error());
    BT_CHECK(bt_loader_open(fifo, 1, 4, 0, 1, 0, 0) == NULL && strstr(bt_data_error(), "FIFO"), "loader FIFO: %s", bt_data_error());
    if (enc_path) {
        BT_CHECK(bt_tokenizer_load(fifo, voc_path) == NULL && strstr(bt_data_error(), "FIFO"), "encoder.json FIFO: %s", bt_data_error());
        BT_CHECK(bt_tokenizer_load(enc_path, fifo) == NULL && strstr(bt_data_error(), "FIFO"), "vocab.bpe FIFO: %s", bt_data_error());
    }
    if (file_exists("./bt_tokenize") && enc_path) {
        char cmd[2048];
        snprintf(cmd, sizeof cmd, "./bt_tokenize --encoder %s --vocab %s --decode %s 2>/dev/null", enc_path, voc_path, fifo);
        BT_CHECK(run(cmd) == 1, "--decode FIFO");
    }
    alarm(0);
}

static void test_loader_truncated_shard(void) {
    static uint16_t toks[20000];
    char path[512];
    int32_t in[16], tg[16];
    size_t i;
    int rc = 0, k;
    bt_loader *L;
    for (i = 0; i < 20000; i++) toks[i] = (uint16_t)(i % 50000);
    snprintf(path, sizeof path, "%s/cut.bin", bt_test_dir);
    bt_shard_write(path, toks, 20000);
    L = bt_loader_open(path, 2, 8, 0, 1, 0, 0);
    BT_CHECK(L && bt_loader_next(L, in, tg) == 0, "open: %s", bt_data_error());
    if (!L) return;
    BT_CHECK(truncate(path, 1024 + 2 * 4000) == 0, "truncate");
    for (k = 0; k < 2000 && rc == 0; k++) rc = bt_loader_next(L, in, tg);
    BT_CHECK(rc == -1 && strstr(bt_data_error(), path) && strstr(bt_data_error(), "byte offset") && strstr(bt_data_error(), "truncated"),
             "truncated shard: %d %s", rc, bt_data_error());
    bt_loader_close(L);
}

/* finding 4: tokens outside the model's vocabulary are found when the loader opens the shards
   (above V, and between V and a padded Vp), naming the file and the position; a token written
   into a shard after that is caught when its window is read */
static void test_loader_vocab(void) {
    static uint16_t toks[5000];
    char path[512];
    int32_t in[64], tg[64];
    bt_loader *L;
    size_t i;
    int k, rc = 0, bad;
    const int bads[2] = {60000, 50300};
    for (i = 0; i < 5000; i++) toks[i] = (uint16_t)(rnd() % 50257);
    snprintf(path, sizeof path, "%s/vocab_bad.bin", bt_test_dir);
    for (bad = 0; bad < 2; bad++) {
        char want[96];
        toks[392] = (uint16_t)bads[bad];
        bt_shard_write(path, toks, 5000);
        L = bt_loader_open(path, 2, 16, 0, 1, 1, 3);
        BT_CHECK(L != NULL, "open: %s", bt_data_error());
        if (!L) return;
        snprintf(want, sizeof want, "token %d at position 392 (byte offset 1808)", bads[bad]);
        BT_CHECK(bt_loader_check_vocab(L, 50257) == -1 && strstr(bt_data_error(), path) && strstr(bt_data_error(), want), "vocab: %s", bt_data_error());
        BT_CHECK(bt_loader_check_vocab(L, 65536) == 0, "a larger vocabulary accepts it: %s", bt_data_error());
        bt_loader_close(L);
    }
    /* clean at open, then a bad token written in place: the window read reports it */
    toks[392] = 7;
    bt_shard_write(path, toks, 5000);
    L = bt_loader_open(path, 2, 16, 0, 1, 0, 0);
    BT_CHECK(L && bt_loader_check_vocab(L, 50257) == 0, "clean: %s", bt_data_error());
    {
        FILE *f = fopen(path, "r+b");
        uint16_t v = 60001;
        fseek(f, 1024 + 2 * 4000, SEEK_SET); fwrite(&v, 2, 1, f); fclose(f);
    }
    for (k = 0; k < 200 && rc == 0; k++) rc = bt_loader_next(L, in, tg);
    BT_CHECK(rc == -1 && strstr(bt_data_error(), "token 60001 at position 4000") && strstr(bt_data_error(), path), "window check: %s", bt_data_error());
    bt_loader_close(L);
}

/* ---- loader ---- */

/* shards whose token at position i of shard k is k*1000 + i (sizes < 1000): a window is known by
   its first token */
static void make_shards(const char *stem, const size_t *sizes, int n) {
    int k;
    for (k = 0; k < n; k++) {
        uint16_t toks[1000];
        char path[512];
        size_t i;
        for (i = 0; i < sizes[k]; i++) toks[i] = (uint16_t)(k * 1000 + i);
        snprintf(path, sizeof path, "%s/%s_%03d.bin", bt_test_dir, stem, k);
        if (bt_shard_write(path, toks, sizes[k]) != 0) { fprintf(stderr, "%s\n", bt_data_error()); exit(1); }
    }
}

static int check_batch(const int32_t *in, const int32_t *tg, int B, int T) {
    int b, t;
    for (b = 0; b < B; b++)
        for (t = 0; t < T; t++) {
            if (tg[b * T + t] != in[b * T + t] + 1) return 0;                          /* targets = next token */
            if (b > 0 && t == 0 && in[b * T] != in[(b - 1) * T] + T) return 0;        /* rows are consecutive */
        }
    return 1;
}

static void test_loader_sequential(void) {
    const size_t sizes[3] = {100, 41, 250};   /* B*T = 16: 6, 2, 15 windows */
    char glob_[512];
    int32_t in[16], tg[16];
    bt_loader *L;
    size_t i, nb;
    int expect[23], ne = 0, k, w, ok = 1;
    make_shards("seq", sizes, 3);
    snprintf(glob_, sizeof glob_, "%s/seq_*.bin", bt_test_dir);
    L = bt_loader_open(glob_, 2, 8, 0, 1, 0, 0);
    BT_CHECK(L != NULL, "open: %s", bt_data_error());
    if (!L) return;
    nb = bt_loader_num_batches(L);
    BT_CHECK(nb == 23 && bt_loader_num_shards(L) == 3, "%zu batches", nb);
    for (k = 0; k < 3; k++) for (w = 0; w < (int)((sizes[k] - 1) / 16); w++) expect[ne++] = k * 1000 + w * 16;
    for (i = 0; i < 2 * nb; i++) {   /* two epochs, the same order */
        ok &= bt_loader_next(L, in, tg) == 0 && check_batch(in, tg, 2, 8) && in[0] == expect[i % nb];
    }
    BT_CHECK(ok, "sequential order over two epochs");
    bt_loader_reset(L);
    BT_CHECK(bt_loader_next(L, in, tg) == 0 && in[0] == 0 && in[15] == 15 && tg[15] == 16, "reset");
    bt_loader_close(L);
    /* errors */
    BT_CHECK(bt_loader_open("/nonexistent/*.bin", 2, 8, 0, 1, 0, 0) == NULL && strstr(bt_data_error(), "no files match glob") &&
             strstr(bt_data_error(), "/nonexistent/*.bin"), "no match: %s", bt_data_error());
    BT_CHECK(bt_loader_open(glob_, 2, 200, 0, 1, 0, 0) == NULL && strstr(bt_data_error(), "too small for B*T+1 = 401") &&
             strstr(bt_data_error(), "seq_002.bin"), "too small: %s", bt_data_error());
    BT_CHECK(bt_loader_open(glob_, 2, 8, 3, 2, 0, 0) == NULL && strstr(bt_data_error(), "rank"), "bad rank: %s", bt_data_error());
    BT_CHECK(bt_loader_open(glob_, 1, 100, 0, 4, 0, 0) == NULL && strstr(bt_data_error(), "fewer than the 4 ranks"), "world: %s", bt_data_error());
    BT_CHECK(bt_loader_open(glob_, 0, 8, 0, 1, 0, 0) == NULL, "B=0");
}

static void test_loader_ranks_disjoint(void) {
    const size_t sizes[5] = {300, 999, 17, 500, 640};
    char glob_[512];
    int world = 3, r, e, shuffle, bad = 0;
    int32_t in[4 * 8], tg[4 * 8];
    make_shards("dist", sizes, 5);
    snprintf(glob_, sizeof glob_, "%s/dist_*.bin", bt_test_dir);
    for (shuffle = 0; shuffle <= 1; shuffle++) {
        bt_loader *L[3];
        size_t nb = 0, i;
        int first_epoch0[64], n0 = 0, differs = 0;
        for (r = 0; r < world; r++) {
            L[r] = bt_loader_open(glob_, 4, 8, r, world, shuffle, 42);
            BT_CHECK(L[r] != NULL, "rank %d: %s", r, bt_data_error());
            if (!L[r]) return;
            if (r == 0) nb = bt_loader_num_batches(L[r]);
            BT_CHECK(bt_loader_num_batches(L[r]) == nb, "ranks disagree on the number of batches");
        }
        /* (300-1)/32 + (999-1)/32 + 0 + (500-1)/32 + (640-1)/32 = 9+31+0+15+19 = 74 windows; 24 per rank */
        BT_CHECK(nb == 24, "%zu batches per rank", nb);
        for (e = 0; e < 3; e++) {
            static unsigned char seen[5000];
            memset(seen, 0, sizeof seen);
            for (r = 0; r < world; r++)
                for (i = 0; i < nb; i++) {
                    if (bt_loader_next(L[r], in, tg) != 0 || !check_batch(in, tg, 4, 8)) { bad++; continue; }
                    if (in[0] % 1000 % 32 != 0 || seen[in[0]]) bad++;   /* window-aligned, never seen this epoch */
                    seen[in[0]] = 1;
                    if (r == 0 && e == 0 && n0 < 64) first_epoch0[n0++] = in[0];
                    if (r == 0 && e == 1 && (int)i < n0 && first_epoch0[i] != in[0]) differs = 1;
                }
        }
        BT_CHECK(bad == 0, "shuffle=%d: %d batches overlap another rank's or are malformed", shuffle, bad);
        if (shuffle) BT_CHECK(differs, "shuffle: epoch 1 has epoch 0's order");
        else BT_CHECK(!differs, "no shuffle: epochs differ");
        for (r = 0; r < world; r++) bt_loader_close(L[r]);
    }
    {   /* the seed decides the order; the same seed gives the same batches */
        bt_loader *a = bt_loader_open(glob_, 4, 8, 0, 1, 1, 7), *b = bt_loader_open(glob_, 4, 8, 0, 1, 1, 7), *c = bt_loader_open(glob_, 4, 8, 0, 1, 1, 8);
        int32_t i2[32], t2[32], i3[32], t3[32];
        int same = 1, samec = 1, k;
        for (k = 0; k < 30; k++) {
            bt_loader_next(a, in, tg); bt_loader_next(b, i2, t2); bt_loader_next(c, i3, t3);
            same &= !memcmp(in, i2, sizeof in);
            samec &= !memcmp(in, i3, sizeof in);
        }
        BT_CHECK(same && !samec, "seeded shuffling");
        bt_loader_close(a); bt_loader_close(b); bt_loader_close(c);
    }
}

static void test_loader_resume(void) {
    const size_t sizes[4] = {400, 333, 720, 90};
    char glob_[512], spath[512];
    int32_t in[3 * 5], tg[3 * 5], want[100][15];
    int r, k, steps[5] = {0, 7, 50, 133, 149}, s;
    snprintf(glob_, sizeof glob_, "%s/res_*.bin", bt_test_dir);
    snprintf(spath, sizeof spath, "%s/loader.state", bt_test_dir);
    make_shards("res", sizes, 4);
    for (r = 0; r < 2; r++)
        for (s = 0; s < 5; s++) {
            bt_loader *L = bt_loader_open(glob_, 3, 5, r, 2, 1, 1234), *M;
            bt_loader_state st, st2;
            FILE *f;
            int ok = 1;
            for (k = 0; k < steps[s]; k++) bt_loader_next(L, in, tg);
            bt_loader_get_state(L, &st);
            f = fopen(spath, "wb"); fwrite(&st, sizeof st, 1, f); fclose(f);
            for (k = 0; k < 100; k++) { bt_loader_next(L, in, tg); memcpy(want[k], in, sizeof in); }
            /* a new loader (a resumed run), the state read back from disk */
            M = bt_loader_open(glob_, 3, 5, r, 2, 1, 1234);
            memset(&st2, 0, sizeof st2);
            f = fopen(spath, "rb"); ok = fread(&st2, sizeof st2, 1, f) == 1; fclose(f);
            BT_CHECK(ok && bt_loader_set_state(M, &st2) == 0, "set_state: %s", bt_data_error());
            for (k = 0; k < 100; k++) { bt_loader_next(M, in, tg); ok &= !memcmp(want[k], in, sizeof in) && check_batch(in, tg, 3, 5); }
            BT_CHECK(ok, "rank %d resumed after %d steps: different batches (epoch %llu)", r, steps[s], (unsigned long long)st.epoch);
            bt_loader_close(L);
            /* states that do not belong */
            st2.rank = 1 - r;
            BT_CHECK(bt_loader_set_state(M, &st2) == -1 && strstr(bt_data_error(), "rank"), "wrong rank: %s", bt_data_error());
            st2.rank = r; st2.magic = 0;
            BT_CHECK(bt_loader_set_state(M, &st2) == -1 && strstr(bt_data_error(), "magic"), "bad magic: %s", bt_data_error());
            st2.magic = BT_LOADER_STATE_MAGIC; st2.position += 1;
            BT_CHECK(bt_loader_set_state(M, &st2) == -1, "inconsistent position accepted");
            st2.position -= 1; st2.step = 1u << 30;
            BT_CHECK(bt_loader_set_state(M, &st2) == -1, "step out of range accepted");
            bt_loader_close(M);
        }
}

/* bt_encode_cut: (1) its byte tests of white space agree with the Unicode table for every code
   point; (2) wherever it cuts a random text (any prefix of it taken as the buffer), encoding the
   two parts gives the ids of the whole; (3) places that look alike but are not cuts are refused */
static void utf8_put(uint32_t cp, unsigned char *b, size_t *n) {
    if (cp < 0x80) { b[0] = (unsigned char)cp; *n = 1; }
    else if (cp < 0x800) { b[0] = (unsigned char)(0xC0 | cp >> 6); b[1] = (unsigned char)(0x80 | (cp & 63)); *n = 2; }
    else if (cp < 0x10000) { b[0] = (unsigned char)(0xE0 | cp >> 12); b[1] = (unsigned char)(0x80 | (cp >> 6 & 63)); b[2] = (unsigned char)(0x80 | (cp & 63)); *n = 3; }
    else { b[0] = (unsigned char)(0xF0 | cp >> 18); b[1] = (unsigned char)(0x80 | (cp >> 12 & 63)); b[2] = (unsigned char)(0x80 | (cp >> 6 & 63)); b[3] = (unsigned char)(0x80 | (cp & 63)); *n = 4; }
}
static void test_encode_cut(void) {
    static const char *alpha[] = {"a", "Z", "'", "'s", "'ll", " ", "  ", "\n", "\n\n", "\t", "\r\n", "7", ".", "!", "\xc2\xa0", "\xe2\x80\x83",
                                  "\xe3\x80\x80", "\xe3\x80\x82", "\xc3\xa9", "\xe4\xb8\xad", "\xf0\x9f\x98\x80", "\xff", "\xe2\x80", "\xc2", "x"};
    unsigned char b[8];
    uint32_t cp;
    size_t n, trial, bad = 0, cuts = 0;
    for (cp = 0; cp < 0x110000; cp++) {
        int space;
        if (cp >= 0xD800 && cp < 0xE000) continue;
        space = bt__unicode_class(cp) == BT__SPACE;
        utf8_put(cp, b, &n);
        if (bt__ends_space(b, n) != space || bt__starts_nonspace(b, n, 0) == space) { if (bad++ < 5) BT_CHECK(0, "U+%04X: white space %d, the byte tests disagree", (unsigned)cp, space); }
    }
    BT_CHECK(bad == 0, "%zu code points disagree", bad);
    for (trial = 0; trial < 300; trial++) {
        char text[600];
        size_t len = 0, L;
        int32_t *whole, *a, *c;
        size_t nw, na, nc;
        while (len < 500) { const char *w = alpha[rnd() % (sizeof alpha / sizeof alpha[0])]; memcpy(text + len, w, strlen(w)); len += strlen(w); }
        nw = bt_encode(tok, text, len, &whole);
        for (L = 1; L <= len; L += 1 + rnd() % 7) {
            size_t p = bt_encode_cut(text, L);
            if (!p) continue;
            cuts++;
            BT_CHECK(p < L, "cut %zu outside the buffer of %zu", p, L);
            na = bt_encode(tok, text, p, &a);
            nc = bt_encode(tok, text + p, len - p, &c);
            BT_CHECK(na + nc == nw && !memcmp(a, whole, na * 4) && !memcmp(c, whole + na, nc * 4),
                     "trial %zu: the cut at %zu (buffer %zu) changes the ids", trial, p, L);
            free(a); free(c);
        }
        free(whole);
    }
    BT_CHECK(cuts > 1000, "only %zu cuts found", cuts);
    /* not cuts: white space before the "\n" or after it, an NBSP, an ideographic space, a lone "\n" at the buffer's end */
    BT_CHECK(bt_encode_cut("a \nB", 4) == 0 && bt_encode_cut("a\n B", 4) == 0 && bt_encode_cut("a\xc2\xa0\nB", 5) == 0 &&
             bt_encode_cut("a\n\xe3\x80\x80", 5) == 0 && bt_encode_cut("ab\n", 3) == 0 && bt_encode_cut("a\n\xe3\x80", 4) == 0 &&
             bt_encode_cut("a  b", 4) == 0, "a false cut");
    BT_CHECK(bt_encode_cut("a\nB", 3) == 2 && bt_encode_cut("ab cd", 5) == 2 && bt_encode_cut("\xe4\xb8\xad\n\xe4\xb8\xad", 7) == 4, "a cut missed");
}

/* ---- the bt_tokenize tool ---- */

static void test_bt_tokenize_tool(void) {
    char in[512], out[512], dec[512], cmd[2048];
    const char *text = "First doc.\n\nSecond doc, \xe2\x80\x9cquoted\xe2\x80\x9d.\n\n\nThird\xff\n\n";
    const char *docs[] = {"First doc.\n\n", "Second doc, \xe2\x80\x9cquoted\xe2\x80\x9d.\n\n", "\nThird\xff\n\n", ""};
    int32_t want[256];
    size_t nw = 0, i, len;
    bt_shard s;
    char *back;
    if (!file_exists("./bt_tokenize")) { BT_SKIP("./bt_tokenize is not built (make tools)"); return; }
    snprintf(in, sizeof in, "%s/doc.txt", bt_test_dir);
    snprintf(out, sizeof out, "%s/doc.bin", bt_test_dir);
    snprintf(dec, sizeof dec, "%s/doc.dec", bt_test_dir);
    bt_test_write_file(in, text, strlen(text));
    /* plain: one document */
    snprintf(cmd, sizeof cmd, "./bt_tokenize -q --encoder %s --vocab %s %s %s", enc_path, voc_path, in, out);
    BT_CHECK(run(cmd) == 0, "%s", cmd);
    nw = enc(text, strlen(text), want, 256);
    BT_CHECK(bt_shard_open(&s, out) == 0 && s.n == nw, "plain shard: %s", bt_data_error());
    for (i = 0; i < s.n && i < nw; i++) BT_CHECK(s.tokens[i] == want[i], "plain token %zu", i);
    bt_shard_close(&s);
    snprintf(cmd, sizeof cmd, "./bt_tokenize --encoder %s --vocab %s --decode %s > %s", enc_path, voc_path, out, dec);
    BT_CHECK(run(cmd) == 0, "%s", cmd);
    back = bt_test_read_file(dec, &len);
    BT_CHECK(back && len == strlen(text) && !memcmp(back, text, len), "--decode gives the text back");
    free(back);
    /* --eot: llm.c's "<|endoftext|>" + text.replace("\n\n", "\n\n<|endoftext|>") */
    snprintf(cmd, sizeof cmd, "./bt_tokenize -q --eot --encoder %s --vocab %s %s %s", enc_path, voc_path, in, out);
    BT_CHECK(run(cmd) == 0, "%s", cmd);
    nw = 0;
    for (i = 0; i < 4; i++) { want[nw++] = BT_EOT; nw += enc(docs[i], strlen(docs[i]), want + nw, 256 - nw); }
    BT_CHECK(bt_shard_open(&s, out) == 0 && s.n == nw, "eot shard: %zu tokens, expected %zu", s.n, nw);
    for (i = 0; i < s.n && i < nw; i++) BT_CHECK(s.tokens[i] == want[i], "eot token %zu: %d, expected %d", i, s.tokens[i], want[i]);
    bt_shard_close(&s);
    /* --skip / --limit */
    snprintf(cmd, sizeof cmd, "./bt_tokenize -q --eot --skip 3 --limit 5 --encoder %s --vocab %s %s %s", enc_path, voc_path, in, out);
    BT_CHECK(run(cmd) == 0 && bt_shard_open(&s, out) == 0 && s.n == 5 && s.tokens[0] == want[3] && s.tokens[4] == want[7], "skip/limit");
    bt_shard_close(&s);
    /* --u32: llm.c's uint32 layout, the same ids; --decode reads it */
    snprintf(cmd, sizeof cmd, "./bt_tokenize -q --u32 --encoder %s --vocab %s %s %s", enc_path, voc_path, in, out);
    nw = enc(text, strlen(text), want, 256);
    BT_CHECK(run(cmd) == 0 && bt_shard_open(&s, out) == 0 && s.n == nw && s.width == 4, "--u32 shard: %s", bt_data_error());
    for (i = 0; i < s.n && i < nw; i++) BT_CHECK(bt_shard_token(&s, i) == (uint32_t)want[i], "--u32 token %zu", i);
    bt_shard_close(&s);
    snprintf(cmd, sizeof cmd, "./bt_tokenize --encoder %s --vocab %s --decode %s > %s", enc_path, voc_path, out, dec);
    BT_CHECK(run(cmd) == 0, "%s", cmd);
    back = bt_test_read_file(dec, &len);
    BT_CHECK(back && len == strlen(text) && !memcmp(back, text, len), "--decode of a uint32 shard gives the text back");
    free(back);
    snprintf(cmd, sizeof cmd, "./bt_tokenize --u32 --encoder %s --vocab %s --decode %s 2>/dev/null", enc_path, voc_path, out);
    BT_CHECK(run(cmd) == 2, "--u32 with --decode is a usage error");
    /* errors: a missing input, a corrupt shard to decode */
    snprintf(cmd, sizeof cmd, "./bt_tokenize -q --encoder %s --vocab %s /nonexistent.txt %s 2>/dev/null", enc_path, voc_path, out);
    BT_CHECK(run(cmd) == 1, "missing input must fail");
    snprintf(cmd, sizeof cmd, "./bt_tokenize --encoder %s --vocab %s --decode %s 2>/dev/null", enc_path, voc_path, in);
    BT_CHECK(run(cmd) == 1, "decoding a text file must fail");
    BT_CHECK(run("./bt_tokenize 2>/dev/null") == 2, "usage error");
    /* finding 2: OUT is checked before the work: not IN itself, not a device; a link is written through */
    {
        char link[512], dev[512], *t2;
        struct stat st;
        size_t l2;
        snprintf(cmd, sizeof cmd, "./bt_tokenize -q --encoder %s --vocab %s %s %s 2>/dev/null", enc_path, voc_path, in, in);
        BT_CHECK(run(cmd) == 1, "IN as OUT must fail");
        t2 = bt_test_read_file(in, &l2);
        BT_CHECK(t2 && l2 == strlen(text) && !memcmp(t2, text, l2), "the input text was overwritten");
        free(t2);
        snprintf(link, sizeof link, "%s/doc_link.txt", bt_test_dir);
        BT_CHECK(symlink("doc.txt", link) == 0, "symlink");
        snprintf(cmd, sizeof cmd, "./bt_tokenize -q --encoder %s --vocab %s %s %s 2>/dev/null", enc_path, voc_path, in, link);
        BT_CHECK(run(cmd) == 1 && file_exists(in) && lstat(link, &st) == 0 && S_ISLNK(st.st_mode), "IN through a link as OUT must fail");
        snprintf(link, sizeof link, "%s/out_link.bin", bt_test_dir);
        BT_CHECK(symlink("doc.bin", link) == 0, "symlink");
        snprintf(cmd, sizeof cmd, "./bt_tokenize -q --encoder %s --vocab %s %s %s", enc_path, voc_path, in, link);
        nw = enc(text, strlen(text), want, 256);
        BT_CHECK(run(cmd) == 0 && lstat(link, &st) == 0 && S_ISLNK(st.st_mode) && bt_shard_open(&s, out) == 0 && s.n == nw,
                 "OUT through a link: the link survives, the shard is its target (%s)", bt_data_error());
        bt_shard_close(&s);
        snprintf(dev, sizeof dev, "%s/dev_out", bt_test_dir);
        if (mknod(dev, S_IFCHR | 0666, makedev(1, 3)) == 0) {   /* a /dev/null of our own (root only) */
            snprintf(cmd, sizeof cmd, "./bt_tokenize -q --encoder %s --vocab %s %s %s 2>/dev/null", enc_path, voc_path, in, dev);
            BT_CHECK(run(cmd) == 1 && stat(dev, &st) == 0 && S_ISCHR(st.st_mode), "a device as OUT must fail and stay a device");
        }
        snprintf(cmd, sizeof cmd, "./bt_tokenize -q --encoder %s --vocab %s %s /nonexistent/dir/x.bin 2>&1 | grep -q 'does not exist'", enc_path, voc_path, in);
        BT_CHECK(run(cmd) == 0, "a missing directory is named");
        snprintf(cmd, sizeof cmd, "./bt_tokenize --encoder --eot %s %s 2>/dev/null", in, out);
        BT_CHECK(run(cmd) == 2, "--encoder --eot is a usage error");
    }
}

/* issue 35, finding 9: every count is range-checked (digits only, no overflow, within its
   bound); a bad one is a usage error naming the value and the flag, exit 2, nothing written */
static void test_bt_tokenize_counts(void) {
    char in[512], out[512], err[512], cmd[2048];
    const char *bad[][2] = {{"--skip 99999999999999999999999", "bad value '99999999999999999999999' for --skip"},
                            {"--limit 18446744073709551616", "bad value '18446744073709551616' for --limit"},
                            {"--limit 2147483648", "bad value '2147483648' for --limit"}, {"--skip -1", "bad value '-1' for --skip"},
                            {"--skip 12x", "bad value '12x' for --skip"}, {"--limit +3", "bad value '+3' for --limit"},
                            {"--skip --eot", "--skip needs a value, but the next argument is the option '--eot'"}};
    size_t i;
    if (!file_exists("./bt_tokenize")) { BT_SKIP("./bt_tokenize is not built (make tools)"); return; }
    snprintf(in, sizeof in, "%s/counts.txt", bt_test_dir);
    snprintf(out, sizeof out, "%s/counts.bin", bt_test_dir);
    snprintf(err, sizeof err, "%s/counts.err", bt_test_dir);
    bt_test_write_text(in, "Some text to tokenize.\n");
    for (i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        remove(out);
        snprintf(cmd, sizeof cmd, "./bt_tokenize -q %s --encoder %s --vocab %s %s %s 2>%s", bad[i][0], enc_path, voc_path, in, out, err);
        int rc = run(cmd);
        char *msg = bt_test_read_file(err, NULL);
        BT_CHECK(rc == 2 && msg && strstr(msg, bad[i][1]) && strstr(msg, "(see bt_tokenize -h)") && !file_exists(out),
                 "'%s': exit %d, %s: %s", bad[i][0], rc, file_exists(out) ? "a shard was written" : "no shard", msg ? msg : "");
        free(msg);
    }
    snprintf(cmd, sizeof cmd, "./bt_tokenize -q --limit 2147483647 --skip 0 --encoder %s --vocab %s %s %s", enc_path, voc_path, in, out);
    BT_CHECK(run(cmd) == 0 && file_exists(out), "the bounds themselves are counts: %s", cmd);
}

int main(void) {
    const char *dirs[2][2] = {{"../shared/data/gpt2-tokenizer/encoder.json", "../shared/data/gpt2-tokenizer/vocab.bpe"},
                              {"data/encoder.json", "data/vocab.bpe"}};
    int d;
    if (bt_test_dir_make("test_data")) return 1;
    for (d = 0; d < 2 && !enc_path; d++)
        if (file_exists(dirs[d][0]) && file_exists(dirs[d][1])) { enc_path = dirs[d][0]; voc_path = dirs[d][1]; }
    BT_RUN(test_unicode_table);
    if (enc_path) tok = bt_tokenizer_load(enc_path, voc_path);
    if (tok) {
        BT_RUN(test_tokenizer_load);
        BT_RUN(test_fixture_cases);
        BT_RUN(test_pretokenizer_vs_regex);
        BT_RUN(test_white_space_semantics);
        BT_RUN(test_bpe_matches_naive);
        BT_RUN(test_roundtrip_random);
        BT_RUN(test_full_corpora);
        BT_RUN(test_encode_cut);
        BT_RUN(test_bt_tokenize_tool);
        BT_RUN(test_bt_tokenize_counts);
        BT_RUN(test_mc_load);
    } else {
        fprintf(stderr, "tokenizer files not found or not loadable: %s\n", enc_path ? bt_data_error() : "(none)");
        bt_test__failed++;
    }
    BT_RUN(test_shard_roundtrip);
    BT_RUN(test_shard_corrupt);
    BT_RUN(test_shard32_roundtrip);
    BT_RUN(test_shard32_corrupt);
    BT_RUN(test_loader_u32);
    BT_RUN(test_special_files);
    BT_RUN(test_loader_truncated_shard);
    BT_RUN(test_loader_vocab);
    BT_RUN(test_loader_sequential);
    BT_RUN(test_loader_ranks_disjoint);
    BT_RUN(test_loader_resume);
    bt_tokenizer_free(tok);
    bt_test_dir_remove();
    return bt_test_summary("test_data");
}
