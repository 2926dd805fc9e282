/* test_ckpt.c - bt_ckpt.h: CRC32C (known vectors, both backends, combine, threads), the strict
   JSON parser and writer, metadata, safetensors round trips of every dtype, a corpus of broken
   files (each a clear error), tensor loads with transpose/padding/conversion, kill -9 of a writer
   mid-save, the asynchronous saver on CPU tensors (rotation, a failing directory, the directory's
   lock, the temporaries of dead writers, an old checkpoint rotation cannot delete, a link at a
   checkpoint's name), and the latest-valid search. With BT_CKPT_INTEROP_DIR set it also reads the file that
   tests/ckpt_interop.py wrote and writes one for it to check (see that script). */
#define _POSIX_C_SOURCE 200809L
#define BT_ALLOC_IMPLEMENTATION
#define BT_TENSOR_IMPLEMENTATION
#define BT_DATA_IMPLEMENTATION
#define BT_CKPT_IMPLEMENTATION
#define BT_OPTIM_IMPLEMENTATION
#include "bt_ckpt.h"
#include "bt_optim.h"   /* bt_f32_split_: a tensor in two halves */
#include "tests/bt_test.h"
#include "tests/bt_test_files.h"

#include <stdlib.h>
#include <unistd.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>

static uint64_t rng_state = 0x9E3779B97F4A7C15ull;
static uint64_t rnd64(void) { return bt__mix64(rng_state += 0x9E3779B97F4A7C15ull); }
static void fill_random(void *p, size_t n) {
    unsigned char *b = (unsigned char *)p;
    size_t i;
    for (i = 0; i + 8 <= n; i += 8) { uint64_t v = rnd64(); memcpy(b + i, &v, 8); }
    for (; i < n; i++) b[i] = (unsigned char)rnd64();
}
/* a file of an 8-byte length (the JSON's, or `hlen` when != 0), the JSON, then data */
static size_t raw_file(unsigned char **out, const char *json, uint64_t hlen, const void *data, size_t dlen) {
    size_t jl = strlen(json), i;
    unsigned char *b = (unsigned char *)malloc(8 + jl + dlen + 1);
    if (!hlen) hlen = jl;
    for (i = 0; i < 8; i++) b[i] = (unsigned char)(hlen >> (8 * i));
    memcpy(b + 8, json, jl);
    if (dlen) memcpy(b + 8 + jl, data, dlen);
    *out = b;
    return 8 + jl + dlen;
}
/* open must fail (from the file and from memory) with a message naming the file and holding `expect` */
static void expect_bad(const unsigned char *bytes, size_t n, int flags, const char *expect, const char *what) {
    const char *path = bt_test_path("bad.safetensors");
    bt_ckpt_file *f;
    bt_test_write_file(path, bytes, n);
    f = bt_ckpt_open(path, flags);
    BT_CHECK(!f, "%s: opened", what);
    BT_CHECK(strstr(bt_ckpt_error(), expect) != NULL, "%s: error \"%s\" lacks \"%s\"", what, bt_ckpt_error(), expect);
    BT_CHECK(!strncmp(bt_ckpt_error(), path, strlen(path)), "%s: error \"%s\" does not start with the path", what, bt_ckpt_error());
    bt_ckpt_close(f);
    f = bt_ckpt_open_memory(bytes, n, flags);
    BT_CHECK(!f, "%s: opened from memory", what);
    BT_CHECK(strstr(bt_ckpt_error(), expect) != NULL, "%s (memory): error \"%s\" lacks \"%s\"", what, bt_ckpt_error(), expect);
    bt_ckpt_close(f);
}
/* recompute the header checksum of a file image after a deliberate edit of its header */
static void fix_header_crc(unsigned char *b, size_t n) {
    const char *key = "\"bt.header_crc32c\":\"";
    uint64_t N = 0;
    size_t i, pos = 0;
    for (i = 0; i < 8; i++) N |= (uint64_t)b[i] << (8 * i);
    for (i = 8; i + strlen(key) < 8 + N && i < n; i++)
        if (!memcmp(b + i, key, strlen(key))) { pos = i + strlen(key); break; }
    if (!pos) return;
    memcpy(b + pos, "00000000", 8);
    bt__ck_hex8((char *)b + pos, bt_crc32c(0, b, (size_t)(8 + N)));
}
static size_t find_bytes(const unsigned char *b, size_t n, const char *s) {
    size_t l = strlen(s), i;
    for (i = 0; i + l <= n; i++) if (!memcmp(b + i, s, l)) return i;
    return (size_t)-1;
}

/* ---- CRC32C ---- */

static void test_crc32c_vectors(void) {
    unsigned char zeros[32], ones[32], inc[32], dec[32];
    int i, pass;
    for (i = 0; i < 32; i++) { zeros[i] = 0; ones[i] = 0xff; inc[i] = (unsigned char)i; dec[i] = (unsigned char)(31 - i); }
    for (pass = 0; pass < 2; pass++) {          /* the backend this CPU picks, then the table */
        bt_crc32c_use_table(pass);
        BT_CHECK(bt_crc32c(0, "123456789", 9) == 0xe3069283u, "%s: check value %08x", bt_crc32c_backend(), bt_crc32c(0, "123456789", 9));
        BT_CHECK(bt_crc32c(0, zeros, 32) == 0x8a9136aau, "%s: 32 zeros", bt_crc32c_backend());     /* RFC 3720 B.4 */
        BT_CHECK(bt_crc32c(0, ones, 32) == 0x62a8ab43u, "%s: 32 0xff", bt_crc32c_backend());
        BT_CHECK(bt_crc32c(0, inc, 32) == 0x46dd794eu, "%s: 0..31", bt_crc32c_backend());
        BT_CHECK(bt_crc32c(0, dec, 32) == 0x113fdb5cu, "%s: 31..0", bt_crc32c_backend());
        BT_CHECK(bt_crc32c(0, "", 0) == 0, "empty");
    }
    bt_crc32c_use_table(0);
    fprintf(stderr, "info: crc32c backend on this CPU: %s\n", bt_crc32c_backend());
}

static void test_crc32c_backends_combine_threads(void) {
    size_t n = (size_t)(bt_test_quick() ? 24 : 72) << 20, i;
    unsigned char *buf = (unsigned char *)malloc(n);
    static const size_t lens[] = {0, 1, 7, 8, 9, 63, 64, 4095, 4096, 12287, 12288, 12289, 24576 + 17, 100000, 1 << 20};
    uint32_t whole, serial;
    int k;
    fill_random(buf, n);
    for (k = 0; k < (int)(sizeof lens / sizeof lens[0]); k++)
        for (i = 0; i < 8; i++) {                /* every alignment */
            uint32_t a, b;
            bt_crc32c_use_table(0); a = bt_crc32c(0x12345678u, buf + i, lens[k]);
            bt_crc32c_use_table(1); b = bt_crc32c(0x12345678u, buf + i, lens[k]);
            BT_CHECK(a == b, "len %zu offset %zu: hardware %08x, table %08x", lens[k], i, a, b);
        }
    bt_crc32c_use_table(0);
    for (k = 0; k < 50; k++) {                   /* CRC(A B) from CRC(A), CRC(B), |B|; and chaining */
        size_t la = (size_t)(rnd64() % 70000), lb = (size_t)(rnd64() % 70000);
        uint32_t ab = bt_crc32c(0, buf, la + lb), a = bt_crc32c(0, buf, la), b = bt_crc32c(0, buf + la, lb);
        BT_CHECK(bt_crc32c_combine(a, b, lb) == ab, "combine %zu + %zu", la, lb);
        BT_CHECK(bt_crc32c(a, buf + la, lb) == ab, "chain %zu + %zu", la, lb);
    }
    serial = bt_crc32c(0, buf, n);
    for (k = 1; k <= 4; k++) {
        bt_ckpt_set_threads(k);
        whole = bt_crc32c_parallel(0, buf, n);
        BT_CHECK(whole == serial, "%d threads: %08x, serial %08x", k, whole, serial);
        BT_CHECK(bt_crc32c_parallel(0xdeadbeefu, buf + 3, n - 5) == bt_crc32c(0xdeadbeefu, buf + 3, n - 5), "%d threads, odd span", k);
    }
    bt_ckpt_set_threads(0);
    free(buf);
}

static void test_crc32c_speed(void) {
    size_t n = (size_t)(bt_test_quick() ? 32 : 256) << 20;
    unsigned char *buf = (unsigned char *)malloc(n);
    double t0, gb = n / 1e9, hw, tab, par;
    volatile uint32_t sink = 0;
    fill_random(buf, n);
    sink ^= bt_crc32c(0, buf, n);                           /* pages touched before timing */
    t0 = bt__ck_now_ms(); sink ^= bt_crc32c(0, buf, n); hw = gb / ((bt__ck_now_ms() - t0) / 1e3);
    bt_crc32c_use_table(1);
    t0 = bt__ck_now_ms(); sink ^= bt_crc32c(0, buf, n); tab = gb / ((bt__ck_now_ms() - t0) / 1e3);
    bt_crc32c_use_table(0);
    t0 = bt__ck_now_ms(); sink ^= bt_crc32c_parallel(0, buf, n); par = gb / ((bt__ck_now_ms() - t0) / 1e3);
    fprintf(stderr, "info: crc32c over %zu MiB: %s %.2f GB/s, table %.2f GB/s, %d threads %.2f GB/s\n", n >> 20,
            bt_crc32c_backend(), hw, tab, bt__ck_threads(), par);
    BT_CHECK(hw > 0.1 && tab > 0.1, "speeds %.2f %.2f", hw, tab);
    (void)sink;
    free(buf);
}

/* ---- JSON ---- */

static void test_json_valid(void) {
    const char *text = " {\"a\": [1, -0, 2.5e-3, 1E+2, 123456789012345678901234567890, true, false, null],"
                       " \"s\": \"q\\\"b\\\\s\\/\\b\\f\\n\\r\\t\\u00e9\\ud83d\\ude00\xc3\xa9\","
                       " \"o\": {\"x\": {}, \"y\": []}, \"\": \"empty key\"}\r\n\t";
    bt_json_doc *d = bt_json_parse(text, strlen(text), 0);
    const bt_json *r, *a, *s, *c;
    int64_t i64;
    uint64_t u64;
    BT_CHECK(d != NULL, "parse: %s", bt_data_error());
    if (!d) return;
    r = bt_json_root(d);
    BT_CHECK(r->type == BT_JSON_OBJECT && r->n == 4, "root");
    a = bt_json_get(r, "a");
    BT_CHECK(a && a->type == BT_JSON_ARRAY && a->n == 8, "array");
    c = a->child;
    BT_CHECK(c->type == BT_JSON_NUMBER && c->num == 1 && !bt_json_i64(c, &i64) && i64 == 1, "1");
    c = c->next; BT_CHECK(c->num == 0 && !bt_json_i64(c, &i64) && i64 == 0, "-0");
    c = c->next; BT_CHECK(c->num == 2.5e-3 && bt_json_i64(c, &i64), "2.5e-3 is not an integer");
    c = c->next; BT_CHECK(c->num == 100 && bt_json_u64(c, &u64), "1E+2 is not an integer literal");
    c = c->next; BT_CHECK(!strcmp(c->str, "123456789012345678901234567890") && bt_json_u64(c, &u64), "big integer kept as text, beyond u64");
    c = c->next; BT_CHECK(c->type == BT_JSON_TRUE, "true");
    c = c->next; BT_CHECK(c->type == BT_JSON_FALSE, "false");
    c = c->next; BT_CHECK(c->type == BT_JSON_NULL && !c->next, "null");
    s = bt_json_get(r, "s");
    BT_CHECK(s && s->type == BT_JSON_STRING && s->len == 19 &&
             !memcmp(s->str, "q\"b\\s/\b\f\n\r\t\xc3\xa9\xf0\x9f\x98\x80\xc3\xa9", 19), "escapes decoded: %.*s", (int)(s ? s->len : 0), s ? s->str : "");
    BT_CHECK(s && s->offset == (size_t)(strstr(text, "\"q") - text), "string offset %zu", s ? s->offset : 0);
    BT_CHECK(bt_json_get(bt_json_get(r, "o"), "x")->type == BT_JSON_OBJECT, "nested object");
    BT_CHECK(bt_json_get(r, "") && !strcmp(bt_json_get(r, "")->str, "empty key"), "empty key");
    BT_CHECK(!bt_json_get(r, "missing"), "absent key");
    bt_json_free(d);
    {   /* integer ranges */
        struct { const char *t; int i_ok; int u_ok; } cases[] = {
            {"9223372036854775807", 1, 1}, {"9223372036854775808", 0, 1}, {"-9223372036854775808", 1, 0},
            {"-9223372036854775809", 0, 0}, {"18446744073709551615", 0, 1}, {"18446744073709551616", 0, 0},
            {"1.0", 0, 0}, {"1e3", 0, 0}, {"-1", 1, 0}};
        size_t k;
        for (k = 0; k < sizeof cases / sizeof cases[0]; k++) {
            bt_json_doc *e = bt_json_parse(cases[k].t, strlen(cases[k].t), 0);
            BT_CHECK(e && (bt_json_i64(bt_json_root(e), &i64) == 0) == cases[k].i_ok, "i64 of %s", cases[k].t);
            BT_CHECK(e && (bt_json_u64(bt_json_root(e), &u64) == 0) == cases[k].u_ok, "u64 of %s", cases[k].t);
            bt_json_free(e);
        }
    }
}

