/* bt_tokenize - text to token shards and back (bt_data.h's tokenizer and shard writer).

     bt_tokenize [options] IN.txt OUT.bin     encode IN (as one document) into the shard OUT
     bt_tokenize [options] --decode IN.bin    print the text of a shard on stdout
     bt_tokenize [options] --out PREFIX INPUT...
                                              corpus mode: every INPUT's documents into
                                              PREFIX_val_000000.bin, PREFIX_train_000001.bin, ...

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
     --tokenizer F   a Hugging Face tokenizer.json instead of the two (bt_tokenizer_load_hf);
                     --eot and corpus mode put its <|endoftext|> before each document, or
                     Llama 3's <|end_of_text|> when it has no <|endoftext|> (neither: an error)
     --u32           write llm.c's uint32 layout (magic 20240801, version 7) even when the ids fit
                     uint16; a tokenizer of more than 65,536 tokens (Llama 3's 128,256) always
                     writes it, others the uint16 layout (magic 20240520, version 1). --decode
                     reads either.
     -q              no summary line on stderr
   OUT is checked before any work (its directory must exist; a directory, device or FIFO is
   refused, and so is IN itself) and written atomically: a symlink is written through, and a
   failure or Ctrl-C leaves any previous OUT as it was. IN may be a pipe (bt_tokenize /dev/stdin
   OUT.bin); a shard to --decode must be a regular file.
   Exit status 0 on success, 1 on an error (printed on stderr), 2 on a usage error (its reason
   and "(see bt_tokenize -h)": an unknown option, a missing value, a count that is not decimal
   digits or is past its bound: 2^63 - 1 for --skip, 2^31 - 1 for --limit, a shard's int32 count).

   Corpus mode (--out PREFIX INPUT...)
     INPUT       a file; a directory (its regular files, recursively, in byte order of their
                 paths; this run's own outputs are left out); or a glob(3) pattern (quoted, its
                 matches in byte order). A pipe (/dev/stdin) is read as a text file.
                 *.jsonl, *.json: JSON lines, one document per line, its text the string member
                 --field (a blank line is skipped; any other line that is not an object with that
                 string member is an error naming file:line); any other name: one document per
                 file. *.gz on either: gzip (streamed through zlib; several members are one text).
                 Each document is preceded by <|endoftext|> (50256; with --tokenizer, its
                 <|endoftext|> or <|end_of_text|>), as llm.c's FineWeb script does.
     --field NAME        the JSON member that holds the text (default "text")
     --shard-tokens N    tokens per train shard (default 100,000,000; at most 2^31 - 1); the last
                         one holds the remainder
     --val-tokens M      the first M tokens go to PREFIX_val_000000.bin (default N; 0: no
                         validation shard); then PREFIX_train_000001.bin, ... (llm.c's names)
     --threads T         encoding threads, each with its own tokenizer (default: the online cores)
     --chunk-bytes B     the text is encoded in chunks of about B bytes (default 262,144; at least
                         16), cut only where bt_encode_cut proves the ids unchanged: the shards are
                         the same for every B and T, byte for byte
     --restart           start over, ignoring PREFIX.state
     -q                  no progress line and no summary
   Memory: 2T + 2 chunks and their ids (5 bytes per byte of text), plus one JSON line at a time;
   never a whole file. A text with no place to cut for longer than B bytes is read further at once
   (said on stderr): memory follows the longest such stretch.
   Resume: after each shard PREFIX.state is replaced atomically: the options that shape the shards
   (a uint32 run says "shard_layout uint32"; a resume with the other layout is refused), the
   tokenizer files' sizes, each input's path, size and modification time, and where the next
   shard starts (the input, the byte offset of a chunk's start in its text, and how many of that
   chunk's tokens earlier shards hold). After an interruption (Ctrl-C, kill -9, a full disk) the
   same command keeps the finished shards and goes on from there; the shards equal those of an
   uninterrupted run. A rerun whose inputs or options differ is refused (exit 1, naming the
   differing line) unless --restart; a finished run rerun says so and does nothing. A pipe input
   cannot be checked or read again: such a run never resumes (--restart). Shards are written
   through atomic files: a shard exists whole or not at all.
   Progress on stderr: MB/s of text, tokens, shards, percent of the input bytes (compressed bytes
   for .gz; not for a pipe) and ETA; every second with \r on a terminal, else a line every 10 s.
   Built with -DBT_TOKENIZE_NO_MAIN it is only encode_documents(), for the fuzzer. */
#define _XOPEN_SOURCE 700   /* POSIX.1-2008, and realpath */
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
   "\n\n" gets a last, empty document); sep is the end-of-text token's id (50256 for GPT-2). Appends
   to *ids (n tokens, capacity *cap) as bt_encode_append does; the new count, or (size_t)-1 on an
   error (bt_data_error()). */
static size_t encode_documents(bt_tokenizer *tok, int32_t sep, const char *text, size_t len, int32_t **ids, size_t n, size_t *cap) {
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
        (*ids)[n++] = sep;
        n = bt_encode_append(tok, text + start, end - start, ids, n, cap);
        if (n == (size_t)-1 || !(p + 1 < len)) return n;
        start = p = end;
    }
}

#ifndef BT_TOKENIZE_NO_MAIN

/* The token that separates documents: GPT-2's <|endoftext|> (50256) with encoder.json and vocab.bpe;
   with a tokenizer.json its <|endoftext|>, else Llama 3's <|end_of_text|>; -1 when it has neither */
static int32_t document_separator(bt_tokenizer *tok, const char *hf) {
    int32_t id;
    if (!hf) return BT_EOT;
    if ((id = bt_tokenizer_token_id(tok, "<|endoftext|>")) >= 0) return id;
    return bt_tokenizer_token_id(tok, "<|end_of_text|>");
}

