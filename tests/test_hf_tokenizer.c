/* test_hf_tokenizer.c - bt_data.h's Hugging Face tokenizer.json reader (bt_tokenizer_load_hf).

   1. GPT-2 as a tokenizer.json, built here from encoder.json + vocab.bpe (merges as "a b" strings and
      as [a, b] pairs; ByteLevel with its regex, and Split + ByteLevel), encodes the fixture cases,
      the pre-tokenizer fixture's inputs and the corpora to exactly bt_tokenizer_load's ids.
   2. Llama 3's pre-tokenizer against the Python regex module's pieces (tests/fixtures/llama3_pretok.txt,
      tests/make_llama3_pretok_fixture.py).
   3. ignore_merges, added (special) tokens, bt_tokenizer_token_id, decode; bad files (NULL, and a
      message naming the file and the problem); bt_tokenize --tokenizer.
   4. Against the tokenizers library: every directory given on the command line, and
      tests/fixtures/hf_check when it exists (else skipped): each DIR, or each subdirectory of it,
      holding tokenizer.json, index.json and for each text NAME.txt and NAME.ids (int32 LE), as
      tests/hf_tokenizer_check.py writes them on a machine with `tokenizers`. The first mismatch is
      printed with its context.
   Run from the repository root; the GPT-2 files come from ../shared/data/gpt2-tokenizer or data/. */
#define _XOPEN_SOURCE 700
#define BT_DATA_IMPLEMENTATION
#include "bt_data.h"
#include "tests/bt_test.h"
#include <fcntl.h>
#include <unistd.h>
#include "tests/bt_test_files.h"

#include <dirent.h>
#include <stdlib.h>
#include <unistd.h>
#include <sys/stat.h>
#include <sys/wait.h>

static bt_tokenizer *gpt2;                 /* bt_tokenizer_load's */
static const char *enc_path, *voc_path;
static char gpt2_json[512], gpt2_pairs_json[512], gpt2_split_json[512];

static int file_exists(const char *p) { return access(p, R_OK) == 0; }
static int run(const char *cmd) {
    int rc = system(cmd);
    return rc == -1 ? -1 : WIFEXITED(rc) ? WEXITSTATUS(rc) : -1;
}

/* GPT-2's character for byte b (the inverse of bt__gpt2_char_to_byte), as UTF-8 into out; its length */
static size_t byte_char(unsigned b, char *out) {
    uint32_t cp;
    for (cp = 0; bt__gpt2_char_to_byte(cp) != (int)b; cp++) {}
    if (cp < 0x80) { out[0] = (char)cp; return 1; }
    out[0] = (char)(0xC0 | (cp >> 6)); out[1] = (char)(0x80 | (cp & 0x3F));
    return 2;
}
/* bytes as a NUL-terminated string of GPT-2 characters (static buffer) */
static const char *byte_str(const char *s, size_t n) {
    static char buf[4][1024];
    static int k;
    size_t i, o = 0;
    k = (k + 1) % 4;
    for (i = 0; i < n && o < sizeof buf[k] - 3; i++) o += byte_char((unsigned char)s[i], buf[k] + o);
    buf[k][o] = 0;
    return buf[k];
}

/* ---- building tokenizer.json files ---- */

/* the pre_tokenizer: "gpt2" (ByteLevel with its regex), "gpt2split" or "llama3" (Split + ByteLevel) */
static void write_pretok(bt_json_writer *w, const char *kind) {
    if (!strcmp(kind, "gpt2")) {
        bt_json_object(w, "pre_tokenizer");
        bt_json_string(w, "type", "ByteLevel"); bt_json_bool(w, "add_prefix_space", 0);
        bt_json_bool(w, "trim_offsets", 1); bt_json_bool(w, "use_regex", 1);
        bt_json_end(w);
        return;
    }
    bt_json_object(w, "pre_tokenizer");
    bt_json_string(w, "type", "Sequence");
    bt_json_array(w, "pretokenizers");
    bt_json_object(w, NULL);
    bt_json_string(w, "type", "Split");
    bt_json_object(w, "pattern"); bt_json_string(w, "Regex", !strcmp(kind, "llama3") ? BT__LLAMA3_PATTERN : BT__GPT2_PATTERN); bt_json_end(w);
    bt_json_string(w, "behavior", "Isolated"); bt_json_bool(w, "invert", 0);
    bt_json_end(w);
    bt_json_object(w, NULL);
    bt_json_string(w, "type", "ByteLevel"); bt_json_bool(w, "add_prefix_space", 0);
    bt_json_bool(w, "trim_offsets", 1); bt_json_bool(w, "use_regex", 0);
    bt_json_end(w);
    bt_json_end(w);
    bt_json_end(w);
}

/* the head of a tokenizer.json up to model.vocab's opening: added tokens (content, id) pairs */
static void write_head(bt_json_writer *w, const char *const *added, const int *added_ids, int nadded) {
    int i;
    bt_json_writer_init(w, 0);
    bt_json_object(w, NULL);
    bt_json_string(w, "version", "1.0");
    bt_json_null(w, "truncation"); bt_json_null(w, "padding");
    bt_json_array(w, "added_tokens");
    for (i = 0; i < nadded; i++) {
        bt_json_object(w, NULL);
        bt_json_int(w, "id", added_ids[i]); bt_json_string(w, "content", added[i]);
        bt_json_bool(w, "single_word", 0); bt_json_bool(w, "lstrip", 0); bt_json_bool(w, "rstrip", 0);
        bt_json_bool(w, "normalized", 0); bt_json_bool(w, "special", 1);
        bt_json_end(w);
    }
    bt_json_end(w);
    bt_json_null(w, "normalizer");
}
static void write_tail(bt_json_writer *w) {   /* after the pre_tokenizer */
    bt_json_object(w, "decoder");
    bt_json_string(w, "type", "ByteLevel"); bt_json_bool(w, "add_prefix_space", 1);
    bt_json_bool(w, "trim_offsets", 1); bt_json_bool(w, "use_regex", 1);
    bt_json_end(w);
}

/* GPT-2's tokenizer.json from encoder.json and vocab.bpe: merges as strings or [a, b] pairs. With
   vocab_to > 50257: filler tokens "<|fill_N|>" up to id vocab_to - 2, then the token merge_a +
   merge_b (GPT-2 characters) at vocab_to - 1, merged last: a vocabulary past uint16 whose top id
   comes out of encoding. */
