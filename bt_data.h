/* bt_data.h - BluTrain-C training data, v0.5: byte-level BPE (GPT-2, Llama 3), token shards, a data loader, JSON.

   USAGE
     #define BT_DATA_IMPLEMENTATION   in *one* C/CUDA file before including this header.
     It stands alone: it includes no other bt_ header, and needs only libc and POSIX.1-2008
     (pread, readlink, glob, sigaction): that file defines _POSIX_C_SOURCE 200809L before its
     first #include (gnu11 and C++ compilers have it already). It compiles as C11 and as CUDA
     C++ (nvcc -x cu).

     bt_tokenizer *tok = bt_tokenizer_load("data/encoder.json", "data/vocab.bpe");
     int32_t *ids; size_t n = bt_encode(tok, text, len, &ids);    // ids are malloc'd
     char *s;      size_t m = bt_decode(tok, ids, n, &s);          // m bytes (+ a NUL not counted)
     free(ids); free(s); bt_tokenizer_free(tok);
     tok = bt_tokenizer_load_hf("tokenizer.json");                 // Hugging Face: GPT-2's, Llama 3's
     int32_t eot = bt_tokenizer_token_id(tok, "<|end_of_text|>");  // a special token's id

     bt_shard_write("data/x.bin", tokens, n);                      // llm.c's shard layout (uint16 ids)
     bt_shard_write_u32("data/l.bin", tokens32, n);                // its Llama 3 layout (uint32 ids)
     bt_loader *L = bt_loader_open("data/x_train*.bin", B, T, rank, world, 1, seed);
     while (training) bt_loader_next(L, inputs, targets);          // B*T int32 each
     bt_loader_close(L);

   WHAT IT DOES
     1. Tokenizer: GPT-2's byte-level BPE, read from OpenAI's encoder.json and vocab.bpe.
        Text is split by GPT-2's pre-tokenizer pattern
            's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+
        (matched by hand, no regex engine; \p{L} = Lu Ll Lt Lm Lo, \p{N} = Nd Nl No and
        \s = White_Space come from the Unicode 15.0 table in section 2, generated from Debian's
        unicode-data by tools/gen_unicode_table.py). Each piece's
        bytes start as 256 single-byte tokens and the adjacent pair of lowest merge rank is
        merged until none is left (a heap: O(k log k) for a k-byte piece); results are cached.
        Bytes that are not valid UTF-8 are their own pieces of the "other" class, so any byte
        string encodes and decode(encode(x)) == x. encode never emits <|endoftext|> (50256)
        from text: callers insert BT_EOT themselves where documents end.
        Checked (tests/test_data.c) against gpt-3-encoder's ids, tiktoken's token counts of Tiny
        Shakespeare and WikiText-2, and the Python regex module's pre-tokenization.
        tokenizer.json (bt_tokenizer_load_hf, section 4): a byte-level BPE in Hugging Face's format,
        encoded as tokenizers' encode(text, add_special_tokens=False): model.vocab (strings in
        GPT-2's byte alphabet, all 256 bytes present), model.merges ("a b" strings or [a, b] pairs;
        a repeated pair takes its last rank, as tokenizers does), model.ignore_merges (a piece that
        is itself a token is that token, merges skipped: Llama 3), added_tokens (ids past the
        vocabulary; never matched in text, found by bt_tokenizer_token_id, decoded as their
        content). pre_tokenizer: ByteLevel(use_regex) for GPT-2's pattern, or Sequence[Split(Regex,
        Isolated), ByteLevel(use_regex false)] with GPT-2's or Llama 3's pattern, recognised by its
        exact text; Llama 3's is matched by hand too (bt__piece_end_llama3):
            (?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|
            \s*[\r\n]+|\s+(?!\S)|\s+
        Anything else (another pattern or pre-tokenizer, a normalizer, add_prefix_space, dropout, a
        subword prefix) is refused with a message naming the file. Checked (tests/test_hf_tokenizer.c)
        against bt_tokenizer_load on GPT-2's files rewritten as tokenizer.json, the Python regex
        module's Llama 3 pieces, and (tests/hf_tokenizer_check.py) the tokenizers library's ids.
     2. Shards: llm.c's two file layouts, a header of 256 int32 (magic, version, token count, the
        rest 0) and then the tokens:
            magic 20240520, version 1: uint16 tokens (GPT-2; llm.c's fineweb.py, tinyshakespeare.py)
            magic 20240801, version 7: uint32 tokens (llm.c's Llama 3 scripts: 128,256 tokens)
        bt_shard_write / bt_shard_write_u32 pick the layout; readers take either, the header's
        magic and version deciding the token width (any other pair is an error naming the file and
        what it holds). Written atomically (4. Files); read with the header and the file size
        checked. The loader reads each window with pread (a file truncated under a running job
        is an error naming the file and offset, not a SIGBUS) and hands out int32 ids whatever the
        width; the shards of one glob must share a layout (a mix is an error naming one file of
        each). It can check every token against the model's vocabulary when it opens the shards
        (bt_loader_check_vocab).
     3. Loader: batches of B x (T+1) tokens (inputs = the first T of a row, targets = the last
        T). A shard of n tokens holds (n-1)/(B*T) windows of B*T+1 tokens (consecutive windows
        share one token). The windows of all shards, in the epoch's order, form one list; rank r
        of world takes windows r, r+world, r+2*world, ..., so ranks are disjoint and every rank
        has the same number of batches (the last list%world windows of an epoch are skipped).
        With shuffle, each epoch permutes the shard order and the windows inside each shard,
        from (seed, epoch); without, all is in file order (validation). The state (epoch, shard,
        position, RNG) is plain data: save it with a checkpoint and a resumed run sees the same
        batches.
     4. Files. Inputs are opened by bt_input_open: a FIFO, device or directory is refused at once
        (stat first, then a non-blocking open), never waited on. Outputs are checked before the
        work that makes them (bt_output_check, bt_output_dir: a run must not train for an hour and
        then find that it cannot save), then written through a bt_atomic_file: the bytes go to
        "TARGET.tmp.<pid>.<n>" beside the target (unique per process and call, created O_EXCL);
        commit fsyncs it, renames it over the target and fsyncs the directory. A failure, a kill
        or a concurrent writer never leaves a half-written target: readers see the old file or a
        whole new one, and of two concurrent writers the last rename wins. A symlink is followed
        (the temporary goes beside its final target, and the link survives); a target that is
        not a regular file (a device such as /dev/null, a FIFO, a directory) is refused, never
        replaced. With BT_OUTPUT_NOFOLLOW (the files a program makes in a directory of its own) a
        link at the name is refused too. Open temporaries are listed in a fixed lock-free
        registry (BT_ATOMIC_MAX_OPEN slots, safe from any thread) that bt_atomic_cleanup()
        empties from a signal handler;
        SIGINT/SIGTERM cleanup is opt-in (bt_atomic_install_signal_cleanup). After kill -9 a
        temporary stays behind (the target is intact); its name says which process left it.

     5. JSON: a writer (config.json, checkpoint metadata) and a strict RFC 8259 parser into a tree
        (UTF-8 checked, escapes and surrogate pairs decoded, duplicate keys and nesting past a
        limit rejected, every error naming its byte) for config.json, checkpoint headers, JSON
        lines and tokenizer.json; numbers written and read with '.' whatever the locale.

   THREADS
     A tokenizer's merge cache is written by bt_encode: use one tokenizer per thread (loading
     takes about 15 ms). Shards are read-only; a loader belongs to one thread. Atomic files may
     be opened, written and committed from several threads at once (one file per thread).

   ERRORS
     Library code never prints and never exits. A failing function returns NULL / -1 /
     (size_t)-1 and leaves a message for bt_data_error(): it names the file and the problem.
     The message lives in a per-thread buffer; one too long for it keeps its head and its tail
     (bt_msgf), so the problem after a long path survives.

   OPTIONS (define before the implementation)
     BT_MALLOC/BT_FREE (both or neither; else malloc/free). Buffers handed to the caller
     (bt_encode's ids, bt_decode's text) come from BT_MALLOC: release them with BT_FREE.
     BT_DATA_STATIC: make every function static to the including file.
     BT_ATOMIC_MAX_OPEN: how many atomic files may be open at once (default 16).

   HISTORY
     0.5  uint32 shards (llm.c's Llama 3 layout: magic 20240801, version 7): bt_shard_write_u32,
          bt_shard.tokens32/width, bt_shard_token; the reader and the loader take both layouts.
     0.4  Hugging Face tokenizer.json (bt_tokenizer_load_hf), Llama 3's pre-tokenizer, bt_tokenizer_token_id.
     0.3  JSON (writer and strict parser, moved here from bt_ckpt.h), locale-free number text.
     0.2  output files (checks, atomic replacement, signal cleanup), non-blocking inputs.
     0.1  first version: tokenizer, shards, loader, bt_tokenize tool.
*/
#ifndef BT_DATA_H
#define BT_DATA_H

#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#ifdef BT_DATA_STATIC
#define BT_DATA_DEF static
#else
#define BT_DATA_DEF extern
#endif

#ifdef __cplusplus
extern "C" {
#endif

/* ---- errors ---- */
BT_DATA_DEF const char *bt_data_error(void);   /* the last failure's message ("" if none) */
/* snprintf for messages: a text too long for buf[n] keeps its head and its tail with "..."
   between them, so the reason at a message's end survives a long path at its start. The
   arguments may point into buf (the text is formatted aside first). The full length, as snprintf.
   bt_data.h's and bt_ckpt.h's messages go through it, and so do their callers' that wrap them. */
BT_DATA_DEF int bt_msgf(char *buf, size_t n, const char *fmt, ...)
#if defined(__GNUC__) || defined(__clang__)
    __attribute__((format(printf, 3, 4)))
#endif
    ;
BT_DATA_DEF int bt_vmsgf(char *buf, size_t n, const char *fmt, va_list ap);

/* ---- tokenizer ---- */
#define BT_EOT 50256                 /* <|endoftext|> */
#define BT_GPT2_VOCAB 50257
typedef struct bt_tokenizer bt_tokenizer;

BT_DATA_DEF bt_tokenizer *bt_tokenizer_load(const char *encoder_json_path, const char *vocab_bpe_path);
/* A byte-level BPE from a Hugging Face tokenizer.json (GPT-2's, Llama 3's, or one trained the same
   way: see WHAT IT DOES, 1). Encodes as tokenizers' encode(text, add_special_tokens=False) does,
   except that added tokens are never matched in the text. NULL + bt_data_error() naming the file
   and the problem (an unsupported pre-tokenizer, a merge of unknown tokens, an id out of range). */
BT_DATA_DEF bt_tokenizer *bt_tokenizer_load_hf(const char *tokenizer_json_path);
BT_DATA_DEF void bt_tokenizer_free(bt_tokenizer *t);               /* NULL is a no-op */
BT_DATA_DEF int  bt_tokenizer_vocab_size(const bt_tokenizer *t);    /* 50257 for GPT-2, 128256 for Llama 3 */
/* The id of a token by its text: an added (special) token's content ("<|end_of_text|>"), else the
   token whose bytes are text ("<|endoftext|>" in encoder.json). -1 + bt_data_error() if none. */
BT_DATA_DEF int32_t bt_tokenizer_token_id(const bt_tokenizer *t, const char *text);
/* Encode len bytes (any bytes; no special tokens are recognised). *ids is BT_MALLOC'd (never
   NULL on success, even for 0 tokens); returns the count, or (size_t)-1 on error (*ids = NULL). */
BT_DATA_DEF size_t bt_encode(bt_tokenizer *t, const char *text, size_t len, int32_t **ids);
/* The same, appending to a growable buffer (*ids of capacity *cap, holding n tokens; both
   may start NULL/0). Returns the new count, or (size_t)-1 on error (the buffer is kept). */
BT_DATA_DEF size_t bt_encode_append(bt_tokenizer *t, const char *text, size_t len,
                                    int32_t **ids, size_t n, size_t *cap);
/* Decode n ids to bytes. *text is BT_MALLOC'd with a NUL after the returned byte count.
   Returns (size_t)-1 (and *text = NULL) when an id is out of range. */
BT_DATA_DEF size_t bt_decode(bt_tokenizer *t, const int32_t *ids, size_t n, char **text);
/* The bytes of one token (not NUL-terminated; owned by t), or NULL for an out-of-range id. */
BT_DATA_DEF const char *bt_decode_token(bt_tokenizer *t, int32_t id, size_t *len);
/* Where a long text may be cut to encode it in parts: the largest p, 0 < p < len, such that for
   every text T that begins with text[0..len) (a buffer holding part of a document),
   encode(T) == encode(T[0..p)) followed by encode(T[p..)). 0 when text[0..len) has no such place
   by the rule (section 6 states and proves it): just after a "\n", or just before a " ", that
   stands between two characters that are not white space. Needs no tokenizer; O(len - p). */
BT_DATA_DEF size_t bt_encode_cut(const char *text, size_t len);
/* Drop the merge cache (it is bounded anyway; this frees its memory now). */
BT_DATA_DEF void bt_tokenizer_clear_cache(bt_tokenizer *t);

/* ---- files: inputs that never block; outputs checked first and replaced atomically ---- */
/* A read-only descriptor of a regular file (its size in *size if size != NULL), or -1 + error.
   A FIFO, device or directory is refused at once (stat first, then a non-blocking open), never
   waited on. Every reader in this header opens its files through it. */
BT_DATA_DEF int bt_input_open(const char *path, uint64_t *size);
/* 0 if path can be written as a regular file: not empty, not a directory or a special file (a
   symlink counts as its target), its directory exists and is writable. -1 + bt_data_error(). */
BT_DATA_DEF int bt_output_check(const char *path);
/* 0 if dir is a directory where files can be created; made first (with missing parents) when
   absent. -1 + error (an empty name, a file in the way, no permission). */
BT_DATA_DEF int bt_output_dir(const char *dir);
/* An output that grows while a program runs (a log): bt_output_check, then opened write-only,
   truncated (append = 0) or appended to, without blocking. A descriptor, or -1 + error. */
BT_DATA_DEF int bt_output_open(const char *path, int append);
/* A file written to a unique temporary beside its target (symlinks resolved, so a link is written
   through and survives) and renamed over it: a failure or a kill never leaves a half-written
   target and the previous file survives. */
typedef struct bt_atomic_file bt_atomic_file;
BT_DATA_DEF bt_atomic_file *bt_atomic_open(const char *path);                   /* NULL + bt_data_error() */
/* The same three with flags. BT_OUTPUT_NOFOLLOW: path's last component is not followed, for the
   files a program makes in a directory of its own (a log, checkpoints): a symbolic link there is
   refused (an error naming it and where it points), never written through or replaced; the
   directories above it may be links. An atomic file's rename replaces whatever is at path then,
   never a link's target. */
#define BT_OUTPUT_NOFOLLOW 1
BT_DATA_DEF int bt_output_check_flags(const char *path, int flags);
BT_DATA_DEF int bt_output_open_flags(const char *path, int append, int flags);
BT_DATA_DEF bt_atomic_file *bt_atomic_open_flags(const char *path, int flags);
BT_DATA_DEF int  bt_atomic_write(bt_atomic_file *f, const void *buf, size_t n); /* 0 / -1 */
BT_DATA_DEF int  bt_atomic_fd(bt_atomic_file *f);                               /* for pwrite and friends */
BT_DATA_DEF int  bt_atomic_commit(bt_atomic_file *f);  /* fsync, rename, fsync the directory; frees f; 0 / -1 (temporary removed) */
BT_DATA_DEF void bt_atomic_abort(bt_atomic_file *f);   /* removes the temporary, frees f; NULL is a no-op */
BT_DATA_DEF void bt_atomic_cleanup(void);              /* async-signal-safe: unlink every open temporary (call from a signal handler) */
/* async-signal-safe: bt_atomic_cleanup, and from then on every bt_atomic_open fails ("interrupted by
   a signal"): for a process about to end, whose other threads could otherwise create a temporary
   after the unlink that outlives it */
BT_DATA_DEF void bt_atomic_cleanup_exit(void);
/* Opt-in cleanup on SIGINT and SIGTERM (a signal that is ignored stays ignored): unlink every open
   temporary (bt_atomic_cleanup_exit), then do what the signal did before (call the previous
   handler, or the default action: the process ends). A program with its own SIGINT handler (one
   that finishes the step and checkpoints) calls bt_atomic_cleanup_exit() itself when it is about
   to exit instead. Installed
   once; later calls do nothing. 0, or -1 + error. */
BT_DATA_DEF int  bt_atomic_install_signal_cleanup(void);

/* ---- shards (llm.c's layouts: uint16 or uint32 tokens after a 256-int32 header) ---- */
#define BT_SHARD_MAGIC 20240520      /* uint16 tokens (GPT-2 and any vocabulary up to 65,536) */
#define BT_SHARD_VERSION 1
#define BT_SHARD32_MAGIC 20240801    /* uint32 tokens (llm.c's Llama 3 scripts) */
#define BT_SHARD32_VERSION 7
#define BT_SHARD_HEADER_INTS 256
#define BT_SHARD_HEADER_BYTES (BT_SHARD_HEADER_INTS * 4)

/* Written through a bt_atomic_file (see above). n <= INT32_MAX. 0 ok, -1 error. */
BT_DATA_DEF int bt_shard_write(const char *path, const uint16_t *tokens, size_t n);       /* magic 20240520 */
BT_DATA_DEF int bt_shard_write_u32(const char *path, const uint32_t *tokens, size_t n);   /* magic 20240801 */

/* A shard read into memory (a file cut short later cannot hurt). Exactly one of tokens and
   tokens32 is set, as width says: code that knows its shards are uint16 (GPT-2's) reads tokens;
   code that takes either reads bt_shard_token(s, i). */
typedef struct {
    const uint16_t *tokens;   /* width 2: the n tokens; NULL for a uint32 shard */
    const uint32_t *tokens32; /* width 4: the n tokens; NULL for a uint16 shard */
    size_t n;
    int width;                /* bytes per token: 2 or 4 (0 when closed) */
    void *buf_;               /* private: the allocation */
} bt_shard;
/* 0 ok; -1 (s zeroed) on a missing or special file, an unknown magic, a version that does not go
   with the magic, or a size that disagrees with the header's token count and width. */
BT_DATA_DEF int  bt_shard_open(bt_shard *s, const char *path);
BT_DATA_DEF void bt_shard_close(bt_shard *s);            /* safe on a zeroed or closed shard */
BT_DATA_DEF uint32_t bt_shard_token(const bt_shard *s, size_t i);   /* token i (< s->n) of either width */
/* -1 (naming the file and position) if a token is >= vocab_size; 0 otherwise. */
BT_DATA_DEF int  bt_shard_check_vocab(const bt_shard *s, const char *path, int vocab_size);

/* ---- loader ---- */
typedef struct bt_loader bt_loader;
/* The loader's position: plain data (fwrite it into a checkpoint). */
typedef struct {
    uint32_t magic;           /* BT_LOADER_STATE_MAGIC */
    int32_t B, T, rank, world, shuffle, num_shards;
    uint64_t seed;
    uint64_t epoch;           /* epochs completed so far */
    uint64_t shard;           /* index into this epoch's shard order */
    uint64_t position;        /* window index inside that shard's (permuted) window list */
    uint64_t step;            /* batches this rank has read in this epoch */
    uint64_t rng;             /* the epoch's RNG state (derived from seed and epoch) */
    uint64_t total_tokens;    /* of all shards: a check that the same files are read */
} bt_loader_state;
#define BT_LOADER_STATE_MAGIC 0x6274646cu   /* "btdl" */

/* glob: a pattern for glob(3) (files are taken in sorted order). B, T >= 1; 0 <= rank < world.
   Every shard's header and size are checked now; NULL on error (no match, a bad shard, uint16
   and uint32 shards mixed, no shard large enough for one batch of B*T+1 tokens, fewer windows
   than world). Either layout gives the same int32 batches. */
BT_DATA_DEF bt_loader *bt_loader_open(const char *glob, int B, int T, int rank, int world,
                                      int shuffle, uint64_t seed);
/* Reads every shard once now and checks that each token is < vocab_size (the model's real
   vocabulary, not a padded one), and from then on checks each window as it is read. -1 names
   the file and the token's position. About 0.4 ms for the 2.4M tokens of WikiText-2 train. */
BT_DATA_DEF int    bt_loader_check_vocab(bt_loader *L, int vocab_size);
/* Fills inputs and targets (B*T int32 each, row-major B x T). Past the end of an epoch it
   starts the next one (reshuffled). Windows are read with pread: a shard cut short or rewritten
   while in use gives -1 naming the file and the byte offset, never a crash; so does a uint32 id
   that does not fit an int32 (2^31 - 1 and up) when no vocabulary was checked. 0 ok, -1 error. */
BT_DATA_DEF int    bt_loader_next(bt_loader *L, int32_t *inputs, int32_t *targets);
BT_DATA_DEF void   bt_loader_reset(bt_loader *L);               /* epoch 0, first batch */
BT_DATA_DEF size_t bt_loader_num_batches(const bt_loader *L);   /* per epoch, this rank */
BT_DATA_DEF size_t bt_loader_num_shards(const bt_loader *L);
BT_DATA_DEF const char *bt_loader_shard_path(const bt_loader *L, size_t i);  /* sorted order */
BT_DATA_DEF void   bt_loader_get_state(const bt_loader *L, bt_loader_state *st);
/* -1 if st does not belong to this loader (B, T, rank, world, files, seed) or is out of range. */
BT_DATA_DEF int    bt_loader_set_state(bt_loader *L, const bt_loader_state *st);
BT_DATA_DEF void   bt_loader_close(bt_loader *L);               /* NULL is a no-op */

/* ---- JSON: a writer and a strict parser (config.json, checkpoint headers, JSON lines, tokenizer.json) ---- */
/* Writer: a growable text. Values are added in order; `key` names a member inside an object and
   must be NULL inside an array or at the top. Invalid UTF-8, a non-finite number, a missing or
   extra key, or too deep a nesting make the writer fail (sticky), reported by bt_json_text. */
#define BT_JSON_MAX_DEPTH 64
typedef struct {
    char *buf; size_t len, cap;
    int indent;                                /* 0: compact; n: pretty, n spaces per level */
    int depth;
    unsigned char kind[BT_JSON_MAX_DEPTH + 1]; /* per level: 1 object, 2 array */
    unsigned char items[BT_JSON_MAX_DEPTH + 1];/* per level: a value was written */
    int top_done;
    char err[160];                             /* "" while fine */
} bt_json_writer;
BT_DATA_DEF void bt_json_writer_init(bt_json_writer *w, int indent);
BT_DATA_DEF void bt_json_writer_free(bt_json_writer *w);
BT_DATA_DEF void bt_json_object(bt_json_writer *w, const char *key);
BT_DATA_DEF void bt_json_array(bt_json_writer *w, const char *key);
BT_DATA_DEF void bt_json_end(bt_json_writer *w);                  /* closes the innermost object/array */
BT_DATA_DEF void bt_json_string(bt_json_writer *w, const char *key, const char *s);
BT_DATA_DEF void bt_json_int(bt_json_writer *w, const char *key, int64_t v);
BT_DATA_DEF void bt_json_uint(bt_json_writer *w, const char *key, uint64_t v);
BT_DATA_DEF void bt_json_number(bt_json_writer *w, const char *key, double v);  /* shortest exact form */
BT_DATA_DEF void bt_json_bool(bt_json_writer *w, const char *key, int v);
BT_DATA_DEF void bt_json_null(bt_json_writer *w, const char *key);
/* The finished text (NUL-terminated, owned by w), or NULL with bt_data_error() set when the
   writer failed or an object/array is still open. */
BT_DATA_DEF const char *bt_json_text(bt_json_writer *w, size_t *len);
/* Write the text and a newline to path atomically (config.json). 0 ok, -1 error. _flags: with
   bt_data.h's output flags (BT_OUTPUT_NOFOLLOW: a symbolic link at path is refused). */
BT_DATA_DEF int bt_json_save(bt_json_writer *w, const char *path);
BT_DATA_DEF int bt_json_save_flags(bt_json_writer *w, const char *path, int flags);

/* Parser: strict RFC 8259 into a tree. */
typedef enum { BT_JSON_NULL = 0, BT_JSON_FALSE, BT_JSON_TRUE, BT_JSON_NUMBER, BT_JSON_STRING,
               BT_JSON_ARRAY, BT_JSON_OBJECT } bt_json_type;
typedef struct bt_json {
    bt_json_type type;
    const char *str; size_t len;     /* STRING: decoded, NUL-terminated; NUMBER: its text */
    const char *key; size_t key_len; /* the member name when the parent is an object */
    double num;                      /* NUMBER */
    size_t n;                        /* ARRAY/OBJECT: the number of children */
    const struct bt_json *child;     /* ARRAY/OBJECT: the first child, then ->next */
    const struct bt_json *next;
    size_t offset, end;              /* the value's bytes [offset, end) in the text */
} bt_json;
typedef struct bt_json_doc bt_json_doc;
/* NULL and bt_data_error() ("JSON, byte 12: ...") on any error: nothing after the value but
   whitespace, nesting deeper than max_depth (<= 0: BT_JSON_MAX_DEPTH), more than 2^24 values. */
BT_DATA_DEF bt_json_doc *bt_json_parse(const char *text, size_t n, int max_depth);
/* The same for a text found at byte base of a file: messages count bytes from the file's start. */
BT_DATA_DEF bt_json_doc *bt_json_parse_at(const char *text, size_t n, int max_depth, size_t base);
BT_DATA_DEF const bt_json *bt_json_root(const bt_json_doc *d);
BT_DATA_DEF void bt_json_free(bt_json_doc *d);                     /* NULL is a no-op */
BT_DATA_DEF const bt_json *bt_json_get(const bt_json *obj, const char *key);   /* NULL when absent */
/* 0 when v is an integer literal (no fraction or exponent) within the type's range, else -1 */
BT_DATA_DEF int bt_json_i64(const bt_json *v, int64_t *out);
BT_DATA_DEF int bt_json_u64(const bt_json *v, uint64_t *out);

/* ---- text: UTF-8 and numbers as JSON and metadata write them, whatever the locale ---- */
BT_DATA_DEF size_t bt_utf8_check(const char *s, size_t n);   /* byte index of the first invalid UTF-8 sequence; n when valid */
BT_DATA_DEF void bt_format_double(double v, char *buf, size_t n); /* the shortest %.Ng (15..17) that reads back as v, '.' decimal point */
BT_DATA_DEF int  bt_parse_double(const char *s, double *v);    /* strtod of a '.'-decimal text, all of s consumed; 0 / -1 */
BT_DATA_DEF int  bt_parse_u64(const char *s, uint64_t *v);     /* decimal digits only, within uint64; 0 / -1 */

/* ---- multiple-choice sets (HellaSwag's JSON lines) ----
   One item a line: {"ctx": "...", "endings": ["...", ...], "label": k} (other members ignored;
   HellaSwag's "activity_label", when present, is put before the context as "LABEL: ", the way
   the evaluation harnesses do). An item's context is encoded as one text and each ending as " " +
   ending (the space that joins them belongs to the ending's first token, as GPT-2 saw text). An
   ending is scored by the sum of its tokens' losses given the context (and all before it). */
#define BT_MC_MAX_ENDINGS 16
typedef struct {
    int64_t n_items;
    int max_endings;          /* the most endings an item has */
    int64_t max_row;          /* the longest context + ending in tokens */
    int64_t n_tokens;
    int32_t *tokens;          /* [n_tokens]: every context's and ending's tokens, one after another */
    int64_t *ctx_off;         /* [n_items] where an item's context starts in tokens */
    int32_t *ctx_len;         /* [n_items] */
    int32_t *n_endings;       /* [n_items] 2..BT_MC_MAX_ENDINGS */
    int64_t *end_off;         /* [n_items * max_endings]: ending j of item i at [i * max_endings + j] */
    int32_t *end_len;         /* [n_items * max_endings] (>= 1) */
    int32_t *label;           /* [n_items] the right ending, 0 .. n_endings - 1 */
} bt_mc_set;
/* Reads and encodes path. 0, or -1 with bt_data_error() naming the file and line (not JSON, a
   missing or mistyped member, a label out of range, an ending that encodes to no token, fewer
   than 2 or more than BT_MC_MAX_ENDINGS endings, no item at all). */
BT_DATA_DEF int  bt_mc_load(bt_mc_set *s, const char *path, bt_tokenizer *tok);
BT_DATA_DEF void bt_mc_free(bt_mc_set *s);   /* safe on a zeroed or freed set */

#ifdef __cplusplus
}
#endif
/* the most bt_atomic files open at once in a process (an option: define it before the include) */
#ifndef BT_ATOMIC_MAX_OPEN
#define BT_ATOMIC_MAX_OPEN 16
#endif
#endif /* BT_DATA_H */