static void usage(FILE *f) {
    fprintf(f,
            "usage: bt_tokenize [--eot] [--skip N] [--limit N] [--encoder PATH] [--vocab PATH] [--tokenizer F.json] [--u32] [-q] IN.txt OUT.bin\n"
            "       bt_tokenize [--encoder PATH] [--vocab PATH] [--tokenizer F.json] --decode IN.bin\n"
            "  --eot       <|endoftext|> before each document; documents end at blank lines (\"\\n\\n\")\n"
            "  --skip N    drop the first N tokens;  --limit N  keep at most N tokens\n"
            "  --u32       uint32 shards (llm.c's Llama 3 layout), as a tokenizer of more than 65536 tokens writes them\n"
            "       bt_tokenize [--field NAME] [--shard-tokens N] [--val-tokens M] [--threads T] [--chunk-bytes B]\n"
            "                   [--restart] [--encoder PATH] [--vocab PATH] [--tokenizer F.json] [--u32] [-q] --out PREFIX INPUT...\n"
            "  corpus mode: INPUT = files, directories, glob patterns; *.jsonl/*.json = JSON lines (--field, default text),\n"
            "  else one document per file; .gz inflated. <|endoftext|> before each document. Writes PREFIX_val_000000.bin\n"
            "  (the first M tokens, default N), PREFIX_train_000001.bin, ... of N tokens (default 100000000), and\n"
            "  PREFIX.state: the same command resumes an interrupted run (--restart starts over)\n");
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

/* ================================================================================================
   Corpus mode: many inputs -> validation and training shards, streamed, parallel, resumable
   ------------------------------------------------------------------------------------------------
   The main thread reads: it expands the inputs, inflates .gz, splits JSON lines, and cuts each
   document into chunks of at most --chunk-bytes at bt_encode_cut's places (so each chunk encodes
   alone to the ids it has inside the document). Chunks go into a ring of slots; --threads
   workers, each with its own tokenizer, encode any slot that is ready; the main thread takes the
   slots back in order and streams their ids into the shards. Memory: the ring (2 T + 2 slots of a
   chunk and its ids, 5 bytes per byte of text) and one JSON line at a time, never a whole file.
   A position in the input stream (corpus_pos) is where a chunk starts; PREFIX.state records, after
   each shard, the position of the chunk holding the next shard's first token and how many of
   that chunk's tokens are in earlier shards: a rerun starts there.
   ================================================================================================ */
#include <dirent.h>
#include <fcntl.h>
#include <glob.h>
#include <pthread.h>
#include <zlib.h>

typedef struct {
    char *path;
    int gz, jsonl, stream;     /* .gz; .jsonl/.json (after .gz is dropped); not a regular file (a pipe) */
    uint64_t size;             /* bytes on disk (compressed for .gz); 0 for a stream */
    int64_t mtime_ns;
} corpus_input;

typedef struct {
    uint64_t input;            /* index into the input list */
    uint64_t line_off;         /* JSON lines: the byte offset of the document's line in the (inflated) input; 0 for text */
    uint64_t line_no;          /* JSON lines: that line's number (from 1); 0 for text */
    uint64_t text_off;         /* the byte offset inside the document's text (0: the document starts here) */
} corpus_pos;

enum { SLOT_FREE, SLOT_READY, SLOT_BUSY, SLOT_DONE, SLOT_FAILED };
typedef struct {
    char *text; size_t len, cap;
    int eot;                   /* <|endoftext|> first: a document starts here */
    corpus_pos pos;
    int32_t *ids; size_t n, ids_cap;
    int state;
    char err[512];
} corpus_slot;

typedef struct corpus {
    /* options */
    const char *prefix, *field, *enc, *voc, *hf;   /* hf: a tokenizer.json instead of enc + voc */
    size_t shard_tokens, val_tokens, chunk_bytes;
    int threads, quiet, restart;
    int width;                 /* bytes per token in the shards: 2 (uint16) or 4 (uint32: --u32 or a vocabulary past 65,536) */
    int32_t sep;               /* the token before each document (document_separator) */
    /* inputs */
    corpus_input *in; size_t n_in, cap_in;
    uint64_t total_raw;        /* bytes of all regular inputs (compressed for .gz) */
    int any_stream;
    /* the ring */
    pthread_mutex_t mu; pthread_cond_t cv_work, cv_done;
    corpus_slot *slots; size_t n_slots;
    uint64_t produced, consumed;
    int stop;
    bt_tokenizer **toks; pthread_t *tids;
    /* the reader */
    char *rbuf; size_t rcap;   /* a document's pending bytes */
    char *lbuf; size_t lcap, llen, lstart;   /* JSON lines: the line buffer */
    uint64_t raw_done;         /* bytes read of the inputs before the current one */
    uint64_t raw_cur;          /* ... of the current one */
    uint64_t text_bytes;       /* text handed to the encoder */
    int warned_grow;
    /* the shards */
    uint64_t shard;            /* the index of the shard being written (0 = val) */
    uint64_t tokens_done;      /* tokens in committed shards */
    uint64_t skip;             /* tokens still to drop after a resume */
    bt_atomic_file *out; char out_path[4200];
    size_t out_n, out_cap;     /* tokens in the open shard, and its capacity */
    union { uint16_t u16[1 << 15]; uint32_t u32[1 << 14]; } wbuf; size_t wn;   /* wn tokens of width bytes */
    struct corpus_commit {     /* the shard being committed on a thread of its own, then the state */
        struct corpus *c;
        bt_atomic_file *f;
        corpus_pos pos;
        uint64_t carry, next_shard, tokens_done;
        int done, rc;
        char err[1024];
    } cm;
    pthread_t cm_tid; int cm_busy;
    /* progress */
    double t0, last_print;
    int tty;
    uint64_t shards_written;
} corpus;

static char corpus_err[1024];
/* the run's error message (printed once, at the end); returns -1 */
static int cerr(const char *fmt, ...)
#if defined(__GNUC__) || defined(__clang__)
    __attribute__((format(printf, 1, 2)))
#endif
    ;
static int cerr(const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    bt_vmsgf(corpus_err, sizeof corpus_err, fmt, ap);
    va_end(ap);
    return -1;
}

/* ---- the inputs ---- */

static int path_cmp(const void *a, const void *b) { return strcmp(((const corpus_input *)a)->path, ((const corpus_input *)b)->path); }
static int has_suffix(const char *s, size_t n, const char *suf) { size_t k = strlen(suf); return n >= k && !memcmp(s + n - k, suf, k); }

/* is path one of this run's outputs (PREFIX_val_*, PREFIX_train_*, PREFIX.state and their temporaries)? */
static int is_output(const corpus *c, const char *path) {
    const char *pb = strrchr(c->prefix, '/'), *fb = strrchr(path, '/');
    size_t pl, k;
    char a[4096], b[4096], *ra, *rb;
    int same;
    pb = pb ? pb + 1 : c->prefix; fb = fb ? fb + 1 : path;
    pl = strlen(pb);
    if (strncmp(fb, pb, pl) || !(!strncmp(fb + pl, "_val_", 5) || !strncmp(fb + pl, "_train_", 7) || !strncmp(fb + pl, ".state", 6))) return 0;
    k = (size_t)(pb - c->prefix); snprintf(a, sizeof a, "%.*s", (int)(k ? k : 1), k ? c->prefix : ".");
    k = (size_t)(fb - path);      snprintf(b, sizeof b, "%.*s", (int)(k ? k : 1), k ? path : ".");
    ra = realpath(a, NULL); rb = realpath(b, NULL);
    same = ra && rb && !strcmp(ra, rb);
    free(ra); free(rb);
    return same;
}

static int add_input(corpus *c, const char *path, const struct stat *st) {
    corpus_input *x;
    size_t n = strlen(path);
    if (strchr(path, '\n')) return cerr("%s: a newline in a file name cannot be recorded in the state file", path);
    if (c->n_in == c->cap_in) {
        size_t cap = c->cap_in ? 2 * c->cap_in : 64;
        corpus_input *v = (corpus_input *)realloc(c->in, cap * sizeof *v);
        if (!v) return cerr("out of memory for the input list");
        c->in = v; c->cap_in = cap;
    }
    x = &c->in[c->n_in];
    memset(x, 0, sizeof *x);
    if (!(x->path = strdup(path))) return cerr("out of memory for the input list");
    x->gz = has_suffix(path, n, ".gz");
    if (x->gz) n -= 3;
    x->jsonl = has_suffix(path, n, ".jsonl") || has_suffix(path, n, ".json");
    x->stream = !S_ISREG(st->st_mode);
    x->size = x->stream ? 0 : (uint64_t)st->st_size;
    x->mtime_ns = x->stream ? 0 : (int64_t)st->st_mtim.tv_sec * 1000000000 + st->st_mtim.tv_nsec;
    c->n_in++;
    return 0;
}

/* the regular files under dir, recursively (directories that are symbolic links are not followed) */
static int walk_dir(corpus *c, const char *dir) {
    DIR *d = opendir(dir);
    struct dirent *e;
    int rc = 0;
    if (!d) return cerr("%s: cannot open the directory: %s", dir, strerror(errno));
    while (!rc && (e = readdir(d)) != NULL) {
        char *p;
        struct stat st, lst;
        if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, "..")) continue;
        if (!(p = (char *)malloc(strlen(dir) + strlen(e->d_name) + 2))) { rc = cerr("out of memory"); break; }
        sprintf(p, "%s%s%s", dir, dir[strlen(dir) - 1] == '/' ? "" : "/", e->d_name);
        if (lstat(p, &lst) != 0 || stat(p, &st) != 0) rc = cerr("%s: %s", p, strerror(errno));
        else if (S_ISDIR(lst.st_mode)) rc = walk_dir(c, p);
        else if (S_ISREG(st.st_mode) && !is_output(c, p)) rc = add_input(c, p, &st);
        free(p);
    }
    closedir(d);
    return rc;
}

