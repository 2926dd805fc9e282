/* bt_alloc.h - BluTrain-C caching allocator, v0.1: one API for host and device memory.

   USAGE
     #define BT_ALLOC_IMPLEMENTATION   in *one* C/CUDA file before including this header.
     Compiled by nvcc (or with BT_CUDA defined) the device side is built too; with a plain C
     compiler only host memory exists and asking for device memory is an error.

     bt_device cpu = bt_cpu(), gpu = bt_cuda_device(0);
     float *x = (float *)bt_alloc(cpu, 1000 * sizeof(float), NULL);
     bt_free(x);
     bt_alloc_stats_t st = bt_alloc_stats(cpu);   // allocated, reserved, peak, system calls
     void *stage = bt_alloc(bt_pinned_host(), 1 << 20, NULL);   // page-locked host memory

   WHAT IT DOES
     Blocks come from pools (one per device and stream; a private pool may be pushed for CUDA
     graph capture). A request is rounded up to a size class; a free block of the pool that fits
     is reused (best fit), split when much larger, and coalesced with free neighbours of the same
     segment when freed. Only on a miss does it call the system (aligned malloc / cudaMalloc) for a
     new segment; on a system failure it empties the cache once and retries, and then reports an
     out-of-memory error that prints the stats. Freed device blocks are returned to their stream's
     pool: reuse on the same stream is ordered by the stream, as in PyTorch.

   PINNED HOST MEMORY
     bt_pinned_host() names a third kind of pool: host memory locked in RAM (cudaHostAlloc,
     portable to every device), which device copies read and write asynchronously (staging for
     uploads, checkpoint snapshots). It is a pool of bt_alloc only, not a device tensors live on:
     wrap a pinned block with bt_from_blob(ptr, shape, dtype, bt_cpu()). In a build without CUDA,
     or on a machine without a GPU, the blocks are ordinary host memory.

   ERRORS
     Every subsystem of the core reports through bt_error(fmt, ...): the handler (default: print
     "bt error: <message>" to stderr and exit(1)) may be replaced with bt_set_error_handler, per
     process; a handler must not return (longjmp or exit), else the process exits after it.
     In a multi-process job (bt_dist.h) the handler must first abort the job's communicators, so
     that the other ranks stop too instead of waiting in a collective for this one, and then
     exit non-zero; bt_dist.h installs such a handler. The handler is called on the thread that
     raised the error.

   SIZE CLASSES
     Every block is a multiple of 512 B (a request of 0 B gets 512 B, a unique pointer).
     small: a request <= 1 MiB; carved from 2 MiB segments that only serve small requests, so a
            few long-lived small tensors cannot pin a large segment. Any remainder is kept.
     large: a request > 1 MiB; a miss reserves a segment of the request rounded up to 2 MiB.
            A cached large block is split only when the remainder is > 1 MiB, else the caller
            gets the whole block (bt_alloc_size tells).
     Free blocks of a pool sit in two trees (small, large) ordered by (size, address): best fit
     is one O(log n) descent. Live blocks are found from their pointer in a hash table.

   STREAMS AND THREADS
     Device pools are keyed by (device, stream); the host and the pinned host have one pool
     each (their stream argument is ignored). bt_free never waits for
     the device: the block is reusable at once, but only by allocations on the same stream,
     which run after the work already queued there. A block used on another stream must be
     synchronized with that stream by the caller before bt_free. Segments go back to the
     system (cudaFree, which synchronizes) only in bt_alloc_empty_cache, bt_alloc_pool_release,
     or when a request misses and the cache is emptied before an out-of-memory error. Pinned
     blocks that a device copy may still read must likewise outlive that copy.
     One mutex guards all pools, so any thread (an OpenMP region) may allocate and free.

   PRIVATE POOLS
     While pool id is pushed for a device, every allocation on that device (whatever its
     stream) comes from it; blocks return to the pool they came from. bt_alloc_empty_cache
     leaves private pools alone; bt_alloc_pool_release frees their free segments now and
     each remaining one as soon as its last live block is freed. A pool may grow during a
     CUDA graph capture (bt_graph_capture_begin, bt_tensor.h): cudaMalloc runs in the relaxed
     capture mode; a cudaFree (emptying a cache) in a capture is an error.

   OPTIONS (define before the implementation)
     BT_MALLOC/BT_FREE (both or neither), BT_ASSERT, BT_LOG(...) (default fprintf(stderr, ...)).
     Host segments are BT_MALLOC(size + 64) aligned up by hand, so any malloc will do.

   HISTORY
     0.1  first version: size classes, best fit, split/coalesce, stream and private pools, stats;
          the pinned-host pool.
*/
#ifndef BT_ALLOC_H
#define BT_ALLOC_H