static void test_json_invalid(void) {
    static const struct { const char *text; const char *expect; } cases[] = {
        {"", "expected a value"}, {"   ", "expected a value"}, {"{", "truncated object"}, {"[1,", "expected a value"},
        {"{\"a\":1,}", "expected a string key"}, {"[1,]", "unexpected character ']'"}, {"[01]", "leading zero"},
        {"[1.]", "no digit after a decimal point"}, {"[1e]", "no digit in an exponent"}, {"[-]", "bad number"},
        {"[+1]", "unexpected character '+'"}, {"[NaN]", "unexpected character 'N'"}, {"[Infinity]", "unexpected character 'I'"},
        {"[\"a]", "unterminated string"}, {"[\"a\tb\"]", "control character 0x09"}, {"[\"\\x\"]", "bad escape \\x"},
        {"[\"\\ud800\"]", "without its low half"}, {"[\"\\ud800\\u0041\"]", "high surrogate followed by"},
        {"[\"\\udc00\"]", "lone low surrogate"}, {"[\"\\u12g4\"]", "bad hex digit"}, {"[\"\\u12\"]", "bad hex digit"},
        {"[\"\xff\"]", "invalid UTF-8"}, {"[\"\xc0\xaf\"]", "invalid UTF-8"}, {"[\"\xed\xa0\x80\"]", "invalid UTF-8"},
        {"[\"\xf4\x90\x80\x80\"]", "invalid UTF-8"}, {"[\"\xe2\x82\"]", "invalid UTF-8"},
        {"{\"a\":1,\"a\":2}", "duplicate key \"a\""}, {"[1] x", "unexpected text after the value"},
        {"{\"a\" 1}", "expected ':'"}, {"[1 2]", "expected ',' or ']'"}, {"tru", "unexpected character 't'"},
        {"nul", "unexpected character 'n'"}, {"{1:2}", "expected a string key"}, {"[true false]", "expected ','"},
        {"{\"a\":1}{}", "unexpected text"}, {"'a'", "unexpected character '''"}, {"\xef\xbb\xbf{}", "unexpected byte 0xef"},
    };
    size_t k;
    char big[4096];
    int i, n;
    for (k = 0; k < sizeof cases / sizeof cases[0]; k++) {
        bt_json_doc *d = bt_json_parse(cases[k].text, strlen(cases[k].text), 0);
        BT_CHECK(!d, "accepted: %s", cases[k].text);
        BT_CHECK(strstr(bt_data_error(), cases[k].expect) != NULL, "%s: error \"%s\" lacks \"%s\"", cases[k].text, bt_data_error(), cases[k].expect);
        bt_json_free(d);
    }
    {   /* a NUL byte inside the text is an error too */
        bt_json_doc *d = bt_json_parse("[1,\0]", 5, 0);
        BT_CHECK(!d && strstr(bt_data_error(), "byte 3: unexpected byte 0x00"), "NUL: %s", bt_data_error());
    }
    /* a duplicate among many keys (the sorted path) */
    n = snprintf(big, sizeof big, "{");
    for (i = 0; i < 100; i++) n += snprintf(big + n, sizeof big - n, "\"k%d\":%d,", i, i);
    snprintf(big + n, sizeof big - n, "\"k57\":0}");
    BT_CHECK(!bt_json_parse(big, strlen(big), 0) && strstr(bt_data_error(), "duplicate key \"k57\""), "100 keys: %s", bt_data_error());
    /* nesting: 64 levels are fine, 65 are not */
    for (i = 0; i < 64; i++) { big[i] = '['; big[64 + i] = ']'; }
    {
        bt_json_doc *d = bt_json_parse(big, 128, 0);
        BT_CHECK(d != NULL, "64 levels: %s", bt_data_error());
        bt_json_free(d);
    }
    for (i = 0; i < 65; i++) { big[i] = '['; big[65 + i] = ']'; }
    BT_CHECK(!bt_json_parse(big, 130, 0) && strstr(bt_data_error(), "nesting deeper than 64"), "65 levels: %s", bt_data_error());
    BT_CHECK(!bt_json_parse("[[[1]]]", 7, 2) && strstr(bt_data_error(), "nesting deeper than 2"), "max_depth 2");
    BT_CHECK(!bt_json_parse("{\"a\":[1,2,x]}", 13, 0) && strstr(bt_data_error(), "byte 10"), "offset: %s", bt_data_error());
}

static void test_json_writer(void) {
    char every[40];
    const char *text;
    size_t len;
    int i;
    bt_json_writer w;
    bt_json_doc *d;
    const bt_json *r;
    double nums[] = {0.1, 1e-5, -2.5e300, 1.0 / 3.0, 5e-324, 123456789.0, -0.0};
    for (i = 1; i < 32; i++) every[i - 1] = (char)i;
    strcpy(every + 31, "\"\\/\x7f");
    for (int pretty = 0; pretty <= 2; pretty += 2) {
        bt_json_writer_init(&w, pretty);
        bt_json_object(&w, NULL);
        bt_json_string(&w, "ctl", every);
        bt_json_string(&w, "utf8 \xc3\xa9\xf0\x9f\x98\x80", "caf\xc3\xa9 \xf0\x9f\x98\x80");
        bt_json_array(&w, "nums");
        for (i = 0; i < (int)(sizeof nums / sizeof nums[0]); i++) bt_json_number(&w, NULL, nums[i]);
        bt_json_end(&w);
        bt_json_int(&w, "min", INT64_MIN);
        bt_json_uint(&w, "max", UINT64_MAX);
        bt_json_bool(&w, "t", 1);
        bt_json_null(&w, "n");
        bt_json_array(&w, "empty");
        bt_json_end(&w);
        bt_json_end(&w);
        text = bt_json_text(&w, &len);
        BT_CHECK(text != NULL, "writer: %s", bt_data_error());
        d = text ? bt_json_parse(text, len, 0) : NULL;
        BT_CHECK(d != NULL, "the writer's text parses: %s\n%s", bt_data_error(), text ? text : "");
        if (d) {
            const bt_json *c;
            int64_t mn; uint64_t mx;
            r = bt_json_root(d);
            BT_CHECK(!strcmp(bt_json_get(r, "ctl")->str, every), "control characters round trip");
            BT_CHECK(bt_json_get(r, "utf8 \xc3\xa9\xf0\x9f\x98\x80") != NULL, "UTF-8 key");
            for (c = bt_json_get(r, "nums")->child, i = 0; c; c = c->next, i++)
                BT_CHECK(c->num == nums[i] && signbit(c->num) == signbit(nums[i]), "number %d: %s -> %.17g", i, c->str, c->num);
            BT_CHECK(!strcmp(bt_json_get(r, "nums")->child->next->str, "1e-05"), "shortest form of 1e-5: %s", bt_json_get(r, "nums")->child->next->str);
            BT_CHECK(!bt_json_i64(bt_json_get(r, "min"), &mn) && mn == INT64_MIN, "INT64_MIN");
            BT_CHECK(!bt_json_u64(bt_json_get(r, "max"), &mx) && mx == UINT64_MAX, "UINT64_MAX");
            BT_CHECK(bt_json_get(r, "t")->type == BT_JSON_TRUE && bt_json_get(r, "n")->type == BT_JSON_NULL, "literals");
        }
        bt_json_free(d);
        bt_json_writer_free(&w);
    }
    /* failures are sticky and reported */
    bt_json_writer_init(&w, 0); bt_json_array(&w, NULL); bt_json_string(&w, NULL, "bad \xff"); bt_json_end(&w);
    BT_CHECK(!bt_json_text(&w, NULL) && strstr(bt_data_error(), "invalid UTF-8"), "invalid UTF-8: %s", bt_data_error());
    bt_json_writer_free(&w);
    bt_json_writer_init(&w, 0); bt_json_array(&w, NULL); bt_json_number(&w, NULL, NAN); bt_json_end(&w);
    BT_CHECK(!bt_json_text(&w, NULL) && strstr(bt_data_error(), "not finite"), "NaN: %s", bt_data_error());
    bt_json_writer_free(&w);
    bt_json_writer_init(&w, 0); bt_json_object(&w, NULL);
    BT_CHECK(!bt_json_text(&w, NULL) && strstr(bt_data_error(), "still open"), "unbalanced: %s", bt_data_error());
    bt_json_writer_free(&w);
    bt_json_writer_init(&w, 0); bt_json_array(&w, NULL); bt_json_int(&w, "k", 1); bt_json_end(&w);
    BT_CHECK(!bt_json_text(&w, NULL) && strstr(bt_data_error(), "outside an object"), "key in array: %s", bt_data_error());
    bt_json_writer_free(&w);
    bt_json_writer_init(&w, 0); bt_json_object(&w, NULL); bt_json_int(&w, NULL, 1); bt_json_end(&w);
    BT_CHECK(!bt_json_text(&w, NULL) && strstr(bt_data_error(), "without a key"), "no key: %s", bt_data_error());
    bt_json_writer_free(&w);
}

/* ---- metadata ---- */

static void test_meta_typed(void) {
    bt_ckpt_meta *m = bt_ckpt_meta_new();
    int64_t i64;
    uint64_t u64;
    double f;
    int i;
    bt_loader_state st, back;
    BT_CHECK(!bt_ckpt_meta_set_i64(m, "a", INT64_MIN) && !bt_ckpt_meta_get_i64(m, "a", &i64) && i64 == INT64_MIN, "INT64_MIN");
    BT_CHECK(!bt_ckpt_meta_set_u64(m, "b", UINT64_MAX) && !bt_ckpt_meta_get_u64(m, "b", &u64) && u64 == UINT64_MAX, "UINT64_MAX");
    for (i = 0; i < 200; i++) {
        uint64_t bits = rnd64();
        double v, got = 0;
        memcpy(&v, &bits, 8);
        if (i == 0) v = 5e-324; else if (i == 1) v = -0.0; else if (i == 2) v = 6e-4;
        bt_ckpt_meta_set_f64(m, "f", v);
        BT_CHECK(!bt_ckpt_meta_get_f64(m, "f", &got), "f64 %s", bt_ckpt_meta_get(m, "f"));
        BT_CHECK(v != v ? got != got : !memcmp(&got, &v, 8), "f64 bits: %.17g -> \"%s\" -> %.17g", v, bt_ckpt_meta_get(m, "f"), got);
    }
    bt_ckpt_meta_set_f64(m, "inf", -HUGE_VAL);
    BT_CHECK(!bt_ckpt_meta_get_f64(m, "inf", &f) && f == -HUGE_VAL, "-inf");
    BT_CHECK(bt_ckpt_meta_count(m) == 4, "set replaces: %d keys", bt_ckpt_meta_count(m));
    bt_ckpt_meta_set(m, "s", "12x");
    BT_CHECK(bt_ckpt_meta_get_i64(m, "s", &i64) && strstr(bt_ckpt_error(), "not a 64-bit integer"), "bad int: %s", bt_ckpt_error());
    BT_CHECK(bt_ckpt_meta_get_f64(m, "s", &f), "bad double");
    BT_CHECK(bt_ckpt_meta_get_i64(m, "nope", &i64) && strstr(bt_ckpt_error(), "no key \"nope\""), "absent: %s", bt_ckpt_error());
    for (i = 0; i < 40; i++) {
        unsigned char blob[40];
        void *back_blob = NULL;
        size_t n = 0;
        fill_random(blob, (size_t)i);
        BT_CHECK(!bt_ckpt_meta_set_blob(m, "blob", blob, (size_t)i), "set blob %d", i);
        BT_CHECK(!bt_ckpt_meta_get_blob(m, "blob", &back_blob, &n) && n == (size_t)i && !memcmp(back_blob, blob, n), "blob of %d bytes", i);
        free(back_blob);
    }
    {
        void *p = NULL; size_t n;
        const char *bad[] = {"abc", "ab=c", "a*cd", "===="};
        for (i = 0; i < 4; i++) {
            bt_ckpt_meta_set(m, "blob", bad[i]);
            BT_CHECK(bt_ckpt_meta_get_blob(m, "blob", &p, &n) && strstr(bt_ckpt_error(), "base64"), "bad base64 \"%s\": %s", bad[i], bt_ckpt_error());
        }
    }
    memset(&st, 0, sizeof st);
    st.magic = BT_LOADER_STATE_MAGIC; st.B = 16; st.T = 1024; st.rank = 3; st.world = 8; st.shuffle = 1; st.num_shards = 7;
    st.seed = UINT64_MAX - 5; st.epoch = 2; st.shard = 5; st.position = 123456; st.step = 99; st.rng = rnd64(); st.total_tokens = 1ull << 40;
    BT_CHECK(!bt_ckpt_meta_set_loader(m, 3, &st), "set loader");
    BT_CHECK(!bt_ckpt_meta_get_loader(m, 3, &back) && !memcmp(&st, &back, sizeof st), "loader state round trip: %s", bt_ckpt_meta_get(m, "loader.3"));
    BT_CHECK(bt_ckpt_meta_get_loader(m, 2, &back), "other rank absent");
    bt_ckpt_meta_set(m, "loader.4", "{\"magic\":1}");
    BT_CHECK(bt_ckpt_meta_get_loader(m, 4, &back) && strstr(bt_ckpt_error(), "not a data loader state"), "bad loader: %s", bt_ckpt_error());
    BT_CHECK(bt_ckpt_meta_set(m, "k", "\xff") && strstr(bt_ckpt_error(), "UTF-8"), "invalid UTF-8 value");
    bt_ckpt_meta_free(m);
}