/* one INPUT argument: a file (a pipe such as /dev/stdin too), a directory, or a glob pattern */
static int expand_input(corpus *c, const char *arg) {
    struct stat st;
    size_t first = c->n_in, i;
    if (stat(arg, &st) == 0) {
        if (S_ISDIR(st.st_mode)) { if (walk_dir(c, arg)) return -1; }
        else if (is_output(c, arg)) return cerr("%s is an output of this run (--out %s), not an input", arg, c->prefix);
        else if (add_input(c, arg, &st)) return -1;
    } else if (strpbrk(arg, "*?[")) {
        glob_t g;
        int r = glob(arg, 0, NULL, &g);
        if (r == GLOB_NOMATCH) return cerr("%s: no file matches the pattern", arg);
        if (r != 0) return cerr("%s: glob failed (%s)", arg, r == GLOB_NOSPACE ? "out of memory" : "a read error");
        for (i = 0; i < g.gl_pathc; i++) {
            if (stat(g.gl_pathv[i], &st) != 0) { cerr("%s: %s", g.gl_pathv[i], strerror(errno)); globfree(&g); return -1; }
            if (S_ISDIR(st.st_mode) ? walk_dir(c, g.gl_pathv[i]) : (!is_output(c, g.gl_pathv[i]) && add_input(c, g.gl_pathv[i], &st))) { globfree(&g); return -1; }
        }
        globfree(&g);
    } else return cerr("%s: cannot read the input: %s", arg, strerror(errno));
    /* an argument's files in byte order of their paths (glob's order is the locale's) */
    qsort(c->in + first, c->n_in - first, sizeof *c->in, path_cmp);
    return 0;
}

/* ---- reading an input: plain bytes or inflated gzip (any number of members) ---- */

typedef struct {
    const corpus_input *x;
    int fd, feof, zinit, zend, member_open, members;
    z_stream z;
    unsigned char in[1 << 16];
    uint64_t raw;              /* bytes read from the file */
} corpus_src;

static int src_open(corpus_src *s, const corpus_input *x) {
    memset(s, 0, sizeof *s);
    s->x = x;
    if ((s->fd = open(x->path, O_RDONLY | O_CLOEXEC)) < 0) return cerr("%s: cannot open: %s", x->path, strerror(errno));
    if (x->gz) {
        if (inflateInit2(&s->z, 15 + 16) != Z_OK) { close(s->fd); return cerr("%s: zlib's inflateInit2 failed", x->path); }
        s->zinit = 1;
    }
    return 0;
}
static void src_close(corpus_src *s) {
    if (s->zinit) inflateEnd(&s->z);
    if (s->fd >= 0) close(s->fd);
    s->fd = -1; s->zinit = 0;
}
static long raw_read(corpus_src *s, void *buf, size_t n) {
    ssize_t r;
    do r = read(s->fd, buf, n); while (r < 0 && errno == EINTR);
    if (r < 0) return cerr("%s: read error: %s", s->x->path, strerror(errno));
    s->raw += (uint64_t)r;
    return (long)r;
}
/* up to n bytes of the input's text into buf: the count, 0 at its end, -1 on an error */
static long src_read(corpus_src *s, char *buf, size_t n) {
    if (!s->x->gz) return raw_read(s, buf, n);
    if (s->zend || !n) return 0;
    s->z.next_out = (unsigned char *)buf;
    s->z.avail_out = (uInt)(n > (1u << 30) ? (1u << 30) : n);
    {
        uInt want = s->z.avail_out;
        while (s->z.avail_out == want) {
            int r;
            if (s->z.avail_in == 0 && !s->feof) {
                long got = raw_read(s, s->in, sizeof s->in);
                if (got < 0) return -1;
                if (got == 0) s->feof = 1;
                s->z.next_in = s->in; s->z.avail_in = (uInt)got;
            }
            if (s->z.avail_in == 0 && s->feof) {
                if (s->member_open) return cerr("%s: truncated gzip data (the file ends inside a member)", s->x->path);
                if (!s->members) return cerr("%s: empty file, not gzip data", s->x->path);
                s->zend = 1;
                break;
            }
            s->member_open = 1;
            r = inflate(&s->z, Z_NO_FLUSH);
            if (r == Z_STREAM_END) { s->member_open = 0; s->members++; if (inflateReset(&s->z) != Z_OK) return cerr("%s: zlib's inflateReset failed", s->x->path); }
            else if (r == Z_BUF_ERROR && s->z.avail_in == 0) continue;   /* needs more input */
            else if (r != Z_OK) return cerr("%s: bad gzip data at compressed byte %llu: %s", s->x->path,
                                          (unsigned long long)(s->raw - s->z.avail_in), s->z.msg ? s->z.msg : "zlib error");
        }
        return (long)(want - s->z.avail_out);
    }
}
/* drop the first n bytes of the text (a resume): a seek for a plain file, else read and drop */
static int src_skip(corpus_src *s, uint64_t n, char *scratch, size_t cap) {
    if (!s->x->gz && !s->x->stream) {
        if (lseek(s->fd, (off_t)n, SEEK_SET) != (off_t)n) return cerr("%s: cannot seek to byte %llu: %s", s->x->path, (unsigned long long)n, strerror(errno));
        s->raw = n;
        return 0;
    }
    while (n) {
        long got = src_read(s, scratch, n < cap ? (size_t)n : cap);
        if (got < 0) return -1;
        if (got == 0) return cerr("%s: ends before byte %llu, where the interrupted run stopped", s->x->path, (unsigned long long)n);
        n -= (uint64_t)got;
    }
    return 0;
}

/* ---- the workers ---- */

static void *worker_main(void *arg) {
    corpus *c = ((corpus **)arg)[0];
    bt_tokenizer *tok = (bt_tokenizer *)((void **)arg)[1];
    pthread_mutex_lock(&c->mu);
    for (;;) {
        corpus_slot *s = NULL;
        uint64_t q;
        for (q = c->consumed; q < c->produced && !c->stop; q++)
            if (c->slots[q % c->n_slots].state == SLOT_READY) { s = &c->slots[q % c->n_slots]; break; }
        if (!s) { if (c->stop) break; pthread_cond_wait(&c->cv_work, &c->mu); continue; }
        s->state = SLOT_BUSY;
        pthread_mutex_unlock(&c->mu);
        {
            size_t n = 0;
            int ok = 1;
            if (s->eot) {
                if (!s->ids_cap) { s->ids = (int32_t *)malloc(1024 * sizeof(int32_t)); s->ids_cap = s->ids ? 1024 : 0; }
                if (s->ids) s->ids[n++] = c->sep; else ok = 0;
            }
            if (ok) n = bt_encode_append(tok, s->text, s->len, &s->ids, n, &s->ids_cap);
            if (!ok || n == (size_t)-1) bt_msgf(s->err, sizeof s->err, "%s", ok ? bt_data_error() : "out of memory for the ids");
            s->n = n;
            pthread_mutex_lock(&c->mu);
            s->state = (!ok || n == (size_t)-1) ? SLOT_FAILED : SLOT_DONE;
        }
        pthread_cond_broadcast(&c->cv_done);
    }
    pthread_mutex_unlock(&c->mu);
    return NULL;
}