#include <stddef.h>
#include <stdint.h>

#ifdef BT_STATIC
#define BTDEF static
#else
#define BTDEF extern
#endif

#if defined(__CUDACC__) && !defined(BT_NO_CUDA) && !defined(BT_CUDA)
#define BT_CUDA 1
#endif

#ifdef __cplusplus
extern "C" {
#endif

typedef enum { BT_CPU = 0, BT_GPU = 1 } bt_device_type;
/* index: the CUDA ordinal; for the CPU 0, or 1 for the pinned-host pool (bt_alloc only) */
typedef struct { int8_t type; int8_t index; } bt_device;

#define BT_MAX_GPUS 16

static inline bt_device bt_cpu(void) { bt_device d = { BT_CPU, 0 }; return d; }
static inline bt_device bt_pinned_host(void) { bt_device d = { BT_CPU, 1 }; return d; }
static inline bt_device bt_cuda_device(int i) { bt_device d = { BT_GPU, (int8_t)i }; return d; }
static inline int bt_device_eq(bt_device a, bt_device b) { return a.type == b.type && a.index == b.index; }

/* ---- errors ---- */
typedef void (*bt_error_fn)(const char *msg, void *user);
BTDEF void bt_set_error_handler(bt_error_fn fn, void *user);   /* NULL restores the default */
BTDEF void bt_get_error_handler(bt_error_fn *fn, void **user);
BTDEF void bt_error(const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 1, 2)))
#endif
    ;

/* ---- allocation ---- */
/* nbytes == 0 returns a valid unique pointer. stream: a cudaStream_t (NULL = default stream);
   ignored for the CPU. Host blocks are 64-byte aligned, device blocks 256-byte aligned. */
BTDEF void *bt_alloc(bt_device dev, size_t nbytes, void *stream);
/* Like bt_alloc, but returns NULL (after printing the stats) instead of raising on OOM. */
BTDEF void *bt_try_alloc(bt_device dev, size_t nbytes, void *stream);
BTDEF void bt_free(void *ptr);                       /* NULL is a no-op; any block from bt_alloc */
BTDEF size_t bt_alloc_size(const void *ptr);          /* the usable size of a live block */
/* The system allocation (segment) a live block lies in: its base, as cudaMalloc returned it, and
   the block's offset from there (what another process needs to map the block: CUDA IPC exports
   whole allocations). NULL when ptr is not the start of a live block. */
BTDEF void *bt_alloc_segment(const void *ptr, size_t *offset);

typedef struct {
    size_t allocated;        /* bytes in live blocks (rounded sizes) */
    size_t requested;        /* bytes the callers asked for, live */
    size_t reserved;         /* bytes held from the system (segments) */
    size_t peak_allocated;   /* max of allocated since the last reset */
    size_t peak_reserved;
    uint64_t n_allocs;       /* bt_alloc calls */
    uint64_t n_system_allocs;/* malloc / cudaMalloc calls (a miss) */
    uint64_t n_system_frees;
    uint64_t n_ooms;
} bt_alloc_stats_t;

BTDEF bt_alloc_stats_t bt_alloc_stats(bt_device dev);
BTDEF void bt_alloc_reset_peak(bt_device dev);
BTDEF void bt_alloc_print_stats(bt_device dev);       /* one readable block via BT_LOG */
BTDEF void bt_alloc_empty_cache(bt_device dev);       /* give free segments back to the system */
/* Cap the bytes reserved on a device (0 = no cap): a request past it is an OOM. For tests and
   for running several processes on one GPU. */
BTDEF void bt_alloc_set_limit(bt_device dev, size_t max_reserved);

/* Private pools for CUDA graph capture: blocks allocated between push and pop come from (and
   return to) pool `id` (> 0), never shared with the ordinary pools, so addresses baked into a
   captured graph stay valid while the pool lives. bt_alloc_pool_release(id) frees its segments. */
BTDEF void bt_alloc_pool_push(bt_device dev, int id);
BTDEF void bt_alloc_pool_pop(bt_device dev);
BTDEF void bt_alloc_pool_release(bt_device dev, int id);

#ifdef __cplusplus
}
#endif
#endif /* BT_ALLOC_H */

/* ============================================================================================ */
/*                                       IMPLEMENTATION                                         */
/* ============================================================================================ */
#ifdef BT_ALLOC_IMPLEMENTATION
#ifndef BT_ALLOC_IMPLEMENTATION_DONE
#define BT_ALLOC_IMPLEMENTATION_DONE

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <stdarg.h>

