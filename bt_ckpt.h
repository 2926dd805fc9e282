/* bt_ckpt.h - BluTrain-C checkpoints, v0.2: safetensors files with checksums, atomic and asynchronous
   saves, resume helpers, Hugging Face interop.

   USAGE
     #define BT_CKPT_IMPLEMENTATION   in *one* C/CUDA file before including this header (with the
     implementations of bt_tensor.h, bt_alloc.h and bt_data.h in that file or another). It includes
     bt_tensor.h and bt_data.h; compiled by nvcc (BT_CUDA) it copies GPU tensors too. Like
     bt_data.h it needs POSIX.1-2008 (pread): that file defines _POSIX_C_SOURCE 200809L before
     its first #include. Link with -lpthread where libc does not hold it.

     // synchronous: any tensors, any device
     bt_ckpt_writer *w = bt_ckpt_writer_new();
     bt_ckpt_writer_add_tensor(w, "params", model_flat, 0, 0);
     bt_ckpt_meta_set_i64(bt_ckpt_writer_meta(w), "step", step);
     if (bt_ckpt_writer_save(w, "run/ckpt_000001000.safetensors")) fprintf(stderr, "%s\n", bt_ckpt_error());
     bt_ckpt_writer_free(w);

     // asynchronous: the step waits only for a device-to-host copy
     bt_ckpt_saver *s = bt_ckpt_saver_new("run", 3);             // keep the newest 3
     if (bt_ckpt_saver_snapshot(s, step, tensors, names, n, meta)) report(bt_ckpt_error());
     forward_backward();                  // reads the weights while they are copied
     bt_ckpt_saver_fence(s, NULL);        // the compute stream waits (device-side) for the copies
     optimizer_step();                    // may now overwrite the tensors
     ...
     bt_ckpt_saver_free(s);               // waits for the last save

     // resume
     char path[4096]; int64_t step;
     if (bt_ckpt_find_latest("run", &step, path, sizeof path, on_bad, NULL) == 0) {
         bt_ckpt_file *f = bt_ckpt_open(path, BT_CKPT_REQUIRE_CHECKSUMS);
         bt_ckpt_load(f, "params", model_flat, 0);            // dtype and shape must match
         bt_ckpt_meta_get_i64(bt_ckpt_file_meta(f), "step", &step);
         bt_ckpt_close(f);
     }

   THE FILE
     safetensors (what the ecosystem reads; safetensors.torch.load_file loads ours unchanged):
       8 bytes     N, the header length, little-endian u64 (a multiple of 8: the header is padded
                   with spaces, so the data starts 8-byte aligned)
       N bytes     a JSON object: {"__metadata__": {string: string, ...},
                                   "NAME": {"dtype": "F32", "shape": [..], "data_offsets": [b, e]}, ...}
       the data    each tensor's raw little-endian C-order bytes at data_offsets (relative to the
                   data's start); tensors tile the data exactly (no gap, no overlap, nothing after).
     Tensors are laid out by descending element size (8, 4, 2, 1 bytes), each group in the order
     they were added, so every tensor is aligned to its element size. Dtypes: F32 F64 BF16 F16 I32
     I64 U16 U8.
     Our __metadata__ keys (the "bt." prefix is reserved; a caller's own keys may be anything else):
       "format"               "pt" (transformers refuses a model.safetensors without it)
       "bt.checkpoint"        "1", the version of these conventions
       "bt.checksum"          "crc32c": the algorithm of the two keys below
       "bt.crc32c.NAME"       per tensor: CRC32C of its bytes, 8 lowercase hex digits
       "bt.header_crc32c"     CRC32C of the file's first 8 + N bytes (length, JSON, padding) with
                              this value's own 8 digits read as "00000000"
     The header checksum covers every tensor checksum, so any changed byte of the file is found.
     A file without "bt.checksum" (one written by another tool) reads too, structure-checked only;
     BT_CKPT_REQUIRE_CHECKSUMS makes that an error (what a resume wants).
     CRC32C (Castagnoli, reflected polynomial 0x82F63B78, as in iSCSI and ext4): the SSE4.2 crc32
     instruction when the CPU has it (checked at run time; three interleaved streams), else a
     slicing-by-8 table; both give the same values. CRCs of pieces combine (bt_crc32c_combine),
     so large tensors are checksummed by several threads.

   CHECKPOINT NAMES
     DIR/ckpt_STEP.safetensors with STEP zero-padded to 9 digits (more when larger). Only names
     of exactly that form are ours: listing, latest-valid and rotation ignore every other file.

   THE DIRECTORY
     A saver owns its directory while it lives: it holds DIR/ckpt.lock with flock(2), so a second
     saver (another run, here or on a host sharing the file system through NFS) is refused with a
     message naming the holder (pid, host, since when). The kernel drops the lock when its
     process ends, however it ends, so a lock is never stale; the file stays. Where the file
     system has no locks the saver goes on without and says so (bt_ckpt_saver_warning). Holding
     the lock, it removes the temporaries that dead writers left (a kill -9 during a save) before
     it writes. A checkpoint goes in with BT_OUTPUT_NOFOLLOW: a symbolic link at its name is
     refused, never written through or replaced.

   WRITING
     Every file goes through bt_data.h's output files (bt_atomic_open .. bt_atomic_commit): a
     temporary name in the same directory, fsync, rename, fsync of the directory. A failure or a
     kill at any moment leaves the previous file at PATH intact.

   ASYNCHRONOUS SAVES
     bt_ckpt_saver owns one writer thread and one staging buffer (pinned host memory for GPU
     tensors). snapshot() waits for the previous save if one is still running (at most one in
     flight: that wait is reported as the stall), then for GPU tensors enqueues on a copy stream,
     behind an event of the tensors' compute stream, device-to-host copies into the staging
     buffer and records a copy-done event; it returns without waiting for them. CPU tensors are
     copied on the caller's thread. Before anything overwrites or frees the tensors (the
     optimizer step) the caller makes its stream wait for that event: bt_ckpt_saver_fence
     (device-side; the host never blocks). Fenced just before the optimizer step, the copies
     overlap the next forward and backward passes, which only read the weights. The writer
     thread waits for the copies, checksums, writes the file atomically and deletes our older
     checkpoints beyond the newest `keep` (never the one just written, never a file that is not
     ours). Its errors do not end the process: the next snapshot() or wait() returns -1 with the
     message, and that snapshot is not taken. An old checkpoint that cannot be deleted fails no
     save: bt_ckpt_saver_warning() reports it. An f32 tensor whose storage holds it in two halves
     (storage->halves, bt_optim.h's THE WEIGHTS IN TWO HALVES) is copied as it is and joined by the
     writer thread before its checksum: the file holds the f32 values. (The writer's add_tensor and
     bt_ckpt_load refuse such a tensor: join it first.)

   READING
     bt_ckpt_open reads and checks the header only: the length (at most 100,000,000 bytes, as
     safetensors), the JSON (bt_data.h's strict parser: RFC 8259 grammar, UTF-8, escapes, nesting at most
     64 deep, duplicate keys rejected), every tensor entry, the tiling of the data, the file's
     size, and the header checksum. Tensor bytes are read on demand (pread, never mmap, so a file
     that shrinks under us is an error, not a SIGBUS) and their checksum verified on each read;
     bt_ckpt_verify reads and checks all. Every problem is an error message naming the file, the
     tensor and the byte offsets; nothing is read out of bounds.

   HUGGING FACE
     A model in another layout loads tensor by tensor: bt_ckpt_load(f, name, dst, flags) with
     BT_CKPT_TRANSPOSE (transformers' Conv1D stores [in, out], a linear layer here is [out, in]),
     BT_CKPT_PAD_ROWS (a vocabulary padded past the file's rows: the extra rows become zeros)
     and BT_CKPT_CONVERT (e.g. an F16 file into F32 weights); dst may be any view (one layer's
     slice of a stacked buffer). Export is the reverse: bt_ckpt_writer_add_tensor(w, name, t,
     BT_CKPT_TRANSPOSE, rows). config.json is written with bt_data.h's JSON writer and bt_json_save.

   ERRORS
     Functions return -1 / NULL and leave a message for bt_ckpt_error() (a per-thread buffer),
     as bt_data.h does (a long one keeps its head and its tail: bt_msgf); they never print and
     never exit. Exception: a failure inside bt_tensor.h's own calls (a CUDA error during a
     copy) raises bt_error as any op does.

   THREADS
     Checksums and reads of large tensors use OpenMP threads (bt_ckpt_set_threads; built
     without OpenMP they run on one). A writer, file or saver belongs to one thread; the saver's
     own writer thread touches no bt_tensor state.

   OPTIONS
     BT_CKPT_MAX_HEADER (100000000): the largest header read or written.

   HISTORY
     0.2  the saver locks its directory and sweeps dead writers' temporaries at once; rotation
          failures are warnings; links at a checkpoint's name are refused.
     0.1  first version.
*/
#ifndef BT_CKPT_H
#define BT_CKPT_H

#include "bt_tensor.h"
#include "bt_data.h"
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#ifndef BT_CKPT_MAX_HEADER
#define BT_CKPT_MAX_HEADER 100000000ull
#endif
#define BT_CKPT_MAX_DIMS 8

/* ---- errors and threads ---- */
BTDEF const char *bt_ckpt_error(void);       /* the last failure's message in this thread */
BTDEF void bt_ckpt_set_threads(int n);       /* threads for checksums and reads; <= 0: all cores */

/* ---- dtypes of the file (safetensors' names) ---- */
typedef enum { BT_CKPT_F32 = 0, BT_CKPT_F64, BT_CKPT_BF16, BT_CKPT_F16, BT_CKPT_I32, BT_CKPT_I64,
               BT_CKPT_U16, BT_CKPT_U8, BT_CKPT_NDTYPES } bt_ckpt_dtype;
BTDEF const char *bt_ckpt_dtype_name(bt_ckpt_dtype dt);   /* "F32", ...; "?" when out of range */
BTDEF size_t bt_ckpt_dtype_size(bt_ckpt_dtype dt);        /* bytes per element; 0 when out of range */
BTDEF int bt_ckpt_dtype_of(bt_dtype dt);                  /* the file dtype of a tensor dtype, or -1 */
BTDEF int bt_ckpt_tensor_dtype(bt_ckpt_dtype dt);         /* the tensor dtype of a file dtype, or -1 (U8) */

/* ---- CRC32C ---- */
/* The standard CRC32C of n bytes continuing from crc (0 to start): bt_crc32c(0, "123456789", 9)
   is 0xe3069283. */
BTDEF uint32_t bt_crc32c(uint32_t crc, const void *buf, size_t n);
/* crc of A followed by B, from crc_a = CRC(A), crc_b = CRC(B) and B's length */
BTDEF uint32_t bt_crc32c_combine(uint32_t crc_a, uint32_t crc_b, uint64_t len_b);
/* the same value as bt_crc32c, computed by bt_ckpt_set_threads threads for large buffers */
BTDEF uint32_t bt_crc32c_parallel(uint32_t crc, const void *buf, size_t n);
BTDEF const char *bt_crc32c_backend(void);   /* "sse4.2" or "table" */
BTDEF void bt_crc32c_use_table(int on);      /* force the portable table (tests, benchmarks) */

/* ---- metadata: ordered string -> string pairs ---- */
typedef struct bt_ckpt_meta bt_ckpt_meta;
BTDEF bt_ckpt_meta *bt_ckpt_meta_new(void);                  /* NULL when out of memory */
BTDEF void bt_ckpt_meta_free(bt_ckpt_meta *m);               /* NULL is a no-op */
BTDEF int bt_ckpt_meta_set(bt_ckpt_meta *m, const char *key, const char *value);  /* adds or replaces */
BTDEF const char *bt_ckpt_meta_get(const bt_ckpt_meta *m, const char *key);       /* NULL when absent */
BTDEF int bt_ckpt_meta_count(const bt_ckpt_meta *m);
BTDEF const char *bt_ckpt_meta_key(const bt_ckpt_meta *m, int i);
BTDEF const char *bt_ckpt_meta_value(const bt_ckpt_meta *m, int i);
/* typed values, stored as text that reads back bit-exactly; a get returns -1 (message set) when
   the key is absent or its value does not parse */
BTDEF int bt_ckpt_meta_set_i64(bt_ckpt_meta *m, const char *key, int64_t v);
BTDEF int bt_ckpt_meta_get_i64(const bt_ckpt_meta *m, const char *key, int64_t *v);
/* an integer in [lo, hi]; out of range is -1 with a message naming the key, value and range */
BTDEF int bt_ckpt_meta_get_int(const bt_ckpt_meta *m, const char *key, int64_t lo, int64_t hi, int64_t *v);
BTDEF int bt_ckpt_meta_set_u64(bt_ckpt_meta *m, const char *key, uint64_t v);
BTDEF int bt_ckpt_meta_get_u64(const bt_ckpt_meta *m, const char *key, uint64_t *v);
BTDEF int bt_ckpt_meta_set_f64(bt_ckpt_meta *m, const char *key, double v);        /* %.17g, nan, inf */
BTDEF int bt_ckpt_meta_get_f64(const bt_ckpt_meta *m, const char *key, double *v);
/* bytes as base64 (e.g. the matmul autotuner's choices); get: *data is malloc'd (free it) */
BTDEF int bt_ckpt_meta_set_blob(bt_ckpt_meta *m, const char *key, const void *data, size_t n);
BTDEF int bt_ckpt_meta_get_blob(const bt_ckpt_meta *m, const char *key, void **data, size_t *n);
/* a data loader's position under key "loader.RANK", as a JSON object of its fields */
BTDEF int bt_ckpt_meta_set_loader(bt_ckpt_meta *m, int rank, const bt_loader_state *st);
BTDEF int bt_ckpt_meta_get_loader(const bt_ckpt_meta *m, int rank, bt_loader_state *st);

/* ---- flags ---- */
enum {
    BT_CKPT_VERIFY = 1,             /* open: verify every tensor's checksum now */
    BT_CKPT_REQUIRE_CHECKSUMS = 2,  /* open: a file without our checksums is an error */
    BT_CKPT_TRANSPOSE = 4,          /* load / add_tensor: the file holds the 2-D transpose */
    BT_CKPT_PAD_ROWS = 8,           /* load: dst may have more rows (dim 0) than the file: zeros */
    BT_CKPT_CONVERT = 16            /* load: the file's dtype may differ from dst's (converted) */
};

/* ---- synchronous writer ---- */
typedef struct bt_ckpt_writer bt_ckpt_writer;
BTDEF bt_ckpt_writer *bt_ckpt_writer_new(void);
BTDEF void bt_ckpt_writer_free(bt_ckpt_writer *w);           /* NULL is a no-op */
/* host bytes, referenced (not copied): keep them unchanged until save returns. shape: ndim
   (0..8) sizes; the byte count is their product times the element size. 0 ok, -1 error. */
BTDEF int bt_ckpt_writer_add(bt_ckpt_writer *w, const char *name, bt_ckpt_dtype dt, int ndim,
                             const int64_t *shape, const void *data);
/* a tensor of any device, dtype and strides: a contiguous CPU tensor is referenced, any other is
   copied to the host now. BT_CKPT_TRANSPOSE writes the transpose of a 2-D tensor; rows > 0
   writes only the first `rows` rows (dim 0, before the transpose): e.g. the real vocabulary of
   a padded embedding. */
BTDEF int bt_ckpt_writer_add_tensor(bt_ckpt_writer *w, const char *name, bt_tensor *t, int flags, int64_t rows);
BTDEF bt_ckpt_meta *bt_ckpt_writer_meta(bt_ckpt_writer *w);  /* the file's metadata, to fill */
/* checksums, then the file, atomically. 0 ok, -1 error (the previous file at path is intact).
   A symbolic link at path is written through; _flags with BT_OUTPUT_NOFOLLOW refuses it. */
BTDEF int bt_ckpt_writer_save(bt_ckpt_writer *w, const char *path);
BTDEF int bt_ckpt_writer_save_flags(bt_ckpt_writer *w, const char *path, int flags);