/* a small file whole (the state file), or NULL */
static char *read_small(const char *path, size_t *len) {
    FILE *f = fopen(path, "rb");
    char *buf = NULL;
    long n;
    if (!f) return NULL;
    if (fseek(f, 0, SEEK_END) == 0 && (n = ftell(f)) >= 0 && n < (1L << 30) && fseek(f, 0, SEEK_SET) == 0 && (buf = (char *)malloc((size_t)n + 1)) != NULL) {
        if (fread(buf, 1, (size_t)n, f) != (size_t)n) { free(buf); buf = NULL; }
        else { buf[n] = 0; *len = (size_t)n; }
    }
    fclose(f);
    return buf;
}

/* ---- the state file: the run's identity, then where the next shard starts ---- */

static char *state_path(const corpus *c) {
    char *p = (char *)malloc(strlen(c->prefix) + 8);
    if (p) sprintf(p, "%s.state", c->prefix);
    return p;
}

/* the lines that must be equal for a rerun to resume: the options that change the shards, the
   tokenizer files, each input with its size and modification time */
static char *state_identity(const corpus *c) {
    size_t cap = 4096, len = 0, i;
    char *s = (char *)malloc(cap);
    struct stat se, sv;
    if (!s) return NULL;
    if (stat(c->hf ? c->hf : c->enc, &se) != 0) memset(&se, 0, sizeof se);
    if (c->hf || stat(c->voc, &sv) != 0) memset(&sv, 0, sizeof sv);
    /* "shard_layout uint32" only for uint32 runs: the state files of uint16 runs stay as they were */
    len += (size_t)snprintf(s + len, cap - len, "bt_tokenize corpus state 1\nfield %s\nshard_tokens %zu\nval_tokens %zu\n%stokenizer %lld %lld\ninputs %zu\n",
                            c->field, c->shard_tokens, c->val_tokens, c->width == 4 ? "shard_layout uint32\n" : "",
                            (long long)se.st_size, (long long)sv.st_size, c->n_in);
    for (i = 0; i < c->n_in; i++) {
        size_t need = strlen(c->in[i].path) + 80;
        if (len + need >= cap) {
            char *s2;
            while (len + need >= cap) cap *= 2;
            if (!(s2 = (char *)realloc(s, cap))) { free(s); return NULL; }
            s = s2;
        }
        if (c->in[i].stream) len += (size_t)snprintf(s + len, cap - len, "input pipe %s\n", c->in[i].path);
        else len += (size_t)snprintf(s + len, cap - len, "input %llu %lld %s\n", (unsigned long long)c->in[i].size, (long long)c->in[i].mtime_ns, c->in[i].path);
    }
    return s;
}

/* PREFIX.state: the next shard's index, the tokens before it and where its first token's chunk
   starts; errors into err[n] (the committing thread has its own) */
static int state_write(const corpus *c, uint64_t shard, uint64_t tokens_done, const corpus_pos *p, uint64_t carry, int done, char *err, size_t n) {
    char *id = state_identity(c), *path = state_path(c), tail[512];
    bt_atomic_file *f = NULL;
    int rc = -1;
    if (!id || !path) { bt_msgf(err, n, "out of memory"); goto out; }
    snprintf(tail, sizeof tail, "next_shard %llu\ntokens_done %llu\npos %llu %llu %llu %llu %llu\ndone %d\n",
             (unsigned long long)shard, (unsigned long long)tokens_done, (unsigned long long)p->input, (unsigned long long)p->line_off,
             (unsigned long long)p->line_no, (unsigned long long)p->text_off, (unsigned long long)carry, done);
    if (!(f = bt_atomic_open(path)) || bt_atomic_write(f, id, strlen(id)) || bt_atomic_write(f, tail, strlen(tail))) { bt_atomic_abort(f); bt_msgf(err, n, "%s", bt_data_error()); goto out; }
    if (bt_atomic_commit(f)) { bt_msgf(err, n, "%s", bt_data_error()); goto out; }
    rc = 0;
out:
    free(id); free(path);
    return rc;
}

static void shard_name(const corpus *c, uint64_t k, char *buf, size_t n) {
    snprintf(buf, n, "%s_%s_%06llu.bin", c->prefix, k ? "train" : "val", (unsigned long long)k);
}
static size_t shard_capacity(const corpus *c, uint64_t k) { return k ? c->shard_tokens : c->val_tokens; }

/* Reads PREFIX.state when there is one: 0 and a position to start from (*fresh = 0), 0 and
   *fresh = 1 without a state file, 1 when the run had finished, -1 when it belongs to another run. */
static int state_read(corpus *c, corpus_pos *p, int *fresh) {
    char *path = state_path(c), *id = NULL, *text = NULL, *tail, line[4200];
    size_t len = 0, idl;
    unsigned long long sh, td, a, b, d, e, carry;
    int done, rc = -1;
    uint64_t k;
    *fresh = 0;
    if (!path) return cerr("out of memory");
    if (access(path, F_OK) != 0) { *fresh = 1; free(path); return 0; }
    if (!(text = read_small(path, &len))) { cerr("%s: cannot read the state file: %s", path, strerror(errno)); goto out; }
    if (!(id = state_identity(c))) { cerr("out of memory"); goto out; }
    idl = strlen(id);
    if (len < idl || memcmp(text, id, idl)) {
        size_t i = 0, ls;
        while (i < idl && i < len && text[i] == id[i]) i++;
        for (ls = i; ls > 0 && id[ls - 1] != '\n'; ls--) {}
        {
            const char *ea = strchr(id + ls, '\n'), *eb = memchr(text + ls, '\n', len > ls ? len - ls : 0);
            cerr("%s belongs to a different run: it has \"%.*s\" where this run has \"%.*s\" (changed inputs or options); "
                 "restore them to resume, or rerun with --restart to start over", path,
                 (int)(eb ? (size_t)(eb - (text + ls)) : (len > ls ? len - ls : 0)), text + ls, (int)(ea ? (size_t)(ea - (id + ls)) : 0), id + ls);
        }
        goto out;
    }
    tail = text + idl;
    if (sscanf(tail, "next_shard %llu\ntokens_done %llu\npos %llu %llu %llu %llu %llu\ndone %d", &sh, &td, &a, &b, &d, &e, &carry, &done) != 8) {
        cerr("%s: a damaged state file (rerun with --restart to start over)", path); goto out;
    }
    if (c->any_stream) { cerr("%s: an input is a pipe, whose text cannot be checked against the earlier run nor read again from where it stopped: rerun with --restart", path); goto out; }
    if (a > c->n_in) { cerr("%s: a damaged state file (input %llu of %zu)", path, a, c->n_in); goto out; }
    /* the shards it finished must be there, whole (all full but a finished run's last) */
    {
        uint64_t before = 0;
        for (k = c->val_tokens ? 0 : 1; k < sh; k++) {
            struct stat st;
            uint64_t want = done && k + 1 == sh ? td - before : shard_capacity(c, k);
            shard_name(c, k, line, sizeof line);
            if (stat(line, &st) != 0 || (uint64_t)st.st_size != BT_SHARD_HEADER_BYTES + (uint64_t)c->width * want) {
                cerr("%s: the shard %s of the interrupted run is missing or has another size: rerun with --restart", path, line); goto out;
            }
            before += want;
        }
    }
    c->shard = sh; c->tokens_done = td; c->skip = carry;
    p->input = a; p->line_off = b; p->line_no = d; p->text_off = e;
    rc = done ? 1 : 0;
out:
    free(path); free(id); free(text);
    return rc;
}