#if defined(BT_MALLOC) != defined(BT_FREE)
#error "bt_alloc.h: define both BT_MALLOC and BT_FREE, or neither"
#endif
#ifndef BT_MALLOC
#define BT_MALLOC(sz) malloc(sz)
#define BT_FREE(p) free(p)
#endif
#ifndef BT_ASSERT
#include <assert.h>
#define BT_ASSERT(x) assert(x)
#endif
#ifndef BT_LOG
#define BT_LOG(...) fprintf(stderr, __VA_ARGS__)
#endif

#ifdef BT_CUDA
#include <cuda_runtime.h>
#endif

#ifdef _WIN32
#include <windows.h>
static SRWLOCK bt__alloc_mutex = SRWLOCK_INIT;
static void bt__alloc_lock(void) { AcquireSRWLockExclusive(&bt__alloc_mutex); }
static void bt__alloc_unlock(void) { ReleaseSRWLockExclusive(&bt__alloc_mutex); }
#else
#include <pthread.h>
static pthread_mutex_t bt__alloc_mutex = PTHREAD_MUTEX_INITIALIZER;
static void bt__alloc_lock(void) { pthread_mutex_lock(&bt__alloc_mutex); }
static void bt__alloc_unlock(void) { pthread_mutex_unlock(&bt__alloc_mutex); }
#endif

/* ---------------------------------------- errors ------------------------------------------ */

static bt_error_fn bt__error_fn;
static void *bt__error_user;

BTDEF void bt_set_error_handler(bt_error_fn fn, void *user) { bt__error_fn = fn; bt__error_user = user; }
BTDEF void bt_get_error_handler(bt_error_fn *fn, void **user) { *fn = bt__error_fn; *user = bt__error_user; }

BTDEF void bt_error(const char *fmt, ...) {
    char msg[2048];   /* room for another header's message (1024 bytes at most) after a prefix */
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    if (bt__error_fn) bt__error_fn(msg, bt__error_user);   /* should longjmp or exit */
    else fprintf(stderr, "bt error: %s\n", msg);
    exit(1);
}

/* ------------------------------------- data structures ------------------------------------ */

#define BT__ROUND        ((size_t)512)              /* every block size is a multiple of this */
#define BT__SMALL_MAX    ((size_t)1 << 20)          /* requests up to this are "small" */
#define BT__SMALL_SEG    ((size_t)2 << 20)          /* small segments; large ones round to this */
#define BT__LARGE_SPLIT  ((size_t)1 << 20)          /* keep a large remainder only if > this */
#define BT__HOST_ALIGN   64
#define BT__NSLOTS       (2 + BT_MAX_GPUS)          /* slot 0: the host, 1: pinned host, 2 + i: cuda:i */
#define BT__PINNED       1
#define BT__GPU0         2
#define BT__MAX_PUSH     16

/* A segment is one system allocation, cut into blocks chained by address (prev/next). Invariants:
   two neighbours are never both free (bt_free merges them); a free block is in exactly one free
   tree (its pool's, small or large); a live block is in the hash table. */
struct bt__pool;
typedef struct bt__block {
    char *ptr;
    size_t size, requested;
    struct bt__block *prev, *next;   /* address-ordered neighbours in the same segment */
    struct bt__block *left, *right;  /* free tree children (free blocks only) */
    struct bt__block *link;          /* hash chain when live; scratch list when free */
    struct bt__pool *pool;
    void *seg_raw;                   /* segment head (prev == NULL): what the system returned */
    size_t seg_size;                 /* segment head: bytes reserved */
    int seg_malloc;                  /* segment head of the pinned pool: plain malloc (no GPU) */
    int large, live;
} bt__block;

typedef struct bt__pool {
    int slot, id;                    /* id 0: an ordinary pool, > 0: a private one */
    void *stream;                    /* ordinary device pools only */
    int released, n_segments;
    bt__block *free_tree[2];         /* [large]: treaps keyed by (size, ptr) */
    struct bt__pool *next;
} bt__pool;

typedef struct {
    bt__pool *pools;
    int pushed[BT__MAX_PUSH], n_pushed;
    size_t limit;
    bt_alloc_stats_t st;
} bt__alloc_dev;

static struct {
    bt__alloc_dev dev[BT__NSLOTS];
    bt__block **buckets;             /* live blocks by pointer */
    size_t n_buckets, n_live;
    bt__block *spare;                /* recycled block records */
} bt__A;

static size_t bt__round_up(size_t n, size_t m) { return (n + m - 1) / m * m; }
static double bt__mib(size_t n) { return (double)n / (1024.0 * 1024.0); }

