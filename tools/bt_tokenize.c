/* bt_tokenize - text to GPT-2 token shards and back (bt_data.h's tokenizer and shard writer).

     bt_tokenize [options] IN.txt OUT.bin     encode IN (as one document) into the shard OUT
     bt_tokenize [options] --decode IN.bin    print the text of a shard on stdout

   Options
     --eot           split IN into documents at blank lines and put <|endoftext|> (50256) before
                     each one, the way llm.c's data scripts do: "<|endoftext|>" + text, with
                     "\n\n" replaced by "\n\n<|endoftext|>" (non-overlapping, left to right)
     --skip N        leave out the first N tokens (after --eot)
     --limit N       write at most N tokens (so --limit 32768 and --skip 32768 split off a
                     validation shard of the first 32,768 tokens, as llm.c does)
     --encoder PATH  encoder.json (default: data/encoder.json, else
                     ../shared/data/gpt2-tokenizer/encoder.json)
     --vocab PATH    vocab.bpe (the same defaults)
     --tokenizer F   a Hugging Face tokenizer.json instead of the two (bt_tokenizer_load_hf); its
                     vocabulary must fit a shard's uint16 ids, and --eot needs its <|endoftext|> at 50256
     -q              no summary line on stderr
   OUT is checked before any work (its directory must exist; a directory, device or FIFO is
   refused, and so is IN itself) and written atomically: a symlink is written through, and a
   failure or Ctrl-C leaves any previous OUT as it was. IN may be a pipe (bt_tokenize /dev/stdin
   OUT.bin); a shard to --decode must be a regular file.
   Exit status 0 on success, 1 on an error (printed on stderr), 2 on a usage error (its reason
   and "(see bt_tokenize -h)": an unknown option, a missing value, a count that is not decimal
   digits or is past its bound: 2^63 - 1 for --skip, 2^31 - 1 for --limit, a shard's int32 count).
   Built with -DBT_TOKENIZE_NO_MAIN it is only encode_documents(), for the fuzzer. */
#define _POSIX_C_SOURCE 200809L
#define BT_DATA_IMPLEMENTATION
#include "bt_data.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include <sys/stat.h>

/* text[0..len) as documents, the way llm.c's data scripts do: "<|endoftext|>" + text, with
   "\n\n" replaced by "\n\n<|endoftext|>" (non-overlapping, left to right; a text that ends in
   "\n\n" gets a last, empty document). Appends to *ids (n tokens, capacity *cap) as
   bt_encode_append does; the new count, or (size_t)-1 on an error (bt_data_error()). */
static size_t encode_documents(bt_tokenizer *tok, const char *text, size_t len, int32_t **ids, size_t n, size_t *cap) {
    size_t start = 0, p = 0;
    for (;;) {
        while (p + 1 < len && !(text[p] == '\n' && text[p + 1] == '\n')) p++;
        size_t end = p + 1 < len ? p + 2 : len;
        if (n + 1 > *cap) {
            size_t c2 = *cap ? 2 * *cap : 1024;
            int32_t *ids2 = (int32_t *)malloc(c2 * sizeof(int32_t));
            if (!ids2) return (size_t)-1;
            if (n) memcpy(ids2, *ids, n * sizeof(int32_t));
            free(*ids); *ids = ids2; *cap = c2;
        }
        (*ids)[n++] = BT_EOT;
        n = bt_encode_append(tok, text + start, end - start, ids, n, cap);
        if (n == (size_t)-1 || !(p + 1 < len)) return n;
        start = p = end;
    }
}

#ifndef BT_TOKENIZE_NO_MAIN

static void usage(FILE *f) {
    fprintf(f,
            "usage: bt_tokenize [--eot] [--skip N] [--limit N] [--encoder PATH] [--vocab PATH] [--tokenizer F.json] [-q] IN.txt OUT.bin\n"
            "       bt_tokenize [--encoder PATH] [--vocab PATH] [--tokenizer F.json] --decode IN.bin\n"
            "  --eot       <|endoftext|> before each document; documents end at blank lines (\"\\n\\n\")\n"
            "  --skip N    drop the first N tokens;  --limit N  keep at most N tokens\n");
}

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* a usage error: its reason and where to look, on stderr; returns the exit code, 2 */
static int usage_error(const char *fmt, ...) {
    va_list ap;
    fprintf(stderr, "bt_tokenize: ");
    va_start(ap, fmt);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    fprintf(stderr, " (see bt_tokenize -h)\n");
    return 2;
}