/* ---- the shards: streamed into an atomic file, the header's count written last ---- */

static int shard_flush(corpus *c) {
    if (c->wn && bt_atomic_write(c->out, &c->wbuf, c->wn * (size_t)c->width)) return cerr("%s", bt_data_error());
    c->wn = 0;
    return 0;
}
static int shard_begin(corpus *c) {
    int32_t header[BT_SHARD_HEADER_INTS] = {0};
    shard_name(c, c->shard, c->out_path, sizeof c->out_path);
    if (!(c->out = bt_atomic_open(c->out_path))) return cerr("%s", bt_data_error());
    if (bt_atomic_write(c->out, header, sizeof header)) return cerr("%s", bt_data_error());
    c->out_n = 0; c->wn = 0;
    c->out_cap = shard_capacity(c, c->shard);
    return 0;
}
/* Committing a shard (fsync, rename, fsync the directory: about 0.3 s for 200 MB here) and then
   writing PREFIX.state run on a thread of their own while the next shard fills; one at a time, so
   the state never names a shard before it is on disk. */
static void *commit_main(void *arg) {
    struct corpus_commit *m = (struct corpus_commit *)arg;
    m->rc = bt_atomic_commit(m->f);
    if (m->rc) bt_msgf(m->err, sizeof m->err, "%s", bt_data_error());
    else m->rc = state_write(m->c, m->next_shard, m->tokens_done, &m->pos, m->carry, m->done, m->err, sizeof m->err);
    return NULL;
}
static int commit_wait(corpus *c) {
    if (!c->cm_busy) return 0;
    pthread_join(c->cm_tid, NULL);
    c->cm_busy = 0;
    return c->cm.rc ? cerr("%s", c->cm.err) : 0;
}
/* the open shard closed and committed; then the state: the next shard starts carry tokens into
   the chunk at pos (done: the run is complete) */
static int shard_end(corpus *c, const corpus_pos *pos, uint64_t carry, int done) {
    int32_t header[BT_SHARD_HEADER_INTS] = {0};
    bt_atomic_file *f = c->out;
    header[0] = c->width == 4 ? BT_SHARD32_MAGIC : BT_SHARD_MAGIC;
    header[1] = c->width == 4 ? BT_SHARD32_VERSION : BT_SHARD_VERSION;
    header[2] = (int32_t)c->out_n;
    if (shard_flush(c)) return -1;
    if (pwrite(bt_atomic_fd(f), header, sizeof header, 0) != (ssize_t)sizeof header) return cerr("%s: cannot write the header: %s", c->out_path, strerror(errno));
    if (commit_wait(c)) return -1;
    c->out = NULL;
    c->cm.c = c; c->cm.f = f; c->cm.pos = *pos; c->cm.carry = carry; c->cm.done = done;
    c->cm.next_shard = c->shard + 1; c->cm.tokens_done = c->tokens_done + c->out_n;
    if (pthread_create(&c->cm_tid, NULL, commit_main, &c->cm) == 0) c->cm_busy = 1;
    else { commit_main(&c->cm); if (c->cm.rc) return cerr("%s", c->cm.err); }
    c->tokens_done += c->out_n;
    c->out_n = 0;
    c->shard++;
    c->shards_written++;
    return 0;
}

/* a finished chunk's ids into the shards, in order; PREFIX.state after each shard */
static int consume(corpus *c, const corpus_slot *s) {
    size_t i = 0, n = s->n;
    if (c->skip) { size_t d = c->skip < n ? (size_t)c->skip : n; i = d; c->skip -= d; }
    while (i < n) {
        size_t take, k;
        if (!c->out && shard_begin(c)) return -1;
        take = n - i < c->out_cap - c->out_n ? n - i : c->out_cap - c->out_n;
        for (k = 0; k < take; k++) {   /* ids are below the vocabulary: uint16 holds them unless width is 4 */
            if (c->width == 4) c->wbuf.u32[c->wn++] = (uint32_t)s->ids[i + k];
            else c->wbuf.u16[c->wn++] = (uint16_t)s->ids[i + k];
            if (c->wn == sizeof c->wbuf / (size_t)c->width && shard_flush(c)) return -1;
        }
        c->out_n += take; i += take;
        if (c->out_n == c->out_cap && shard_end(c, &s->pos, i, 0)) return -1;
    }
    return 0;
}

static void fmt_hms(char *b, size_t n, double s) {
    long t = s < 0 ? 0 : (long)(s + 0.5);
    snprintf(b, n, "%ld:%02ld:%02ld", t / 3600, t / 60 % 60, t % 60);
}
static void progress(corpus *c, int last) {
    double t = now_s(), el = t - c->t0;
    uint64_t raw = c->raw_done + c->raw_cur;
    char eta[32] = "", pct[64] = "";
    if (c->quiet || (!last && t - c->last_print < (c->tty ? 1.0 : 10.0))) return;
    c->last_print = t;
    if (c->total_raw && !c->any_stream) {
        snprintf(pct, sizeof pct, ", %.1f%% of %.1f MB", 100.0 * (double)raw / (double)c->total_raw, (double)c->total_raw / 1e6);
        if (raw && !last) { fmt_hms(eta + 6, sizeof eta - 6, el * (double)(c->total_raw - raw) / (double)raw); memcpy(eta, ", ETA ", 6); }
    }
    if (last && c->tty) fputc('\r', stderr);
    fprintf(stderr, "%sbt_tokenize: %.1f MB/s, %llu tokens, %llu shards%s%s%s", c->tty && !last ? "\r" : "",
            el > 0 ? (double)c->text_bytes / el / 1e6 : 0.0, (unsigned long long)(c->tokens_done + c->out_n),
            (unsigned long long)c->shards_written, pct, eta, c->tty && !last ? "   " : "\n");
    fflush(stderr);
}

/* take back the finished chunks in order; need_free: until a slot is free for the reader, else
   until all are taken back */
static int pump(corpus *c, int need_free) {
    int rc = 0;
    pthread_mutex_lock(&c->mu);
    for (;;) {
        if (c->consumed < c->produced) {
            corpus_slot *h = &c->slots[c->consumed % c->n_slots];
            if (h->state == SLOT_FAILED) { rc = cerr("%s (text byte %llu): %s", c->in[h->pos.input].path, (unsigned long long)h->pos.text_off, h->err); break; }
            if (h->state == SLOT_DONE) {
                pthread_mutex_unlock(&c->mu);
                rc = consume(c, h);
                pthread_mutex_lock(&c->mu);
                h->state = SLOT_FREE;
                c->consumed++;
                if (rc) break;
                continue;
            }
        }
        if (need_free ? c->produced - c->consumed < c->n_slots : c->consumed == c->produced) break;
        pthread_cond_wait(&c->cv_done, &c->mu);
    }
    pthread_mutex_unlock(&c->mu);
    progress(c, 0);
    return rc;
}

/* a chunk of text (a document's part that starts at pos) to the workers */
static int emit(corpus *c, int eot, const corpus_pos *pos, const char *text, size_t len) {
    corpus_slot *s;
    if (pump(c, 1)) return -1;
    s = &c->slots[c->produced % c->n_slots];   /* free: only this thread touches it now */
    if (len > s->cap) {
        char *t = (char *)realloc(s->text, len);
        if (!t) return cerr("out of memory for a chunk of %zu bytes", len);
        s->text = t; s->cap = len;
    }
    if (len) memcpy(s->text, text, len);
    s->len = len; s->eot = eot; s->pos = *pos; s->n = 0;
    c->text_bytes += len;
    pthread_mutex_lock(&c->mu);
    s->state = SLOT_READY;
    c->produced++;
    pthread_cond_signal(&c->cv_work);
    pthread_mutex_unlock(&c->mu);
    return 0;
}