/* ---- reader ---- */
typedef struct {
    const char *name;
    bt_ckpt_dtype dtype;
    int ndim;
    int64_t shape[BT_CKPT_MAX_DIMS];
    uint64_t nbytes;
    uint64_t offset;                 /* of the first byte in the file */
    int has_crc; uint32_t crc;       /* the stored checksum */
} bt_ckpt_info;
typedef struct bt_ckpt_file bt_ckpt_file;
/* NULL and bt_ckpt_error() when the file is missing, truncated or malformed (see READING). */
BTDEF bt_ckpt_file *bt_ckpt_open(const char *path, int flags);
/* the same over n bytes in memory (kept by the caller while the file is open) */
BTDEF bt_ckpt_file *bt_ckpt_open_memory(const void *buf, size_t n, int flags);
BTDEF void bt_ckpt_close(bt_ckpt_file *f);                   /* NULL is a no-op */
BTDEF int bt_ckpt_count(const bt_ckpt_file *f);              /* tensors */
BTDEF const bt_ckpt_info *bt_ckpt_info_at(const bt_ckpt_file *f, int i);   /* in file order */
BTDEF const bt_ckpt_info *bt_ckpt_find(const bt_ckpt_file *f, const char *name);  /* NULL when absent */
BTDEF const bt_ckpt_meta *bt_ckpt_file_meta(const bt_ckpt_file *f);
BTDEF int bt_ckpt_has_checksums(const bt_ckpt_file *f);
/* read every tensor and check its checksum: 0, or -1 naming the first bad tensor and its bytes */
BTDEF int bt_ckpt_verify(bt_ckpt_file *f);
/* tensor `name`'s bytes into host memory of exactly nbytes, checksum verified */
BTDEF int bt_ckpt_read(bt_ckpt_file *f, const char *name, void *dst, size_t nbytes);
/* tensor `name` into dst (any device, any strides). Without flags its dtype and shape must equal
   dst's; BT_CKPT_TRANSPOSE, BT_CKPT_PAD_ROWS, BT_CKPT_CONVERT relax that as documented above. */
BTDEF int bt_ckpt_load(bt_ckpt_file *f, const char *name, bt_tensor *dst, int flags);

/* ---- asynchronous saver ---- */
typedef struct {
    int64_t snapshots, saves;        /* snapshots taken, files written */
    int64_t last_step;
    double last_stall_ms, max_stall_ms, total_stall_ms;   /* host time inside snapshot() */
    double last_wait_ms, total_wait_ms;  /* of which: waiting for the previous save */
    double last_save_ms, total_save_ms;  /* snapshot() to the file's commit */
    double last_checksum_ms, last_write_ms;  /* the writer thread's parts of the last save */
    uint64_t last_bytes, total_bytes;    /* tensor bytes */
    double last_mb_per_s;                /* last_bytes / last_save_ms */
    int64_t removed;                     /* old checkpoints deleted by rotation */
    int64_t swept;                       /* temporaries of dead writers removed when the saver started */
} bt_ckpt_saver_stats;
typedef struct bt_ckpt_saver bt_ckpt_saver;
/* dir is made when absent (and must be writable) and locked for this saver until _free (THE
   DIRECTORY); the temporaries that dead writers left there are removed. keep > 0: after each save,
   our checkpoints beyond the newest `keep` (by step) are deleted; keep <= 0 keeps all. NULL and
   bt_ckpt_error() on failure; when another process holds the lock, the message names it. */
BTDEF bt_ckpt_saver *bt_ckpt_saver_new(const char *dir, int keep);
/* Snapshot n tensors (contiguous; CPU ones, and GPU ones all on one device) under names, with
   meta (copied; may be NULL), as the checkpoint of `step`. Returns at once after enqueuing the
   copies (after waiting for a previous save still in flight). -1: this snapshot was not taken,
   because of an argument, or because the previous save failed (its message). */
BTDEF int bt_ckpt_saver_snapshot(bt_ckpt_saver *s, int64_t step, bt_tensor *const *tensors,
                                 const char *const *names, int n, const bt_ckpt_meta *meta);
/* GPU: enqueue on `stream` (a cudaStream_t; NULL: the compute stream of the snapshot's device)
   a wait for the last snapshot's copies, so later work there may overwrite the tensors. The host
   does not wait. No-op for CPU snapshots. */
BTDEF void bt_ckpt_saver_fence(bt_ckpt_saver *s, void *stream);
/* the last snapshot's copy-done event (a cudaEvent_t) for callers who wait by hand; NULL if none */
BTDEF void *bt_ckpt_saver_event(bt_ckpt_saver *s);
/* allocate the staging buffer now (bytes: the sum of the snapshot tensors' bytes; gpu: pinned
   memory, for GPU tensors), so the first snapshot does not stall on the allocation: 0, or -1 */
BTDEF int bt_ckpt_saver_reserve(bt_ckpt_saver *s, size_t bytes, int gpu);
/* block until no save is in flight: 0, or -1 with the failed save's message (reported once) */
BTDEF int bt_ckpt_saver_wait(bt_ckpt_saver *s);
BTDEF void bt_ckpt_saver_get_stats(bt_ckpt_saver *s, bt_ckpt_saver_stats *st);
BTDEF const char *bt_ckpt_saver_last_path(bt_ckpt_saver *s);   /* "" before the first save */
/* a problem that failed no save, once: 1 with its message in bt_ckpt_error() (an old checkpoint
   that rotation could not delete; a file system without locks), else 0 */
BTDEF int bt_ckpt_saver_warning(bt_ckpt_saver *s);
/* waits for the last save, stops the thread, frees everything: 0, or -1 if that save failed */
BTDEF int bt_ckpt_saver_free(bt_ckpt_saver *s);

/* ---- directories and resume ---- */
/* DIR/ckpt_STEP.safetensors into buf; -1 if it does not fit */
BTDEF int bt_ckpt_path(const char *dir, int64_t step, char *buf, size_t n);
/* the steps of our checkpoints in dir, newest first (*steps malloc'd, free it); count or -1 */
BTDEF int bt_ckpt_list(const char *dir, int64_t **steps);
/* The newest checkpoint of dir that verifies fully (header, every tensor checksum, checksums
   present). Each newer one that does not is reported to on_bad (may be NULL) with the reason,
   and the next older is tried. 0: found (*step, path); 1: none valid; -1: dir unreadable. */
typedef void (*bt_ckpt_bad_fn)(const char *path, const char *why, void *user);
BTDEF int bt_ckpt_find_latest(const char *dir, int64_t *step, char *path, size_t pathlen,
                              bt_ckpt_bad_fn on_bad, void *user);

#ifdef __cplusplus
}
#endif
#endif /* BT_CKPT_H */

/* ================================================================================================
   IMPLEMENTATION
   ------------------------------------------------------------------------------------------------
   Contents
     1. Common: errors, allocation, threads, clocks, file reads
     2. CRC32C: GF(2) arithmetic, the portable table, SSE4.2, combine, parallel
     3. Metadata
     4. safetensors header: build (with checksum placeholders) and parse (every check)
     5. Writer: layout, checksums, the atomic write
     6. Reader: open, verify, read, load into tensors (CPU, GPU through pinned chunks)
     7. Asynchronous saver: staging, copy stream, writer thread, rotation, stats
     8. Directories: names, listing, the latest valid checkpoint
   (JSON, the writer and the strict parser, is bt_data.h's section 9.)
   ================================================================================================ */
#ifdef BT_CKPT_IMPLEMENTATION
#ifndef BT_CKPT_IMPLEMENTATION_DONE
#define BT_CKPT_IMPLEMENTATION_DONE

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <stdarg.h>
#include <errno.h>
#include <fcntl.h>
#include <unistd.h>
#include <dirent.h>
#include <pthread.h>
#include <signal.h>
#include <time.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <sys/file.h>
#ifdef _OPENMP
#include <omp.h>
#endif
#ifdef BT_CUDA
#include <cuda_runtime.h>
#include "bt_kernels.cuh"
#endif

/* ---- 1. Common ------------------------------------------------------------------------------ */

#if defined(BT_MALLOC) && defined(BT_FREE)
#define bt__ckmalloc(sz) BT_MALLOC(sz)
#define bt__ckfree(p) BT_FREE(p)
#elif !defined(BT_MALLOC) && !defined(BT_FREE)
#define bt__ckmalloc(sz) malloc(sz)
#define bt__ckfree(p) free(p)
#else
#error "bt_ckpt.h: define both BT_MALLOC and BT_FREE, or neither"
#endif

#ifdef __cplusplus
#define BT__CK_TLS thread_local
#else
#define BT__CK_TLS _Thread_local
#endif

static BT__CK_TLS char bt__ck_errbuf[1024];
BTDEF const char *bt_ckpt_error(void) { return bt__ck_errbuf; }

#if defined(__GNUC__) || defined(__clang__)
__attribute__((format(printf, 1, 2)))
#endif
static void bt__ckerr(const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    bt_vmsgf(bt__ck_errbuf, sizeof bt__ck_errbuf, fmt, ap);   /* formatted aside: bt_ckpt_error() may be an argument */
    va_end(ap);
}

/* grow *p (elements of size elt, capacity *cap) to hold at least need; 0 ok, -1 out of memory */
static int bt__ck_grow(void **p, size_t *cap, size_t need, size_t elt) {
    size_t ncap;
    void *q;
    if (need <= *cap) return 0;
    ncap = *cap ? *cap : 8;
    while (ncap < need) {
        if (ncap > ((size_t)-1) / 2 / elt) return -1;
        ncap *= 2;
    }
    q = bt__ckmalloc(ncap * elt);
    if (!q) return -1;
    if (*p && *cap) memcpy(q, *p, *cap * elt);
    bt__ckfree(*p);
    *p = q;
    *cap = ncap;
    return 0;
}

static char *bt__ck_strdup(const char *s) {
    size_t n = strlen(s) + 1;
    char *d = (char *)bt__ckmalloc(n);
    if (d) memcpy(d, s, n);
    return d;
}

static double bt__ck_now_ms(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec * 1e3 + ts.tv_nsec * 1e-6;
}

static int bt__ck_nthreads = 0;
BTDEF void bt_ckpt_set_threads(int n) { bt__ck_nthreads = n > 0 ? n : 0; }
static int bt__ck_threads(void) {
    int n = bt__ck_nthreads;
#ifdef _OPENMP
    if (n <= 0) n = omp_get_num_procs();
#endif
    if (n <= 0) n = 1;
    return n > 64 ? 64 : n;
}

/* n bytes at offset off of fd into buf; 0 ok, else -1 with *got the bytes read before the end */
static int bt__ck_pread_all(int fd, void *buf, size_t n, uint64_t off, size_t *got) {
    char *p = (char *)buf;
    size_t done = 0;
    while (done < n) {
        size_t want = n - done > ((size_t)1 << 30) ? ((size_t)1 << 30) : n - done;
        ssize_t r = pread(fd, p + done, want, (off_t)(off + done));
        if (r < 0) { if (errno == EINTR) continue; if (got) *got = done; return -1; }
        if (r == 0) { errno = 0; if (got) *got = done; return -1; }
        done += (size_t)r;
    }
    if (got) *got = done;
    return 0;
}

/* ---- 2. CRC32C ------------------------------------------------------------------------------ */
/* Reflected representation: bit 31 of a register holds the coefficient of x^0, bit 0 that of
   x^31; shifting right by one multiplies by x, and the x^32 that falls off bit 0 is replaced by
   the low terms of P (0x82F63B78). The CRC register after data D from state s is
   raw(s, D) = s * x^(8|D|) + raw(0, D) (mod P), which is what lets pieces combine. */
#define BT__CRC_POLY 0x82F63B78u
#define BT__CRC_LANE 4096          /* bytes per stream of the 3-stream hardware loop */

static uint32_t bt__crc_tab[8][256];     /* slicing-by-8 */
static uint32_t bt__crc_lane_tab[4][256];/* multiply by x^(8 * BT__CRC_LANE), one byte at a time */
static int bt__crc_hw;                   /* the CPU has SSE4.2 */
static int bt__crc_force_table;
static pthread_once_t bt__crc_once = PTHREAD_ONCE_INIT;

/* a * b mod P */
static uint32_t bt__gf_mul(uint32_t a, uint32_t b) {
    uint32_t p = 0, m;
    for (m = 0x80000000u; m; m >>= 1) {      /* m walks the coefficients of a from x^0 up */
        if (a & m) p ^= b;
        b = (b >> 1) ^ ((b & 1) ? BT__CRC_POLY : 0);
    }
    return p;
}
/* x^(8n) mod P by square-and-multiply */
static uint32_t bt__gf_xpow8n(uint64_t n) {
    uint32_t r = 0x80000000u, sq = 0x80000000u >> 8;   /* x^0, x^8 */
    while (n) {
        if (n & 1) r = bt__gf_mul(r, sq);
        sq = bt__gf_mul(sq, sq);
        n >>= 1;
    }
    return r;
}

#if (defined(__x86_64__) || defined(_M_X64)) && (defined(__GNUC__) || defined(__clang__))
#define BT__CRC_X86 1
static inline uint64_t bt__crc32q(uint64_t c, uint64_t v) { __asm__("crc32q %1, %0" : "+r"(c) : "rm"(v)); return c; }
static inline uint32_t bt__crc32b(uint32_t c, uint8_t v) { __asm__("crc32b %1, %0" : "+r"(c) : "rm"(v)); return c; }
static int bt__cpu_has_sse42(void) {
    uint32_t r[4] = {1, 0, 0, 0};   /* eax = 1: feature bits; ecx bit 20 = SSE4.2 */
    __asm__ volatile("cpuid" : "+a"(r[0]), "=b"(r[1]), "+c"(r[2]), "=d"(r[3]));
    return (int)((r[2] >> 20) & 1);
}
#endif

static void bt__crc_init(void) {
    uint32_t i, k, K;
    for (i = 0; i < 256; i++) {
        uint32_t c = i;
        for (k = 0; k < 8; k++) c = (c >> 1) ^ ((c & 1) ? BT__CRC_POLY : 0);
        bt__crc_tab[0][i] = c;
    }
    for (i = 0; i < 256; i++)
        for (k = 1; k < 8; k++) bt__crc_tab[k][i] = (bt__crc_tab[k - 1][i] >> 8) ^ bt__crc_tab[0][bt__crc_tab[k - 1][i] & 0xff];
    K = bt__gf_xpow8n(BT__CRC_LANE);
    for (k = 0; k < 4; k++)
        for (i = 0; i < 256; i++) bt__crc_lane_tab[k][i] = bt__gf_mul(i << (8 * k), K);
#ifdef BT__CRC_X86
    bt__crc_hw = bt__cpu_has_sse42();
#endif
}

static inline uint64_t bt__load_le64(const unsigned char *p) {
    return (uint64_t)p[0] | (uint64_t)p[1] << 8 | (uint64_t)p[2] << 16 | (uint64_t)p[3] << 24 |
           (uint64_t)p[4] << 32 | (uint64_t)p[5] << 40 | (uint64_t)p[6] << 48 | (uint64_t)p[7] << 56;
}

/* the register after n bytes from state c, slicing-by-8: 8 table lookups per 8 bytes */
static uint32_t bt__crc_raw_table(uint32_t c, const unsigned char *p, size_t n) {
    while (n && ((uintptr_t)p & 7)) { c = (c >> 8) ^ bt__crc_tab[0][(c ^ *p++) & 0xff]; n--; }
    while (n >= 8) {
        uint64_t w = bt__load_le64(p) ^ c;
        uint32_t lo = (uint32_t)w, hi = (uint32_t)(w >> 32);
        c = bt__crc_tab[7][lo & 0xff] ^ bt__crc_tab[6][(lo >> 8) & 0xff] ^ bt__crc_tab[5][(lo >> 16) & 0xff] ^
            bt__crc_tab[4][lo >> 24] ^ bt__crc_tab[3][hi & 0xff] ^ bt__crc_tab[2][(hi >> 8) & 0xff] ^
            bt__crc_tab[1][(hi >> 16) & 0xff] ^ bt__crc_tab[0][hi >> 24];
        p += 8; n -= 8;
    }
    while (n--) c = (c >> 8) ^ bt__crc_tab[0][(c ^ *p++) & 0xff];
    return c;
}

#ifdef BT__CRC_X86
static inline uint32_t bt__crc_shift_lane(uint32_t c) {
    return bt__crc_lane_tab[0][c & 0xff] ^ bt__crc_lane_tab[1][(c >> 8) & 0xff] ^
           bt__crc_lane_tab[2][(c >> 16) & 0xff] ^ bt__crc_lane_tab[3][c >> 24];
}
/* The crc32 instruction has a latency of 3 cycles and a throughput of 1: three independent
   streams over consecutive lanes A, B, C keep it busy, and
   raw(s, ABC) = ((raw(s, A) x^8L + raw(0, B)) x^8L + raw(0, C). */