static bt__block *bt__block_new(void) {
    bt__block *b = bt__A.spare;
    if (b) bt__A.spare = b->link;
    else b = (bt__block *)BT_MALLOC(sizeof(bt__block));
    BT_ASSERT(b && "bt_alloc: out of host memory for block records");
    memset(b, 0, sizeof *b);
    return b;
}
static void bt__block_del(bt__block *b) { b->link = bt__A.spare; bt__A.spare = b; }

/* ---- free tree: a treap on (size, address); the priority is a hash of the address, so the
   shape is random-like without storing anything. Best fit = leftmost node with size >= n. ---- */

static int bt__less(const bt__block *a, const bt__block *b) {
    return a->size < b->size || (a->size == b->size && (uintptr_t)a->ptr < (uintptr_t)b->ptr);
}
static uint32_t bt__prio(const bt__block *b) {
    return (uint32_t)(((uint64_t)(uintptr_t)b->ptr * 0x9E3779B97F4A7C15ull) >> 32);
}
static void bt__tree_split(bt__block *t, const bt__block *key, bt__block **l, bt__block **r) {
    if (!t) { *l = *r = NULL; return; }
    if (bt__less(t, key)) { *l = t; bt__tree_split(t->right, key, &t->right, r); }
    else { *r = t; bt__tree_split(t->left, key, l, &t->left); }
}
static bt__block *bt__tree_merge(bt__block *a, bt__block *b) {   /* every key of a < b's */
    if (!a) return b;
    if (!b) return a;
    if (bt__prio(a) > bt__prio(b)) { a->right = bt__tree_merge(a->right, b); return a; }
    b->left = bt__tree_merge(a, b->left);
    return b;
}
static void bt__tree_insert(bt__block **t, bt__block *b) {
    uint32_t p = bt__prio(b);
    while (*t && bt__prio(*t) >= p) t = bt__less(b, *t) ? &(*t)->left : &(*t)->right;
    bt__tree_split(*t, b, &b->left, &b->right);
    *t = b;
}
static void bt__tree_erase(bt__block **t, bt__block *b) {
    while (*t != b) { BT_ASSERT(*t); t = bt__less(b, *t) ? &(*t)->left : &(*t)->right; }
    *t = bt__tree_merge(b->left, b->right);
    b->left = b->right = NULL;
}
static bt__block *bt__tree_best_fit(bt__block *t, size_t size) {
    bt__block *best = NULL;
    while (t) { if (t->size >= size) { best = t; t = t->left; } else t = t->right; }
    return best;
}
static void bt__free_insert(bt__block *b) { bt__tree_insert(&b->pool->free_tree[b->large], b); }
static void bt__free_erase(bt__block *b) { bt__tree_erase(&b->pool->free_tree[b->large], b); }

/* ---- live blocks by pointer: chained hash table, doubled when the load passes 1 ---- */

static size_t bt__hash(const void *p, size_t n_buckets) {
    return (size_t)(((uint64_t)(uintptr_t)p * 0x9E3779B97F4A7C15ull) >> 32) & (n_buckets - 1);
}
static void bt__map_grow(void) {
    size_t n = bt__A.n_buckets ? 2 * bt__A.n_buckets : 1024;
    bt__block **nb = (bt__block **)BT_MALLOC(n * sizeof(bt__block *));
    BT_ASSERT(nb && "bt_alloc: out of host memory for the block table");
    memset(nb, 0, n * sizeof(bt__block *));
    for (size_t i = 0; i < bt__A.n_buckets; i++) {
        for (bt__block *b = bt__A.buckets[i], *nx; b; b = nx) {
            nx = b->link;
            size_t h = bt__hash(b->ptr, n);
            b->link = nb[h]; nb[h] = b;
        }
    }
    if (bt__A.buckets) BT_FREE(bt__A.buckets);
    bt__A.buckets = nb; bt__A.n_buckets = n;
}
static void bt__map_insert(bt__block *b) {
    if (bt__A.n_live >= bt__A.n_buckets) bt__map_grow();
    size_t h = bt__hash(b->ptr, bt__A.n_buckets);
    b->link = bt__A.buckets[h]; bt__A.buckets[h] = b;
    bt__A.n_live++;
}
static bt__block **bt__map_find(const void *p) {   /* the slot that points at p's block, or NULL */
    if (!bt__A.n_buckets) return NULL;
    bt__block **s = &bt__A.buckets[bt__hash(p, bt__A.n_buckets)];
    for (; *s; s = &(*s)->link) if ((*s)->ptr == (const char *)p) return s;
    return NULL;
}

/* ---------------------------------- the system: segments ---------------------------------- */

static char bt__sys_error[128];   /* why the last system allocation failed, for the OOM message */