/* ================================================================================================
   IMPLEMENTATION
   ------------------------------------------------------------------------------------------------
   Contents
     1. Common: allocation, errors, hashing, RNG
     2. Files: inputs, output checks, atomic replacement, the registry of temporaries
     3. Unicode classes (generated table) and UTF-8 decoding
     4. Tokenizer loading: encoder.json, vocab.bpe, the byte alphabet; tokenizer.json
     5. BPE: heap-ordered merges of one piece, the piece cache
     6. Pre-tokenizers (GPT-2's, Llama 3's) and encode / decode
     7. Shards
     8. Loader
     9. JSON and text
    10. Multiple-choice sets
   ================================================================================================ */
#ifdef BT_DATA_IMPLEMENTATION
#ifndef BT_DATA_IMPLEMENTATION_DONE
#define BT_DATA_IMPLEMENTATION_DONE

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <stdarg.h>
#include <errno.h>
#include <fcntl.h>
#include <unistd.h>
#include <glob.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <locale.h>

#if !defined(_WIN32) && (!defined(_POSIX_C_SOURCE) || _POSIX_C_SOURCE < 200809L)
#error "bt_data.h needs POSIX.1-2008 (pread, readlink, sigaction): #define _POSIX_C_SOURCE 200809L before the first #include"
#endif

/* ---- 1. Common ------------------------------------------------------------------------------ */

#if defined(BT_MALLOC) && defined(BT_FREE)
#define bt__dmalloc(sz) BT_MALLOC(sz)
#define bt__dfree(p) BT_FREE(p)
#elif !defined(BT_MALLOC) && !defined(BT_FREE)
#define bt__dmalloc(sz) malloc(sz)
#define bt__dfree(p) free(p)
#else
#error "bt_data.h: define both BT_MALLOC and BT_FREE, or neither"
#endif

#ifdef __cplusplus
#define BT__THREAD_LOCAL thread_local
#else
#define BT__THREAD_LOCAL _Thread_local
#endif

static BT__THREAD_LOCAL char bt__data_errbuf[1024];

BT_DATA_DEF const char *bt_data_error(void) { return bt__data_errbuf; }

/* text[0..len) into buf[n]: whole when it fits, else its first third and the rest of the room
   from its end, cut between UTF-8 characters, "..." between */
static void bt__fit(char *buf, size_t n, const char *text, size_t len) {
    size_t head, tail;
    if (!n) return;
    if (len < n || n < 16) {
        if (len >= n) len = n - 1;
        memmove(buf, text, len);
        buf[len] = 0;
        return;
    }
    head = (n - 1) / 3;
    tail = len - (n - 1 - head - 3);
    while (head > 0 && (text[head] & 0xC0) == 0x80) head--;
    while (tail < len && (text[tail] & 0xC0) == 0x80) tail++;
    memmove(buf, text, head);
    memcpy(buf + head, "...", 3);
    memmove(buf + head + 3, text + tail, len - tail);
    buf[head + 3 + len - tail] = 0;
}
BT_DATA_DEF int bt_vmsgf(char *buf, size_t n, const char *fmt, va_list ap) {
    char local[2048], *text = local;
    va_list again;
    int len;
    va_copy(again, ap);
    len = vsnprintf(local, sizeof local, fmt, ap);
    if (len >= (int)sizeof local && (text = (char *)bt__dmalloc((size_t)len + 1)) != NULL) vsnprintf(text, (size_t)len + 1, fmt, again);
    va_end(again);
    if (len < 0) { if (n) buf[0] = 0; return len; }
    if (!text) text = local;   /* out of memory: the head only */
    bt__fit(buf, n, text, strlen(text));
    if (text != local) bt__dfree(text);
    return len;
}
BT_DATA_DEF int bt_msgf(char *buf, size_t n, const char *fmt, ...) {
    va_list ap;
    int len;
    va_start(ap, fmt);
    len = bt_vmsgf(buf, n, fmt, ap);
    va_end(ap);
    return len;
}

#if defined(__GNUC__) || defined(__clang__)
__attribute__((format(printf, 1, 2)))
#endif
static void bt__seterr(const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    bt_vmsgf(bt__data_errbuf, sizeof bt__data_errbuf, fmt, ap);
    va_end(ap);
}

/* grow *p (elements of size elt, capacity *cap) to hold at least need; 0 ok, -1 out of memory */
static int bt__grow(void **p, size_t *cap, size_t need, size_t elt) {
    size_t ncap;
    void *q;
    if (need <= *cap) return 0;
    ncap = *cap ? *cap : 16;
    while (ncap < need) {
        if (ncap > ((size_t)-1) / 2 / elt) return -1;
        ncap *= 2;
    }
    q = bt__dmalloc(ncap * elt);
    if (!q) return -1;
    if (*p && *cap) memcpy(q, *p, *cap * elt);
    bt__dfree(*p);
    *p = q;
    *cap = ncap;
    return 0;
}

/* 64-bit hash of a short byte string (pieces are a few bytes: one multiply per 8 bytes) */
static uint64_t bt__hash_bytes(const unsigned char *s, size_t n) {
    uint64_t h = 0x243F6A8885A308D3ull ^ (n * 0x9E3779B97F4A7C15ull);
    while (n >= 8) {
        uint64_t w;
        memcpy(&w, s, 8);
        h = (h ^ w) * 0xFF51AFD7ED558CCDull;
        h ^= h >> 32;
        s += 8; n -= 8;
    }
    if (n) {
        uint64_t w = 0;
        memcpy(&w, s, n);
        h = (h ^ w) * 0xC4CEB9FE1A85EC53ull;
    }
    h ^= h >> 29;
    return h;
}

static uint64_t bt__mix64(uint64_t z) {   /* splitmix64's finaliser */
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}
static uint64_t bt__rng_next(uint64_t *s) { *s += 0x9E3779B97F4A7C15ull; return bt__mix64(*s); }
/* uniform in [0, n), n >= 1, by rejection (no modulo bias) */
static uint64_t bt__rng_below(uint64_t *s, uint64_t n) {
    uint64_t lim = ((uint64_t)-1) - ((uint64_t)-1) % n, r;
    do { r = bt__rng_next(s); } while (r >= lim);
    return r % n;
}

/* ---- 2. Files ------------------------------------------------------------------------------- */

static const char *bt__file_kind(mode_t m) {
    if (S_ISDIR(m)) return "a directory";
    if (S_ISCHR(m)) return "a character device";
    if (S_ISBLK(m)) return "a block device";
    if (S_ISFIFO(m)) return "a FIFO";
    if (S_ISSOCK(m)) return "a socket";
    return "not a regular file";
}

/* the first n bytes of s as a NUL-terminated copy (BT_MALLOC); NULL when out of memory */
static char *bt__strndup(const char *s, size_t n) {
    char *p = (char *)bt__dmalloc(n + 1);
    if (p) { memcpy(p, s, n); p[n] = 0; }
    return p;
}

/* the directory part of path: "." when it has no '/', "/" for a file at the root */
static char *bt__dir_of(const char *path) {
    const char *slash = strrchr(path, '/');
    if (!slash) return bt__strndup(".", 1);
    return bt__strndup(path, slash == path ? 1 : (size_t)(slash - path));
}

/* write all n bytes (write(2) may write less); 0 ok, -1 with errno set */
static int bt__write_all(int fd, const void *buf, size_t n) {
    const char *p = (const char *)buf;
    while (n) {
        ssize_t w = write(fd, p, n > ((size_t)1 << 30) ? ((size_t)1 << 30) : n);
        if (w < 0) { if (errno == EINTR) continue; return -1; }
        p += w; n -= (size_t)w;
    }
    return 0;
}

/* read up to n bytes at offset off: the count read (less than n only at the end of the file),
   or -1 with errno set */
static int64_t bt__pread_all(int fd, void *buf, size_t n, uint64_t off) {
    size_t got = 0;
    while (got < n) {
        size_t want = n - got > ((size_t)1 << 30) ? ((size_t)1 << 30) : n - got;
        ssize_t r = pread(fd, (char *)buf + got, want, (off_t)(off + got));
        if (r < 0) { if (errno == EINTR) continue; return -1; }
        if (r == 0) break;
        got += (size_t)r;
    }
    return (int64_t)got;
}

BT_DATA_DEF int bt_input_open(const char *path, uint64_t *size) {
    struct stat st;
    int fd;
    if (!path || !*path) { bt__seterr("input path is empty"); return -1; }
    if (stat(path, &st) != 0) { bt__seterr("%s: cannot open: %s", path, strerror(errno)); return -1; }
    if (!S_ISREG(st.st_mode)) { bt__seterr("%s: is %s, not a regular file", path, bt__file_kind(st.st_mode)); return -1; }
    /* non-blocking: a file swapped for a FIFO since the stat still cannot hang the open */
    fd = open(path, O_RDONLY | O_NONBLOCK | O_CLOEXEC);
    if (fd < 0) { bt__seterr("%s: cannot open: %s", path, strerror(errno)); return -1; }
    if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
        bt__seterr("%s: not a regular file (it changed while being opened)", path);
        close(fd); return -1;
    }
    if (size) *size = (uint64_t)st.st_size;
    return fd;
}

/* the whole file, NUL-terminated; NULL (error set) on failure */
static char *bt__read_file(const char *path, size_t *len) {
    uint64_t sz;
    int64_t got;
    char *buf;
    int fd = bt_input_open(path, &sz), err;
    if (fd < 0) return NULL;
    buf = sz < (uint64_t)(size_t)-1 ? (char *)bt__dmalloc((size_t)sz + 1) : NULL;
    if (!buf) { bt__seterr("%s: out of memory reading %llu bytes", path, (unsigned long long)sz); close(fd); return NULL; }
    got = bt__pread_all(fd, buf, (size_t)sz, 0);
    err = errno;
    close(fd);
    if (got != (int64_t)sz) {
        if (got < 0) bt__seterr("%s: read error: %s", path, strerror(err));
        else bt__seterr("%s: read %lld of %llu bytes: the file shrank while being read", path, (long long)got, (unsigned long long)sz);
        bt__dfree(buf); return NULL;
    }
    buf[sz] = 0;
    *len = (size_t)sz;
    return buf;
}

/* Where a write to path lands: its symlinks followed to the final target (which need not exist
   yet; a relative link is relative to the link's directory). NULL + error on a loop. */
static char *bt__follow_links(const char *path) {
    char *cur = bt__strndup(path, strlen(path)), *target = NULL;
    int hops;
    for (hops = 0; cur; hops++) {
        struct stat ls;
        size_t cap, dl;
        ssize_t len;
        char *next;
        if (lstat(cur, &ls) != 0 || !S_ISLNK(ls.st_mode)) return cur;   /* absent, or not a link: the end */
        if (hops == 40) { bt__seterr("%s: too many levels of symbolic links", path); break; }
        cap = ls.st_size > 0 ? (size_t)ls.st_size + 1 : 4096;
        target = (char *)bt__dmalloc(cap);
        if (!target) { bt__seterr("%s: out of memory", path); break; }
        len = readlink(cur, target, cap);
        if (len < 0 || (size_t)len >= cap) { bt__seterr("%s: cannot read the symbolic link %s", path, cur); break; }
        target[len] = 0;
        dl = target[0] == '/' || !strrchr(cur, '/') ? 0 : (size_t)(strrchr(cur, '/') - cur) + 1;
        next = (char *)bt__dmalloc(dl + (size_t)len + 1);
        if (!next) { bt__seterr("%s: out of memory", path); break; }
        memcpy(next, cur, dl);
        memcpy(next + dl, target, (size_t)len + 1);
        bt__dfree(target); target = NULL;
        bt__dfree(cur); cur = next;
    }
    if (!cur) bt__seterr("%s: out of memory", path);
    bt__dfree(target); bt__dfree(cur);
    return NULL;
}

/* BT_OUTPUT_NOFOLLOW: path itself, or -1 + error when it is a symbolic link */
static char *bt__output_nofollow(const char *path) {
    struct stat ls;
    char to[512];
    ssize_t n;
    if (lstat(path, &ls) != 0 || !S_ISLNK(ls.st_mode)) return bt__strndup(path, strlen(path));
    n = readlink(path, to, sizeof to - 1);
    to[n > 0 ? n : 0] = 0;
    bt__seterr("%s: is a symbolic link (to %s): refusing to write through it or replace it", path, n > 0 ? to : "?");
    return NULL;
}

/* path checked as an output: *target is where it lands (links followed unless BT_OUTPUT_NOFOLLOW,
   BT_MALLOC'd), *mode the mode of the regular file there now (0: none yet). 0 ok, -1 + error. */
static int bt__output_target(const char *path, int flags, char **target, mode_t *mode) {
    struct stat st;
    char *real, *dir;
    const char *why = NULL;
    int err = 0;
    *target = NULL; *mode = 0;
    if (!path || !*path) { bt__seterr("output path is empty"); return -1; }
    if (path[strlen(path) - 1] == '/') { bt__seterr("%s: names a directory (it ends in '/'), not a file", path); return -1; }
    if (!(real = flags & BT_OUTPUT_NOFOLLOW ? bt__output_nofollow(path) : bt__follow_links(path))) return -1;
    if (stat(real, &st) == 0) {
        if (!S_ISREG(st.st_mode)) {
            bt__seterr("%s%s%s: is %s, not a regular file: refusing to replace it", path, strcmp(real, path) ? " -> " : "",
                       strcmp(real, path) ? real : "", bt__file_kind(st.st_mode));
            bt__dfree(real); return -1;
        }
        *mode = st.st_mode;
    } else if (errno != ENOENT) {
        bt__seterr("%s: %s", path, strerror(errno)); bt__dfree(real); return -1;
    }
    if (!(dir = bt__dir_of(real))) { bt__seterr("%s: out of memory", path); bt__dfree(real); return -1; }
    if (stat(dir, &st) != 0) { err = errno; why = err == ENOENT ? "does not exist" : "cannot be reached"; }
    else if (!S_ISDIR(st.st_mode)) { err = ENOTDIR; why = "is not a directory"; }
    else if (access(dir, W_OK | X_OK) != 0) { err = errno; why = "does not let files be created in it"; }
    if (why) {
        bt__seterr("%s: the directory %s %s (%s)", path, dir, why, strerror(err));
        bt__dfree(dir); bt__dfree(real); return -1;
    }
    bt__dfree(dir);
    *target = real;
    return 0;
}

BT_DATA_DEF int bt_output_check_flags(const char *path, int flags) {
    char *target;
    mode_t mode;
    if (bt__output_target(path, flags, &target, &mode)) return -1;
    bt__dfree(target);
    return 0;
}
BT_DATA_DEF int bt_output_check(const char *path) { return bt_output_check_flags(path, 0); }

BT_DATA_DEF int bt_output_dir(const char *dir) {
    struct stat st;
    char *p;
    size_t n, i;
    int mkerr = 0;
    if (!dir || !*dir) { bt__seterr("output directory name is empty"); return -1; }
    n = strlen(dir);
    if (!(p = bt__strndup(dir, n))) { bt__seterr("%s: out of memory", dir); return -1; }
    for (i = 1; i <= n; i++)   /* mkdir -p: every prefix that ends before a '/', then the whole */
        if (i == n || (p[i] == '/' && p[i - 1] != '/')) {
            char c = p[i];
            p[i] = 0;
            if (mkdir(p, 0777) != 0 && errno != EEXIST && !mkerr) mkerr = errno;
            p[i] = c;
        }
    bt__dfree(p);
    if (stat(dir, &st) != 0) { bt__seterr("%s: cannot make the directory: %s", dir, strerror(mkerr ? mkerr : errno)); return -1; }
    if (!S_ISDIR(st.st_mode)) { bt__seterr("%s: is %s, not a directory", dir, bt__file_kind(st.st_mode)); return -1; }
    if (access(dir, W_OK | X_OK) != 0) { bt__seterr("%s: cannot create files in the directory: %s", dir, strerror(errno)); return -1; }
    return 0;
}

BT_DATA_DEF int bt_output_open_flags(const char *path, int append, int flags) {
    struct stat st;
    int fd, nofollow = flags & BT_OUTPUT_NOFOLLOW ? O_NOFOLLOW : 0;
    if (bt_output_check_flags(path, flags)) return -1;
    fd = open(path, O_WRONLY | O_CREAT | O_NONBLOCK | O_CLOEXEC | nofollow | (append ? O_APPEND : O_TRUNC), 0666);
    if (fd < 0 && nofollow && errno == ELOOP) { bt__seterr("%s: is a symbolic link: refusing to write through it", path); return -1; }
    if (fd < 0) { bt__seterr("%s: cannot open for writing: %s", path, strerror(errno)); return -1; }
    if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
        bt__seterr("%s: not a regular file (it changed while being opened)", path);
        close(fd); return -1;
    }
    return fd;
}
BT_DATA_DEF int bt_output_open(const char *path, int append) { return bt_output_open_flags(path, append, 0); }

/* The registry of open temporaries, for bt_atomic_cleanup in a signal handler: fixed slots (no
   allocation), each a state word changed only by atomic compare-and-swap, so any thread and any
   handler may use it at once. A slot goes FREE -> CLAIMED (its name being written) -> LIVE ->
   FREE (committed or aborted by its owner), or LIVE -> CLEANING -> CLEANED (a handler unlinked
   the temporary) -> FREE (its owner sees that and fails). */
#define BT__TMP_NAME_MAX 4096
enum { BT__TMPREG_FREE, BT__TMPREG_CLAIMED, BT__TMPREG_LIVE, BT__TMPREG_CLEANING, BT__TMPREG_CLEANED };
static int bt__tmpreg_state[BT_ATOMIC_MAX_OPEN];
static char bt__tmpreg_name[BT_ATOMIC_MAX_OPEN][BT__TMP_NAME_MAX];
static unsigned bt__tmp_counter;
/* threads between registering a temporary's name and creating its file: a handler's cleanup waits for
   them, or a file created just after its unlink would outlive the process (the opener blocks SIGINT
   and SIGTERM meanwhile, so the handler never waits on its own thread) */
static int bt__tmp_opening;
/* set by bt_atomic_cleanup_exit: no new temporary. An opener adds itself to bt__tmp_opening and then
   reads this; the exit sets it and then reads bt__tmp_opening (both sequentially consistent): either
   the opener sees it and creates nothing, or the exit sees the opener and waits to unlink its file */
static int bt__tmp_closed;

static int bt__data_cas(int *p, int expect, int desired) {
    return __atomic_compare_exchange_n(p, &expect, desired, 0, __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE);
}
static int bt__tmpreg_take(const char *name) {
    int i;
    for (i = 0; i < BT_ATOMIC_MAX_OPEN; i++)
        if (bt__data_cas(&bt__tmpreg_state[i], BT__TMPREG_FREE, BT__TMPREG_CLAIMED)) {
            memcpy(bt__tmpreg_name[i], name, strlen(name) + 1);
            __atomic_store_n(&bt__tmpreg_state[i], BT__TMPREG_LIVE, __ATOMIC_RELEASE);
            return i;
        }
    return -1;
}
static int bt__tmpreg_cleaned(int i) { return __atomic_load_n(&bt__tmpreg_state[i], __ATOMIC_ACQUIRE) >= BT__TMPREG_CLEANING; }
/* give slot i back; 1 if a signal's cleanup unlinked its temporary meanwhile */
static int bt__tmpreg_give(int i) {
    for (;;) {   /* CLEANING: a handler on another thread is unlinking it now; it ends soon */
        int s = __atomic_load_n(&bt__tmpreg_state[i], __ATOMIC_ACQUIRE);
        if (s == BT__TMPREG_LIVE && bt__data_cas(&bt__tmpreg_state[i], BT__TMPREG_LIVE, BT__TMPREG_FREE)) return 0;
        if (s == BT__TMPREG_CLEANED) { __atomic_store_n(&bt__tmpreg_state[i], BT__TMPREG_FREE, __ATOMIC_RELEASE); return 1; }
    }
}

BT_DATA_DEF void bt_atomic_cleanup(void) {
    int i, saved = errno;
    while (__atomic_load_n(&bt__tmp_opening, __ATOMIC_SEQ_CST) > 0) { }   /* an open(2) of a regular file: short */
    for (i = 0; i < BT_ATOMIC_MAX_OPEN; i++)
        if (bt__data_cas(&bt__tmpreg_state[i], BT__TMPREG_LIVE, BT__TMPREG_CLEANING)) {
            unlink(bt__tmpreg_name[i]);
            __atomic_store_n(&bt__tmpreg_state[i], BT__TMPREG_CLEANED, __ATOMIC_RELEASE);
        }
    errno = saved;
}

BT_DATA_DEF void bt_atomic_cleanup_exit(void) {
    __atomic_store_n(&bt__tmp_closed, 1, __ATOMIC_SEQ_CST);
    bt_atomic_cleanup();
}

struct bt_atomic_file {
    int fd, slot;
    int err;                  /* errno of the first failed write; 0 while all went well */
    char *path, *target, *tmp;    /* as given, links followed, the temporary */
};

static void bt__atomic_free(bt_atomic_file *f) {
    bt__dfree(f->path); bt__dfree(f->target); bt__dfree(f->tmp); bt__dfree(f);
}

BT_DATA_DEF void bt_atomic_abort(bt_atomic_file *f) {
    if (!f) return;
    if (f->fd >= 0) close(f->fd);
    if (f->slot >= 0) {
        if (!bt__tmpreg_cleaned(f->slot)) unlink(f->tmp);
        bt__tmpreg_give(f->slot);
    }
    bt__atomic_free(f);
}

/* f->tmp: a fresh temporary beside f->target, registered before it exists (from then on a signal's
   cleanup removes it), created with O_EXCL; f->fd, f->slot set. -1 with the message set */
static int bt__atomic_create(bt_atomic_file *f, size_t cap, mode_t mode, const char *path) {
    int tries;
    if (__atomic_load_n(&bt__tmp_closed, __ATOMIC_SEQ_CST)) { bt__seterr("%s: interrupted by a signal (the process is ending)", path); return -1; }
    for (tries = 0; tries < 1000 && f->fd < 0; tries++) {
        unsigned k = __atomic_fetch_add(&bt__tmp_counter, 1u, __ATOMIC_RELAXED);
        int err;
        snprintf(f->tmp, cap, "%s.tmp.%ld.%u", f->target, (long)getpid(), k);
        /* listed before it exists: from here on a signal's cleanup removes it */
        if ((f->slot = bt__tmpreg_take(f->tmp)) < 0) {
            bt__seterr("%s: more than %d atomic files are open at once (BT_ATOMIC_MAX_OPEN)", path, BT_ATOMIC_MAX_OPEN);
            return -1;
        }
        f->fd = open(f->tmp, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, mode ? (mode & 0777) : 0666);
        if (f->fd >= 0) break;
        err = errno;
        bt__tmpreg_give(f->slot); f->slot = -1;
        if (err != EEXIST) {   /* EEXIST: a dead process with our pid left that name; take the next */
            bt__seterr("%s: cannot create the temporary %s: %s", path, f->tmp, strerror(err));
            return -1;
        }
    }
    return 0;
}
BT_DATA_DEF bt_atomic_file *bt_atomic_open_flags(const char *path, int flags) {
    bt_atomic_file *f;
    char *target;
    mode_t mode;
    size_t cap;
    if (bt__output_target(path, flags, &target, &mode)) return NULL;
    cap = strlen(target) + 64;
    f = (bt_atomic_file *)bt__dmalloc(sizeof *f);
    if (f) { f->fd = -1; f->slot = -1; f->err = 0; f->target = target; f->path = bt__strndup(path, strlen(path)); f->tmp = (char *)bt__dmalloc(cap); }
    if (!f || !f->path || !f->tmp) { bt__seterr("%s: out of memory", path); if (f) bt__atomic_free(f); else bt__dfree(target); return NULL; }
    if (cap > BT__TMP_NAME_MAX) { bt__seterr("%s: the path is too long (%zu bytes)", path, strlen(target)); bt__atomic_free(f); return NULL; }
    sigset_t block, old;   /* see bt__tmp_opening */
    sigemptyset(&block); sigaddset(&block, SIGINT); sigaddset(&block, SIGTERM);
    pthread_sigmask(SIG_BLOCK, &block, &old);
    __atomic_fetch_add(&bt__tmp_opening, 1, __ATOMIC_SEQ_CST);
    int failed = bt__atomic_create(f, cap, mode, path);
    __atomic_fetch_sub(&bt__tmp_opening, 1, __ATOMIC_ACQ_REL);
    pthread_sigmask(SIG_SETMASK, &old, NULL);
    if (failed) { bt__atomic_free(f); return NULL; }
    if (f->fd < 0) { bt__seterr("%s: no free temporary name beside it", path); bt__atomic_free(f); return NULL; }
    if (mode) (void)fchmod(f->fd, mode & 0777);   /* the replacement keeps the old file's permissions (umask aside) */
    if (bt__tmpreg_cleaned(f->slot)) { bt__seterr("%s: interrupted by a signal", path); bt_atomic_abort(f); return NULL; }
    return f;
}
BT_DATA_DEF bt_atomic_file *bt_atomic_open(const char *path) { return bt_atomic_open_flags(path, 0); }

