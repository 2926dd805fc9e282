/* test_bt_tokenize.c - bt_tokenize's corpus mode (--out PREFIX INPUT...): a corpus of text files,
   JSON lines, .gz of both, a directory and a glob encodes to exactly the ids of one sequential pass
   (bt_encode of each document, <|endoftext|> before each), with 1 and 4 threads and chunks of
   16 bytes, and as uint32 shards (--u32); a run killed after its first shard resumes to the same
   shards, and a changed input or the other shard layout is refused; peak memory does not grow
   with the corpus (10x the text through a pipe); bad inputs fail naming the file (and line). Run from the repository root, after make tools. The tokenizer
   files are taken from ../shared/data/gpt2-tokenizer or data/; the long text from
   ../shared/data/tinyshakespeare when it is there (else a generated one). */
#define _DEFAULT_SOURCE   /* wait4 */
#define _XOPEN_SOURCE 700
#include "bt_data.h"
#include "tests/bt_test.h"
#include "tests/bt_test_files.h"

#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdlib.h>
#include <unistd.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/time.h>
#include <sys/wait.h>

static bt_tokenizer *tok;
static const char *enc_path, *voc_path;
static char tool_args[1024];   /* "--encoder E --vocab V" */

static int file_exists(const char *p) { return access(p, F_OK) == 0; }
static int run(const char *cmd) {
    int rc = system(cmd);
    return rc == -1 ? -1 : WIFEXITED(rc) ? WEXITSTATUS(rc) : -1;
}

/* ---- a growable list of ids: the expected stream ---- */
typedef struct { int32_t *v; size_t n, cap; } ids_t;
static void ids_doc(ids_t *w, const char *text, size_t len) {   /* <|endoftext|> + encode(text) */
    if (w->n + 1 > w->cap) { w->cap = 2 * w->cap + 1024; w->v = (int32_t *)realloc(w->v, w->cap * sizeof(int32_t)); }
    w->v[w->n++] = BT_EOT;
    w->n = bt_encode_append(tok, text, len, &w->v, w->n, &w->cap);
}

/* every shard of PREFIX in order (val_000000 if there, then train_000001, ...), concatenated; the
   number of shards in *nshards; each shard but the last train one must hold cap tokens (val: vcap) */
static int shard_width;   /* read_shards: the width of the shards read (0: none; -1: mixed) */
static int read_shards(const char *prefix, ids_t *got, size_t vcap, size_t cap, int *nshards, int *sizes_ok) {
    char path[700];
    int k;
    bt_shard s;
    size_t last_n = 0;
    got->n = 0; *nshards = 0; *sizes_ok = 1; shard_width = 0;
    for (k = 0;; k++) {
        size_t i;
        snprintf(path, sizeof path, "%s_%s_%06d.bin", prefix, k ? "train" : "val", k);
        if (!file_exists(path)) { if (k == 0) continue; break; }
        if (bt_shard_open(&s, path) != 0) return -1;
        shard_width = !shard_width || shard_width == s.width ? s.width : -1;
        if (got->n + s.n > got->cap) { got->cap = 2 * (got->n + s.n); got->v = (int32_t *)realloc(got->v, got->cap * sizeof(int32_t)); }
        for (i = 0; i < s.n; i++) got->v[got->n++] = (int32_t)bt_shard_token(&s, i);
        if (k > 1 && last_n != cap) *sizes_ok = 0;   /* the one before this one was not full */
        if (k == 0 && vcap && s.n > vcap) *sizes_ok = 0;
        last_n = s.n;
        bt_shard_close(&s);
        ++*nshards;
    }
    if (last_n > cap) *sizes_ok = 0;
    return 0;
}

static size_t first_diff(const ids_t *a, const ids_t *b) {
    size_t i, n = a->n < b->n ? a->n : b->n;
    for (i = 0; i < n && a->v[i] == b->v[i]; i++) {}
    return i;
}

/* JSON string escaping for the test's JSON lines: quotes, backslashes, control bytes, and every
   third non-ASCII character's first byte as-is (the rest stay raw UTF-8) */