#ifdef BT_CUDA
/* cudaMalloc/cudaFree act on the current device: switch to the pool's and back. */
static int bt__cuda_enter(int index, int *prev) {
    *prev = index;
    cudaError_t e = cudaGetDevice(prev);
    if (e == cudaSuccess && *prev != index) e = cudaSetDevice(index);
    if (e != cudaSuccess) { *prev = index; snprintf(bt__sys_error, sizeof bt__sys_error, "%s", cudaGetErrorString(e)); }
    return e == cudaSuccess;
}
static void bt__cuda_leave(int index, int prev) { if (prev != index) cudaSetDevice(prev); }
#endif

static void *bt__host_alloc(size_t size, char **aligned) {
    char *raw = (char *)BT_MALLOC(size + BT__HOST_ALIGN);
    if (!raw) { snprintf(bt__sys_error, sizeof bt__sys_error, "malloc failed"); return NULL; }
    *aligned = raw + (bt__round_up((uintptr_t)raw, BT__HOST_ALIGN) - (uintptr_t)raw);
    return raw;
}
/* pinned host memory; *is_malloc = 1 when it fell back to malloc (no CUDA, or no GPU) */
static void *bt__pinned_alloc(size_t size, char **aligned, int *is_malloc) {
    *is_malloc = 0;
#ifdef BT_CUDA
    void *p = NULL;
    cudaError_t e = cudaHostAlloc(&p, size, cudaHostAllocPortable);
    if (e == cudaSuccess) { *aligned = (char *)p; return p; }
    cudaGetLastError();
    if (e != cudaErrorNoDevice && e != cudaErrorInsufficientDriver) {
        snprintf(bt__sys_error, sizeof bt__sys_error, "cudaHostAlloc: %s", cudaGetErrorString(e));
        return NULL;
    }
#endif
    *is_malloc = 1;
    return bt__host_alloc(size, aligned);
}
static void *bt__device_alloc(int device, size_t size, char **aligned) {
#ifdef BT_CUDA
    void *p = NULL;
    int prev;
    if (!bt__cuda_enter(device, &prev)) return NULL;
    /* a private pool grows while a CUDA graph is being captured: cudaMalloc enqueues nothing, so
       it is safe there, but a strict capture mode would refuse it; relax this thread's mode for it */
    cudaStreamCaptureMode mode = cudaStreamCaptureModeRelaxed;
    cudaThreadExchangeStreamCaptureMode(&mode);
    cudaError_t e = cudaMalloc(&p, size);
    cudaThreadExchangeStreamCaptureMode(&mode);
    if (e != cudaSuccess) {
        cudaGetLastError();   /* a failed cudaMalloc is not sticky: clear it for the caller */
        snprintf(bt__sys_error, sizeof bt__sys_error, "cudaMalloc: %s", cudaGetErrorString(e));
        p = NULL;
    }
    bt__cuda_leave(device, prev);
    *aligned = (char *)p;
    return p;
#else
    (void)device; (void)size; (void)aligned;
    return NULL;
#endif
}

static void bt__sys_free(int slot, void *raw, int is_malloc) {
    if (slot == 0 || is_malloc) { BT_FREE(raw); return; }
#ifdef BT_CUDA
    if (slot == BT__PINNED) { cudaFreeHost(raw); return; }
    int prev;
    if (bt__cuda_enter(slot - BT__GPU0, &prev)) { cudaFree(raw); bt__cuda_leave(slot - BT__GPU0, prev); }
#endif
}

/* A new segment as one free block of the pool (not yet in its tree); NULL past the limit or on
   a system failure. */
static bt__block *bt__segment_new(bt__pool *pool, size_t size, int large) {
    bt__alloc_dev *d = &bt__A.dev[pool->slot];
    if (d->limit && d->st.reserved + size > d->limit) {
        snprintf(bt__sys_error, sizeof bt__sys_error, "limit of %.2f MiB reached", bt__mib(d->limit));
        return NULL;
    }
    char *ptr = NULL;
    int is_malloc = 0;
    void *raw = pool->slot == 0 ? bt__host_alloc(size, &ptr)
              : pool->slot == BT__PINNED ? bt__pinned_alloc(size, &ptr, &is_malloc)
              : bt__device_alloc(pool->slot - BT__GPU0, size, &ptr);
    if (!raw) return NULL;
    bt__block *b = bt__block_new();
    b->ptr = ptr; b->size = size; b->pool = pool; b->large = large;
    b->seg_raw = raw; b->seg_size = size; b->seg_malloc = is_malloc;
    pool->n_segments++;
    d->st.reserved += size;
    d->st.n_system_allocs++;
    if (d->st.reserved > d->st.peak_reserved) d->st.peak_reserved = d->st.reserved;
    return b;
}