BT_DATA_DEF int bt_atomic_write(bt_atomic_file *f, const void *buf, size_t n) {
    if (!f) { bt__seterr("bt_atomic_write: NULL file"); return -1; }
    if (!f->err && n && !buf) f->err = EFAULT;
    if (!f->err && bt__write_all(f->fd, buf, n) != 0) f->err = errno ? errno : EIO;
    if (f->err) { bt__seterr("%s: write error on the temporary %s: %s", f->path, f->tmp, strerror(f->err)); return -1; }
    return 0;
}

BT_DATA_DEF int bt_atomic_fd(bt_atomic_file *f) { return f ? f->fd : -1; }

/* fsync the directory that holds target, so that the rename itself survives a power cut (a file
   system that cannot sync directories, EINVAL, is not an error) */
static int bt__sync_dir(const char *path, const char *target) {
    char *dir = bt__dir_of(target);
    int fd = dir ? open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC) : -1, rc = 0;
    if (fd >= 0 && fsync(fd) != 0 && errno != EINVAL) {
        bt__seterr("%s: written, but syncing its directory %s failed: %s", path, dir, strerror(errno));
        rc = -1;
    }
    if (fd >= 0) close(fd);
    bt__dfree(dir);
    return rc;
}

BT_DATA_DEF int bt_atomic_commit(bt_atomic_file *f) {
    const char *what = NULL;
    int err = 0, rc;
    if (!f) { bt__seterr("bt_atomic_commit: NULL file"); return -1; }
    if (f->err) { err = f->err; what = "a write failed"; }
    else if (fsync(f->fd) != 0) { err = errno; what = "cannot sync the temporary to disk"; }
    if (close(f->fd) != 0 && !what) { err = errno; what = "cannot close the temporary"; }
    f->fd = -1;
    if (!what && bt__tmpreg_cleaned(f->slot)) { err = EINTR; what = "a signal removed the temporary"; }
    if (!what && rename(f->tmp, f->target) != 0) { err = errno; what = "cannot rename the temporary over it"; }
    if (what) {
        bt__seterr("%s: not written (%s %s: %s); any previous file is unchanged", f->path, what, f->tmp, strerror(err));
        bt_atomic_abort(f);
        return -1;
    }
    bt__tmpreg_give(f->slot);
    rc = bt__sync_dir(f->path, f->target);
    bt__atomic_free(f);
    return rc;
}

/* the dispositions SIGINT and SIGTERM had before bt_atomic_install_signal_cleanup */
static struct sigaction bt__atomic_prev_action[2];
static int bt__atomic_signals_installed;

static void bt__atomic_on_signal(int sig, siginfo_t *info, void *ctx) {
    const struct sigaction *prev = &bt__atomic_prev_action[sig == SIGTERM];
    int ends = !(prev->sa_flags & SA_SIGINFO) && prev->sa_handler == SIG_DFL;   /* the default action: the process ends */
    if (ends) bt_atomic_cleanup_exit();
    else bt_atomic_cleanup();
    if (prev->sa_flags & SA_SIGINFO) { if (prev->sa_sigaction) prev->sa_sigaction(sig, info, ctx); }
    else if (ends) {   /* the default action, once this handler returns */
        sigaction(sig, prev, NULL);
        raise(sig);
    } else if (prev->sa_handler != SIG_IGN) prev->sa_handler(sig);
}

BT_DATA_DEF int bt_atomic_install_signal_cleanup(void) {
    static const int sigs[2] = {SIGINT, SIGTERM};
    int k;
    if (!bt__data_cas(&bt__atomic_signals_installed, 0, 1)) return 0;
    for (k = 0; k < 2; k++) {
        struct sigaction sa;
        if (sigaction(sigs[k], NULL, &bt__atomic_prev_action[k]) != 0) { bt__seterr("sigaction: %s", strerror(errno)); return -1; }
        if (!(bt__atomic_prev_action[k].sa_flags & SA_SIGINFO) && bt__atomic_prev_action[k].sa_handler == SIG_IGN) continue;
        memset(&sa, 0, sizeof sa);
        sa.sa_sigaction = bt__atomic_on_signal;
        sa.sa_flags = SA_SIGINFO | SA_RESTART;
        sigemptyset(&sa.sa_mask);
        sigaddset(&sa.sa_mask, SIGINT);
        sigaddset(&sa.sa_mask, SIGTERM);
        if (sigaction(sigs[k], &sa, NULL) != 0) { bt__seterr("sigaction: %s", strerror(errno)); return -1; }
    }
    return 0;
}

/* ---- 3. Unicode classes and UTF-8 ------------------------------------------------------------ */

enum { BT__OTHER = 0, BT__LETTER = 1, BT__NUMBER = 2, BT__SPACE = 3 };

/* BEGIN GENERATED UNICODE TABLE (tools/gen_unicode_table.py) */
/* Unicode 15.0.0: 806 runs; 136104 letters (L), 1831 numbers (N), 25 White_Space (S).
   Each entry: {first code point, last code point << 8 | class}, class 1=L 2=N 3=S. */
#define BT__UNICODE_VERSION "15.0.0"
#define BT__UNICODE_NRUNS 806
static const uint32_t bt__unicode_runs[BT__UNICODE_NRUNS][2] = {
    {0x9,0xD03},{0x20,0x2003},{0x30,0x3902},{0x41,0x5A01},{0x61,0x7A01},{0x85,0x8503},
    {0xA0,0xA003},{0xAA,0xAA01},{0xB2,0xB302},{0xB5,0xB501},{0xB9,0xB902},{0xBA,0xBA01},
    {0xBC,0xBE02},{0xC0,0xD601},{0xD8,0xF601},{0xF8,0x2C101},{0x2C6,0x2D101},{0x2E0,0x2E401},
    {0x2EC,0x2EC01},{0x2EE,0x2EE01},{0x370,0x37401},{0x376,0x37701},{0x37A,0x37D01},{0x37F,0x37F01},
    {0x386,0x38601},{0x388,0x38A01},{0x38C,0x38C01},{0x38E,0x3A101},{0x3A3,0x3F501},{0x3F7,0x48101},
    {0x48A,0x52F01},{0x531,0x55601},{0x559,0x55901},{0x560,0x58801},{0x5D0,0x5EA01},{0x5EF,0x5F201},
    {0x620,0x64A01},{0x660,0x66902},{0x66E,0x66F01},{0x671,0x6D301},{0x6D5,0x6D501},{0x6E5,0x6E601},
    {0x6EE,0x6EF01},{0x6F0,0x6F902},{0x6FA,0x6FC01},{0x6FF,0x6FF01},{0x710,0x71001},{0x712,0x72F01},
    {0x74D,0x7A501},{0x7B1,0x7B101},{0x7C0,0x7C902},{0x7CA,0x7EA01},{0x7F4,0x7F501},{0x7FA,0x7FA01},
    {0x800,0x81501},{0x81A,0x81A01},{0x824,0x82401},{0x828,0x82801},{0x840,0x85801},{0x860,0x86A01},
    {0x870,0x88701},{0x889,0x88E01},{0x8A0,0x8C901},{0x904,0x93901},{0x93D,0x93D01},{0x950,0x95001},
    {0x958,0x96101},{0x966,0x96F02},{0x971,0x98001},{0x985,0x98C01},{0x98F,0x99001},{0x993,0x9A801},
    {0x9AA,0x9B001},{0x9B2,0x9B201},{0x9B6,0x9B901},{0x9BD,0x9BD01},{0x9CE,0x9CE01},{0x9DC,0x9DD01},
    {0x9DF,0x9E101},{0x9E6,0x9EF02},{0x9F0,0x9F101},{0x9F4,0x9F902},{0x9FC,0x9FC01},{0xA05,0xA0A01},
    {0xA0F,0xA1001},{0xA13,0xA2801},{0xA2A,0xA3001},{0xA32,0xA3301},{0xA35,0xA3601},{0xA38,0xA3901},
    {0xA59,0xA5C01},{0xA5E,0xA5E01},{0xA66,0xA6F02},{0xA72,0xA7401},{0xA85,0xA8D01},{0xA8F,0xA9101},
    {0xA93,0xAA801},{0xAAA,0xAB001},{0xAB2,0xAB301},{0xAB5,0xAB901},{0xABD,0xABD01},{0xAD0,0xAD001},
    {0xAE0,0xAE101},{0xAE6,0xAEF02},{0xAF9,0xAF901},{0xB05,0xB0C01},{0xB0F,0xB1001},{0xB13,0xB2801},
    {0xB2A,0xB3001},{0xB32,0xB3301},{0xB35,0xB3901},{0xB3D,0xB3D01},{0xB5C,0xB5D01},{0xB5F,0xB6101},
    {0xB66,0xB6F02},{0xB71,0xB7101},{0xB72,0xB7702},{0xB83,0xB8301},{0xB85,0xB8A01},{0xB8E,0xB9001},
    {0xB92,0xB9501},{0xB99,0xB9A01},{0xB9C,0xB9C01},{0xB9E,0xB9F01},{0xBA3,0xBA401},{0xBA8,0xBAA01},
    {0xBAE,0xBB901},{0xBD0,0xBD001},{0xBE6,0xBF202},{0xC05,0xC0C01},{0xC0E,0xC1001},{0xC12,0xC2801},
    {0xC2A,0xC3901},{0xC3D,0xC3D01},{0xC58,0xC5A01},{0xC5D,0xC5D01},{0xC60,0xC6101},{0xC66,0xC6F02},
    {0xC78,0xC7E02},{0xC80,0xC8001},{0xC85,0xC8C01},{0xC8E,0xC9001},{0xC92,0xCA801},{0xCAA,0xCB301},
    {0xCB5,0xCB901},{0xCBD,0xCBD01},{0xCDD,0xCDE01},{0xCE0,0xCE101},{0xCE6,0xCEF02},{0xCF1,0xCF201},
    {0xD04,0xD0C01},{0xD0E,0xD1001},{0xD12,0xD3A01},{0xD3D,0xD3D01},{0xD4E,0xD4E01},{0xD54,0xD5601},
    {0xD58,0xD5E02},{0xD5F,0xD6101},{0xD66,0xD7802},{0xD7A,0xD7F01},{0xD85,0xD9601},{0xD9A,0xDB101},
    {0xDB3,0xDBB01},{0xDBD,0xDBD01},{0xDC0,0xDC601},{0xDE6,0xDEF02},{0xE01,0xE3001},{0xE32,0xE3301},
    {0xE40,0xE4601},{0xE50,0xE5902},{0xE81,0xE8201},{0xE84,0xE8401},{0xE86,0xE8A01},{0xE8C,0xEA301},
    {0xEA5,0xEA501},{0xEA7,0xEB001},{0xEB2,0xEB301},{0xEBD,0xEBD01},{0xEC0,0xEC401},{0xEC6,0xEC601},
    {0xED0,0xED902},{0xEDC,0xEDF01},{0xF00,0xF0001},{0xF20,0xF3302},{0xF40,0xF4701},{0xF49,0xF6C01},
    {0xF88,0xF8C01},{0x1000,0x102A01},{0x103F,0x103F01},{0x1040,0x104902},{0x1050,0x105501},{0x105A,0x105D01},
    {0x1061,0x106101},{0x1065,0x106601},{0x106E,0x107001},{0x1075,0x108101},{0x108E,0x108E01},{0x1090,0x109902},
    {0x10A0,0x10C501},{0x10C7,0x10C701},{0x10CD,0x10CD01},{0x10D0,0x10FA01},{0x10FC,0x124801},{0x124A,0x124D01},
    {0x1250,0x125601},{0x1258,0x125801},{0x125A,0x125D01},{0x1260,0x128801},{0x128A,0x128D01},{0x1290,0x12B001},
    {0x12B2,0x12B501},{0x12B8,0x12BE01},{0x12C0,0x12C001},{0x12C2,0x12C501},{0x12C8,0x12D601},{0x12D8,0x131001},
    {0x1312,0x131501},{0x1318,0x135A01},{0x1369,0x137C02},{0x1380,0x138F01},{0x13A0,0x13F501},{0x13F8,0x13FD01},
    {0x1401,0x166C01},{0x166F,0x167F01},{0x1680,0x168003},{0x1681,0x169A01},{0x16A0,0x16EA01},{0x16EE,0x16F002},
    {0x16F1,0x16F801},{0x1700,0x171101},{0x171F,0x173101},{0x1740,0x175101},{0x1760,0x176C01},{0x176E,0x177001},
    {0x1780,0x17B301},{0x17D7,0x17D701},{0x17DC,0x17DC01},{0x17E0,0x17E902},{0x17F0,0x17F902},{0x1810,0x181902},
    {0x1820,0x187801},{0x1880,0x188401},{0x1887,0x18A801},{0x18AA,0x18AA01},{0x18B0,0x18F501},{0x1900,0x191E01},
    {0x1946,0x194F02},{0x1950,0x196D01},{0x1970,0x197401},{0x1980,0x19AB01},{0x19B0,0x19C901},{0x19D0,0x19DA02},
    {0x1A00,0x1A1601},{0x1A20,0x1A5401},{0x1A80,0x1A8902},{0x1A90,0x1A9902},{0x1AA7,0x1AA701},{0x1B05,0x1B3301},
    {0x1B45,0x1B4C01},{0x1B50,0x1B5902},{0x1B83,0x1BA001},{0x1BAE,0x1BAF01},{0x1BB0,0x1BB902},{0x1BBA,0x1BE501},
    {0x1C00,0x1C2301},{0x1C40,0x1C4902},{0x1C4D,0x1C4F01},{0x1C50,0x1C5902},{0x1C5A,0x1C7D01},{0x1C80,0x1C8801},
    {0x1C90,0x1CBA01},{0x1CBD,0x1CBF01},{0x1CE9,0x1CEC01},{0x1CEE,0x1CF301},{0x1CF5,0x1CF601},{0x1CFA,0x1CFA01},
    {0x1D00,0x1DBF01},{0x1E00,0x1F1501},{0x1F18,0x1F1D01},{0x1F20,0x1F4501},{0x1F48,0x1F4D01},{0x1F50,0x1F5701},
    {0x1F59,0x1F5901},{0x1F5B,0x1F5B01},{0x1F5D,0x1F5D01},{0x1F5F,0x1F7D01},{0x1F80,0x1FB401},{0x1FB6,0x1FBC01},
    {0x1FBE,0x1FBE01},{0x1FC2,0x1FC401},{0x1FC6,0x1FCC01},{0x1FD0,0x1FD301},{0x1FD6,0x1FDB01},{0x1FE0,0x1FEC01},
    {0x1FF2,0x1FF401},{0x1FF6,0x1FFC01},{0x2000,0x200A03},{0x2028,0x202903},{0x202F,0x202F03},{0x205F,0x205F03},
    {0x2070,0x207002},{0x2071,0x207101},{0x2074,0x207902},{0x207F,0x207F01},{0x2080,0x208902},{0x2090,0x209C01},
    {0x2102,0x210201},{0x2107,0x210701},{0x210A,0x211301},{0x2115,0x211501},{0x2119,0x211D01},{0x2124,0x212401},
    {0x2126,0x212601},{0x2128,0x212801},{0x212A,0x212D01},{0x212F,0x213901},{0x213C,0x213F01},{0x2145,0x214901},
    {0x214E,0x214E01},{0x2150,0x218202},{0x2183,0x218401},{0x2185,0x218902},{0x2460,0x249B02},{0x24EA,0x24FF02},
    {0x2776,0x279302},{0x2C00,0x2CE401},{0x2CEB,0x2CEE01},{0x2CF2,0x2CF301},{0x2CFD,0x2CFD02},{0x2D00,0x2D2501},
    {0x2D27,0x2D2701},{0x2D2D,0x2D2D01},{0x2D30,0x2D6701},{0x2D6F,0x2D6F01},{0x2D80,0x2D9601},{0x2DA0,0x2DA601},
    {0x2DA8,0x2DAE01},{0x2DB0,0x2DB601},{0x2DB8,0x2DBE01},{0x2DC0,0x2DC601},{0x2DC8,0x2DCE01},{0x2DD0,0x2DD601},
    {0x2DD8,0x2DDE01},{0x2E2F,0x2E2F01},{0x3000,0x300003},{0x3005,0x300601},{0x3007,0x300702},{0x3021,0x302902},
    {0x3031,0x303501},{0x3038,0x303A02},{0x303B,0x303C01},{0x3041,0x309601},{0x309D,0x309F01},{0x30A1,0x30FA01},
    {0x30FC,0x30FF01},{0x3105,0x312F01},{0x3131,0x318E01},{0x3192,0x319502},{0x31A0,0x31BF01},{0x31F0,0x31FF01},
    {0x3220,0x322902},{0x3248,0x324F02},{0x3251,0x325F02},{0x3280,0x328902},{0x32B1,0x32BF02},{0x3400,0x4DBF01},
    {0x4E00,0xA48C01},{0xA4D0,0xA4FD01},{0xA500,0xA60C01},{0xA610,0xA61F01},{0xA620,0xA62902},{0xA62A,0xA62B01},
    {0xA640,0xA66E01},{0xA67F,0xA69D01},{0xA6A0,0xA6E501},{0xA6E6,0xA6EF02},{0xA717,0xA71F01},{0xA722,0xA78801},
    {0xA78B,0xA7CA01},{0xA7D0,0xA7D101},{0xA7D3,0xA7D301},{0xA7D5,0xA7D901},{0xA7F2,0xA80101},{0xA803,0xA80501},
    {0xA807,0xA80A01},{0xA80C,0xA82201},{0xA830,0xA83502},{0xA840,0xA87301},{0xA882,0xA8B301},{0xA8D0,0xA8D902},
    {0xA8F2,0xA8F701},{0xA8FB,0xA8FB01},{0xA8FD,0xA8FE01},{0xA900,0xA90902},{0xA90A,0xA92501},{0xA930,0xA94601},
    {0xA960,0xA97C01},{0xA984,0xA9B201},{0xA9CF,0xA9CF01},{0xA9D0,0xA9D902},{0xA9E0,0xA9E401},{0xA9E6,0xA9EF01},
    {0xA9F0,0xA9F902},{0xA9FA,0xA9FE01},{0xAA00,0xAA2801},{0xAA40,0xAA4201},{0xAA44,0xAA4B01},{0xAA50,0xAA5902},
    {0xAA60,0xAA7601},{0xAA7A,0xAA7A01},{0xAA7E,0xAAAF01},{0xAAB1,0xAAB101},{0xAAB5,0xAAB601},{0xAAB9,0xAABD01},
    {0xAAC0,0xAAC001},{0xAAC2,0xAAC201},{0xAADB,0xAADD01},{0xAAE0,0xAAEA01},{0xAAF2,0xAAF401},{0xAB01,0xAB0601},
    {0xAB09,0xAB0E01},{0xAB11,0xAB1601},{0xAB20,0xAB2601},{0xAB28,0xAB2E01},{0xAB30,0xAB5A01},{0xAB5C,0xAB6901},
    {0xAB70,0xABE201},{0xABF0,0xABF902},{0xAC00,0xD7A301},{0xD7B0,0xD7C601},{0xD7CB,0xD7FB01},{0xF900,0xFA6D01},
    {0xFA70,0xFAD901},{0xFB00,0xFB0601},{0xFB13,0xFB1701},{0xFB1D,0xFB1D01},{0xFB1F,0xFB2801},{0xFB2A,0xFB3601},
    {0xFB38,0xFB3C01},{0xFB3E,0xFB3E01},{0xFB40,0xFB4101},{0xFB43,0xFB4401},{0xFB46,0xFBB101},{0xFBD3,0xFD3D01},
    {0xFD50,0xFD8F01},{0xFD92,0xFDC701},{0xFDF0,0xFDFB01},{0xFE70,0xFE7401},{0xFE76,0xFEFC01},{0xFF10,0xFF1902},
    {0xFF21,0xFF3A01},{0xFF41,0xFF5A01},{0xFF66,0xFFBE01},{0xFFC2,0xFFC701},{0xFFCA,0xFFCF01},{0xFFD2,0xFFD701},
    {0xFFDA,0xFFDC01},{0x10000,0x1000B01},{0x1000D,0x1002601},{0x10028,0x1003A01},{0x1003C,0x1003D01},{0x1003F,0x1004D01},
    {0x10050,0x1005D01},{0x10080,0x100FA01},{0x10107,0x1013302},{0x10140,0x1017802},{0x1018A,0x1018B02},{0x10280,0x1029C01},
    {0x102A0,0x102D001},{0x102E1,0x102FB02},{0x10300,0x1031F01},{0x10320,0x1032302},{0x1032D,0x1034001},{0x10341,0x1034102},
    {0x10342,0x1034901},{0x1034A,0x1034A02},{0x10350,0x1037501},{0x10380,0x1039D01},{0x103A0,0x103C301},{0x103C8,0x103CF01},
    {0x103D1,0x103D502},{0x10400,0x1049D01},{0x104A0,0x104A902},{0x104B0,0x104D301},{0x104D8,0x104FB01},{0x10500,0x1052701},
    {0x10530,0x1056301},{0x10570,0x1057A01},{0x1057C,0x1058A01},{0x1058C,0x1059201},{0x10594,0x1059501},{0x10597,0x105A101},
    {0x105A3,0x105B101},{0x105B3,0x105B901},{0x105BB,0x105BC01},{0x10600,0x1073601},{0x10740,0x1075501},{0x10760,0x1076701},
    {0x10780,0x1078501},{0x10787,0x107B001},{0x107B2,0x107BA01},{0x10800,0x1080501},{0x10808,0x1080801},{0x1080A,0x1083501},
    {0x10837,0x1083801},{0x1083C,0x1083C01},{0x1083F,0x1085501},{0x10858,0x1085F02},{0x10860,0x1087601},{0x10879,0x1087F02},
    {0x10880,0x1089E01},{0x108A7,0x108AF02},{0x108E0,0x108F201},{0x108F4,0x108F501},{0x108FB,0x108FF02},{0x10900,0x1091501},
    {0x10916,0x1091B02},{0x10920,0x1093901},{0x10980,0x109B701},{0x109BC,0x109BD02},{0x109BE,0x109BF01},{0x109C0,0x109CF02},
    {0x109D2,0x109FF02},{0x10A00,0x10A0001},{0x10A10,0x10A1301},{0x10A15,0x10A1701},{0x10A19,0x10A3501},{0x10A40,0x10A4802},
    {0x10A60,0x10A7C01},{0x10A7D,0x10A7E02},{0x10A80,0x10A9C01},{0x10A9D,0x10A9F02},{0x10AC0,0x10AC701},{0x10AC9,0x10AE401},
    {0x10AEB,0x10AEF02},{0x10B00,0x10B3501},{0x10B40,0x10B5501},{0x10B58,0x10B5F02},{0x10B60,0x10B7201},{0x10B78,0x10B7F02},
    {0x10B80,0x10B9101},{0x10BA9,0x10BAF02},{0x10C00,0x10C4801},{0x10C80,0x10CB201},{0x10CC0,0x10CF201},{0x10CFA,0x10CFF02},
    {0x10D00,0x10D2301},{0x10D30,0x10D3902},{0x10E60,0x10E7E02},{0x10E80,0x10EA901},{0x10EB0,0x10EB101},{0x10F00,0x10F1C01},
    {0x10F1D,0x10F2602},{0x10F27,0x10F2701},{0x10F30,0x10F4501},{0x10F51,0x10F5402},{0x10F70,0x10F8101},{0x10FB0,0x10FC401},
    {0x10FC5,0x10FCB02},{0x10FE0,0x10FF601},{0x11003,0x1103701},{0x11052,0x1106F02},{0x11071,0x1107201},{0x11075,0x1107501},
    {0x11083,0x110AF01},{0x110D0,0x110E801},{0x110F0,0x110F902},{0x11103,0x1112601},{0x11136,0x1113F02},{0x11144,0x1114401},
    {0x11147,0x1114701},{0x11150,0x1117201},{0x11176,0x1117601},{0x11183,0x111B201},{0x111C1,0x111C401},{0x111D0,0x111D902},
    {0x111DA,0x111DA01},{0x111DC,0x111DC01},{0x111E1,0x111F402},{0x11200,0x1121101},{0x11213,0x1122B01},{0x1123F,0x1124001},
    {0x11280,0x1128601},{0x11288,0x1128801},{0x1128A,0x1128D01},{0x1128F,0x1129D01},{0x1129F,0x112A801},{0x112B0,0x112DE01},
    {0x112F0,0x112F902},{0x11305,0x1130C01},{0x1130F,0x1131001},{0x11313,0x1132801},{0x1132A,0x1133001},{0x11332,0x1133301},
    {0x11335,0x1133901},{0x1133D,0x1133D01},{0x11350,0x1135001},{0x1135D,0x1136101},{0x11400,0x1143401},{0x11447,0x1144A01},
    {0x11450,0x1145902},{0x1145F,0x1146101},{0x11480,0x114AF01},{0x114C4,0x114C501},{0x114C7,0x114C701},{0x114D0,0x114D902},
    {0x11580,0x115AE01},{0x115D8,0x115DB01},{0x11600,0x1162F01},{0x11644,0x1164401},{0x11650,0x1165902},{0x11680,0x116AA01},
    {0x116B8,0x116B801},{0x116C0,0x116C902},{0x11700,0x1171A01},{0x11730,0x1173B02},{0x11740,0x1174601},{0x11800,0x1182B01},
    {0x118A0,0x118DF01},{0x118E0,0x118F202},{0x118FF,0x1190601},{0x11909,0x1190901},{0x1190C,0x1191301},{0x11915,0x1191601},
    {0x11918,0x1192F01},{0x1193F,0x1193F01},{0x11941,0x1194101},{0x11950,0x1195902},{0x119A0,0x119A701},{0x119AA,0x119D001},
    {0x119E1,0x119E101},{0x119E3,0x119E301},{0x11A00,0x11A0001},{0x11A0B,0x11A3201},{0x11A3A,0x11A3A01},{0x11A50,0x11A5001},
    {0x11A5C,0x11A8901},{0x11A9D,0x11A9D01},{0x11AB0,0x11AF801},{0x11C00,0x11C0801},{0x11C0A,0x11C2E01},{0x11C40,0x11C4001},
    {0x11C50,0x11C6C02},{0x11C72,0x11C8F01},{0x11D00,0x11D0601},{0x11D08,0x11D0901},{0x11D0B,0x11D3001},{0x11D46,0x11D4601},
    {0x11D50,0x11D5902},{0x11D60,0x11D6501},{0x11D67,0x11D6801},{0x11D6A,0x11D8901},{0x11D98,0x11D9801},{0x11DA0,0x11DA902},
    {0x11EE0,0x11EF201},{0x11F02,0x11F0201},{0x11F04,0x11F1001},{0x11F12,0x11F3301},{0x11F50,0x11F5902},{0x11FB0,0x11FB001},
    {0x11FC0,0x11FD402},{0x12000,0x1239901},{0x12400,0x1246E02},{0x12480,0x1254301},{0x12F90,0x12FF001},{0x13000,0x1342F01},
    {0x13441,0x1344601},{0x14400,0x1464601},{0x16800,0x16A3801},{0x16A40,0x16A5E01},{0x16A60,0x16A6902},{0x16A70,0x16ABE01},
    {0x16AC0,0x16AC902},{0x16AD0,0x16AED01},{0x16B00,0x16B2F01},{0x16B40,0x16B4301},{0x16B50,0x16B5902},{0x16B5B,0x16B6102},
    {0x16B63,0x16B7701},{0x16B7D,0x16B8F01},{0x16E40,0x16E7F01},{0x16E80,0x16E9602},{0x16F00,0x16F4A01},{0x16F50,0x16F5001},
    {0x16F93,0x16F9F01},{0x16FE0,0x16FE101},{0x16FE3,0x16FE301},{0x17000,0x187F701},{0x18800,0x18CD501},{0x18D00,0x18D0801},
    {0x1AFF0,0x1AFF301},{0x1AFF5,0x1AFFB01},{0x1AFFD,0x1AFFE01},{0x1B000,0x1B12201},{0x1B132,0x1B13201},{0x1B150,0x1B15201},
    {0x1B155,0x1B15501},{0x1B164,0x1B16701},{0x1B170,0x1B2FB01},{0x1BC00,0x1BC6A01},{0x1BC70,0x1BC7C01},{0x1BC80,0x1BC8801},
    {0x1BC90,0x1BC9901},{0x1D2C0,0x1D2D302},{0x1D2E0,0x1D2F302},{0x1D360,0x1D37802},{0x1D400,0x1D45401},{0x1D456,0x1D49C01},
    {0x1D49E,0x1D49F01},{0x1D4A2,0x1D4A201},{0x1D4A5,0x1D4A601},{0x1D4A9,0x1D4AC01},{0x1D4AE,0x1D4B901},{0x1D4BB,0x1D4BB01},
    {0x1D4BD,0x1D4C301},{0x1D4C5,0x1D50501},{0x1D507,0x1D50A01},{0x1D50D,0x1D51401},{0x1D516,0x1D51C01},{0x1D51E,0x1D53901},
    {0x1D53B,0x1D53E01},{0x1D540,0x1D54401},{0x1D546,0x1D54601},{0x1D54A,0x1D55001},{0x1D552,0x1D6A501},{0x1D6A8,0x1D6C001},
    {0x1D6C2,0x1D6DA01},{0x1D6DC,0x1D6FA01},{0x1D6FC,0x1D71401},{0x1D716,0x1D73401},{0x1D736,0x1D74E01},{0x1D750,0x1D76E01},
    {0x1D770,0x1D78801},{0x1D78A,0x1D7A801},{0x1D7AA,0x1D7C201},{0x1D7C4,0x1D7CB01},{0x1D7CE,0x1D7FF02},{0x1DF00,0x1DF1E01},
    {0x1DF25,0x1DF2A01},{0x1E030,0x1E06D01},{0x1E100,0x1E12C01},{0x1E137,0x1E13D01},{0x1E140,0x1E14902},{0x1E14E,0x1E14E01},
    {0x1E290,0x1E2AD01},{0x1E2C0,0x1E2EB01},{0x1E2F0,0x1E2F902},{0x1E4D0,0x1E4EB01},{0x1E4F0,0x1E4F902},{0x1E7E0,0x1E7E601},
    {0x1E7E8,0x1E7EB01},{0x1E7ED,0x1E7EE01},{0x1E7F0,0x1E7FE01},{0x1E800,0x1E8C401},{0x1E8C7,0x1E8CF02},{0x1E900,0x1E94301},
    {0x1E94B,0x1E94B01},{0x1E950,0x1E95902},{0x1EC71,0x1ECAB02},{0x1ECAD,0x1ECAF02},{0x1ECB1,0x1ECB402},{0x1ED01,0x1ED2D02},
    {0x1ED2F,0x1ED3D02},{0x1EE00,0x1EE0301},{0x1EE05,0x1EE1F01},{0x1EE21,0x1EE2201},{0x1EE24,0x1EE2401},{0x1EE27,0x1EE2701},
    {0x1EE29,0x1EE3201},{0x1EE34,0x1EE3701},{0x1EE39,0x1EE3901},{0x1EE3B,0x1EE3B01},{0x1EE42,0x1EE4201},{0x1EE47,0x1EE4701},
    {0x1EE49,0x1EE4901},{0x1EE4B,0x1EE4B01},{0x1EE4D,0x1EE4F01},{0x1EE51,0x1EE5201},{0x1EE54,0x1EE5401},{0x1EE57,0x1EE5701},
    {0x1EE59,0x1EE5901},{0x1EE5B,0x1EE5B01},{0x1EE5D,0x1EE5D01},{0x1EE5F,0x1EE5F01},{0x1EE61,0x1EE6201},{0x1EE64,0x1EE6401},
    {0x1EE67,0x1EE6A01},{0x1EE6C,0x1EE7201},{0x1EE74,0x1EE7701},{0x1EE79,0x1EE7C01},{0x1EE7E,0x1EE7E01},{0x1EE80,0x1EE8901},
    {0x1EE8B,0x1EE9B01},{0x1EEA1,0x1EEA301},{0x1EEA5,0x1EEA901},{0x1EEAB,0x1EEBB01},{0x1F100,0x1F10C02},{0x1FBF0,0x1FBF902},
    {0x20000,0x2A6DF01},{0x2A700,0x2B73901},{0x2B740,0x2B81D01},{0x2B820,0x2CEA101},{0x2CEB0,0x2EBE001},{0x2F800,0x2FA1D01},
    {0x30000,0x3134A01},{0x31350,0x323AF01},
};
/* END GENERATED UNICODE TABLE */