static char *json_escape(const char *s, size_t n) {
    char *o = (char *)malloc(6 * n + 3), *p = o;
    size_t i;
    *p++ = '"';
    for (i = 0; i < n; i++) {
        unsigned char c = (unsigned char)s[i];
        if (c == '"' || c == '\\') { *p++ = '\\'; *p++ = (char)c; }
        else if (c == '\n') { *p++ = '\\'; *p++ = 'n'; }
        else if (c < 0x20) p += sprintf(p, "\\u%04x", c);
        else *p++ = (char)c;
    }
    *p++ = '"'; *p = 0;
    return o;
}

static char *gen_text(size_t n, uint64_t seed);

/* a long text: Tiny Shakespeare's first n bytes when it is there, else generated */
static char *long_text(size_t n, size_t *len) {
    size_t l = 0;
    char *t = bt_test_read_file("../shared/data/tinyshakespeare/input.txt", &l);
    if (t && l >= n) { t[n] = 0; *len = n; return t; }
    free(t);
    *len = n;
    return gen_text(n, 7);
}

/* generated text: words (ASCII, accented, CJK, digits, punctuation), spaces and newlines, some
   long lines without a newline and some runs without a space */
static char *gen_text(size_t n, uint64_t seed) {
    static const char *words[] = {"the", "quick", "brown", "fox's", "jumps", "caf\xc3\xa9", "na\xc3\xafve", "\xe4\xb8\xad\xe6\x96\x87",
                                  "1234", "3.14", "--", "!?", "\xe2\x80\x9cquoted\xe2\x80\x9d", "it'll", "We've", "x\xc2\xa0y",
                                  "\xf0\x9f\x98\x80", "ALL-CAPS", "tab\tbed", "CR\r\nLF"};
    char *t = (char *)malloc(n + 64);
    size_t o = 0, line = 0;
    while (o < n) {
        uint64_t r = (seed = seed * 6364136223846793005ull + 1442695040888963407ull) >> 33;
        const char *w = words[r % (sizeof words / sizeof words[0])];
        size_t k = strlen(w);
        memcpy(t + o, w, k); o += k; line += k;
        if ((r >> 8) % 97 == 0) { memset(t + o, 'z', 40); o += 40; }      /* a run with no place to cut */
        if (line > ((r >> 16) % 7 == 0 ? 2000 : 70)) { t[o++] = '\n'; if ((r >> 20) % 5 == 0) t[o++] = '\n'; line = 0; }
        else t[o++] = ((r >> 24) % 11 == 0) ? '\t' : ' ';
    }
    t[n] = 0;
    return t;
}