static uint32_t bt__crc_raw_hw(uint32_t c0, const unsigned char *p, size_t n) {
    uint64_t c = c0;
    while (n && ((uintptr_t)p & 7)) { c = bt__crc32b((uint32_t)c, *p++); n--; }
    while (n >= 3 * BT__CRC_LANE) {
        uint64_t a = c, b = 0, d = 0, v;
        size_t i;
        for (i = 0; i < BT__CRC_LANE; i += 8) {
            memcpy(&v, p + i, 8); a = bt__crc32q(a, v);
            memcpy(&v, p + BT__CRC_LANE + i, 8); b = bt__crc32q(b, v);
            memcpy(&v, p + 2 * BT__CRC_LANE + i, 8); d = bt__crc32q(d, v);
        }
        c = bt__crc_shift_lane(bt__crc_shift_lane((uint32_t)a) ^ (uint32_t)b) ^ (uint32_t)d;
        p += 3 * BT__CRC_LANE; n -= 3 * BT__CRC_LANE;
    }
    while (n >= 8) { uint64_t v; memcpy(&v, p, 8); c = bt__crc32q(c, v); p += 8; n -= 8; }
    while (n--) c = bt__crc32b((uint32_t)c, *p++);
    return (uint32_t)c;
}
#endif

BTDEF uint32_t bt_crc32c(uint32_t crc, const void *buf, size_t n) {
    const unsigned char *p = (const unsigned char *)buf;
    pthread_once(&bt__crc_once, bt__crc_init);
    if (!n) return crc;
#ifdef BT__CRC_X86
    if (bt__crc_hw && !bt__crc_force_table) return ~bt__crc_raw_hw(~crc, p, n);
#endif
    return ~bt__crc_raw_table(~crc, p, n);
}
/* CRC(A B) = CRC(A) x^(8|B|) + CRC(B): the pre- and post-inversions cancel (see above) */
BTDEF uint32_t bt_crc32c_combine(uint32_t crc_a, uint32_t crc_b, uint64_t len_b) {
    return len_b ? bt__gf_mul(crc_a, bt__gf_xpow8n(len_b)) ^ crc_b : crc_a;
}
BTDEF const char *bt_crc32c_backend(void) {
    pthread_once(&bt__crc_once, bt__crc_init);
    return bt__crc_hw && !bt__crc_force_table ? "sse4.2" : "table";
}
BTDEF void bt_crc32c_use_table(int on) { pthread_once(&bt__crc_once, bt__crc_init); bt__crc_force_table = on != 0; }

#define BT__CRC_PAR_MIN ((size_t)4 << 20)    /* below this one thread is as fast */
BTDEF uint32_t bt_crc32c_parallel(uint32_t crc, const void *buf, size_t n) {
    const unsigned char *p = (const unsigned char *)buf;
    int T = bt__ck_threads(), nc, i;
    size_t chunk;
    uint32_t part[64];
    if (T <= 1 || n < 2 * BT__CRC_PAR_MIN) return bt_crc32c(crc, buf, n);
    chunk = (n + (size_t)T - 1) / (size_t)T;
    if (chunk < BT__CRC_PAR_MIN) chunk = BT__CRC_PAR_MIN;
    chunk = (chunk + 4095) & ~(size_t)4095;
    nc = (int)((n + chunk - 1) / chunk);
    pthread_once(&bt__crc_once, bt__crc_init);
    #pragma omp parallel for num_threads(T) schedule(static)
    for (i = 0; i < nc; i++) {
        size_t off = (size_t)i * chunk, len = n - off < chunk ? n - off : chunk;
        part[i] = bt_crc32c(0, p + off, len);
    }
    for (i = 0; i < nc; i++) {
        size_t off = (size_t)i * chunk, len = n - off < chunk ? n - off : chunk;
        crc = bt_crc32c_combine(crc, part[i], len);
    }
    return crc;
}

/* ---- 3. Metadata ---------------------------------------------------------------------------- */

typedef struct { char *key, *value; } bt__ck_kv;
struct bt_ckpt_meta { bt__ck_kv *kv; size_t n, cap; };

BTDEF bt_ckpt_meta *bt_ckpt_meta_new(void) {
    bt_ckpt_meta *m = (bt_ckpt_meta *)bt__ckmalloc(sizeof *m);
    if (!m) { bt__ckerr("metadata: out of memory"); return NULL; }
    memset(m, 0, sizeof *m);
    return m;
}
BTDEF void bt_ckpt_meta_free(bt_ckpt_meta *m) {
    size_t i;
    if (!m) return;
    for (i = 0; i < m->n; i++) { bt__ckfree(m->kv[i].key); bt__ckfree(m->kv[i].value); }
    bt__ckfree(m->kv);
    bt__ckfree(m);
}
static long bt__ck_meta_find(const bt_ckpt_meta *m, const char *key) {
    size_t i;
    for (i = 0; i < m->n; i++) if (!strcmp(m->kv[i].key, key)) return (long)i;
    return -1;
}
BTDEF int bt_ckpt_meta_set(bt_ckpt_meta *m, const char *key, const char *value) {
    long i;
    char *v;
    if (!m || !key || !value) { bt__ckerr("metadata: NULL argument"); return -1; }
    if (bt_utf8_check(key, strlen(key)) < strlen(key) || bt_utf8_check(value, strlen(value)) < strlen(value)) {
        bt__ckerr("metadata \"%.60s\": key or value is not valid UTF-8", key); return -1;
    }
    v = bt__ck_strdup(value);
    if (!v) { bt__ckerr("metadata: out of memory"); return -1; }
    i = bt__ck_meta_find(m, key);
    if (i >= 0) { bt__ckfree(m->kv[i].value); m->kv[i].value = v; return 0; }
    if (bt__ck_grow((void **)&m->kv, &m->cap, m->n + 1, sizeof *m->kv) || !(m->kv[m->n].key = bt__ck_strdup(key))) {
        bt__ckfree(v); bt__ckerr("metadata: out of memory"); return -1;
    }
    m->kv[m->n++].value = v;
    return 0;
}
BTDEF const char *bt_ckpt_meta_get(const bt_ckpt_meta *m, const char *key) {
    long i = m && key ? bt__ck_meta_find(m, key) : -1;
    return i >= 0 ? m->kv[i].value : NULL;
}
BTDEF int bt_ckpt_meta_count(const bt_ckpt_meta *m) { return m ? (int)m->n : 0; }
BTDEF const char *bt_ckpt_meta_key(const bt_ckpt_meta *m, int i) { return m && i >= 0 && (size_t)i < m->n ? m->kv[i].key : NULL; }
BTDEF const char *bt_ckpt_meta_value(const bt_ckpt_meta *m, int i) { return m && i >= 0 && (size_t)i < m->n ? m->kv[i].value : NULL; }
static bt_ckpt_meta *bt__ck_meta_copy(const bt_ckpt_meta *src) {
    bt_ckpt_meta *m = bt_ckpt_meta_new();
    size_t i;
    if (!m || !src) return m;
    for (i = 0; i < src->n; i++)
        if (bt_ckpt_meta_set(m, src->kv[i].key, src->kv[i].value)) { bt_ckpt_meta_free(m); return NULL; }
    return m;
}
static const char *bt__ck_meta_need(const bt_ckpt_meta *m, const char *key) {
    const char *v = bt_ckpt_meta_get(m, key);
    if (!v) bt__ckerr("metadata: no key \"%.100s\"", key);
    return v;
}

BTDEF int bt_ckpt_meta_set_i64(bt_ckpt_meta *m, const char *key, int64_t v) {
    char b[32]; snprintf(b, sizeof b, "%lld", (long long)v); return bt_ckpt_meta_set(m, key, b);
}
BTDEF int bt_ckpt_meta_set_u64(bt_ckpt_meta *m, const char *key, uint64_t v) {
    char b[32]; snprintf(b, sizeof b, "%llu", (unsigned long long)v); return bt_ckpt_meta_set(m, key, b);
}
BTDEF int bt_ckpt_meta_set_f64(bt_ckpt_meta *m, const char *key, double v) {
    char b[40];
    if (v != v) strcpy(b, "nan");
    else if (v > 1.7976931348623157e308) strcpy(b, "inf");
    else if (v < -1.7976931348623157e308) strcpy(b, "-inf");
    else bt_format_double(v, b, sizeof b);
    return bt_ckpt_meta_set(m, key, b);
}
BTDEF int bt_ckpt_meta_get_u64(const bt_ckpt_meta *m, const char *key, uint64_t *v) {
    const char *s = bt__ck_meta_need(m, key);
    if (!s) return -1;
    if (bt_parse_u64(s, v)) { bt__ckerr("metadata \"%.100s\": \"%.60s\" is not an unsigned 64-bit integer", key, s); return -1; }
    return 0;
}
BTDEF int bt_ckpt_meta_get_i64(const bt_ckpt_meta *m, const char *key, int64_t *v) {
    bt_json num;
    const char *s = bt__ck_meta_need(m, key);
    if (!s) return -1;
    memset(&num, 0, sizeof num);
    num.type = BT_JSON_NUMBER; num.str = s;
    if (bt_json_i64(&num, v)) { bt__ckerr("metadata \"%.100s\": \"%.60s\" is not a 64-bit integer", key, s); return -1; }
    return 0;
}
BTDEF int bt_ckpt_meta_get_int(const bt_ckpt_meta *m, const char *key, int64_t lo, int64_t hi, int64_t *v) {
    int64_t x;
    if (bt_ckpt_meta_get_i64(m, key, &x)) return -1;
    if (x < lo || x > hi) {
        bt__ckerr("metadata \"%.100s\": %lld is out of range (%lld..%lld)", key, (long long)x, (long long)lo, (long long)hi);
        return -1;
    }
    *v = x;
    return 0;
}
BTDEF int bt_ckpt_meta_get_f64(const bt_ckpt_meta *m, const char *key, double *v) {
    const char *s = bt__ck_meta_need(m, key);
    if (!s) return -1;
    if (!strcmp(s, "nan")) { *v = NAN; return 0; }
    if (!strcmp(s, "inf")) { *v = HUGE_VAL; return 0; }
    if (!strcmp(s, "-inf")) { *v = -HUGE_VAL; return 0; }
    if ((s[0] < '0' || s[0] > '9') && s[0] != '-' ) { bt__ckerr("metadata \"%.100s\": \"%.60s\" is not a number", key, s); return -1; }
    if (bt_parse_double(s, v)) { bt__ckerr("metadata \"%.100s\": \"%.60s\" is not a number", key, s); return -1; }
    return 0;
}