/* \p{L} -> 1, \p{N} -> 2, \s (White_Space) -> 3, else 0 */
static int bt__unicode_class(uint32_t cp) {
    size_t lo = 0, hi = BT__UNICODE_NRUNS;
    while (lo < hi) {   /* first run with first > cp */
        size_t mid = (lo + hi) / 2;
        if (bt__unicode_runs[mid][0] <= cp) lo = mid + 1; else hi = mid;
    }
    if (lo == 0) return BT__OTHER;
    lo--;
    return cp <= (bt__unicode_runs[lo][1] >> 8) ? (int)(bt__unicode_runs[lo][1] & 0xFF) : BT__OTHER;
}

/* Decode one code point at s[i] (i < n), strictly: no overlongs, surrogates or values past
   U+10FFFF. Returns its byte length; an invalid byte decodes to itself as a 1-byte unit with
   *cp = 0x110000 + byte (class "other"), so every byte string splits into units. */
static size_t bt__utf8_unit(const unsigned char *s, size_t n, size_t i, uint32_t *cp) {
    unsigned c = s[i];
    if (c < 0x80) { *cp = c; return 1; }
    if (c >= 0xC2 && c <= 0xDF) {
        if (i + 1 < n && (s[i + 1] & 0xC0) == 0x80) { *cp = ((c & 0x1Fu) << 6) | (s[i + 1] & 0x3Fu); return 2; }
    } else if (c >= 0xE0 && c <= 0xEF) {
        if (i + 2 < n && (s[i + 1] & 0xC0) == 0x80 && (s[i + 2] & 0xC0) == 0x80 &&
            !(c == 0xE0 && s[i + 1] < 0xA0) && !(c == 0xED && s[i + 1] > 0x9F)) {
            *cp = ((c & 0x0Fu) << 12) | ((s[i + 1] & 0x3Fu) << 6) | (s[i + 2] & 0x3Fu);
            return 3;
        }
    } else if (c >= 0xF0 && c <= 0xF4) {
        if (i + 3 < n && (s[i + 1] & 0xC0) == 0x80 && (s[i + 2] & 0xC0) == 0x80 && (s[i + 3] & 0xC0) == 0x80 &&
            !(c == 0xF0 && s[i + 1] < 0x90) && !(c == 0xF4 && s[i + 1] > 0x8F)) {
            *cp = ((c & 0x07u) << 18) | ((s[i + 1] & 0x3Fu) << 12) | ((s[i + 2] & 0x3Fu) << 6) | (s[i + 3] & 0x3Fu);
            return 4;
        }
    }
    *cp = 0x110000u + c;
    return 1;
}

/* ---- 4. Tokenizer loading -------------------------------------------------------------------- */

/* GPT-2 stores token bytes as printable characters: the bytes '!'..'~', 0xA1..0xAC and
   0xAE..0xFF stand for themselves; the other 68 bytes, in increasing order, become U+0100,
   U+0101, ... This is the inverse: a code point -> its byte, or -1. */
static int bt__gpt2_char_to_byte(uint32_t cp) {
    uint32_t k;
    if ((cp >= 0x21 && cp <= 0x7E) || (cp >= 0xA1 && cp <= 0xAC) || (cp >= 0xAE && cp <= 0xFF)) return (int)cp;
    if (cp < 0x100 || cp >= 0x100 + 68) return -1;
    k = cp - 0x100;                  /* the k-th byte that is not printable: */
    if (k < 33) return (int)k;       /* 0x00..0x20 */
    if (k < 67) return (int)(0x7F + (k - 33));   /* 0x7F..0xA0 */
    return 0xAD;                     /* the soft hyphen */
}

#define BT__CACHE_MAX_PIECE 64          /* longer pieces are encoded every time, not cached */
#define BT__CACHE_MAX_ENTRIES (1u << 19)

/* token bytes -> id: open addressing over ids (-1 empty), hashed by the token's bytes */
typedef struct { int32_t *slot; size_t mask; } bt__tokmap;

enum { BT__PRETOK_GPT2 = 0, BT__PRETOK_LLAMA3 = 1 };

typedef struct {     /* a cached piece: its bytes and token ids live in the two arenas */
    uint64_t hash;
    uint32_t key_off, val_off;
    uint16_t key_len, val_len;
} bt__cache_entry;

struct bt_tokenizer {
    int vocab;
    unsigned char *tok_bytes;    /* all tokens' bytes, back to back */
    uint32_t *tok_off;           /* token i = tok_bytes[tok_off[i] .. tok_off[i+1]) */
    int32_t byte_id[256];        /* the token of each single byte */
    /* merges: open addressing on key (left << 32 | right) + 1; value rank << 32 | merged id */
    uint64_t *mkey, *mval;
    size_t mmask, nmerges;
    uint8_t cls_low[0x800];      /* class of code points below U+0800 (the bisection is skipped) */
    bt__tokmap vmap;             /* the model's tokens (not added-only ones): bytes -> id */
    int pretok;                  /* BT__PRETOK_GPT2 / BT__PRETOK_LLAMA3: the split pattern */
    int ignore_merges;           /* tokenizer.json's model.ignore_merges: a piece in vmap is one token */
    int32_t *added; size_t nadded;   /* tokenizer.json's added_tokens, by id (bt_tokenizer_token_id) */
    /* the piece cache */
    bt__cache_entry *cache;
    size_t cache_mask, cache_n;
    unsigned char *ckeys; size_t ckeys_n, ckeys_cap;
    int32_t *cvals; size_t cvals_n, cvals_cap;
    /* BPE scratch */
    int32_t *s_id; int32_t *s_next; int32_t *s_prev; uint32_t *s_pos; size_t s_cap;
    uint64_t *heap; size_t heap_cap;
};

static int bt__merge_lookup(const bt_tokenizer *t, int32_t a, int32_t b, uint32_t *rank, int32_t *merged) {
    uint64_t key = (((uint64_t)(uint32_t)a << 32) | (uint32_t)b) + 1;
    size_t i = (size_t)(bt__mix64(key) & t->mmask);
    for (;;) {
        uint64_t k = t->mkey[i];
        if (k == key) { *rank = (uint32_t)(t->mval[i] >> 32); *merged = (int32_t)(uint32_t)t->mval[i]; return 1; }
        if (k == 0) return 0;
        i = (i + 1) & t->mmask;
    }
}


static int32_t bt__tokmap_find(const bt__tokmap *m, const bt_tokenizer *t, const unsigned char *s, size_t n) {
    size_t i = (size_t)(bt__hash_bytes(s, n) & m->mask);
    for (;;) {
        int32_t id = m->slot[i];
        if (id < 0) return -1;
        if (t->tok_off[id + 1] - t->tok_off[id] == n && memcmp(t->tok_bytes + t->tok_off[id], s, n) == 0) return id;
        i = (i + 1) & m->mask;
    }
}

/* Read a JSON string at p (just past the opening quote) as GPT-2 characters, appending their
   bytes to out. Returns the position after the closing quote, or NULL on a malformed string or
   a character outside the byte alphabet. */
static const char *bt__json_token(const char *p, const char *end, unsigned char *out, size_t *n, uint32_t *badcp) {
    *badcp = 0;
    while (p < end && *p != '"') {
        uint32_t cp;
        int b;
        if (*p == '\\') {
            if (p + 1 >= end) return NULL;
            switch (p[1]) {
            case '"': cp = '"'; p += 2; break;
            case '\\': cp = '\\'; p += 2; break;
            case '/': cp = '/'; p += 2; break;
            case 'b': cp = 8; p += 2; break;
            case 'f': cp = 12; p += 2; break;
            case 'n': cp = 10; p += 2; break;
            case 'r': cp = 13; p += 2; break;
            case 't': cp = 9; p += 2; break;
            case 'u': {
                int k;
                cp = 0;
                if (p + 6 > end) return NULL;
                for (k = 2; k < 6; k++) {
                    char c = p[k];
                    cp <<= 4;
                    if (c >= '0' && c <= '9') cp |= (uint32_t)(c - '0');
                    else if (c >= 'a' && c <= 'f') cp |= (uint32_t)(c - 'a' + 10);
                    else if (c >= 'A' && c <= 'F') cp |= (uint32_t)(c - 'A' + 10);
                    else return NULL;
                }
                p += 6;
                break;   /* surrogates are never in the byte alphabet: rejected below */
            }
            default: return NULL;
            }
        } else {
            size_t len = bt__utf8_unit((const unsigned char *)p, (size_t)(end - p), 0, &cp);
            p += len;
        }
        b = bt__gpt2_char_to_byte(cp);
        if (b < 0) { *badcp = cp ? cp : 0xFFFFFFFFu; return NULL; }
        out[(*n)++] = (unsigned char)b;
    }
    return p < end ? p + 1 : NULL;
}

static const char *bt__skip_ws(const char *p, const char *end) {
    while (p < end && (*p == ' ' || *p == '\n' || *p == '\r' || *p == '\t')) p++;
    return p;
}

static int bt__load_encoder(bt_tokenizer *t, const char *path) {
    size_t len = 0, ntok = 0, cap_ids = 0, cap_offs = 0, bytes_n = 0, bytes_cap = 0, i;
    char *buf = bt__read_file(path, &len);
    const char *p, *end;
    int64_t *ids = NULL;         /* per entry: id */
    uint32_t *offs = NULL;       /* per entry: start in bytes, then end */
    unsigned char *bytes = NULL;
    int rc = -1;
    if (!buf) return -1;
    end = buf + len;
    p = bt__skip_ws(buf, end);
    if (p >= end || *p != '{') { bt__seterr("%s: not a JSON object (expected '{')", path); goto done; }
    p = bt__skip_ws(p + 1, end);
    if (p < end && *p == '}') p++;
    else for (;;) {
        uint32_t badcp;
        int64_t v = 0;
        int digits = 0;
        size_t start;
        if (p >= end || *p != '"') { bt__seterr("%s: byte %ld: expected a string key", path, (long)(p - buf)); goto done; }
        if (bt__grow((void **)&ids, &cap_ids, ntok + 1, sizeof *ids) || bt__grow((void **)&offs, &cap_offs, 2 * (ntok + 1), sizeof *offs)) {
            bt__seterr("%s: out of memory", path); goto done;
        }
        /* a key has at most (end - p) characters, each one byte */
        if (bt__grow((void **)&bytes, &bytes_cap, bytes_n + (size_t)(end - p), 1)) { bt__seterr("%s: out of memory", path); goto done; }
        start = bytes_n;
        p = bt__json_token(p + 1, end, bytes, &bytes_n, &badcp);
        if (!p) {
            if (badcp) bt__seterr("%s: token %zu: character U+%04X is not in GPT-2's byte alphabet", path, ntok, (unsigned)badcp);
            else bt__seterr("%s: token %zu: malformed JSON string", path, ntok);
            goto done;
        }
        if (bytes_n == start) { bt__seterr("%s: token %zu: empty token string", path, ntok); goto done; }
        p = bt__skip_ws(p, end);
        if (p >= end || *p != ':') { bt__seterr("%s: byte %ld: expected ':'", path, (long)(p - buf)); goto done; }
        p = bt__skip_ws(p + 1, end);
        while (p < end && *p >= '0' && *p <= '9' && digits < 10) { v = v * 10 + (*p - '0'); p++; digits++; }
        if (!digits || (p < end && *p >= '0' && *p <= '9')) { bt__seterr("%s: token %zu: expected a non-negative id below 10^10", path, ntok); goto done; }
        ids[ntok] = v;
        offs[2 * ntok] = (uint32_t)start;
        offs[2 * ntok + 1] = (uint32_t)bytes_n;
        ntok++;
        p = bt__skip_ws(p, end);
        if (p < end && *p == ',') { p = bt__skip_ws(p + 1, end); continue; }
        if (p < end && *p == '}') { p++; break; }
        bt__seterr("%s: byte %ld: expected ',' or '}'", path, (long)(p - buf));
        goto done;
    }
    if (bt__skip_ws(p, end) != end) { bt__seterr("%s: trailing characters after the JSON object", path); goto done; }
    if (ntok < 256 || ntok > (1u << 24) || bytes_n > 0x7FFFFFFFu) { bt__seterr("%s: %zu tokens (expected 256 .. 2^24)", path, ntok); goto done; }
    /* ids must be exactly 0 .. ntok-1 */
    t->vocab = (int)ntok;
    t->tok_off = (uint32_t *)bt__dmalloc((ntok + 1) * sizeof(uint32_t));
    t->tok_bytes = (unsigned char *)bt__dmalloc(bytes_n ? bytes_n : 1);
    {
        int64_t *where = (int64_t *)bt__dmalloc(ntok * sizeof(int64_t));   /* id -> entry */
        size_t o = 0;
        if (!t->tok_off || !t->tok_bytes || !where) { bt__dfree(where); bt__seterr("%s: out of memory", path); goto done; }
        for (i = 0; i < ntok; i++) where[i] = -1;
        for (i = 0; i < ntok; i++) {
            if (ids[i] >= (int64_t)ntok) { bt__dfree(where); bt__seterr("%s: id %lld >= the number of tokens %zu (ids must be 0..n-1)", path, (long long)ids[i], ntok); goto done; }
            if (where[ids[i]] >= 0) { bt__dfree(where); bt__seterr("%s: id %lld appears twice", path, (long long)ids[i]); goto done; }
            where[ids[i]] = (int64_t)i;
        }
        for (i = 0; i < ntok; i++) {
            size_t e = (size_t)where[i], a = offs[2 * e], b = offs[2 * e + 1];
            t->tok_off[i] = (uint32_t)o;
            memcpy(t->tok_bytes + o, bytes + a, b - a);
            o += b - a;
        }
        t->tok_off[ntok] = (uint32_t)o;
        bt__dfree(where);
    }
    rc = 0;
done:
    bt__dfree(ids); bt__dfree(offs); bt__dfree(bytes); bt__dfree(buf);
    return rc;
}

static int bt__load_merges(bt_tokenizer *t, const char *path) {
    size_t len = 0, nlines = 0, cap, i, lineno = 0;
    char *buf = bt__read_file(path, &len);
    const char *p, *end;
    bt__tokmap m;
    unsigned char *tmp = NULL;
    int rc = -1;
    m.slot = NULL;
    if (!buf) return -1;
    end = buf + len;
    for (p = buf; p < end; p++) nlines += *p == '\n';
    nlines++;
    /* token map: bytes -> id */
    for (cap = 1024; cap < 2 * (size_t)t->vocab; cap *= 2) {}
    m.mask = cap - 1;
    m.slot = (int32_t *)bt__dmalloc(cap * sizeof(int32_t));
    for (cap = 1024; cap < 2 * nlines; cap *= 2) {}
    t->mmask = cap - 1;
    t->mkey = (uint64_t *)bt__dmalloc(cap * sizeof(uint64_t));
    t->mval = (uint64_t *)bt__dmalloc(cap * sizeof(uint64_t));
    tmp = (unsigned char *)bt__dmalloc(len + 1);
    if (!m.slot || !t->mkey || !t->mval || !tmp) { bt__seterr("%s: out of memory", path); goto done; }
    memset(m.slot, 0xFF, (m.mask + 1) * sizeof(int32_t));
    memset(t->mkey, 0, cap * sizeof(uint64_t));
    for (i = 0; i < (size_t)t->vocab; i++) {
        const unsigned char *s = t->tok_bytes + t->tok_off[i];
        size_t n = t->tok_off[i + 1] - t->tok_off[i], h;
        if (bt__tokmap_find(&m, t, s, n) >= 0) continue;   /* duplicate bytes: keep the lower id */
        h = (size_t)(bt__hash_bytes(s, n) & m.mask);
        while (m.slot[h] >= 0) h = (h + 1) & m.mask;
        m.slot[h] = (int32_t)i;
    }
    for (i = 0; i < 256; i++) {
        unsigned char b = (unsigned char)i;
        t->byte_id[i] = bt__tokmap_find(&m, t, &b, 1);
        if (t->byte_id[i] < 0) { bt__seterr("%s: byte 0x%02X has no token (a byte-level BPE needs all 256)", path, (unsigned)i); goto done; }
    }
    for (p = buf; p < end;) {
        const char *eol = (const char *)memchr(p, '\n', (size_t)(end - p)), *sp;
        size_t na = 0, nb = 0;
        uint32_t badcp, r0;
        int32_t a, b, ab, m0;
        if (!eol) eol = end;
        lineno++;
        if (eol > p && eol[-1] == '\r') eol--;   /* tolerate CRLF */
        if (eol == p || (lineno == 1 && eol - p >= 8 && memcmp(p, "#version", 8) == 0)) goto next_line;
        sp = (const char *)memchr(p, ' ', (size_t)(eol - p));
        if (!sp || sp == p || sp + 1 >= eol || memchr(sp + 1, ' ', (size_t)(eol - sp - 1))) {
            bt__seterr("%s:%zu: expected two tokens separated by one space", path, lineno); goto done;
        }
        /* bt__json_token stops at '"': the alphabet has '"' (0x22) so parse by hand instead */
        {
            const char *q;
            for (q = p; q < sp;) {
                uint32_t cp; int by;
                q += bt__utf8_unit((const unsigned char *)q, (size_t)(sp - q), 0, &cp);
                by = bt__gpt2_char_to_byte(cp);
                if (by < 0) { badcp = cp; goto bad_char; }
                tmp[na++] = (unsigned char)by;
            }
            nb = na;
            for (q = sp + 1; q < eol;) {
                uint32_t cp; int by;
                q += bt__utf8_unit((const unsigned char *)q, (size_t)(eol - q), 0, &cp);
                by = bt__gpt2_char_to_byte(cp);
                if (by < 0) { badcp = cp; goto bad_char; }
                tmp[nb++] = (unsigned char)by;
            }
        }
        a = bt__tokmap_find(&m, t, tmp, na);
        b = bt__tokmap_find(&m, t, tmp + na, nb - na);
        ab = bt__tokmap_find(&m, t, tmp, nb);
        if (a < 0 || b < 0 || ab < 0) {
            bt__seterr("%s:%zu: merge of '%.*s' and '%.*s': %s is not in the encoder", path, lineno,
                       (int)(sp - p), p, (int)(eol - sp - 1), sp + 1, a < 0 ? "the left token" : b < 0 ? "the right token" : "the merged token");
            goto done;
        }
        if (bt__merge_lookup(t, a, b, &r0, &m0)) goto next_line;   /* a repeated merge keeps its first rank */
        {
            uint64_t key = (((uint64_t)(uint32_t)a << 32) | (uint32_t)b) + 1;
            size_t h = (size_t)(bt__mix64(key) & t->mmask);
            while (t->mkey[h]) h = (h + 1) & t->mmask;
            t->mkey[h] = key;
            t->mval[h] = ((uint64_t)t->nmerges << 32) | (uint32_t)ab;
            t->nmerges++;
        }
    next_line:
        p = (eol < end && *eol == '\r') ? eol + 2 : eol + 1;
        continue;
    bad_char:
        bt__seterr("%s:%zu: character U+%04X is not in GPT-2's byte alphabet", path, lineno, (unsigned)badcp);
        goto done;
    }
    t->vmap = m;        /* kept: bt_tokenizer_token_id */
    m.slot = NULL;
    rc = 0;
done:
    bt__dfree(m.slot); bt__dfree(tmp); bt__dfree(buf);
    return rc;
}