/* ---- round trips ---- */

static const struct { const char *name; bt_ckpt_dtype dt; int ndim; int64_t shape[3]; } rt_tensors[] = {
    {"f32", BT_CKPT_F32, 2, {3, 5}}, {"f64", BT_CKPT_F64, 1, {7}}, {"bf16", BT_CKPT_BF16, 3, {2, 3, 4}},
    {"f16", BT_CKPT_F16, 1, {6}}, {"i32", BT_CKPT_I32, 2, {4, 4}}, {"i64", BT_CKPT_I64, 1, {5}},
    {"u16", BT_CKPT_U16, 1, {9}}, {"u8", BT_CKPT_U8, 1, {11}}, {"scalar", BT_CKPT_F32, 0, {0}},
    {"empty", BT_CKPT_I32, 2, {3, 0}}, {"a/b.c \"quoted\" \xc3\xa9", BT_CKPT_U8, 1, {3}},
};
#define RT_N ((int)(sizeof rt_tensors / sizeof rt_tensors[0]))

/* the round-trip file: every dtype, random bytes, awkward metadata */
static void write_roundtrip(const char *path, unsigned char **data) {
    bt_ckpt_writer *w = bt_ckpt_writer_new();
    bt_ckpt_meta *m = bt_ckpt_writer_meta(w);
    int k;
    for (k = 0; k < RT_N; k++) {
        size_t n = (size_t)bt__ck_nbytes(rt_tensors[k].ndim, rt_tensors[k].shape, bt_ckpt_dtype_size(rt_tensors[k].dt));
        data[k] = (unsigned char *)malloc(n + 1);
        fill_random(data[k], n);
        BT_CHECK(!bt_ckpt_writer_add(w, rt_tensors[k].name, rt_tensors[k].dt, rt_tensors[k].ndim, rt_tensors[k].shape, data[k]),
                 "add %s: %s", rt_tensors[k].name, bt_ckpt_error());
    }
    BT_CHECK(bt_ckpt_writer_add(w, "f32", BT_CKPT_F32, 0, NULL, data[0]) && strstr(bt_ckpt_error(), "added twice"), "duplicate name");
    BT_CHECK(bt_ckpt_writer_add(w, "__metadata__", BT_CKPT_F32, 0, NULL, data[0]), "reserved name");
    bt_ckpt_meta_set(m, "note", "line1\nline2 \"q\" \\ tab\t \xc3\xa9 \xf0\x9f\x98\x80");
    bt_ckpt_meta_set(m, "empty", "");
    bt_ckpt_meta_set_i64(m, "step", 1234567);
    BT_CHECK(!bt_ckpt_writer_save(w, path), "save: %s", bt_ckpt_error());
    bt_ckpt_meta_set(m, "bt.mine", "x");
    BT_CHECK(bt_ckpt_writer_save(w, bt_test_path("never.safetensors")) && strstr(bt_ckpt_error(), "reserved"), "bt. keys reserved: %s", bt_ckpt_error());
    BT_CHECK(access(bt_test_path("never.safetensors"), F_OK) != 0, "no file after a refused save");
    bt_ckpt_writer_free(w);
}

static void check_roundtrip(bt_ckpt_file *f, unsigned char **data) {
    const bt_ckpt_meta *m = bt_ckpt_file_meta(f);
    int k, i;
    int64_t step;
    BT_CHECK(bt_ckpt_count(f) == RT_N && bt_ckpt_has_checksums(f), "count %d", bt_ckpt_count(f));
    for (k = 0; k < RT_N; k++) {
        const bt_ckpt_info *t = bt_ckpt_find(f, rt_tensors[k].name);
        size_t n = (size_t)bt__ck_nbytes(rt_tensors[k].ndim, rt_tensors[k].shape, bt_ckpt_dtype_size(rt_tensors[k].dt));
        unsigned char *back = (unsigned char *)malloc(n + 1);
        BT_CHECK(t != NULL, "find %s", rt_tensors[k].name);
        if (!t) { free(back); continue; }
        BT_CHECK(t->dtype == rt_tensors[k].dt && t->ndim == rt_tensors[k].ndim && t->nbytes == n, "%s: dtype/ndim/bytes", t->name);
        for (i = 0; i < t->ndim; i++) BT_CHECK(t->shape[i] == rt_tensors[k].shape[i], "%s: dim %d", t->name, i);
        BT_CHECK((t->offset - bt_ckpt_info_at(f, 0)->offset) % bt_ckpt_dtype_size(t->dtype) == 0, "%s aligned to its element", t->name);
        BT_CHECK(!bt_ckpt_read(f, t->name, back, n) && !memcmp(back, data[k], n), "%s: bytes round trip (%s)", t->name, bt_ckpt_error());
        BT_CHECK(t->crc == bt_crc32c(0, data[k], n), "%s: stored checksum", t->name);
        free(back);
    }
    BT_CHECK(!strcmp(bt_ckpt_meta_get(m, "note"), "line1\nline2 \"q\" \\ tab\t \xc3\xa9 \xf0\x9f\x98\x80"), "note");
    BT_CHECK(!strcmp(bt_ckpt_meta_get(m, "empty"), ""), "empty value");
    BT_CHECK(!bt_ckpt_meta_get_i64(m, "step", &step) && step == 1234567, "step");
    BT_CHECK(!strcmp(bt_ckpt_meta_get(m, "format"), "pt") && !strcmp(bt_ckpt_meta_get(m, "bt.checksum"), "crc32c"), "our keys");
    BT_CHECK(bt_ckpt_read(f, "f32", data[0], 4) && strstr(bt_ckpt_error(), "is 60 bytes, the buffer 4"), "wrong size: %s", bt_ckpt_error());
    BT_CHECK(bt_ckpt_read(f, "nope", data[0], 4) && strstr(bt_ckpt_error(), "no tensor 'nope'"), "absent: %s", bt_ckpt_error());
}

static void test_roundtrip_all_dtypes(void) {
    const char *path = bt_test_path("rt.safetensors");
    unsigned char *data[RT_N], *bytes;
    size_t n, i;
    uint64_t N = 0;
    bt_ckpt_file *f;
    int k;
    write_roundtrip(path, data);
    f = bt_ckpt_open(path, BT_CKPT_VERIFY | BT_CKPT_REQUIRE_CHECKSUMS);
    BT_CHECK(f != NULL, "open: %s", bt_ckpt_error());
    if (f) check_roundtrip(f, data);
    bt_ckpt_close(f);
    bytes = (unsigned char *)bt_test_read_file(path, &n);
    for (i = 0; i < 8; i++) N |= (uint64_t)bytes[i] << (8 * i);
    BT_CHECK(N % 8 == 0 && bytes[8] == '{' && (bytes[8 + N - 1] == ' ' || bytes[8 + N - 1] == '}'), "header padded to 8 with spaces (N = %llu)", (unsigned long long)N);
    f = bt_ckpt_open_memory(bytes, n, BT_CKPT_VERIFY);
    BT_CHECK(f != NULL, "open from memory: %s", bt_ckpt_error());
    if (f) check_roundtrip(f, data);
    bt_ckpt_close(f);
    free(bytes);
    for (k = 0; k < RT_N; k++) free(data[k]);
}

/* ---- broken files ---- */

static void test_broken_truncations(void) {
    const char *path = bt_test_path("trunc_base.safetensors");
    unsigned char *data[RT_N], *bytes;
    size_t n, i, cuts[64], nc = 0;
    uint64_t N = 0;
    bt_ckpt_file *f;
    int k;
    write_roundtrip(path, data);
    bytes = (unsigned char *)bt_test_read_file(path, &n);
    for (i = 0; i < 8; i++) N |= (uint64_t)bytes[i] << (8 * i);
    f = bt_ckpt_open(path, 0);
    /* every section boundary: the length, the header, each tensor's first, second and last byte */
    cuts[nc++] = 0; cuts[nc++] = 4; cuts[nc++] = 7; cuts[nc++] = 8; cuts[nc++] = 9;
    cuts[nc++] = 8 + (size_t)N / 2; cuts[nc++] = 8 + (size_t)N - 1; cuts[nc++] = 8 + (size_t)N;
    for (k = 0; f && k < bt_ckpt_count(f); k++) {
        const bt_ckpt_info *t = bt_ckpt_info_at(f, k);
        if (!t->nbytes) continue;
        cuts[nc++] = (size_t)t->offset + 1; cuts[nc++] = (size_t)(t->offset + t->nbytes - 1);
        if (t->offset > 8 + N) cuts[nc++] = (size_t)t->offset;
    }
    bt_ckpt_close(f);
    for (i = 0; i < nc; i++) {
        char what[64];
        const char *expect = cuts[i] < 8 ? "too short for the 8-byte header length" : cuts[i] < 8 + N ? "truncated inside the header" : "truncated";
        snprintf(what, sizeof what, "cut at %zu of %zu", cuts[i], n);
        expect_bad(bytes, cuts[i], BT_CKPT_VERIFY, expect, what);
    }
    for (i = 0; i < 40; i++) {                   /* random points */
        size_t cut = (size_t)(rnd64() % n);
        char what[64];
        snprintf(what, sizeof what, "random cut at %zu", cut);
        expect_bad(bytes, cut, 0, cut < 8 ? "too short" : "truncated", what);
    }
    /* a byte too many is as wrong as a byte too few */
    bytes = (unsigned char *)realloc(bytes, n + 1);
    bytes[n] = 0;
    expect_bad(bytes, n + 1, 0, "1 bytes after the last tensor", "one extra byte");
    free(bytes);
    for (k = 0; k < RT_N; k++) free(data[k]);
}