/* a count of tokens: decimal digits only, 0..hi (strtoull with its errno and end checked: a
   value past 2^64 is ERANGE, never a wrapped or saturated count); 0, or -1 after the message */
static int parse_count(const char *flag, const char *s, unsigned long long hi, size_t *out) {
    char *end;
    unsigned long long v;
    errno = 0;
    v = strtoull(s, &end, 10);
    if (!(s[0] >= '0' && s[0] <= '9') || errno || *end || v > hi) {
        usage_error("bad value '%s' for %s: a count of tokens from 0 to %llu", s, flag, hi);
        return -1;
    }
    *out = (size_t)v;
    return 0;
}

static const char *pick(const char *given, const char *a, const char *b) {
    if (given) return given;
    return access(a, R_OK) == 0 ? a : b;
}

/* OUT checked before any work: writable, and not IN itself (through links or another name) */
static int check_output(const char *in, const char *out) {
    struct stat si, so;
    if (bt_output_check(out) != 0) { fprintf(stderr, "bt_tokenize: %s\n", bt_data_error()); return -1; }
    if (stat(in, &si) == 0 && stat(out, &so) == 0 && si.st_dev == so.st_dev && si.st_ino == so.st_ino) {
        fprintf(stderr, "bt_tokenize: %s is the input file %s: refusing to overwrite the text with its tokens\n", out, in);
        return -1;
    }
    return 0;
}

/* the value of option argv[*i], or NULL (a usage error printed) when it is missing, empty or
   another option ("-5" is a value, a bad one for a count) */
static const char *option_value(int argc, char **argv, int *i) {
    const char *v = *i + 1 < argc ? argv[*i + 1] : NULL;
    if (!v || !*v) { usage_error("%s needs a value%s", argv[*i], v ? ", got an empty one" : ""); return NULL; }
    if (v[0] == '-' && v[1] && !(v[1] >= '0' && v[1] <= '9')) { usage_error("%s needs a value, but the next argument is the option '%s'", argv[*i], v); return NULL; }
    ++*i;
    return v;
}