/* ---- 1. the corpus encodes to one sequential pass ---- */
static void test_corpus_matches_sequential(void) {
    const char *D = bt_test_path("corpus"), *G = bt_test_path("globbed");
    char cmd[4096], path[600], *big, *big2, *js, line[256];
    size_t bl, b2l, k;
    ids_t want = {0}, got = {0};
    int t, nsh, sizes_ok;
    FILE *f;
    static const char *jdocs[] = {"caf\xc3\xa9 \xf0\x9f\x98\x80 na\xc3\xafve \"q\"\n\tend", "", "second\n\nparagraph \\ back\x01slash"};
    static const char *jlines[] = {"{\"id\": 1, \"text\": \"caf\\u00e9 \\ud83d\\ude00 na\\u00EFve \\\"q\\\"\\n\\tend\"}",
                                   "{\"text\": \"\", \"meta\": {\"a\": [1, 2]}}", "   ",
                                   "{\"text\":\"second\\n\\nparagraph \\\\ back\\u0001slash\"}\r"};
    if (!file_exists("./bt_tokenize")) { BT_SKIP("./bt_tokenize is not built (make tools)"); return; }
    snprintf(cmd, sizeof cmd, "mkdir -p %s/sub %s", D, G);
    BT_CHECK(run(cmd) == 0, "%s", cmd);
    big = long_text(300000, &bl);
    big2 = gen_text(120000, 99);
    b2l = strlen(big2);
    /* the inputs, and the documents in the order bt_tokenize must read them: the directory's files
       in byte order of their paths ("sub.txt" before "sub/..."), then the glob's */
    snprintf(path, sizeof path, "%s/a_plain.txt", D); bt_test_write_file(path, big, bl);
    ids_doc(&want, big, bl);
    snprintf(path, sizeof path, "%s/b_docs.jsonl", D);
    f = fopen(path, "wb");
    for (k = 0; k < 4; k++) fprintf(f, "%s\n", jlines[k]);
    js = json_escape(big2, b2l);
    fprintf(f, "{\"text\": %s}", js);    /* the last line without its "\n" */
    fclose(f);
    for (k = 0; k < 3; k++) ids_doc(&want, jdocs[k], strlen(jdocs[k]));
    ids_doc(&want, big2, b2l);
    /* c: JSON lines, gzip'd */
    snprintf(path, sizeof path, "%s/c_docs.jsonl", D);
    f = fopen(path, "wb");
    for (k = 0; k < 3; k++) {
        char *e = json_escape(big + 1000 * k, 5000);
        fprintf(f, "{\"text\": %s, \"n\": %zu}\n", e, k);
        free(e);
        ids_doc(&want, big + 1000 * k, 5000);
    }
    fclose(f);
    snprintf(cmd, sizeof cmd, "gzip -f %s/c_docs.jsonl", D);
    BT_CHECK(run(cmd) == 0, "%s", cmd);
    /* d: a text of two gzip members (one document) */
    snprintf(path, sizeof path, "%s/d1", D); bt_test_write_file(path, big2, 70000);
    snprintf(path, sizeof path, "%s/d2", D); bt_test_write_file(path, big2 + 70000, b2l - 70000);
    snprintf(cmd, sizeof cmd, "cd %s && gzip -c d1 > d_text.txt.gz && gzip -c d2 >> d_text.txt.gz && rm d1 d2", D);
    BT_CHECK(run(cmd) == 0, "%s", cmd);
    ids_doc(&want, big2, b2l);
    snprintf(path, sizeof path, "%s/e_empty.txt", D); bt_test_write_file(path, "", 0);
    ids_doc(&want, "", 0);
    snprintf(path, sizeof path, "%s/sub.txt", D); bt_test_write_text(path, "sub.txt comes before sub/ (0x2e < 0x2f)");
    ids_doc(&want, "sub.txt comes before sub/ (0x2e < 0x2f)", 39);
    {   /* no place to cut in 3,000 bytes, then a few */
        char nos[4000];
        memset(nos, 'x', 3000);
        strcpy(nos + 3000, " tail\nEnd of it.\n");
        snprintf(path, sizeof path, "%s/sub/f_nospace.txt", D); bt_test_write_text(path, nos);
        ids_doc(&want, nos, strlen(nos));
    }
    for (k = 1; k <= 2; k++) {
        snprintf(line, sizeof line, "globbed file %zu\xe2\x80\x83with an em space\n", k);
        snprintf(path, sizeof path, "%s/%zu.txt", G, k); bt_test_write_text(path, line);
        ids_doc(&want, line, strlen(line));
    }
    snprintf(path, sizeof path, "%s/3.json", G); bt_test_write_text(path, "{\"text\": \"not matched by *.txt\"}\n");
    for (t = 0; t < 4; t++) {
        /* 1 thread, default chunks and shards; 4 threads with 16-byte chunks and small shards;
           2 threads, no validation shard; uint32 shards (llm.c's Llama 3 layout) */
        const char *opts[] = {"--threads 1", "--threads 4 --chunk-bytes 16 --shard-tokens 7919 --val-tokens 1000",
                              "--threads 2 --chunk-bytes 4096 --shard-tokens 50000 --val-tokens 0",
                              "--u32 --threads 3 --chunk-bytes 1024 --shard-tokens 7919 --val-tokens 1000"};
        size_t vcap[] = {100000000, 1000, 0, 1000}, cap[] = {100000000, 7919, 50000, 7919};
        char prefix[400];
        snprintf(prefix, sizeof prefix, "%s/out%d/shard", bt_test_dir, t);
        snprintf(cmd, sizeof cmd, "mkdir -p %s/out%d && ./bt_tokenize -q %s %s --out %s %s '%s/*.txt'", bt_test_dir, t, tool_args, opts[t], prefix, D, G);
        BT_CHECK(run(cmd) == 0, "%s", cmd);
        BT_CHECK(read_shards(prefix, &got, vcap[t], cap[t], &nsh, &sizes_ok) == 0, "%s: %s", prefix, bt_data_error());
        BT_CHECK(got.n == want.n && first_diff(&got, &want) == want.n, "%s: %zu tokens, expected %zu; first difference at %zu", opts[t], got.n, want.n, first_diff(&got, &want));
        BT_CHECK(sizes_ok, "%s: every shard but the last holds --shard-tokens", opts[t]);
        BT_CHECK(shard_width == (t == 3 ? 4 : 2), "%s: shards of width %d", opts[t], shard_width);
        if (t == 1 || t == 3) BT_CHECK(nsh == (int)(1 + (want.n - 1000 + 7918) / 7919), "%s: %d shards", opts[t], nsh);
        if (t == 2) {
            snprintf(path, sizeof path, "%s_val_000000.bin", prefix);
            BT_CHECK(!file_exists(path) && nsh == (int)((want.n + 49999) / 50000), "--val-tokens 0: no validation shard, %d train shards", nsh);
        }
    }
    free(big); free(big2); free(js); free(want.v); free(got.v);
}