static const char bt__b64[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
BTDEF int bt_ckpt_meta_set_blob(bt_ckpt_meta *m, const char *key, const void *data, size_t n) {
    const unsigned char *p = (const unsigned char *)data;
    size_t i, k = 0, len;
    char *s;
    int r;
    if (!data && n) { bt__ckerr("metadata \"%.100s\": NULL blob", key ? key : ""); return -1; }
    if (n > ((size_t)-1) / 2) { bt__ckerr("metadata: blob too large"); return -1; }
    len = (n + 2) / 3 * 4;
    s = (char *)bt__ckmalloc(len + 1);
    if (!s) { bt__ckerr("metadata: out of memory"); return -1; }
    for (i = 0; i + 2 < n; i += 3) {
        uint32_t v = (uint32_t)p[i] << 16 | (uint32_t)p[i + 1] << 8 | p[i + 2];
        s[k++] = bt__b64[v >> 18]; s[k++] = bt__b64[(v >> 12) & 63]; s[k++] = bt__b64[(v >> 6) & 63]; s[k++] = bt__b64[v & 63];
    }
    if (i < n) {
        uint32_t v = (uint32_t)p[i] << 16 | (i + 1 < n ? (uint32_t)p[i + 1] << 8 : 0);
        s[k++] = bt__b64[v >> 18]; s[k++] = bt__b64[(v >> 12) & 63];
        s[k++] = i + 1 < n ? bt__b64[(v >> 6) & 63] : '=';
        s[k++] = '=';
    }
    s[k] = 0;
    r = bt_ckpt_meta_set(m, key, s);
    bt__ckfree(s);
    return r;
}
static int bt__b64_val(char c) {
    const char *q = c ? strchr(bt__b64, c) : NULL;
    return q ? (int)(q - bt__b64) : -1;
}
BTDEF int bt_ckpt_meta_get_blob(const bt_ckpt_meta *m, const char *key, void **data, size_t *n) {
    const char *s = bt__ck_meta_need(m, key);
    size_t len, i, k = 0, pad = 0;
    unsigned char *out;
    if (!s) return -1;
    len = strlen(s);
    if (len % 4) { bt__ckerr("metadata \"%.100s\": base64 of length %zu (not a multiple of 4)", key, len); return -1; }
    if (len && s[len - 1] == '=') pad = s[len - 2] == '=' ? 2 : 1;
    out = (unsigned char *)bt__ckmalloc(len / 4 * 3 + 1);
    if (!out) { bt__ckerr("metadata: out of memory"); return -1; }
    for (i = 0; i < len; i += 4) {
        int a = bt__b64_val(s[i]), b = bt__b64_val(s[i + 1]), c, d;
        int last = i + 4 == len;
        c = last && pad >= 2 ? 0 : bt__b64_val(s[i + 2]);
        d = last && pad >= 1 ? 0 : bt__b64_val(s[i + 3]);
        if (a < 0 || b < 0 || c < 0 || d < 0) {
            bt__ckfree(out); bt__ckerr("metadata \"%.100s\": bad base64 character near position %zu", key, i); return -1;
        }
        out[k++] = (unsigned char)(a << 2 | b >> 4);
        if (!(last && pad >= 2)) out[k++] = (unsigned char)((b & 15) << 4 | c >> 2);
        if (!(last && pad >= 1)) out[k++] = (unsigned char)((c & 3) << 6 | d);
    }
    *data = out;
    *n = k;
    return 0;
}

/* the loader state's fields, one table for the writer and the reader; kind 0: uint32,
   1: int32, 2: uint64 */
#define BT__LOADER_FIELDS(X) X(magic, 0) X(B, 1) X(T, 1) X(rank, 1) X(world, 1) X(shuffle, 1) X(num_shards, 1) \
    X(seed, 2) X(epoch, 2) X(shard, 2) X(position, 2) X(step, 2) X(rng, 2) X(total_tokens, 2)
BTDEF int bt_ckpt_meta_set_loader(bt_ckpt_meta *m, int rank, const bt_loader_state *st) {
    bt_json_writer w;
    char key[32];
    const char *t;
    int r = -1;
    if (!st) { bt__ckerr("metadata: NULL loader state"); return -1; }
    bt_json_writer_init(&w, 0);
    bt_json_object(&w, NULL);
#define BT__PUT(f, kind) if (kind == 1) bt_json_int(&w, #f, (int64_t)st->f); else bt_json_uint(&w, #f, (uint64_t)st->f);
    BT__LOADER_FIELDS(BT__PUT)
#undef BT__PUT
    bt_json_end(&w);
    snprintf(key, sizeof key, "loader.%d", rank);
    if ((t = bt_json_text(&w, NULL)) != NULL) r = bt_ckpt_meta_set(m, key, t);
    else bt__ckerr("metadata \"%s\": %s", key, bt_data_error());
    bt_json_writer_free(&w);
    return r;
}
BTDEF int bt_ckpt_meta_get_loader(const bt_ckpt_meta *m, int rank, bt_loader_state *st) {
    char key[32];
    const char *s;
    bt_json_doc *d;
    const bt_json *root;
    int r = 0;
    snprintf(key, sizeof key, "loader.%d", rank);
    if (!(s = bt__ck_meta_need(m, key))) return -1;
    if (!(d = bt_json_parse(s, strlen(s), 2))) { bt__ckerr("metadata \"%s\": %s", key, bt_data_error()); return -1; }
    root = bt_json_root(d);
    memset(st, 0, sizeof *st);
    if (root->type != BT_JSON_OBJECT || root->n != 14) r = -1;
#define BT__GET(f, kind) \
    if (!r) { const bt_json *v = bt_json_get(root, #f); int64_t i; uint64_t u; \
        if (kind == 1) { if (bt_json_i64(v, &i) || i < INT32_MIN || i > INT32_MAX) r = -1; else st->f = (int32_t)i; } \
        else if (bt_json_u64(v, &u) || (kind == 0 && u > UINT32_MAX)) r = -1; else st->f = u; }
    BT__LOADER_FIELDS(BT__GET)
#undef BT__GET
    bt_json_free(d);
    if (r || st->magic != BT_LOADER_STATE_MAGIC) {
        bt__ckerr("metadata \"%s\": not a data loader state (14 integer fields with magic %u expected)", key, BT_LOADER_STATE_MAGIC);
        return -1;
    }
    return 0;
}

/* ---- 4. safetensors header ------------------------------------------------------------------ */

static const char *bt__ck_dtype_names[BT_CKPT_NDTYPES] = {"F32", "F64", "BF16", "F16", "I32", "I64", "U16", "U8"};
static const size_t bt__ck_dtype_sizes[BT_CKPT_NDTYPES] = {4, 8, 2, 2, 4, 8, 2, 1};
BTDEF const char *bt_ckpt_dtype_name(bt_ckpt_dtype dt) { return (unsigned)dt < BT_CKPT_NDTYPES ? bt__ck_dtype_names[dt] : "?"; }
BTDEF size_t bt_ckpt_dtype_size(bt_ckpt_dtype dt) { return (unsigned)dt < BT_CKPT_NDTYPES ? bt__ck_dtype_sizes[dt] : 0; }
BTDEF int bt_ckpt_dtype_of(bt_dtype dt) {
    switch (dt) {
    case BT_F32: return BT_CKPT_F32; case BT_F64: return BT_CKPT_F64; case BT_BF16: return BT_CKPT_BF16;
    case BT_F16: return BT_CKPT_F16; case BT_I32: return BT_CKPT_I32; case BT_U16: return BT_CKPT_U16;
    case BT_I64: return BT_CKPT_I64; default: return -1;
    }
}
BTDEF int bt_ckpt_tensor_dtype(bt_ckpt_dtype dt) {
    switch (dt) {
    case BT_CKPT_F32: return BT_F32; case BT_CKPT_F64: return BT_F64; case BT_CKPT_BF16: return BT_BF16;
    case BT_CKPT_F16: return BT_F16; case BT_CKPT_I32: return BT_I32; case BT_CKPT_U16: return BT_U16;
    case BT_CKPT_I64: return BT_I64; default: return -1;
    }
}

#define BT__CK_CRC_PREFIX "bt.crc32c."
#define BT__CK_HDR_CRC "bt.header_crc32c"

/* one tensor of a file being written */
typedef struct {
    char *name;
    bt_ckpt_dtype dtype;
    int ndim;
    int64_t shape[BT_CKPT_MAX_DIMS];
    uint64_t nbytes;
    const unsigned char *data;   /* host bytes */
    void *owned;                 /* data's buffer when the writer made it */
    int owned_pinned;            /* owned is from bt_alloc's pinned pool (a GPU tensor's copy: full-speed
                                    transfers, and the pool keeps the memory for the next save) */
    uint64_t begin;              /* offset in the data section */
    uint32_t crc;
    int halves;                  /* data holds an f32 array's two halves (the saver joins them in place) */
} bt__ck_entry;
/* 1 when t lies (partly) in the part of its storage held in two halves; then *whole says whether it
   is exactly that f32 array */
static int bt__ck_in_halves(const bt_tensor *t, int *whole) {
    int64_t h = t->storage ? t->storage->halves : 0;
    if (!h || t->offset * (int64_t)bt_dtype_size(t->dtype) >= 4 * h) return 0;
    if (whole) *whole = t->dtype == BT_F32 && t->offset == 0 && bt_numel(t) == h && bt_is_contiguous(t);
    return 1;
}
/* n f32 values held as [high halves | low halves] in b, joined in place: the low halves are set
   aside, then going down each f32 fills the 4 bytes of high halves at or above its index (read by
   then). -1 when the host has no memory for the 2n bytes set aside. */
static int bt__ck_join_halves(unsigned char *b, uint64_t nbytes) {
    uint64_t n = nbytes / 4, i;
    uint16_t *lo = (uint16_t *)malloc((size_t)(n ? n : 1) * 2), *hi = (uint16_t *)b;
    if (!lo) return -1;
    memcpy(lo, hi + n, (size_t)n * 2);
    for (i = n; i-- > 0;) {
        float f = bt__f32_join16(hi[i], lo[i]);
        memcpy(b + 4 * i, &f, 4);
    }
    free(lo);
    return 0;
}

/* "[2, 3]" */
static const char *bt__ck_shape_str(int ndim, const int64_t *shape, char *buf, size_t n) {
    size_t k = 0;
    int d;
    k += (size_t)snprintf(buf, n, "[");
    for (d = 0; d < ndim && k < n; d++) k += (size_t)snprintf(buf + k, n - k, d ? ", %lld" : "%lld", (long long)shape[d]);
    if (k < n) snprintf(buf + k, n - k, "]");
    return buf;
}
/* numel * size, or -1 (as uint64) on overflow */
static uint64_t bt__ck_nbytes(int ndim, const int64_t *shape, size_t elt) {
    uint64_t n = elt;
    int d;
    for (d = 0; d < ndim; d++) {
        uint64_t s = (uint64_t)shape[d];
        if (shape[d] < 0 || (s && n > UINT64_MAX / s)) return UINT64_MAX;
        n *= s;
    }
    return n;
}
static void bt__ck_hex8(char *dst, uint32_t v) {
    static const char hex[] = "0123456789abcdef";
    int i;
    for (i = 7; i >= 0; i--) { dst[i] = hex[v & 15]; v >>= 4; }
}
static int bt__ck_parse_hex8(const char *s, size_t n, uint32_t *v) {
    size_t i;
    *v = 0;
    if (n != 8) return -1;
    for (i = 0; i < 8; i++) {
        char c = s[i];
        uint32_t d = c >= '0' && c <= '9' ? (uint32_t)(c - '0') : c >= 'a' && c <= 'f' ? (uint32_t)(c - 'a' + 10) : 99u;
        if (d == 99u) return -1;
        *v = *v << 4 | d;
    }
    return 0;
}
/* CRC32C of the header bytes h (length prefix included, n bytes) read with the 8 digits at pos as zeros */
static uint32_t bt__ck_header_crc(const unsigned char *h, size_t n, size_t pos) {
    uint32_t c = bt_crc32c(0, h, pos);
    c = bt_crc32c(c, "00000000", 8);
    return bt_crc32c(c, h + pos + 8, n - pos - 8);
}

/* The complete header of entries e (laid out: begin set, in order[]), tensor checksums filled in,
   header checksum computed: 8-byte length, JSON, spaces to a multiple of 8. NULL on error. */
static unsigned char *bt__ck_build_header(const bt__ck_entry *e, const int *order, int n, const bt_ckpt_meta *user, size_t *total) {
    bt_json_writer w;
    char key[64], hex[9];
    size_t i, len, N, hdr_crc_pos;
    const char *text;
    unsigned char *h;
    int k, d;
    hex[8] = 0;
    bt_json_writer_init(&w, 0);
    bt_json_object(&w, NULL);
    bt_json_object(&w, "__metadata__");
    if (!bt_ckpt_meta_get(user, "format")) bt_json_string(&w, "format", "pt");
    bt_json_string(&w, "bt.checkpoint", "1");
    bt_json_string(&w, "bt.checksum", "crc32c");
    bt_json_string(&w, BT__CK_HDR_CRC, "00000000");
    hdr_crc_pos = 8 + w.len - 9;          /* the digits, counted from the file's start */
    for (k = 0; k < n; k++) {
        const bt__ck_entry *t = &e[order[k]];
        char *mk;
        size_t ml = strlen(BT__CK_CRC_PREFIX) + strlen(t->name) + 1;
        mk = ml <= sizeof key ? key : (char *)bt__ckmalloc(ml);
        if (!mk) { bt_json_writer_free(&w); bt__ckerr("header: out of memory"); return NULL; }
        snprintf(mk, ml, "%s%s", BT__CK_CRC_PREFIX, t->name);
        bt__ck_hex8(hex, t->crc);
        bt_json_string(&w, mk, hex);
        if (mk != key) bt__ckfree(mk);
    }
    for (i = 0; user && i < user->n; i++) bt_json_string(&w, user->kv[i].key, user->kv[i].value);
    bt_json_end(&w);
    for (k = 0; k < n; k++) {
        const bt__ck_entry *t = &e[order[k]];
        bt_json_object(&w, t->name);
        bt_json_string(&w, "dtype", bt_ckpt_dtype_name(t->dtype));
        bt_json_array(&w, "shape");
        for (d = 0; d < t->ndim; d++) bt_json_int(&w, NULL, t->shape[d]);
        bt_json_end(&w);
        bt_json_array(&w, "data_offsets");
        bt_json_uint(&w, NULL, t->begin);
        bt_json_uint(&w, NULL, t->begin + t->nbytes);
        bt_json_end(&w);
        bt_json_end(&w);
    }
    bt_json_end(&w);
    if (!(text = bt_json_text(&w, &len))) { bt__ckerr("safetensors header: %s", bt_data_error()); bt_json_writer_free(&w); return NULL; }
    N = (len + 7) & ~(size_t)7;
    if (N > BT_CKPT_MAX_HEADER) {
        bt_json_writer_free(&w);
        bt__ckerr("header of %zu bytes is larger than %llu (too many tensors or too much metadata)", N, (unsigned long long)BT_CKPT_MAX_HEADER);
        return NULL;
    }
    h = (unsigned char *)bt__ckmalloc(8 + N);
    if (!h) { bt_json_writer_free(&w); bt__ckerr("header: out of memory"); return NULL; }
    for (i = 0; i < 8; i++) h[i] = (unsigned char)((uint64_t)N >> (8 * i));
    memcpy(h + 8, text, len);
    memset(h + 8 + len, ' ', N - len);
    bt_json_writer_free(&w);
    bt__ck_hex8((char *)h + hdr_crc_pos, bt__ck_header_crc(h, 8 + N, hdr_crc_pos));
    *total = 8 + N;
    return h;
}

/* ---- 5. Writer ------------------------------------------------------------------------------ */

struct bt_ckpt_writer {
    bt__ck_entry *e;
    size_t n, cap;
    bt_ckpt_meta *meta;
};

static void bt__ck_entries_free(bt__ck_entry *e, size_t n) {
    size_t i;
    for (i = 0; i < n; i++) {
        bt__ckfree(e[i].name);
        if (e[i].owned_pinned) bt_free(e[i].owned); else bt__ckfree(e[i].owned);
    }
}
BTDEF bt_ckpt_writer *bt_ckpt_writer_new(void) {
    bt_ckpt_writer *w = (bt_ckpt_writer *)bt__ckmalloc(sizeof *w);
    if (!w) { bt__ckerr("writer: out of memory"); return NULL; }
    memset(w, 0, sizeof *w);
    if (!(w->meta = bt_ckpt_meta_new())) { bt__ckfree(w); return NULL; }
    return w;
}
BTDEF void bt_ckpt_writer_free(bt_ckpt_writer *w) {
    if (!w) return;
    bt__ck_entries_free(w->e, w->n);
    bt__ckfree(w->e);
    bt_ckpt_meta_free(w->meta);
    bt__ckfree(w);
}
BTDEF bt_ckpt_meta *bt_ckpt_writer_meta(bt_ckpt_writer *w) { return w ? w->meta : NULL; }

/* a tensor name the file can hold and that e[0..n) does not have yet */
static int bt__ck_check_name(const char *name, const bt__ck_entry *e, size_t n) {
    size_t i, len;
    if (!name || !*name) { bt__ckerr("tensor name is NULL or empty"); return -1; }
    len = strlen(name);
    if (bt_utf8_check(name, len) < len) { bt__ckerr("tensor name \"%.60s\" is not valid UTF-8", name); return -1; }
    if (!strcmp(name, "__metadata__")) { bt__ckerr("\"__metadata__\" is not a tensor name"); return -1; }
    for (i = 0; i < n; i++)
        if (!strcmp(e[i].name, name)) { bt__ckerr("tensor \"%.100s\" added twice", name); return -1; }
    return 0;
}
/* the next entry of w, name checked and copied, shape set; NULL on error */
static bt__ck_entry *bt__ck_writer_entry(bt_ckpt_writer *w, const char *name, bt_ckpt_dtype dt, int ndim, const int64_t *shape) {
    bt__ck_entry *t;
    char sb[160];
    int d;
    if (!w) { bt__ckerr("writer: NULL"); return NULL; }
    if (bt__ck_check_name(name, w->e, w->n)) return NULL;
    if ((unsigned)dt >= BT_CKPT_NDTYPES) { bt__ckerr("tensor \"%.100s\": unknown dtype %d", name, (int)dt); return NULL; }
    if (ndim < 0 || ndim > BT_CKPT_MAX_DIMS || (ndim && !shape)) { bt__ckerr("tensor \"%.100s\": %d dims (0..%d)", name, ndim, BT_CKPT_MAX_DIMS); return NULL; }
    if (bt__ck_grow((void **)&w->e, &w->cap, w->n + 1, sizeof *w->e)) { bt__ckerr("writer: out of memory"); return NULL; }
    t = &w->e[w->n];
    memset(t, 0, sizeof *t);
    t->dtype = dt; t->ndim = ndim;
    for (d = 0; d < ndim; d++) t->shape[d] = shape[d];
    t->nbytes = bt__ck_nbytes(ndim, t->shape, bt_ckpt_dtype_size(dt));
    if (t->nbytes == UINT64_MAX || t->nbytes > (uint64_t)(SIZE_MAX / 2)) {
        bt__ckerr("tensor \"%.100s\": shape %s is negative or too large", name, bt__ck_shape_str(ndim, t->shape, sb, sizeof sb));
        return NULL;
    }
    if (!(t->name = bt__ck_strdup(name))) { bt__ckerr("writer: out of memory"); return NULL; }
    return t;
}
BTDEF int bt_ckpt_writer_add(bt_ckpt_writer *w, const char *name, bt_ckpt_dtype dt, int ndim, const int64_t *shape, const void *data) {
    bt__ck_entry *t = bt__ck_writer_entry(w, name, dt, ndim, shape);
    if (!t) return -1;
    if (!data && t->nbytes) { bt__ckfree(t->name); bt__ckerr("tensor \"%.100s\": NULL data", name); return -1; }
    t->data = (const unsigned char *)data;
    w->n++;
    return 0;
}
BTDEF int bt_ckpt_writer_add_tensor(bt_ckpt_writer *w, const char *name, bt_tensor *t, int flags, int64_t rows) {
    int fdt, ndim, d, transpose = (flags & BT_CKPT_TRANSPOSE) != 0;
    int64_t shape[BT_CKPT_MAX_DIMS];
    bt__ck_entry *e;
    char sb[160];
    if (!t) { bt__ckerr("tensor \"%.100s\": NULL", name ? name : ""); return -1; }
    if ((fdt = bt_ckpt_dtype_of(t->dtype)) < 0) { bt__ckerr("tensor \"%.100s\": dtype %s has no file dtype", name ? name : "", bt_dtype_name(t->dtype)); return -1; }
    if (bt__ck_in_halves(t, NULL)) { bt__ckerr("tensor \"%.100s\": its storage holds f32 values in two halves (bt_f32_join_ them first)", name ? name : ""); return -1; }
    ndim = t->ndim;
    if (ndim > BT_CKPT_MAX_DIMS) { bt__ckerr("tensor \"%.100s\": %d dims", name ? name : "", ndim); return -1; }
    for (d = 0; d < ndim; d++) shape[d] = t->shape[d];
    if (rows > 0) {
        if (ndim < 1 || rows > shape[0]) {
            bt__ckerr("tensor \"%.100s\": %lld rows asked of shape %s", name ? name : "", (long long)rows, bt__ck_shape_str(ndim, shape, sb, sizeof sb));
            return -1;
        }
        shape[0] = rows;
    }
    if (transpose) {
        int64_t s0 = shape[0];
        if (ndim != 2) { bt__ckerr("tensor \"%.100s\": BT_CKPT_TRANSPOSE needs 2 dims, not %d", name ? name : "", ndim); return -1; }
        shape[0] = shape[1]; shape[1] = s0;
    }
    if (!(e = bt__ck_writer_entry(w, name, (bt_ckpt_dtype)fdt, ndim, shape))) return -1;
    if (bt_device_of(t).type == BT_CPU && bt_is_contiguous(t) && !transpose) {
        e->data = (const unsigned char *)bt_data_ptr(t);     /* the first rows of a contiguous tensor */
    } else {
        bt_tensor *v;
        size_t nb = e->nbytes ? (size_t)e->nbytes : 1;
        if (bt_device_of(t).type == BT_GPU && (e->owned = bt_try_alloc(bt_pinned_host(), nb, NULL))) e->owned_pinned = 1;
        else if (!(e->owned = bt__ckmalloc(nb))) {
            bt__ckfree(e->name); bt__ckerr("tensor \"%.100s\": out of host memory for %llu bytes", name, (unsigned long long)e->nbytes);
            return -1;
        }
        bt_scope_begin();
        v = rows > 0 ? bt_narrow(t, 0, 0, rows) : t;
        if (transpose) v = bt_transpose(v, 0, 1);
        bt_to_host(v, e->owned, t->dtype);    /* any device and strides, gathered in row-major order */
        bt_scope_end();
        e->data = (const unsigned char *)e->owned;
    }
    w->n++;
    return 0;
}

/* file order: by descending element size (each tensor then aligned to its element), insertion
   order within a size; sets begin; returns the data section's length */
static uint64_t bt__ck_layout(bt__ck_entry *e, int n, int *order) {
    static const size_t sizes[4] = {8, 4, 2, 1};
    uint64_t off = 0;
    int k = 0, s, i;
    for (s = 0; s < 4; s++)
        for (i = 0; i < n; i++)
            if (bt_ckpt_dtype_size(e[i].dtype) == sizes[s]) { order[k++] = i; e[i].begin = off; off += e[i].nbytes; }
    return off;
}

static int bt__ck_check_user_meta(const bt_ckpt_meta *m) {
    size_t i;
    for (i = 0; m && i < m->n; i++)
        if (!strncmp(m->kv[i].key, "bt.", 3)) {
            bt__ckerr("metadata key \"%.100s\": the \"bt.\" prefix is reserved for the checkpoint's own keys", m->kv[i].key);
            return -1;
        }
    return 0;
}

#define BT__CK_WRITE_PIECE ((size_t)64 << 20)
/* n bytes to the output file in pieces, each piece's writeback started at once (Linux), so the
   commit's fsync finds most of the file already on its way to the disk */
static int bt__ck_write_data(bt_atomic_file *af, const unsigned char *p, uint64_t n, uint64_t *pos) {
    while (n) {
        size_t c = n > BT__CK_WRITE_PIECE ? BT__CK_WRITE_PIECE : (size_t)n;
        if (bt_atomic_write(af, p, c)) return -1;
#if defined(__linux__) && defined(SYNC_FILE_RANGE_WRITE)
        sync_file_range(bt_atomic_fd(af), (off64_t)*pos, (off64_t)c, SYNC_FILE_RANGE_WRITE);
#endif
        *pos += c; p += c; n -= c;
    }
    return 0;
}

/* checksums, header, the file through bt_data.h's atomic output; times in ms (may be NULL) */
static int bt__ck_write_file(const char *path, int oflags, bt__ck_entry *e, int n, const bt_ckpt_meta *meta, double *crc_ms, double *write_ms) {
    int *order, k;
    unsigned char *h;
    size_t hlen;
    uint64_t pos = 0;
    bt_atomic_file *af;
    double t0 = bt__ck_now_ms(), t1;
    if (bt__ck_check_user_meta(meta)) return -1;
    if (!(order = (int *)bt__ckmalloc(sizeof(int) * (size_t)(n > 0 ? n : 1)))) { bt__ckerr("%s: out of memory", path); return -1; }
    bt__ck_layout(e, n, order);
    for (k = 0; k < n; k++) e[k].crc = bt_crc32c_parallel(0, e[k].data, (size_t)e[k].nbytes);
    t1 = bt__ck_now_ms();
    if (crc_ms) *crc_ms = t1 - t0;
    if (!(h = bt__ck_build_header(e, order, n, meta, &hlen))) {
        char m[1024]; snprintf(m, sizeof m, "%s", bt_ckpt_error());
        bt__ckfree(order); bt__ckerr("%s: %s", path, m); return -1;
    }
    if (!(af = bt_atomic_open_flags(path, oflags))) { bt__ckerr("%s", bt_data_error()); bt__ckfree(h); bt__ckfree(order); return -1; }
    if (bt__ck_write_data(af, h, hlen, &pos)) goto fail;
    for (k = 0; k < n; k++)
        if (bt__ck_write_data(af, e[order[k]].data, e[order[k]].nbytes, &pos)) goto fail;
    bt__ckfree(h); bt__ckfree(order);
    if (bt_atomic_commit(af)) { bt__ckerr("%s", bt_data_error()); return -1; }
    if (write_ms) *write_ms = bt__ck_now_ms() - t1;
    return 0;
fail:
    bt__ckerr("%s", bt_data_error());
    bt_atomic_abort(af);
    bt__ckfree(h); bt__ckfree(order);
    return -1;
}
BTDEF int bt_ckpt_writer_save_flags(bt_ckpt_writer *w, const char *path, int flags) {
    if (!w || !path) { bt__ckerr("writer_save: NULL argument"); return -1; }
    return bt__ck_write_file(path, flags, w->e, (int)w->n, w->meta, NULL, NULL);
}
BTDEF int bt_ckpt_writer_save(bt_ckpt_writer *w, const char *path) { return bt_ckpt_writer_save_flags(w, path, 0); }

/* ---- 6. Reader ------------------------------------------------------------------------------ */

struct bt_ckpt_file {
    char *path;
    int fd;                          /* -1 for a memory file */
    const unsigned char *mem;
    uint64_t size, data_start;       /* data_start = 8 + header length */
    bt_json_doc *doc;                /* holds the names */
    bt_ckpt_info *info;              /* by offset */
    const bt_ckpt_info **by_name;
    unsigned char *verified;
    int n;
    bt_ckpt_meta *meta;
    int checksums;
#ifdef BT_CUDA
    void *pinned[2]; size_t pinned_cap; cudaEvent_t ev[2]; int ev_pending[2]; int ev_made;
#endif
};

/* pinned host memory from bt_alloc's pinned pool, so device-to-host copies run asynchronously at
   full speed (NULL when it cannot be had) */
static void *bt__ck_pinned_alloc(size_t n) { return bt_try_alloc(bt_pinned_host(), n ? n : 1, NULL); }
static void bt__ck_pinned_free(void *p) { bt_free(p); }
BTDEF void bt_ckpt_close(bt_ckpt_file *f) {
    if (!f) return;
#ifdef BT_CUDA
    {
        int i;
        for (i = 0; i < 2; i++) {
            if (f->ev_made) { cudaEventSynchronize(f->ev[i]); cudaEventDestroy(f->ev[i]); }
            if (f->pinned[i]) bt__ck_pinned_free(f->pinned[i]);
        }
    }
#endif
    if (f->fd >= 0) close(f->fd);
    bt_json_free(f->doc);
    bt_ckpt_meta_free(f->meta);
    bt__ckfree(f->info); bt__ckfree((void *)f->by_name); bt__ckfree(f->verified); bt__ckfree(f->path);
    bt__ckfree(f);
}
BTDEF int bt_ckpt_count(const bt_ckpt_file *f) { return f ? f->n : 0; }
BTDEF const bt_ckpt_info *bt_ckpt_info_at(const bt_ckpt_file *f, int i) { return f && i >= 0 && i < f->n ? &f->info[i] : NULL; }
BTDEF const bt_ckpt_meta *bt_ckpt_file_meta(const bt_ckpt_file *f) { return f ? f->meta : NULL; }
BTDEF int bt_ckpt_has_checksums(const bt_ckpt_file *f) { return f ? f->checksums : 0; }

static int bt__ck_name_cmp(const void *a, const void *b) {
    return strcmp((*(const bt_ckpt_info *const *)a)->name, (*(const bt_ckpt_info *const *)b)->name);
}
static int bt__ck_offset_cmp(const void *a, const void *b) {
    const bt_ckpt_info *x = (const bt_ckpt_info *)a, *y = (const bt_ckpt_info *)b;
    if (x->offset != y->offset) return x->offset < y->offset ? -1 : 1;
    if (x->nbytes != y->nbytes) return x->nbytes < y->nbytes ? -1 : 1;
    return strcmp(x->name, y->name);
}
BTDEF const bt_ckpt_info *bt_ckpt_find(const bt_ckpt_file *f, const char *name) {
    bt_ckpt_info key;
    const bt_ckpt_info *kp = &key, **r;
    if (!f || !name || !f->n) return NULL;
    key.name = name;
    r = (const bt_ckpt_info **)bsearch(&kp, f->by_name, (size_t)f->n, sizeof *f->by_name, bt__ck_name_cmp);
    return r ? *r : NULL;
}

/* bytes [off, off + n) of the file; 0 ok, else -1 with *got the bytes that were there */
static int bt__ck_pread(const bt_ckpt_file *f, void *dst, size_t n, uint64_t off, size_t *got) {
    if (f->mem) {
        size_t have = off >= f->size ? 0 : (f->size - off < n ? (size_t)(f->size - off) : n);
        memcpy(dst, f->mem + off, have);
        if (got) *got = have;
        return have == n ? 0 : -1;
    }
    return bt__ck_pread_all(f->fd, dst, n, off, got);
}

/* one tensor entry {"dtype", "shape", "data_offsets"} into t (name already set); 0 ok */
static int bt__ck_parse_entry(bt_ckpt_file *f, const bt_json *v, bt_ckpt_info *t, uint64_t *begin) {
    const bt_json *c, *dt = NULL, *shape = NULL, *offs = NULL;
    uint64_t b, e, u;
    int d, k;
    char sb[160];
    if (v->type != BT_JSON_OBJECT) { bt__ckerr("%s: tensor '%.100s': its entry is not a JSON object", f->path, t->name); return -1; }
    for (c = v->child; c; c = c->next) {
        if (!strcmp(c->key, "dtype")) dt = c;
        else if (!strcmp(c->key, "shape")) shape = c;
        else if (!strcmp(c->key, "data_offsets")) offs = c;
        else { bt__ckerr("%s: tensor '%.100s': unexpected field \"%.40s\"", f->path, t->name, c->key); return -1; }
    }
    if (!dt || !shape || !offs) {
        bt__ckerr("%s: tensor '%.100s': no \"%s\"", f->path, t->name, !dt ? "dtype" : !shape ? "shape" : "data_offsets");
        return -1;
    }
    for (k = 0; k < BT_CKPT_NDTYPES; k++)
        if (dt->type == BT_JSON_STRING && !strcmp(dt->str, bt__ck_dtype_names[k])) break;
    if (k == BT_CKPT_NDTYPES) {
        bt__ckerr("%s: tensor '%.100s': dtype %.20s%s%s is not one of F32 F64 BF16 F16 I32 I64 U16 U8", f->path, t->name,
                  dt->type == BT_JSON_STRING ? "\"" : "", dt->type == BT_JSON_STRING ? dt->str : "(not a string)",
                  dt->type == BT_JSON_STRING ? "\"" : "");
        return -1;
    }
    t->dtype = (bt_ckpt_dtype)k;
    if (shape->type != BT_JSON_ARRAY || shape->n > BT_CKPT_MAX_DIMS) {
        bt__ckerr("%s: tensor '%.100s': shape is not an array of at most %d sizes", f->path, t->name, BT_CKPT_MAX_DIMS);
        return -1;
    }
    for (c = shape->child, d = 0; c; c = c->next, d++) {
        if (bt_json_u64(c, &u) || u > (uint64_t)INT64_MAX) {
            bt__ckerr("%s: tensor '%.100s': shape entry %d (%.30s) is not a non-negative integer", f->path, t->name, d,
                      c->type == BT_JSON_NUMBER ? c->str : "not a number");
            return -1;
        }
        t->shape[d] = (int64_t)u;
    }
    t->ndim = d;
    if (offs->type != BT_JSON_ARRAY || offs->n != 2 || bt_json_u64(offs->child, &b) || bt_json_u64(offs->child->next, &e) || e < b) {
        bt__ckerr("%s: tensor '%.100s': data_offsets is not [begin, end] with integers 0 <= begin <= end", f->path, t->name);
        return -1;
    }
    t->nbytes = bt__ck_nbytes(t->ndim, t->shape, bt_ckpt_dtype_size(t->dtype));
    if (t->nbytes == UINT64_MAX) {
        bt__ckerr("%s: tensor '%.100s': shape %s overflows", f->path, t->name, bt__ck_shape_str(t->ndim, t->shape, sb, sizeof sb));
        return -1;
    }
    if (e - b != t->nbytes) {
        bt__ckerr("%s: tensor '%.100s': shape %s of %s is %llu bytes, but data_offsets [%llu, %llu] span %llu", f->path, t->name,
                  bt__ck_shape_str(t->ndim, t->shape, sb, sizeof sb), bt_ckpt_dtype_name(t->dtype), (unsigned long long)t->nbytes,
                  (unsigned long long)b, (unsigned long long)e, (unsigned long long)(e - b));
        return -1;
    }
    *begin = b;
    return 0;
}

/* __metadata__ into f->meta; its header checksum verified when the file has our checksums */
static int bt__ck_parse_meta(bt_ckpt_file *f, const bt_json *md, const unsigned char *hdr, size_t N) {
    const bt_json *c, *hc = NULL;
    const char *alg;
    if (!(f->meta = bt_ckpt_meta_new())) return -1;
    if (!md) return 0;
    if (md->type != BT_JSON_OBJECT) { bt__ckerr("%s: __metadata__ is not a JSON object", f->path); return -1; }
    for (c = md->child; c; c = c->next) {
        if (c->type != BT_JSON_STRING) { bt__ckerr("%s: __metadata__ \"%.60s\": the value is not a string", f->path, c->key); return -1; }
        if (strlen(c->key) != c->key_len || strlen(c->str) != c->len) {
            bt__ckerr("%s: __metadata__ \"%.60s\": a NUL character in the key or value", f->path, c->key); return -1;
        }
        if (bt_ckpt_meta_set(f->meta, c->key, c->str)) return -1;
        if (!strcmp(c->key, BT__CK_HDR_CRC)) hc = c;
    }
    if (!(alg = bt_ckpt_meta_get(f->meta, "bt.checksum"))) return 0;
    if (strcmp(alg, "crc32c")) { bt__ckerr("%s: checksum algorithm \"%.40s\" is not known (crc32c is)", f->path, alg); return -1; }
    f->checksums = 1;
    {
        uint32_t stored, got;
        size_t pos;
        /* the stored digits are the raw 8 bytes between the value's quotes */
        if (!hc || hc->end - hc->offset != 10 || bt__ck_parse_hex8((const char *)hdr + 8 + hc->offset + 1, 8, &stored)) {
            bt__ckerr("%s: no header checksum (\"%s\" with 8 lowercase hex digits)", f->path, BT__CK_HDR_CRC);
            return -1;
        }
        pos = 8 + hc->offset + 1;
        got = bt__ck_header_crc(hdr, 8 + N, pos);
        if (got != stored) {
            bt__ckerr("%s: header checksum mismatch (file bytes 0..%zu): computed %08x, stored %08x: the header is damaged",
                      f->path, 8 + N, got, stored);
            return -1;
        }
    }
    return 0;
}

/* tensor checksums from "bt.crc32c.NAME"; every tensor must have one */
static int bt__ck_attach_crcs(bt_ckpt_file *f) {
    int i;
    size_t pl = strlen(BT__CK_CRC_PREFIX);
    if (!f->checksums) return 0;
    for (i = 0; i < (int)f->meta->n; i++) {
        const char *k = f->meta->kv[i].key, *v = f->meta->kv[i].value;
        bt_ckpt_info *t;
        if (strncmp(k, BT__CK_CRC_PREFIX, pl)) continue;
        t = (bt_ckpt_info *)bt_ckpt_find(f, k + pl);
        if (!t) { bt__ckerr("%s: metadata \"%.100s\" is the checksum of a tensor the file does not have", f->path, k); return -1; }
        if (bt__ck_parse_hex8(v, strlen(v), &t->crc)) {
            bt__ckerr("%s: tensor '%.100s': checksum \"%.20s\" is not 8 lowercase hex digits", f->path, t->name, v); return -1;
        }
        t->has_crc = 1;
    }
    for (i = 0; i < f->n; i++)
        if (!f->info[i].has_crc) { bt__ckerr("%s: tensor '%.100s' has no checksum (\"%s%.100s\")", f->path, f->info[i].name, BT__CK_CRC_PREFIX, f->info[i].name); return -1; }
    return 0;
}

/* the tensors tile the data section: no gap, no overlap, and the file ends with the last one */
static int bt__ck_check_tiling(bt_ckpt_file *f) {
    uint64_t expect = f->data_start, data_end = f->size;
    int i;
    for (i = 0; i < f->n; i++) {
        const bt_ckpt_info *t = &f->info[i], *p = i ? &f->info[i - 1] : NULL;
        if (t->offset < expect) {
            bt__ckerr("%s: tensors '%.100s' (file bytes %llu..%llu) and '%.100s' (from byte %llu) overlap", f->path, p->name,
                      (unsigned long long)p->offset, (unsigned long long)(p->offset + p->nbytes), t->name, (unsigned long long)t->offset);
            return -1;
        }
        if (t->offset > expect) {
            bt__ckerr("%s: a gap of %llu bytes at file byte %llu, before tensor '%.100s': the data is not tiled by the tensors",
                      f->path, (unsigned long long)(t->offset - expect), (unsigned long long)expect, t->name);
            return -1;
        }
        if (t->offset + t->nbytes > data_end) {
            bt__ckerr("%s: truncated: the file ends at byte %llu, inside tensor '%.100s' (file bytes %llu..%llu)", f->path,
                      (unsigned long long)data_end, t->name, (unsigned long long)t->offset, (unsigned long long)(t->offset + t->nbytes));
            return -1;
        }
        expect = t->offset + t->nbytes;
    }
    if (expect != data_end) {
        bt__ckerr("%s: %llu bytes after the last tensor (which ends at file byte %llu): not a complete safetensors file",
                  f->path, (unsigned long long)(data_end - expect), (unsigned long long)expect);
        return -1;
    }
    return 0;
}

static int bt__ck_parse_header(bt_ckpt_file *f, const unsigned char *hdr, size_t N) {
    const bt_json *root, *c, *md = NULL;
    int i;
    if (!(f->doc = bt_json_parse_at((const char *)hdr + 8, N, 8, 8))) {   /* "JSON, byte N: ..." */
        bt__ckerr("%s: header %s", f->path, bt_data_error()); return -1;
    }
    root = bt_json_root(f->doc);
    if (root->type != BT_JSON_OBJECT) { bt__ckerr("%s: the header is not a JSON object", f->path); return -1; }
    for (c = root->child; c; c = c->next) if (!strcmp(c->key, "__metadata__") && c->key_len == 12) md = c;
    if (bt__ck_parse_meta(f, md, hdr, N)) return -1;
    f->n = (int)(root->n - (md ? 1 : 0));
    f->info = (bt_ckpt_info *)bt__ckmalloc(sizeof *f->info * (size_t)(f->n ? f->n : 1));
    f->by_name = (const bt_ckpt_info **)bt__ckmalloc(sizeof *f->by_name * (size_t)(f->n ? f->n : 1));
    f->verified = (unsigned char *)bt__ckmalloc((size_t)(f->n ? f->n : 1));
    if (!f->info || !f->by_name || !f->verified) { bt__ckerr("%s: out of memory for %d tensors", f->path, f->n); return -1; }
    memset(f->info, 0, sizeof *f->info * (size_t)(f->n ? f->n : 1));
    memset(f->verified, 0, (size_t)(f->n ? f->n : 1));
    for (c = root->child, i = 0; c; c = c->next) {
        bt_ckpt_info *t;
        uint64_t begin;
        if (c == md) continue;
        t = &f->info[i++];
        t->name = c->key;
        if (!c->key_len || strlen(c->key) != c->key_len) { bt__ckerr("%s: a tensor name is empty or holds a NUL character", f->path); return -1; }
        if (bt__ck_parse_entry(f, c, t, &begin)) return -1;
        if (begin > UINT64_MAX - f->data_start - t->nbytes) { bt__ckerr("%s: tensor '%.100s': data_offsets out of range", f->path, t->name); return -1; }
        t->offset = f->data_start + begin;
    }
    qsort(f->info, (size_t)f->n, sizeof *f->info, bt__ck_offset_cmp);
    for (i = 0; i < f->n; i++) f->by_name[i] = &f->info[i];
    qsort((void *)f->by_name, (size_t)f->n, sizeof *f->by_name, bt__ck_name_cmp);
    if (bt__ck_attach_crcs(f)) return -1;
    return bt__ck_check_tiling(f);
}

static bt_ckpt_file *bt__ck_open(const char *path, int fd, const unsigned char *mem, uint64_t size, int flags) {
    bt_ckpt_file *f = (bt_ckpt_file *)bt__ckmalloc(sizeof *f);
    unsigned char len8[8], *hdr = NULL;
    uint64_t N = 0;
    int i, bad;
    if (!f) { if (fd >= 0) close(fd); bt__ckerr("%s: out of memory", path); return NULL; }
    memset(f, 0, sizeof *f);
    f->fd = fd; f->mem = mem; f->size = size;
    if (!(f->path = bt__ck_strdup(path))) { bt__ckerr("%s: out of memory", path); goto fail; }
    if (size < 8) { bt__ckerr("%s: the file is %llu bytes, too short for the 8-byte header length (truncated?)", path, (unsigned long long)size); goto fail; }
    if (bt__ck_pread(f, len8, 8, 0, NULL)) { bt__ckerr("%s: cannot read the header length: %s", path, strerror(errno)); goto fail; }
    for (i = 0; i < 8; i++) N |= (uint64_t)len8[i] << (8 * i);
    if (N > BT_CKPT_MAX_HEADER) {
        bt__ckerr("%s: header length %llu is absurd (at most %llu): not a safetensors file, or damaged", path,
                  (unsigned long long)N, (unsigned long long)BT_CKPT_MAX_HEADER);
        goto fail;
    }
    if (N < 2) { bt__ckerr("%s: header length %llu is too small for a JSON object", path, (unsigned long long)N); goto fail; }
    if (N > size - 8) {
        bt__ckerr("%s: truncated inside the header: it needs file bytes 8..%llu, the file has %llu", path,
                  (unsigned long long)(8 + N), (unsigned long long)size);
        goto fail;
    }
    f->data_start = 8 + N;
    if (!(hdr = (unsigned char *)bt__ckmalloc((size_t)N + 8))) { bt__ckerr("%s: out of memory for a %llu-byte header", path, (unsigned long long)N); goto fail; }
    if (bt__ck_pread(f, hdr, (size_t)N + 8, 0, NULL)) { bt__ckerr("%s: cannot read the header: %s", path, errno ? strerror(errno) : "end of file"); goto fail; }
    bad = bt__ck_parse_header(f, hdr, (size_t)N);
    bt__ckfree(hdr); hdr = NULL;
    if (bad) goto fail;
    if ((flags & BT_CKPT_REQUIRE_CHECKSUMS) && !f->checksums) {
        bt__ckerr("%s: the file has no checksums (no \"bt.checksum\" in __metadata__): not one of our checkpoints", path); goto fail;
    }
    if ((flags & BT_CKPT_VERIFY) && bt_ckpt_verify(f)) goto fail;
    return f;
fail:
    bt__ckfree(hdr);
    bt_ckpt_close(f);
    return NULL;
}
BTDEF bt_ckpt_file *bt_ckpt_open(const char *path, int flags) {
    uint64_t size = 0;
    int fd;
    if (!path) { bt__ckerr("bt_ckpt_open: NULL path"); return NULL; }
    if ((fd = bt_input_open(path, &size)) < 0) { bt__ckerr("%s", bt_data_error()); return NULL; }
    return bt__ck_open(path, fd, NULL, size, flags);
}
BTDEF bt_ckpt_file *bt_ckpt_open_memory(const void *buf, size_t n, int flags) {
    static const unsigned char empty[1] = {0};
    return bt__ck_open("<memory>", -1, buf ? (const unsigned char *)buf : empty, buf ? n : 0, flags);
}

#define BT__CK_READ_CHUNK ((size_t)8 << 20)
/* bytes [at, at + n) of tensor t into dst (NULL for a memory file: checksum in place) and their
   CRC into *crc, by several threads when n is large. 0 ok, -1 naming the tensor and offset. */
static int bt__ck_read_crc(const bt_ckpt_file *f, const bt_ckpt_info *t, uint64_t at, unsigned char *dst, size_t n, uint32_t *crc) {
    uint64_t off = t->offset + at, bad_at = UINT64_MAX;
    int T = bt__ck_threads();
    /* about two pieces per thread, 1..8 MiB each: every thread busy, little scheduling */
    size_t chunk = n / (size_t)(2 * T), nc, c;
    uint32_t *part, one;
    int bad_errno = 0;
    long ci;
    chunk = chunk < ((size_t)1 << 20) ? ((size_t)1 << 20) : chunk > BT__CK_READ_CHUNK ? BT__CK_READ_CHUNK : (chunk + 4095) & ~(size_t)4095;
    nc = (n + chunk - 1) / chunk;
    if (f->mem && !dst) { *crc = bt_crc32c_parallel(0, f->mem + off, n); return 0; }
    part = nc > 1 ? (uint32_t *)bt__ckmalloc(nc * sizeof *part) : &one;
    if (!part) { bt__ckerr("%s: out of memory", f->path); return -1; }
    #pragma omp parallel for schedule(dynamic, 1) num_threads(T) if (nc > 1)
    for (ci = 0; ci < (long)nc; ci++) {
        size_t o = (size_t)ci * chunk, len = n - o < chunk ? n - o : chunk, got = 0;
        if (bt__ck_pread(f, dst + o, len, off + o, &got)) {
            #pragma omp critical(bt__ck_read_err)
            if (off + o + got < bad_at) { bad_at = off + o + got; bad_errno = errno; }
        } else part[ci] = bt_crc32c(0, dst + o, len);
    }
    if (bad_at != UINT64_MAX) {
        if (part != &one) bt__ckfree(part);
        bt__ckerr("%s: tensor '%.100s' (file bytes %llu..%llu): %s at byte %llu", f->path, t->name, (unsigned long long)t->offset,
                  (unsigned long long)(t->offset + t->nbytes), bad_errno ? strerror(bad_errno) : "the file ends (it shrank after it was opened)",
                  (unsigned long long)bad_at);
        return -1;
    }
    *crc = 0;
    for (c = 0; c < nc; c++) {
        size_t o = c * chunk, len = n - o < chunk ? n - o : chunk;
        *crc = bt_crc32c_combine(*crc, part[c], len);
    }
    if (part != &one) bt__ckfree(part);
    return 0;
}
static int bt__ck_crc_mismatch(const bt_ckpt_file *f, const bt_ckpt_info *t, uint32_t got) {
    bt__ckerr("%s: tensor '%.100s' (file bytes %llu..%llu): checksum %08x, stored %08x: the data is damaged", f->path, t->name,
              (unsigned long long)t->offset, (unsigned long long)(t->offset + t->nbytes), got, t->crc);
    return -1;
}
/* after reading all of t with checksum got: compare, remember */
static int bt__ck_check_crc(bt_ckpt_file *f, const bt_ckpt_info *t, uint32_t got) {
    if (t->has_crc && got != t->crc) return bt__ck_crc_mismatch(f, t, got);
    f->verified[t - f->info] = 1;
    return 0;
}

#define BT__CK_WINDOW ((size_t)64 << 20)
BTDEF int bt_ckpt_verify(bt_ckpt_file *f) {
    unsigned char *scratch = NULL;
    size_t cap = 0;
    int i;
    if (!f) { bt__ckerr("bt_ckpt_verify: NULL file"); return -1; }
    for (i = 0; i < f->n; i++) {
        const bt_ckpt_info *t = &f->info[i];
        uint64_t at = 0;
        uint32_t crc = 0;
        if (!t->has_crc || f->verified[i]) continue;
        if (!f->mem && !scratch) {
            size_t max = 0;
            int k;
            for (k = 0; k < f->n; k++) if (f->info[k].nbytes > max) max = (size_t)f->info[k].nbytes;
            cap = max < BT__CK_WINDOW ? max : BT__CK_WINDOW;
            if (!(scratch = (unsigned char *)bt__ckmalloc(cap ? cap : 1))) { bt__ckerr("%s: out of memory", f->path); return -1; }
        }
        while (at < t->nbytes) {                       /* windows of the tensor, CRCs chained */
            size_t len = t->nbytes - at < BT__CK_WINDOW ? (size_t)(t->nbytes - at) : BT__CK_WINDOW;
            uint32_t part;
            if (bt__ck_read_crc(f, t, at, scratch, len, &part)) { bt__ckfree(scratch); return -1; }
            crc = bt_crc32c_combine(crc, part, len);
            at += len;
        }
        if (bt__ck_check_crc(f, t, crc)) { bt__ckfree(scratch); return -1; }
    }
    bt__ckfree(scratch);
    return 0;
}

static const bt_ckpt_info *bt__ck_need(const bt_ckpt_file *f, const char *name) {
    const bt_ckpt_info *t = bt_ckpt_find(f, name);
    if (!t) {
        char list[300];
        size_t k = 0;
        int i;
        list[0] = 0;
        for (i = 0; i < f->n && k + 4 < sizeof list; i++)
            k += (size_t)snprintf(list + k, sizeof list - k, "%s%s", i ? ", " : "", f->info[i].name);
        if (k >= sizeof list) strcpy(list + sizeof list - 5, "...");
        bt__ckerr("%s: no tensor '%.100s' (it has %d: %s)", f->path, name, f->n, list);
    }
    return t;
}
BTDEF int bt_ckpt_read(bt_ckpt_file *f, const char *name, void *dst, size_t nbytes) {
    const bt_ckpt_info *t;
    uint32_t crc;
    if (!f || !name || (!dst && nbytes)) { bt__ckerr("bt_ckpt_read: NULL argument"); return -1; }
    if (!(t = bt__ck_need(f, name))) return -1;
    if (nbytes != t->nbytes) {
        bt__ckerr("%s: tensor '%.100s' is %llu bytes, the buffer %zu", f->path, name, (unsigned long long)t->nbytes, nbytes);
        return -1;
    }
    if (bt__ck_read_crc(f, t, 0, (unsigned char *)dst, nbytes, &crc)) return -1;
    return bt__ck_check_crc(f, t, crc);
}

#ifdef BT_CUDA
/* all of t into device memory dptr on the current device: windows read (and checksummed) into
   two pinned buffers in turn, each copied on the compute stream while the next is read */
static int bt__ck_load_gpu(bt_ckpt_file *f, const bt_ckpt_info *t, unsigned char *dptr, uint32_t *crc) {
    int cur = 0;
    cudaGetDevice(&cur);
    cudaStream_t st = bt_k_current_stream(cur);
    uint64_t at = 0;
    int w = 0, i;
    *crc = 0;
    if (!f->ev_made) {
        for (i = 0; i < 2; i++)
            if (cudaEventCreateWithFlags(&f->ev[i], cudaEventDisableTiming) != cudaSuccess) {
                bt__ckerr("%s: cudaEventCreate failed", f->path); return -1;
            }
        f->ev_made = 1;
    }
    if (!f->pinned[0]) {
        size_t cap = t->nbytes < BT__CK_WINDOW ? (size_t)t->nbytes : BT__CK_WINDOW;
        cap = cap < ((size_t)1 << 20) ? ((size_t)1 << 20) : cap;
        for (i = 0; i < 2; i++)
            if (!(f->pinned[i] = bt__ck_pinned_alloc(cap))) {
                bt__ckerr("%s: cannot pin %zu bytes of host memory for loading", f->path, cap); return -1;
            }
        f->pinned_cap = cap;
    }
    while (at < t->nbytes) {
        size_t len = t->nbytes - at < f->pinned_cap ? (size_t)(t->nbytes - at) : f->pinned_cap;
        unsigned char *buf = (unsigned char *)f->pinned[w];
        uint32_t part;
        if (f->ev_pending[w] && cudaEventSynchronize(f->ev[w]) != cudaSuccess) { bt__ckerr("%s: CUDA error while loading", f->path); return -1; }
        if (bt__ck_read_crc(f, t, at, buf, len, &part)) return -1;
        *crc = bt_crc32c_combine(*crc, part, len);
        if (cudaMemcpyAsync(dptr + at, buf, len, cudaMemcpyHostToDevice, st) != cudaSuccess ||
            cudaEventRecord(f->ev[w], st) != cudaSuccess) {
            bt__ckerr("%s: tensor '%.100s': copy to the GPU failed: %s", f->path, t->name, cudaGetErrorString(cudaGetLastError()));
            return -1;
        }
        f->ev_pending[w] = 1;
        at += len;
        w ^= 1;
    }
    return 0;
}
#endif

/* dst's shape against the file's under flags; 0 ok. *rows: the file's rows (dim 0 of dst's view) */
static int bt__ck_load_check(const bt_ckpt_file *f, const bt_ckpt_info *t, const bt_tensor *dst, int flags, int64_t *rows) {
    int tr = (flags & BT_CKPT_TRANSPOSE) != 0, pad = (flags & BT_CKPT_PAD_ROWS) != 0, d, ok = 1, tdt;
    char fs[160], ds[160];
    int64_t want[BT_CKPT_MAX_DIMS] = {0};
    if ((tdt = bt_ckpt_tensor_dtype(t->dtype)) < 0) {
        bt__ckerr("%s: tensor '%.100s' is %s, which bt_tensor has no dtype for (read it with bt_ckpt_read)", f->path, t->name, bt_ckpt_dtype_name(t->dtype));
        return -1;
    }
    if ((bt_dtype)tdt != dst->dtype && !(flags & BT_CKPT_CONVERT)) {
        bt__ckerr("%s: tensor '%.100s' is %s, the destination %s (BT_CKPT_CONVERT converts)", f->path, t->name,
                  bt_ckpt_dtype_name(t->dtype), bt_dtype_name(dst->dtype));
        return -1;
    }
    if (t->ndim != dst->ndim || (tr && t->ndim != 2) || ((tr || pad) && t->ndim < 1)) ok = 0;
    for (d = 0; ok && d < t->ndim; d++) want[d] = tr ? t->shape[1 - d] : t->shape[d];
    for (d = 0; ok && d < t->ndim; d++)
        if (want[d] != dst->shape[d] && !(d == 0 && pad && want[0] < dst->shape[0])) ok = 0;
    if (!ok) {
        bt__ckerr("%s: tensor '%.100s' has shape %s, the destination %s%s%s", f->path, t->name,
                  bt__ck_shape_str(t->ndim, t->shape, fs, sizeof fs), bt__ck_shape_str(dst->ndim, dst->shape, ds, sizeof ds),
                  tr ? " (to be transposed)" : "", pad ? " (rows may be padded)" : "");
        return -1;
    }
    *rows = t->ndim ? want[0] : 1;
    return 0;
}

BTDEF int bt_ckpt_load(bt_ckpt_file *f, const char *name, bt_tensor *dst, int flags) {
    const bt_ckpt_info *t;
    int64_t rows;
    uint32_t crc = 0;
    int direct, r = 0;
    bt_device dev;
    if (!f || !name || !dst) { bt__ckerr("bt_ckpt_load: NULL argument"); return -1; }
    if (!(t = bt__ck_need(f, name)) || bt__ck_load_check(f, t, dst, flags, &rows)) return -1;
    if (bt__ck_in_halves(dst, NULL)) {
        bt__ckerr("bt_ckpt_load \"%.100s\": the destination's storage holds f32 values in two halves (bt_f32_join_ them first)", name);
        return -1;
    }
    dev = bt_device_of(dst);
    direct = bt_is_contiguous(dst) && bt_ckpt_tensor_dtype(t->dtype) == (int)dst->dtype && !(flags & BT_CKPT_TRANSPOSE);
    dst->storage->version++;
    if (direct && dev.type == BT_CPU) {
        /* the file's rows are a prefix of a contiguous destination; padding rows follow */
        unsigned char *p = (unsigned char *)bt_data_ptr(dst);
        size_t all = (size_t)bt_numel(dst) * bt_dtype_size(dst->dtype);
        if (bt__ck_read_crc(f, t, 0, p, (size_t)t->nbytes, &crc)) return -1;
        memset(p + t->nbytes, 0, all - (size_t)t->nbytes);
        return bt__ck_check_crc(f, t, crc);
    }
#ifdef BT_CUDA
    if (direct && dev.type == BT_GPU) {
        int prev = 0;
        size_t all = (size_t)bt_numel(dst) * bt_dtype_size(dst->dtype);
        cudaGetDevice(&prev);
        cudaSetDevice(dev.index);
        r = bt__ck_load_gpu(f, t, (unsigned char *)bt_data_ptr(dst), &crc);
        if (!r && all > t->nbytes && cudaMemsetAsync((unsigned char *)bt_data_ptr(dst) + t->nbytes, 0, all - t->nbytes,
                                                     bt_k_current_stream(dev.index)) != cudaSuccess) {
            bt__ckerr("%s: tensor '%.100s': cudaMemset of the padding failed", f->path, t->name); r = -1;
        }
        cudaSetDevice(prev);
        return r ? -1 : bt__ck_check_crc(f, t, crc);
    }
#endif
    {   /* the general case: the bytes on the host, then bt_copy_ into dst's view */
        unsigned char *buf = (unsigned char *)bt__ckmalloc(t->nbytes ? (size_t)t->nbytes : 1);
        bt_tensor *src, *target;
        if (!buf) { bt__ckerr("%s: out of host memory for tensor '%.100s'", f->path, t->name); return -1; }
        if (bt__ck_read_crc(f, t, 0, buf, (size_t)t->nbytes, &crc) || bt__ck_check_crc(f, t, crc)) { bt__ckfree(buf); return -1; }
        bt_scope_begin();
        src = bt_from_blob(buf, bt_shapev(t->ndim, t->shape), (bt_dtype)bt_ckpt_tensor_dtype(t->dtype), bt_cpu());
        if (flags & BT_CKPT_TRANSPOSE) src = bt_transpose(src, 0, 1);
        target = rows < (dst->ndim ? dst->shape[0] : 1) ? bt_narrow(dst, 0, 0, rows) : dst;
        bt_copy_(target, src);
        if (target != dst) bt_zero_(bt_narrow(dst, 0, rows, dst->shape[0] - rows));
        bt_scope_end();
        bt__ckfree(buf);      /* an upload has copied it out of buf when bt_copy_ returns */
    }
    return r;
}

/* ---- 7. Asynchronous saver ------------------------------------------------------------------ */

struct bt_ckpt_saver {
    char *dir;
    int keep;
    pthread_t thread;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    int busy;                    /* a save is queued or running (until the writer is done with it) */
    int pending;                 /* the writer thread has a job to pick up */
    int quit;
    int failed;                  /* the last save's error is in err, not reported yet */
    char err[1024];
    char warn[1024];             /* a problem that failed no save (rotation, no locks), not reported yet; "" none */
    int lock_fd;                 /* the directory's lock (bt__ck_lock), -1 where the file system has none */
    /* the job: entries point into the staging buffer */
    bt__ck_entry *e;
    size_t ne, ecap;
    bt_ckpt_meta *meta;
    int64_t step;
    char path[4096], last_path[4096];
    double t_start;
    unsigned char *staging;
    size_t staging_cap;
    int staging_pinned;
    int gpu;                     /* the job waits for the copy-done event */
    int device;
#ifdef BT_CUDA
    cudaStream_t copy_stream;
    cudaEvent_t ready, done;
    int cuda_device;             /* the device the stream and events belong to; -1: none yet */
#endif
    bt_ckpt_saver_stats st;
};

static void bt__ck_staging_free(bt_ckpt_saver *s) {
    if (s->staging_pinned) bt__ck_pinned_free(s->staging); else bt__ckfree(s->staging);
    s->staging = NULL; s->staging_cap = 0; s->staging_pinned = 0;
}
static int bt__ck_staging(bt_ckpt_saver *s, size_t need, int pinned) {
    if (s->staging && s->staging_cap >= need && s->staging_pinned == pinned) return 0;
    bt__ck_staging_free(s);
    need = need ? need : 1;
    s->staging = (unsigned char *)(pinned ? bt__ck_pinned_alloc(need) : bt__ckmalloc(need));
    if (!s->staging) {
        bt__ckerr("checkpoint %s: cannot allocate %zu bytes of %s staging memory", s->dir, need, pinned ? "pinned" : "host");
        return -1;
    }
    s->staging_cap = need; s->staging_pinned = pinned;
    return 0;
}

/* large host copies by several threads (one core moves ~10 GB/s, a step's state is ~1.5 GB) */
static void bt__ck_memcpy_par(void *dst, const void *src, size_t n) {
    long c, nc = (long)((n + BT__CK_READ_CHUNK - 1) / BT__CK_READ_CHUNK);
    #pragma omp parallel for schedule(static) num_threads(bt__ck_threads()) if (nc > 2)
    for (c = 0; c < nc; c++) {
        size_t o = (size_t)c * BT__CK_READ_CHUNK, len = n - o < BT__CK_READ_CHUNK ? n - o : BT__CK_READ_CHUNK;
        memcpy((char *)dst + o, (const char *)src + o, len);
    }
}

static int bt__ck_rotate(const char *dir, int keep, int64_t written, int64_t *removed, char *err, size_t errlen);
static int64_t bt__ck_sweep_temporaries(const char *dir, int locked);
static int bt__ck_lock(const char *dir, char *warn, size_t warnlen);

static void *bt__ck_writer_main(void *arg) {
    bt_ckpt_saver *s = (bt_ckpt_saver *)arg;
    for (;;) {
        double crc_ms = 0, write_ms = 0, t_end;
        int64_t removed = 0;
        int r = 0;
        char msg[1024], warn[1024];
        pthread_mutex_lock(&s->mu);
        while (!s->pending && !s->quit) pthread_cond_wait(&s->cv, &s->mu);
        if (!s->pending) { pthread_mutex_unlock(&s->mu); break; }
        s->pending = 0;
        pthread_mutex_unlock(&s->mu);
        msg[0] = warn[0] = 0;
#ifdef BT_CUDA
        if (s->gpu) {
            cudaError_t ce;
            cudaSetDevice(s->device);
            if ((ce = cudaEventSynchronize(s->done)) != cudaSuccess) {
                snprintf(msg, sizeof msg, "checkpoint %.700s: the device-to-host copy failed: %s", s->path, cudaGetErrorString(ce));
                r = -1;
            }
        }
#endif
        for (size_t i = 0; !r && i < s->ne; i++)
            if (s->e[i].halves && bt__ck_join_halves((unsigned char *)s->e[i].data, s->e[i].nbytes)) {
                snprintf(msg, sizeof msg, "checkpoint %.700s: no host memory to join \"%.100s\"'s two halves", s->path, s->e[i].name);
                r = -1;
            }
        if (!r && bt__ck_write_file(s->path, BT_OUTPUT_NOFOLLOW, s->e, (int)s->ne, s->meta, &crc_ms, &write_ms)) {
            bt_msgf(msg, sizeof msg, "checkpoint: %s", bt_ckpt_error());
            r = -1;
        }
        t_end = bt__ck_now_ms();                 /* committed; deleting old files is not the save */
        if (!r && s->keep > 0) bt__ck_rotate(s->dir, s->keep, s->step, &removed, warn, sizeof warn);   /* a warning at worst */
        pthread_mutex_lock(&s->mu);
        if (warn[0]) snprintf(s->warn, sizeof s->warn, "%s", warn);
        if (r) { s->failed = 1; snprintf(s->err, sizeof s->err, "%s", msg); }
        else {
            uint64_t bytes = 0;
            size_t i;
            for (i = 0; i < s->ne; i++) bytes += s->e[i].nbytes;
            s->st.saves++;
            s->st.last_step = s->step;
            s->st.last_save_ms = t_end - s->t_start;
            s->st.total_save_ms += s->st.last_save_ms;
            s->st.last_checksum_ms = crc_ms;
            s->st.last_write_ms = write_ms;
            s->st.last_bytes = bytes;
            s->st.total_bytes += bytes;
            s->st.last_mb_per_s = s->st.last_save_ms > 0 ? bytes / 1e6 / (s->st.last_save_ms / 1e3) : 0;
            s->st.removed += removed;
            snprintf(s->last_path, sizeof s->last_path, "%s", s->path);
        }
        s->busy = 0;
        pthread_cond_broadcast(&s->cv);
        pthread_mutex_unlock(&s->mu);
    }
    return NULL;
}

BTDEF bt_ckpt_saver *bt_ckpt_saver_new(const char *dir, int keep) {
    bt_ckpt_saver *s;
    if (!dir) { bt__ckerr("checkpoint saver: NULL directory"); return NULL; }
    if (bt_output_dir(dir)) { bt__ckerr("checkpoint directory: %s", bt_data_error()); return NULL; }
    if (!(s = (bt_ckpt_saver *)bt__ckmalloc(sizeof *s))) { bt__ckerr("checkpoint saver: out of memory"); return NULL; }
    memset(s, 0, sizeof *s);
    s->keep = keep;
    s->st.last_step = -1;
#ifdef BT_CUDA
    s->cuda_device = -1;
#endif
    if ((s->lock_fd = bt__ck_lock(dir, s->warn, sizeof s->warn)) == -1) { bt__ckfree(s); return NULL; }
    if (s->lock_fd < 0) s->lock_fd = -1;   /* a file system without locks: said in warn */
    s->st.swept = bt__ck_sweep_temporaries(dir, s->lock_fd >= 0);     /* what killed writers left behind */
    if (!(s->dir = bt__ck_strdup(dir))) { bt__ckerr("checkpoint saver: out of memory"); goto fail; }
    pthread_mutex_init(&s->mu, NULL);
    pthread_cond_init(&s->cv, NULL);
    if (pthread_create(&s->thread, NULL, bt__ck_writer_main, s) != 0) {
        bt__ckerr("checkpoint saver: cannot start the writer thread");
        pthread_mutex_destroy(&s->mu); pthread_cond_destroy(&s->cv);
        goto fail;
    }
    return s;
fail:
    if (s->lock_fd >= 0) close(s->lock_fd);
    bt__ckfree(s->dir); bt__ckfree(s);
    return NULL;
}

/* block until the writer is idle; the time waited in ms */
static double bt__ck_saver_idle(bt_ckpt_saver *s) {
    double t0 = bt__ck_now_ms();
    pthread_mutex_lock(&s->mu);
    while (s->busy) pthread_cond_wait(&s->cv, &s->mu);
    pthread_mutex_unlock(&s->mu);
    return bt__ck_now_ms() - t0;
}
/* the failed save's message, once: -1 and bt_ckpt_error() set; else 0 */
static int bt__ck_saver_report(bt_ckpt_saver *s) {
    int failed;
    pthread_mutex_lock(&s->mu);
    failed = s->failed;
    if (failed) { bt__ckerr("%s", s->err); s->failed = 0; }
    pthread_mutex_unlock(&s->mu);
    return failed ? -1 : 0;
}

/* the job's entries, in file order inside the staging buffer; *gpu_dev: the GPU of the GPU
   tensors (-1 if none); returns the bytes, or -1 (as uint64) on a bad argument */
static uint64_t bt__ck_saver_plan(bt_ckpt_saver *s, bt_tensor *const *ts, const char *const *names, int n, int *gpu_dev) {
    int i, *order;
    uint64_t total;
    bt__ck_entries_free(s->e, s->ne);
    s->ne = 0;
    *gpu_dev = -1;
    if (n < 0 || (n && (!ts || !names))) { bt__ckerr("checkpoint snapshot: bad tensor list"); return UINT64_MAX; }
    if (bt__ck_grow((void **)&s->e, &s->ecap, (size_t)(n ? n : 1), sizeof *s->e)) { bt__ckerr("checkpoint snapshot: out of memory"); return UINT64_MAX; }
    for (i = 0; i < n; i++) {
        bt_tensor *t = ts[i];
        bt__ck_entry *e = &s->e[i];
        int fdt, d;
        if (bt__ck_check_name(names[i], s->e, (size_t)i)) return UINT64_MAX;
        if (!t) { bt__ckerr("checkpoint snapshot: tensor \"%.100s\" is NULL", names[i]); return UINT64_MAX; }
        if ((fdt = bt_ckpt_dtype_of(t->dtype)) < 0 || t->ndim > BT_CKPT_MAX_DIMS || !bt_is_contiguous(t)) {
            bt__ckerr("checkpoint snapshot: tensor \"%.100s\" must be contiguous, of at most %d dims and a file dtype", names[i], BT_CKPT_MAX_DIMS);
            return UINT64_MAX;
        }
        if (bt_device_of(t).type == BT_GPU) {
            if (*gpu_dev >= 0 && *gpu_dev != bt_device_of(t).index) {
                bt__ckerr("checkpoint snapshot: tensors on cuda:%d and cuda:%d (one GPU per snapshot)", *gpu_dev, bt_device_of(t).index);
                return UINT64_MAX;
            }
            *gpu_dev = bt_device_of(t).index;
        }
        memset(e, 0, sizeof *e);
        if (bt__ck_in_halves(t, &e->halves) && !e->halves) {
            bt__ckerr("checkpoint snapshot: tensor \"%.100s\" is part of an f32 array held in two halves (only the whole array is joined)", names[i]);
            return UINT64_MAX;
        }
        if (!(e->name = bt__ck_strdup(names[i]))) { bt__ckerr("checkpoint snapshot: out of memory"); return UINT64_MAX; }
        s->ne = (size_t)i + 1;
        e->dtype = (bt_ckpt_dtype)fdt;
        e->ndim = t->ndim;
        for (d = 0; d < t->ndim; d++) e->shape[d] = t->shape[d];
        e->nbytes = (uint64_t)bt_numel(t) * bt_dtype_size(t->dtype);
    }
    if (!(order = (int *)bt__ckmalloc(sizeof(int) * (size_t)(n ? n : 1)))) { bt__ckerr("checkpoint snapshot: out of memory"); return UINT64_MAX; }
    total = bt__ck_layout(s->e, n, order);
    bt__ckfree(order);
    return total;
}

#ifdef BT_CUDA
/* enqueue the copies of the GPU tensors: the copy stream waits for the compute stream's work so
   far, copies, and records `done`. Nothing here waits on the host. */
static int bt__ck_saver_copy_gpu(bt_ckpt_saver *s, bt_tensor *const *ts, int n, int dev) {
    int prev = 0, i, r = 0;
    cudaError_t ce = cudaSuccess;
    cudaGetDevice(&prev);
    cudaSetDevice(dev);
    if (s->cuda_device != dev) {
        if (s->cuda_device >= 0) {
            cudaSetDevice(s->cuda_device);
            cudaStreamDestroy(s->copy_stream); cudaEventDestroy(s->ready); cudaEventDestroy(s->done);
            cudaSetDevice(dev);
            s->cuda_device = -1;
        }
        bt_k_init(dev);
        if ((ce = cudaStreamCreateWithFlags(&s->copy_stream, cudaStreamNonBlocking)) != cudaSuccess ||
            (ce = cudaEventCreateWithFlags(&s->ready, cudaEventDisableTiming)) != cudaSuccess ||
            (ce = cudaEventCreateWithFlags(&s->done, cudaEventDisableTiming)) != cudaSuccess) r = -1;
        else s->cuda_device = dev;
    }
    if (!r && ((ce = cudaEventRecord(s->ready, bt_k_current_stream(dev))) != cudaSuccess ||
               (ce = cudaStreamWaitEvent(s->copy_stream, s->ready, 0)) != cudaSuccess)) r = -1;
    for (i = 0; !r && i < n; i++)
        if (bt_device_of(ts[i]).type == BT_GPU && s->e[i].nbytes &&
            (ce = cudaMemcpyAsync(s->staging + s->e[i].begin, bt_data_ptr(ts[i]), (size_t)s->e[i].nbytes,
                                  cudaMemcpyDeviceToHost, s->copy_stream)) != cudaSuccess) r = -1;
    if (!r && (ce = cudaEventRecord(s->done, s->copy_stream)) != cudaSuccess) r = -1;
    if (r) { (void)cudaGetLastError(); bt__ckerr("checkpoint snapshot: enqueuing the copies on cuda:%d failed: %s", dev, cudaGetErrorString(ce)); }
    cudaSetDevice(prev);
    return r;
}
#endif

BTDEF int bt_ckpt_saver_snapshot(bt_ckpt_saver *s, int64_t step, bt_tensor *const *tensors, const char *const *names, int n,
                                 const bt_ckpt_meta *meta) {
    double t0 = bt__ck_now_ms(), wait_ms, stall;
    uint64_t total;
    int gpu_dev, i;
    if (!s) { bt__ckerr("checkpoint snapshot: NULL saver"); return -1; }
    wait_ms = bt__ck_saver_idle(s);          /* at most one save in flight */
    s->st.last_wait_ms = wait_ms;
    s->st.total_wait_ms += wait_ms;
    if (bt__ck_saver_report(s)) return -1;
    if (step < 0 || bt_ckpt_path(s->dir, step, s->path, sizeof s->path)) { bt__ckerr("checkpoint snapshot: bad step %lld or directory too long", (long long)step); return -1; }
    if (bt__ck_check_user_meta(meta)) return -1;
    if ((total = bt__ck_saver_plan(s, tensors, names, n, &gpu_dev)) == UINT64_MAX) return -1;
    if (total > (uint64_t)(SIZE_MAX / 2)) { bt__ckerr("checkpoint snapshot: %llu bytes", (unsigned long long)total); return -1; }
    if (bt__ck_staging(s, (size_t)total, gpu_dev >= 0)) return -1;
    bt_ckpt_meta_free(s->meta);
    if (!(s->meta = bt__ck_meta_copy(meta))) return -1;
    for (i = 0; i < n; i++) s->e[i].data = s->staging + s->e[i].begin;
    s->gpu = 0;
    if (gpu_dev >= 0) {
#ifdef BT_CUDA
        if (bt__ck_saver_copy_gpu(s, tensors, n, gpu_dev)) return -1;
        s->gpu = 1; s->device = gpu_dev;
#endif
    }
    for (i = 0; i < n; i++)
        if (bt_device_of(tensors[i]).type == BT_CPU) bt__ck_memcpy_par(s->staging + s->e[i].begin, bt_data_ptr(tensors[i]), (size_t)s->e[i].nbytes);
    s->step = step;
    s->t_start = t0;
    stall = bt__ck_now_ms() - t0;
    pthread_mutex_lock(&s->mu);
    s->busy = 1; s->pending = 1;
    s->st.snapshots++;
    s->st.last_stall_ms = stall;
    s->st.total_stall_ms += stall;
    if (stall > s->st.max_stall_ms) s->st.max_stall_ms = stall;
    pthread_cond_broadcast(&s->cv);
    pthread_mutex_unlock(&s->mu);
    return 0;
}

BTDEF void bt_ckpt_saver_fence(bt_ckpt_saver *s, void *stream) {
#ifdef BT_CUDA
    int prev = 0;
    if (!s || !s->gpu || s->cuda_device < 0) return;
    cudaGetDevice(&prev);
    cudaSetDevice(s->cuda_device);
    cudaStreamWaitEvent(stream ? (cudaStream_t)stream : bt_k_current_stream(s->cuda_device), s->done, 0);
    cudaSetDevice(prev);
#else
    (void)s; (void)stream;
#endif
}
BTDEF void *bt_ckpt_saver_event(bt_ckpt_saver *s) {
#ifdef BT_CUDA
    if (s && s->gpu && s->cuda_device >= 0) return (void *)s->done;
#else
    (void)s;
#endif
    return NULL;
}
BTDEF int bt_ckpt_saver_reserve(bt_ckpt_saver *s, size_t bytes, int gpu) {
    if (!s) { bt__ckerr("checkpoint saver: NULL"); return -1; }
    if (bt_ckpt_saver_wait(s)) return -1;   /* the staging buffer is not in use */
    return bt__ck_staging(s, bytes, gpu != 0);
}
BTDEF int bt_ckpt_saver_wait(bt_ckpt_saver *s) {
    if (!s) { bt__ckerr("checkpoint saver: NULL"); return -1; }
    bt__ck_saver_idle(s);
    return bt__ck_saver_report(s);
}
BTDEF void bt_ckpt_saver_get_stats(bt_ckpt_saver *s, bt_ckpt_saver_stats *st) {
    pthread_mutex_lock(&s->mu);
    *st = s->st;
    pthread_mutex_unlock(&s->mu);
}
BTDEF const char *bt_ckpt_saver_last_path(bt_ckpt_saver *s) { return s ? s->last_path : ""; }
BTDEF int bt_ckpt_saver_warning(bt_ckpt_saver *s) {
    int any;
    if (!s) return 0;
    pthread_mutex_lock(&s->mu);
    if ((any = s->warn[0] != 0)) { bt__ckerr("%s", s->warn); s->warn[0] = 0; }
    pthread_mutex_unlock(&s->mu);
    return any;
}
BTDEF int bt_ckpt_saver_free(bt_ckpt_saver *s) {
    int r;
    if (!s) return 0;
    r = bt_ckpt_saver_wait(s);
    pthread_mutex_lock(&s->mu);
    s->quit = 1;
    pthread_cond_broadcast(&s->cv);
    pthread_mutex_unlock(&s->mu);
    pthread_join(s->thread, NULL);
#ifdef BT_CUDA
    if (s->cuda_device >= 0) {
        int prev = 0;
        cudaGetDevice(&prev);
        cudaSetDevice(s->cuda_device);
        cudaStreamDestroy(s->copy_stream); cudaEventDestroy(s->ready); cudaEventDestroy(s->done);
        cudaSetDevice(prev);
    }
#endif
    bt__ck_staging_free(s);
    bt__ck_entries_free(s->e, s->ne);
    bt__ckfree(s->e);
    bt_ckpt_meta_free(s->meta);
    pthread_mutex_destroy(&s->mu);
    pthread_cond_destroy(&s->cv);
    if (s->lock_fd >= 0) close(s->lock_fd);     /* the directory's lock goes with it */
    bt__ckfree(s->dir);
    bt__ckfree(s);
    return r;
}

/* ---- 8. Directories ------------------------------------------------------------------------- */

BTDEF int bt_ckpt_path(const char *dir, int64_t step, char *buf, size_t n) {
    char name[48];
    size_t dl, nl;
    if (!dir || !buf || step < 0) return -1;
    snprintf(name, sizeof name, "/ckpt_%09lld.safetensors", (long long)step);
    dl = strlen(dir); nl = strlen(name);
    if (dl + nl + 1 > n) return -1;
    memcpy(buf, dir, dl);
    memcpy(buf + dl, name, nl + 1);
    return 0;
}
/* the step of a file name of exactly our form (the one bt_ckpt_path writes), else -1 */
static int64_t bt__ck_name_step(const char *name) {
    char canon[64];
    uint64_t v;
    size_t len = strlen(name), nd;
    if (len < 5 + 1 + 12 || strncmp(name, "ckpt_", 5) || strcmp(name + len - 12, ".safetensors")) return -1;
    nd = len - 5 - 12;
    if (nd > 19) return -1;
    memcpy(canon, name + 5, nd);
    canon[nd] = 0;
    if (bt_parse_u64(canon, &v) || v > (uint64_t)INT64_MAX) return -1;
    snprintf(canon, sizeof canon, "ckpt_%09lld.safetensors", (long long)v);
    return strcmp(canon, name) ? -1 : (int64_t)v;
}
static int bt__ck_step_desc(const void *a, const void *b) {
    int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
    return (x < y) - (x > y);
}
BTDEF int bt_ckpt_list(const char *dir, int64_t **steps) {
    DIR *d;
    struct dirent *de;
    int64_t *v = NULL;
    size_t n = 0, cap = 0;
    *steps = NULL;
    if (!dir || !(d = opendir(dir))) { bt__ckerr("checkpoint directory %s: %s", dir ? dir : "(null)", strerror(errno)); return -1; }
    while ((de = readdir(d)) != NULL) {
        int64_t s = bt__ck_name_step(de->d_name);
        if (s < 0) continue;
        if (bt__ck_grow((void **)&v, &cap, n + 1, sizeof *v)) { closedir(d); bt__ckfree(v); bt__ckerr("%s: out of memory", dir); return -1; }
        v[n++] = s;
    }
    closedir(d);
    if (n) qsort(v, n, sizeof *v, bt__ck_step_desc);
    *steps = v;
    return (int)n;
}
/* The directory's lock, DIR/ckpt.lock, held with flock(2) from bt_ckpt_saver_new to _free: one
   saver (one run) writes a directory at a time. The kernel releases it when its process ends,
   however it ends (kill -9 too), so a lock is never stale. The file says who took it last (pid,
   host, time) for the message of a refused saver; it stays afterwards (deleting it would let two
   processes lock two different files). A descriptor; -1 and bt_ckpt_error() when another process
   holds it or it cannot be made; -2 with warn set where the file system has no locks. */
#define BT__CK_LOCK_NAME "ckpt.lock"
static int bt__ck_lock(const char *dir, char *warn, size_t warnlen) {
    char path[4096], who[384], host[256], when[64];
    struct stat sb;
    struct tm tm;
    time_t now = time(NULL);
    ssize_t n;
    int fd, e;
    if ((size_t)snprintf(path, sizeof path, "%s/" BT__CK_LOCK_NAME, dir) >= sizeof path) { bt__ckerr("checkpoint directory %.200s...: too long", dir); return -1; }
    fd = open(path, O_RDWR | O_CREAT | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC, 0644);
    if (fd < 0 || fstat(fd, &sb) != 0 || !S_ISREG(sb.st_mode)) {
        e = fd < 0 ? errno : EINVAL;
        if (fd >= 0) close(fd);
        bt__ckerr("checkpoint directory %s: cannot make its lock %s: %s", dir, path,
                  e == ELOOP ? "a symbolic link is in the way" : e == EINVAL ? "not a regular file" : strerror(e));
        return -1;
    }
    if (flock(fd, LOCK_EX | LOCK_NB) != 0) {
        e = errno;
        n = pread(fd, who, sizeof who - 1, 0);
        who[n > 0 ? n : 0] = 0;
        who[strcspn(who, "\n")] = 0;
        close(fd);
        if (e == EWOULDBLOCK) {
            bt__ckerr("checkpoint directory %s is in use: another process holds its lock %s (%s)", dir, path, who[0] ? who : "it has not said which yet");
            return -1;
        }
        if (e != ENOLCK && e != EOPNOTSUPP && e != ENOSYS && e != EINVAL) { bt__ckerr("checkpoint directory %s: cannot lock %s: %s", dir, path, strerror(e)); return -1; }
        snprintf(warn, warnlen, "checkpoint directory %.800s: its file system does not lock files (%s): nothing keeps another run "
                 "from writing there at the same time", dir, strerror(e));
        return -2;
    }
    if (gethostname(host, sizeof host) != 0) snprintf(host, sizeof host, "?");
    host[sizeof host - 1] = 0;
    gmtime_r(&now, &tm);
    strftime(when, sizeof when, "%Y-%m-%d %H:%M:%S UTC", &tm);
    n = snprintf(who, sizeof who, "pid %ld on host %s, since %s\n", (long)getpid(), host, when);
    if (ftruncate(fd, 0) != 0 || pwrite(fd, who, (size_t)n, 0) != n) { /* a full disk: the lock holds all the same */ }
    return fd;
}
/* Temporaries that a killed writer left beside our checkpoints ("ckpt_STEP.safetensors.tmp.PID.N",
   bt_data.h's naming), removed when a saver starts. Under the directory's lock no other saver
   writes there, so a temporary is dead when no process PID lives here, when PID is this process
   (which has written nothing there yet), or when it has not changed for BT__CK_STALE_S seconds
   (the pid was reused: a restarted container). Without a lock only the first rule holds, with
   the age: a directory shared between hosts may hold another host's live one. */
#define BT__CK_STALE_S 120
static int64_t bt__ck_sweep_temporaries(const char *dir, int locked) {
    DIR *d = opendir(dir);
    struct dirent *de;
    int64_t removed = 0;
    if (!d) return 0;
    while ((de = readdir(d)) != NULL) {
        const char *tmp = strstr(de->d_name, ".safetensors.tmp.");
        char base[256], path[4096], *dot;
        uint64_t pid, k;
        struct stat sb;
        size_t bl;
        int old, mine, alive;
        if (!tmp || (bl = (size_t)(tmp - de->d_name) + 12) >= sizeof base) continue;
        memcpy(base, de->d_name, bl);
        base[bl] = 0;
        if (bt__ck_name_step(base) < 0) continue;                    /* not one of ours */
        snprintf(base, sizeof base, "%s", tmp + 17);                  /* "PID.N" */
        if (!(dot = strchr(base, '.'))) continue;
        *dot = 0;
        if (bt_parse_u64(base, &pid) || bt_parse_u64(dot + 1, &k) || pid == 0 || pid > 0x7fffffff) continue;
        if ((size_t)snprintf(path, sizeof path, "%s/%s", dir, de->d_name) >= sizeof path) continue;
        if (lstat(path, &sb) != 0 || !S_ISREG(sb.st_mode)) continue;
        old = time(NULL) - sb.st_mtime >= BT__CK_STALE_S;
        mine = (pid_t)pid == getpid();
        alive = !mine && (kill((pid_t)pid, 0) == 0 || errno != ESRCH);
        if (locked ? (mine || !alive || old) : (!mine && !alive && old))
            if (remove(path) == 0) removed++;
    }
    closedir(d);
    return removed;
}
/* delete our checkpoints of dir beyond the newest `keep` by step, never `written`. 0, or the
   number that could not be deleted, the first one's reason in err (a warning: the save is whole) */
static int bt__ck_rotate(const char *dir, int keep, int64_t written, int64_t *removed, char *err, size_t errlen) {
    int64_t *steps;
    int n = bt_ckpt_list(dir, &steps), i, kept = 1, failed = 0;
    char path[4096];
    if (n < 0) { bt_msgf(err, errlen, "checkpoint rotation: %s", bt_ckpt_error()); return 1; }
    for (i = 0; i < n; i++) {
        if (steps[i] == written) continue;
        if (kept < keep) { kept++; continue; }
        if (bt_ckpt_path(dir, steps[i], path, sizeof path)) continue;
        if (remove(path) == 0) (*removed)++;
        else if (errno != ENOENT && !failed++)
            snprintf(err, errlen, "checkpoint rotation: cannot delete %.700s: %s (it stays; the new checkpoint is whole)", path, strerror(errno));
    }
    bt__ckfree(steps);
    if (failed > 1) snprintf(err + strlen(err), errlen - strlen(err), "; %d more not deleted", failed - 1);
    return failed;
}
BTDEF int bt_ckpt_find_latest(const char *dir, int64_t *step, char *path, size_t pathlen, bt_ckpt_bad_fn on_bad, void *user) {
    int64_t *steps;
    int n = bt_ckpt_list(dir, &steps), i;
    if (n < 0) return -1;
    for (i = 0; i < n; i++) {
        bt_ckpt_file *f;
        if (bt_ckpt_path(dir, steps[i], path, pathlen)) { bt__ckfree(steps); bt__ckerr("%s: path too long", dir); return -1; }
        f = bt_ckpt_open(path, BT_CKPT_REQUIRE_CHECKSUMS | BT_CKPT_VERIFY);
        if (f) { bt_ckpt_close(f); *step = steps[i]; bt__ckfree(steps); return 0; }
        if (on_bad) on_bad(path, bt_ckpt_error(), user);
    }
    bt__ckfree(steps);
    bt__ckerr("%s: no valid checkpoint (%d found)", dir, n);
    return 1;
}


#endif /* BT_CKPT_IMPLEMENTATION_DONE */
#endif /* BT_CKPT_IMPLEMENTATION */