BT_DATA_DEF void bt_tokenizer_free(bt_tokenizer *t) {
    if (!t) return;
    bt__dfree(t->tok_bytes); bt__dfree(t->tok_off); bt__dfree(t->mkey); bt__dfree(t->mval);
    bt__dfree(t->cache); bt__dfree(t->ckeys); bt__dfree(t->cvals);
    bt__dfree(t->s_id); bt__dfree(t->s_next); bt__dfree(t->s_prev); bt__dfree(t->s_pos); bt__dfree(t->heap);
    bt__dfree(t->vmap.slot); bt__dfree(t->added);
    bt__dfree(t);
}

BT_DATA_DEF bt_tokenizer *bt_tokenizer_load(const char *encoder_json_path, const char *vocab_bpe_path) {
    bt_tokenizer *t;
    uint32_t cp;
    if (!encoder_json_path || !vocab_bpe_path) { bt__seterr("bt_tokenizer_load: NULL path"); return NULL; }
    t = (bt_tokenizer *)bt__dmalloc(sizeof *t);
    if (!t) { bt__seterr("bt_tokenizer_load: out of memory"); return NULL; }
    memset(t, 0, sizeof *t);
    if (bt__load_encoder(t, encoder_json_path) || bt__load_merges(t, vocab_bpe_path)) { bt_tokenizer_free(t); return NULL; }
    for (cp = 0; cp < 0x800; cp++) t->cls_low[cp] = (uint8_t)bt__unicode_class(cp);
    return t;
}

BT_DATA_DEF int bt_tokenizer_vocab_size(const bt_tokenizer *t) { return t ? t->vocab : 0; }

/* -- tokenizer.json (Hugging Face tokenizers): a byte-level BPE --
   model: {"type": "BPE", "vocab": {token: id}, "merges": ["A B", ...] or [["A", "B"], ...],
   "ignore_merges": bool}, with tokens in GPT-2's byte alphabet; added_tokens: [{"id", "content"}];
   pre_tokenizer: ByteLevel (use_regex: GPT-2's pattern) or Sequence [Split (Regex: GPT-2's or
   Llama 3's pattern, Isolated), ByteLevel (use_regex false)]; normalizer null; decoder ByteLevel. */
#define BT__GPT2_PATTERN "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)|\\s+"
#define BT__LLAMA3_PATTERN "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1,3}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+"

static const char *bt__jstr(const bt_json *v) { return v && v->type == BT_JSON_STRING ? v->str : NULL; }
static int bt__jnull(const bt_json *v) { return !v || v->type == BT_JSON_NULL; }

/* s[0..n), characters of GPT-2's byte alphabet, as bytes appended to out (room for n more);
   -1 and *badcp at a character outside it */
static int bt__bytelevel_bytes(const char *s, size_t n, unsigned char *out, size_t *on, uint32_t *badcp) {
    size_t i = 0;
    while (i < n) {
        uint32_t cp;
        int b;
        i += bt__utf8_unit((const unsigned char *)s, n, i, &cp);
        if ((b = bt__gpt2_char_to_byte(cp)) < 0) { *badcp = cp; return -1; }
        out[(*on)++] = (unsigned char)b;
    }
    return 0;
}

/* t->vmap over the ids with in_model[id] set (all ids when in_model is NULL) */
static int bt__vmap_build(bt_tokenizer *t, const unsigned char *in_model) {
    size_t cap, i;
    for (cap = 1024; cap < 2 * (size_t)t->vocab; cap *= 2) {}
    if (!(t->vmap.slot = (int32_t *)bt__dmalloc(cap * sizeof(int32_t)))) return -1;
    t->vmap.mask = cap - 1;
    memset(t->vmap.slot, 0xFF, cap * sizeof(int32_t));
    for (i = 0; i < (size_t)t->vocab; i++) {
        const unsigned char *s = t->tok_bytes + t->tok_off[i];
        size_t n = t->tok_off[i + 1] - t->tok_off[i], h;
        if ((in_model && !in_model[i]) || bt__tokmap_find(&t->vmap, t, s, n) >= 0) continue;
        for (h = (size_t)(bt__hash_bytes(s, n) & t->vmap.mask); t->vmap.slot[h] >= 0; h = (h + 1) & t->vmap.mask) {}
        t->vmap.slot[h] = (int32_t)i;
    }
    return 0;
}

/* the id of a model.vocab or added_tokens entry: an integer in 0..cap-1, else -1 + error */
static int64_t bt__hf_id(const char *path, const char *what, const char *name, const bt_json *v, size_t cap) {
    int64_t id;
    if (bt_json_i64(v, &id) || id < 0 || (uint64_t)id >= cap) {
        bt__seterr("%s: %s \"%.80s\": id %.40s is out of range (the file has at most %zu tokens, so ids must be 0..%zu)",
                   path, what, name, v && v->type == BT_JSON_NUMBER ? v->str : "(not a number)", cap, cap - 1);
        return -1;
    }
    return id;
}

/* model.vocab and added_tokens -> t->vocab, tok_off, tok_bytes (an added token's bytes are its
   content), t->added; *in_model: per id, whether model.vocab has it. Ids must be 0..N-1. */
static int bt__hf_vocab(bt_tokenizer *t, const char *path, const bt_json *vocab, const bt_json *added, unsigned char **in_model) {
    size_t nv, na, cap, i, n = 0, nbytes = 0, o = 0;
    const bt_json *c, **by_id = NULL;
    unsigned char *kind = NULL;   /* per id: 1 model.vocab, 2 added, 3 both */
    int64_t id;
    uint32_t badcp = 0;
    *in_model = NULL;
    if (!vocab || vocab->type != BT_JSON_OBJECT) { bt__seterr("%s: model.vocab is missing or not an object of token -> id", path); return -1; }
    if (added && added->type != BT_JSON_ARRAY && added->type != BT_JSON_NULL) { bt__seterr("%s: added_tokens is not an array", path); return -1; }
    nv = vocab->n; na = added && added->type == BT_JSON_ARRAY ? added->n : 0;
    cap = nv + na;
    if (nv < 256 || cap > (1u << 24)) { bt__seterr("%s: model.vocab has %zu tokens (expected 256 .. 2^24)", path, nv); return -1; }
    by_id = (const bt_json **)bt__dmalloc(cap * sizeof *by_id);
    kind = (unsigned char *)bt__dmalloc(cap);
    t->added = (int32_t *)bt__dmalloc((na ? na : 1) * sizeof(int32_t));
    if (!by_id || !kind || !t->added) { bt__seterr("%s: out of memory", path); goto fail; }
    memset(kind, 0, cap);
    for (c = vocab->child; c; c = c->next) {
        if ((id = bt__hf_id(path, "model.vocab token", c->key, c, cap)) < 0) goto fail;
        if (kind[id]) { bt__seterr("%s: model.vocab: id %lld is given to both \"%.80s\" and \"%.80s\"", path, (long long)id, by_id[id]->key, c->key); goto fail; }
        if (c->key_len == 0) { bt__seterr("%s: model.vocab: an empty token (id %lld)", path, (long long)id); goto fail; }
        kind[id] = 1; by_id[id] = c; nbytes += c->key_len; n++;
    }
    for (c = added && na ? added->child : NULL; c; c = c->next) {
        const char *content = bt__jstr(bt_json_get(c, "content"));
        const bt_json *cc = bt_json_get(c, "content");
        if (!content || !cc->len) { bt__seterr("%s: added_tokens[%zu]: no \"content\" string", path, t->nadded); goto fail; }
        if ((id = bt__hf_id(path, "added token", content, bt_json_get(c, "id"), cap)) < 0) goto fail;
        if (kind[id] & 2) { bt__seterr("%s: added_tokens: id %lld is given to both \"%.80s\" and \"%.80s\"", path, (long long)id, bt__jstr(bt_json_get(by_id[id], "content")), content); goto fail; }
        if (kind[id] & 1) {   /* the model's token too: the same bytes, or decode would disagree with encode */
            unsigned char *tmp = (unsigned char *)bt__dmalloc(by_id[id]->key_len + 1);
            size_t tn = 0;
            int same = tmp && !bt__bytelevel_bytes(by_id[id]->key, by_id[id]->key_len, tmp, &tn, &badcp) && tn == cc->len && !memcmp(tmp, content, tn);
            bt__dfree(tmp);
            if (!same) {
                bt__seterr("%s: added token \"%.80s\" has id %lld, which model.vocab gives to another token, \"%.80s\"", path, content, (long long)id, by_id[id]->key);
                goto fail;
            }
            kind[id] = 3;
        } else { kind[id] = 2; by_id[id] = c; nbytes += cc->len; n++; }
        t->added[t->nadded++] = (int32_t)id;
    }
    for (i = n; i < cap; i++)   /* n tokens: every one of them below n */
        if (kind[i]) {
            const char *name = kind[i] & 1 ? by_id[i]->key : bt__jstr(bt_json_get(by_id[i], "content"));
            bt__seterr("%s: token \"%.80s\": id %zu is out of range (the file has %zu tokens, so ids must be 0..%zu)", path, name, i, n, n - 1);
            goto fail;
        }
    t->vocab = (int)n;
    t->tok_off = (uint32_t *)bt__dmalloc((n + 1) * sizeof(uint32_t));
    t->tok_bytes = (unsigned char *)bt__dmalloc(nbytes ? nbytes : 1);
    if (!t->tok_off || !t->tok_bytes) { bt__seterr("%s: out of memory", path); goto fail; }
    for (i = 0; i < n; i++) {
        t->tok_off[i] = (uint32_t)o;
        if (kind[i] & 1) {
            if (bt__bytelevel_bytes(by_id[i]->key, by_id[i]->key_len, t->tok_bytes, &o, &badcp)) {
                bt__seterr("%s: model.vocab token \"%.80s\" (id %zu): character U+%04X is not in GPT-2's byte alphabet", path, by_id[i]->key, i, (unsigned)badcp);
                goto fail;
            }
        } else {
            const bt_json *cc = bt_json_get(by_id[i], "content");
            memcpy(t->tok_bytes + o, cc->str, cc->len);
            o += cc->len;
        }
    }
    t->tok_off[n] = (uint32_t)o;
    for (i = 0; i < n; i++) kind[i] &= 1;
    bt__dfree(by_id);
    *in_model = kind;
    return 0;
fail:
    bt__dfree(by_id); bt__dfree(kind);
    return -1;
}

/* set the merge a + b -> ab at rank; a pair listed again takes its last rank, as tokenizers'
   HashMap does */
static void bt__merge_set(bt_tokenizer *t, int32_t a, int32_t b, uint32_t rank, int32_t ab) {
    uint64_t key = (((uint64_t)(uint32_t)a << 32) | (uint32_t)b) + 1;
    size_t h = (size_t)(bt__mix64(key) & t->mmask);
    while (t->mkey[h] && t->mkey[h] != key) h = (h + 1) & t->mmask;
    if (!t->mkey[h]) { t->mkey[h] = key; t->nmerges++; }
    t->mval[h] = ((uint64_t)rank << 32) | (uint32_t)ab;
}

static int bt__hf_merges(bt_tokenizer *t, const char *path, const bt_json *merges) {
    size_t cap, r = 0, tcap = 0;
    const bt_json *m;
    unsigned char *tmp = NULL;
    if (!merges || merges->type != BT_JSON_ARRAY) { bt__seterr("%s: model.merges is missing or not an array", path); return -1; }
    if (merges->n >= (1u << 31)) { bt__seterr("%s: %zu merges (at most 2^31)", path, merges->n); return -1; }
    for (cap = 1024; cap < 2 * merges->n; cap *= 2) {}
    t->mmask = cap - 1;
    t->mkey = (uint64_t *)bt__dmalloc(cap * sizeof(uint64_t));
    t->mval = (uint64_t *)bt__dmalloc(cap * sizeof(uint64_t));
    if (!t->mkey || !t->mval) { bt__seterr("%s: out of memory", path); return -1; }
    memset(t->mkey, 0, cap * sizeof(uint64_t));
    for (m = merges->child; m; m = m->next, r++) {
        const char *a = NULL, *b = NULL, *sp;
        size_t la = 0, lb = 0, na = 0, nb;
        uint32_t badcp = 0;
        int32_t ia, ib, iab;
        if (m->type == BT_JSON_STRING && (sp = (const char *)memchr(m->str, ' ', m->len)) != NULL && !memchr(sp + 1, ' ', m->len - (size_t)(sp + 1 - m->str))) {
            a = m->str; la = (size_t)(sp - m->str); b = sp + 1; lb = m->len - la - 1;
        } else if (m->type == BT_JSON_ARRAY && m->n == 2 && m->child->type == BT_JSON_STRING && m->child->next->type == BT_JSON_STRING) {
            a = m->child->str; la = m->child->len; b = m->child->next->str; lb = m->child->next->len;
        }
        if (!a || !la || !lb) { bt__seterr("%s: model.merges[%zu]: expected \"A B\" (one space) or [\"A\", \"B\"], two non-empty tokens", path, r); goto fail; }
        if (bt__grow((void **)&tmp, &tcap, la + lb, 1)) { bt__seterr("%s: out of memory", path); goto fail; }
        if (bt__bytelevel_bytes(a, la, tmp, &na, &badcp) || (nb = na, bt__bytelevel_bytes(b, lb, tmp, &nb, &badcp))) {
            bt__seterr("%s: model.merges[%zu]: character U+%04X is not in GPT-2's byte alphabet", path, r, (unsigned)badcp); goto fail;
        }
        ia = bt__tokmap_find(&t->vmap, t, tmp, na);
        ib = bt__tokmap_find(&t->vmap, t, tmp + na, nb - na);
        iab = bt__tokmap_find(&t->vmap, t, tmp, nb);
        if (ia < 0 || ib < 0 || iab < 0) {
            bt__seterr("%s: model.merges[%zu] (\"%.*s\" + \"%.*s\"): %s is not in model.vocab", path, r, (int)(la < 80 ? la : 80), a,
                       (int)(lb < 80 ? lb : 80), b, ia < 0 ? "the left token" : ib < 0 ? "the right token" : "the merged token");
            goto fail;
        }
        bt__merge_set(t, ia, ib, (uint32_t)r, iab);
    }
    bt__dfree(tmp);
    return 0;
fail:
    bt__dfree(tmp);
    return -1;
}

/* one step of pre_tokenizer: ByteLevel or Split. *split: -1 none yet, else a BT__PRETOK_ */
static int bt__hf_pretok_step(const char *path, const bt_json *p, int *split, int *bytelevel) {
    const char *type = bt__jstr(bt_json_get(p, "type"));
    if (type && !strcmp(type, "ByteLevel")) {
        const bt_json *aps = bt_json_get(p, "add_prefix_space"), *ur = bt_json_get(p, "use_regex");
        if (aps && aps->type != BT_JSON_FALSE) { bt__seterr("%s: pre_tokenizer ByteLevel: add_prefix_space must be false (bt_data.h adds no space before a text)", path); return -1; }
        if (*bytelevel) { bt__seterr("%s: pre_tokenizer: two ByteLevel steps", path); return -1; }
        *bytelevel = 1;
        if (ur && ur->type == BT_JSON_FALSE) return 0;
        if (ur && ur->type != BT_JSON_TRUE) { bt__seterr("%s: pre_tokenizer ByteLevel: use_regex is not a boolean", path); return -1; }
        if (*split >= 0) { bt__seterr("%s: pre_tokenizer: ByteLevel with use_regex true after a Split (two splits are not supported)", path); return -1; }
        *split = BT__PRETOK_GPT2;
        return 0;
    }
    if (type && !strcmp(type, "Split")) {
        const char *re = bt__jstr(bt_json_get(bt_json_get(p, "pattern"), "Regex")), *beh = bt__jstr(bt_json_get(p, "behavior"));
        const bt_json *inv = bt_json_get(p, "invert");
        if (!re) { bt__seterr("%s: pre_tokenizer Split: the pattern must be {\"Regex\": ...} (a String pattern is not supported)", path); return -1; }
        if (!beh || strcmp(beh, "Isolated") || (inv && inv->type != BT_JSON_FALSE)) {
            bt__seterr("%s: pre_tokenizer Split: only behavior \"Isolated\" with invert false is supported (got %s%s)", path, beh ? beh : "no behavior", inv && inv->type != BT_JSON_FALSE ? ", invert" : "");
            return -1;
        }
        if (*split >= 0 || *bytelevel) { bt__seterr("%s: pre_tokenizer: a Split %s (only one split, before ByteLevel, is supported)", path, *bytelevel ? "after ByteLevel" : "after another split"); return -1; }
        if (!strcmp(re, BT__LLAMA3_PATTERN)) *split = BT__PRETOK_LLAMA3;
        else if (!strcmp(re, BT__GPT2_PATTERN)) *split = BT__PRETOK_GPT2;
        else {
            bt__seterr("%s: pre_tokenizer Split: unsupported regex \"%.100s\": bt_data.h matches two patterns by hand, GPT-2's \"%s\" and Llama 3's \"%s\"",
                       path, re, BT__GPT2_PATTERN, BT__LLAMA3_PATTERN);
            return -1;
        }
        return 0;
    }
    bt__seterr("%s: pre_tokenizer: unsupported type \"%.60s\" (supported: ByteLevel, Split, Sequence of them)", path, type ? type : "(none)");
    return -1;
}

static int bt__hf_pretok(bt_tokenizer *t, const char *path, const bt_json *p) {
    int split = -1, bytelevel = 0;
    const char *type = bt__jstr(bt_json_get(p, "type"));
    if (bt__jnull(p)) { bt__seterr("%s: no pre_tokenizer (a byte-level BPE needs ByteLevel)", path); return -1; }
    if (type && !strcmp(type, "Sequence")) {
        const bt_json *list = bt_json_get(p, "pretokenizers"), *c;
        if (!list || list->type != BT_JSON_ARRAY) { bt__seterr("%s: pre_tokenizer Sequence without a \"pretokenizers\" array", path); return -1; }
        for (c = list->child; c; c = c->next)
            if (bt__hf_pretok_step(path, c, &split, &bytelevel)) return -1;
    } else if (bt__hf_pretok_step(path, p, &split, &bytelevel)) return -1;
    if (!bytelevel) { bt__seterr("%s: pre_tokenizer has no ByteLevel step (bt_data.h reads byte-level BPEs only)", path); return -1; }
    if (split < 0) { bt__seterr("%s: pre_tokenizer does not split the text (ByteLevel use_regex false needs a Split before it)", path); return -1; }
    t->pretok = split;
    return 0;
}

/* model's other fields, the normalizer and the decoder: what bt_data.h does not implement is refused */
static int bt__hf_options(bt_tokenizer *t, const char *path, const bt_json *root, const bt_json *model) {
    const char *type = bt__jstr(bt_json_get(model, "type")), *k;
    const bt_json *im = bt_json_get(model, "ignore_merges"), *dec = bt_json_get(root, "decoder");
    const char *fix[2] = {"continuing_subword_prefix", "end_of_word_suffix"};
    int i;
    if (!type || strcmp(type, "BPE")) { bt__seterr("%s: model.type is \"%.40s\": only \"BPE\" is supported", path, type ? type : "(none)"); return -1; }
    if (!bt__jnull(bt_json_get(model, "dropout"))) { bt__seterr("%s: model.dropout is set: BPE dropout is not supported", path); return -1; }
    for (i = 0; i < 2; i++) {
        const bt_json *v = bt_json_get(model, fix[i]);
        if (!bt__jnull(v) && !(v->type == BT_JSON_STRING && v->len == 0)) { bt__seterr("%s: model.%s is set: not supported in a byte-level BPE", path, fix[i]); return -1; }
    }
    if (im && im->type != BT_JSON_TRUE && im->type != BT_JSON_FALSE) { bt__seterr("%s: model.ignore_merges is not a boolean", path); return -1; }
    t->ignore_merges = im && im->type == BT_JSON_TRUE;
    if (!bt__jnull(bt_json_get(root, "normalizer"))) { bt__seterr("%s: a normalizer is set: not supported (Llama 3's and GPT-2's are null)", path); return -1; }
    k = bt__jstr(bt_json_get(dec, "type"));
    if (!bt__jnull(dec) && (!k || strcmp(k, "ByteLevel"))) { bt__seterr("%s: decoder \"%.40s\": only ByteLevel (or none) is supported", path, k ? k : "?"); return -1; }
    return 0;
}

BT_DATA_DEF bt_tokenizer *bt_tokenizer_load_hf(const char *path) {
    size_t len = 0, i;
    char *buf;
    bt_json_doc *doc = NULL;
    const bt_json *root, *model;
    unsigned char *in_model = NULL;
    bt_tokenizer *t = NULL;
    uint32_t cp;
    if (!path) { bt__seterr("bt_tokenizer_load_hf: NULL path"); return NULL; }
    if (!(buf = bt__read_file(path, &len))) return NULL;
    doc = bt_json_parse(buf, len, 0);
    bt__dfree(buf);
    if (!doc) { bt__seterr("%s: %s", path, bt_data_error()); return NULL; }
    root = bt_json_root(doc);
    model = bt_json_get(root, "model");
    if (!model || model->type != BT_JSON_OBJECT) { bt__seterr("%s: no \"model\" object: not a tokenizer.json", path); goto fail; }
    if (!(t = (bt_tokenizer *)bt__dmalloc(sizeof *t))) { bt__seterr("%s: out of memory", path); goto fail; }
    memset(t, 0, sizeof *t);
    if (bt__hf_options(t, path, root, model) || bt__hf_pretok(t, path, bt_json_get(root, "pre_tokenizer")) || bt__hf_vocab(t, path, bt_json_get(model, "vocab"), bt_json_get(root, "added_tokens"), &in_model)) goto fail;
    if (bt__vmap_build(t, in_model)) { bt__seterr("%s: out of memory", path); goto fail; }
    for (i = 0; i < 256; i++) {
        unsigned char b = (unsigned char)i;
        if ((t->byte_id[i] = bt__tokmap_find(&t->vmap, t, &b, 1)) < 0) {
            bt__seterr("%s: model.vocab has no token for byte 0x%02X (a byte-level BPE needs all 256)", path, (unsigned)i); goto fail;
        }
    }
    if (bt__hf_merges(t, path, bt_json_get(model, "merges"))) goto fail;
    for (cp = 0; cp < 0x800; cp++) t->cls_low[cp] = (uint8_t)bt__unicode_class(cp);
    bt__dfree(in_model);
    bt_json_free(doc);
    return t;
fail:
    bt__dfree(in_model);
    bt_json_free(doc);
    bt_tokenizer_free(t);
    return NULL;
}

BT_DATA_DEF int32_t bt_tokenizer_token_id(const bt_tokenizer *t, const char *text) {
    size_t n, i;
    int32_t id;
    if (!t || !text) { bt__seterr("bt_tokenizer_token_id: NULL argument"); return -1; }
    n = strlen(text);
    for (i = 0; i < t->nadded; i++) {
        id = t->added[i];
        if (t->tok_off[id + 1] - t->tok_off[id] == n && !memcmp(t->tok_bytes + t->tok_off[id], text, n)) return id;
    }
    if (t->vmap.slot && (id = bt__tokmap_find(&t->vmap, t, (const unsigned char *)text, n)) >= 0) return id;
    bt__seterr("bt_tokenizer_token_id: no token \"%.100s\" in the vocabulary", text);
    return -1;
}

/* ---- 5. BPE ----------------------------------------------------------------------------------- */

/* min-heap of (rank << 32 | byte position of the left symbol): lowest rank first, leftmost first */
static void bt__heap_push(uint64_t *h, size_t *n, uint64_t v) {
    size_t i = (*n)++;
    while (i > 0) {
        size_t p = (i - 1) / 2;
        if (h[p] <= v) break;
        h[i] = h[p];
        i = p;
    }
    h[i] = v;
}
static uint64_t bt__heap_pop(uint64_t *h, size_t *n) {
    uint64_t top = h[0], v = h[--(*n)];
    size_t i = 0, m = *n;
    for (;;) {
        size_t c = 2 * i + 1;
        if (c >= m) break;
        if (c + 1 < m && h[c + 1] < h[c]) c++;
        if (v <= h[c]) break;
        h[i] = h[c];
        i = c;
    }
    if (m) h[i] = v;
    return top;
}

/* BPE of one piece of n bytes into out (room for n ids); returns the number of ids.
   Symbols form a linked list over the byte positions; each adjacent pair with a merge sits in
   the heap. Popping the lowest rank (leftmost on ties) and merging is OpenAI's "merge the
   lowest-ranked bigram everywhere, left to right": a merge only creates pairs of higher rank,
   so all occurrences of one rank are merged before the next rank. A popped entry is stale when
   its left symbol was absorbed or its pair changed; the rank check catches both, since a rank
   names one pair and a symbol's token only ever grows. */
static int bt__bpe_scratch(bt_tokenizer *t, size_t n) {
    if (n <= t->s_cap && 3 * n <= t->heap_cap) return 0;
    {
        size_t cap = t->s_cap ? t->s_cap : 64;
        while (cap < n) cap *= 2;
        bt__dfree(t->s_id); bt__dfree(t->s_next); bt__dfree(t->s_prev); bt__dfree(t->s_pos); bt__dfree(t->heap);
        t->s_id = (int32_t *)bt__dmalloc(cap * sizeof(int32_t));
        t->s_next = (int32_t *)bt__dmalloc(cap * sizeof(int32_t));
        t->s_prev = (int32_t *)bt__dmalloc(cap * sizeof(int32_t));
        t->s_pos = (uint32_t *)bt__dmalloc(cap * sizeof(uint32_t));
        t->heap = (uint64_t *)bt__dmalloc(3 * cap * sizeof(uint64_t));
        if (!t->s_id || !t->s_next || !t->s_prev || !t->s_pos || !t->heap) {
            bt__dfree(t->s_id); bt__dfree(t->s_next); bt__dfree(t->s_prev); bt__dfree(t->s_pos); bt__dfree(t->heap);
            t->s_id = t->s_next = t->s_prev = NULL; t->s_pos = NULL; t->heap = NULL; t->s_cap = t->heap_cap = 0;
            return -1;
        }
        t->s_cap = cap;
        t->heap_cap = 3 * cap;
    }
    return 0;
}