static void test_broken_headers(void) {
    static const struct { const char *json; const char *expect; } cases[] = {
        {"[]", "the header is not a JSON object"},
        {"{\"a\": 5}", "tensor 'a': its entry is not a JSON object"},
        {"{\"a\":{\"dtype\":\"F32\",\"shape\":[1]}}", "tensor 'a': no \"data_offsets\""},
        {"{\"a\":{\"shape\":[1],\"data_offsets\":[0,4]}}", "no \"dtype\""},
        {"{\"a\":{\"dtype\":\"F8_E4M3\",\"shape\":[1],\"data_offsets\":[0,1]}}", "dtype \"F8_E4M3\" is not one of"},
        {"{\"a\":{\"dtype\":4,\"shape\":[1],\"data_offsets\":[0,4]}}", "(not a string)"},
        {"{\"a\":{\"dtype\":\"F32\",\"shape\":[-1],\"data_offsets\":[0,4]}}", "shape entry 0 (-1)"},
        {"{\"a\":{\"dtype\":\"F32\",\"shape\":[1.5],\"data_offsets\":[0,4]}}", "shape entry 0 (1.5)"},
        {"{\"a\":{\"dtype\":\"F32\",\"shape\":1,\"data_offsets\":[0,4]}}", "shape is not an array"},
        {"{\"a\":{\"dtype\":\"U8\",\"shape\":[1,1,1,1,1,1,1,1,1],\"data_offsets\":[0,1]}}", "at most 8 sizes"},
        {"{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[4,0]}}", "data_offsets is not [begin, end]"},
        {"{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0]}}", "data_offsets is not [begin, end]"},
        {"{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[\"0\",\"4\"]}}", "data_offsets is not"},
        {"{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4],\"foo\":1}}", "unexpected field \"foo\""},
        {"{\"__metadata__\":{\"k\":1}}", "__metadata__ \"k\": the value is not a string"},
        {"{\"__metadata__\":[]}", "__metadata__ is not a JSON object"},
        {"{\"__metadata__\":{\"k\\u0000\":\"v\"}}", "NUL character"},
        {"{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]},\"a\":{}}", "duplicate key \"a\""},
        {"{\"a\":", "header JSON, byte 13: expected a value"},
        {"{\"a\xff\":1}", "invalid UTF-8"},
        {"{} x", "unexpected text after the value"},
        {"{\"a\\u0000b\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]}}", "empty or holds a NUL"},
        {"{\"\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]}}", "empty or holds a NUL"},
        {"{\"a\":{\"dtype\":\"F32\",\"shape\":[3],\"data_offsets\":[0,8]}}", "shape [3] of F32 is 12 bytes, but data_offsets [0, 8] span 8"},
        {"{\"a\":{\"dtype\":\"F64\",\"shape\":[4611686018427387904,4611686018427387904],\"data_offsets\":[0,0]}}", "overflows"},
        {"{\"a\":{\"dtype\":\"F32\",\"shape\":[0],\"data_offsets\":[18446744073709551615,18446744073709551615]}}", "out of range"},
        {"{\"a\":{\"dtype\":\"F32\",\"shape\":[100],\"data_offsets\":[0,400]}}", "truncated: the file ends at byte"},
        {"{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]},\"b\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[4,12]}}", "overlap"},
        {"{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]},\"b\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[8,12]}}", "a gap of 4 bytes"},
        {"{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[4,8]}}", "a gap of 4 bytes"},
        {"{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]}}", "8 bytes after the last tensor"},
        {"{\"__metadata__\":{\"bt.checksum\":\"xxh64\"}}", "checksum algorithm \"xxh64\" is not known"},
        {"{\"__metadata__\":{\"bt.checksum\":\"crc32c\"}}", "no header checksum"},
    };
    unsigned char data[12], *b;
    size_t k, n;
    fill_random(data, sizeof data);
    for (k = 0; k < sizeof cases / sizeof cases[0]; k++) {
        size_t dlen = strstr(cases[k].expect, "after the last") ? 12 : strstr(cases[k].expect, "gap") || strstr(cases[k].expect, "overlap") ? (k == 29 ? 8 : 12) : 4;
        char what[64];
        n = raw_file(&b, cases[k].json, 0, data, dlen);
        snprintf(what, sizeof what, "header case %zu", k);
        expect_bad(b, n, 0, cases[k].expect, what);
        free(b);
    }
    /* header lengths */
    n = raw_file(&b, "{}", (uint64_t)1 << 63, NULL, 0); expect_bad(b, n, 0, "header length 9223372036854775808 is absurd", "2^63"); free(b);
    n = raw_file(&b, "{}", 100000001, NULL, 0); expect_bad(b, n, 0, "is absurd", "100000001"); free(b);
    n = raw_file(&b, "{}", 1, NULL, 0); expect_bad(b, n, 0, "too small for a JSON object", "N = 1"); free(b);
    n = raw_file(&b, "{}", 3, NULL, 0); expect_bad(b, n, 0, "truncated inside the header", "N past the end"); free(b);
    /* what safetensors itself writes and accepts: whitespace around the object, an empty file set */
    n = raw_file(&b, "  {}  ", 0, NULL, 0);
    {
        bt_ckpt_file *f = bt_ckpt_open_memory(b, n, 0);
        BT_CHECK(f && bt_ckpt_count(f) == 0 && !bt_ckpt_has_checksums(f), "whitespace-padded empty header: %s", bt_ckpt_error());
        bt_ckpt_close(f);
    }
    free(b);
}

/* a valid checkpoint whose header is edited, its header checksum recomputed (the edit alone is
   then what is wrong), or not */
static void test_broken_checksums(void) {
    const char *path = bt_test_path("crc_base.safetensors");
    unsigned char *data[RT_N], *bytes, *b;
    size_t n, at;
    bt_ckpt_file *f;
    int k;
    write_roundtrip(path, data);
    bytes = (unsigned char *)bt_test_read_file(path, &n);
    f = bt_ckpt_open(path, 0);
    {   /* one flipped bit in a tensor: open (no VERIFY) works, reading that tensor does not */
        const bt_ckpt_info *t = bt_ckpt_find(f, "f32");
        size_t off = (size_t)t->offset + 13;
        char expect[128];
        b = (unsigned char *)malloc(n); memcpy(b, bytes, n);
        b[off] ^= 0x10;
        snprintf(expect, sizeof expect, "tensor 'f32' (file bytes %llu..%llu): checksum", (unsigned long long)t->offset, (unsigned long long)(t->offset + t->nbytes));
        expect_bad(b, n, BT_CKPT_VERIFY, expect, "flipped data bit");
        {
            bt_ckpt_file *g = bt_ckpt_open_memory(b, n, 0);
            unsigned char tmp[64];
            BT_CHECK(g != NULL, "open without verify");
            BT_CHECK(g && bt_ckpt_read(g, "f32", tmp, 60) && strstr(bt_ckpt_error(), "the data is damaged"), "read of the bad tensor: %s", bt_ckpt_error());
            BT_CHECK(g && !bt_ckpt_read(g, "i32", tmp, 64), "read of a good tensor");
            BT_CHECK(g && bt_ckpt_verify(g) && strstr(bt_ckpt_error(), "'f32'"), "verify names it: %s", bt_ckpt_error());
            bt_ckpt_close(g);
        }
        free(b);
    }
    bt_ckpt_close(f);
    /* a changed metadata byte: the header checksum catches it */
    b = (unsigned char *)malloc(n); memcpy(b, bytes, n);
    at = find_bytes(b, n, "line1");
    b[at] = 'L';
    expect_bad(b, n, 0, "header checksum mismatch", "edited metadata");
    /* ...and a changed shape digit too (it is still consistent JSON) */
    memcpy(b, bytes, n);
    at = find_bytes(b, n, "\"shape\":[4,4]");
    b[at + 9] = '2'; b[at + 11] = '8';
    expect_bad(b, n, 0, "header checksum mismatch", "edited shape");
    /* the header checksum key renamed: no header checksum */
    memcpy(b, bytes, n);
    at = find_bytes(b, n, "bt.header_crc32c");
    b[at + 15] = 'x';
    expect_bad(b, n, 0, "no header checksum", "renamed header checksum");
    /* edits with the header checksum made right again */
    memcpy(b, bytes, n);
    at = find_bytes(b, n, "\"bt.crc32c.i32\":\"");
    b[at + 17] = b[at + 17] == '0' ? '1' : '0';
    fix_header_crc(b, n);
    expect_bad(b, n, BT_CKPT_VERIFY, "tensor 'i32'", "wrong tensor checksum, valid header");
    memcpy(b, bytes, n);
    b[at + 17] = 'G';
    fix_header_crc(b, n);
    expect_bad(b, n, 0, "checksum \"", "non-hex tensor checksum");
    memcpy(b, bytes, n);
    b[at + 13] = 'X';                                  /* bt.crc32c.iX2: a tensor that does not exist */
    fix_header_crc(b, n);
    expect_bad(b, n, 0, "the checksum of a tensor the file does not have", "checksum of an unknown tensor");
    memcpy(b, bytes, n);
    at = find_bytes(b, n, "\"bt.checksum\":\"crc32c\"");
    b[at + 20] = 'd';
    expect_bad(b, n, 0, "\"crc32d\" is not known", "unknown algorithm");
    free(b);
    free(bytes);
    for (k = 0; k < RT_N; k++) free(data[k]);
    /* a foreign file (no checksums): fine, unless checksums are required */
    {
        unsigned char d4[4] = {1, 2, 3, 4};
        n = raw_file(&b, "{\"x\":{\"dtype\":\"U8\",\"shape\":[4],\"data_offsets\":[0,4]}}", 0, d4, 4);
        f = bt_ckpt_open_memory(b, n, BT_CKPT_VERIFY);
        BT_CHECK(f && !bt_ckpt_has_checksums(f), "foreign file opens: %s", bt_ckpt_error());
        bt_ckpt_close(f);
        expect_bad(b, n, BT_CKPT_REQUIRE_CHECKSUMS, "the file has no checksums", "checksums required");
        free(b);
    }
}

/* the file shrinks between open and read: an error naming the tensor, not a crash */
static void test_file_shrinks(void) {
    const char *path = bt_test_path("shrink.safetensors");
    unsigned char *data[RT_N], tmp[64];
    bt_ckpt_file *f;
    int k;
    write_roundtrip(path, data);
    f = bt_ckpt_open(path, 0);
    BT_CHECK(f != NULL, "open");
    if (f) {
        const bt_ckpt_info *t = bt_ckpt_find(f, "f64");
        BT_CHECK(truncate(path, (off_t)t->offset + 3) == 0, "truncate");
        BT_CHECK(bt_ckpt_read(f, "f64", tmp, 56) && strstr(bt_ckpt_error(), "tensor 'f64'") && strstr(bt_ckpt_error(), "shrank"),
                 "read after shrinking: %s", bt_ckpt_error());
    }
    bt_ckpt_close(f);
    for (k = 0; k < RT_N; k++) free(data[k]);
    BT_CHECK(!bt_ckpt_open(bt_test_dir, 0) && strstr(bt_ckpt_error(), "not a regular file"), "a directory: %s", bt_ckpt_error());
    BT_CHECK(!bt_ckpt_open(bt_test_path("missing"), 0) && strstr(bt_ckpt_error(), "missing"), "missing file: %s", bt_ckpt_error());
}

/* ---- tensors ---- */