static int make_gpt2_json_big(const char *out, const char *pretok, int pairs, int vocab_to, const char *merge_a, const char *merge_b) {
    size_t elen, vlen;
    char *etext = bt_test_read_file(enc_path, &elen), *vtext = bt_test_read_file(voc_path, &vlen), *line, *save = NULL;
    bt_json_doc *ed = etext ? bt_json_parse(etext, elen, 0) : NULL;
    const bt_json *c;
    const char *added[] = {"<|endoftext|>"};
    int added_id[] = {50256}, rc;
    bt_json_writer w;
    if (!ed || !vtext) { free(etext); free(vtext); bt_json_free(ed); return -1; }
    write_head(&w, added, added_id, 1);
    write_pretok(&w, pretok);
    bt_json_null(&w, "post_processor");
    write_tail(&w);
    bt_json_object(&w, "model");
    bt_json_string(&w, "type", "BPE"); bt_json_null(&w, "dropout"); bt_json_null(&w, "unk_token");
    bt_json_string(&w, "continuing_subword_prefix", ""); bt_json_string(&w, "end_of_word_suffix", "");
    bt_json_bool(&w, "fuse_unk", 0); bt_json_bool(&w, "byte_fallback", 0); bt_json_bool(&w, "ignore_merges", 0);
    bt_json_object(&w, "vocab");
    for (c = bt_json_root(ed)->child; c; c = c->next) bt_json_int(&w, c->key, (int64_t)c->num);
    if (vocab_to > 50257) {
        char name[64];
        int id;
        for (id = 50257; id < vocab_to - 1; id++) { snprintf(name, sizeof name, "<|fill_%d|>", id); bt_json_int(&w, name, id); }
        snprintf(name, sizeof name, "%s%s", merge_a, merge_b);
        bt_json_int(&w, name, vocab_to - 1);
    }
    bt_json_end(&w);
    bt_json_array(&w, "merges");
    for (line = strtok_r(vtext, "\n", &save); line; line = strtok_r(NULL, "\n", &save)) {
        char *sp = strchr(line, ' ');
        if (!strncmp(line, "#version", 8) || !sp) continue;
        if (!pairs) { bt_json_string(&w, NULL, line); continue; }
        *sp = 0;
        bt_json_array(&w, NULL); bt_json_string(&w, NULL, line); bt_json_string(&w, NULL, sp + 1); bt_json_end(&w);
    }
    if (vocab_to > 50257) { bt_json_array(&w, NULL); bt_json_string(&w, NULL, merge_a); bt_json_string(&w, NULL, merge_b); bt_json_end(&w); }
    bt_json_end(&w);
    bt_json_end(&w);
    bt_json_end(&w);
    rc = bt_json_save(&w, out);
    bt_json_writer_free(&w); bt_json_free(ed); free(etext); free(vtext);
    return rc;
}
static int make_gpt2_json(const char *out, const char *pretok, int pairs) { return make_gpt2_json_big(out, pretok, pairs, 0, NULL, NULL); }

/* A small byte-level BPE: the 256 bytes (ids 0..255, in byte order), then the merged tokens of
   merges ("a b" in bytes, cut at the last space: "  x" is " " + "x"), then the added tokens. */
static int make_small_json(const char *out, const char *pretok, int ignore_merges, const char *const *merges, int nmerges,
                           const char *const *added, int nadded) {
    bt_json_writer w;
    int i, id, rc, *added_id = (int *)malloc(((size_t)nadded + 1) * sizeof(int));
    for (i = 0; i < nadded; i++) added_id[i] = 256 + nmerges + i;
    write_head(&w, added, added_id, nadded);
    write_pretok(&w, pretok);
    write_tail(&w);
    bt_json_object(&w, "model");
    bt_json_string(&w, "type", "BPE"); bt_json_null(&w, "dropout"); bt_json_null(&w, "unk_token");
    bt_json_null(&w, "continuing_subword_prefix"); bt_json_null(&w, "end_of_word_suffix");
    bt_json_bool(&w, "fuse_unk", 0); bt_json_bool(&w, "byte_fallback", 0); bt_json_bool(&w, "ignore_merges", ignore_merges);
    bt_json_object(&w, "vocab");
    for (id = 0; id < 256; id++) { char b = (char)id; bt_json_int(&w, byte_str(&b, 1), id); }
    for (i = 0; i < nmerges; i++) {   /* the merged token: the merge's bytes without the space */
        char m[256];
        const char *sp = strrchr(merges[i], ' ');
        size_t la = (size_t)(sp - merges[i]), lb = strlen(sp + 1);
        memcpy(m, merges[i], la); memcpy(m + la, sp + 1, lb);
        bt_json_int(&w, byte_str(m, la + lb), 256 + i);
    }
    bt_json_end(&w);
    bt_json_array(&w, "merges");
    for (i = 0; i < nmerges; i++) {
        const char *sp = strrchr(merges[i], ' ');
        bt_json_array(&w, NULL);
        bt_json_string(&w, NULL, byte_str(merges[i], (size_t)(sp - merges[i])));
        bt_json_string(&w, NULL, byte_str(sp + 1, strlen(sp + 1)));
        bt_json_end(&w);
    }
    bt_json_end(&w);
    bt_json_end(&w);
    bt_json_end(&w);
    rc = bt_json_save(&w, out);
    bt_json_writer_free(&w);
    free(added_id);
    return rc;
}

/* ---- helpers ---- */

static size_t unhex(const char *h, size_t n, char *out) {
    size_t i;
    for (i = 0; i + 1 < n; i += 2) {
        unsigned v;
        sscanf(h + i, "%2x", &v);
        out[i / 2] = (char)v;
    }
    return n / 2;
}

/* a and b encode text to the same ids; 0, or the message of the first difference in msg */
static int same_ids(bt_tokenizer *a, bt_tokenizer *b, const char *text, size_t len, char *msg, size_t msglen) {
    int32_t *ia = NULL, *ib = NULL;
    size_t na = bt_encode(a, text, len, &ia), nb = bt_encode(b, text, len, &ib), i;
    int rc = 0;
    for (i = 0; i < na && i < nb && ia[i] == ib[i];) i++;
    if (na == (size_t)-1 || nb == (size_t)-1 || na != nb || i != na) {
        snprintf(msg, msglen, "%zu and %zu ids, first difference at %zu (%d vs %d)", na, nb, i, i < na ? ia[i] : -1, i < nb ? ib[i] : -1);
        rc = -1;
    }
    free(ia); free(ib);
    return rc;
}

/* every line's hex input of a fixture file, concatenated with a newline after each */
static char *fixture_inputs(const char *path, size_t *total, size_t *ncases) {
    size_t len, o = 0;
    char *txt = bt_test_read_file(path, &len), *out, *line, *save = NULL;
    *total = *ncases = 0;
    if (!txt) return NULL;
    out = (char *)malloc(len + 1);
    for (line = strtok_r(txt, "\n", &save); line; line = strtok_r(NULL, "\n", &save)) {
        char *tab = strchr(line, '\t');
        if (line[0] == '#' || !tab) continue;
        o += unhex(line, (size_t)(tab - line), out + o);
        out[o++] = '\n';
        ++*ncases;
    }
    free(txt);
    *total = o;
    return out;
}

/* ---- 1. GPT-2 as a tokenizer.json ---- */