/* ---- 2. kill -9 after the first shard, resume: the same shards ---- */

static pid_t spawn(const char *cmd) {
    pid_t p = fork();
    if (p == 0) { setpgid(0, 0); execl("/bin/sh", "sh", "-c", cmd, (char *)NULL); _exit(127); }
    return p;
}

/* 0 when the shards and the state file of prefixes a and b hold the same bytes */
static int same_shards(const char *a, const char *b, int *n) {
    char pa[600], pb[600];
    int k;
    *n = 0;
    for (k = 0;; k++) {
        char *x, *y;
        size_t lx = 0, ly = 0;
        int same;
        snprintf(pa, sizeof pa, "%s_%s_%06d.bin", a, k ? "train" : "val", k);
        snprintf(pb, sizeof pb, "%s_%s_%06d.bin", b, k ? "train" : "val", k);
        if (!file_exists(pa) && !file_exists(pb)) return 0;
        x = bt_test_read_file(pa, &lx); y = bt_test_read_file(pb, &ly);
        same = x && y && lx == ly && !memcmp(x, y, lx);
        free(x); free(y);
        if (!same) return -1 - k;
        ++*n;
    }
}

static void test_corpus_resume(void) {
    const char *D = bt_test_path("resume_in"), *ref = bt_test_path("resume_ref"), *cut = bt_test_path("resume_cut");
    char cmd[4096], path[600], base[2048], *text, *st;
    int k, n, sig;
    if (!file_exists("./bt_tokenize")) { BT_SKIP("./bt_tokenize is not built (make tools)"); return; }
    snprintf(cmd, sizeof cmd, "mkdir -p %s", D);
    run(cmd);
    for (k = 0; k < 6; k++) {   /* 6 files of 1 MB: plain, JSON lines, gzip'd */
        text = gen_text(1000000, 1000 + (uint64_t)k);
        if (k % 3 == 1) {
            char *e = json_escape(text, 1000000);
            snprintf(path, sizeof path, "%s/f%d.jsonl", D, k);
            FILE *f = fopen(path, "wb");
            fprintf(f, "{\"text\": %s}\n{\"text\": \"short\"}\n", e);
            fclose(f);
            free(e);
        } else {
            snprintf(path, sizeof path, "%s/f%d.txt", D, k);
            bt_test_write_file(path, text, 1000000);
        }
        free(text);
        if (k % 3 == 2) { snprintf(cmd, sizeof cmd, "gzip -f %s", path); run(cmd); }
    }
    snprintf(base, sizeof base, "./bt_tokenize -q %s --shard-tokens 20000 --val-tokens 30000 --chunk-bytes 65536 %s", tool_args, D);
    snprintf(cmd, sizeof cmd, "%s --threads 2 --out %s", base, ref);
    BT_CHECK(run(cmd) == 0, "%s", cmd);
    for (sig = 0; sig < 2; sig++) {   /* SIGKILL, then SIGTERM */
        int signo = sig ? SIGTERM : SIGKILL, status = 0, waited = 0;
        char first[600], statef[600];
        pid_t p;
        snprintf(cmd, sizeof cmd, "rm -f %s*", cut);   /* the last run's shards, state and (after kill -9) temporaries */
        run(cmd);
        snprintf(cmd, sizeof cmd, "exec %s --threads %d --out %s", base, sig ? 1 : 2, cut);
        snprintf(first, sizeof first, "%s_train_000002.bin", cut);
        snprintf(statef, sizeof statef, "%s.state", cut);
        p = spawn(cmd);
        while (!file_exists(first) && waited < 20000) { bt_test_sleep(0.0005); waited++; }
        kill(p, signo);
        waitpid(p, &status, 0);
        st = bt_test_read_file(statef, NULL);
        BT_CHECK(WIFSIGNALED(status) && WTERMSIG(status) == signo && st && strstr(st, "done 0"),
                 "signal %d: the run must be killed before its end (status %d, state %s)", signo, status, st ? st : "(none)");
        free(st);
        if (sig) {   /* SIGTERM leaves no temporary */
            snprintf(cmd, sizeof cmd, "ls %s* | grep -q '\\.tmp\\.'", cut);
            BT_CHECK(run(cmd) != 0, "a temporary left after SIGTERM");
        }
        /* resumed with another thread count: the same shards as the uninterrupted run */
        snprintf(cmd, sizeof cmd, "%s --threads %d --out %s", base, sig ? 3 : 1, cut);
        BT_CHECK(run(cmd) == 0, "resume: %s", cmd);
        BT_CHECK(same_shards(ref, cut, &n) == 0 && n > 10, "signal %d: the resumed run's shards differ from the uninterrupted run's (%d equal)", signo, n);
        st = bt_test_read_file(statef, NULL);
        BT_CHECK(st && strstr(st, "done 1"), "state after the resume: %s", st ? st : "(none)");
        free(st);
    }
    /* a finished run run again: nothing to do, nothing changed */
    snprintf(cmd, sizeof cmd, "./bt_tokenize %s --shard-tokens 20000 --val-tokens 30000 %s --out %s 2>%s", tool_args, D, cut, bt_test_path("again.err"));
    BT_CHECK(run(cmd) == 0 && bt_test_file_has(bt_test_path("again.err"), "complete") && same_shards(ref, cut, &n) == 0,
             "a finished run run again says so and changes nothing");
    /* interrupted, then an input changes: refused, naming the input; --restart starts over */
    {
        pid_t p;
        int status, waited = 0;
        char first[600];
        snprintf(first, sizeof first, "%s_train_000002.bin", cut);
        snprintf(cmd, sizeof cmd, "rm -f %s*", cut);
        run(cmd);
        snprintf(cmd, sizeof cmd, "exec %s --threads 1 --out %s", base, cut);
        p = spawn(cmd);
        while (!file_exists(first) && waited < 20000) { bt_test_sleep(0.0005); waited++; }
        kill(p, SIGKILL);
        waitpid(p, &status, 0);
        snprintf(path, sizeof path, "%s/f3.txt", D);
        {
            FILE *f = fopen(path, "ab");
            fputs("one more line\n", f);
            fclose(f);
        }
        snprintf(cmd, sizeof cmd, "%s --threads 2 --out %s 2>%s", base, cut, bt_test_path("changed.err"));
        k = run(cmd);
        text = bt_test_read_file(bt_test_path("changed.err"), NULL);
        BT_CHECK(k == 1 && text && strstr(text, "f3.txt") && strstr(text, "--restart"), "a changed input must be refused on resume: exit %d: %s", k, text ? text : "");
        free(text);
        snprintf(cmd, sizeof cmd, "%s --threads 2 --out %s --restart", base, cut);
        BT_CHECK(run(cmd) == 0, "--restart after a change: %s", cmd);
        snprintf(cmd, sizeof cmd, "%s --threads 1 --out %s --restart", base, ref);
        BT_CHECK(run(cmd) == 0 && same_shards(ref, cut, &n) == 0, "--restart gives the shards of a fresh run");
    }
    /* PREFIX.state records the layout: a rerun with the other one is refused, either way */
    {
        int u;
        for (u = 0; u < 2; u++) {
            snprintf(cmd, sizeof cmd, "%s --threads 2 %s --out %s --restart", base, u ? "--u32" : "", cut);
            BT_CHECK(run(cmd) == 0, "%s", cmd);
            snprintf(cmd, sizeof cmd, "%s --threads 2 %s --out %s 2>%s", base, u ? "" : "--u32", cut, bt_test_path("layout.err"));
            k = run(cmd);
            text = bt_test_read_file(bt_test_path("layout.err"), NULL);
            BT_CHECK(k == 1 && text && strstr(text, "shard_layout uint32") && strstr(text, "--restart"),
                     "a %s run resumed %s must be refused: exit %d: %s", u ? "uint32" : "uint16", u ? "without --u32" : "with --u32", k, text ? text : "");
            free(text);
        }
    }
}