/* ---- the readers: a text file is one document, streamed; a JSON line is one document ---- */

static int read_text(corpus *c, corpus_src *s, corpus_pos pos) {
    size_t len = 0;
    int eot = pos.text_off == 0;
    for (;;) {
        long got = src_read(s, c->rbuf + len, c->rcap - len);
        if (got < 0) return -1;
        len += (size_t)got;
        c->raw_cur = s->raw;
        if (got == 0) return (len || eot) ? emit(c, eot, &pos, c->rbuf, len) : 0;
        if (len == c->rcap) {
            size_t p = bt_encode_cut(c->rbuf, len);
            if (!p) {   /* no place to cut: the buffer grows (memory follows the longest such stretch) */
                char *b = (char *)realloc(c->rbuf, 2 * c->rcap);
                if (!b) return cerr("%s: out of memory: no place to cut the text in %zu bytes from byte %llu", s->x->path, c->rcap, (unsigned long long)pos.text_off);
                if (!c->warned_grow++ && !c->quiet)
                    fprintf(stderr, "bt_tokenize: %s: no place to cut the text in %zu bytes from byte %llu; reading more at once\n", s->x->path, c->rcap, (unsigned long long)pos.text_off);
                c->rbuf = b; c->rcap *= 2;
                continue;
            }
            if (emit(c, eot, &pos, c->rbuf, p)) return -1;
            eot = 0; pos.text_off += p;
            memmove(c->rbuf, c->rbuf + p, len - p);
            len -= p;
        }
    }
}

/* a document held in memory (a JSON string) as chunks of about --chunk-bytes */
static int emit_text(corpus *c, corpus_pos pos, const char *text, size_t len) {
    int eot = pos.text_off == 0;
    while (len > c->chunk_bytes) {
        size_t w = c->chunk_bytes, p;
        while (!(p = bt_encode_cut(text, w < len ? w : len)) && w < len) w *= 2;
        if (!p) break;
        if (emit(c, eot, &pos, text, p)) return -1;
        eot = 0; pos.text_off += p; text += p; len -= p;
    }
    return emit(c, eot, &pos, text, len);
}

#define CORPUS_MAX_LINE ((size_t)1 << 31)
/* the next line of a JSON-lines input (without its "\n"): 1, 0 at the end, -1 on an error; *off:
   its byte offset in the input's text */
static int next_line(corpus *c, corpus_src *s, uint64_t *lbase, uint64_t line_no, char **line, size_t *len, uint64_t *off) {
    size_t scan = c->lstart;
    for (;;) {
        char *nl = (char *)memchr(c->lbuf + scan, '\n', c->llen - scan);
        long got;
        if (nl) {
            *line = c->lbuf + c->lstart; *len = (size_t)(nl - *line); *off = *lbase + c->lstart;
            c->lstart = (size_t)(nl + 1 - c->lbuf);
            return 1;
        }
        if (c->lstart) {
            memmove(c->lbuf, c->lbuf + c->lstart, c->llen - c->lstart);
            *lbase += c->lstart; c->llen -= c->lstart; c->lstart = 0;
        }
        scan = c->llen;
        if (c->llen == c->lcap) {
            char *b;
            if (c->lcap >= CORPUS_MAX_LINE) return cerr("%s:%llu: a line longer than %zu bytes", s->x->path, (unsigned long long)line_no, CORPUS_MAX_LINE);
            if (!(b = (char *)realloc(c->lbuf, 2 * c->lcap))) return cerr("%s:%llu: out of memory for a line of %zu bytes", s->x->path, (unsigned long long)line_no, c->lcap);
            c->lbuf = b; c->lcap *= 2;
        }
        if ((got = src_read(s, c->lbuf + c->llen, c->lcap - c->llen)) < 0) return -1;
        c->raw_cur = s->raw;
        if (got == 0) {
            if (!c->llen) return 0;
            *line = c->lbuf; *len = c->llen; *off = *lbase;
            c->lstart = c->llen;
            return 1;
        }
        c->llen += (size_t)got;
    }
}

static int read_jsonl(corpus *c, corpus_src *s, corpus_pos pos) {
    uint64_t lbase = pos.line_off, line_no = pos.line_no ? pos.line_no - 1 : 0, text_off = pos.text_off, off = 0;
    char *line = NULL;
    size_t len = 0, k;
    int r;
    c->llen = c->lstart = 0;
    while ((r = next_line(c, s, &lbase, line_no + 1, &line, &len, &off)) == 1) {
        bt_json_doc *d;
        const bt_json *root, *v;
        corpus_pos p;
        line_no++;
        for (k = 0; k < len && (line[k] == ' ' || line[k] == '\t' || line[k] == '\r'); k++) {}
        if (k == len) { text_off = 0; continue; }   /* a blank line */
        if (!(d = bt_json_parse(line, len, 0))) return cerr("%s:%llu: not a JSON value: %s", s->x->path, (unsigned long long)line_no, bt_data_error());
        root = bt_json_root(d);
        v = root->type == BT_JSON_OBJECT ? bt_json_get(root, c->field) : NULL;
        if (!v || v->type != BT_JSON_STRING) {
            cerr("%s:%llu: %s", s->x->path, (unsigned long long)line_no, root->type != BT_JSON_OBJECT ? "not a JSON object" : !v ? "no member" : "the member is not a string");
            bt_msgf(corpus_err + strlen(corpus_err), sizeof corpus_err - strlen(corpus_err), " \"%s\" (--field)", c->field);
            bt_json_free(d);
            return -1;
        }
        if (text_off > v->len) { bt_json_free(d); return cerr("%s:%llu: the document is shorter than where the interrupted run stopped", s->x->path, (unsigned long long)line_no); }
        p.input = pos.input; p.line_off = off; p.line_no = line_no; p.text_off = text_off;
        r = emit_text(c, p, v->str + text_off, v->len - text_off);
        bt_json_free(d);
        if (r) return -1;
        text_off = 0;
    }
    return r;
}

/* ---- the run ---- */