static void test_gpt2_json_cases(void) {
    const char *paths[3] = {gpt2_json, gpt2_pairs_json, gpt2_split_json}, *fx[2] = {"tests/fixtures/gpt2_cases.txt", "tests/fixtures/gpt2_pretok.txt"};
    int p, f;
    for (p = 0; p < 3; p++) {
        bt_tokenizer *hf = bt_tokenizer_load_hf(paths[p]);
        BT_CHECK(hf != NULL, "%s: %s", paths[p], bt_data_error());
        if (!hf) continue;
        BT_CHECK(bt_tokenizer_vocab_size(hf) == BT_GPT2_VOCAB && hf->pretok == BT__PRETOK_GPT2 && !hf->ignore_merges &&
                 hf->nmerges == gpt2->nmerges, "%s: vocab %d, %zu merges (expected %zu)", paths[p], bt_tokenizer_vocab_size(hf), hf->nmerges, gpt2->nmerges);
        BT_CHECK(bt_tokenizer_token_id(hf, "<|endoftext|>") == BT_EOT && bt_tokenizer_token_id(gpt2, "<|endoftext|>") == BT_EOT, "<|endoftext|> id");
        BT_CHECK(bt_tokenizer_token_id(hf, " the") == 262 && bt_tokenizer_token_id(gpt2, " the") == 262, "\" the\" is 262");
        BT_CHECK(bt_tokenizer_token_id(hf, "no such token here") == -1 && strstr(bt_data_error(), "no token"), "%s", bt_data_error());
        for (f = 0; f < 2; f++) {   /* every case alone, and all of them as one text */
            size_t total, ncases, i, o = 0;
            char *all = fixture_inputs(fx[f], &total, &ncases), msg[256];
            int bad = 0;
            BT_CHECK(all && ncases >= 60, "%s", fx[f]);
            for (i = 0; all && i < total; i++)
                if (all[i] == '\n') {
                    if (same_ids(gpt2, hf, all + o, i - o, msg, sizeof msg) && bad++ < 3) BT_CHECK(0, "%s, input %.*s: %s", fx[f], (int)(i - o), all + o, msg);
                    o = i + 1;
                }
            BT_CHECK(bad == 0, "%s: %d cases differ", fx[f], bad);
            BT_CHECK(all && !same_ids(gpt2, hf, all, total, msg, sizeof msg), "%s as one text: %s", fx[f], msg);
            free(all);
        }
        bt_tokenizer_free(hf);
    }
}

static void test_gpt2_json_corpora(void) {
    const char *texts[] = {"wikitext-2/valid.txt", "wikitext-2/test.txt", "wikitext-2/train.txt", "tinyshakespeare/input.txt"};
    bt_tokenizer *hf = bt_tokenizer_load_hf(gpt2_json);
    size_t k;
    BT_CHECK(hf != NULL, "%s", bt_data_error());
    if (!hf) return;
    if (!file_exists("../shared/data/wikitext-2/valid.txt")) { BT_SKIP("../shared/data is absent"); bt_tokenizer_free(hf); return; }
    for (k = 0; k < 4; k++) {
        char path[256], msg[256], *text, *back = NULL;
        size_t len;
        int32_t *ids;
        if (bt_test_quick() && k) break;   /* ASan runs: WikiText-2 valid only */
        snprintf(path, sizeof path, "../shared/data/%s", texts[k]);
        if (!(text = bt_test_read_file(path, &len))) { BT_CHECK(0, "%s missing", path); continue; }
        BT_CHECK(!same_ids(gpt2, hf, text, len, msg, sizeof msg), "%s: %s", path, msg);
        {
            size_t n = bt_encode(hf, text, len, &ids);
            BT_CHECK(bt_decode(hf, ids, n, &back) == len && !memcmp(back, text, len), "%s: decode(encode(x)) != x", path);
            free(ids); free(back);
        }
        free(text);
    }
    bt_tokenizer_free(hf);
}

/* ---- 2. Llama 3's pre-tokenizer ---- */

static void test_llama3_pretok(void) {
    size_t len, ncases = 0, bad = 0;
    char *txt = bt_test_read_file("tests/fixtures/llama3_pretok.txt", &len), *line, *save = NULL;
    const char *added[] = {"<|begin_of_text|>", "<|end_of_text|>"};
    bt_tokenizer *t;
    BT_CHECK(make_small_json(bt_test_path("llama3_bytes.json"), "llama3", 1, NULL, 0, added, 2) == 0, "%s", bt_data_error());
    t = bt_tokenizer_load_hf(bt_test_path("llama3_bytes.json"));
    BT_CHECK(t && t->pretok == BT__PRETOK_LLAMA3 && t->ignore_merges, "%s", bt_data_error());
    BT_CHECK(txt != NULL, "tests/fixtures/llama3_pretok.txt missing");
    if (!txt || !t) { free(txt); bt_tokenizer_free(t); return; }
    for (line = strtok_r(txt, "\n", &save); line; line = strtok_r(NULL, "\n", &save)) {
        char *tab = strchr(line, '\t'), *p, input[512];
        size_t ilen, i = 0, want;
        int ok = 1;
        if (line[0] == '#' || !tab || tab - line >= 1024) continue;
        ilen = unhex(line, (size_t)(tab - line), input);
        for (p = tab + 1; ok && sscanf(p, "%zu", &want) == 1;) {
            size_t e = i < ilen ? bt__piece_end_llama3(t, (const unsigned char *)input, ilen, i) : i;
            ok = e - i == want;
            i = e;
            while (*p == ' ') p++;
            while (*p >= '0' && *p <= '9') p++;
        }
        if (!ok || i != ilen) {
            if (bad < 5) BT_CHECK(0, "pieces of \"%.*s\" differ from the regex module's (%s)", (int)ilen, input, tab + 1);
            bad++;
        }
        ncases++;
    }
    BT_CHECK(bad == 0 && ncases >= 600, "%zu of %zu cases differ", bad, ncases);
    free(txt);
    bt_tokenizer_free(t);
}