static void test_tensor_load_store(void) {
    const char *path = bt_test_path("tensors.safetensors");
    bt_tensor *a = bt_randn(bt_shape2(5, 7), BT_F32, bt_cpu(), 11), *h = bt_randn(bt_shape1(9), BT_BF16, bt_cpu(), 12);
    bt_tensor *ids = bt_from_data((int32_t[]){3, -1, 7, 1 << 30}, bt_shape1(4), BT_I32, bt_cpu());
    bt_tensor *at = bt_transpose(a, 0, 1);          /* a non-contiguous view [7, 5] */
    bt_ckpt_writer *w = bt_ckpt_writer_new();
    bt_ckpt_file *f;
    int i, j;
    BT_CHECK(!bt_ckpt_writer_add_tensor(w, "a", a, 0, 0), "add a");
    BT_CHECK(!bt_ckpt_writer_add_tensor(w, "h", h, 0, 0), "add h");
    BT_CHECK(!bt_ckpt_writer_add_tensor(w, "ids", ids, 0, 0), "add ids");
    BT_CHECK(!bt_ckpt_writer_add_tensor(w, "a_t", a, BT_CKPT_TRANSPOSE, 0), "add transposed (Conv1D layout)");
    BT_CHECK(!bt_ckpt_writer_add_tensor(w, "a_rows3", a, 0, 3), "add the first 3 rows (unpadded)");
    BT_CHECK(!bt_ckpt_writer_add_tensor(w, "view", at, 0, 0), "add a strided view");
    BT_CHECK(bt_ckpt_writer_add_tensor(w, "bad", a, 0, 6) && strstr(bt_ckpt_error(), "6 rows asked"), "too many rows: %s", bt_ckpt_error());
    BT_CHECK(bt_ckpt_writer_add_tensor(w, "bad", h, BT_CKPT_TRANSPOSE, 0) && strstr(bt_ckpt_error(), "needs 2 dims"), "transpose of 1-D");
    BT_CHECK(!bt_ckpt_writer_save(w, path), "save: %s", bt_ckpt_error());
    bt_ckpt_writer_free(w);
    f = bt_ckpt_open(path, BT_CKPT_REQUIRE_CHECKSUMS);
    BT_CHECK(f != NULL, "open: %s", bt_ckpt_error());
    if (!f) return;
    BT_CHECK(bt_ckpt_find(f, "a_t")->shape[0] == 7 && bt_ckpt_find(f, "a_rows3")->shape[0] == 3, "exported shapes");
    {
        bt_tensor *a2 = bt_zeros(bt_shape2(5, 7), BT_F32, bt_cpu()), *t2 = bt_zeros(bt_shape2(5, 7), BT_F32, bt_cpu());
        bt_tensor *pad = bt_full(bt_shape2(8, 7), 9.0, BT_F32, bt_cpu()), *dbl = bt_zeros(bt_shape2(5, 7), BT_F64, bt_cpu());
        bt_tensor *h2 = bt_zeros(bt_shape1(9), BT_BF16, bt_cpu()), *ids2 = bt_zeros(bt_shape1(4), BT_I32, bt_cpu());
        bt_tensor *v2base = bt_zeros(bt_shape2(5, 7), BT_F32, bt_cpu()), *v2 = bt_transpose(v2base, 0, 1);
        bt_tensor *padT = bt_full(bt_shape2(6, 7), 9.0, BT_F32, bt_cpu());
        BT_CHECK(!bt_ckpt_load(f, "a", a2, 0), "load a: %s", bt_ckpt_error());
        BT_CHECK(!memcmp(bt_data_ptr(a2), bt_data_ptr(a), 35 * 4), "a bit-exact");
        BT_CHECK(!bt_ckpt_load(f, "h", h2, 0) && !memcmp(bt_data_ptr(h2), bt_data_ptr(h), 18), "bf16 bit-exact");
        BT_CHECK(!bt_ckpt_load(f, "ids", ids2, 0) && !memcmp(bt_data_ptr(ids2), bt_data_ptr(ids), 16), "i32 exact");
        BT_CHECK(!bt_ckpt_load(f, "a_t", t2, BT_CKPT_TRANSPOSE) && !memcmp(bt_data_ptr(t2), bt_data_ptr(a), 35 * 4), "transpose back: %s", bt_ckpt_error());
        BT_CHECK(!bt_ckpt_load(f, "view", v2, 0), "into a strided view: %s", bt_ckpt_error());
        for (i = 0; i < 7; i++) for (j = 0; j < 5; j++) {
            int64_t ij[2] = {i, j}, ji[2] = {j, i};
            BT_CHECK(bt_get(v2, ij) == bt_get(a, ji), "view (%d, %d)", i, j);
        }
        BT_CHECK(!bt_ckpt_load(f, "a", pad, BT_CKPT_PAD_ROWS), "padded rows: %s", bt_ckpt_error());
        BT_CHECK(!memcmp(bt_data_ptr(pad), bt_data_ptr(a), 35 * 4), "rows 0..4");
        for (i = 35; i < 56; i++) BT_CHECK(((float *)bt_data_ptr(pad))[i] == 0, "padding row element %d is zero", i);
        BT_CHECK(!bt_ckpt_load(f, "a_rows3", padT, BT_CKPT_PAD_ROWS) && !memcmp(bt_data_ptr(padT), bt_data_ptr(a), 21 * 4), "3 rows into 6");
        for (i = 21; i < 42; i++) BT_CHECK(((float *)bt_data_ptr(padT))[i] == 0, "rows 3..5 zero");
        BT_CHECK(!bt_ckpt_load(f, "a", dbl, BT_CKPT_CONVERT), "f32 -> f64: %s", bt_ckpt_error());
        for (i = 0; i < 35; i++) BT_CHECK(((double *)bt_data_ptr(dbl))[i] == (double)((float *)bt_data_ptr(a))[i], "converted %d", i);
        BT_CHECK(bt_ckpt_load(f, "a", dbl, 0) && strstr(bt_ckpt_error(), "tensor 'a' is F32, the destination f64"), "dtype checked: %s", bt_ckpt_error());
        BT_CHECK(bt_ckpt_load(f, "a", pad, 0) && strstr(bt_ckpt_error(), "has shape [5, 7], the destination [8, 7]"), "shape checked: %s", bt_ckpt_error());
        BT_CHECK(bt_ckpt_load(f, "a", t2, BT_CKPT_TRANSPOSE) && strstr(bt_ckpt_error(), "(to be transposed)"), "transposed shape checked");
        BT_CHECK(bt_ckpt_load(f, "nope", a2, 0) && strstr(bt_ckpt_error(), "no tensor 'nope' (it has 6: "), "absent: %s", bt_ckpt_error());
        bt_release(a2); bt_release(t2); bt_release(pad); bt_release(dbl); bt_release(h2); bt_release(ids2); bt_release(v2); bt_release(v2base); bt_release(padT);
    }
    bt_ckpt_close(f);
    {   /* U8 has no bt_tensor dtype */
        unsigned char u[3] = {1, 2, 3}, *b;
        bt_tensor *x = bt_zeros(bt_shape1(3), BT_U16, bt_cpu());
        size_t n = raw_file(&b, "{\"u\":{\"dtype\":\"U8\",\"shape\":[3],\"data_offsets\":[0,3]}, \"__metadata__\":{}}  ", 0, u, 3);
        f = bt_ckpt_open_memory(b, n, 0);
        BT_CHECK(f && bt_ckpt_load(f, "u", x, BT_CKPT_CONVERT) && strstr(bt_ckpt_error(), "U8, which bt_tensor has no dtype for"), "U8: %s", bt_ckpt_error());
        bt_ckpt_close(f); free(b); bt_release(x);
    }
    bt_release(a); bt_release(h); bt_release(ids); bt_release(at);
}

/* ---- kill -9 of a writer ---- */

#define KILL_FLOATS ((size_t)3 << 20)            /* 12 MB per tensor, 2 tensors */
static uint32_t kill_pattern(uint64_t iter, size_t i) { return (uint32_t)(iter * 2654435761u) ^ (uint32_t)(i * 40503u); }
/* the child: save the same path over and over until killed */
static int writer_child(const char *path) {
    uint32_t *a = (uint32_t *)malloc(KILL_FLOATS * 4), *b = (uint32_t *)malloc(KILL_FLOATS * 4);
    int64_t shape[1] = {(int64_t)KILL_FLOATS};
    uint64_t iter;
    for (iter = 1;; iter++) {
        bt_ckpt_writer *w = bt_ckpt_writer_new();
        size_t i;
        for (i = 0; i < KILL_FLOATS; i++) { a[i] = kill_pattern(iter, i); b[i] = ~a[i]; }
        bt_ckpt_writer_add(w, "a", BT_CKPT_U16, 1, (int64_t[]){(int64_t)KILL_FLOATS * 2}, a);
        bt_ckpt_writer_add(w, "b", BT_CKPT_I32, 1, shape, b);
        bt_ckpt_meta_set_u64(bt_ckpt_writer_meta(w), "iter", iter);
        if (bt_ckpt_writer_save(w, path)) { fprintf(stderr, "child: %s\n", bt_ckpt_error()); return 1; }
        bt_ckpt_writer_free(w);
    }
}
static int check_kill_file(const char *path, uint64_t *iter) {
    bt_ckpt_file *f = bt_ckpt_open(path, BT_CKPT_VERIFY | BT_CKPT_REQUIRE_CHECKSUMS);
    uint32_t *b;
    size_t i;
    int ok = 1;
    if (!f) { fprintf(stderr, "  %s\n", bt_ckpt_error()); return 0; }
    b = (uint32_t *)malloc(KILL_FLOATS * 4);
    if (bt_ckpt_meta_get_u64(bt_ckpt_file_meta(f), "iter", iter) || bt_ckpt_read(f, "b", b, KILL_FLOATS * 4)) ok = 0;
    for (i = 0; ok && i < KILL_FLOATS; i += 4099) if (b[i] != ~kill_pattern(*iter, i)) ok = 0;
    free(b);
    bt_ckpt_close(f);
    return ok;
}
static void test_kill9_mid_save(void) {
    const char *path = bt_test_path("kill.safetensors");
    char exe[1024], cmd_path[600];
    ssize_t el = readlink("/proc/self/exe", exe, sizeof exe - 1);
    int rounds = bt_test_quick() ? 6 : 14, r, distinct = 0, leftovers = 0, stalled = 0;
    uint64_t last = 0, iter = 0;
    DIR *d;
    struct dirent *de;
    if (el <= 0) { BT_SKIP("no /proc/self/exe"); return; }
    exe[el] = 0;
    snprintf(cmd_path, sizeof cmd_path, "%s", path);
    /* a round whose kill came before the child's next commit waits longer the next time (a slow
       or busy disk), so that kills land on different saves; at most 3x the rounds */
    for (r = 0; r < rounds || (distinct < 2 && r < 3 * rounds); r++) {
        pid_t pid = fork();
        struct timespec ts;
        int status;
        if (pid == 0) { execl(exe, exe, "--writer-child", cmd_path, (char *)NULL); _exit(127); }
        if (r == 0) {                            /* the first file must exist before the kills count */
            int waited;
            for (waited = 0; waited < 3000 && access(path, F_OK) != 0; waited++) { ts.tv_sec = 0; ts.tv_nsec = 10000000; nanosleep(&ts, NULL); }
        }
        {
            long ms = (long)(20 + rnd64() % 280) + 400L * (stalled < 5 ? stalled : 5);
            ts.tv_sec = ms / 1000; ts.tv_nsec = (ms % 1000) * 1000000L;
        }
        nanosleep(&ts, NULL);
        kill(pid, SIGKILL);
        waitpid(pid, &status, 0);
        BT_CHECK(WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL, "round %d: the child was killed (status %d)", r, status);
        BT_CHECK(check_kill_file(path, &iter), "round %d: the file after kill -9 is a whole, valid checkpoint", r);
        if (iter != last) { distinct++; stalled = 0; } else stalled++;
        last = iter;
    }
    if ((d = opendir(bt_test_dir)) != NULL) {
        while ((de = readdir(d)) != NULL) if (strstr(de->d_name, "kill.safetensors.tmp.")) leftovers++;
        closedir(d);
    }
    fprintf(stderr, "info: kill -9: %d rounds, %d distinct saves seen, %d temporaries left behind\n", r, distinct, leftovers);
    BT_CHECK(distinct >= 2, "the writer made progress between kills (%d distinct)", distinct);
}

/* ---- asynchronous saver ---- */

static void fill_step(bt_tensor *t, int64_t step, int k) { bt_uniform_(t, -1, 1, (uint64_t)(1000 * step + k), 0); }

