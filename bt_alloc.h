/* bt_alloc.h - BluTrain-C caching allocator, v0.1: one API for host and device memory.

   USAGE
     #define BT_ALLOC_IMPLEMENTATION   in *one* C/CUDA file before including this header.
     Compiled by nvcc (or with BT_CUDA defined) the device side is built too; with a plain C
     compiler only host memory exists and asking for device memory is an error.

     bt_device cpu = bt_cpu(), gpu = bt_cuda_device(0);
     float *x = (float *)bt_alloc(cpu, 1000 * sizeof(float), NULL);
     bt_free(x);
     bt_alloc_stats_t st = bt_alloc_stats(cpu);   // allocated, reserved, peak, system calls

   WHAT IT DOES
     Blocks come from pools (one per device and stream; a private pool may be pushed for CUDA
     graph capture). A request is rounded up to a size class; a free block of the pool that fits
     is reused (best fit), split when much larger, and coalesced with free neighbours of the same
     segment when freed. Only on a miss does it call the system (aligned malloc / cudaMalloc) for a
     new segment; on a system failure it empties the cache once and retries, and then reports an
     out-of-memory error that prints the stats. Freed device blocks are returned to their stream's
     pool: reuse on the same stream is ordered by the stream, as in PyTorch.

   ERRORS
     Every subsystem of the core reports through bt_error(fmt, ...): the handler (default: print
     "bt error: <message>" to stderr and exit(1)) may be replaced with bt_set_error_handler; a
     handler must not return (longjmp or exit), else the process exits after it.

   OPTIONS (define before the implementation)
     BT_MALLOC/BT_FREE (both or neither), BT_ASSERT, BT_LOG(...) (default fprintf(stderr, ...)).
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
typedef struct { int8_t type; int8_t index; } bt_device;   /* index: CUDA ordinal, 0 for the CPU */

#define BT_MAX_GPUS 16

static inline bt_device bt_cpu(void) { bt_device d = { BT_CPU, 0 }; return d; }
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