/* encode with merges that join across GPT-2's cuts but not Llama 3's, and the reverse */
static void test_llama3_encode(void) {
    /* 256 "'" + "S" -> "'S"; 257 "1" + "2"; 258 "12" + "3"; 259 "12" + "34"... only up to 3 digits in
       Llama 3; 260 "$" + "h"; 261 "!" + "\n"; 262 " " + "x" */
    const char *merges[] = {"' S", "1 2", "12 3", "123 4", "$ h", "! \n", "  x"};
    const char *added[] = {"<|begin_of_text|>", "<|end_of_text|>"};
    struct { const char *text; int32_t want[8]; int n; } cases[] = {
        {"'S", {256}, 1}, {"1234", {258, '4'}, 2}, {"$h", {260}, 1}, {"!\n", {261}, 1}, {" x", {262}, 1},
        {"<|end_of_text|>", {'<', '|', 'e', 'n', 'd', '_', 'o', 'f'}, -1}};
    bt_tokenizer *l3, *g2;
    int i, k;
    BT_CHECK(make_small_json(bt_test_path("l3.json"), "llama3", 0, merges, 7, added, 2) == 0, "%s", bt_data_error());
    BT_CHECK(make_small_json(bt_test_path("g2.json"), "gpt2", 0, merges, 7, added, 2) == 0, "%s", bt_data_error());
    l3 = bt_tokenizer_load_hf(bt_test_path("l3.json"));
    g2 = bt_tokenizer_load_hf(bt_test_path("g2.json"));
    BT_CHECK(l3 && g2, "%s", bt_data_error());
    if (!l3 || !g2) { bt_tokenizer_free(l3); bt_tokenizer_free(g2); return; }
    for (i = 0; i < (int)(sizeof cases / sizeof cases[0]); i++) {
        int32_t *ids;
        size_t n = bt_encode(l3, cases[i].text, strlen(cases[i].text), &ids);
        if (cases[i].n < 0) {   /* a special token's text is plain text: no id >= 263 */
            for (k = 0; k < (int)n; k++) BT_CHECK(ids[k] < 263, "\"%s\" gave the special id %d", cases[i].text, ids[k]);
        } else {
            BT_CHECK((int)n == cases[i].n && !memcmp(ids, cases[i].want, n * sizeof(int32_t)), "llama3 \"%s\": %zu ids, first %d", cases[i].text, n, n ? ids[0] : -1);
        }
        free(ids);
    }
    {   /* GPT-2's pattern cuts "'S" and "$h" and "!\n" apart, and keeps "1234" whole */
        int32_t *ids;
        size_t n = bt_encode(g2, "'S $h!\n1234", 11, &ids);
        const int32_t want[] = {'\'', 'S', ' ', '$', 'h', '!', '\n', 259};
        BT_CHECK(n == 8 && !memcmp(ids, want, sizeof want), "gpt2 pattern: %zu ids", n);
        free(ids);
    }
    bt_tokenizer_free(l3); bt_tokenizer_free(g2);
}

/* ---- 3. ignore_merges, special tokens, bad files, the tool ---- */

static void test_ignore_merges(void) {
    /* "abc" is a token, but BPE merges b+c first (rank 0) and has no a+bc: without ignore_merges
       "abc" is [a, bc]; with it, the piece is in the vocabulary and is one token */
    const char *merges[] = {"b c", "a b", "ab c"};
    int im;
    for (im = 0; im < 2; im++) {
        bt_tokenizer *t;
        int32_t *ids;
        size_t n;
        BT_CHECK(make_small_json(bt_test_path("im.json"), "llama3", im, merges, 3, NULL, 0) == 0, "%s", bt_data_error());
        t = bt_tokenizer_load_hf(bt_test_path("im.json"));
        BT_CHECK(t != NULL, "%s", bt_data_error());
        if (!t) continue;
        n = bt_encode(t, "abc abc", 7, &ids);   /* twice: the second comes from the cache */
        if (im) BT_CHECK(n == 4 && ids[0] == 258 && ids[1] == ' ' && ids[2] == 'a' && ids[3] == 256, "ignore_merges: %zu ids", n);
        else BT_CHECK(n == 5 && ids[0] == 'a' && ids[1] == 256 && ids[3] == 'a' && ids[4] == 256, "merges: %zu ids", n);
        free(ids);
        n = bt_encode(t, "abc", 3, &ids);
        BT_CHECK(n == (im ? 1u : 2u), "abc again: %zu ids", n);
        free(ids);
        bt_tokenizer_free(t);
    }
}

static void test_special_tokens(void) {
    const char *added[] = {"<|begin_of_text|>", "<|end_of_text|>", "<|reserved_special_token_0|>"};
    const char *merges[] = {"h i"};
    bt_tokenizer *t;
    int32_t ids[4], *got;
    char *text;
    size_t n;
    BT_CHECK(make_small_json(bt_test_path("sp.json"), "llama3", 1, merges, 1, added, 3) == 0, "%s", bt_data_error());
    t = bt_tokenizer_load_hf(bt_test_path("sp.json"));
    BT_CHECK(t != NULL, "%s", bt_data_error());
    if (!t) return;
    BT_CHECK(bt_tokenizer_vocab_size(t) == 260, "vocab %d", bt_tokenizer_vocab_size(t));
    BT_CHECK(bt_tokenizer_token_id(t, "<|begin_of_text|>") == 257 && bt_tokenizer_token_id(t, "<|end_of_text|>") == 258 &&
             bt_tokenizer_token_id(t, "<|reserved_special_token_0|>") == 259 && bt_tokenizer_token_id(t, "hi") == 256 &&
             bt_tokenizer_token_id(t, "a") == 'a', "token ids");
    ids[0] = 257; ids[1] = 256; ids[2] = '!'; ids[3] = 258;
    n = bt_decode(t, ids, 4, &text);
    BT_CHECK(n == strlen("<|begin_of_text|>hi!<|end_of_text|>") && !strcmp(text, "<|begin_of_text|>hi!<|end_of_text|>"), "decode: %s", text);
    free(text);
    ids[0] = 260;
    BT_CHECK(bt_decode(t, ids, 1, &text) == (size_t)-1 && strstr(bt_data_error(), "outside the vocabulary"), "%s", bt_data_error());
    n = bt_encode(t, "<|end_of_text|>", 15, &got);   /* never matched in text */
    BT_CHECK(n == 15 && got[0] == '<', "special text encodes as bytes: %zu ids", n);
    free(got);
    bt_tokenizer_free(t);
}

/* a tokenizer.json text with one change, through sed-like replacement of the first `from` */
static void check_bad(const char *base, size_t blen, const char *from, const char *to, const char *want) {
    const char *at = from ? strstr(base, from) : NULL;
    char *s;
    size_t fl = from ? strlen(from) : 0, tl = to ? strlen(to) : 0, o;
    bt_tokenizer *t;
    const char *path = bt_test_path("bad.json");
    BT_CHECK(!from || at, "the base has no '%s'", from);
    if (from && !at) return;
    s = (char *)malloc(blen + tl + 1);
    o = from ? (size_t)(at - base) : blen;
    memcpy(s, base, o);
    memcpy(s + o, to, tl);
    if (from) memcpy(s + o + tl, at + fl, blen - o - fl);
    bt_test_write_file(path, s, blen - fl + tl);
    free(s);
    t = bt_tokenizer_load_hf(path);
    BT_CHECK(!t, "'%s' -> '%s' was accepted", from, to);
    BT_CHECK(strstr(bt_data_error(), path) && strstr(bt_data_error(), want), "'%s' -> '%s': message \"%s\", expected \"%s\"", from, to, bt_data_error(), want);
    bt_tokenizer_free(t);
}