static int corpus_run(corpus *c, char **inputs, int n_inputs) {
    corpus_pos pos = {0, 0, 0, 0};
    char check[4200], *sp = NULL;
    void **args = NULL;
    size_t i;
    int fresh, r, rc = 1, started = 0;
    c->tty = isatty(2);
    for (i = 0; i < (size_t)n_inputs; i++) if (expand_input(c, inputs[i])) goto fail;
    if (!c->n_in) { cerr("no input files (the directories are empty)"); goto fail; }
    for (i = 0; i < c->n_in; i++) { c->total_raw += c->in[i].size; c->any_stream |= c->in[i].stream; }
    shard_name(c, c->val_tokens ? 0 : 1, check, sizeof check);
    if (!(sp = state_path(c))) { cerr("out of memory"); goto fail; }
    if (bt_output_check(check) || bt_output_check(sp)) { cerr("%s", bt_data_error()); goto fail; }
    bt_atomic_install_signal_cleanup();   /* Ctrl-C leaves no temporary; the state file says where to go on */
    /* the tokenizers first: the vocabulary decides the shards' layout, which the state file records */
    c->n_slots = 2 * (size_t)c->threads + 2;
    c->rcap = c->chunk_bytes; c->lcap = 1 << 16;
    if (!(c->slots = (corpus_slot *)calloc(c->n_slots, sizeof *c->slots)) || !(c->toks = (bt_tokenizer **)calloc((size_t)c->threads, sizeof *c->toks)) ||
        !(c->tids = (pthread_t *)calloc((size_t)c->threads, sizeof *c->tids)) || !(args = (void **)calloc(2 * (size_t)c->threads, sizeof *args)) ||
        !(c->rbuf = (char *)malloc(c->rcap)) || !(c->lbuf = (char *)malloc(c->lcap))) { cerr("out of memory"); goto fail; }
    for (i = 0; i < (size_t)c->threads; i++)
        if (!(c->toks[i] = c->hf ? bt_tokenizer_load_hf(c->hf) : bt_tokenizer_load(c->enc, c->voc))) { cerr("%s", bt_data_error()); goto fail; }
    if ((c->sep = document_separator(c->toks[0], c->hf)) < 0) {
        cerr("%s: no <|endoftext|> or <|end_of_text|> token: the corpus mode puts one before each document", c->hf);
        goto fail;
    }
    if (bt_tokenizer_vocab_size(c->toks[0]) > 65536) c->width = 4;
    c->shard = c->val_tokens ? 0 : 1;
    if (c->restart) { if (unlink(sp) != 0 && errno != ENOENT) { cerr("%s: cannot remove it: %s", sp, strerror(errno)); goto fail; } }
    else if ((r = state_read(c, &pos, &fresh)) < 0) goto fail;
    else if (r == 1) {
        if (!c->quiet) fprintf(stderr, "bt_tokenize: %s says this run is complete: %llu tokens in %llu shards (--restart to do it again)\n", sp,
                               (unsigned long long)c->tokens_done, (unsigned long long)c->shard - (c->val_tokens ? 0 : 1));
        rc = 0;
        goto fail;
    } else if (!fresh && !c->quiet)
        fprintf(stderr, "bt_tokenize: resuming from %s: shards before %llu are done (%llu tokens); %s at text byte %llu\n", sp,
                (unsigned long long)c->shard, (unsigned long long)c->tokens_done, pos.input < c->n_in ? c->in[pos.input].path : "the end", (unsigned long long)pos.text_off);
    pthread_mutex_init(&c->mu, NULL); pthread_cond_init(&c->cv_work, NULL); pthread_cond_init(&c->cv_done, NULL);
    started = 1;
    for (i = 0; i < (size_t)c->threads; i++) {
        args[2 * i] = c; args[2 * i + 1] = c->toks[i];
        if (pthread_create(&c->tids[i], NULL, worker_main, &args[2 * i]) != 0) { c->threads = (int)i; cerr("cannot start a thread"); goto fail; }
    }
    c->t0 = c->last_print = now_s();
    for (i = 0; i < pos.input; i++) c->raw_done += c->in[i].size;
    for (i = pos.input; i < c->n_in; i++) {
        corpus_src s;
        corpus_pos p = {i, 0, 0, 0};
        if (i == pos.input) p = pos;
        if (src_open(&s, &c->in[i])) goto fail;
        r = src_skip(&s, c->in[i].jsonl ? p.line_off : p.text_off, c->rbuf, c->rcap);
        if (!r) r = c->in[i].jsonl ? read_jsonl(c, &s, p) : read_text(c, &s, p);
        c->raw_done += s.raw; c->raw_cur = 0;
        src_close(&s);
        if (r) goto fail;
    }
    if (pump(c, 0)) goto fail;
    pos.input = c->n_in; pos.line_off = pos.line_no = pos.text_off = 0;
    if (c->out ? shard_end(c, &pos, 0, 1) : (commit_wait(c) || state_write(c, c->shard, c->tokens_done, &pos, 0, 1, corpus_err, sizeof corpus_err))) goto fail;
    if (commit_wait(c)) goto fail;
    rc = 0;
    progress(c, 1);
    if (!c->quiet) {
        double el = now_s() - c->t0;
        uint64_t first = c->val_tokens ? 0 : 1;
        char next[4200];
        fprintf(stderr, "bt_tokenize: %zu inputs, %.1f MB of text -> %llu tokens in %llu shards (%s_{val,train}_*.bin, up to %06llu) in %.1f s (%.1f MB/s, %d threads)\n",
                c->n_in, (double)c->text_bytes / 1e6, (unsigned long long)c->tokens_done, (unsigned long long)(c->shard - first), c->prefix,
                (unsigned long long)(c->shard ? c->shard - 1 : 0), el, el > 0 ? (double)c->text_bytes / el / 1e6 : 0.0, c->threads);
        shard_name(c, c->shard > 1 ? c->shard : 1, next, sizeof next);
        if (access(next, F_OK) == 0) fprintf(stderr, "bt_tokenize: warning: %s is left from an earlier, longer run: remove it before training on %s_train_*.bin\n", next, c->prefix);
    }
fail:   /* and the end of a run that succeeded (rc 0) */
    if (rc) { if (c->tty && !c->quiet && c->last_print > c->t0) fputc('\n', stderr); fprintf(stderr, "bt_tokenize: %s\n", corpus_err); }
    (void)commit_wait(c);   /* a shard being committed finishes (or fails) first */
    if (started) {
        pthread_mutex_lock(&c->mu); c->stop = 1; pthread_cond_broadcast(&c->cv_work); pthread_mutex_unlock(&c->mu);
        for (i = 0; i < (size_t)c->threads; i++) pthread_join(c->tids[i], NULL);
    }
    bt_atomic_abort(c->out);   /* a shard cut short by an error is not kept */
    if (c->toks) for (i = 0; i < (size_t)c->threads; i++) bt_tokenizer_free(c->toks[i]);
    if (c->slots) for (i = 0; i < c->n_slots; i++) { free(c->slots[i].text); free(c->slots[i].ids); }
    for (i = 0; i < c->n_in; i++) free(c->in[i].path);
    free(c->in); free(c->slots); free(c->toks); free(c->tids); free(args); free(c->rbuf); free(c->lbuf); free(sp);
    return rc;
}