/* b is a whole free segment, already out of its tree. */
static void bt__segment_release(bt__block *b) {
    bt__alloc_dev *d = &bt__A.dev[b->pool->slot];
    BT_ASSERT(!b->prev && !b->next && !b->live && b->size == b->seg_size);
    bt__sys_free(b->pool->slot, b->seg_raw, b->seg_malloc);
    d->st.reserved -= b->seg_size;
    d->st.n_system_frees++;
    b->pool->n_segments--;
    bt__block_del(b);
}

/* ------------------------------------------ pools ----------------------------------------- */

static int bt__slot(bt_device dev, const char *fn) {
    if (dev.type == BT_CPU && (dev.index == 0 || dev.index == 1)) return dev.index;   /* host, pinned host */
    if (dev.type != BT_GPU || dev.index < 0 || dev.index >= BT_MAX_GPUS)
        bt_error("%s: invalid device (type %d, index %d); expected the CPU, the pinned host or cuda:0..%d", fn,
                 dev.type, dev.index, BT_MAX_GPUS - 1);
#ifndef BT_CUDA
    bt_error("%s: cuda:%d requested, but this build has no CUDA (compile with nvcc)", fn, dev.index);
#endif
    return BT__GPU0 + dev.index;
}

static void bt__slot_name(int slot, char *buf, size_t n) {
    if (slot == 0) snprintf(buf, n, "cpu");
    else if (slot == BT__PINNED) snprintf(buf, n, "pinned host");
    else snprintf(buf, n, "cuda:%d", slot - BT__GPU0);
}

static bt__pool *bt__pool_get(int slot, int id, void *stream) {
    bt__alloc_dev *d = &bt__A.dev[slot];
    if (slot < BT__GPU0 || id > 0) stream = NULL;   /* host and private pools ignore streams */
    for (bt__pool *p = d->pools; p; p = p->next)
        if (p->id == id && p->stream == stream) return p;
    bt__pool *p = (bt__pool *)BT_MALLOC(sizeof(bt__pool));
    BT_ASSERT(p && "bt_alloc: out of host memory for a pool");
    memset(p, 0, sizeof *p);
    p->slot = slot; p->id = id; p->stream = stream;
    p->next = d->pools; d->pools = p;
    return p;
}

static void bt__pool_unlink(bt__pool *pool) {
    bt__pool **pp = &bt__A.dev[pool->slot].pools;
    while (*pp != pool) pp = &(*pp)->next;
    *pp = pool->next;
    BT_FREE(pool);
}

/* Free blocks that are whole segments, chained through ->link. */
static void bt__collect_segments(bt__block *t, bt__block **list) {
    if (!t) return;
    bt__collect_segments(t->left, list);
    bt__collect_segments(t->right, list);
    if (!t->prev && !t->next) { t->link = *list; *list = t; }
}
static void bt__pool_trim(bt__pool *pool) {
    for (int large = 0; large < 2; large++) {
        bt__block *list = NULL, *nx;
        bt__collect_segments(pool->free_tree[large], &list);
        for (bt__block *b = list; b; b = nx) { nx = b->link; bt__free_erase(b); bt__segment_release(b); }
    }
}

/* Free every whole free segment of the ordinary and released pools of a slot. drop_pools also
   forgets pools left empty (stream pools of dead streams); the alloc path must keep its pool. */
static void bt__empty_cache_locked(int slot, int drop_pools) {
    bt__pool *nx;
    for (bt__pool *p = bt__A.dev[slot].pools; p; p = nx) {
        nx = p->next;
        if (p->id == 0 || p->released) bt__pool_trim(p);
        if (drop_pools && p->n_segments == 0) bt__pool_unlink(p);
    }
}

/* --------------------------------------- alloc / free ------------------------------------- */

static bt__block *bt__take(bt__pool *pool, size_t size, int large) {
    bt__block *b = bt__tree_best_fit(pool->free_tree[large], size);
    if (b) { bt__free_erase(b); return b; }
    size_t seg = large ? bt__round_up(size, BT__SMALL_SEG) : BT__SMALL_SEG;
    b = bt__segment_new(pool, seg, large);
    if (!b) {   /* give every cached segment back and try once more */
        bt__empty_cache_locked(pool->slot, 0);
        b = bt__segment_new(pool, seg, large);
    }
    return b;
}

/* Cut b to size; the tail becomes a free block of its own when it is worth keeping. */
static void bt__split(bt__block *b, size_t size) {
    size_t rest = b->size - size;
    if (rest < BT__ROUND || (b->large && rest <= BT__LARGE_SPLIT)) return;
    bt__block *r = bt__block_new();
    r->ptr = b->ptr + size; r->size = rest; r->pool = b->pool; r->large = b->large;
    r->prev = b; r->next = b->next;
    if (b->next) b->next->prev = r;
    b->next = r; b->size = size;
    bt__free_insert(r);
}

