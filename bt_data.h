/* bt_data.h - BluTrain-C training data, v0.1: GPT-2 byte-level BPE, token shards, a data loader.

   USAGE
     #define BT_DATA_IMPLEMENTATION   in *one* C/CUDA file before including this header.
     It stands alone: it includes no other bt_ header, and needs only libc and POSIX
     (mmap, glob). It compiles as C11 and as CUDA C++ (nvcc -x cu).

     bt_tokenizer *tok = bt_tokenizer_load("data/encoder.json", "data/vocab.bpe");
     int32_t *ids; size_t n = bt_encode(tok, text, len, &ids);    // ids are malloc'd
     char *s;      size_t m = bt_decode(tok, ids, n, &s);          // m bytes (+ a NUL not counted)
     free(ids); free(s); bt_tokenizer_free(tok);

     bt_shard_write("data/x.bin", tokens, n);                      // llm.c's shard layout
     bt_loader *L = bt_loader_open("data/x_train*.bin", B, T, rank, world, 1, seed);
     while (training) bt_loader_next(L, inputs, targets);          // B*T int32 each
     bt_loader_close(L);

   WHAT IT DOES
     1. Tokenizer: GPT-2's byte-level BPE, read from OpenAI's encoder.json and vocab.bpe.
        Text is split by GPT-2's pre-tokenizer pattern
            's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+
        (matched by hand, no regex engine; \p{L}, \p{N} and \s = White_Space come from the
        Unicode table in bt_unicode_table.h, made by tools/gen_unicode_table.py). Each piece's
        bytes start as 256 single-byte tokens and the adjacent pair of lowest merge rank is
        merged until none is left (a heap: O(k log k) for a k-byte piece); results are cached.
        Bytes that are not valid UTF-8 are their own pieces of the "other" class, so any byte
        string encodes and decode(encode(x)) == x. encode never emits <|endoftext|> (50256)
        from text: callers insert BT_EOT themselves where documents end.
     2. Shards: llm.c's file layout: 256 int32 header (magic 20240520, version 1, token count),
        then uint16 tokens. Written to a temp file and renamed (atomic); read through mmap, with
        the header and the file size checked.
     3. Loader: batches of B x (T+1) tokens (inputs = the first T of a row, targets = the last
        T). A shard of n tokens holds (n-1)/(B*T) windows of B*T+1 tokens (consecutive windows
        share one token). The windows of all shards, in the epoch's order, form one list; rank r
        of world takes windows r, r+world, r+2*world, ..., so ranks are disjoint and every rank
        has the same number of batches (the last list%world windows of an epoch are skipped).
        With shuffle, each epoch permutes the shard order and the windows inside each shard,
        from (seed, epoch); without, all is in file order (validation). The state (epoch, shard,
        position, RNG) is plain data: save it with a checkpoint and a resumed run sees the same
        batches.

   ERRORS
     Library code never prints and never exits. A failing function returns NULL / -1 /
     (size_t)-1 and leaves a message for bt_data_error(): it names the file and the problem.
     The message lives in a per-thread buffer.

   OPTIONS (define before the implementation)
     BT_MALLOC/BT_FREE (both or neither; else malloc/free). Buffers handed to the caller
     (bt_encode's ids, bt_decode's text) come from BT_MALLOC: release them with BT_FREE.
     BT_DATA_STATIC: make every function static to the including file.

   HISTORY
     0.1  first version: tokenizer, shards, loader, bt_tokenize tool.
*/
#ifndef BT_DATA_H
#define BT_DATA_H

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

/* ---- tokenizer ---- */
#define BT_EOT 50256                 /* <|endoftext|> */
#define BT_GPT2_VOCAB 50257
typedef struct bt_tokenizer bt_tokenizer;

BT_DATA_DEF bt_tokenizer *bt_tokenizer_load(const char *encoder_json_path, const char *vocab_bpe_path);
BT_DATA_DEF void bt_tokenizer_free(bt_tokenizer *t);               /* NULL is a no-op */
BT_DATA_DEF int  bt_tokenizer_vocab_size(const bt_tokenizer *t);    /* 50257 for GPT-2 */
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
/* Drop the merge cache (it is bounded anyway; this frees its memory now). */
BT_DATA_DEF void bt_tokenizer_clear_cache(bt_tokenizer *t);

/* ---- shards (llm.c layout) ---- */
#define BT_SHARD_MAGIC 20240520
#define BT_SHARD_VERSION 1
#define BT_SHARD_HEADER_INTS 256
#define BT_SHARD_HEADER_BYTES (BT_SHARD_HEADER_INTS * 4)

/* Atomic: writes path.tmp.<pid> and renames it over path. n <= INT32_MAX. 0 ok, -1 error. */
BT_DATA_DEF int bt_shard_write(const char *path, const uint16_t *tokens, size_t n);

typedef struct {
    const uint16_t *tokens;   /* n tokens, read-only, mmap'd */
    size_t n;
    void *map_;               /* private: the mapping and its length */
    size_t map_len_;
} bt_shard;
/* 0 ok; -1 (s zeroed) on a missing file, bad magic, wrong version, or a size that disagrees
   with the header's token count. */
BT_DATA_DEF int  bt_shard_open(bt_shard *s, const char *path);
BT_DATA_DEF void bt_shard_close(bt_shard *s);            /* safe on a zeroed or closed shard */
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
   Every shard is opened and checked now; NULL on error (no match, a bad shard, no shard
   large enough for one batch of B*T+1 tokens, fewer windows than world). */
BT_DATA_DEF bt_loader *bt_loader_open(const char *glob, int B, int T, int rank, int world,
                                      int shuffle, uint64_t seed);
/* Fills inputs and targets (B*T int32 each, row-major B x T). Past the end of an epoch it
   starts the next one (reshuffled). 0 ok, -1 error (a shard became unreadable). */
BT_DATA_DEF int    bt_loader_next(bt_loader *L, int32_t *inputs, int32_t *targets);
BT_DATA_DEF void   bt_loader_reset(bt_loader *L);               /* epoch 0, first batch */
BT_DATA_DEF size_t bt_loader_num_batches(const bt_loader *L);   /* per epoch, this rank */
BT_DATA_DEF size_t bt_loader_num_shards(const bt_loader *L);
BT_DATA_DEF const char *bt_loader_shard_path(const bt_loader *L, size_t i);  /* sorted order */
BT_DATA_DEF void   bt_loader_get_state(const bt_loader *L, bt_loader_state *st);
/* -1 if st does not belong to this loader (B, T, rank, world, files, seed) or is out of range. */
BT_DATA_DEF int    bt_loader_set_state(bt_loader *L, const bt_loader_state *st);
BT_DATA_DEF void   bt_loader_close(bt_loader *L);               /* NULL is a no-op */

#ifdef __cplusplus
}
#endif
#endif /* BT_DATA_H */