static size_t bt__bpe(bt_tokenizer *t, const unsigned char *s, size_t n, int32_t *out) {
    int32_t *id = t->s_id, *nx = t->s_next, *pv = t->s_prev;
    uint64_t *heap = t->heap;
    size_t hn = 0, i, k = 0;
    int32_t j;
    uint32_t rank;
    int32_t merged;
    for (i = 0; i < n; i++) {
        id[i] = t->byte_id[s[i]];
        nx[i] = i + 1 < n ? (int32_t)(i + 1) : -1;
        pv[i] = (int32_t)i - 1;
    }
    for (i = 0; i + 1 < n; i++)
        if (bt__merge_lookup(t, id[i], id[i + 1], &rank, &merged)) bt__heap_push(heap, &hn, ((uint64_t)rank << 32) | i);
    while (hn) {
        uint64_t top = bt__heap_pop(heap, &hn);
        int32_t a = (int32_t)(uint32_t)top, b;
        uint32_t want = (uint32_t)(top >> 32);
        if (id[a] < 0 || (b = nx[a]) < 0) continue;                                   /* absorbed / last */
        if (!bt__merge_lookup(t, id[a], id[b], &rank, &merged) || rank != want) continue;  /* stale */
        id[a] = merged;                 /* b joins a */
        id[b] = -1;
        nx[a] = nx[b];
        if (nx[b] >= 0) pv[nx[b]] = a;
        if (pv[a] >= 0 && bt__merge_lookup(t, id[pv[a]], id[a], &rank, &merged))
            bt__heap_push(heap, &hn, ((uint64_t)rank << 32) | (uint32_t)pv[a]);
        if (nx[a] >= 0 && bt__merge_lookup(t, id[a], id[nx[a]], &rank, &merged))
            bt__heap_push(heap, &hn, ((uint64_t)rank << 32) | (uint32_t)a);
    }
    for (j = 0; j >= 0; j = nx[j]) out[k++] = id[j];
    return k;
}

BT_DATA_DEF void bt_tokenizer_clear_cache(bt_tokenizer *t) {
    if (!t) return;
    bt__dfree(t->cache); bt__dfree(t->ckeys); bt__dfree(t->cvals);
    t->cache = NULL; t->ckeys = NULL; t->cvals = NULL;
    t->cache_mask = t->cache_n = t->ckeys_n = t->ckeys_cap = t->cvals_n = t->cvals_cap = 0;
}

/* the cached ids of a piece, or NULL */
static const int32_t *bt__cache_get(const bt_tokenizer *t, uint64_t h, const unsigned char *s, size_t n, size_t *nids) {
    size_t i;
    if (!t->cache) return NULL;
    for (i = (size_t)h & t->cache_mask;; i = (i + 1) & t->cache_mask) {
        const bt__cache_entry *e = &t->cache[i];
        if (e->key_len == 0) return NULL;
        if (e->hash == h && e->key_len == n && memcmp(t->ckeys + e->key_off, s, n) == 0) {
            *nids = e->val_len;
            return t->cvals + e->val_off;
        }
    }
}

static void bt__cache_put(bt_tokenizer *t, uint64_t h, const unsigned char *s, size_t n, const int32_t *ids, size_t nids) {
    size_t i;
    bt__cache_entry *e;
    if (t->cache_n >= BT__CACHE_MAX_ENTRIES) bt_tokenizer_clear_cache(t);   /* bounded memory */
    if (!t->cache || 2 * (t->cache_n + 1) > t->cache_mask + 1) {           /* grow: rehash */
        size_t ncap = t->cache ? 2 * (t->cache_mask + 1) : 4096, j;
        bt__cache_entry *nc = (bt__cache_entry *)bt__dmalloc(ncap * sizeof *nc);
        if (!nc) return;   /* no cache is only slower */
        memset(nc, 0, ncap * sizeof *nc);
        for (j = 0; t->cache && j <= t->cache_mask; j++) {
            size_t q;
            if (!t->cache[j].key_len) continue;
            for (q = (size_t)t->cache[j].hash & (ncap - 1); nc[q].key_len; q = (q + 1) & (ncap - 1)) {}
            nc[q] = t->cache[j];
        }
        bt__dfree(t->cache);
        t->cache = nc;
        t->cache_mask = ncap - 1;
    }
    if (bt__grow((void **)&t->ckeys, &t->ckeys_cap, t->ckeys_n + n, 1) ||
        bt__grow((void **)&t->cvals, &t->cvals_cap, t->cvals_n + nids, sizeof(int32_t))) return;
    for (i = (size_t)h & t->cache_mask; t->cache[i].key_len; i = (i + 1) & t->cache_mask) {}
    e = &t->cache[i];
    e->hash = h;
    e->key_off = (uint32_t)t->ckeys_n; e->key_len = (uint16_t)n;
    e->val_off = (uint32_t)t->cvals_n; e->val_len = (uint16_t)nids;
    memcpy(t->ckeys + t->ckeys_n, s, n); t->ckeys_n += n;
    memcpy(t->cvals + t->cvals_n, ids, nids * sizeof(int32_t)); t->cvals_n += nids;
    t->cache_n++;
}

/* ---- 6. Pre-tokenizers (GPT-2, Llama 3), encode, decode -------------------------------------- */

/* the class and length of the unit at s[i] */
static int bt__unit(const bt_tokenizer *t, const unsigned char *s, size_t n, size_t i, size_t *ulen) {
    uint32_t cp;
    if (s[i] < 0x80) { *ulen = 1; return t->cls_low[s[i]]; }
    *ulen = bt__utf8_unit(s, n, i, &cp);
    if (cp < 0x800) return t->cls_low[cp];
    if (cp >= 0x110000u) return BT__OTHER;   /* an invalid byte */
    return bt__unicode_class(cp);
}

/* end of a run of units of class c starting at i */
static size_t bt__run(const bt_tokenizer *t, const unsigned char *s, size_t n, size_t i, int c) {
    size_t ul;
    while (i < n && bt__unit(t, s, n, i, &ul) == c) i += ul;
    return i;
}

/* The end of the piece that starts at i: GPT-2's pattern, alternative by alternative. */
static size_t bt__piece_end(const bt_tokenizer *t, const unsigned char *s, size_t n, size_t i) {
    size_t ul, ul2, j;
    int c, c2;
    if (s[i] == '\'' && i + 1 < n) {   /* 's 't 're 've 'm 'll 'd (lowercase only) */
        unsigned char a = s[i + 1], b = i + 2 < n ? s[i + 2] : 0;
        if (a == 's' || a == 't' || a == 'm' || a == 'd') return i + 2;
        if ((a == 'r' && b == 'e') || (a == 'v' && b == 'e') || (a == 'l' && b == 'l')) return i + 3;
    }
    c = bt__unit(t, s, n, i, &ul);
    if (s[i] == ' ' && i + 1 < n) {    /* " ?\p{L}+", " ?\p{N}+", " ?[^\s\p{L}\p{N}]+" */
        c2 = bt__unit(t, s, n, i + 1, &ul2);
        if (c2 != BT__SPACE) return bt__run(t, s, n, i + 1 + ul2, c2);
    }
    if (c != BT__SPACE) return bt__run(t, s, n, i + ul, c);
    /* "\s+(?!\S)|\s+": the whole run at the end of the text; else the run less its last unit,
       which starts the next piece (" x" joins x); a single unit before non-space is itself. */
    {
        size_t last = i;
        j = i;
        while (j < n && bt__unit(t, s, n, j, &ul) == BT__SPACE) { last = j; j += ul; }
        if (j == n || last == i) return j;
        return last;
    }
}

static int bt__crlf(unsigned char c) { return c == '\r' || c == '\n'; }

/* The end of the piece that starts at i: Llama 3's pattern, alternative by alternative,
     (?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|
     \s*[\r\n]+|\s+(?!\S)|\s+
   Every unit starts a match of one alternative, so pieces tile the text as the matches do. */
static size_t bt__piece_end_llama3(const bt_tokenizer *t, const unsigned char *s, size_t n, size_t i) {
    size_t ul, ul2, j, k;
    int c;
    if (s[i] == '\'' && i + 1 < n) {   /* contractions in any case; U+017F (long s) folds to s */
        unsigned a = s[i + 1] | 0x20u, b = i + 2 < n ? s[i + 2] | 0x20u : 0;
        if (a == 's' || a == 't' || a == 'm' || a == 'd') return i + 2;
        if ((a == 'r' && b == 'e') || (a == 'v' && b == 'e') || (a == 'l' && b == 'l')) return i + 3;
        if (s[i + 1] == 0xC5 && i + 2 < n && s[i + 2] == 0xBF) return i + 3;
    }
    c = bt__unit(t, s, n, i, &ul);
    if (c == BT__LETTER) return bt__run(t, s, n, i + ul, BT__LETTER);
    if (c != BT__NUMBER && !bt__crlf(s[i]) && i + ul < n && bt__unit(t, s, n, i + ul, &ul2) == BT__LETTER)
        return bt__run(t, s, n, i + ul + ul2, BT__LETTER);   /* one non-letter, non-digit, then letters */
    if (c == BT__NUMBER) {                                     /* at most three digits */
        for (j = i + ul, k = 1; k < 3 && j < n && bt__unit(t, s, n, j, &ul2) == BT__NUMBER; k++) j += ul2;
        return j;
    }
    if (c == BT__OTHER || (s[i] == ' ' && i + 1 < n && bt__unit(t, s, n, i + 1, &ul2) == BT__OTHER)) {
        j = bt__run(t, s, n, c == BT__OTHER ? i + ul : i + 1 + ul2, BT__OTHER);
        while (j < n && bt__crlf(s[j])) j++;                  /* " ?[^\s\p{L}\p{N}]+[\r\n]*" */
        return j;
    }
    /* white space: up to its last \r or \n when it has one ("\s*[\r\n]+"); else as GPT-2's */
    {
        size_t last = i, nl = 0;
        for (j = i; j < n && bt__unit(t, s, n, j, &ul) == BT__SPACE; j += ul) {
            if (bt__crlf(s[j])) nl = j + 1;
            last = j;
        }
        if (nl) return nl;
        if (j == n || last == i) return j;
        return last;
    }
}

BT_DATA_DEF size_t bt_encode_append(bt_tokenizer *t, const char *text, size_t len, int32_t **ids, size_t n, size_t *cap) {
    const unsigned char *s = (const unsigned char *)text;
    size_t i = 0;
    if (!t || (!text && len) || !ids || !cap) { bt__seterr("bt_encode: NULL argument"); return (size_t)-1; }
    /* a piece of k bytes gives at most k tokens: reserving len up front avoids checks per piece */
    if (len > (((size_t)-1) >> 3) || bt__grow((void **)ids, cap, n + len + 1, sizeof(int32_t))) {
        bt__seterr("bt_encode: out of memory for %zu bytes of text", len); return (size_t)-1;
    }
    while (i < len) {
        size_t e = t->pretok == BT__PRETOK_LLAMA3 ? bt__piece_end_llama3(t, s, len, i) : bt__piece_end(t, s, len, i), k = e - i, nid;
        const int32_t *hit;
        uint64_t h;
        int32_t *out = *ids + n;
        if (k == 1) { out[0] = t->byte_id[s[i]]; n++; i = e; continue; }
        if (k <= BT__CACHE_MAX_PIECE) {
            h = bt__hash_bytes(s + i, k);
            hit = bt__cache_get(t, h, s + i, k, &nid);
            if (hit) { memcpy(out, hit, nid * sizeof(int32_t)); n += nid; i = e; continue; }
        } else h = 0;
        if (bt__bpe_scratch(t, k)) { bt__seterr("bt_encode: out of memory for a %zu-byte piece", k); return (size_t)-1; }
        if (t->ignore_merges && (out[0] = bt__tokmap_find(&t->vmap, t, s + i, k)) >= 0) nid = 1;   /* the piece is a token */
        else nid = bt__bpe(t, s + i, k, out);
        if (k <= BT__CACHE_MAX_PIECE) bt__cache_put(t, h, s + i, k, out, nid);
        n += nid;
        i = e;
    }
    return n;
}

/* Cutting a text for encoding in parts (bt_encode_cut). The rule: p is a cut when either
     (a) text[p-1] == '\n', the character that ends at p-1 is not white space and the one that
         starts at p is not white space ("x\nY"), or
     (b) text[p] == ' ', the character that ends at p is not white space and the one that starts
         at p+1 is not white space ("x Y").
   Proof that encode(T) == encode(T[0..p)) ++ encode(T[p..)) for every T extending the buffer.
   Encoding is BPE applied to each piece of the pre-tokenization alone, so it is enough that the
   pieces of T are those of T[0..p) followed by those of T[p..).
   1. A piece of T ends at p. Every piece is one of: a contraction ('s ...: no white space), an
      optional ' ' followed by a run of non-white-space units of one class, or a run of white
      space. So a non-space unit and a white-space unit share a piece only as " x" (a ' ' that
      leads a run). (a): the unit u before "\n" is not space, and "\n" is not ' ', so u's piece
      ends before "\n"; the white-space run that starts at "\n" is "\n" alone (the next unit is not
      space), and "\s+(?!\S)" cannot match it (a non-space follows, and \s+ needs one unit), so
      "\s+" does: the piece is "\n" = [p-1, p). (b): the unit before ' ' is not space, so its
      piece ends at p (a ' ' is only ever the first byte of a piece that holds non-space units).
   2. The pieces of T from p on are those of T[p..): the pattern has no look-behind; matching at a
      piece start reads only forward.
   3. The pieces of T before p are those of T[0..p). Each piece that ends before the unit u (the
      non-space unit ending at p-1 in (a), at p in (b)) was decided by units up to u: a run of one
      class stops at u's class change or before, "\s+(?!\S)" looks one unit ahead, at most u, and
      a contraction looks 3 bytes ahead, at most to p-1 in (a) (the "\n" is there in both texts).
      u's own piece: (a) stops at "\n", which T[0..p) holds too, then "\n" at the end of T[0..p)
      matches "\s+(?!\S)" whole: the same piece "\n". (b) u's run stops at ' ' in T and at the end
      of T[0..p); a contraction starting at p-2 or p-1 needs a letter where T has ' ' and T[0..p)
      has nothing: none in either. UTF-8 decoding of a unit stops at a byte < 0x80 ("\n", ' ') or
      at the end alike (an incomplete sequence is invalid bytes either way).
   Which characters are white space (the table's White_Space, tests/test_data.c checks the list):
   U+0009-000D, U+0020, U+0085 (C2 85), U+00A0 (C2 A0), U+1680 (E1 9A 80), U+2000-200A (E2 80
   80-8A), U+2028 (E2 80 A8), U+2029 (E2 80 A9), U+202F (E2 80 AF), U+205F (E2 81 9F), U+3000
   (E3 80 80). A unit boundary is certain at "\n" and ' ' (ASCII bytes are never inside a UTF-8
   sequence), and a multi-byte sequence is decided by its lead byte onward, so the tests below
   read bytes only, with no tokenizer. */
static int bt__ws3(unsigned a, unsigned b, unsigned c) {   /* a 3-byte white-space character */
    return (a == 0xE1 && b == 0x9A && c == 0x80) || (a == 0xE3 && b == 0x80 && c == 0x80) || (a == 0xE2 && b == 0x81 && c == 0x9F) ||
           (a == 0xE2 && b == 0x80 && ((c >= 0x80 && c <= 0x8A) || c == 0xA8 || c == 0xA9 || c == 0xAF));
}
/* 1 when the character that ends at s[e-1] (e >= 1, s[0] a character's start) is white space */
static int bt__ends_space(const unsigned char *s, size_t e) {
    unsigned c = s[e - 1];
    if (c < 0x80) return c == ' ' || (c >= 9 && c <= 13);
    return (e >= 2 && s[e - 2] == 0xC2 && (c == 0x85 || c == 0xA0)) || (e >= 3 && bt__ws3(s[e - 3], s[e - 2], c));
}
/* 1 when the character that starts at s[i] (a character's start) is not white space, judged from
   bytes before n; 0 when it is, or when too few bytes are there to tell */
static int bt__starts_nonspace(const unsigned char *s, size_t n, size_t i) {
    unsigned c = s[i];
    if (c < 0x80) return !(c == ' ' || (c >= 9 && c <= 13));
    if (c != 0xC2 && c != 0xE1 && c != 0xE2 && c != 0xE3) return 1;
    if (c == 0xC2) return i + 1 < n && s[i + 1] != 0x85 && s[i + 1] != 0xA0;
    return i + 2 < n && !bt__ws3(c, s[i + 1], s[i + 2]);
}
BT_DATA_DEF size_t bt_encode_cut(const char *text, size_t len) {
    const unsigned char *s = (const unsigned char *)text;
    size_t q;
    if (!text || len < 3) return 0;
    for (q = len - 1; q >= 1; q--) {   /* q: the byte "\n" or ' '; the cut after (a) or at (b) it */
        if (s[q] == '\n' && q + 1 < len && !bt__ends_space(s, q) && bt__starts_nonspace(s, len, q + 1)) return q + 1;
        if (s[q] == ' ' && q + 1 < len && !bt__ends_space(s, q) && bt__starts_nonspace(s, len, q + 1)) return q;
    }
    return 0;
}

BT_DATA_DEF size_t bt_encode(bt_tokenizer *t, const char *text, size_t len, int32_t **ids) {
    size_t cap = 0, n;
    int32_t *buf = NULL;
    if (ids) *ids = NULL;
    n = bt_encode_append(t, text, len, &buf, 0, &cap);
    if (n == (size_t)-1) { bt__dfree(buf); return n; }
    if (ids) *ids = buf; else bt__dfree(buf);
    return n;
}

BT_DATA_DEF const char *bt_decode_token(bt_tokenizer *t, int32_t id, size_t *len) {
    if (!t || id < 0 || id >= t->vocab) {
        bt__seterr("bt_decode_token: id %ld is outside the vocabulary 0..%d", (long)id, t ? t->vocab - 1 : -1);
        if (len) *len = 0;
        return NULL;
    }
    if (len) *len = t->tok_off[id + 1] - t->tok_off[id];
    return (const char *)t->tok_bytes + t->tok_off[id];
}

BT_DATA_DEF size_t bt_decode(bt_tokenizer *t, const int32_t *ids, size_t n, char **text) {
    size_t i, total = 0, o = 0;
    char *out;
    if (text) *text = NULL;
    if (!t || (!ids && n) || !text) { bt__seterr("bt_decode: NULL argument"); return (size_t)-1; }
    for (i = 0; i < n; i++) {
        if (ids[i] < 0 || ids[i] >= t->vocab) {
            bt__seterr("bt_decode: id %ld at position %zu is outside the vocabulary 0..%d", (long)ids[i], i, t->vocab - 1);
            return (size_t)-1;
        }
        total += t->tok_off[ids[i] + 1] - t->tok_off[ids[i]];
    }
    out = (char *)bt__dmalloc(total + 1);
    if (!out) { bt__seterr("bt_decode: out of memory for %zu bytes", total); return (size_t)-1; }
    for (i = 0; i < n; i++) {
        size_t l = t->tok_off[ids[i] + 1] - t->tok_off[ids[i]];
        memcpy(out + o, t->tok_bytes + t->tok_off[ids[i]], l);
        o += l;
    }
    out[o] = 0;
    *text = out;
    return o;
}

/* ---- 7. Shards -------------------------------------------------------------------------------- */

/* the header and n tokens of width bytes (2: magic 20240520, 4: 20240801), through an atomic file */
static int bt__shard_write(const char *path, const void *tokens, size_t n, int width) {
    int32_t header[BT_SHARD_HEADER_INTS];
    bt_atomic_file *f;
    if (!path || (!tokens && n)) { bt__seterr("%s: NULL argument", width == 4 ? "bt_shard_write_u32" : "bt_shard_write"); return -1; }
    if (n > 0x7FFFFFFFu) { bt__seterr("%s: %zu tokens do not fit the int32 count of the shard header", path, n); return -1; }
    memset(header, 0, sizeof header);
    header[0] = width == 4 ? BT_SHARD32_MAGIC : BT_SHARD_MAGIC;
    header[1] = width == 4 ? BT_SHARD32_VERSION : BT_SHARD_VERSION;
    header[2] = (int32_t)n;
    if (!(f = bt_atomic_open(path))) return -1;
    if (bt_atomic_write(f, header, sizeof header) || bt_atomic_write(f, tokens, n * (size_t)width)) { bt_atomic_abort(f); return -1; }
    return bt_atomic_commit(f);
}
BT_DATA_DEF int bt_shard_write(const char *path, const uint16_t *tokens, size_t n) { return bt__shard_write(path, tokens, n, 2); }
BT_DATA_DEF int bt_shard_write_u32(const char *path, const uint32_t *tokens, size_t n) { return bt__shard_write(path, tokens, n, 4); }

BT_DATA_DEF void bt_shard_close(bt_shard *s) {
    if (!s) return;
    bt__dfree(s->buf_);
    memset(s, 0, sizeof *s);
}

/* the token count and width (bytes per token) of the shard open on fd (size bytes long), its
   header checked against the size */
static int bt__shard_header(int fd, const char *path, uint64_t size, size_t *n, int *width) {
    int32_t header[BT_SHARD_HEADER_INTS];
    uint64_t want;
    int w;
    if (size < BT_SHARD_HEADER_BYTES) {
        bt__seterr("%s: truncated: the file has %llu bytes, less than the %d-byte shard header", path, (unsigned long long)size, BT_SHARD_HEADER_BYTES);
        return -1;
    }
    if (bt__pread_all(fd, header, sizeof header, 0) != (int64_t)sizeof header) { bt__seterr("%s: cannot read the header (a read error, or the file shrank)", path); return -1; }
    if (header[0] != BT_SHARD_MAGIC && header[0] != BT_SHARD32_MAGIC) {
        bt__seterr("%s: bad magic %ld (expected %d for uint16 tokens or %d for uint32): not a token shard", path, (long)header[0],
                   BT_SHARD_MAGIC, BT_SHARD32_MAGIC);
        return -1;
    }
    w = header[0] == BT_SHARD32_MAGIC ? 4 : 2;
    if (header[1] != (w == 4 ? BT_SHARD32_VERSION : BT_SHARD_VERSION)) {
        bt__seterr("%s: wrong version %ld for magic %ld (expected %d, uint%d tokens)", path, (long)header[1], (long)header[0],
                   w == 4 ? BT_SHARD32_VERSION : BT_SHARD_VERSION, 8 * w);
        return -1;
    }
    if (header[2] < 0) { bt__seterr("%s: bad header: negative token count %ld", path, (long)header[2]); return -1; }
    want = (uint64_t)BT_SHARD_HEADER_BYTES + (uint64_t)w * (uint64_t)header[2];
    if (size != want) {
        bt__seterr("%s: %s: header says %ld tokens (%llu bytes%s) but the file has %llu bytes", path, size < want ? "truncated" : "wrong size",
                   (long)header[2], (unsigned long long)want, w == 4 ? " of uint32 tokens" : "", (unsigned long long)size);
        return -1;
    }
    *n = (size_t)header[2];
    *width = w;
    return 0;
}

BT_DATA_DEF int bt_shard_open(bt_shard *s, const char *path) {
    uint64_t size;
    size_t n;
    int64_t got;
    int fd, err, w;
    if (!s) { bt__seterr("bt_shard_open: NULL shard"); return -1; }
    memset(s, 0, sizeof *s);
    if (!path) { bt__seterr("bt_shard_open: NULL path"); return -1; }
    if ((fd = bt_input_open(path, &size)) < 0) return -1;
    if (bt__shard_header(fd, path, size, &n, &w)) { close(fd); return -1; }
    if (!(s->buf_ = bt__dmalloc(n ? (size_t)w * n : 1))) { bt__seterr("%s: out of memory for %zu tokens", path, n); close(fd); return -1; }
    got = bt__pread_all(fd, s->buf_, (size_t)w * n, BT_SHARD_HEADER_BYTES);
    err = errno;
    close(fd);
    if (got != (int64_t)((size_t)w * n)) {
        if (got < 0) bt__seterr("%s: read error: %s", path, strerror(err));
        else bt__seterr("%s: read %lld of %zu token bytes: the file shrank while being read", path, (long long)got, (size_t)w * n);
        bt_shard_close(s);
        return -1;
    }
    if (w == 4) s->tokens32 = (const uint32_t *)s->buf_;
    else s->tokens = (const uint16_t *)s->buf_;
    s->n = n;
    s->width = w;
    return 0;
}

BT_DATA_DEF uint32_t bt_shard_token(const bt_shard *s, size_t i) { return s->width == 4 ? s->tokens32[i] : s->tokens[i]; }

/* the index of the first token >= vocab, or n when all are below. The max is a branch-free
   loop the compiler vectorizes (about 16 tokens per cycle): the search runs only on a bad shard. */
static size_t bt__first_bad_token(const uint16_t *t, size_t n, int vocab) {
    size_t i;
    uint16_t mx = 0;
    for (i = 0; i < n; i++) mx = t[i] > mx ? t[i] : mx;
    if ((int)mx < vocab) return n;
    for (i = 0; (int)t[i] < vocab; i++) {}
    return i;
}
static size_t bt__first_bad_token32(const uint32_t *t, size_t n, int vocab) {   /* the same for uint32 */
    size_t i;
    uint32_t mx = 0;
    for (i = 0; i < n; i++) mx = t[i] > mx ? t[i] : mx;
    if (mx < (uint32_t)vocab) return n;
    for (i = 0; t[i] < (uint32_t)vocab; i++) {}
    return i;
}
/* the first bad token of n tokens of width bytes at t (vocab >= 1); n when all are below vocab */
static size_t bt__first_bad(const void *t, size_t n, int width, int vocab) {
    return width == 4 ? bt__first_bad_token32((const uint32_t *)t, n, vocab) : bt__first_bad_token((const uint16_t *)t, n, vocab);
}
static uint32_t bt__token_at(const void *t, size_t i, int width) { return width == 4 ? ((const uint32_t *)t)[i] : ((const uint16_t *)t)[i]; }
static void bt__bad_token_error(const char *path, uint32_t token, uint64_t pos, int width, int vocab) {
    bt__seterr("%s: token %lu at position %llu (byte offset %llu) is outside the vocabulary of %d", path, (unsigned long)token,
               (unsigned long long)pos, (unsigned long long)(BT_SHARD_HEADER_BYTES + (uint64_t)width * pos), vocab);
}

BT_DATA_DEF int bt_shard_check_vocab(const bt_shard *s, const char *path, int vocab_size) {
    size_t i;
    if (!s || vocab_size < 1) { bt__seterr("bt_shard_check_vocab: NULL shard or vocabulary size %d", vocab_size); return -1; }
    if (!s->n) return 0;
    if ((i = bt__first_bad(s->buf_, s->n, s->width, vocab_size)) == s->n) return 0;
    bt__bad_token_error(path ? path : "(shard)", bt_shard_token(s, i), i, s->width, vocab_size);
    return -1;
}