static void test_saver_cpu(void) {
    char dir[512];
    int64_t n = bt_test_quick() ? (1 << 18) : (1 << 22), *steps = NULL;
    bt_tensor *t[3], *want[3];
    const char *names[3] = {"params", "adam.m", "count"};
    bt_ckpt_saver *s;
    bt_ckpt_saver_stats st;
    int step, k, ns;
    snprintf(dir, sizeof dir, "%s/saver", bt_test_dir);
    t[0] = bt_empty(bt_shape1(n), BT_F32, bt_cpu());
    t[1] = bt_empty(bt_shape2(n / 4, 4), BT_BF16, bt_cpu());
    t[2] = bt_empty(bt_shape1(3), BT_I64, bt_cpu());
    s = bt_ckpt_saver_new(dir, 2);                  /* makes the directory */
    BT_CHECK(s != NULL, "saver: %s", bt_ckpt_error());
    if (!s) return;
    bt_test_write_file(bt_test_path("saver/notes.txt"), "mine", 4);              /* not ours: never touched */
    bt_test_write_file(bt_test_path("saver/ckpt_abc.safetensors"), "x", 1);
    bt_test_write_file(bt_test_path("saver/ckpt_7.safetensors"), "x", 1);         /* not our spelling of step 7 */
    for (step = 1; step <= 5; step++) {
        bt_ckpt_meta *m = bt_ckpt_meta_new();
        for (k = 0; k < 2; k++) fill_step(t[k], step, k);
        ((int64_t *)bt_data_ptr(t[2]))[0] = step;
        bt_ckpt_meta_set_i64(m, "step", step);
        BT_CHECK(!bt_ckpt_saver_snapshot(s, step * 100, t, names, 3, m), "snapshot %d: %s", step, bt_ckpt_error());
        bt_ckpt_meta_free(m);
        for (k = 0; k < 2; k++) bt_fill_(t[k], -7.0);                /* the optimizer overwrites at once */
    }
    BT_CHECK(!bt_ckpt_saver_wait(s), "wait: %s", bt_ckpt_error());
    bt_ckpt_saver_get_stats(s, &st);
    fprintf(stderr, "info: saver (CPU, %.1f MB per checkpoint): stall last %.2f ms max %.2f ms (waiting %.1f ms in all), "
            "save %.1f ms (checksums %.1f, write %.1f), %.0f MB/s, %lld removed\n", st.last_bytes / 1e6, st.last_stall_ms,
            st.max_stall_ms, st.total_wait_ms, st.last_save_ms, st.last_checksum_ms, st.last_write_ms, st.last_mb_per_s, (long long)st.removed);
    BT_CHECK(st.snapshots == 5 && st.saves == 5 && st.last_step == 500, "counts %lld %lld %lld", (long long)st.snapshots, (long long)st.saves, (long long)st.last_step);
    BT_CHECK(st.last_bytes == (uint64_t)(n * 4 + n * 2 + 24) && st.total_bytes == 5 * st.last_bytes, "bytes %llu", (unsigned long long)st.last_bytes);
    BT_CHECK(st.last_mb_per_s > 0 && st.last_save_ms > 0 && st.last_stall_ms > 0 && st.max_stall_ms >= st.last_stall_ms, "times");
    BT_CHECK(st.removed == 3, "rotation removed 3 (%lld)", (long long)st.removed);
    BT_CHECK(strstr(bt_ckpt_saver_last_path(s), "ckpt_000000500.safetensors") != NULL, "last path %s", bt_ckpt_saver_last_path(s));
    ns = bt_ckpt_list(dir, &steps);
    BT_CHECK(ns == 2 && steps[0] == 500 && steps[1] == 400, "kept the newest 2 (%d: %lld, %lld)", ns, ns > 0 ? (long long)steps[0] : -1LL, ns > 1 ? (long long)steps[1] : -1LL);
    for (k = 0; k < ns; k++) {                     /* each file holds its step's values */
        char path[600];
        bt_ckpt_file *f;
        int64_t sstep;
        bt_ckpt_path(dir, steps[k], path, sizeof path);
        f = bt_ckpt_open(path, BT_CKPT_VERIFY | BT_CKPT_REQUIRE_CHECKSUMS);
        BT_CHECK(f != NULL, "%s: %s", path, bt_ckpt_error());
        if (!f) continue;
        BT_CHECK(!bt_ckpt_meta_get_i64(bt_ckpt_file_meta(f), "step", &sstep) && sstep * 100 == steps[k], "meta step");
        want[0] = bt_empty(bt_shape1(n), BT_F32, bt_cpu()); fill_step(want[0], sstep, 0);
        want[1] = bt_empty(bt_shape2(n / 4, 4), BT_BF16, bt_cpu()); fill_step(want[1], sstep, 1);
        {
            bt_tensor *g0 = bt_empty(bt_shape1(n), BT_F32, bt_cpu()), *g1 = bt_empty(bt_shape2(n / 4, 4), BT_BF16, bt_cpu());
            int64_t cnt[3];
            BT_CHECK(!bt_ckpt_load(f, "params", g0, 0) && !memcmp(bt_data_ptr(g0), bt_data_ptr(want[0]), (size_t)n * 4), "params of step %lld", (long long)sstep);
            BT_CHECK(!bt_ckpt_load(f, "adam.m", g1, 0) && !memcmp(bt_data_ptr(g1), bt_data_ptr(want[1]), (size_t)n * 2), "adam.m of step %lld", (long long)sstep);
            BT_CHECK(!bt_ckpt_read(f, "count", cnt, 24) && cnt[0] == sstep, "count");
            bt_release(g0); bt_release(g1);
        }
        bt_release(want[0]); bt_release(want[1]);
        bt_ckpt_close(f);
    }
    free(steps);
    BT_CHECK(access(bt_test_path("saver/notes.txt"), F_OK) == 0 && access(bt_test_path("saver/ckpt_abc.safetensors"), F_OK) == 0 &&
             access(bt_test_path("saver/ckpt_7.safetensors"), F_OK) == 0, "files that are not ours survive rotation");
    {   /* bad snapshots are refused at once */
        bt_tensor *v = bt_transpose(t[1], 0, 1);
        bt_tensor *vs[1] = {v};
        const char *vn[1] = {"v"}, *dup[2] = {"x", "x"};
        bt_tensor *two[2] = {t[0], t[0]};
        bt_ckpt_meta *m = bt_ckpt_meta_new();
        BT_CHECK(bt_ckpt_saver_snapshot(s, 9, vs, vn, 1, NULL) && strstr(bt_ckpt_error(), "must be contiguous"), "strided: %s", bt_ckpt_error());
        BT_CHECK(bt_ckpt_saver_snapshot(s, 9, two, dup, 2, NULL) && strstr(bt_ckpt_error(), "added twice"), "duplicate names: %s", bt_ckpt_error());
        bt_ckpt_meta_set(m, "bt.x", "1");
        BT_CHECK(bt_ckpt_saver_snapshot(s, 9, t, names, 3, m) && strstr(bt_ckpt_error(), "reserved"), "reserved key: %s", bt_ckpt_error());
        BT_CHECK(bt_ckpt_saver_snapshot(s, -1, t, names, 3, NULL), "negative step");
        bt_ckpt_meta_free(m);
        bt_release(v);
    }
    BT_CHECK(!bt_ckpt_saver_free(s), "free: %s", bt_ckpt_error());
    for (k = 0; k < 3; k++) bt_release(t[k]);
}

/* an f32 tensor held in two halves (bt_optim.h's bt_f32_split_) is saved as its f32 values: the
   saver copies its bytes as they are and joins them on the writer thread, leaving the tensor in
   halves; a part of one is refused, as are the writer's add_tensor and a load into one */
static void test_saver_halves(void) {
    char dir[512], path[600];
    int64_t n = 100003;
    snprintf(dir, sizeof dir, "%s/saver_halves", bt_test_dir);
    bt_tensor *buf = bt_randn(bt_shape1(n + 3), BT_F32, bt_cpu(), 17);
    bt_tensor *w = bt_narrow(buf, 0, 0, n), *tail = bt_narrow(buf, 0, n, 3), *part = bt_narrow(buf, 0, 1, 10);
    float *want = (float *)malloc(sizeof(float) * (size_t)(n + 3));
    memcpy(want, bt_data_ptr(buf), sizeof(float) * (size_t)(n + 3));
    bt_f32_split_(w);
    unsigned char *halves = (unsigned char *)malloc(4 * (size_t)n);
    memcpy(halves, bt_data_ptr(buf), 4 * (size_t)n);
    bt_ckpt_saver *s = bt_ckpt_saver_new(dir, 0);
    BT_CHECK(s != NULL, "saver: %s", bt_ckpt_error());
    if (!s) return;
    bt_tensor *t[2] = {w, tail}, *bad[1] = {part};
    const char *names[2] = {"params", "tail"};
    BT_CHECK(!bt_ckpt_saver_snapshot(s, 1, t, names, 2, NULL) && !bt_ckpt_saver_wait(s), "snapshot: %s", bt_ckpt_error());
    BT_CHECK(buf->storage->halves == n && !memcmp(bt_data_ptr(buf), halves, 4 * (size_t)n), "the saver changed the tensor in halves");
    BT_CHECK(bt_ckpt_saver_snapshot(s, 2, bad, names, 1, NULL) && strstr(bt_ckpt_error(), "part of an f32 array held in two halves"),
             "a part of one: %s", bt_ckpt_error());
    BT_CHECK(!bt_ckpt_saver_free(s), "free: %s", bt_ckpt_error());
    bt_ckpt_path(dir, 1, path, sizeof path);
    bt_ckpt_file *f = bt_ckpt_open(path, BT_CKPT_VERIFY | BT_CKPT_REQUIRE_CHECKSUMS);
    BT_CHECK(f != NULL, "%s: %s", path, bt_ckpt_error());
    if (f) {
        bt_tensor *g = bt_empty(bt_shape1(n), BT_F32, bt_cpu()), *g3 = bt_empty(bt_shape1(3), BT_F32, bt_cpu());
        BT_CHECK(!bt_ckpt_load(f, "params", g, 0) && !memcmp(bt_data_ptr(g), want, 4 * (size_t)n), "params: not the f32 values");
        BT_CHECK(!bt_ckpt_load(f, "tail", g3, 0) && !memcmp(bt_data_ptr(g3), want + n, 12), "tail: not its values");
        BT_CHECK(bt_ckpt_load(f, "params", w, 0) && strstr(bt_ckpt_error(), "two halves"), "a load into halves: %s", bt_ckpt_error());
        bt_release(g); bt_release(g3);
        bt_ckpt_close(f);
    }
    bt_ckpt_writer *wr = bt_ckpt_writer_new();
    BT_CHECK(bt_ckpt_writer_add_tensor(wr, "params", w, 0, 0) && strstr(bt_ckpt_error(), "two halves"), "add_tensor: %s", bt_ckpt_error());
    bt_ckpt_writer_free(wr);
    bt_f32_join_(w);
    BT_CHECK(!memcmp(bt_data_ptr(buf), want, 4 * (size_t)(n + 3)), "joined: not the values");
    free(want); free(halves);
    bt_release(part); bt_release(tail); bt_release(w); bt_release(buf);
}

static void rm_dir_files(const char *dir) {
    DIR *d = opendir(dir);
    struct dirent *de;
    char p[1024];
    if (!d) return;
    while ((de = readdir(d)) != NULL) {
        if (de->d_name[0] == '.') continue;
        snprintf(p, sizeof p, "%s/%s", dir, de->d_name);
        unlink(p);
    }
    closedir(d);
    rmdir(dir);
}

static void test_saver_failure(void) {
    char dir[512];
    bt_tensor *t = bt_randn(bt_shape1(1000), BT_F32, bt_cpu(), 5);
    const char *name = "w";
    bt_ckpt_saver *s;
    bt_ckpt_saver_stats st;
    snprintf(dir, sizeof dir, "%s/failing", bt_test_dir);
    s = bt_ckpt_saver_new(dir, 0);
    BT_CHECK(s != NULL, "saver: %s", bt_ckpt_error());
    if (!s) return;
    BT_CHECK(!bt_ckpt_saver_snapshot(s, 1, &t, &name, 1, NULL) && !bt_ckpt_saver_wait(s), "first save: %s", bt_ckpt_error());
    rm_dir_files(dir);                              /* the directory disappears under the run */
    BT_CHECK(!bt_ckpt_saver_snapshot(s, 2, &t, &name, 1, NULL), "the snapshot itself is taken");
    BT_CHECK(bt_ckpt_saver_wait(s) && strstr(bt_ckpt_error(), "ckpt_000000002.safetensors") && strstr(bt_ckpt_error(), "does not exist"),
             "the failed save is reported by wait: %s", bt_ckpt_error());
    BT_CHECK(!bt_ckpt_saver_wait(s), "reported once");
    BT_CHECK(!bt_ckpt_saver_snapshot(s, 3, &t, &name, 1, NULL), "snapshot 3 enqueued");
    BT_CHECK(bt_ckpt_saver_snapshot(s, 4, &t, &name, 1, NULL) && strstr(bt_ckpt_error(), "ckpt_000000003"), "...and reported by the next snapshot: %s", bt_ckpt_error());
    mkdir(dir, 0755);                               /* back: saving works again */
    BT_CHECK(!bt_ckpt_saver_snapshot(s, 5, &t, &name, 1, NULL) && !bt_ckpt_saver_wait(s), "after the directory is back: %s", bt_ckpt_error());
    bt_ckpt_saver_get_stats(s, &st);
    BT_CHECK(st.snapshots == 3 + 1 && st.saves == 2, "stats count the failures out (%lld snapshots, %lld saves)", (long long)st.snapshots, (long long)st.saves);
    BT_CHECK(!bt_ckpt_saver_free(s), "free");
    BT_CHECK(!bt_ckpt_saver_new(bt_test_path("kill.safetensors"), 1) && strstr(bt_ckpt_error(), "checkpoint directory"), "a file as the directory: %s", bt_ckpt_error());
    bt_release(t);
}

/* ---- resume ---- */

typedef struct { int n; char why[4][1024]; } bad_log;
static void on_bad(const char *path, const char *why, void *user) {
    bad_log *l = (bad_log *)user;
    (void)path;
    if (l->n < 4) snprintf(l->why[l->n], sizeof l->why[0], "%s", why);
    l->n++;
}