static void test_bad_files(void) {
    const char *merges[] = {"a b", "ab c"};
    const char *added[] = {"<|end_of_text|>"};
    size_t blen;
    char *base;
    BT_CHECK(make_small_json(bt_test_path("base.json"), "llama3", 1, merges, 2, added, 1) == 0, "%s", bt_data_error());
    base = bt_test_read_file(bt_test_path("base.json"), &blen);
    if (!base) return;
    BT_CHECK(bt_tokenizer_load_hf(bt_test_path("nope.json")) == NULL && strstr(bt_data_error(), "nope.json"), "%s", bt_data_error());
    check_bad(base, blen, "[\"ab\",\"c\"]", "[\"ab\",\"x\"]", "merged token is not in model.vocab");
    check_bad(base, blen, "[\"a\",\"b\"]", "[\"q\",\"b\"]", "merged token is not in model.vocab");
    check_bad(base, blen, "[\"a\",\"b\"]", "\"a  b\"", "expected \"A B\"");
    check_bad(base, blen, "[\"a\",\"b\"]", "[\"a\",\"\\u0000\"]", "not in GPT-2's byte alphabet");
    check_bad(base, blen, "\"Split\"", "\"Whitespace\"", "unsupported type \"Whitespace\"");
    check_bad(base, blen, "\"Sequence\"", "\"Metaspace\"", "unsupported type \"Metaspace\"");
    check_bad(base, blen, "(?i:'s|'t|", "('s|'t|", "unsupported regex");
    check_bad(base, blen, "\"Isolated\"", "\"Removed\"", "only behavior \"Isolated\"");
    check_bad(base, blen, "\"add_prefix_space\":false,\"trim_offsets\":true,\"use_regex\":false", "\"add_prefix_space\":true,\"trim_offsets\":true,\"use_regex\":false", "add_prefix_space must be false");
    check_bad(base, blen, "\"vocab\":", "\"vocabulary\":", "model.vocab is missing");
    check_bad(base, blen, "\"merges\":", "\"merged\":", "model.merges is missing");
    check_bad(base, blen, "\"abc\":257", "\"abc\":300", "id 300 is out of range");
    check_bad(base, blen, "\"abc\":257", "\"abc\":-1", "out of range");
    check_bad(base, blen, "\"id\":258", "\"id\":99999", "out of range");
    check_bad(base, blen, "\"abc\":257", "\"abc\":256", "id 256 is given to both");
    check_bad(base, blen, "\"id\":258", "\"id\":97", "model.vocab gives to another token");
    check_bad(base, blen, "\"a\":97", "\"a\\u0100\":97", "no token for byte 0x61");
    check_bad(base, blen, "\"type\":\"BPE\"", "\"type\":\"WordPiece\"", "only \"BPE\"");
    check_bad(base, blen, "\"normalizer\":null", "\"normalizer\":{\"type\":\"NFC\"}", "a normalizer is set");
    check_bad(base, blen, "\"dropout\":null", "\"dropout\":0.1", "dropout");
    check_bad(base, blen, "\"pre_tokenizer\":", "\"pre_tokenizer\":null,\"x\":", "no pre_tokenizer");
    check_bad(base, blen, "\"abc\":257", "\"a\\u0100\\u0200\":257", "not in GPT-2's byte alphabet");
    check_bad(base, blen, "{", "[", "JSON");
    free(base);
}

/* Llama 3's separator: a tokenizer.json with <|end_of_text|> and no <|endoftext|> (the fixture trained by
   tokenizers, tests/fixtures/hf_check/llama3_ignore: 8,002 tokens, <|end_of_text|> 8001) puts it before
   each document in --eot and the corpus mode; one with neither is refused, naming the file */
static void test_llama3_separator(void) {
    const char *json = "tests/fixtures/hf_check/llama3_ignore/tokenizer.json";
    if (!file_exists("./bt_tokenize")) { BT_SKIP("./bt_tokenize is not built (make tools)"); return; }
    if (!file_exists(json)) { BT_SKIP("tests/fixtures/hf_check is absent"); return; }
    bt_tokenizer *t = bt_tokenizer_load_hf(json);
    BT_CHECK(t != NULL, "%s", bt_data_error());
    if (!t) return;
    int32_t sep = bt_tokenizer_token_id(t, "<|end_of_text|>");
    BT_CHECK(sep == 8001 && bt_tokenizer_token_id(t, "<|endoftext|>") < 0, "<|end_of_text|> %d", sep);
    const char *a = "Hello world.\n\nSecond document here.\n", *b = "Third one.\n";
    char pa[600], pb[600], cmd[2400], prefix[600], shard[700];
    snprintf(pa, sizeof pa, "%s", bt_test_path("l3a.txt")); snprintf(pb, sizeof pb, "%s", bt_test_path("l3b.txt"));
    bt_test_write_text(pa, a); bt_test_write_text(pb, b);
    /* the expected ids: the separator, then each document alone (the corpus mode: a file is a document;
       --eot: a's two paragraphs are two documents) */
    int32_t want[256], *ids;
    size_t nw = 0, n, k;
    const char *docs[3] = {a, b, NULL};
    for (int d = 0; docs[d]; d++) {
        want[nw++] = sep;
        n = bt_encode(t, docs[d], strlen(docs[d]), &ids);
        for (k = 0; k < n && nw < 256; k++) want[nw++] = ids[k];
        free(ids);
    }
    snprintf(prefix, sizeof prefix, "%s", bt_test_path("l3"));
    snprintf(cmd, sizeof cmd, "./bt_tokenize -q --tokenizer %s --out %s %s %s", json, prefix, pa, pb);
    BT_CHECK(run(cmd) == 0, "%s", cmd);
    bt_shard s;
    snprintf(shard, sizeof shard, "%s_val_000000.bin", prefix);
    int same = bt_shard_open(&s, shard) == 0 && s.n == nw;
    for (k = 0; same && k < nw; k++) same = (int32_t)bt_shard_token(&s, k) == want[k];
    BT_CHECK(same, "the corpus shard (%zu tokens) is not <|end_of_text|> + each document (%zu)", s.n, nw);
    bt_shard_close(&s);
    /* --eot on a alone: the separator before each of its two paragraphs */
    snprintf(shard, sizeof shard, "%s", bt_test_path("l3eot.bin"));
    snprintf(cmd, sizeof cmd, "./bt_tokenize -q --eot --tokenizer %s %s %s", json, pa, shard);
    BT_CHECK(run(cmd) == 0, "%s", cmd);
    size_t seps = 0;
    if (bt_shard_open(&s, shard) == 0) {
        for (k = 0; k < s.n; k++) seps += bt_shard_token(&s, k) == (uint32_t)sep;
        BT_CHECK(s.n > 2 && bt_shard_token(&s, 0) == (uint32_t)sep && seps == 2, "--eot: %zu separators in %zu tokens", seps, s.n);
        bt_shard_close(&s);
    } else BT_CHECK(0, "%s", bt_data_error());
    bt_tokenizer_free(t);
    /* the same tokenizer with its <|end_of_text|> renamed (same length): neither token, refused */
    size_t len;
    char *text = bt_test_read_file(json, &len), *p, other[700];
    for (p = text; p && (p = strstr(p, "<|end_of_text|>")) != NULL; p += 15) memcpy(p, "<|nd_of_text_|>", 15);
    snprintf(other, sizeof other, "%s", bt_test_path("noeot.json"));
    if (text) bt_test_write_file(other, text, len);
    free(text);
    snprintf(cmd, sizeof cmd, "./bt_tokenize -q --eot --tokenizer %s %s %s 2> %s", other, pa, shard, bt_test_path("noeot.txt"));
    BT_CHECK(run(cmd) == 1 && bt_test_file_has(bt_test_path("noeot.txt"), "noeot.json: no <|endoftext|> or <|end_of_text|>"), "a tokenizer without either is refused");
}