/* ---- 3. memory stays flat: 10x the text through a pipe ---- */

/* peak RSS (KiB) of bt_tokenize reading mb MB of generated text from a pipe */
static long rss_of_run(size_t mb, double *secs) {
    char cmd[2048], *text = gen_text(1 << 20, 5);
    int fds[2], status = 0;
    struct rusage ru;
    pid_t p;
    double t0 = bt_test_now_ms();
    size_t i;
    if (pipe(fds) != 0) return -1;
    snprintf(cmd, sizeof cmd, "exec ./bt_tokenize -q %s --threads 2 --restart --out %s /dev/stdin", tool_args, bt_test_path("mem_shard"));
    p = fork();
    if (p == 0) { dup2(fds[0], 0); close(fds[0]); close(fds[1]); execl("/bin/sh", "sh", "-c", cmd, (char *)NULL); _exit(127); }
    close(fds[0]);
    signal(SIGPIPE, SIG_IGN);
    for (i = 0; i < mb; i++) {
        text[i % 1000] = (char)('a' + i % 26);   /* each MB a little different */
        if (write(fds[1], text, 1 << 20) != 1 << 20) break;
    }
    close(fds[1]);
    free(text);
    if (wait4(p, &status, 0, &ru) != p || !WIFEXITED(status) || WEXITSTATUS(status) != 0) return -1;
    *secs = (bt_test_now_ms() - t0) / 1e3;
    return ru.ru_maxrss;
}