static void test_latest_valid(void) {
    char dir[512], path[700];
    int64_t steps[4] = {10, 20, 30, 40}, step = -1, *list;
    bt_tensor *t = bt_randn(bt_shape1(5000), BT_F32, bt_cpu(), 77);
    bad_log log;
    int k, n;
    snprintf(dir, sizeof dir, "%s/resume", bt_test_dir);
    mkdir(dir, 0755);
    BT_CHECK(bt_ckpt_find_latest(dir, &step, path, sizeof path, NULL, NULL) == 1, "empty directory: none");
    for (k = 0; k < 3; k++) {
        bt_ckpt_writer *w = bt_ckpt_writer_new();
        bt_ckpt_writer_add_tensor(w, "t", t, 0, 0);
        bt_ckpt_meta_set_i64(bt_ckpt_writer_meta(w), "step", steps[k]);
        bt_ckpt_path(dir, steps[k], path, sizeof path);
        BT_CHECK(!bt_ckpt_writer_save(w, path), "save %lld", (long long)steps[k]);
        bt_ckpt_writer_free(w);
    }
    {   /* step 40: a foreign file; 30: one flipped byte; 20: truncated */
        unsigned char *b, d4[4] = {0};
        size_t nb = raw_file(&b, "{\"x\":{\"dtype\":\"U8\",\"shape\":[4],\"data_offsets\":[0,4]}}", 0, d4, 4);
        bt_ckpt_path(dir, 40, path, sizeof path); bt_test_write_file(path, b, nb); free(b);
        bt_ckpt_path(dir, 30, path, sizeof path);
        b = (unsigned char *)bt_test_read_file(path, &nb); b[nb - 100] ^= 1; bt_test_write_file(path, b, nb); free(b);
        bt_ckpt_path(dir, 20, path, sizeof path);
        BT_CHECK(truncate(path, 600) == 0, "truncate");
    }
    n = bt_ckpt_list(dir, &list);
    BT_CHECK(n == 4 && list[0] == 40 && list[3] == 10, "listed newest first");
    free(list);
    memset(&log, 0, sizeof log);
    BT_CHECK(bt_ckpt_find_latest(dir, &step, path, sizeof path, on_bad, &log) == 0 && step == 10, "fell back to step 10 (%lld)", (long long)step);
    BT_CHECK(strstr(path, "ckpt_000000010.safetensors") != NULL, "path %s", path);
    BT_CHECK(log.n == 3, "3 bad ones reported (%d)", log.n);
    BT_CHECK(strstr(log.why[0], "ckpt_000000040") && strstr(log.why[0], "no checksums"), "40: %s", log.why[0]);
    BT_CHECK(strstr(log.why[1], "ckpt_000000030") && strstr(log.why[1], "tensor 't' (file bytes") && strstr(log.why[1], "checksum"), "30: %s", log.why[1]);
    BT_CHECK(strstr(log.why[2], "ckpt_000000020") && strstr(log.why[2], "truncated"), "20: %s", log.why[2]);
    {
        bt_ckpt_file *f = bt_ckpt_open(path, BT_CKPT_REQUIRE_CHECKSUMS);
        bt_tensor *back = bt_zeros(bt_shape1(5000), BT_F32, bt_cpu());
        BT_CHECK(f && !bt_ckpt_load(f, "t", back, 0) && !memcmp(bt_data_ptr(back), bt_data_ptr(t), 20000), "resumed tensor");
        bt_ckpt_close(f);
        bt_release(back);
    }
    BT_CHECK(bt_ckpt_find_latest(bt_test_path("no_such_dir"), &step, path, sizeof path, NULL, NULL) == -1, "missing directory");
    bt_release(t);
}

static void test_names_and_sweep(void) {
    char buf[64], dir[512], p[700];
    int64_t *steps;
    int n;
    pid_t dead, live;
    struct timespec old[2];
    BT_CHECK(!bt_ckpt_path("d", 42, buf, sizeof buf) && !strcmp(buf, "d/ckpt_000000042.safetensors"), "%s", buf);
    BT_CHECK(!bt_ckpt_path("d", 12345678901LL, buf, sizeof buf) && !strcmp(buf, "d/ckpt_12345678901.safetensors"), "%s", buf);
    BT_CHECK(bt_ckpt_path("d", 1, buf, 10) == -1 && bt_ckpt_path("d", -1, buf, sizeof buf) == -1, "too long / negative");
    snprintf(dir, sizeof dir, "%s/names", bt_test_dir);
    mkdir(dir, 0755);
    {
        const char *files[] = {"ckpt_000000042.safetensors", "ckpt_12345678901.safetensors", "ckpt_42.safetensors",
                               "ckpt_0000000042.safetensors", "ckpt_-00000001.safetensors", "ckpt_000000042.safetensors.bak",
                               "xckpt_000000001.safetensors", "ckpt_00000000a.safetensors", "ckpt_.safetensors"};
        size_t i;
        for (i = 0; i < sizeof files / sizeof files[0]; i++) { snprintf(p, sizeof p, "%s/%s", dir, files[i]); bt_test_write_file(p, "x", 1); }
    }
    n = bt_ckpt_list(dir, &steps);
    BT_CHECK(n == 2 && steps[0] == 12345678901LL && steps[1] == 42, "only our spellings (%d)", n);
    free(steps);
    /* temporaries of dead writers, whatever their age, and of this process (which has written
       nothing there yet), are swept when a saver takes the directory; a live writer's fresh one
       stays, an old one of a live pid (reused) goes; names not ours stay */
    if ((dead = fork()) == 0) _exit(0);
    waitpid(dead, NULL, 0);
    if ((live = fork()) == 0) { pause(); _exit(0); }
    old[0].tv_sec = old[1].tv_sec = time(NULL) - 1000; old[0].tv_nsec = old[1].tv_nsec = 0;
    {
        const struct { pid_t pid; int n, aged, gone; const char *base; } tmps[] = {
            {dead, 0, 1, 1, "ckpt_000000042"}, {dead, 1, 0, 1, "ckpt_000000042"}, {getpid(), 2, 0, 1, "ckpt_000000043"},
            {live, 3, 0, 0, "ckpt_000000042"}, {live, 4, 1, 1, "ckpt_000000042"}, {dead, 5, 1, 0, "other"}};
        const int nt = (int)(sizeof tmps / sizeof tmps[0]);
        bt_ckpt_saver *s;
        bt_ckpt_saver_stats st;
        int i;
        for (i = 0; i < nt; i++) {
            snprintf(p, sizeof p, "%s/%s.safetensors.tmp.%d.%d", dir, tmps[i].base, (int)tmps[i].pid, tmps[i].n);
            bt_test_write_file(p, "x", 1);
            if (tmps[i].aged) utimensat(AT_FDCWD, p, old, 0);
        }
        s = bt_ckpt_saver_new(dir, 0);                 /* keep 0: no rotation ever runs */
        BT_CHECK(s != NULL, "%s", bt_ckpt_error());
        if (s) {
            bt_ckpt_saver_get_stats(s, &st);
            BT_CHECK(st.swept == 4 && st.removed == 0, "4 dead temporaries swept at once (%lld, %lld removed)", (long long)st.swept, (long long)st.removed);
        }
        for (i = 0; i < nt; i++) {
            snprintf(p, sizeof p, "%s/%s.safetensors.tmp.%d.%d", dir, tmps[i].base, (int)tmps[i].pid, tmps[i].n);
            BT_CHECK((access(p, F_OK) != 0) == tmps[i].gone, "%s: %s", p, tmps[i].gone ? "should be swept" : "should stay");
        }
        bt_ckpt_saver_free(s);
    }
    kill(live, SIGKILL);
    waitpid(live, NULL, 0);
}

/* the directory belongs to one saver at a time: a second (in this process or another) is refused,
   naming the holder; the lock goes with its process, however it ends */
static void test_saver_lock(void) {
    char dir[512], want[64];
    bt_ckpt_saver *a, *b;
    int fds[2];
    pid_t child;
    char c = 0;
    snprintf(dir, sizeof dir, "%s/locked", bt_test_dir);
    a = bt_ckpt_saver_new(dir, 1);
    BT_CHECK(a != NULL, "%s", bt_ckpt_error());
    snprintf(want, sizeof want, "pid %ld on host", (long)getpid());
    b = bt_ckpt_saver_new(dir, 1);
    BT_CHECK(!b && strstr(bt_ckpt_error(), "is in use") && strstr(bt_ckpt_error(), want) && strstr(bt_ckpt_error(), "ckpt.lock"),
             "a second saver: %s", bt_ckpt_error());
    bt_ckpt_saver_free(b);
    BT_CHECK(!bt_ckpt_saver_free(a), "free");
    b = bt_ckpt_saver_new(dir, 1);
    BT_CHECK(b != NULL, "after the first is freed: %s", bt_ckpt_error());
    bt_ckpt_saver_free(b);
    /* another process holds it, then dies by kill -9: the lock is gone with it */
    if (pipe(fds) != 0) { BT_CHECK(0, "pipe"); return; }
    if ((child = fork()) == 0) {
        bt_ckpt_saver *s = bt_ckpt_saver_new(dir, 1);
        char ok = s ? 1 : 2;
        if (write(fds[1], &ok, 1) != 1) _exit(1);
        pause();
        _exit(0);
    }
    BT_CHECK(read(fds[0], &c, 1) == 1 && c == 1, "the child took the lock");
    snprintf(want, sizeof want, "pid %ld on host", (long)child);
    b = bt_ckpt_saver_new(dir, 1);
    BT_CHECK(!b && strstr(bt_ckpt_error(), want), "held by the child: %s", bt_ckpt_error());
    bt_ckpt_saver_free(b);
    kill(child, SIGKILL);
    waitpid(child, NULL, 0);
    close(fds[0]); close(fds[1]);
    b = bt_ckpt_saver_new(dir, 1);
    BT_CHECK(b != NULL, "after its holder was killed: %s", bt_ckpt_error());
    bt_ckpt_saver_free(b);
}

/* an old checkpoint that cannot be deleted (a directory of that name, not empty) fails no save:
   each save is whole and reported, the rotation problem is a warning, once per save */
static void test_rotation_failure_warns(void) {
    char dir[512], p[700];
    bt_tensor *t = bt_randn(bt_shape1(1000), BT_F32, bt_cpu(), 6);
    const char *name = "w";
    bt_ckpt_saver *s;
    int64_t step;
    snprintf(dir, sizeof dir, "%s/rot", bt_test_dir);
    mkdir(dir, 0755);
    bt_ckpt_path(dir, 1, p, sizeof p);
    mkdir(p, 0755);
    snprintf(p + strlen(p), sizeof p - strlen(p), "/inside");
    bt_test_write_file(p, "x", 1);
    s = bt_ckpt_saver_new(dir, 1);
    BT_CHECK(s != NULL, "%s", bt_ckpt_error());
    if (!s) return;
    BT_CHECK(!bt_ckpt_saver_warning(s), "no warning before a save");
    for (step = 2; step <= 3; step++) {
        BT_CHECK(!bt_ckpt_saver_snapshot(s, step, &t, &name, 1, NULL) && !bt_ckpt_saver_wait(s), "save %lld: %s", (long long)step, bt_ckpt_error());
        BT_CHECK(bt_ckpt_saver_warning(s) && strstr(bt_ckpt_error(), "cannot delete") && strstr(bt_ckpt_error(), "ckpt_000000001.safetensors"),
                 "save %lld: the warning: %s", (long long)step, bt_ckpt_error());
        BT_CHECK(!bt_ckpt_saver_warning(s), "reported once");
    }
    bt_ckpt_path(dir, 3, p, sizeof p);
    BT_CHECK(access(p, F_OK) == 0, "the newest is there");
    bt_ckpt_path(dir, 2, p, sizeof p);
    BT_CHECK(access(p, F_OK) != 0, "the one before is rotated away");
    BT_CHECK(!bt_ckpt_saver_free(s), "free: %s", bt_ckpt_error());
    bt_release(t);
}

/* a symbolic link where the next checkpoint goes: refused, its target untouched */
static void test_saver_refuses_links(void) {
    char dir[512], p[700], *back;
    bt_tensor *t = bt_randn(bt_shape1(1000), BT_F32, bt_cpu(), 7);
    const char *name = "w", *victim = bt_test_path("victim.txt");
    bt_ckpt_saver *s;
    struct stat ls;
    snprintf(dir, sizeof dir, "%s/links", bt_test_dir);
    mkdir(dir, 0755);
    bt_test_write_text(victim, "not a checkpoint");
    bt_ckpt_path(dir, 2, p, sizeof p);
    BT_CHECK(symlink(victim, p) == 0, "symlink");
    s = bt_ckpt_saver_new(dir, 0);
    BT_CHECK(s != NULL, "%s", bt_ckpt_error());
    if (!s) return;
    BT_CHECK(!bt_ckpt_saver_snapshot(s, 2, &t, &name, 1, NULL), "snapshot: %s", bt_ckpt_error());
    BT_CHECK(bt_ckpt_saver_wait(s) && strstr(bt_ckpt_error(), "ckpt_000000002.safetensors") && strstr(bt_ckpt_error(), "symbolic link"),
             "the save is refused: %s", bt_ckpt_error());
    back = bt_test_read_file(victim, NULL);
    BT_CHECK(back && !strcmp(back, "not a checkpoint"), "the link's target is untouched: %.40s", back ? back : "(gone)");
    free(back);
    BT_CHECK(lstat(p, &ls) == 0 && S_ISLNK(ls.st_mode), "the link is still a link");
    BT_CHECK(!bt_ckpt_saver_snapshot(s, 3, &t, &name, 1, NULL) && !bt_ckpt_saver_wait(s), "the next save goes on: %s", bt_ckpt_error());
    bt_ckpt_saver_free(s);
    {   /* the synchronous writer and the JSON file, with BT_OUTPUT_NOFOLLOW */
        bt_ckpt_writer *w = bt_ckpt_writer_new();
        bt_json_writer j;
        bt_ckpt_writer_add_tensor(w, "w", t, 0, 0);
        BT_CHECK(bt_ckpt_writer_save_flags(w, p, BT_OUTPUT_NOFOLLOW) && strstr(bt_ckpt_error(), "symbolic link"), "writer: %s", bt_ckpt_error());
        bt_ckpt_writer_free(w);
        bt_json_writer_init(&j, 0);
        bt_json_object(&j, NULL); bt_json_end(&j);
        BT_CHECK(bt_json_save_flags(&j, p, BT_OUTPUT_NOFOLLOW) && strstr(bt_data_error(), "symbolic link"), "json: %s", bt_data_error());
        bt_json_writer_free(&j);
        back = bt_test_read_file(victim, NULL);
        BT_CHECK(back && !strcmp(back, "not a checkpoint"), "the link's target is untouched");
        free(back);
    }
    bt_release(t);
}