/* ---- 8. Loader -------------------------------------------------------------------------------- */

struct bt_loader {
    int B, T, rank, world, shuffle;
    uint64_t seed;
    size_t nshards;
    char **paths;              /* sorted */
    uint64_t *ntok, *nwin;     /* per file: tokens, windows of B*T+1 */
    int width;                 /* bytes per token, the same in every file: 2 (uint16) or 4 (uint32) */
    uint64_t total_tokens, total_windows, nbatches;
    /* where we are */
    uint64_t epoch, rng, shard, position, step;
    uint32_t *order;           /* this epoch's shard order (file indices) */
    int vocab;                 /* > 0: every token read must be below it */
    /* the open shard, its window permutation, the window being read */
    int fd;                    /* -1: none */
    size_t cur_file;           /* (size_t)-1: none */
    uint64_t cur_epoch;
    uint32_t *perm;
    size_t perm_cap;
    void *win;                 /* B*T+1 tokens of width bytes */
};

/* the state of an epoch's RNG, from the seed and the epoch alone */
static uint64_t bt__epoch_rng(uint64_t seed, uint64_t epoch) { return bt__mix64(seed ^ bt__mix64(epoch + 0x5851F42D4C957F2Dull)); }

static void bt__loader_begin_epoch(bt_loader *L, uint64_t epoch) {
    size_t i;
    L->epoch = epoch;
    L->rng = bt__epoch_rng(L->seed, epoch);
    for (i = 0; i < L->nshards; i++) L->order[i] = (uint32_t)i;
    if (L->shuffle) {
        uint64_t r = L->rng;
        for (i = L->nshards; i > 1; i--) {   /* Fisher-Yates */
            size_t j = (size_t)bt__rng_below(&r, i);
            uint32_t tmp = L->order[i - 1]; L->order[i - 1] = L->order[j]; L->order[j] = tmp;
        }
    }
}

/* position this rank at its step-th batch of the current epoch: global window rank + world*step */
static void bt__loader_seek(bt_loader *L, uint64_t step) {
    uint64_t g = (uint64_t)L->rank + (uint64_t)L->world * step;
    size_t k = 0;
    while (k < L->nshards && g >= L->nwin[L->order[k]]) { g -= L->nwin[L->order[k]]; k++; }
    L->step = step;
    L->shard = k;
    L->position = g;
}

BT_DATA_DEF void bt_loader_close(bt_loader *L) {
    size_t i;
    if (!L) return;
    for (i = 0; L->paths && i < L->nshards; i++) bt__dfree(L->paths[i]);
    bt__dfree(L->paths); bt__dfree(L->ntok); bt__dfree(L->nwin); bt__dfree(L->order); bt__dfree(L->perm); bt__dfree(L->win);
    if (L->fd >= 0) close(L->fd);
    bt__dfree(L);
}

BT_DATA_DEF bt_loader *bt_loader_open(const char *pattern, int B, int T, int rank, int world, int shuffle, uint64_t seed) {
    glob_t g;
    bt_loader *L;
    size_t i, best = 0;
    uint64_t bt;
    int grc;
    if (!pattern) { bt__seterr("bt_loader_open: NULL glob"); return NULL; }
    if (B < 1 || T < 1 || (uint64_t)B * (uint64_t)T >= 0x7FFFFFFFu) { bt__seterr("bt_loader_open(%s): bad B=%d, T=%d", pattern, B, T); return NULL; }
    if (world < 1 || rank < 0 || rank >= world) { bt__seterr("bt_loader_open(%s): bad rank %d of world %d", pattern, rank, world); return NULL; }
    bt = (uint64_t)B * (uint64_t)T;
    memset(&g, 0, sizeof g);
    grc = glob(pattern, 0, NULL, &g);
    if (grc != 0 || g.gl_pathc == 0) {
        bt__seterr("%s: no files match glob", pattern);
        if (grc == 0) globfree(&g);
        return NULL;
    }
    L = (bt_loader *)bt__dmalloc(sizeof *L);
    if (!L) { globfree(&g); bt__seterr("bt_loader_open(%s): out of memory", pattern); return NULL; }
    memset(L, 0, sizeof *L);
    L->B = B; L->T = T; L->rank = rank; L->world = world; L->shuffle = shuffle ? 1 : 0; L->seed = seed;
    L->cur_file = (size_t)-1;
    L->fd = -1;
    L->nshards = g.gl_pathc;   /* glob sorts its matches */
    L->paths = (char **)bt__dmalloc(L->nshards * sizeof(char *));
    L->ntok = (uint64_t *)bt__dmalloc(L->nshards * sizeof(uint64_t));
    L->nwin = (uint64_t *)bt__dmalloc(L->nshards * sizeof(uint64_t));
    L->order = (uint32_t *)bt__dmalloc(L->nshards * sizeof(uint32_t));
    L->win = bt__dmalloc((size_t)(bt + 1) * sizeof(uint32_t));   /* room for either width */
    if (!L->paths || !L->ntok || !L->nwin || !L->order || !L->win || L->nshards > 0xFFFFFFFFu) {
        globfree(&g); bt_loader_close(L); bt__seterr("bt_loader_open(%s): out of memory", pattern); return NULL;
    }
    memset(L->paths, 0, L->nshards * sizeof(char *));
    for (i = 0; i < L->nshards; i++) {
        size_t pl = strlen(g.gl_pathv[i]) + 1, n;
        uint64_t size;
        int fd, bad, w = 0;
        L->paths[i] = (char *)bt__dmalloc(pl);
        if (!L->paths[i]) { globfree(&g); bt_loader_close(L); bt__seterr("bt_loader_open(%s): out of memory", pattern); return NULL; }
        memcpy(L->paths[i], g.gl_pathv[i], pl);
        fd = bt_input_open(L->paths[i], &size);   /* errors name the file */
        bad = fd < 0 || bt__shard_header(fd, L->paths[i], size, &n, &w);
        if (fd >= 0) close(fd);
        if (bad) { globfree(&g); bt_loader_close(L); return NULL; }
        if (i > 0 && w != L->width) {   /* one glob, one layout: a mix is a mistake in the data's making */
            bt__seterr("%s: mixes shard layouts: %s has uint%d tokens (magic %d), %s has uint%d (magic %d)", pattern,
                       L->paths[0], 8 * L->width, L->width == 4 ? BT_SHARD32_MAGIC : BT_SHARD_MAGIC,
                       L->paths[i], 8 * w, w == 4 ? BT_SHARD32_MAGIC : BT_SHARD_MAGIC);
            globfree(&g); bt_loader_close(L); return NULL;
        }
        L->width = w;
        L->ntok[i] = n;
        L->nwin[i] = n ? (n - 1) / bt : 0;
        L->total_tokens += L->ntok[i];
        L->total_windows += L->nwin[i];
        if (L->ntok[i] > L->ntok[best]) best = i;
    }
    globfree(&g);
    if (L->total_windows == 0) {
        bt__seterr("%s: shard too small for B*T+1 = %llu tokens (B=%d, T=%d): the largest match, %s, has %llu",
                   pattern, (unsigned long long)(bt + 1), B, T, L->paths[best], (unsigned long long)L->ntok[best]);
        bt_loader_close(L); return NULL;
    }
    L->nbatches = L->total_windows / (uint64_t)world;
    if (L->nbatches == 0) {
        bt__seterr("%s: only %llu batches of B*T+1 = %llu tokens in all matches, fewer than the %d ranks", pattern,
                   (unsigned long long)L->total_windows, (unsigned long long)(bt + 1), world);
        bt_loader_close(L); return NULL;
    }
    bt_loader_reset(L);
    return L;
}

BT_DATA_DEF void bt_loader_reset(bt_loader *L) {
    if (!L) return;
    bt__loader_begin_epoch(L, 0);
    bt__loader_seek(L, 0);
}

BT_DATA_DEF size_t bt_loader_num_batches(const bt_loader *L) { return L ? (size_t)L->nbatches : 0; }
BT_DATA_DEF size_t bt_loader_num_shards(const bt_loader *L) { return L ? L->nshards : 0; }
BT_DATA_DEF const char *bt_loader_shard_path(const bt_loader *L, size_t i) { return L && i < L->nshards ? L->paths[i] : NULL; }

/* -1 + error unless shard f still has the token count and width it had when the loader opened it */
static int bt__same_count(bt_loader *L, size_t f, size_t n, int width) {
    if (n == L->ntok[f] && width == L->width) return 0;
    bt__seterr("%s: changed while in use: it had %llu uint%d tokens, now %zu uint%d", L->paths[f], (unsigned long long)L->ntok[f],
               8 * L->width, n, 8 * width);
    return -1;
}

/* open file f and, when shuffling, make its window permutation for this epoch */
static int bt__loader_load_shard(bt_loader *L, size_t f) {
    if (L->cur_file == f && (!L->shuffle || L->cur_epoch == L->epoch)) return 0;
    if (L->cur_file != f) {
        uint64_t size;
        size_t n;
        int w;
        if (L->fd >= 0) close(L->fd);
        L->cur_file = (size_t)-1;
        if ((L->fd = bt_input_open(L->paths[f], &size)) < 0) return -1;
        if (bt__shard_header(L->fd, L->paths[f], size, &n, &w) || bt__same_count(L, f, n, w)) { close(L->fd); L->fd = -1; return -1; }
        L->cur_file = f;
    }
    if (L->shuffle) {
        uint64_t r = bt__mix64(L->rng ^ bt__mix64((uint64_t)f + 0x2545F4914F6CDD1Dull)), i, n = L->nwin[f];
        if (bt__grow((void **)&L->perm, &L->perm_cap, (size_t)n, sizeof(uint32_t))) {
            bt__seterr("%s: out of memory for a permutation of %llu windows", L->paths[f], (unsigned long long)n);
            return -1;
        }
        for (i = 0; i < n; i++) L->perm[i] = (uint32_t)i;
        for (i = n; i > 1; i--) {
            uint64_t j = bt__rng_below(&r, i);
            uint32_t tmp = L->perm[i - 1]; L->perm[i - 1] = L->perm[j]; L->perm[j] = tmp;
        }
        L->cur_epoch = L->epoch;
    }
    return 0;
}

/* window w of the open shard into L->win: B*T+1 tokens from token w*B*T, by pread (a file cut
   short under us is an error here, where a mapping would raise SIGBUS) */
static int bt__loader_read_window(bt_loader *L, uint64_t w) {
    const char *path = L->paths[L->cur_file];
    size_t BT = (size_t)L->B * (size_t)L->T, bytes = (BT + 1) * (size_t)L->width, bad;
    uint64_t first = w * BT, off = BT_SHARD_HEADER_BYTES + (uint64_t)L->width * first;
    int64_t got = bt__pread_all(L->fd, L->win, bytes, off);
    int vocab;
    if (got != (int64_t)bytes) {
        if (got < 0) bt__seterr("%s: read error at byte offset %llu: %s", path, (unsigned long long)off, strerror(errno));
        else bt__seterr("%s: only %lld of %zu bytes at byte offset %llu: the file was truncated or rewritten while in use", path,
                        (long long)got, bytes, (unsigned long long)off);
        return -1;
    }
    /* without a vocabulary, a uint32 id must still fit the int32 batches */
    vocab = L->vocab > 0 ? L->vocab : L->width == 4 ? 0x7FFFFFFF : 0;
    if (vocab > 0 && (bad = bt__first_bad(L->win, BT + 1, L->width, vocab)) <= BT) {
        bt__bad_token_error(path, bt__token_at(L->win, bad, L->width), first + bad, L->width, vocab);
        return -1;
    }
    return 0;
}

BT_DATA_DEF int bt_loader_next(bt_loader *L, int32_t *inputs, int32_t *targets) {
    size_t b, t;
    if (!L || !inputs || !targets) { bt__seterr("bt_loader_next: NULL argument"); return -1; }
    if (L->step >= L->nbatches) {   /* the epoch is over: the next one, reshuffled */
        bt__loader_begin_epoch(L, L->epoch + 1);
        bt__loader_seek(L, 0);
    }
    if (bt__loader_load_shard(L, L->order[L->shard]) != 0) return -1;
    if (bt__loader_read_window(L, L->shuffle ? L->perm[L->position] : L->position) != 0) return -1;
    for (b = 0; b < (size_t)L->B; b++) {   /* to int32 (a uint32 id of 2^31 - 1 or more was refused above) */
        int32_t *in = inputs + b * (size_t)L->T, *tg = targets + b * (size_t)L->T;
        if (L->width == 4) {
            const uint32_t *row = (const uint32_t *)L->win + b * (size_t)L->T;
            for (t = 0; t < (size_t)L->T; t++) { in[t] = (int32_t)row[t]; tg[t] = (int32_t)row[t + 1]; }
        } else {
            const uint16_t *row = (const uint16_t *)L->win + b * (size_t)L->T;
            for (t = 0; t < (size_t)L->T; t++) { in[t] = row[t]; tg[t] = row[t + 1]; }
        }
    }
    /* advance by world windows */
    L->step++;
    L->position += (uint64_t)L->world;
    while (L->shard < L->nshards && L->position >= L->nwin[L->order[L->shard]]) {
        L->position -= L->nwin[L->order[L->shard]];
        L->shard++;
    }
    return 0;
}

BT_DATA_DEF int bt_loader_check_vocab(bt_loader *L, int vocab_size) {
    uint32_t buf[1 << 14];
    size_t f;
    if (!L || vocab_size < 1) { bt__seterr("bt_loader_check_vocab: NULL loader or vocabulary size %d", vocab_size); return -1; }
    for (f = 0; f < L->nshards; f++) {   /* one sequential pass per shard, in pieces of 64 KiB */
        uint64_t size, pos = 0;
        size_t n, per = sizeof buf / (size_t)L->width;
        int fd = bt_input_open(L->paths[f], &size), rc = 0, w;
        if (fd < 0) return -1;
        if (bt__shard_header(fd, L->paths[f], size, &n, &w) || bt__same_count(L, f, n, w)) { close(fd); return -1; }
        while (!rc && pos < n) {
            size_t k = n - pos < per ? (size_t)(n - pos) : per, bad, bytes = k * (size_t)w;
            int64_t got = bt__pread_all(fd, buf, bytes, BT_SHARD_HEADER_BYTES + (uint64_t)w * pos);
            if (got != (int64_t)bytes) { bt__seterr("%s: read error at token %llu: the file shrank or failed", L->paths[f], (unsigned long long)pos); rc = -1; }
            else if ((bad = bt__first_bad(buf, k, w, vocab_size)) < k) { bt__bad_token_error(L->paths[f], bt__token_at(buf, bad, w), pos + bad, w, vocab_size); rc = -1; }
            pos += k;
        }
        close(fd);
        if (rc) return -1;
    }
    L->vocab = vocab_size;
    return 0;
}

BT_DATA_DEF void bt_loader_get_state(const bt_loader *L, bt_loader_state *st) {
    if (!st) return;
    memset(st, 0, sizeof *st);
    if (!L) return;
    st->magic = BT_LOADER_STATE_MAGIC;
    st->B = L->B; st->T = L->T; st->rank = L->rank; st->world = L->world; st->shuffle = L->shuffle;
    st->num_shards = (int32_t)L->nshards;
    st->seed = L->seed;
    st->epoch = L->epoch; st->shard = L->shard; st->position = L->position; st->step = L->step;
    st->rng = L->rng;
    st->total_tokens = L->total_tokens;
}

BT_DATA_DEF int bt_loader_set_state(bt_loader *L, const bt_loader_state *st) {
    uint64_t shard, position;
    if (!L || !st) { bt__seterr("bt_loader_set_state: NULL argument"); return -1; }
    if (st->magic != BT_LOADER_STATE_MAGIC) { bt__seterr("%s: bt_loader_set_state: not a loader state (bad magic)", L->paths[0]); return -1; }
    if (st->B != L->B || st->T != L->T || st->rank != L->rank || st->world != L->world || st->shuffle != L->shuffle || st->seed != L->seed) {
        bt__seterr("%s: bt_loader_set_state: the state is for B=%d T=%d rank=%d/%d shuffle=%d seed=%llu, this loader has B=%d T=%d rank=%d/%d shuffle=%d seed=%llu",
                   L->paths[0], st->B, st->T, st->rank, st->world, st->shuffle, (unsigned long long)st->seed,
                   L->B, L->T, L->rank, L->world, L->shuffle, (unsigned long long)L->seed);
        return -1;
    }
    if ((size_t)st->num_shards != L->nshards || st->total_tokens != L->total_tokens) {
        bt__seterr("%s: bt_loader_set_state: the state is for %d shards of %llu tokens, the glob now gives %zu shards of %llu",
                   L->paths[0], st->num_shards, (unsigned long long)st->total_tokens, L->nshards, (unsigned long long)L->total_tokens);
        return -1;
    }
    if (st->step > L->nbatches || st->rng != bt__epoch_rng(L->seed, st->epoch)) {
        bt__seterr("%s: bt_loader_set_state: step %llu of %llu or the RNG of epoch %llu is inconsistent", L->paths[0],
                   (unsigned long long)st->step, (unsigned long long)L->nbatches, (unsigned long long)st->epoch);
        return -1;
    }
    bt__loader_begin_epoch(L, st->epoch);
    bt__loader_seek(L, st->step);
    shard = L->shard; position = L->position;
    if (shard != st->shard || position != st->position) {
        bt__seterr("%s: bt_loader_set_state: shard %llu position %llu do not match step %llu (expected shard %llu position %llu)",
                   L->paths[0], (unsigned long long)st->shard, (unsigned long long)st->position, (unsigned long long)st->step,
                   (unsigned long long)shard, (unsigned long long)position);
        bt_loader_reset(L);
        return -1;
    }
    return 0;
}

/* ---- 9. JSON and text -------------------------------------------------------------------------------- */

/* length of the UTF-8 sequence at s (n > 0 bytes available) and its code point; 0 when it is
   not valid: a bad lead or continuation byte, an overlong form, a surrogate, beyond U+10FFFF */
static size_t bt__utf8_seq(const unsigned char *s, size_t n, uint32_t *cp) {
    uint32_t c = s[0], min;
    size_t len, i;
    if (c < 0x80) { *cp = c; return 1; }
    if (c >= 0xC2 && c <= 0xDF) { len = 2; c &= 0x1F; min = 0x80; }
    else if (c >= 0xE0 && c <= 0xEF) { len = 3; c &= 0x0F; min = 0x800; }
    else if (c >= 0xF0 && c <= 0xF4) { len = 4; c &= 0x07; min = 0x10000; }
    else return 0;
    if (n < len) return 0;
    for (i = 1; i < len; i++) {
        if ((s[i] & 0xC0) != 0x80) return 0;
        c = (c << 6) | (s[i] & 0x3F);
    }
    if (c < min || c > 0x10FFFF || (c >= 0xD800 && c <= 0xDFFF)) return 0;
    *cp = c;
    return len;
}
/* byte index of the first invalid UTF-8 sequence of s, or n when all is valid */
BT_DATA_DEF size_t bt_utf8_check(const char *s, size_t n) {
    size_t i = 0;
    uint32_t cp;
    while (i < n) {
        size_t l = bt__utf8_seq((const unsigned char *)s + i, n - i, &cp);
        if (!l) return i;
        i += l;
    }
    return n;
}

/* -- writer -- */
BT_DATA_DEF void bt_json_writer_init(bt_json_writer *w, int indent) {
    memset(w, 0, sizeof *w);
    w->indent = indent < 0 ? 0 : indent;
}
BT_DATA_DEF void bt_json_writer_free(bt_json_writer *w) { bt__dfree(w->buf); w->buf = NULL; w->len = w->cap = 0; }

#if defined(__GNUC__) || defined(__clang__)
__attribute__((format(printf, 2, 3)))
#endif
static void bt__jw_fail(bt_json_writer *w, const char *fmt, ...) {
    va_list ap;
    if (w->err[0]) return;
    va_start(ap, fmt);
    vsnprintf(w->err, sizeof w->err, fmt, ap);
    va_end(ap);
}
static void bt__jw_put(bt_json_writer *w, const char *s, size_t n) {
    if (w->err[0]) return;
    if (bt__grow((void **)&w->buf, &w->cap, w->len + n + 1, 1)) { bt__jw_fail(w, "out of memory at %zu bytes", w->len); return; }
    memcpy(w->buf + w->len, s, n);
    w->len += n;
    w->buf[w->len] = 0;
}
static void bt__jw_newline(bt_json_writer *w) {
    int i;
    if (!w->indent) return;
    bt__jw_put(w, "\n", 1);
    for (i = 0; i < w->depth * w->indent; i++) bt__jw_put(w, " ", 1);
}
static void bt__jw_quoted(bt_json_writer *w, const char *s, size_t n) {
    static const char hex[] = "0123456789abcdef";
    size_t i = 0, run = 0, bad = bt_utf8_check(s, n);
    if (bad < n) { bt__jw_fail(w, "string \"%.40s\": invalid UTF-8 at byte %zu", s, bad); return; }
    bt__jw_put(w, "\"", 1);
    for (i = 0; i < n; i++) {
        unsigned char c = (unsigned char)s[i];
        char esc[6];
        size_t el = 2;
        if (c >= 0x20 && c != '"' && c != '\\') continue;
        bt__jw_put(w, s + run, i - run);
        run = i + 1;
        esc[0] = '\\';
        switch (c) {
        case '"': esc[1] = '"'; break;
        case '\\': esc[1] = '\\'; break;
        case '\n': esc[1] = 'n'; break;
        case '\r': esc[1] = 'r'; break;
        case '\t': esc[1] = 't'; break;
        case '\b': esc[1] = 'b'; break;
        case '\f': esc[1] = 'f'; break;
        default: esc[1] = 'u'; esc[2] = '0'; esc[3] = '0'; esc[4] = hex[c >> 4]; esc[5] = hex[c & 15]; el = 6;
        }
        bt__jw_put(w, esc, el);
    }
    bt__jw_put(w, s + run, n - run);
    bt__jw_put(w, "\"", 1);
}
/* the separator, newline and key before a value; 0 when the value may be written */
static int bt__jw_before(bt_json_writer *w, const char *key) {
    int in_obj = w->depth > 0 && w->kind[w->depth] == 1;
    if (w->err[0]) return -1;
    if (w->depth == 0 && w->top_done) { bt__jw_fail(w, "a second top-level value"); return -1; }
    if (in_obj && !key) { bt__jw_fail(w, "a member without a key"); return -1; }
    if (!in_obj && key) { bt__jw_fail(w, "key \"%.40s\" outside an object", key); return -1; }
    if (w->depth > 0) {
        if (w->items[w->depth]) bt__jw_put(w, ",", 1);
        w->items[w->depth] = 1;
        bt__jw_newline(w);
    } else w->top_done = 1;
    if (key) {
        bt__jw_quoted(w, key, strlen(key));
        bt__jw_put(w, w->indent ? ": " : ":", w->indent ? 2 : 1);
    }
    return w->err[0] ? -1 : 0;
}
static void bt__jw_open(bt_json_writer *w, const char *key, int kind) {
    if (bt__jw_before(w, key)) return;
    if (w->depth >= BT_JSON_MAX_DEPTH) { bt__jw_fail(w, "nesting deeper than %d", BT_JSON_MAX_DEPTH); return; }
    bt__jw_put(w, kind == 1 ? "{" : "[", 1);
    w->depth++;
    w->kind[w->depth] = (unsigned char)kind;
    w->items[w->depth] = 0;
}
BT_DATA_DEF void bt_json_object(bt_json_writer *w, const char *key) { bt__jw_open(w, key, 1); }
BT_DATA_DEF void bt_json_array(bt_json_writer *w, const char *key) { bt__jw_open(w, key, 2); }
BT_DATA_DEF void bt_json_end(bt_json_writer *w) {
    int kind;
    if (w->err[0]) return;
    if (w->depth == 0) { bt__jw_fail(w, "bt_json_end with nothing open"); return; }
    kind = w->kind[w->depth];
    w->depth--;
    if (w->items[w->depth + 1]) bt__jw_newline(w);
    bt__jw_put(w, kind == 1 ? "}" : "]", 1);
}
BT_DATA_DEF void bt_json_string(bt_json_writer *w, const char *key, const char *s) {
    if (!s) { bt__jw_fail(w, "NULL string for key \"%.40s\"", key ? key : ""); return; }
    if (!bt__jw_before(w, key)) bt__jw_quoted(w, s, strlen(s));
}
static void bt__jw_text(bt_json_writer *w, const char *key, const char *text) {
    if (!bt__jw_before(w, key)) bt__jw_put(w, text, strlen(text));
}
BT_DATA_DEF void bt_json_int(bt_json_writer *w, const char *key, int64_t v) {
    char b[32]; snprintf(b, sizeof b, "%lld", (long long)v); bt__jw_text(w, key, b);
}
BT_DATA_DEF void bt_json_uint(bt_json_writer *w, const char *key, uint64_t v) {
    char b[32]; snprintf(b, sizeof b, "%llu", (unsigned long long)v); bt__jw_text(w, key, b);
}
BT_DATA_DEF void bt_json_bool(bt_json_writer *w, const char *key, int v) { bt__jw_text(w, key, v ? "true" : "false"); }
BT_DATA_DEF void bt_json_null(bt_json_writer *w, const char *key) { bt__jw_text(w, key, "null"); }

/* strtod and snprintf follow LC_NUMERIC; JSON and our metadata always use '.' */
static char bt__decimal_point(void) {
    const struct lconv *lc = localeconv();
    return lc && lc->decimal_point && lc->decimal_point[0] ? lc->decimal_point[0] : '.';
}
/* the shortest %.Ng (N = 15..17) that reads back as v, with '.' as the decimal point */
BT_DATA_DEF void bt_format_double(double v, char *b, size_t n) {
    int prec;
    char dp = bt__decimal_point(), *q;
    for (prec = 15; prec <= 17; prec++) {
        snprintf(b, n, "%.*g", prec, v);
        if (strtod(b, NULL) == v) break;
    }
    if (dp != '.') for (q = b; *q; q++) if (*q == dp) *q = '.';
}
/* strtod of a '.'-decimal text, whatever the locale; 0 ok when all of s was consumed */
BT_DATA_DEF int bt_parse_double(const char *s, double *v) {
    char buf[512], dp = bt__decimal_point(), *end, *q;
    size_t n = strlen(s);
    if (n == 0 || n >= sizeof buf) return -1;
    memcpy(buf, s, n + 1);
    if (dp != '.') for (q = buf; *q; q++) if (*q == '.') *q = dp;
    errno = 0;
    *v = strtod(buf, &end);
    return *end ? -1 : 0;
}
BT_DATA_DEF void bt_json_number(bt_json_writer *w, const char *key, double v) {
    char b[40];
    if (!(v == v) || v > 1.7976931348623157e308 || v < -1.7976931348623157e308) {
        bt__jw_fail(w, "number %g for key \"%.40s\" is not finite (JSON has no NaN or infinity)", v, key ? key : "");
        return;
    }
    bt_format_double(v, b, sizeof b);
    bt__jw_text(w, key, b);
}
BT_DATA_DEF const char *bt_json_text(bt_json_writer *w, size_t *len) {
    if (!w->err[0] && w->depth) bt__jw_fail(w, "%d object(s)/array(s) still open", w->depth);
    if (!w->err[0] && !w->top_done) bt__jw_fail(w, "no value written");
    if (w->err[0]) { bt__seterr("JSON writer: %s", w->err); return NULL; }
    if (len) *len = w->len;
    return w->buf;
}