static void *bt__alloc(bt_device dev, size_t nbytes, void *stream, int raise) {
    int slot = bt__slot(dev, raise ? "bt_alloc" : "bt_try_alloc");
    size_t size = nbytes > ((size_t)1 << 62) ? 0 : bt__round_up(nbytes ? nbytes : 1, BT__ROUND);
    int large = size > BT__SMALL_MAX;
    bt__alloc_lock();
    bt__alloc_dev *d = &bt__A.dev[slot];
    d->st.n_allocs++;
    bt__pool *pool = bt__pool_get(slot, d->n_pushed ? d->pushed[d->n_pushed - 1] : 0, stream);
    pool->released = 0;   /* a pool in use again is no longer being released */
    bt__block *b = NULL;
    if (size) b = bt__take(pool, size, large);
    else snprintf(bt__sys_error, sizeof bt__sys_error, "request too large");
    if (b) {
        bt__split(b, size);
        b->live = 1; b->requested = nbytes;
        bt__map_insert(b);
        d->st.allocated += b->size;
        d->st.requested += nbytes;
        if (d->st.allocated > d->st.peak_allocated) d->st.peak_allocated = d->st.allocated;
        bt__alloc_unlock();
        return b->ptr;
    }
    d->st.n_ooms++;
    if (pool->n_segments == 0 && pool->id == 0) bt__pool_unlink(pool);
    char why[sizeof bt__sys_error], name[24];
    memcpy(why, bt__sys_error, sizeof why);
    bt__alloc_unlock();
    /* outside the lock: the stats take it, and an error handler may longjmp */
    bt__slot_name(slot, name, sizeof name);
    bt_alloc_print_stats(dev);
    if (raise)
        bt_error("bt_alloc: out of memory on %s: tried to allocate %zu bytes (%.2f MiB) (%s)",
                 name, nbytes, bt__mib(nbytes), why);
    BT_LOG("bt_try_alloc: out of memory on %s: tried to allocate %zu bytes (%.2f MiB) (%s)\n",
           name, nbytes, bt__mib(nbytes), why);
    return NULL;
}

BTDEF void *bt_alloc(bt_device dev, size_t nbytes, void *stream) { return bt__alloc(dev, nbytes, stream, 1); }
BTDEF void *bt_try_alloc(bt_device dev, size_t nbytes, void *stream) { return bt__alloc(dev, nbytes, stream, 0); }

BTDEF void bt_free(void *ptr) {
    if (!ptr) return;
    bt__alloc_lock();
    bt__block **slotp = bt__map_find(ptr);
    if (!slotp) {
        bt__alloc_unlock();
        bt_error("bt_free: %p was not allocated by bt_alloc (or was already freed)", ptr);
        return;
    }
    bt__block *b = *slotp;
    *slotp = b->link; b->link = NULL;
    bt__A.n_live--;
    bt__pool *pool = b->pool;
    bt__alloc_dev *d = &bt__A.dev[pool->slot];
    d->st.allocated -= b->size;
    d->st.requested -= b->requested;
    b->live = 0; b->requested = 0;
    /* coalesce: the lower block survives, so a segment head keeps its seg_raw/seg_size */
    bt__block *p = b->prev, *n = b->next;
    if (p && !p->live) {
        bt__free_erase(p);
        p->size += b->size; p->next = n;
        if (n) n->prev = p;
        bt__block_del(b);
        b = p;
    }
    if (n && !n->live) {
        bt__free_erase(n);
        b->size += n->size; b->next = n->next;
        if (n->next) n->next->prev = b;
        bt__block_del(n);
    }
    if (pool->released && !b->prev && !b->next) {
        bt__segment_release(b);
        if (pool->n_segments == 0) bt__pool_unlink(pool);
    } else {
        bt__free_insert(b);
    }
    bt__alloc_unlock();
}

BTDEF size_t bt_alloc_size(const void *ptr) {
    bt__alloc_lock();
    bt__block **s = bt__map_find(ptr);
    size_t n = s ? (*s)->size : 0;
    bt__alloc_unlock();
    if (!s) bt_error("bt_alloc_size: %p is not a live block of bt_alloc", ptr);
    return n;
}

BTDEF void *bt_alloc_segment(const void *ptr, size_t *offset) {
    bt__alloc_lock();
    bt__block **s = bt__map_find(ptr), *h = s ? *s : NULL;
    while (h && h->prev) h = h->prev;
    void *base = h ? h->seg_raw : NULL;
    if (base && offset) *offset = (size_t)((const char *)ptr - (const char *)base);
    bt__alloc_unlock();
    return base;
}