/* bt_tokenize --tokenizer: GPT-2's tokenizer.json gives the shard encoder.json gives; a vocabulary
   past uint16 writes uint32 shards (test_big_vocab_shards) */
static void test_bt_tokenize_tool(void) {
    char in[512], out1[512], out2[512], cmd[2048];
    const char *text = "Hello world, it's a test.\n\nSecond document here.\n";
    size_t l1, l2;
    char *a, *b;
    if (!file_exists("./bt_tokenize")) { BT_SKIP("./bt_tokenize is not built (make tools)"); return; }
    snprintf(in, sizeof in, "%s", bt_test_path("in.txt"));
    snprintf(out1, sizeof out1, "%s", bt_test_path("a.bin"));
    snprintf(out2, sizeof out2, "%s", bt_test_path("b.bin"));
    bt_test_write_text(in, text);
    snprintf(cmd, sizeof cmd, "./bt_tokenize -q --eot --encoder %s --vocab %s %s %s", enc_path, voc_path, in, out1);
    BT_CHECK(run(cmd) == 0, "%s", cmd);
    snprintf(cmd, sizeof cmd, "./bt_tokenize -q --eot --tokenizer %s %s %s", gpt2_json, in, out2);
    BT_CHECK(run(cmd) == 0, "%s", cmd);
    a = bt_test_read_file(out1, &l1); b = bt_test_read_file(out2, &l2);
    BT_CHECK(a && b && l1 == l2 && !memcmp(a, b, l1), "the two shards differ");
    free(a); free(b);
    snprintf(cmd, sizeof cmd, "./bt_tokenize --tokenizer %s --decode %s > %s", gpt2_json, out2, bt_test_path("back.txt"));
    BT_CHECK(run(cmd) == 0, "%s", cmd);
    a = bt_test_read_file(bt_test_path("back.txt"), &l1);
    BT_CHECK(a && strstr(a, "<|endoftext|>Hello world"), "--decode with --tokenizer: %s", a ? a : "(none)");
    free(a);
    snprintf(cmd, sizeof cmd, "./bt_tokenize -q --tokenizer %s --encoder x %s %s 2> %s", gpt2_json, in, out2, bt_test_path("err.txt"));
    BT_CHECK(run(cmd) == 2 && bt_test_file_has(bt_test_path("err.txt"), "--tokenizer"), "--tokenizer with --encoder is a usage error");
}

/* Issue 36: a tokenizer.json of 70,000 tokens (GPT-2's, fillers, and a last merge whose token is
   id 69,999) makes bt_tokenize write llm.c's uint32 shards (magic 20240801, version 7) in both
   modes; the loader reads them back to the ids of encoding directly, 69,999 included, and --decode
   gives the text back. */
static void test_big_vocab_shards(void) {
    static const char *cands[] = {" blorf", " grimble", " wuzzle", " tokenizer"};   /* two tokens each in GPT-2 */
    const char *text = "Hello world blorf, it's a test.\n\nSecond document, grimble wuzzle here; a tokenizer.\n";
    char json[512], in[512], out[512], prefix[512], path[600], cmd[2048], ma[64], mb[64], *back;
    int32_t *want = NULL, *in_ids, *tg_ids;
    size_t nw, k, len, i;
    bt_tokenizer *big;
    bt_loader *L;
    bt_shard s;
    int top = 0, ok = 1;
    if (!file_exists("./bt_tokenize")) { BT_SKIP("./bt_tokenize is not built (make tools)"); return; }
    /* a word GPT-2 encodes as two tokens a, b whose concatenation is no token: "a b" is the new last merge */
    ma[0] = 0;
    for (k = 0; k < sizeof cands / sizeof cands[0] && !ma[0]; k++) {
        int32_t *ids = NULL;
        size_t n = bt_encode(gpt2, cands[k], strlen(cands[k]), &ids), la, lb;
        if (n == 2) {
            const char *a = bt_decode_token(gpt2, ids[0], &la), *b = bt_decode_token(gpt2, ids[1], &lb);
            char ab[64];
            memcpy(ab, a, la); memcpy(ab + la, b, lb); ab[la + lb] = 0;
            if (bt_tokenizer_token_id(gpt2, ab) < 0) { snprintf(ma, sizeof ma, "%s", byte_str(a, la)); snprintf(mb, sizeof mb, "%s", byte_str(b, lb)); }
        }
        free(ids);
    }
    BT_CHECK(ma[0], "no candidate word encodes to two tokens");
    if (!ma[0]) return;
    snprintf(json, sizeof json, "%s", bt_test_path("big70k.json"));
    BT_CHECK(make_gpt2_json_big(json, "gpt2", 1, 70000, ma, mb) == 0, "%s", bt_data_error());
    big = bt_tokenizer_load_hf(json);
    BT_CHECK(big && bt_tokenizer_vocab_size(big) == 70000, "the 70,000-token tokenizer.json: %s", big ? "wrong size" : bt_data_error());
    if (!big) return;
    nw = bt_encode(big, text, strlen(text), &want);
    for (i = 0; i < nw; i++) top |= want[i] == 69999;
    BT_CHECK(nw != (size_t)-1 && top, "the text must encode to id 69999 (the last merge %s %s)", ma, mb);
    /* single-file mode: a uint32 shard */
    snprintf(in, sizeof in, "%s", bt_test_path("big_in.txt"));
    snprintf(out, sizeof out, "%s", bt_test_path("big.bin"));
    bt_test_write_text(in, text);
    snprintf(cmd, sizeof cmd, "./bt_tokenize -q --tokenizer %s %s %s", json, in, out);
    BT_CHECK(run(cmd) == 0, "%s", cmd);
    {
        size_t l;
        char *raw = bt_test_read_file(out, &l);
        int32_t h[3] = {0, 0, 0};
        if (raw && l >= 12) memcpy(h, raw, sizeof h);
        BT_CHECK(raw && h[0] == 20240801 && h[1] == 7 && h[2] == (int32_t)nw && l == 1024 + 4 * nw, "header %d %d %d, %zu bytes", h[0], h[1], h[2], l);
        free(raw);
    }
    /* the loader: one batch of T = n - 1 holds every id */
    L = bt_loader_open(out, 1, (int)nw - 1, 0, 1, 0, 0);
    BT_CHECK(L && bt_loader_check_vocab(L, 70000) == 0, "loader: %s", bt_data_error());
    in_ids = (int32_t *)malloc(nw * sizeof(int32_t)); tg_ids = (int32_t *)malloc(nw * sizeof(int32_t));
    if (L) {
        BT_CHECK(bt_loader_next(L, in_ids, tg_ids) == 0, "next: %s", bt_data_error());
        for (i = 0; i + 1 < nw; i++) ok &= in_ids[i] == want[i] && tg_ids[i] == want[i + 1];
        BT_CHECK(ok, "the loader's ids differ from encoding directly");
        BT_CHECK(bt_loader_check_vocab(L, 69999) == -1 && strstr(bt_data_error(), "token 69999"), "vocab 69999: %s", bt_data_error());
    }
    bt_loader_close(L);
    snprintf(cmd, sizeof cmd, "./bt_tokenize --tokenizer %s --decode %s > %s", json, out, bt_test_path("big_back.txt"));
    BT_CHECK(run(cmd) == 0, "%s", cmd);
    back = bt_test_read_file(bt_test_path("big_back.txt"), &len);
    BT_CHECK(back && len == strlen(text) && !memcmp(back, text, len), "--decode of the uint32 shard: %s", back ? back : "(none)");
    free(back);
    /* corpus mode: <|endoftext|> + the ids, in a uint32 validation shard */
    snprintf(prefix, sizeof prefix, "%s", bt_test_path("bigc"));
    snprintf(cmd, sizeof cmd, "./bt_tokenize -q --threads 2 --tokenizer %s --out %s %s", json, prefix, in);
    BT_CHECK(run(cmd) == 0, "%s", cmd);
    snprintf(path, sizeof path, "%s_val_000000.bin", prefix);
    BT_CHECK(bt_shard_open(&s, path) == 0 && s.width == 4 && s.tokens32 && !s.tokens && s.n == nw + 1 && s.tokens32[0] == BT_EOT,
             "corpus shard: %s (%zu tokens, width %d)", bt_data_error(), s.n, s.width);
    ok = 1;
    for (i = 0; s.n == nw + 1 && i < nw; i++) ok &= bt_shard_token(&s, i + 1) == (uint32_t)want[i];
    BT_CHECK(ok, "corpus mode's ids differ from encoding directly");
    bt_shard_close(&s);
    BT_CHECK(bt_test_file_has(bt_test_path("bigc.state"), "shard_layout uint32"), "the state records the layout");
    free(want); free(in_ids); free(tg_ids);
    bt_tokenizer_free(big);
}