int main(int argc, char **argv) {
    const char *enc = NULL, *voc = NULL, *in = NULL, *out = NULL, *dec = NULL, *hf = NULL;
    int eot = 0, quiet = 0, given_count = 0, i, rc = 1;
    size_t skip = 0, limit = (size_t)-1, len = 0, n = 0, cap = 0, k;
    bt_tokenizer *tok;
    char *text = NULL;
    int32_t *ids = NULL;
    uint16_t *u16 = NULL;
    double t0, t1;
    FILE *f;
    if (argc == 1) { usage(stderr); return 2; }
    for (i = 1; i < argc; i++) {
        const char *a = argv[i], *v;
        if (!strcmp(a, "--eot")) eot = 1;
        else if (!strcmp(a, "-q")) quiet = 1;
        /* --limit: a shard's header counts its tokens in an int32 */
        else if (!strcmp(a, "--skip") || !strcmp(a, "--limit")) {
            int is_skip = !strcmp(a, "--skip");
            if (!(v = option_value(argc, argv, &i)) || parse_count(a, v, is_skip ? 9223372036854775807ull : 2147483647ull, is_skip ? &skip : &limit)) return 2;
            given_count = 1;
        }
        else if (!strcmp(a, "--encoder")) { if (!(enc = option_value(argc, argv, &i))) return 2; }
        else if (!strcmp(a, "--vocab")) { if (!(voc = option_value(argc, argv, &i))) return 2; }
        else if (!strcmp(a, "--tokenizer")) { if (!(hf = option_value(argc, argv, &i))) return 2; }
        else if (!strcmp(a, "--decode")) { if (!(dec = option_value(argc, argv, &i))) return 2; }
        else if (!strcmp(a, "-h") || !strcmp(a, "--help")) { usage(stdout); return 0; }
        else if (a[0] == '-' && a[1]) return usage_error("unknown option '%s'", a);
        else if (!in) in = a;
        else if (!out) out = a;
        else return usage_error("unexpected argument '%s' (after IN.txt %s and OUT.bin %s)", a, in, out);
    }
    if (dec && (in || eot || given_count)) return usage_error("--decode takes no IN.txt, --eot, --skip or --limit");
    if (hf && (enc || voc)) return usage_error("--tokenizer replaces --encoder and --vocab: give one or the other");
    if (!dec && !out) return usage_error("%s", in ? "no OUT.bin after IN.txt" : "no IN.txt and OUT.bin");
    if (!dec && check_output(in, out)) return 1;
    bt_atomic_install_signal_cleanup();   /* Ctrl-C while writing OUT leaves no temporary */
    enc = pick(enc, "data/encoder.json", "../shared/data/gpt2-tokenizer/encoder.json");
    voc = pick(voc, "data/vocab.bpe", "../shared/data/gpt2-tokenizer/vocab.bpe");
    tok = hf ? bt_tokenizer_load_hf(hf) : bt_tokenizer_load(enc, voc);
    if (!tok) { fprintf(stderr, "bt_tokenize: %s\n", bt_data_error()); return 1; }
    if (hf && !dec && (bt_tokenizer_vocab_size(tok) > 65536 || (eot && bt_tokenizer_token_id(tok, "<|endoftext|>") != BT_EOT))) {
        fprintf(stderr, "bt_tokenize: %s: %d tokens%s\n", hf, bt_tokenizer_vocab_size(tok), bt_tokenizer_vocab_size(tok) > 65536 ?
                ": a shard stores uint16 ids, at most 65536 tokens" : ", and --eot needs <|endoftext|> at id 50256");
        bt_tokenizer_free(tok); return 1;
    }

    if (dec) {
        bt_shard s;
        int rc = 0;
        if (bt_shard_open(&s, dec) != 0) { fprintf(stderr, "bt_tokenize: %s\n", bt_data_error()); bt_tokenizer_free(tok); return 1; }
        for (k = 0; k < s.n && !rc; k++) {
            size_t l;
            const char *b = bt_decode_token(tok, s.tokens[k], &l);
            if (!b) { fprintf(stderr, "bt_tokenize: %s: token %zu: %s\n", dec, k, bt_data_error()); rc = 1; }
            else if (fwrite(b, 1, l, stdout) != l) { fprintf(stderr, "bt_tokenize: write error on stdout\n"); rc = 1; }
        }
        if (fflush(stdout) != 0) rc = 1;
        bt_shard_close(&s);
        bt_tokenizer_free(tok);
        return rc;
    }

    /* every exit below goes through done: (frees all) */
    if (!(f = fopen(in, "rb"))) { perror(in); goto done; }
    {
        size_t got, tcap = 1 << 20;
        text = (char *)malloc(tcap);
        while (text && (got = fread(text + len, 1, tcap - len, f)) > 0) {
            len += got;
            if (len == tcap) { char *t2 = (char *)realloc(text, tcap *= 2); if (!t2) { free(text); text = NULL; } else text = t2; }
        }
        if (!text || ferror(f)) { fprintf(stderr, "bt_tokenize: %s: read error or out of memory\n", in); fclose(f); goto done; }
        fclose(f);
    }

    t0 = now_s();
    n = eot ? encode_documents(tok, text, len, &ids, 0, &cap) : bt_encode_append(tok, text, len, &ids, 0, &cap);
    t1 = now_s();
    if (n == (size_t)-1) { fprintf(stderr, "bt_tokenize: %s: %s\n", in, bt_data_error()); goto done; }

    if (skip > n) skip = n;
    if (limit > n - skip) limit = n - skip;
    if (!(u16 = (uint16_t *)malloc((limit ? limit : 1) * sizeof(uint16_t)))) { fprintf(stderr, "bt_tokenize: out of memory\n"); goto done; }
    for (k = 0; k < limit; k++) {   /* a shard holds uint16: a larger vocabulary cannot be stored */
        if (ids[skip + k] < 0 || ids[skip + k] > 65535) { fprintf(stderr, "bt_tokenize: token %ld does not fit uint16\n", (long)ids[skip + k]); goto done; }
        u16[k] = (uint16_t)ids[skip + k];
    }
    if (bt_shard_write(out, u16, limit) != 0) { fprintf(stderr, "bt_tokenize: %s\n", bt_data_error()); goto done; }
    if (!quiet)
        fprintf(stderr, "bt_tokenize: %s: %zu bytes -> %zu tokens%s in %.3f s (%.1f MB/s); wrote %zu tokens [%zu, %zu) to %s\n",
                in, len, n, eot ? " (with <|endoftext|>)" : "", t1 - t0, t1 > t0 ? (double)len / (t1 - t0) / 1e6 : 0.0,
                limit, skip, skip + limit, out);
    rc = 0;
done:
    free(u16); free(text); free(ids);
    bt_tokenizer_free(tok);
    return rc;
}
#endif