static void test_config_json(void) {
    bt_json_writer w;
    const char *path = bt_test_path("config.json");
    unsigned char *b;
    size_t n;
    bt_json_doc *d;
    bt_json_writer_init(&w, 2);
    bt_json_object(&w, NULL);
    bt_json_array(&w, "architectures"); bt_json_string(&w, NULL, "GPT2LMHeadModel"); bt_json_end(&w);
    bt_json_string(&w, "model_type", "gpt2");
    bt_json_int(&w, "n_layer", 12);
    bt_json_number(&w, "layer_norm_epsilon", 1e-5);
    bt_json_null(&w, "n_inner");
    bt_json_bool(&w, "tie_word_embeddings", 1);
    bt_json_end(&w);
    BT_CHECK(!bt_json_save(&w, path), "save: %s", bt_data_error());
    bt_json_writer_free(&w);
    b = (unsigned char *)bt_test_read_file(path, &n);
    d = b ? bt_json_parse((const char *)b, n, 0) : NULL;
    BT_CHECK(d && bt_json_get(bt_json_root(d), "layer_norm_epsilon")->num == 1e-5 && b[n - 1] == '\n' &&
             !strcmp(bt_json_get(bt_json_root(d), "architectures")->child->str, "GPT2LMHeadModel"), "config.json: %s", b ? (char *)b : "");
    bt_json_free(d);
    free(b);
    bt_json_writer_init(&w, 0);
    BT_CHECK(bt_json_save(&w, path) && strstr(bt_data_error(), "no value"), "nothing written: %s", bt_data_error());
    bt_json_writer_free(&w);
}

/* ---- messages (issue 35, finding 7) ---- */

/* a message never formats from its own buffer (bt_ckpt_error() as an argument), a getter that
   fails says why (missing, not an integer, out of range, naming the key and the value), and a
   path of 1,500+ bytes keeps the reason after it */
static void test_messages(void) {
    bt_ckpt_meta *m = bt_ckpt_meta_new();
    bt_loader_state st;
    int64_t v = 0;
    char buf[64], longp[1700], dir[600];
    const char *e;
    bt_ckpt_meta_set(m, "loader.0", "{\"magic\": 1, ");
    BT_CHECK(bt_ckpt_meta_get_loader(m, 0, &st) && (e = bt_ckpt_error()) && !strncmp(e, "metadata \"loader.0\": JSON, ", 27) &&
             !strstr(e + 1, "metadata") && strstr(e, "byte"), "bad JSON in a loader state: %s", bt_ckpt_error());
    bt_ckpt_meta_set(m, "n", "99999999999");
    BT_CHECK(bt_ckpt_meta_get_int(m, "n", INT32_MIN, INT32_MAX, &v) && strstr(bt_ckpt_error(), "metadata \"n\": 99999999999 is out of range (-2147483648..2147483647)"),
             "out of range: %s", bt_ckpt_error());
    bt_ckpt_meta_set(m, "n", "7x");
    BT_CHECK(bt_ckpt_meta_get_int(m, "n", 0, 9, &v) && strstr(bt_ckpt_error(), "metadata \"n\": \"7x\" is not a 64-bit integer"), "not an integer: %s", bt_ckpt_error());
    BT_CHECK(bt_ckpt_meta_get_int(m, "absent", 0, 9, &v) && strstr(bt_ckpt_error(), "no key \"absent\""), "missing: %s", bt_ckpt_error());
    bt_ckpt_meta_set(m, "n", "9");
    BT_CHECK(!bt_ckpt_meta_get_int(m, "n", 0, 9, &v) && v == 9, "in range: %lld", (long long)v);
    bt_ckpt_meta_free(m);
    /* bt_msgf: whole when it fits, else head ... tail, cut between UTF-8 characters; its own buffer as an argument */
    BT_CHECK(bt_msgf(buf, sizeof buf, "%s: %d", "short", 5) == 8 && !strcmp(buf, "short: 5"), "fits: %s", buf);
    memset(longp, 'a', 100); longp[100] = 0;
    BT_CHECK(bt_msgf(buf, sizeof buf, "%s: the reason", longp) == 112 && strlen(buf) == 63 && !strncmp(buf, "aaaaaaaaaaaaaaaaaaaaa...", 24) &&
             strstr(buf, "aaa: the reason") && buf[62] == 'n', "head ... tail: %s", buf);
    for (int i = 0; i < 50; i++) memcpy(longp + 2 * i, "\xc3\xa9", 2);
    bt_msgf(buf, sizeof buf, "%s: why", longp);
    const char *dots = strstr(buf, "...");
    BT_CHECK(dots && (dots - buf) % 2 == 0 && strlen(dots + 3) % 2 == 1 && strstr(buf, ": why"), "UTF-8 kept whole: %s", buf);
    snprintf(buf, sizeof buf, "reason");
    bt_msgf(buf, sizeof buf, "outer: %s (%s)", buf, buf);
    BT_CHECK(!strcmp(buf, "outer: reason (reason)"), "its own buffer as an argument: %s", buf);
    /* a 1,500-byte path: the reason survives (reading, writing, a directory) */
    snprintf(dir, sizeof dir, "%s", bt_test_dir);
    size_t at = (size_t)snprintf(longp, sizeof longp, "%s", dir);
    while (at < 1550) at += (size_t)snprintf(longp + at, sizeof longp - at, "/0123456789");
    snprintf(longp + at, sizeof longp - at, "/x.safetensors");
    BT_CHECK(!bt_ckpt_open(longp, 0) && !strncmp(bt_ckpt_error(), dir, strlen(dir)) && strstr(bt_ckpt_error(), "x.safetensors: cannot open: No such file"),
             "open: %s", bt_ckpt_error());
    bt_ckpt_writer *w = bt_ckpt_writer_new();
    float x = 1;
    bt_ckpt_writer_add(w, "x", BT_CKPT_F32, 0, NULL, &x);
    BT_CHECK(bt_ckpt_writer_save(w, longp) && strstr(bt_ckpt_error(), "does not exist"), "save: %s", bt_ckpt_error());
    bt_ckpt_writer_free(w);
}

/* ---- interop with Python's safetensors (tests/ckpt_interop.py) ---- */

/* element i of interop tensor k: small integers / quarters, exact in every dtype */
static double interop_value(int k, int64_t i, int is_unsigned, int is_float) {
    int64_t v = (i * 37 + k * 11) % 200;
    if (!is_unsigned) v -= 100;
    return is_float ? v / 4.0 : (double)v;
}
/* interop tensor k (rt_tensors[k], the last one excepted) filled from interop_value; malloc'd */
static unsigned char *interop_tensor(int k, size_t *nbytes) {
    bt_ckpt_dtype dt = rt_tensors[k].dt;
    int is_u = dt == BT_CKPT_U16 || dt == BT_CKPT_U8, is_f = dt <= BT_CKPT_F16;
    size_t es = bt_ckpt_dtype_size(dt), n = (size_t)bt__ck_nbytes(rt_tensors[k].ndim, rt_tensors[k].shape, es) / es, i;
    unsigned char *buf = (unsigned char *)malloc(n * es + 1);
    for (i = 0; i < n; i++) {
        double v = interop_value(k, (int64_t)i, is_u, is_f);
        float x = (float)v;
        uint16_t h;
        int32_t i32 = (int32_t)v;
        int64_t i64 = (int64_t)v;
        switch (dt) {
        case BT_CKPT_F32: memcpy(buf + 4 * i, &x, 4); break;
        case BT_CKPT_F64: memcpy(buf + 8 * i, &v, 8); break;
        case BT_CKPT_BF16: h = bt__f32_to_bf16(x); memcpy(buf + 2 * i, &h, 2); break;
        case BT_CKPT_F16: h = bt__f32_to_f16(x); memcpy(buf + 2 * i, &h, 2); break;
        case BT_CKPT_I32: memcpy(buf + 4 * i, &i32, 4); break;
        case BT_CKPT_I64: memcpy(buf + 8 * i, &i64, 8); break;
        case BT_CKPT_U16: h = (uint16_t)v; memcpy(buf + 2 * i, &h, 2); break;
        default: buf[i] = (unsigned char)v;
        }
    }
    *nbytes = n * es;
    return buf;
}
#define INTEROP_NOTE "h\xc3\xa9llo \"quoted\"\n"
static void test_python_interop(void) {
    const char *dir = getenv("BT_CKPT_INTEROP_DIR");
    char path[1024];
    unsigned char *want[RT_N];
    size_t nb[RT_N];
    bt_ckpt_file *f;
    bt_ckpt_writer *w;
    int k;
    if (!dir) { BT_SKIP("BT_CKPT_INTEROP_DIR not set (see tests/ckpt_interop.py)"); return; }
    for (k = 0; k < RT_N - 1; k++) want[k] = interop_tensor(k, &nb[k]);
    snprintf(path, sizeof path, "%s/from_python.safetensors", dir);
    f = bt_ckpt_open(path, BT_CKPT_VERIFY);
    BT_CHECK(f != NULL, "%s", bt_ckpt_error());
    for (k = 0; f && k < RT_N - 1; k++) {
        const bt_ckpt_info *t = bt_ckpt_find(f, rt_tensors[k].name);
        unsigned char *got = (unsigned char *)malloc(nb[k] + 1);
        int d, same = t && t->dtype == rt_tensors[k].dt && t->ndim == rt_tensors[k].ndim;
        for (d = 0; same && d < t->ndim; d++) same = t->shape[d] == rt_tensors[k].shape[d];
        BT_CHECK(same, "python's %s: dtype and shape", rt_tensors[k].name);
        BT_CHECK(t && !bt_ckpt_read(f, t->name, got, nb[k]) && !memcmp(got, want[k], nb[k]), "python's %s: values", rt_tensors[k].name);
        free(got);
    }
    if (f) {
        const char *note = bt_ckpt_meta_get(bt_ckpt_file_meta(f), "note");
        BT_CHECK(note && !strcmp(note, INTEROP_NOTE), "python's metadata: %s", note ? note : "(none)");
    }
    bt_ckpt_close(f);
    w = bt_ckpt_writer_new();
    for (k = 0; k < RT_N - 1; k++) bt_ckpt_writer_add(w, rt_tensors[k].name, rt_tensors[k].dt, rt_tensors[k].ndim, rt_tensors[k].shape, want[k]);
    bt_ckpt_meta_set(bt_ckpt_writer_meta(w), "note", INTEROP_NOTE);
    snprintf(path, sizeof path, "%s/from_c.safetensors", dir);
    BT_CHECK(!bt_ckpt_writer_save(w, path), "write %s: %s", path, bt_ckpt_error());
    bt_ckpt_writer_free(w);
    for (k = 0; k < RT_N - 1; k++) free(want[k]);
}

int main(int argc, char **argv) {
    if (argc == 3 && !strcmp(argv[1], "--writer-child")) return writer_child(argv[2]);
    if (bt_test_dir_make("test_ckpt")) return 1;
    BT_RUN(test_crc32c_vectors);
    BT_RUN(test_crc32c_backends_combine_threads);
    BT_RUN(test_crc32c_speed);
    BT_RUN(test_json_valid);
    BT_RUN(test_json_invalid);
    BT_RUN(test_json_writer);
    BT_RUN(test_meta_typed);
    BT_RUN(test_roundtrip_all_dtypes);
    BT_RUN(test_broken_truncations);
    BT_RUN(test_broken_headers);
    BT_RUN(test_broken_checksums);
    BT_RUN(test_file_shrinks);
    BT_RUN(test_tensor_load_store);
    BT_RUN(test_kill9_mid_save);
    BT_RUN(test_saver_cpu);
    BT_RUN(test_saver_halves);
    BT_RUN(test_saver_failure);
    BT_RUN(test_latest_valid);
    BT_RUN(test_names_and_sweep);
    BT_RUN(test_saver_lock);
    BT_RUN(test_rotation_failure_warns);
    BT_RUN(test_saver_refuses_links);
    BT_RUN(test_config_json);
    BT_RUN(test_messages);
    BT_RUN(test_python_interop);
    bt_test_dir_remove();
    return bt_test_summary("test_ckpt");
}