/* ---- 4. against the tokenizers library (tests/hf_tokenizer_check.py's output) ---- */

/* one directory: tokenizer.json, index.json {"texts": [{"name", "count"}]}, NAME.txt, NAME.ids */
static void check_hf_dir(const char *dir) {
    char path[1024];
    size_t ilen, ntexts = 0;
    char *index;
    bt_json_doc *doc;
    const bt_json *texts, *c;
    bt_tokenizer *t;
    snprintf(path, sizeof path, "%s/tokenizer.json", dir);
    t = bt_tokenizer_load_hf(path);
    BT_CHECK(t != NULL, "%s", bt_data_error());
    snprintf(path, sizeof path, "%s/index.json", dir);
    index = bt_test_read_file(path, &ilen);
    doc = index ? bt_json_parse(index, ilen, 0) : NULL;
    texts = bt_json_get(bt_json_root(doc), "texts");
    BT_CHECK(texts && texts->type == BT_JSON_ARRAY, "%s: %s", path, index ? bt_data_error() : "missing");
    for (c = texts ? texts->child : NULL; t && c; c = c->next, ntexts++) {
        const char *name = bt_json_get(c, "name") ? bt_json_get(c, "name")->str : "?";
        char *text, *ids_raw, *back = NULL;
        size_t tl = 0, il = 0, n, i;
        int32_t *ids;
        snprintf(path, sizeof path, "%s/%s.txt", dir, name);
        text = bt_test_read_file(path, &tl);
        snprintf(path, sizeof path, "%s/%s.ids", dir, name);
        ids_raw = bt_test_read_file(path, &il);
        BT_CHECK(text && ids_raw && il % 4 == 0, "%s/%s: .txt or .ids missing", dir, name);
        if (!text || !ids_raw) { free(text); free(ids_raw); continue; }
        {   /* "splits": texts back to back, each encoded alone */
            const bt_json *sp = bt_json_get(c, "splits"), *e;
            size_t cap = 0, off = 0;
            ids = NULL; n = 0;
            for (e = sp ? sp->child : NULL; e && n != (size_t)-1; e = e->next) {
                size_t k = (size_t)e->num;
                if (off + k > tl) break;
                n = bt_encode_append(t, text + off, k, &ids, n, &cap);
                off += k;
            }
            if (!sp) n = bt_encode_append(t, text, tl, &ids, 0, &cap);
            else BT_CHECK(off == tl, "%s/%s: the splits cover %zu of %zu bytes", dir, name, off, tl);
            BT_CHECK(n != (size_t)-1, "%s/%s: %s", dir, name, bt_data_error());
            if (n == (size_t)-1) n = 0;
        }
        for (i = 0; i < n && i < il / 4 && !memcmp(ids + i, ids_raw + 4 * i, 4);) i++;
        if (n != il / 4 || i != n) {
            int32_t want = 0;
            size_t at = 0, k, l;
            const char *tokb;
            if (i < il / 4) memcpy(&want, ids_raw + 4 * i, 4);
            for (k = 0; k < i; k++) { bt_decode_token(t, ids[k], &l); at += l; }
            BT_CHECK(0, "%s/%s: %zu ids, tokenizers gives %zu; first difference at id %zu (byte %zu): ours %d, theirs %d; text there: \"%.40s\"",
                     dir, name, n, il / 4, i, at, i < n ? ids[i] : -1, want, at < tl ? text + at : "");
            tokb = i < n ? bt_decode_token(t, ids[i], &l) : NULL;
            if (tokb) fprintf(stderr, "    ours: \"%.*s\"", (int)l, tokb);
            tokb = i < il / 4 ? bt_decode_token(t, want, &l) : NULL;
            if (tokb) fprintf(stderr, "  theirs: \"%.*s\"", (int)l, tokb);
            fprintf(stderr, "\n");
        }
        BT_CHECK(bt_decode(t, ids, n, &back) == tl && !memcmp(back, text, tl), "%s/%s: decode(encode(x)) != x", dir, name);
        free(back); free(ids); free(text); free(ids_raw);
    }
    BT_CHECK(ntexts > 0, "%s: no texts", dir);
    texts = bt_json_get(bt_json_root(doc), "decode");   /* ids (special ones too) -> tokenizers' decode */
    for (c = texts && t ? texts->child : NULL; c; c = c->next) {
        const bt_json *idl = bt_json_get(c, "ids"), *e, *want = bt_json_get(c, "text");
        int32_t dids[256];
        size_t nd = 0, m;
        char *back;
        for (e = idl ? idl->child : NULL; e && nd < 256; e = e->next) dids[nd++] = (int32_t)e->num;
        m = bt_decode(t, dids, nd, &back);
        BT_CHECK(want && m == want->len && !memcmp(back, want->str, m), "%s: decode gives \"%s\", tokenizers \"%s\"", dir, back ? back : bt_data_error(), want ? want->str : "?");
        free(back);
    }
    fprintf(stderr, "    %s: %zu texts checked against tokenizers\n", dir, ntexts);
    bt_json_free(doc); free(index);
    bt_tokenizer_free(t);
}