int main(int argc, char **argv) {
    const char *enc = NULL, *voc = NULL, *in = NULL, *out = NULL, *dec = NULL, *prefix = NULL, *field = NULL, *hf = NULL;
    int eot = 0, quiet = 0, given_count = 0, i, rc = 1, restart = 0, n_pos = 0, u32 = 0, width;
    size_t threads = 0, shard_tokens = 100000000, val_tokens = (size_t)-1, chunk_bytes = 256 * 1024;
    char *pos_args[argc > 0 ? argc : 1];   /* the arguments that are not options */
    size_t skip = 0, limit = (size_t)-1, len = 0, n = 0, cap = 0, k;
    bt_tokenizer *tok;
    char *text = NULL;
    int32_t *ids = NULL;
    void *toks = NULL;   /* the shard's tokens, uint16 or uint32 */
    double t0, t1;
    FILE *f;
    if (argc == 1) { usage(stderr); return 2; }
    for (i = 1; i < argc; i++) {
        const char *a = argv[i], *v;
        if (!strcmp(a, "--eot")) eot = 1;
        else if (!strcmp(a, "-q")) quiet = 1;
        else if (!strcmp(a, "--u32")) u32 = 1;
        /* --limit: a shard's header counts its tokens in an int32 */
        else if (!strcmp(a, "--skip") || !strcmp(a, "--limit")) {
            int is_skip = !strcmp(a, "--skip");
            if (!(v = option_value(argc, argv, &i)) || parse_count(a, v, is_skip ? 9223372036854775807ull : 2147483647ull, is_skip ? &skip : &limit)) return 2;
            given_count |= 1;
        }
        else if (!strcmp(a, "--threads") || !strcmp(a, "--shard-tokens") || !strcmp(a, "--val-tokens") || !strcmp(a, "--chunk-bytes")) {
            size_t *dst = a[2] == 't' ? &threads : a[2] == 's' ? &shard_tokens : a[2] == 'v' ? &val_tokens : &chunk_bytes;
            unsigned long long hi = a[2] == 't' ? 1024 : a[2] == 'c' ? (1ull << 30) : 2147483647ull;
            if (!(v = option_value(argc, argv, &i)) || parse_count(a, v, hi, dst)) return 2;
            if (a[2] == 't' && !threads) return usage_error("bad value '0' for --threads: at least 1");
            if (a[2] == 's' && !shard_tokens) return usage_error("bad value '0' for --shard-tokens: at least 1");
            if (a[2] == 'c' && chunk_bytes < 16) return usage_error("bad value '%s' for --chunk-bytes: at least 16", v);
            given_count |= 2;
        }
        else if (!strcmp(a, "--out")) { if (!(prefix = option_value(argc, argv, &i))) return 2; }
        else if (!strcmp(a, "--field")) { if (!(field = option_value(argc, argv, &i))) return 2; given_count |= 2; }
        else if (!strcmp(a, "--restart")) { restart = 1; given_count |= 2; }
        else if (!strcmp(a, "--encoder")) { if (!(enc = option_value(argc, argv, &i))) return 2; }
        else if (!strcmp(a, "--vocab")) { if (!(voc = option_value(argc, argv, &i))) return 2; }
        else if (!strcmp(a, "--tokenizer")) { if (!(hf = option_value(argc, argv, &i))) return 2; }
        else if (!strcmp(a, "--decode")) { if (!(dec = option_value(argc, argv, &i))) return 2; }
        else if (!strcmp(a, "-h") || !strcmp(a, "--help")) { usage(stdout); return 0; }
        else if (a[0] == '-' && a[1]) return usage_error("unknown option '%s'", a);
        else pos_args[n_pos++] = argv[i];
    }
    if (hf && (enc || voc)) return usage_error("--tokenizer replaces --encoder and --vocab: give one or the other");
    if (prefix) {   /* corpus mode */
        corpus *c;
        if (dec || eot || (given_count & 1)) return usage_error("--out (corpus mode) takes no --decode, --eot, --skip or --limit: each input file or JSON line is a document");
        if (!n_pos) return usage_error("--out %s needs at least one INPUT (a file, directory or glob pattern)", prefix);
        if (!*prefix || prefix[strlen(prefix) - 1] == '/') return usage_error("--out needs a PREFIX for the file names, got '%s'", prefix);
        if (!(c = (corpus *)calloc(1, sizeof *c))) { fprintf(stderr, "bt_tokenize: out of memory\n"); return 1; }
        c->prefix = prefix; c->field = field ? field : "text";
        c->shard_tokens = shard_tokens; c->val_tokens = val_tokens == (size_t)-1 ? shard_tokens : val_tokens;
        c->chunk_bytes = chunk_bytes; c->quiet = quiet; c->restart = restart;
        if (!threads) { long k = sysconf(_SC_NPROCESSORS_ONLN); threads = k < 1 ? 1 : k > 1024 ? 1024 : (size_t)k; }
        c->threads = (int)threads;
        c->enc = pick(enc, "data/encoder.json", "../shared/data/gpt2-tokenizer/encoder.json");
        c->voc = pick(voc, "data/vocab.bpe", "../shared/data/gpt2-tokenizer/vocab.bpe");
        c->hf = hf;
        c->width = u32 ? 4 : 2;
        rc = corpus_run(c, pos_args, n_pos);
        free(c);
        return rc;
    }
    if (given_count & 2) return usage_error("--threads, --shard-tokens, --val-tokens, --chunk-bytes, --field and --restart need --out PREFIX (corpus mode)");
    if (n_pos > 0) in = pos_args[0];
    if (n_pos > 1) out = pos_args[1];
    if (n_pos > 2) return usage_error("unexpected argument '%s' (after IN.txt %s and OUT.bin %s)", pos_args[2], in, out);
    if (dec && (in || eot || u32 || (given_count & 1))) return usage_error("--decode takes no IN.txt, --eot, --skip, --limit or --u32 (it reads either layout)");
    if (!dec && !out) return usage_error("%s", in ? "no OUT.bin after IN.txt" : "no IN.txt and OUT.bin");
    if (!dec && check_output(in, out)) return 1;
    bt_atomic_install_signal_cleanup();   /* Ctrl-C while writing OUT leaves no temporary */
    enc = pick(enc, "data/encoder.json", "../shared/data/gpt2-tokenizer/encoder.json");
    voc = pick(voc, "data/vocab.bpe", "../shared/data/gpt2-tokenizer/vocab.bpe");
    tok = hf ? bt_tokenizer_load_hf(hf) : bt_tokenizer_load(enc, voc);
    if (!tok) { fprintf(stderr, "bt_tokenize: %s\n", bt_data_error()); return 1; }
    int32_t sep = document_separator(tok, hf);
    if (!dec && eot && sep < 0) {
        fprintf(stderr, "bt_tokenize: %s: no <|endoftext|> or <|end_of_text|> token: --eot puts one before each document\n", hf);
        bt_tokenizer_free(tok); return 1;
    }
    width = u32 || bt_tokenizer_vocab_size(tok) > 65536 ? 4 : 2;

    if (dec) {
        bt_shard s;
        int rc = 0;
        if (bt_shard_open(&s, dec) != 0) { fprintf(stderr, "bt_tokenize: %s\n", bt_data_error()); bt_tokenizer_free(tok); return 1; }
        for (k = 0; k < s.n && !rc; k++) {
            size_t l;
            const char *b = bt_decode_token(tok, (int32_t)bt_shard_token(&s, k), &l);   /* an id past INT32_MAX is negative: refused */
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
    n = eot ? encode_documents(tok, sep, text, len, &ids, 0, &cap) : bt_encode_append(tok, text, len, &ids, 0, &cap);
    t1 = now_s();
    if (n == (size_t)-1) { fprintf(stderr, "bt_tokenize: %s: %s\n", in, bt_data_error()); goto done; }

    if (skip > n) skip = n;
    if (limit > n - skip) limit = n - skip;
    if (!(toks = malloc((limit ? limit : 1) * (size_t)width))) { fprintf(stderr, "bt_tokenize: out of memory\n"); goto done; }
    for (k = 0; k < limit; k++) {   /* ids are below the vocabulary: uint16 holds them unless width is 4 */
        if (ids[skip + k] < 0 || (width == 2 && ids[skip + k] > 65535)) { fprintf(stderr, "bt_tokenize: token %ld does not fit uint%d\n", (long)ids[skip + k], 8 * width); goto done; }
        if (width == 4) ((uint32_t *)toks)[k] = (uint32_t)ids[skip + k];
        else ((uint16_t *)toks)[k] = (uint16_t)ids[skip + k];
    }
    if ((width == 4 ? bt_shard_write_u32(out, (const uint32_t *)toks, limit) : bt_shard_write(out, (const uint16_t *)toks, limit)) != 0) {
        fprintf(stderr, "bt_tokenize: %s\n", bt_data_error()); goto done;
    }
    if (!quiet)
        fprintf(stderr, "bt_tokenize: %s: %zu bytes -> %zu tokens%s in %.3f s (%.1f MB/s); wrote %zu uint%d tokens [%zu, %zu) to %s\n",
                in, len, n, eot ? " (with <|endoftext|>)" : "", t1 - t0, t1 > t0 ? (double)len / (t1 - t0) / 1e6 : 0.0,
                limit, 8 * width, skip, skip + limit, out);
    rc = 0;
done:
    free(toks); free(text); free(ids);
    bt_tokenizer_free(tok);
    return rc;
}
#endif