/* -- parser -- */
#define BT__JSON_MAX_VALUES ((size_t)1 << 24)
#define BT__JBLOCK 512
typedef struct bt__jblock { struct bt__jblock *next; size_t used; bt_json v[BT__JBLOCK]; } bt__jblock;
struct bt_json_doc {
    bt_json *root;
    char *text;              /* decoded strings and number texts, NUL-separated */
    size_t text_used, text_cap;
    bt__jblock *blocks;
    size_t nvalues;
};
typedef struct {
    const char *s;
    size_t n, i;
    size_t base;             /* added to byte offsets in messages (a header's place in its file) */
    int depth, max_depth;
    bt_json_doc *d;
    char err[256];
} bt__jparser;

#if defined(__GNUC__) || defined(__clang__)
__attribute__((format(printf, 3, 4)))
#endif
static int bt__jp_fail(bt__jparser *p, size_t at, const char *fmt, ...) {
    va_list ap;
    int k;
    if (p->err[0]) return -1;
    k = snprintf(p->err, sizeof p->err, "byte %zu: ", at + p->base);
    va_start(ap, fmt);
    vsnprintf(p->err + k, sizeof p->err - (size_t)k, fmt, ap);
    va_end(ap);
    return -1;
}
static bt_json *bt__jp_node(bt__jparser *p) {
    bt__jblock *b = p->d->blocks;
    bt_json *v;
    if (p->d->nvalues >= BT__JSON_MAX_VALUES) { bt__jp_fail(p, p->i, "more than %zu values", BT__JSON_MAX_VALUES); return NULL; }
    if (!b || b->used == BT__JBLOCK) {
        b = (bt__jblock *)bt__dmalloc(sizeof *b);
        if (!b) { bt__jp_fail(p, p->i, "out of memory"); return NULL; }
        b->next = p->d->blocks; b->used = 0;
        p->d->blocks = b;
    }
    v = &b->v[b->used++];
    memset(v, 0, sizeof *v);
    p->d->nvalues++;
    return v;
}
static void bt__jp_ws(bt__jparser *p) {
    while (p->i < p->n) {
        char c = p->s[p->i];
        if (c != ' ' && c != '\t' && c != '\n' && c != '\r') break;
        p->i++;
    }
}
static int bt__jp_hex4(bt__jparser *p, size_t at, uint32_t *v) {
    size_t k;
    *v = 0;
    if (at + 4 > p->n) return bt__jp_fail(p, at, "truncated \\u escape");
    for (k = 0; k < 4; k++) {
        char c = p->s[at + k];
        uint32_t d = c >= '0' && c <= '9' ? (uint32_t)(c - '0') : c >= 'a' && c <= 'f' ? (uint32_t)(c - 'a' + 10)
                   : c >= 'A' && c <= 'F' ? (uint32_t)(c - 'A' + 10) : 99u;
        if (d == 99u) return bt__jp_fail(p, at + k, "bad hex digit in a \\u escape");
        *v = *v * 16 + d;
    }
    return 0;
}
static void bt__jp_emit_utf8(char *o, size_t *k, uint32_t cp) {
    if (cp < 0x80) o[(*k)++] = (char)cp;
    else if (cp < 0x800) { o[(*k)++] = (char)(0xC0 | (cp >> 6)); o[(*k)++] = (char)(0x80 | (cp & 0x3F)); }
    else if (cp < 0x10000) {
        o[(*k)++] = (char)(0xE0 | (cp >> 12)); o[(*k)++] = (char)(0x80 | ((cp >> 6) & 0x3F));
        o[(*k)++] = (char)(0x80 | (cp & 0x3F));
    } else {
        o[(*k)++] = (char)(0xF0 | (cp >> 18)); o[(*k)++] = (char)(0x80 | ((cp >> 12) & 0x3F));
        o[(*k)++] = (char)(0x80 | ((cp >> 6) & 0x3F)); o[(*k)++] = (char)(0x80 | (cp & 0x3F));
    }
}
/* a string at p->i (the opening quote), decoded into the doc's text; it never takes more bytes
   than its source, quotes included, so the text buffer (source length + 2) cannot overflow */
static int bt__jp_string(bt__jparser *p, const char **out, size_t *outlen) {
    size_t start = p->i, k;
    char *o = p->d->text + p->d->text_used;
    k = 0;
    p->i++;
    for (;;) {
        unsigned char c;
        if (p->i >= p->n) return bt__jp_fail(p, start, "unterminated string");
        c = (unsigned char)p->s[p->i];
        if (c == '"') { p->i++; break; }
        if (c < 0x20) return bt__jp_fail(p, p->i, "control character 0x%02x in a string (escape it)", c);
        if (c == '\\') {
            char e;
            if (p->i + 1 >= p->n) return bt__jp_fail(p, p->i, "unterminated escape");
            e = p->s[p->i + 1];
            p->i += 2;
            switch (e) {
            case '"': o[k++] = '"'; break;
            case '\\': o[k++] = '\\'; break;
            case '/': o[k++] = '/'; break;
            case 'b': o[k++] = '\b'; break;
            case 'f': o[k++] = '\f'; break;
            case 'n': o[k++] = '\n'; break;
            case 'r': o[k++] = '\r'; break;
            case 't': o[k++] = '\t'; break;
            case 'u': {
                uint32_t cp, lo;
                if (bt__jp_hex4(p, p->i, &cp)) return -1;
                p->i += 4;
                if (cp >= 0xDC00 && cp <= 0xDFFF) return bt__jp_fail(p, p->i - 6, "lone low surrogate \\u%04x", cp);
                if (cp >= 0xD800 && cp <= 0xDBFF) {
                    if (p->i + 6 > p->n || p->s[p->i] != '\\' || p->s[p->i + 1] != 'u')
                        return bt__jp_fail(p, p->i - 6, "high surrogate \\u%04x without its low half", cp);
                    if (bt__jp_hex4(p, p->i + 2, &lo)) return -1;
                    if (lo < 0xDC00 || lo > 0xDFFF) return bt__jp_fail(p, p->i, "high surrogate followed by \\u%04x", lo);
                    p->i += 6;
                    cp = 0x10000 + ((cp - 0xD800) << 10) + (lo - 0xDC00);
                }
                bt__jp_emit_utf8(o, &k, cp);
                break;
            }
            default: return bt__jp_fail(p, p->i - 2, "bad escape \\%c", e >= 0x20 && e < 0x7f ? e : '?');
            }
        } else {
            uint32_t cp;
            size_t l = bt__utf8_seq((const unsigned char *)p->s + p->i, p->n - p->i, &cp);
            if (!l) return bt__jp_fail(p, p->i, "invalid UTF-8 in a string");
            memcpy(o + k, p->s + p->i, l);
            k += l; p->i += l;
        }
    }
    o[k] = 0;
    *out = o;
    *outlen = k;
    p->d->text_used += k + 1;
    return 0;
}
static int bt__jp_number(bt__jparser *p, bt_json *v) {
    size_t start = p->i;
    char *o;
    if (p->i < p->n && p->s[p->i] == '-') p->i++;
    if (p->i >= p->n || p->s[p->i] < '0' || p->s[p->i] > '9') return bt__jp_fail(p, start, "bad number");
    if (p->s[p->i] == '0') {
        p->i++;
        if (p->i < p->n && p->s[p->i] >= '0' && p->s[p->i] <= '9') return bt__jp_fail(p, start, "number with a leading zero");
    } else while (p->i < p->n && p->s[p->i] >= '0' && p->s[p->i] <= '9') p->i++;
    if (p->i < p->n && p->s[p->i] == '.') {
        p->i++;
        if (p->i >= p->n || p->s[p->i] < '0' || p->s[p->i] > '9') return bt__jp_fail(p, p->i, "no digit after a decimal point");
        while (p->i < p->n && p->s[p->i] >= '0' && p->s[p->i] <= '9') p->i++;
    }
    if (p->i < p->n && (p->s[p->i] == 'e' || p->s[p->i] == 'E')) {
        p->i++;
        if (p->i < p->n && (p->s[p->i] == '+' || p->s[p->i] == '-')) p->i++;
        if (p->i >= p->n || p->s[p->i] < '0' || p->s[p->i] > '9') return bt__jp_fail(p, p->i, "no digit in an exponent");
        while (p->i < p->n && p->s[p->i] >= '0' && p->s[p->i] <= '9') p->i++;
    }
    o = p->d->text + p->d->text_used;
    memcpy(o, p->s + start, p->i - start);
    o[p->i - start] = 0;
    p->d->text_used += p->i - start + 1;
    v->type = BT_JSON_NUMBER;
    v->str = o; v->len = p->i - start;
    if (bt_parse_double(o, &v->num)) v->num = 0;   /* too long for the buffer: text kept */
    return 0;
}
static int bt__jp_key_cmp(const void *a, const void *b) {
    const bt_json *x = *(const bt_json *const *)a, *y = *(const bt_json *const *)b;
    size_t n = x->key_len < y->key_len ? x->key_len : y->key_len;
    int c = memcmp(x->key, y->key, n);
    return c ? c : (x->key_len > y->key_len) - (x->key_len < y->key_len);
}
/* every key of obj distinct: pairs for small objects, a sort for large ones (no quadratic
   blow-up on a header with a million keys) */
static int bt__jp_unique_keys(bt__jparser *p, const bt_json *obj) {
    const bt_json *a, *b, *dup = NULL;
    if (obj->n <= 16) {
        for (a = obj->child; a && !dup; a = a->next)
            for (b = a->next; b; b = b->next)
                if (a->key_len == b->key_len && !memcmp(a->key, b->key, a->key_len)) { dup = b; break; }
    } else {
        const bt_json **v = (const bt_json **)bt__dmalloc(obj->n * sizeof *v);
        size_t k = 0;
        if (!v) return bt__jp_fail(p, obj->offset, "out of memory checking keys");
        for (a = obj->child; a; a = a->next) v[k++] = a;
        qsort(v, k, sizeof *v, bt__jp_key_cmp);
        for (k = 1; k < obj->n && !dup; k++)
            if (!bt__jp_key_cmp(&v[k - 1], &v[k])) dup = v[k]->offset > v[k - 1]->offset ? v[k] : v[k - 1];
        bt__dfree((void *)v);
    }
    if (dup) return bt__jp_fail(p, dup->offset, "duplicate key \"%.60s\"", dup->key);
    return 0;
}
static int bt__jp_value(bt__jparser *p, bt_json *v);
static int bt__jp_container(bt__jparser *p, bt_json *v, int is_obj) {
    const bt_json **tail = &v->child;
    char close = is_obj ? '}' : ']';
    if (++p->depth > p->max_depth) return bt__jp_fail(p, p->i, "nesting deeper than %d", p->max_depth);
    v->type = is_obj ? BT_JSON_OBJECT : BT_JSON_ARRAY;
    p->i++;
    bt__jp_ws(p);
    if (p->i < p->n && p->s[p->i] == close) { p->i++; p->depth--; return 0; }
    for (;;) {
        bt_json *c = bt__jp_node(p);
        if (!c) return -1;
        bt__jp_ws(p);
        if (is_obj) {
            if (p->i >= p->n || p->s[p->i] != '"') return bt__jp_fail(p, p->i, p->i >= p->n ? "truncated object" : "expected a string key");
            if (bt__jp_string(p, &c->key, &c->key_len)) return -1;
            bt__jp_ws(p);
            if (p->i >= p->n || p->s[p->i] != ':') return bt__jp_fail(p, p->i, "expected ':' after key \"%.60s\"", c->key);
            p->i++;
            bt__jp_ws(p);
        }
        if (bt__jp_value(p, c)) return -1;
        *tail = c; tail = &c->next;
        v->n++;
        bt__jp_ws(p);
        if (p->i >= p->n) return bt__jp_fail(p, p->i, "truncated %s", is_obj ? "object" : "array");
        if (p->s[p->i] == ',') { p->i++; continue; }
        if (p->s[p->i] == close) { p->i++; break; }
        return bt__jp_fail(p, p->i, "expected ',' or '%c'", close);
    }
    p->depth--;
    return is_obj ? bt__jp_unique_keys(p, v) : 0;
}
static int bt__jp_unexpected(bt__jparser *p) {
    unsigned char c = (unsigned char)p->s[p->i];
    if (c >= 0x20 && c < 0x7f) return bt__jp_fail(p, p->i, "unexpected character '%c'", c);
    return bt__jp_fail(p, p->i, "unexpected byte 0x%02x", c);
}
static int bt__jp_literal(bt__jparser *p, const char *lit, bt_json_type t, bt_json *v) {
    size_t l = strlen(lit);
    if (p->n - p->i < l || memcmp(p->s + p->i, lit, l)) return bt__jp_unexpected(p);
    p->i += l;
    v->type = t;
    return 0;
}
static int bt__jp_value(bt__jparser *p, bt_json *v) {
    int r;
    char c;
    v->offset = p->i;
    if (p->i >= p->n) return bt__jp_fail(p, p->i, "expected a value, found the end");
    c = p->s[p->i];
    if (c == '{' || c == '[') r = bt__jp_container(p, v, c == '{');
    else if (c == '"') { v->type = BT_JSON_STRING; r = bt__jp_string(p, &v->str, &v->len); }
    else if (c == '-' || (c >= '0' && c <= '9')) r = bt__jp_number(p, v);
    else if (c == 't') r = bt__jp_literal(p, "true", BT_JSON_TRUE, v);
    else if (c == 'f') r = bt__jp_literal(p, "false", BT_JSON_FALSE, v);
    else if (c == 'n') r = bt__jp_literal(p, "null", BT_JSON_NULL, v);
    else r = bt__jp_unexpected(p);
    v->end = p->i;
    return r;
}
BT_DATA_DEF void bt_json_free(bt_json_doc *d) {
    bt__jblock *b, *nb;
    if (!d) return;
    for (b = d->blocks; b; b = nb) { nb = b->next; bt__dfree(b); }
    bt__dfree(d->text);
    bt__dfree(d);
}
/* the parser behind bt_json_parse; errors go to err (as "byte N: ...", N counted from base) */
static bt_json_doc *bt__json_parse(const char *text, size_t n, int max_depth, size_t base, char *err, size_t errlen) {
    bt__jparser p;
    bt_json_doc *d = (bt_json_doc *)bt__dmalloc(sizeof *d);
    memset(&p, 0, sizeof p);
    if (!d) { snprintf(err, errlen, "out of memory"); return NULL; }
    memset(d, 0, sizeof *d);
    p.s = text; p.n = n; p.d = d; p.base = base;
    p.max_depth = max_depth > 0 ? max_depth : BT_JSON_MAX_DEPTH;
    d->text_cap = n + 2;
    d->text = (char *)bt__dmalloc(d->text_cap);
    if (!d->text) { bt__dfree(d); snprintf(err, errlen, "out of memory for %zu bytes", n); return NULL; }
    if ((d->root = bt__jp_node(&p)) != NULL) {
        bt__jp_ws(&p);
        if (!bt__jp_value(&p, d->root)) {
            bt__jp_ws(&p);
            if (p.i < n) bt__jp_fail(&p, p.i, "unexpected text after the value");
        }
    }
    if (p.err[0]) {
        snprintf(err, errlen, "%s", p.err);
        bt_json_free(d);
        return NULL;
    }
    return d;
}
BT_DATA_DEF bt_json_doc *bt_json_parse_at(const char *text, size_t n, int max_depth, size_t base) {
    char err[300];
    bt_json_doc *d;
    if (!text && n) { bt__seterr("JSON: NULL text"); return NULL; }
    d = bt__json_parse(text ? text : "", n, max_depth, base, err, sizeof err);
    if (!d) bt__seterr("JSON, %s", err);
    return d;
}
BT_DATA_DEF bt_json_doc *bt_json_parse(const char *text, size_t n, int max_depth) { return bt_json_parse_at(text, n, max_depth, 0); }
BT_DATA_DEF const bt_json *bt_json_root(const bt_json_doc *d) { return d ? d->root : NULL; }
BT_DATA_DEF const bt_json *bt_json_get(const bt_json *obj, const char *key) {
    const bt_json *c;
    size_t kl;
    if (!obj || obj->type != BT_JSON_OBJECT || !key) return NULL;
    kl = strlen(key);
    for (c = obj->child; c; c = c->next)
        if (c->key_len == kl && !memcmp(c->key, key, kl)) return c;
    return NULL;
}
/* the decimal digits of s as a magnitude; -1 on anything else or overflow */
BT_DATA_DEF int bt_parse_u64(const char *s, uint64_t *out) {
    uint64_t v = 0;
    if (!*s) return -1;
    for (; *s; s++) {
        unsigned d;
        if (*s < '0' || *s > '9') return -1;
        d = (unsigned)(*s - '0');
        if (v > (UINT64_MAX - d) / 10) return -1;
        v = v * 10 + d;
    }
    *out = v;
    return 0;
}
BT_DATA_DEF int bt_json_u64(const bt_json *v, uint64_t *out) {
    if (!v || v->type != BT_JSON_NUMBER) return -1;
    return bt_parse_u64(v->str, out);
}
BT_DATA_DEF int bt_json_i64(const bt_json *v, int64_t *out) {
    uint64_t m;
    int neg;
    if (!v || v->type != BT_JSON_NUMBER) return -1;
    neg = v->str[0] == '-';
    if (bt_parse_u64(v->str + neg, &m)) return -1;
    if (neg ? m > (uint64_t)INT64_MAX + 1 : m > (uint64_t)INT64_MAX) return -1;
    *out = neg ? (int64_t)(0 - m) : (int64_t)m;
    return 0;
}

/* -- saving -- */
BT_DATA_DEF int bt_json_save_flags(bt_json_writer *w, const char *path, int flags) {
    size_t len;
    const char *t = bt_json_text(w, &len);
    bt_atomic_file *af;
    if (!t) return -1;
    if (!(af = bt_atomic_open_flags(path, flags))) return -1;
    if (bt_atomic_write(af, t, len) || bt_atomic_write(af, "\n", 1)) { bt_atomic_abort(af); return -1; }
    if (bt_atomic_commit(af)) return -1;
    return 0;
}
BT_DATA_DEF int bt_json_save(bt_json_writer *w, const char *path) { return bt_json_save_flags(w, path, 0); }

/* ---- 10. Multiple-choice sets ----------------------------------------------------------------- */

BT_DATA_DEF void bt_mc_free(bt_mc_set *s) {
    if (!s) return;
    bt__dfree(s->tokens); bt__dfree(s->ctx_off); bt__dfree(s->ctx_len); bt__dfree(s->n_endings);
    bt__dfree(s->end_off); bt__dfree(s->end_len); bt__dfree(s->label);
    memset(s, 0, sizeof *s);
}

BT_DATA_DEF int bt_mc_load(bt_mc_set *s, const char *path, bt_tokenizer *tok) {
    size_t len = 0, ntok = 0, tcap = 0, icap[4] = {0, 0, 0, 0}, ecap[2] = {0, 0}, at = 0;
    char *buf, *text = NULL;
    int64_t line = 0;
    int rc = -1;
    memset(s, 0, sizeof *s);
    s->max_endings = BT_MC_MAX_ENDINGS;   /* the rows' stride while reading; shrunk at the end */
    if (!tok) { bt__seterr("%s: bt_mc_load: no tokenizer", path); return -1; }
    if (!(buf = bt__read_file(path, &len))) return -1;
    while (at < len) {
        size_t end = at, tlen;
        bt_json_doc *d = NULL;
        const bt_json *root, *ctx, *ends, *lab, *act, *e;
        int64_t labv, i = s->n_items;
        int k;
        while (end < len && buf[end] != '\n') end++;
        line++;
        {
            size_t a = at;
            at = end + 1;
            while (a < end && (buf[a] == ' ' || buf[a] == '\t' || buf[a] == '\r')) a++;
            if (a == end) continue;   /* blank lines are allowed */
            if (!(d = bt_json_parse(buf + a, end - a, 0))) { bt__seterr("%s:%lld: %s", path, (long long)line, bt_data_error()); goto done; }
        }
        root = bt_json_root(d);
        ctx = bt_json_get(root, "ctx"); ends = bt_json_get(root, "endings"); lab = bt_json_get(root, "label");
        act = bt_json_get(root, "activity_label");
        {
            const char *bad = root->type != BT_JSON_OBJECT ? "the line is not a JSON object"
                : !ctx || ctx->type != BT_JSON_STRING ? "no string member \"ctx\""
                : !ends || ends->type != BT_JSON_ARRAY ? "no array member \"endings\""
                : !lab ? "no member \"label\""
                : act && act->type != BT_JSON_STRING ? "\"activity_label\" is not a string"
                : ends->n < 2 || ends->n > BT_MC_MAX_ENDINGS ? "\"endings\" must hold 2 to 16 endings" : NULL;
            /* HellaSwag writes its label as a number; some copies as a string of digits */
            if (!bad && lab->type == BT_JSON_STRING) { uint64_t u; labv = bt_parse_u64(lab->str, &u) || u > 1000 ? -1 : (int64_t)u; }
            else if (!bad && bt_json_i64(lab, &labv)) labv = -1;
            if (!bad && (labv < 0 || labv >= (int64_t)ends->n)) bad = "\"label\" is not the index of an ending";
            for (e = bad ? NULL : ends->child; e && !bad; e = e->next) if (e->type != BT_JSON_STRING) bad = "an ending is not a string";
            if (bad) { bt__seterr("%s:%lld: %s", path, (long long)line, bad); bt_json_free(d); goto done; }
        }
        if (bt__grow((void **)&s->ctx_off, &icap[0], (size_t)i + 1, sizeof *s->ctx_off) ||
            bt__grow((void **)&s->ctx_len, &icap[1], (size_t)i + 1, sizeof *s->ctx_len) ||
            bt__grow((void **)&s->n_endings, &icap[2], (size_t)i + 1, sizeof *s->n_endings) ||
            bt__grow((void **)&s->label, &icap[3], (size_t)i + 1, sizeof *s->label) ||
            bt__grow((void **)&s->end_off, &ecap[0], ((size_t)i + 1) * BT_MC_MAX_ENDINGS, sizeof *s->end_off) ||
            bt__grow((void **)&s->end_len, &ecap[1], ((size_t)i + 1) * BT_MC_MAX_ENDINGS, sizeof *s->end_len)) goto oom;
        /* the context: "LABEL: ctx" when the activity label is there */
        tlen = (act ? act->len + 2 : 0) + ctx->len;
        bt__dfree(text);
        if (!(text = (char *)bt__dmalloc(tlen + 1))) goto oom;
        if (act) { memcpy(text, act->str, act->len); memcpy(text + act->len, ": ", 2); }
        memcpy(text + (act ? act->len + 2 : 0), ctx->str, ctx->len);
        s->ctx_off[i] = (int64_t)ntok;
        if ((ntok = bt_encode_append(tok, text, tlen, &s->tokens, ntok, &tcap)) == (size_t)-1) { bt__seterr("%s:%lld: %s", path, (long long)line, bt_data_error()); bt_json_free(d); goto done; }
        s->ctx_len[i] = (int32_t)(ntok - (size_t)s->ctx_off[i]);
        s->n_endings[i] = (int32_t)ends->n;
        s->label[i] = (int32_t)labv;
        for (e = ends->child, k = 0; e; e = e->next, k++) {
            char *et = (char *)bt__dmalloc(e->len + 2);
            size_t before = ntok;
            if (!et) goto oom;
            et[0] = ' ';
            memcpy(et + 1, e->str, e->len);
            ntok = bt_encode_append(tok, et, e->len + 1, &s->tokens, ntok, &tcap);
            bt__dfree(et);
            if (ntok == (size_t)-1) { bt__seterr("%s:%lld: ending %d: %s", path, (long long)line, k, bt_data_error()); bt_json_free(d); goto done; }
            s->end_off[i * BT_MC_MAX_ENDINGS + k] = (int64_t)before;
            s->end_len[i * BT_MC_MAX_ENDINGS + k] = (int32_t)(ntok - before);
            if (ntok - before + (size_t)s->ctx_len[i] > (size_t)s->max_row) s->max_row = (int64_t)(ntok - before) + s->ctx_len[i];
        }
        s->n_items++;
        bt_json_free(d);
        if (ntok > (size_t)INT32_MAX * 4) { bt__seterr("%s:%lld: more than 2^33 tokens in a multiple-choice set", path, (long long)line); goto done; }
    }
    if (!s->n_items) { bt__seterr("%s: no item (one JSON object a line: ctx, endings, label)", path); goto done; }
    {   /* the stride: the most endings any item has */
        int me = 2;
        int64_t i;
        int k;
        for (i = 0; i < s->n_items; i++) if (s->n_endings[i] > me) me = s->n_endings[i];
        for (i = 0; i < s->n_items; i++)
            for (k = 0; k < me; k++) {
                int have = k < s->n_endings[i];
                s->end_off[i * me + k] = have ? s->end_off[i * BT_MC_MAX_ENDINGS + k] : 0;
                s->end_len[i * me + k] = have ? s->end_len[i * BT_MC_MAX_ENDINGS + k] : 0;
            }
        s->max_endings = me;
    }
    s->n_tokens = (int64_t)ntok;
    rc = 0;
    goto done;
oom:
    bt__seterr("%s:%lld: out of memory", path, (long long)line);
done:
    bt__dfree(buf); bt__dfree(text);
    if (rc) bt_mc_free(s);
    return rc;
}

#endif /* BT_DATA_IMPLEMENTATION_DONE */
#endif /* BT_DATA_IMPLEMENTATION */