/* the checker itself, on a directory in its format written here from GPT-2's files and ids */
static void test_check_dir_format(void) {
    const char *text = "Hello world, it's 2024.\r\n\r\nNext line!", *parts = "ab  c";
    char dir[512], path[600], *back, idx[512];
    int32_t *ids = NULL, eot[3] = {BT_EOT, 15496, BT_EOT};
    size_t n, cap = 0;
    int fails = bt_test__cur_failed;
    snprintf(dir, sizeof dir, "%s", bt_test_path("gpt2_check"));
    mkdir(dir, 0777);
    snprintf(path, sizeof path, "%s/tokenizer.json", dir);
    BT_CHECK(make_gpt2_json(path, "gpt2", 1) == 0, "%s", bt_data_error());
    snprintf(path, sizeof path, "%s/w.txt", dir); bt_test_write_text(path, text);
    n = bt_encode(gpt2, text, strlen(text), &ids);
    snprintf(path, sizeof path, "%s/w.ids", dir); bt_test_write_file(path, ids, n * 4);
    free(ids); ids = NULL;
    n = bt_encode_append(gpt2, parts, 2, &ids, 0, &cap);
    n = bt_encode_append(gpt2, parts + 2, 3, &ids, n, &cap);
    snprintf(path, sizeof path, "%s/c.txt", dir); bt_test_write_text(path, parts);
    snprintf(path, sizeof path, "%s/c.ids", dir); bt_test_write_file(path, ids, n * 4);
    free(ids);
    bt_decode(gpt2, eot, 3, &back);
    snprintf(idx, sizeof idx, "{\"texts\": [{\"name\": \"w\"}, {\"name\": \"c\", \"splits\": [2, 3]}], \"decode\": [{\"ids\": [50256, 15496, 50256], \"text\": \"%s\"}]}", back);
    free(back);
    snprintf(path, sizeof path, "%s/index.json", dir); bt_test_write_text(path, idx);
    check_hf_dir(dir);
    BT_CHECK(bt_test__cur_failed == fails, "the checker fails on a directory that agrees");
    snprintf(path, sizeof path, "%s/c.ids", dir); bt_test_write_file(path, "\x01\0\0\0", 4);   /* now it must fail */
    {   /* the failure this must report is expected: its message goes to /dev/null, not the log */
        int saved = dup(2), devnull = open("/dev/null", O_WRONLY);
        fflush(stderr);
        if (devnull >= 0) dup2(devnull, 2);
        check_hf_dir(dir);
        fflush(stderr);
        if (saved >= 0) { dup2(saved, 2); close(saved); }
        if (devnull >= 0) close(devnull);
    }
    BT_CHECK(bt_test__cur_failed == fails + 1, "the checker passes a directory that disagrees");
    bt_test__cur_failed = fails;
}

static const char **hf_dirs;
static int hf_ndirs;

static void test_against_tokenizers(void) {
    const char *fallback = "tests/fixtures/hf_check";
    const char **dirs = hf_dirs;
    int nd = hf_ndirs, d, found = 0;
    if (!nd) { dirs = &fallback; nd = 1; }
    for (d = 0; d < nd; d++) {
        char p[2048];
        DIR *dh;
        struct dirent *e;
        snprintf(p, sizeof p, "%s/tokenizer.json", dirs[d]);
        if (file_exists(p)) { check_hf_dir(dirs[d]); found++; continue; }
        if (!(dh = opendir(dirs[d]))) { if (hf_ndirs) BT_CHECK(0, "%s: not a directory", dirs[d]); continue; }
        while ((e = readdir(dh)) != NULL) {
            char sub[1024];
            if (e->d_name[0] == '.') continue;
            snprintf(sub, sizeof sub, "%s/%s", dirs[d], e->d_name);
            snprintf(p, sizeof p, "%s/tokenizer.json", sub);
            if (file_exists(p)) { check_hf_dir(sub); found++; }
        }
        closedir(dh);
    }
    if (!found && !hf_ndirs) BT_SKIP("%s is absent (tests/hf_tokenizer_check.py writes it where `tokenizers` is installed)", fallback);
    else BT_CHECK(found > 0, "no tokenizer.json in the directories given");
}

int main(int argc, char **argv) {
    const char *dirs[2][2] = {{"../shared/data/gpt2-tokenizer/encoder.json", "../shared/data/gpt2-tokenizer/vocab.bpe"},
                              {"data/encoder.json", "data/vocab.bpe"}};
    int d;
    hf_dirs = (const char **)(argv + 1);
    hf_ndirs = argc - 1;
    if (bt_test_dir_make("test_hf_tokenizer")) return 1;
    for (d = 0; d < 2 && !enc_path; d++)
        if (file_exists(dirs[d][0]) && file_exists(dirs[d][1])) { enc_path = dirs[d][0]; voc_path = dirs[d][1]; }
    if (enc_path) gpt2 = bt_tokenizer_load(enc_path, voc_path);
    snprintf(gpt2_json, sizeof gpt2_json, "%s", bt_test_path("gpt2.json"));
    snprintf(gpt2_pairs_json, sizeof gpt2_pairs_json, "%s", bt_test_path("gpt2_pairs.json"));
    snprintf(gpt2_split_json, sizeof gpt2_split_json, "%s", bt_test_path("gpt2_split.json"));
    if (gpt2 && (make_gpt2_json(gpt2_json, "gpt2", 0) || make_gpt2_json(gpt2_pairs_json, "gpt2", 1) || make_gpt2_json(gpt2_split_json, "gpt2split", 0))) {
        fprintf(stderr, "cannot write GPT-2's tokenizer.json: %s\n", bt_data_error());
        bt_test__failed++;
    } else if (gpt2) {
        BT_RUN(test_gpt2_json_cases);
        BT_RUN(test_gpt2_json_corpora);
        BT_RUN(test_bt_tokenize_tool);
        BT_RUN(test_big_vocab_shards);
        BT_RUN(test_llama3_separator);
        BT_RUN(test_check_dir_format);
    } else {
        fprintf(stderr, "GPT-2's tokenizer files not found or not loadable: %s\n", enc_path ? bt_data_error() : "(none)");
        bt_test__failed++;
    }
    BT_RUN(test_llama3_pretok);
    BT_RUN(test_llama3_encode);
    BT_RUN(test_ignore_merges);
    BT_RUN(test_special_tokens);
    BT_RUN(test_bad_files);
    BT_RUN(test_against_tokenizers);
    bt_tokenizer_free(gpt2);
    bt_test_dir_remove();
    return bt_test_summary("test_hf_tokenizer");
}