/* ----------------------------------------- stats ------------------------------------------ */

BTDEF bt_alloc_stats_t bt_alloc_stats(bt_device dev) {
    int slot = bt__slot(dev, "bt_alloc_stats");
    bt__alloc_lock();
    bt_alloc_stats_t st = bt__A.dev[slot].st;
    bt__alloc_unlock();
    return st;
}

BTDEF void bt_alloc_reset_peak(bt_device dev) {
    int slot = bt__slot(dev, "bt_alloc_reset_peak");
    bt__alloc_lock();
    bt_alloc_stats_t *st = &bt__A.dev[slot].st;
    st->peak_allocated = st->allocated;
    st->peak_reserved = st->reserved;
    bt__alloc_unlock();
}

BTDEF void bt_alloc_print_stats(bt_device dev) {
    int slot = bt__slot(dev, "bt_alloc_print_stats");
    char name[24];
    bt__slot_name(slot, name, sizeof name);
    bt__alloc_lock();
    bt_alloc_stats_t st = bt__A.dev[slot].st;
    size_t limit = bt__A.dev[slot].limit;
    bt__alloc_unlock();
    BT_LOG("bt_alloc stats for %s:\n"
           "  allocated %10.2f MiB (peak %.2f MiB), requested %.2f MiB\n"
           "  reserved  %10.2f MiB (peak %.2f MiB), limit %.2f MiB%s\n"
           "  %llu allocs, %llu system allocs, %llu system frees, %llu out-of-memory\n",
           name, bt__mib(st.allocated), bt__mib(st.peak_allocated), bt__mib(st.requested),
           bt__mib(st.reserved), bt__mib(st.peak_reserved), bt__mib(limit), limit ? "" : " (none)",
           (unsigned long long)st.n_allocs, (unsigned long long)st.n_system_allocs,
           (unsigned long long)st.n_system_frees, (unsigned long long)st.n_ooms);
}

BTDEF void bt_alloc_empty_cache(bt_device dev) {
    int slot = bt__slot(dev, "bt_alloc_empty_cache");
    bt__alloc_lock();
    bt__empty_cache_locked(slot, 1);
    for (bt__block *b = bt__A.spare, *nx; b; b = nx) { nx = b->link; BT_FREE(b); }
    bt__A.spare = NULL;
    bt__alloc_unlock();
}

BTDEF void bt_alloc_set_limit(bt_device dev, size_t max_reserved) {
    int slot = bt__slot(dev, "bt_alloc_set_limit");
    bt__alloc_lock();
    bt__A.dev[slot].limit = max_reserved;
    bt__alloc_unlock();
}

/* ------------------------------------- private pools -------------------------------------- */

BTDEF void bt_alloc_pool_push(bt_device dev, int id) {
    int slot = bt__slot(dev, "bt_alloc_pool_push");
    if (id <= 0) bt_error("bt_alloc_pool_push: pool id %d; expected an id > 0", id);
    bt__alloc_lock();
    bt__alloc_dev *d = &bt__A.dev[slot];
    int ok = d->n_pushed < BT__MAX_PUSH;
    if (ok) d->pushed[d->n_pushed++] = id;
    bt__alloc_unlock();
    if (!ok) bt_error("bt_alloc_pool_push: more than %d pools pushed", BT__MAX_PUSH);
}

BTDEF void bt_alloc_pool_pop(bt_device dev) {
    int slot = bt__slot(dev, "bt_alloc_pool_pop");
    bt__alloc_lock();
    bt__alloc_dev *d = &bt__A.dev[slot];
    int ok = d->n_pushed > 0;
    if (ok) d->n_pushed--;
    bt__alloc_unlock();
    if (!ok) bt_error("bt_alloc_pool_pop: no pool pushed");
}

BTDEF void bt_alloc_pool_release(bt_device dev, int id) {
    int slot = bt__slot(dev, "bt_alloc_pool_release");
    if (id <= 0) bt_error("bt_alloc_pool_release: pool id %d; expected an id > 0", id);
    bt__alloc_lock();
    bt__pool *nx;
    for (bt__pool *p = bt__A.dev[slot].pools; p; p = nx) {
        nx = p->next;
        if (p->id != id) continue;
        p->released = 1;   /* segments still in use go back as soon as they are free (bt_free) */
        bt__pool_trim(p);
        if (p->n_segments == 0) bt__pool_unlink(p);
    }
    bt__alloc_unlock();
}

#endif /* BT_ALLOC_IMPLEMENTATION_DONE */
#endif /* BT_ALLOC_IMPLEMENTATION */