static void test_corpus_memory_flat(void) {
    size_t small = bt_test_quick() ? 4 : 10, big = 10 * small;
    double ts = 0, tb = 0;
    long rs, rb;
    if (!file_exists("./bt_tokenize")) { BT_SKIP("./bt_tokenize is not built (make tools)"); return; }
    rs = rss_of_run(small, &ts);
    rb = rss_of_run(big, &tb);
    fprintf(stderr, "  peak RSS: %zu MB of text %ld KiB (%.1f s), %zu MB %ld KiB (%.1f s)\n", small, rs, ts, big, rb, tb);
    BT_CHECK(rs > 0 && rb > 0, "the runs failed");
    BT_CHECK(rb - rs < 6 * 1024, "peak RSS grew by %ld KiB from %zu MB to %zu MB of text", rb - rs, small, big);
}

/* ---- 4. bad inputs: exit 1 naming the file (and line); usage errors exit 2 ---- */
static void test_corpus_errors(void) {
    const char *err = bt_test_path("err.txt"), *out = bt_test_path("err_out/x");
    char cmd[4096], path[600], *msg;
    size_t k;
    struct { const char *name, *content, *expect; } cases[] = {
        {"missing.txt", NULL, "missing.txt: cannot read the input"},
        {"bad.gz", "this is not gzip data", "bad.gz: bad gzip data"},
        {"cut.jsonl.gz", "", "cut.jsonl.gz: truncated gzip data"},
        {"nofield.jsonl", "{\"text\": \"fine\"}\n\n{\"body\": \"no text\"}\n", "nofield.jsonl:3: no member \"text\""},
        {"notstr.json", "{\"text\": 12}\n", "notstr.json:1: the member is not a string"},
        {"notjson.jsonl", "{\"text\": \"a\"}\nplain text\n", "notjson.jsonl:2: not a JSON value"},
        {"array.jsonl", "[\"text\"]\n", "array.jsonl:1: not a JSON object"},
    };
    if (!file_exists("./bt_tokenize")) { BT_SKIP("./bt_tokenize is not built (make tools)"); return; }
    snprintf(cmd, sizeof cmd, "mkdir -p %s/err_out", bt_test_dir);
    run(cmd);
    for (k = 0; k < sizeof cases / sizeof cases[0]; k++) {
        int rc;
        snprintf(path, sizeof path, "%s/%s", bt_test_dir, cases[k].name);
        if (cases[k].content && cases[k].content[0]) bt_test_write_text(path, cases[k].content);
        else if (cases[k].content) {   /* a gzip file cut short */
            snprintf(cmd, sizeof cmd, "printf '{\"text\": \"%%s\"}\\n' $(seq 1 2000) | gzip -c | head -c 300 > %s", path);
            run(cmd);
        }
        snprintf(cmd, sizeof cmd, "./bt_tokenize -q %s --out %s %s 2>%s", tool_args, out, path, err);
        rc = run(cmd);
        msg = bt_test_read_file(err, NULL);
        BT_CHECK(rc == 1 && msg && strstr(msg, cases[k].expect), "%s: exit %d, message: %s", cases[k].name, rc, msg ? msg : "");
        free(msg);
    }
    /* usage errors: exit 2, the reason and where to look */
    {
        const char *bad[][2] = {{"--threads 0 --out X a", "--threads"}, {"--shard-tokens 2147483648 --out X a", "--shard-tokens"},
                                {"--out X", "at least one INPUT"}, {"--threads 2 a b", "need --out"}, {"--eot --out X a", "--eot"}};
        for (k = 0; k < sizeof bad / sizeof bad[0]; k++) {
            int rc;
            snprintf(cmd, sizeof cmd, "./bt_tokenize %s 2>%s", bad[k][0], err);
            rc = run(cmd);
            msg = bt_test_read_file(err, NULL);
            BT_CHECK(rc == 2 && msg && strstr(msg, bad[k][1]) && strstr(msg, "(see bt_tokenize -h)"), "'%s': exit %d: %s", bad[k][0], rc, msg ? msg : "");
            free(msg);
        }
    }
}

int main(void) {
    const char *dirs[2][2] = {{"../shared/data/gpt2-tokenizer/encoder.json", "../shared/data/gpt2-tokenizer/vocab.bpe"},
                              {"data/encoder.json", "data/vocab.bpe"}};
    int d;
    if (bt_test_dir_make("test_bt_tokenize")) return 1;
    for (d = 0; d < 2 && !enc_path; d++)
        if (file_exists(dirs[d][0]) && file_exists(dirs[d][1])) { enc_path = dirs[d][0]; voc_path = dirs[d][1]; }
    if (enc_path) tok = bt_tokenizer_load(enc_path, voc_path);
    if (!tok) {
        fprintf(stderr, "tokenizer files not found or not loadable: %s\n", enc_path ? bt_data_error() : "(none)");
        return 1;
    }
    snprintf(tool_args, sizeof tool_args, "--encoder %s --vocab %s", enc_path, voc_path);
    BT_RUN(test_corpus_matches_sequential);
    BT_RUN(test_corpus_resume);
    BT_RUN(test_corpus_memory_flat);
    BT_RUN(test_corpus_errors);
    bt_tokenizer_free(tok);
    bt_test_dir_remove();
    return bt_test_summary("test_bt_tokenize");
}
