/* bt_mlir.h - BluTrain-C fused kernels through MLIR, v0.1: trace a chain of bt ops once, compile it
   with MLIR's C API into one kernel (a CPU function through the JIT, or PTX for CUDA), and run it as
   one autograd node whose backward is a second fused kernel.

   USAGE
     #define BT_MLIR_IMPLEMENTATION in *one* C file (with the other headers' implementations), then
     #include "bt_mlir.h". Build with `make MLIR=1` (Debian: apt-get install libmlir-19-dev), which
     defines BT_MLIR and links the MLIR C API; without BT_MLIR nothing links against LLVM and the
     header still runs kernels compiled ahead of time (GPU) and falls back to the unfused ops.

       static bt_tensor *rmsnorm_body(bt_tensor **in, int n, void *user) {   // in: x [.., C], w [C]
           int last = -1; (void)n; (void)user;
           bt_tensor *ms = bt_mean(bt_square(in[0]), &last, 1, 1);           // [.., 1]
           return bt_mul(bt_div(in[0], bt_sqrt(bt_add_scalar(ms, 1e-5))), in[1]);
       }
       bt_mlir_fn *rms = bt_mlir_fn_new("rmsnorm", rmsnorm_body, 2, NULL, 0);
       bt_tensor *in[2] = {x, w};
       bt_tensor *y = bt_mlir_call(rms, in);      // one kernel; differentiable like any op
       ...
       bt_mlir_fn_free(rms);                      // after the graphs that used it have run
       bt_mlir_shutdown();                        // at exit: kernels, modules, the MLIR context

     The region form records the ops between two calls instead of a function:
       bt_tensor *y = bt_mlir_begin(reg, in);     // the fused result when reg knows these shapes
       if (!y) y = bt_mlir_end(reg, bt_mul(bt_div(in[0], ...), in[1]));   // first time: record

   WHAT IS CAPTURED
     bt_mlir_call runs the body once per new input signature (dtypes and shapes) on copies of the
     inputs that require grad, and reads the chain back from the autograd graph it recorded
     (bt_node: op name, parameters, input shapes and dtypes). The traced ops:
       unary      neg exp log sqrt tanh relu gelu (tanh form) square recip, and sigmoid silu rsqrt
                  when bt_tensor.h has them (matched by op name)
       scalar     affine (alpha x + beta: bt_scale, bt_add_scalar, bt_affine)
       binary     add sub mul div, broadcasting whole rows or whole columns
       reduce     sum mean max over the last dim (keepdim or not)
       composite  softmax and log_softmax over the last dim (expanded into max, exp, sum, div)
       casts      between float dtypes (a cast to a narrower dtype rounds there; the gradient
                  through a widening cast is rounded to the narrower dtype, as bt_cast's is)
       views      view reshape squeeze unsqueeze expand contiguous clone that keep the [rows, C]
                  layout (the last dim stays the last dim)
     Every value of the chain is one of: full [rows, C], a row value [rows, 1], a column value [C],
     or a scalar, where C is the last dim. That is enough for layernorm, RMSNorm, softmax, SwiGLU
     and bias + GELU. Anything else (matmul, a reduction over another dim, a permute, a constant
     tensor made inside the body, more than 6 inputs) is "unsupported": by default the call runs the
     body's own ops unfused and logs one line (BT_MLIR_STRICT makes it an error instead).

   HOW A CHAIN BECOMES A KERNEL
     One kernel walks the rows; for each row it runs the reduction phases (all reductions of one
     depth share one pass over the row: layernorm's mean, then its variance) and a last pass that
     stores the outputs. Every elementwise value is recomputed from the inputs where it is needed,
     never stored: the memory traffic is the inputs (read once per phase, from cache after the
     first) plus the outputs. Values are computed in f32 (f64 when a tensor of the chain is f64)
     and rounded once to the output's dtype, where the unfused ops round after every op.
     CPU: one function over a range of rows, called on 16 row blocks from OpenMP threads; sums
     accumulate in f64, as bt_tensor.h's CPU reductions do.
     GPU: one thread block per row (grid-stride; 8 blocks per SM when column partial sums exist),
     about 4 columns per thread (whole warps, 32 to 1024 threads, fewer when the kernel's registers
     allow fewer), each thread a strided set of columns (coalesced), block reductions by warp
     shuffles and shared memory.
     The kernels are written directly in the scf/arith/math/memref (+ gpu) dialects as text and
     parsed by the C API: the fusion schedule is decided here, so linalg's tiling and mapping
     machinery would add nothing but fragility, and the text is what the cache hashes.

   BACKWARD
     The fused op is one autograd node that saves only its inputs (no intermediates). Default:
     its backward is a second fused kernel, the chain's derivative by reverse mode over the traced
     graph (forward values recomputed in the same kernel). A column input's gradient (a weight [C])
     sums over rows: each row block adds into its own row of an f32 partial buffer, summed by
     bt_sum afterwards (deterministic). BT_MLIR_REPLAY_BACKWARD (function form only) instead re-runs
     the body's ops on the saved inputs with grad on and runs their own backward.

   PIPELINES (the strings passed to mlirParsePassPipeline)
     CPU  canonicalize, cse, convert-math-to-libm, convert-scf-to-cf, convert-cf-to-llvm,
          expand-strided-metadata, finalize-memref-to-llvm, convert-math-to-llvm,
          convert-arith-to-llvm, convert-index-to-llvm, convert-func-to-llvm,
          reconcile-unrealized-casts; then mlirExecutionEngineCreate at -O3.
     GPU  nvvm-attach-target{chip=sm_90 features=+ptx80 O=3},
          gpu.module(convert-scf-to-cf, convert-gpu-to-nvvm, canonicalize, cse,
          reconcile-unrealized-casts), gpu-module-to-binary{format=isa toolkit=$CUDA}; the PTX
          (libdevice linked from $CUDA/nvvm/libdevice) is loaded with cuModuleLoadDataEx and
          launched with cuLaunchKernel on the device's current stream. The driver is opened with dlopen, so a
          binary needs no -lcuda and runs (on the CPU) where there is no driver.

   CACHE
     A kernel's key is a 64-bit FNV-1a hash of the format version, the target (cpu or the chip)
     and the kernel's MLIR text, which spells out the graph, the dtypes and the row length C (the
     number of rows is a run-time argument, so one kernel serves every batch size). Lookups go:
     memory, then kernels registered ahead of time (bt_mlir_register_aot), then the cache
     directory, then a compile (BT_MLIR builds only). The directory holds <key>.<target>.mlir (the
     source, compared on load so a hash collision cannot load a wrong kernel) and
     <key>.<target>.ptx (GPU) or <key>.cpu.ll.mlir (CPU: the module lowered to the LLVM dialect,
     which skips the pass pipeline; LLVM still generates machine code, about 20 ms). Files are
     written to a temporary name and renamed. The directory is, first match wins:
     bt_mlir_set_cache_dir(dir) ("" turns the disk cache off), $BT_MLIR_CACHE_DIR,
     $XDG_CACHE_HOME/bt_mlir, ~/.cache/bt_mlir.

   AHEAD OF TIME (a GPU binary without LLVM)
     On a machine with MLIR: bt_mlir_precompile(fn, examples, "sm_90") traces fn on example inputs
     (CPU tensors of the real shapes will do) and compiles its forward and backward kernels into
     the caches; bt_mlir_write_aot_source(path) writes every GPU kernel compiled in this process
     into a C file (bt_mlir_aot_kernels[], bt_mlir_aot_count). A plain nvcc build without BT_MLIR
     either compiles that file in and calls bt_mlir_register_aot, or is pointed at a copy of the
     cache directory. It traces and emits the same text (that part needs no MLIR), finds the key,
     and loads the PTX with the driver. `make mlir-aot` does this for the tests' chains.

   OPTIONS
     BT_MLIR              compile kernels (needs the MLIR C API headers and libraries)
     BT_MLIR_CUDA_PATH    env: the CUDA toolkit for libdevice (default $CUDA_HOME, /usr/local/cuda)
     BT_MLIR_CACHE_DIR    env: the cache directory (see CACHE)
     bt_mlir_set_enabled(0) makes every bt_mlir_call run its body's ops (a --mlir switch).
     bt_mlir_set_dump(1) logs each kernel's MLIR text before compiling it.

   LIMITS
     One output per chain; at most 6 inputs (the node saves them); inputs on one device; f64 is
     CPU-only; the body must be a pure function of its inputs and `user` (scalars inside it are
     baked into the kernel: use a new bt_mlir_fn for another value). Not thread-safe (like the ops).
     A bt_mlir_fn must outlive the graphs recorded through it.

   HISTORY
     0.1  first version: capture from the autograd graph, fused forward and backward, CPU JIT,
          PTX, memory/disk/ahead-of-time caches, the region form, RMSNorm / SwiGLU / bias+GELU.
*/
#ifndef BT_MLIR_H
#define BT_MLIR_H
#include "bt_autograd.h"

#ifdef __cplusplus
extern "C" {
#endif

/* the traced body: a chain of bt ops on inputs[0..n) returning one tensor */
typedef bt_tensor *(*bt_mlir_body)(bt_tensor **inputs, int n, void *user);
typedef struct bt_mlir_fn bt_mlir_fn;

/* flags of bt_mlir_fn_new */
#define BT_MLIR_REPLAY_BACKWARD 1   /* backward re-runs the body's ops and their backward */
#define BT_MLIR_STRICT          2   /* unsupported op / no kernel: bt_error instead of running unfused */

BTDEF bt_mlir_fn *bt_mlir_fn_new(const char *name, bt_mlir_body body, int n_in, void *user, int flags);
BTDEF void bt_mlir_fn_free(bt_mlir_fn *fn);
BTDEF bt_tensor *bt_mlir_call(bt_mlir_fn *fn, bt_tensor **inputs);

/* the region form: bt_mlir_begin returns the fused result when the region already knows this input
   signature, else NULL, and then records every op until bt_mlir_end(region, out), which returns
   the fused result (or out itself when the chain is unsupported). Use it inside a bt_scope. */
BTDEF bt_mlir_fn *bt_mlir_region_new(const char *name, int n_in, int flags);
BTDEF bt_tensor *bt_mlir_begin(bt_mlir_fn *region, bt_tensor **inputs);
BTDEF bt_tensor *bt_mlir_end(bt_mlir_fn *region, bt_tensor *out);

/* 1 when the last call (forward) ran the fused kernel; else the reason it did not */
BTDEF int bt_mlir_last_fused(const bt_mlir_fn *fn);
BTDEF const char *bt_mlir_last_reason(const bt_mlir_fn *fn);

/* ---- settings ---- */
BTDEF void bt_mlir_set_enabled(int on);             /* 0: bt_mlir_call runs the body's ops */
BTDEF int bt_mlir_enabled(void);
BTDEF void bt_mlir_set_cache_dir(const char *dir);  /* NULL: the default; "": no disk cache */
BTDEF const char *bt_mlir_cache_dir(void);          /* "" when off */
BTDEF void bt_mlir_set_gpu_chip(const char *chip);  /* "sm_90" (default) */
BTDEF void bt_mlir_set_dump(int on);                /* 1: log each kernel's MLIR text before compiling it */
BTDEF int bt_mlir_can_compile(void);                /* 1 in a BT_MLIR build */

typedef struct {
    uint64_t traces;          /* bodies traced (new input signatures) */
    uint64_t compiles;        /* MLIR pass-pipeline runs */
    double compile_ms;        /* time in them, plus the JIT's code generation */
    uint64_t memory_hits, aot_hits, disk_hits;
    uint64_t fused_calls, fused_backwards, replay_backwards, fallbacks;
} bt_mlir_stats_t;
BTDEF bt_mlir_stats_t bt_mlir_stats(void);
BTDEF void bt_mlir_reset_stats(void);
/* drop every loaded kernel (JIT engines, CUDA modules) and the MLIR context; traces stay */
BTDEF void bt_mlir_reset(void);
/* bt_mlir_reset, plus the ready-made functions' state and the registered AOT tables */
BTDEF void bt_mlir_shutdown(void);

/* ---- ahead of time ---- */
typedef struct {
    uint64_t key;             /* see CACHE */
    const char *target;       /* "sm_90" */
    const char *name;         /* the chain and kernel, for messages */
    const char *binary;       /* PTX text */
    size_t size;
} bt_mlir_aot_kernel;
/* trace fn on examples and make its forward and full backward kernels for target ("cpu" or a chip
   such as "sm_90"); returns the number of kernels now available (2), 0 when the chain is
   unsupported or a kernel could not be made (bt_mlir_last_reason says why) */
BTDEF int bt_mlir_precompile(bt_mlir_fn *fn, bt_tensor **examples, const char *target);
/* every GPU kernel in memory, as a C source file; returns the number written, -1 on an I/O error */
BTDEF int bt_mlir_write_aot_source(const char *path);
BTDEF void bt_mlir_register_aot(const bt_mlir_aot_kernel *kernels, int n);

/* the kernels in memory, for tests and tools: fills up to max entries, returns the total */
typedef struct {
    uint64_t key;
    const char *target, *name;
    const char *source;       /* the MLIR text */
    const char *binary;       /* PTX, or the lowered LLVM-dialect text on the CPU (may be NULL) */
    size_t size;
} bt_mlir_kernel_info;
BTDEF int bt_mlir_kernels(bt_mlir_kernel_info *out, int max);

/* ---- ready-made fused chains (a bt_mlir_fn each, made on first use; freed by bt_mlir_shutdown) ----
   The unfused versions are the same bt ops, run when the path is disabled or unsupported. */
BTDEF bt_tensor *bt_mlir_rmsnorm(bt_tensor *x, bt_tensor *w, double eps);  /* x / sqrt(mean(x^2) + eps) * w */
BTDEF bt_tensor *bt_mlir_swiglu(bt_tensor *a, bt_tensor *b);               /* silu(a) * b */
BTDEF bt_tensor *bt_mlir_bias_gelu(bt_tensor *x, bt_tensor *b);            /* gelu(x + b) */
/* the same chains as plain bt ops (what gets traced) */
BTDEF bt_tensor *bt_mlir_rmsnorm_ops(bt_tensor *x, bt_tensor *w, double eps);
BTDEF bt_tensor *bt_mlir_silu_ops(bt_tensor *x);
BTDEF bt_tensor *bt_mlir_sigmoid_ops(bt_tensor *x);

#ifdef __cplusplus
}
#endif
#endif /* BT_MLIR_H */

/* ================================================================================================
                                         IMPLEMENTATION
   1. state, strings, settings, stats         7. compiling with the MLIR C API (BT_MLIR)
   2. the graph IR                            8. running: CPU JIT calls, CUDA driver launches
   3. capture: autograd graph -> IR           9. the fused op: traces, forward, backward, fallback
   4. reverse mode: the backward graph       10. the region form
   5. emission: IR -> MLIR text              11. ready-made chains
   6. the kernel cache (memory, AOT, disk)   12. ahead-of-time source files
   ================================================================================================ */
#ifdef BT_MLIR_IMPLEMENTATION
#ifndef BT_MLIR_IMPLEMENTATION_DONE
#define BT_MLIR_IMPLEMENTATION_DONE

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <stdarg.h>
#include <time.h>
#include <errno.h>
#include <sys/stat.h>
#include <unistd.h>
#ifdef BT_MLIR
#include <mlir-c/IR.h>
#include <mlir-c/Diagnostics.h>
#include <mlir-c/BuiltinAttributes.h>
#include <mlir-c/Pass.h>
#include <mlir-c/RegisterEverything.h>
#include <mlir-c/ExecutionEngine.h>
#include <mlir-c/Dialect/GPU.h>
#endif
#ifdef BT_CUDA
#include <cuda.h>
#include <dlfcn.h>
#endif

#ifndef BT_LOG
#define BT_LOG(...) fprintf(stderr, __VA_ARGS__)
#endif

/* ============================================================================================
   1. state, strings, settings, stats
   ============================================================================================ */
#define BT__M_VERSION "bt_mlir 1"     /* part of every key: bump when the emitted code's meaning changes */
#define BT__M_MAX_IN 6                /* inputs of a chain: the node saves each (BT_NODE_MAX_SAVED) */
#define BT__M_CPU_BLOCKS 16           /* CPU row blocks: a fixed count, so sums do not depend on threads */

typedef struct bt__mkernel bt__mkernel;
typedef struct bt__mspec bt__mspec;

static struct {
    int disabled;
    int dump;                     /* bt_mlir_set_dump */
    char *cache_dir;              /* NULL: not resolved yet */
    int cache_dir_set;
    char chip[16];
    bt_mlir_stats_t stats;
    bt__mkernel *kernels;         /* the memory cache, a list */
    const bt_mlir_aot_kernel **aot; int *aot_n; int n_aot, cap_aot;
    bt_mlir_fn *fns;              /* every live bt_mlir_fn (bt_mlir_reset drops their kernel pointers) */
    int affine_beta;              /* -1 unknown, 0/1: bt_tensor.h records affine's beta in f[1] */
} bt__m = { 0, 0, NULL, 0, "sm_90", {0, 0, 0, 0, 0, 0, 0, 0, 0, 0}, NULL, NULL, NULL, 0, 0, NULL, -1 };

static void *bt__mmalloc(size_t n) {
    void *p = malloc(n ? n : 1);
    if (!p) bt_error("bt_mlir: out of host memory allocating %zu bytes", n);
    return p;
}
static void *bt__mcalloc(size_t n) { void *p = bt__mmalloc(n); memset(p, 0, n); return p; }
static char *bt__mstrdup(const char *s) {
    size_t n = strlen(s) + 1;
    return (char *)memcpy(bt__mmalloc(n), s, n);
}

/* a growing string */
typedef struct { char *p; size_t n, cap; } bt__sb;
static void bt__sb_put(bt__sb *s, const char *txt, size_t len) {
    if (s->n + len + 1 > s->cap) {
        size_t cap = s->cap ? s->cap : 4096;
        while (cap < s->n + len + 1) cap *= 2;
        char *q = (char *)realloc(s->p, cap);
        if (!q) bt_error("bt_mlir: out of host memory growing a text to %zu bytes", cap);
        s->p = q; s->cap = cap;
    }
    memcpy(s->p + s->n, txt, len); s->n += len; s->p[s->n] = 0;
}
#if defined(__GNUC__)
__attribute__((format(printf, 2, 3)))
#endif
static void bt__sb_printf(bt__sb *s, const char *fmt, ...) {
    char buf[512]; va_list ap;
    va_start(ap, fmt); int k = vsnprintf(buf, sizeof buf, fmt, ap); va_end(ap);
    if (k < 0) return;
    if ((size_t)k < sizeof buf) { bt__sb_put(s, buf, (size_t)k); return; }
    char *big = (char *)bt__mmalloc((size_t)k + 1);
    va_start(ap, fmt); vsnprintf(big, (size_t)k + 1, fmt, ap); va_end(ap);
    bt__sb_put(s, big, (size_t)k); free(big);
}
static void bt__sb_free(bt__sb *s) { free(s->p); s->p = NULL; s->n = s->cap = 0; }

/* FNV-1a, 64 bits */
static uint64_t bt__mhash(uint64_t h, const char *s, size_t n) {
    for (size_t i = 0; i < n; i++) { h ^= (unsigned char)s[i]; h *= 0x100000001b3ULL; }
    return h;
}
static uint64_t bt__mkey(const char *target, const char *text) {
    uint64_t h = 0xcbf29ce484222325ULL;
    h = bt__mhash(h, BT__M_VERSION, sizeof BT__M_VERSION);
    h = bt__mhash(h, target, strlen(target) + 1);
    return bt__mhash(h, text, strlen(text));
}

BTDEF void bt_mlir_set_enabled(int on) { bt__m.disabled = !on; }
BTDEF int bt_mlir_enabled(void) { return !bt__m.disabled; }
BTDEF void bt_mlir_set_dump(int on) { bt__m.dump = on != 0; }
BTDEF int bt_mlir_can_compile(void) {
#ifdef BT_MLIR
    return 1;
#else
    return 0;
#endif
}
BTDEF void bt_mlir_set_cache_dir(const char *dir) {
    free(bt__m.cache_dir);
    bt__m.cache_dir = dir ? bt__mstrdup(dir) : NULL;
    bt__m.cache_dir_set = dir != NULL;
}
BTDEF const char *bt_mlir_cache_dir(void) {
    if (bt__m.cache_dir) return bt__m.cache_dir;
    const char *env = getenv("BT_MLIR_CACHE_DIR"), *xdg = getenv("XDG_CACHE_HOME"), *home = getenv("HOME");
    char buf[4096];
    if (env) snprintf(buf, sizeof buf, "%s", env);
    else if (xdg && *xdg) snprintf(buf, sizeof buf, "%s/bt_mlir", xdg);
    else if (home && *home) snprintf(buf, sizeof buf, "%s/.cache/bt_mlir", home);
    else buf[0] = 0;
    bt__m.cache_dir = bt__mstrdup(buf);
    return bt__m.cache_dir;
}
BTDEF void bt_mlir_set_gpu_chip(const char *chip) {
    if (!chip || strncmp(chip, "sm_", 3) || strlen(chip) >= sizeof bt__m.chip)
        bt_error("bt_mlir_set_gpu_chip: \"%s\" is not a chip name like \"sm_90\"", chip ? chip : "(null)");
    snprintf(bt__m.chip, sizeof bt__m.chip, "%s", chip);
}
BTDEF bt_mlir_stats_t bt_mlir_stats(void) { return bt__m.stats; }
BTDEF void bt_mlir_reset_stats(void) { memset(&bt__m.stats, 0, sizeof bt__m.stats); }

/* ============================================================================================
   2. the graph IR
   A chain is a DAG over a frame of R rows and C columns (C: the last dim). A node's class says
   which of the row index r and the column index j its value varies with. Nodes are hash-consed
   (an identical node is reused) and a node's operands always have smaller ids, so id order is a
   topological order.
   ============================================================================================ */
enum { BT__MC_SCALAR = 0, BT__MC_ROW = 1, BT__MC_COL = 2, BT__MC_FULL = 3 };
typedef enum {
    BT__MK_INPUT,      /* input number a, of dtype dt */
    BT__MK_CONST,      /* the value x */
    BT__MK_UNARY,      /* op(a) */
    BT__MK_AFFINE,     /* x * a + y */
    BT__MK_BINARY,     /* a op b (op: bt_binary_op) */
    BT__MK_RSUM,       /* sum of a over j */
    BT__MK_RMAX,       /* max of a over j; the kernel also keeps the first j that holds it */
    BT__MK_ARGMAX_IS,  /* 1 where j is the argmax of RMAX node a, else 0 */
    BT__MK_ROUND,      /* a rounded to dtype dt (a cast to a narrower float) */
    BT__MK_WIDEN,      /* a, cast up from dtype dt: its gradient is rounded to dt, as the cast's backward does */
    BT__MK_STOP        /* a, passing no gradient (the max a softmax subtracts) */
} bt__mkind;
typedef enum {
    BT__MU_NEG, BT__MU_EXP, BT__MU_LOG, BT__MU_SQRT, BT__MU_TANH, BT__MU_RELU, BT__MU_GELU, BT__MU_SQUARE,
    BT__MU_RECIP, BT__MU_SIGMOID, BT__MU_SILU, BT__MU_RSQRT,
    BT__MU_STEP,                      /* x > 0 ? 1 : 0: relu's derivative */
    BT__MU_GELU_GRAD,                 /* d gelu / dx */
    BT__MU_N
} bt__munary;
#define BT__MU_PUBLIC 12              /* the first ones are ops of bt_tensor.h, matched by name */
static const char *bt__mu_names[BT__MU_N] = {"neg", "exp", "log", "sqrt", "tanh", "relu", "gelu", "square", "recip",
                                             "sigmoid", "silu", "rsqrt", "step", "gelu_grad"};
typedef struct {
    uint8_t kind, op, cls, dt;
    int a, b;
    double x, y;
} bt__mnode;
typedef struct { bt__mnode *v; int n, cap; } bt__mgraph;

static void bt__mg_free(bt__mgraph *g) { free(g->v); g->v = NULL; g->n = g->cap = 0; }
static int bt__mg_cls(const bt__mgraph *g, int v) { return g->v[v].cls; }
/* the node's id: an identical existing node, or a new one (nd zeroed first, padding included) */
static int bt__mg_put(bt__mgraph *g, const bt__mnode *nd) {
    for (int i = 0; i < g->n; i++) if (!memcmp(&g->v[i], nd, sizeof *nd)) return i;
    if (g->n == g->cap) {
        g->cap = g->cap ? 2 * g->cap : 64;
        bt__mnode *v = (bt__mnode *)realloc(g->v, sizeof(bt__mnode) * (size_t)g->cap);
        if (!v) bt_error("bt_mlir: out of host memory growing a graph to %d nodes", g->cap);
        g->v = v;
    }
    g->v[g->n] = *nd;
    return g->n++;
}
static int bt__mg_node(bt__mgraph *g, int kind, int op, int a, int b, double x, double y, int dt) {
    bt__mnode nd; memset(&nd, 0, sizeof nd);
    nd.kind = (uint8_t)kind; nd.op = (uint8_t)op; nd.a = a; nd.b = b; nd.x = x; nd.y = y; nd.dt = (uint8_t)dt;
    switch (kind) {
    case BT__MK_CONST: nd.cls = BT__MC_SCALAR; break;
    case BT__MK_BINARY: nd.cls = (uint8_t)(g->v[a].cls | g->v[b].cls); break;
    case BT__MK_RSUM: case BT__MK_RMAX: nd.cls = (uint8_t)(g->v[a].cls & ~BT__MC_COL); break;
    case BT__MK_ARGMAX_IS: nd.cls = g->v[g->v[a].a].cls; break;
    default: nd.cls = g->v[a].cls; break;
    }
    return bt__mg_put(g, &nd);
}
static int bt__mg_input(bt__mgraph *g, int k, bt_dtype dt, int cls) {
    bt__mnode nd; memset(&nd, 0, sizeof nd);
    nd.kind = BT__MK_INPUT; nd.a = k; nd.dt = (uint8_t)dt; nd.cls = (uint8_t)cls;
    return bt__mg_put(g, &nd);
}
static int bt__mg_const(bt__mgraph *g, double x) { return bt__mg_node(g, BT__MK_CONST, 0, 0, 0, x, 0, 0); }
static int bt__mg_unary(bt__mgraph *g, int op, int a) { return bt__mg_node(g, BT__MK_UNARY, op, a, 0, 0, 0, 0); }
/* alpha a + beta; folds the identity and constants */
static int bt__mg_affine(bt__mgraph *g, int a, double alpha, double beta) {
    if (alpha == 1.0 && beta == 0.0) return a;
    if (g->v[a].kind == BT__MK_CONST) return bt__mg_const(g, alpha * g->v[a].x + beta);
    return bt__mg_node(g, BT__MK_AFFINE, 0, a, 0, alpha, beta, 0);
}
/* a op b; a multiplication or sum with a constant becomes an affine (the backward makes many) */
static int bt__mg_bin(bt__mgraph *g, int op, int a, int b) {
    const bt__mnode *A = &g->v[a], *B = &g->v[b];
    if (op == BT_BOP_MUL && B->kind == BT__MK_CONST) return bt__mg_affine(g, a, B->x, 0);
    if (op == BT_BOP_MUL && A->kind == BT__MK_CONST) return bt__mg_affine(g, b, A->x, 0);
    if (op == BT_BOP_ADD && B->kind == BT__MK_CONST) return bt__mg_affine(g, a, 1, B->x);
    if (op == BT_BOP_ADD && A->kind == BT__MK_CONST) return bt__mg_affine(g, b, 1, A->x);
    if (op == BT_BOP_SUB && B->kind == BT__MK_CONST) return bt__mg_affine(g, a, 1, -B->x);
    if (op == BT_BOP_SUB && A->kind == BT__MK_CONST) return bt__mg_affine(g, b, -1, A->x);
    return bt__mg_node(g, BT__MK_BINARY, op, a, b, 0, 0, 0);
}
static int bt__mg_red(bt__mgraph *g, int kind, int a) { return bt__mg_node(g, kind, 0, a, 0, 0, 0, 0); }

/* ============================================================================================
   3. capture: the autograd graph a traced body recorded -> IR
   The walk starts at the body's result and follows each node's edges to its producers and, at the
   ends, to the traced inputs (leaf edges in the function form; in the region form, a leaf or the
   node that made the input). Shapes come from the consumers' records (bt_node.in_shape), dtypes
   likewise. Each value's shape must be one of the frame's classes; broadcasting must be over whole
   rows or whole columns.
   ============================================================================================ */
typedef struct {
    bt__mgraph *g;
    int n_in;
    bt_tensor *leaf[BT__M_MAX_IN];       /* input k arrives as this leaf ... */
    bt_node *made_by[BT__M_MAX_IN];      /* ... or as the output of this node (region form) */
    bt_dtype in_dt[BT__M_MAX_IN];
    int in_cls[BT__M_MAX_IN];            /* -1: not a class of the frame */
    bt_node **seen; int *seen_id; int n_seen, cap_seen;
    bt_shape frame; int64_t R, C;
    int depth;
    char why[256];
} bt__mcap;

#if defined(__GNUC__)
__attribute__((format(printf, 2, 3)))
#endif
static int bt__mcap_fail(bt__mcap *c, const char *fmt, ...) {
    if (!c->why[0]) { va_list ap; va_start(ap, fmt); vsnprintf(c->why, sizeof c->why, fmt, ap); va_end(ap); }
    return -1;
}
static const char *bt__mshape_str(bt_shape s, char *buf, size_t n) {
    size_t k = (size_t)snprintf(buf, n, "[");
    for (int d = 0; d < s.ndim && k < n; d++) k += (size_t)snprintf(buf + k, n - k, d ? ", %lld" : "%lld", (long long)s.d[d]);
    if (k < n) snprintf(buf + k, n - k, "]");
    return buf;
}
static int64_t bt__mnumel(bt_shape s) { int64_t n = 1; for (int d = 0; d < s.ndim; d++) n *= s.d[d]; return n; }
static int64_t bt__mlast(bt_shape s) { return s.ndim ? s.d[s.ndim - 1] : 1; }

/* numpy broadcast of shapes; 0 when they do not broadcast */
static int bt__mbroadcast(const bt_shape *s, int n, bt_shape *out) {
    bt_shape f; memset(&f, 0, sizeof f);
    for (int k = 0; k < n; k++) if (s[k].ndim > f.ndim) f.ndim = s[k].ndim;
    for (int d = 0; d < f.ndim; d++) f.d[d] = 1;
    for (int k = 0; k < n; k++)
        for (int d = 0; d < s[k].ndim; d++) {
            int fd = d + f.ndim - s[k].ndim;
            if (s[k].d[d] == f.d[fd] || s[k].d[d] == 1) continue;
            if (f.d[fd] != 1) return 0;
            f.d[fd] = s[k].d[d];
        }
    *out = f;
    return 1;
}
/* the class of a value of shape s in the frame: full [rows.., C], a row value [rows.., 1] or
   [rows..], a column value [C], a scalar; -1 for anything else */
static int bt__mshape_class(const bt__mcap *c, bt_shape s) {
    int64_t n = bt__mnumel(s), last = bt__mlast(s);
    if (n == c->R * c->C && last == c->C) return BT__MC_FULL;
    if (n == c->C && last == c->C) return BT__MC_COL;
    if (n == c->R && last == 1) return BT__MC_ROW;
    if (n == c->R && s.ndim == c->frame.ndim - 1 && !memcmp(s.d, c->frame.d, sizeof(int64_t) * (size_t)s.ndim)) return BT__MC_ROW;
    if (n == 1) return BT__MC_SCALAR;
    return -1;
}
/* the class an operand of shape s takes in a binary op of output shape S (class cS) by numpy's
   right-aligned broadcasting; -1 when it is broadcast over some leading dims but not all */
static int bt__mbcast_class(bt_shape s, bt_shape S, int cS) {
    int cls = cS, varies = 0, bcast = 0;
    if (bt__mlast(s) == 1 && bt__mlast(S) != 1) cls &= ~BT__MC_COL;
    for (int d = 0; d < S.ndim - 1; d++) {
        int ds = d - (S.ndim - s.ndim);
        int64_t x = ds >= 0 ? s.d[ds] : 1;
        if (S.d[d] == 1) continue;
        if (x == 1) bcast = 1; else varies = 1;
    }
    if (varies && bcast) return -1;
    if (bcast) cls &= ~BT__MC_ROW;
    return cls;
}
/* 1 when bt_tensor.h records affine's beta (f[1]); found once by recording one affine */
static int bt__maffine_beta_known(void) {
    if (bt__m.affine_beta < 0) {
        int old = bt_set_grad_enabled(1);
        bt_scope_begin();
        bt_tensor *x = bt_zeros(bt_shape1(1), BT_F32, bt_cpu());
        bt_set_requires_grad(x, 1);
        bt_tensor *y = bt_affine(x, 2.0, 0.5);
        bt__m.affine_beta = y->grad_fn && y->grad_fn->f[1] == 0.5;
        bt_scope_end();
        bt_set_grad_enabled(old);
    }
    return bt__m.affine_beta;
}
static int bt__mdt_bits(int dt) { return dt == BT_F64 ? 64 : dt == BT_F32 ? 32 : 16; }

static int bt__mcap_value(bt__mcap *c, bt_node *node, bt_tensor *leaf, bt_shape shape, bt_dtype dt, const char *consumer, int slot);

/* input k's node, checked against the shape its consumer saw */
static int bt__mcap_input(bt__mcap *c, int k, bt_shape shape) {
    char b1[96], b2[96];
    if (c->in_cls[k] < 0)
        return bt__mcap_fail(c, "input %d %s is not [rows.., C], [rows.., 1], [C] or a scalar of the frame %s", k,
                             bt__mshape_str(shape, b1, sizeof b1), bt__mshape_str(c->frame, b2, sizeof b2));
    return bt__mg_input(c->g, k, c->in_dt[k], c->in_cls[k]);
}
/* operand i of node n (whose result has shape `shape`) */
static int bt__mcap_operand(bt__mcap *c, bt_node *n, int i) {
    return bt__mcap_value(c, n->next[i].node, n->next[i].leaf, n->in_shape[i], n->in_dtype[i], n->op, i);
}
/* a sum/mean over only the last dim (other reduced dims have size 1): 1 when it reduces a dim of
   size C, 0 when every reduced dim has size 1 (the identity), -1 otherwise */
static int bt__mcap_last_dim_reduce(bt__mcap *c, bt_shape in, const int64_t *mask) {
    int over_c = 0;
    for (int d = 0; d < in.ndim; d++) {
        if (!mask[d] || in.d[d] == 1) continue;
        if (d != in.ndim - 1 || in.d[d] != c->C) return -1;
        over_c = 1;
    }
    return over_c;
}
/* the IR of bt_node n, whose result has shape `shape` and dtype dt */
static int bt__mcap_node(bt__mcap *c, bt_node *n, bt_shape shape, bt_dtype dt) {
    bt__mgraph *g = c->g;
    const char *op = n->op;
    char b1[96], b2[96];
    int is_sum = !strcmp(op, "sum") || !strcmp(op, "mean"), is_max = !strcmp(op, "max");
    if (is_sum && bt__mcap_last_dim_reduce(c, n->in_shape[0], n->i) < 0)
        return bt__mcap_fail(c, "op '%s' over dims other than the last of %s", op, bt__mshape_str(n->in_shape[0], b1, sizeof b1));
    if (is_max && n->in_shape[0].d[n->i[0]] != 1 && (n->i[0] != n->in_shape[0].ndim - 1 || n->in_shape[0].d[n->i[0]] != c->C))
        return bt__mcap_fail(c, "op 'max' over dim %d of %s (only the last)", (int)n->i[0], bt__mshape_str(n->in_shape[0], b1, sizeof b1));
    int cls = bt__mshape_class(c, shape);
    if (cls < 0) {                    /* a deeper cause, if there is one, is the better message */
        if (n->n_in > 0 && n->next[0].node) bt__mcap_operand(c, n, 0);
        return bt__mcap_fail(c, "op '%s' makes a %s value, not [rows.., C], [rows.., 1], [C] or a scalar of the frame %s",
                             op, bt__mshape_str(shape, b1, sizeof b1), bt__mshape_str(c->frame, b2, sizeof b2));
    }
    for (int u = 0; u < BT__MU_PUBLIC; u++)
        if (!strcmp(op, bt__mu_names[u])) {
            int a = bt__mcap_operand(c, n, 0);
            return a < 0 ? -1 : bt__mg_unary(g, u, a);
        }
    if (!strcmp(op, "affine")) {
        if (!bt__maffine_beta_known())
            return bt__mcap_fail(c, "op 'affine': this bt_tensor.h does not record beta (f[1]) in the node");
        int a = bt__mcap_operand(c, n, 0);
        return a < 0 ? -1 : bt__mg_affine(g, a, n->f[0], n->f[1]);
    }
    for (int bop = 0; bop < BT_NBOPS; bop++) {
        static const char *names[BT_NBOPS] = {"add", "sub", "mul", "div"};
        if (strcmp(op, names[bop])) continue;
        int a = bt__mcap_operand(c, n, 0), b = a < 0 ? -1 : bt__mcap_operand(c, n, 1);
        if (a < 0 || b < 0) return -1;
        int ca = bt__mbcast_class(n->in_shape[0], shape, cls), cb = bt__mbcast_class(n->in_shape[1], shape, cls);
        if (ca < 0 || cb < 0 || (bt__mg_cls(g, a) & ~ca) || (bt__mg_cls(g, b) & ~cb))
            return bt__mcap_fail(c, "op '%s' broadcasts %s with %s over part of the rows (only whole rows or columns)", op,
                                 bt__mshape_str(n->in_shape[0], b1, sizeof b1), bt__mshape_str(n->in_shape[1], b2, sizeof b2));
        return bt__mg_bin(g, bop, a, b);
    }
    if (is_sum) {
        int kind = bt__mcap_last_dim_reduce(c, n->in_shape[0], n->i);
        int a = bt__mcap_operand(c, n, 0);
        if (a < 0) return -1;
        int r = kind ? bt__mg_red(g, BT__MK_RSUM, a) : a;
        return bt__mg_affine(g, r, n->f[0], 0.0);           /* f[0]: 1 for sum, 1 / C for mean */
    }
    if (is_max) {
        int a = bt__mcap_operand(c, n, 0);
        return a < 0 ? -1 : n->in_shape[0].d[n->i[0]] == 1 ? a : bt__mg_red(g, BT__MK_RMAX, a);
    }
    if (!strcmp(op, "softmax") || !strcmp(op, "log_softmax")) {
        if (bt__mlast(n->in_shape[0]) != c->C || c->C == 1)
            return bt__mcap_fail(c, "op '%s' over a last dim of %lld, not the frame's C = %lld", op, (long long)bt__mlast(n->in_shape[0]), (long long)c->C);
        int x = bt__mcap_operand(c, n, 0);
        if (x < 0) return -1;
        /* y = exp(x - m) / sum exp(x - m), m = max x (no gradient: the result does not depend on it) */
        int z = bt__mg_bin(g, BT_BOP_SUB, x, bt__mg_node(g, BT__MK_STOP, 0, bt__mg_red(g, BT__MK_RMAX, x), 0, 0, 0, 0));
        int e = bt__mg_unary(g, BT__MU_EXP, z), s = bt__mg_red(g, BT__MK_RSUM, e);
        return n->i[0] ? bt__mg_bin(g, BT_BOP_SUB, z, bt__mg_unary(g, BT__MU_LOG, s)) : bt__mg_bin(g, BT_BOP_DIV, e, s);
    }
    if (!strcmp(op, "cast")) {
        int a = bt__mcap_operand(c, n, 0);
        if (a < 0) return -1;
        int from = bt__mdt_bits(n->in_dtype[0]), to = bt__mdt_bits(dt);
        return to < from ? bt__mg_node(g, BT__MK_ROUND, 0, a, 0, 0, 0, dt)
             : to > from ? bt__mg_node(g, BT__MK_WIDEN, 0, a, 0, 0, 0, n->in_dtype[0]) : a;
    }
    static const char *views[] = {"view", "reshape", "squeeze", "unsqueeze", "contiguous", "clone", "expand"};
    for (size_t v = 0; v < sizeof views / sizeof *views; v++) {
        if (strcmp(op, views[v])) continue;
        int a = bt__mcap_operand(c, n, 0);
        if (a < 0) return -1;
        int ca = bt__mshape_class(c, n->in_shape[0]);
        if (ca != cls && !(!strcmp(op, "expand") && ca >= 0 && !(ca & ~cls)))
            return bt__mcap_fail(c, "op '%s' from %s to %s changes the [rows, C] layout", op,
                                 bt__mshape_str(n->in_shape[0], b1, sizeof b1), bt__mshape_str(shape, b2, sizeof b2));
        return a;
    }
    return bt__mcap_fail(c, "op '%s' is not supported (elementwise, affine, last-dim sum/mean/max, softmax, casts and views are)", op);
}
/* the IR of a value: a traced input, or the result of node `node` */
static int bt__mcap_value(bt__mcap *c, bt_node *node, bt_tensor *leaf, bt_shape shape, bt_dtype dt, const char *consumer, int slot) {
    for (int k = 0; k < c->n_in; k++)
        if ((leaf && leaf == c->leaf[k]) || (node && node == c->made_by[k])) return bt__mcap_input(c, k, shape);
    if (!node)
        return bt__mcap_fail(c, "operand %d of op '%s' is a tensor that is not one of the inputs (a constant made inside the body?); pass it as an input",
                             slot, consumer);
    for (int i = 0; i < c->n_seen; i++) if (c->seen[i] == node) return c->seen_id[i];
    if (++c->depth > 4096) return bt__mcap_fail(c, "the chain is deeper than 4096 ops");
    if (!bt_dtype_is_float(dt)) return bt__mcap_fail(c, "op '%s' makes a %s value (float dtypes only)", node->op, bt_dtype_name(dt));
    int id = bt__mcap_node(c, node, shape, dt);
    c->depth--;
    if (id < 0) return -1;
    int cls = bt__mshape_class(c, shape);
    if (bt__mg_cls(c->g, id) & ~cls) return bt__mcap_fail(c, "op '%s': its value varies over more than its shape allows", node->op);
    if (c->n_seen == c->cap_seen) {
        c->cap_seen = c->cap_seen ? 2 * c->cap_seen : 32;
        c->seen = (bt_node **)realloc(c->seen, sizeof(bt_node *) * (size_t)c->cap_seen);
        c->seen_id = (int *)realloc(c->seen_id, sizeof(int) * (size_t)c->cap_seen);
        if (!c->seen || !c->seen_id) bt_error("bt_mlir: out of host memory tracing a chain");
    }
    c->seen[c->n_seen] = node; c->seen_id[c->n_seen++] = id;
    return id;
}
/* the frame: the broadcast of the input shapes and the output's, each taken when it broadcasts with
   the ones before (a reduction's output without keepdim does not); and each input's class */
static int bt__mcap_frame(bt__mcap *c, const bt_shape *in_shape, bt_shape out_shape) {
    bt_shape all[BT__M_MAX_IN + 1];
    char b[96];
    c->frame = in_shape[0];
    for (int k = 1; k <= c->n_in; k++) {          /* an input that does not fit fails where the walk meets it */
        all[0] = c->frame; all[1] = k < c->n_in ? in_shape[k] : out_shape;
        bt__mbroadcast(all, 2, &c->frame);
    }
    c->C = bt__mlast(c->frame);
    c->R = c->C ? bt__mnumel(c->frame) / c->C : 0;
    if (c->C == 0 || c->R == 0) return bt__mcap_fail(c, "the frame %s is empty", bt__mshape_str(c->frame, b, sizeof b));
    for (int k = 0; k < c->n_in; k++) c->in_cls[k] = bt__mshape_class(c, in_shape[k]);
    return 0;
}
/* the chain that made out, as IR (its id), or -1 with c->why */
static int bt__mcapture(bt__mcap *c, bt_tensor *out) {
    if (!out || !out->grad_fn)
        return bt__mcap_fail(c, "the body's result was not made by ops from its inputs (it is an input, a constant, or NULL)");
    return bt__mcap_value(c, out->grad_fn, NULL, bt_shape_of(out), out->dtype, "the result", 0);
}
static void bt__mcap_free(bt__mcap *c) { free(c->seen); free(c->seen_id); c->seen = NULL; c->seen_id = NULL; }

/* ============================================================================================
   4. reverse mode: the gradient of the chain's output with respect to every input, as IR in the
   same graph (so the backward kernel recomputes forward values rather than loading them)
   adj[v] is the gradient reaching node v, with one rule on its class: where v does not vary with
   j the contributions are summed over j here (a row reduction the kernel does); where v does not
   vary with r (a column value, a scalar) they are left per row, and the kernel sums them over the
   rows into partial buffers. That is exact because a derivative of a value that does not vary
   with r does not vary with r either.
   ============================================================================================ */
static void bt__mrev_add(bt__mgraph *g, int *adj, int u, int contrib) {
    if ((bt__mg_cls(g, contrib) & BT__MC_COL) && !(bt__mg_cls(g, u) & BT__MC_COL)) contrib = bt__mg_red(g, BT__MK_RSUM, contrib);
    adj[u] = adj[u] < 0 ? contrib : bt__mg_bin(g, BT_BOP_ADD, adj[u], contrib);
}
/* d op(x) / dx times the incoming gradient a, where v = op(x) */
static int bt__mrev_unary(bt__mgraph *g, int op, int x, int v, int a) {
    int one_minus;
    switch (op) {
    case BT__MU_NEG: return bt__mg_unary(g, BT__MU_NEG, a);
    case BT__MU_EXP: return bt__mg_bin(g, BT_BOP_MUL, a, v);
    case BT__MU_LOG: return bt__mg_bin(g, BT_BOP_DIV, a, x);
    case BT__MU_SQRT: return bt__mg_bin(g, BT_BOP_MUL, a, bt__mg_affine(g, bt__mg_unary(g, BT__MU_RECIP, v), 0.5, 0));
    case BT__MU_TANH: return bt__mg_bin(g, BT_BOP_MUL, a, bt__mg_affine(g, bt__mg_unary(g, BT__MU_SQUARE, v), -1, 1));
    case BT__MU_RELU: return bt__mg_bin(g, BT_BOP_MUL, a, bt__mg_unary(g, BT__MU_STEP, x));
    case BT__MU_GELU: return bt__mg_bin(g, BT_BOP_MUL, a, bt__mg_unary(g, BT__MU_GELU_GRAD, x));
    case BT__MU_SQUARE: return bt__mg_bin(g, BT_BOP_MUL, a, bt__mg_affine(g, x, 2, 0));
    case BT__MU_RECIP: return bt__mg_bin(g, BT_BOP_MUL, a, bt__mg_unary(g, BT__MU_NEG, bt__mg_unary(g, BT__MU_SQUARE, v)));
    case BT__MU_SIGMOID: one_minus = bt__mg_affine(g, v, -1, 1);
        return bt__mg_bin(g, BT_BOP_MUL, a, bt__mg_bin(g, BT_BOP_MUL, v, one_minus));
    case BT__MU_SILU: {      /* s (1 + x (1 - s)), s = sigmoid x */
        int s = bt__mg_unary(g, BT__MU_SIGMOID, x);
        int t = bt__mg_affine(g, bt__mg_bin(g, BT_BOP_MUL, x, bt__mg_affine(g, s, -1, 1)), 1, 1);
        return bt__mg_bin(g, BT_BOP_MUL, a, bt__mg_bin(g, BT_BOP_MUL, s, t));
    }
    case BT__MU_RSQRT:       /* -v^3 / 2 */
        return bt__mg_bin(g, BT_BOP_MUL, a, bt__mg_affine(g, bt__mg_bin(g, BT_BOP_MUL, v, bt__mg_unary(g, BT__MU_SQUARE, v)), -0.5, 0));
    default: bt_error("bt_mlir: internal: no derivative for %s", bt__mu_names[op]); return -1;
    }
}
/* grad[k]: the gradient node of input k (-1: none flows); seed: the output gradient's node */
static void bt__mreverse(bt__mgraph *g, int n_fwd, int out, int seed, int64_t C, int n_in, int *grad) {
    int *adj = (int *)bt__mmalloc(sizeof(int) * (size_t)n_fwd);
    for (int v = 0; v < n_fwd; v++) adj[v] = -1;
    for (int k = 0; k < n_in; k++) grad[k] = -1;
    adj[out] = seed;
    for (int v = n_fwd - 1; v >= 0; v--) {
        if (adj[v] < 0) continue;
        bt__mnode nd = g->v[v];       /* a copy: the graph grows below */
        int a = adj[v];
        switch (nd.kind) {
        case BT__MK_INPUT: grad[nd.a] = a; break;
        case BT__MK_UNARY: bt__mrev_add(g, adj, nd.a, bt__mrev_unary(g, nd.op, nd.a, v, a)); break;
        case BT__MK_AFFINE: bt__mrev_add(g, adj, nd.a, bt__mg_affine(g, a, nd.x, 0)); break;
        case BT__MK_ROUND: bt__mrev_add(g, adj, nd.a, a); break;
        case BT__MK_WIDEN: bt__mrev_add(g, adj, nd.a, bt__mg_node(g, BT__MK_ROUND, 0, a, 0, 0, 0, nd.dt)); break;
        case BT__MK_BINARY:
            switch (nd.op) {
            case BT_BOP_ADD: bt__mrev_add(g, adj, nd.a, a); bt__mrev_add(g, adj, nd.b, a); break;
            case BT_BOP_SUB: bt__mrev_add(g, adj, nd.a, a); bt__mrev_add(g, adj, nd.b, bt__mg_unary(g, BT__MU_NEG, a)); break;
            case BT_BOP_MUL:
                bt__mrev_add(g, adj, nd.a, bt__mg_bin(g, BT_BOP_MUL, a, nd.b));
                bt__mrev_add(g, adj, nd.b, bt__mg_bin(g, BT_BOP_MUL, a, nd.a));
                break;
            default:                  /* d(a/b) = da / b - a db / b^2 */
                bt__mrev_add(g, adj, nd.a, bt__mg_bin(g, BT_BOP_DIV, a, nd.b));
                bt__mrev_add(g, adj, nd.b, bt__mg_unary(g, BT__MU_NEG, bt__mg_bin(g, BT_BOP_DIV, bt__mg_bin(g, BT_BOP_MUL, a, nd.a),
                                                                                  bt__mg_bin(g, BT_BOP_MUL, nd.b, nd.b))));
                break;
            }
            break;
        case BT__MK_RSUM:             /* an operand constant in j was summed C times */
            bt__mrev_add(g, adj, nd.a, (bt__mg_cls(g, nd.a) & BT__MC_COL) ? a : bt__mg_affine(g, a, (double)C, 0));
            break;
        case BT__MK_RMAX:             /* to the first argmax */
            bt__mrev_add(g, adj, nd.a, (bt__mg_cls(g, nd.a) & BT__MC_COL)
                                       ? bt__mg_bin(g, BT_BOP_MUL, a, bt__mg_node(g, BT__MK_ARGMAX_IS, 0, v, 0, 0, 0, 0)) : a);
            break;
        default: break;               /* CONST, STOP: nothing flows */
        }
    }
    free(adj);
}

/* ============================================================================================
   5. emission: IR -> MLIR text
   A kernel (a "program") reads inputs and writes outputs, each a 1-D memref of its dtype. Its body
   loops over rows r; for each row it runs phase 0, 1, .. (each one loop over j that accumulates the
   reductions whose operands are known by then) and a last loop that stores the outputs. A value
   that varies with j is computed inside the loop that needs it; one that does not (a row value,
   a reduction's result) at row scope, once. The row-scope text goes to the main buffer, which is
   always before the loop being written, so every value is defined before its use.
   ============================================================================================ */
typedef enum {
    BT__MS_FULL,       /* out[r C + j] */
    BT__MS_ROW,        /* out[r] */
    BT__MS_COL,        /* out[j] (every row writes the same value) */
    BT__MS_SCALAR,     /* out[0] (likewise) */
    BT__MS_COLSUM,     /* out[p C + j] += value: partial column sums of row block p */
    BT__MS_SCALARSUM   /* out[p] += value */
} bt__mstore;
typedef struct {
    int n_in; bt_dtype in_dt[BT__M_MAX_IN + 1];
    int n_out; int out_node[BT__M_MAX_IN]; int out_store[BT__M_MAX_IN]; bt_dtype out_dt[BT__M_MAX_IN];
    int64_t C;
    int f64;                        /* compute type f64 (else f32) */
} bt__mprog;
static int bt__mstore_in_loop(int st) { return st == BT__MS_FULL || st == BT__MS_COL || st == BT__MS_COLSUM; }
static const char *bt__mty(bt_dtype dt) { return dt == BT_F64 ? "f64" : dt == BT_BF16 ? "bf16" : dt == BT_F16 ? "f16" : "f32"; }

typedef char bt__mname[32];
typedef struct {
    const bt__mgraph *g; const bt__mprog *pr;
    int gpu;
    const char *T;                  /* the compute type */
    bt__sb *row;                    /* the main text: row scope */
    bt__sb body;                    /* the body of the loop being written */
    bt__mname *nrow, *nloop, *nidx; /* each node's SSA name at row scope / in the loop; RMAX: its argmax */
    int *avail;                     /* the phase from which a node's value is known */
    int *need;
    int phase, in_loop, loop, ssa;
    char j[16], i[16];              /* the loop's column index and r C + j */
    const char *ind_row, *ind_loop;
    char shf_ty[96], shi_ty[96];    /* GPU: the shared-memory slot arrays' types */
} bt__memit;

static const char *bt__me_get(bt__memit *E, int v);
static char *bt__me_fresh(bt__memit *E, char *name) { snprintf(name, sizeof(bt__mname), "%%v%d", E->ssa++); return name; }
static void bt__me_cst(bt__memit *E, bt__sb *s, const char *ind, double x, char *name) {
    bt__me_fresh(E, name);
    if (E->pr->f64) { uint64_t u; memcpy(&u, &x, 8); bt__sb_printf(s, "%s%s = arith.constant 0x%016llX : f64\n", ind, name, (unsigned long long)u); }
    else { float f = (float)x; uint32_t u; memcpy(&u, &f, 4); bt__sb_printf(s, "%s%s = arith.constant 0x%08X : f32\n", ind, name, (unsigned)u); }
}
/* name = op a, b (a binary arith op of the compute type) */
static void bt__me_bin(bt__memit *E, bt__sb *s, const char *ind, const char *op, const char *a, const char *b, char *name) {
    bt__me_fresh(E, name);
    bt__sb_printf(s, "%s%s = %s %s, %s : %s\n", ind, name, op, a, b, E->T);
}
static void bt__me_un(bt__memit *E, bt__sb *s, const char *ind, const char *op, const char *a, char *name) {
    bt__me_fresh(E, name);
    bt__sb_printf(s, "%s%s = %s %s : %s\n", ind, name, op, a, E->T);
}
/* name = cond ? a : b, with cond = x > 0 */
static void bt__me_select_pos(bt__memit *E, bt__sb *s, const char *ind, const char *x, const char *a, const char *b, char *name) {
    bt__mname zero, c;
    bt__me_cst(E, s, ind, 0.0, zero);
    bt__me_fresh(E, c);
    bt__sb_printf(s, "%s%s = arith.cmpf ogt, %s, %s : %s\n", ind, c, x, zero, E->T);
    bt__me_fresh(E, name);
    bt__sb_printf(s, "%s%s = arith.select %s, %s, %s : %s\n", ind, name, c, a, b[0] ? b : zero, E->T);
}
/* tanh(k (x + 0.044715 x^3)), k = sqrt(2 / pi): the inner part of GPT-2's gelu */
static void bt__me_gelu_tanh(bt__memit *E, bt__sb *s, const char *ind, const char *x, char *th) {
    bt__mname x2, x3, c, u, w, k, z;
    bt__me_bin(E, s, ind, "arith.mulf", x, x, x2);
    bt__me_bin(E, s, ind, "arith.mulf", x2, x, x3);
    bt__me_cst(E, s, ind, 0.044715, c);
    bt__me_bin(E, s, ind, "arith.mulf", c, x3, u);
    bt__me_bin(E, s, ind, "arith.addf", x, u, w);
    bt__me_cst(E, s, ind, 0.7978845608028654, k);
    bt__me_bin(E, s, ind, "arith.mulf", k, w, z);
    bt__me_un(E, s, ind, "math.tanh", z, th);
}
static void bt__me_sigmoid(bt__memit *E, bt__sb *s, const char *ind, const char *x, char *name) {
    bt__mname nx, e, one, d;
    bt__me_un(E, s, ind, "arith.negf", x, nx);
    bt__me_un(E, s, ind, "math.exp", nx, e);
    bt__me_cst(E, s, ind, 1.0, one);
    bt__me_bin(E, s, ind, "arith.addf", one, e, d);
    bt__me_bin(E, s, ind, "arith.divf", one, d, name);
}
static void bt__me_unary(bt__memit *E, bt__sb *s, const char *ind, int op, const char *x, char *name) {
    bt__mname t1, t2, t3, t4, one, half;
    switch (op) {
    case BT__MU_NEG: bt__me_un(E, s, ind, "arith.negf", x, name); break;
    case BT__MU_EXP: bt__me_un(E, s, ind, "math.exp", x, name); break;
    case BT__MU_LOG: bt__me_un(E, s, ind, "math.log", x, name); break;
    case BT__MU_SQRT: bt__me_un(E, s, ind, "math.sqrt", x, name); break;
    case BT__MU_TANH: bt__me_un(E, s, ind, "math.tanh", x, name); break;
    case BT__MU_RELU: bt__me_select_pos(E, s, ind, x, x, "", name); break;
    case BT__MU_STEP: bt__me_cst(E, s, ind, 1.0, one); bt__me_select_pos(E, s, ind, x, one, "", name); break;
    case BT__MU_SQUARE: bt__me_bin(E, s, ind, "arith.mulf", x, x, name); break;
    case BT__MU_RECIP: bt__me_cst(E, s, ind, 1.0, one); bt__me_bin(E, s, ind, "arith.divf", one, x, name); break;
    case BT__MU_RSQRT:       /* 1 / sqrt: math.rsqrt has no CPU lowering in MLIR 19 */
        bt__me_un(E, s, ind, "math.sqrt", x, t1); bt__me_cst(E, s, ind, 1.0, one);
        bt__me_bin(E, s, ind, "arith.divf", one, t1, name); break;
    case BT__MU_SIGMOID: bt__me_sigmoid(E, s, ind, x, name); break;
    case BT__MU_SILU: bt__me_sigmoid(E, s, ind, x, t1); bt__me_bin(E, s, ind, "arith.mulf", x, t1, name); break;
    case BT__MU_GELU:        /* 0.5 x (1 + th) */
        bt__me_gelu_tanh(E, s, ind, x, t1);
        bt__me_cst(E, s, ind, 1.0, one); bt__me_bin(E, s, ind, "arith.addf", one, t1, t2);
        bt__me_cst(E, s, ind, 0.5, half); bt__me_bin(E, s, ind, "arith.mulf", half, x, t3);
        bt__me_bin(E, s, ind, "arith.mulf", t3, t2, name); break;
    case BT__MU_GELU_GRAD: { /* 0.5 (1 + th) + 0.5 x (1 - th^2) k (1 + 3 * 0.044715 x^2) */
        bt__mname sech, kx, in1, in2, p1, p2, x2, c3, k;
        bt__me_gelu_tanh(E, s, ind, x, t1);
        bt__me_cst(E, s, ind, 1.0, one); bt__me_cst(E, s, ind, 0.5, half);
        bt__me_bin(E, s, ind, "arith.addf", one, t1, t2);
        bt__me_bin(E, s, ind, "arith.mulf", half, t2, p1);
        bt__me_bin(E, s, ind, "arith.mulf", t1, t1, t3);
        bt__me_bin(E, s, ind, "arith.subf", one, t3, sech);
        bt__me_bin(E, s, ind, "arith.mulf", x, x, x2);
        bt__me_cst(E, s, ind, 3 * 0.044715, c3);
        bt__me_bin(E, s, ind, "arith.mulf", c3, x2, in1);
        bt__me_bin(E, s, ind, "arith.addf", one, in1, in2);
        bt__me_cst(E, s, ind, 0.5 * 0.7978845608028654, k);
        bt__me_bin(E, s, ind, "arith.mulf", k, x, kx);
        bt__me_bin(E, s, ind, "arith.mulf", kx, sech, t4);
        bt__me_bin(E, s, ind, "arith.mulf", t4, in2, p2);
        bt__me_bin(E, s, ind, "arith.addf", p1, p2, name); break;
    }
    default: bt_error("bt_mlir: internal: unary op %d", op);
    }
}
/* f32 t -> bf16 (name) rounded to nearest even with integer ops, NaN kept a quiet NaN: on a CPU
   without AVX512-BF16, LLVM lowers arith.truncf to bf16 as a call of __truncsfbf2, which the JIT
   cannot resolve where the C runtime lacks it (GCC 12's libgcc, Debian 12) */
static void bt__me_trunc_bf16(bt__memit *E, bt__sb *s, const char *ind, const char *t, char *name) {
    bt__mname c16, c1, cb, cq, b, hi, lsb, bias, r, h, un, q, sel, i16;
    bt__sb_printf(s, "%s%s = arith.constant 16 : i32\n", ind, bt__me_fresh(E, c16));
    bt__sb_printf(s, "%s%s = arith.constant 1 : i32\n", ind, bt__me_fresh(E, c1));
    bt__sb_printf(s, "%s%s = arith.constant 32767 : i32\n", ind, bt__me_fresh(E, cb));
    bt__sb_printf(s, "%s%s = arith.constant 64 : i32\n", ind, bt__me_fresh(E, cq));
    bt__sb_printf(s, "%s%s = arith.bitcast %s : f32 to i32\n", ind, bt__me_fresh(E, b), t);
    bt__sb_printf(s, "%s%s = arith.shrui %s, %s : i32\n", ind, bt__me_fresh(E, hi), b, c16);
    bt__sb_printf(s, "%s%s = arith.andi %s, %s : i32\n", ind, bt__me_fresh(E, lsb), hi, c1);
    bt__sb_printf(s, "%s%s = arith.addi %s, %s : i32\n", ind, bt__me_fresh(E, bias), lsb, cb);   /* 0x7FFF + the kept lsb */
    bt__sb_printf(s, "%s%s = arith.addi %s, %s : i32\n", ind, bt__me_fresh(E, r), b, bias);
    bt__sb_printf(s, "%s%s = arith.shrui %s, %s : i32\n", ind, bt__me_fresh(E, h), r, c16);
    bt__sb_printf(s, "%s%s = arith.cmpf uno, %s, %s : f32\n", ind, bt__me_fresh(E, un), t, t);
    bt__sb_printf(s, "%s%s = arith.ori %s, %s : i32\n", ind, bt__me_fresh(E, q), hi, cq);
    bt__sb_printf(s, "%s%s = arith.select %s, %s, %s : i32\n", ind, bt__me_fresh(E, sel), un, q, h);
    bt__sb_printf(s, "%s%s = arith.trunci %s : i32 to i16\n", ind, bt__me_fresh(E, i16), sel);
    bt__sb_printf(s, "%s%s = arith.bitcast %s : i16 to bf16\n", ind, bt__me_fresh(E, name), i16);
}
/* v's value converted from the compute type to dtype dt (rounded when narrower) */
static void bt__me_to_dtype(bt__memit *E, bt__sb *s, const char *ind, const char *v, bt_dtype dt, char *name) {
    const char *ty = bt__mty(dt);
    if (!strcmp(ty, E->T)) { snprintf(name, sizeof(bt__mname), "%s", v); return; }
    bt__mname t;
    snprintf(t, sizeof t, "%s", v);
    if (E->pr->f64 && dt != BT_F32) {         /* f64 -> f32 -> 16 bits, as bt__st rounds */
        bt__me_fresh(E, t);
        bt__sb_printf(s, "%s%s = arith.truncf %s : f64 to f32\n", ind, t, v);
    }
    const char *from = E->pr->f64 && dt != BT_F32 ? "f32" : E->T;
    if (!E->gpu && dt == BT_BF16 && !strcmp(from, "f32")) { bt__me_trunc_bf16(E, s, ind, t, name); return; }
    bt__me_fresh(E, name);
    bt__sb_printf(s, "%s%s = arith.truncf %s : %s to %s\n", ind, name, t, from, ty);
}
static void bt__me_from_dtype(bt__memit *E, bt__sb *s, const char *ind, const char *v, bt_dtype dt, char *name) {
    if (!strcmp(bt__mty(dt), E->T)) { snprintf(name, sizeof(bt__mname), "%s", v); return; }
    bt__me_fresh(E, name);
    bt__sb_printf(s, "%s%s = arith.extf %s : %s to %s\n", ind, name, v, bt__mty(dt), E->T);
}
/* the text of node v into s; its SSA name into name */
static void bt__me_node(bt__memit *E, int v, bt__sb *s, const char *ind, char *name) {
    const bt__mnode *n = &E->g->v[v];
    bt__mname a, b, t;
    switch (n->kind) {
    case BT__MK_INPUT: {
        bt_dtype dt = E->pr->in_dt[n->a];
        const char *ix = n->cls == BT__MC_FULL ? E->i : n->cls == BT__MC_COL ? E->j : n->cls == BT__MC_ROW ? "%r" : "%c0";
        bt__me_fresh(E, t);
        bt__sb_printf(s, "%s%s = memref.load %%in%d[%s] : memref<?x%s>\n", ind, t, n->a, ix, bt__mty(dt));
        bt__me_from_dtype(E, s, ind, t, dt, name);
        break;
    }
    case BT__MK_CONST: bt__me_cst(E, s, ind, n->x, name); break;
    case BT__MK_UNARY: snprintf(a, sizeof a, "%s", bt__me_get(E, n->a)); bt__me_unary(E, s, ind, n->op, a, name); break;
    case BT__MK_AFFINE:
        snprintf(t, sizeof t, "%s", bt__me_get(E, n->a));
        if (n->x != 1.0) { bt__me_cst(E, s, ind, n->x, a); bt__me_bin(E, s, ind, "arith.mulf", a, t, b); snprintf(t, sizeof t, "%s", b); }
        if (n->y != 0.0) { bt__me_cst(E, s, ind, n->y, a); bt__me_bin(E, s, ind, "arith.addf", t, a, b); snprintf(t, sizeof t, "%s", b); }
        snprintf(name, sizeof(bt__mname), "%s", t);
        break;
    case BT__MK_BINARY: {
        static const char *ops[BT_NBOPS] = {"arith.addf", "arith.subf", "arith.mulf", "arith.divf"};
        snprintf(a, sizeof a, "%s", bt__me_get(E, n->a));
        snprintf(b, sizeof b, "%s", bt__me_get(E, n->b));
        bt__me_bin(E, s, ind, ops[n->op], a, b, name);
        break;
    }
    case BT__MK_ROUND:
        snprintf(a, sizeof a, "%s", bt__me_get(E, n->a));
        if (bt__mdt_bits(n->dt) >= (E->pr->f64 ? 64 : 32)) { snprintf(name, sizeof(bt__mname), "%s", a); break; }
        bt__me_to_dtype(E, s, ind, a, (bt_dtype)n->dt, t);
        if (E->pr->f64 && n->dt == BT_F32) { bt__me_fresh(E, name); bt__sb_printf(s, "%s%s = arith.extf %s : f32 to f64\n", ind, name, t); }
        else bt__me_from_dtype(E, s, ind, t, (bt_dtype)n->dt, name);
        break;
    case BT__MK_STOP: case BT__MK_WIDEN: snprintf(name, sizeof(bt__mname), "%s", bt__me_get(E, n->a)); break;
    case BT__MK_ARGMAX_IS: {
        bt__mname one, zero, c;
        if (!E->nidx[n->a][0]) bt_error("bt_mlir: internal: argmax of node %d used before its phase", n->a);
        bt__me_cst(E, s, ind, 1.0, one); bt__me_cst(E, s, ind, 0.0, zero);
        bt__me_fresh(E, c);
        bt__sb_printf(s, "%s%s = arith.cmpi eq, %s, %s : index\n", ind, c, E->j, E->nidx[n->a]);
        bt__me_fresh(E, name);
        bt__sb_printf(s, "%s%s = arith.select %s, %s, %s : %s\n", ind, name, c, one, zero, E->T);
        break;
    }
    default: bt_error("bt_mlir: internal: reduction node %d used before its phase", v);
    }
}
static const char *bt__me_get(bt__memit *E, int v) {
    int loop = (E->g->v[v].cls & BT__MC_COL) != 0;
    if (loop && !E->in_loop) bt_error("bt_mlir: internal: node %d (varies with j) needed outside a loop", v);
    char *slot = loop ? E->nloop[v] : E->nrow[v];
    if (slot[0]) return slot;
    if (E->avail[v] > E->phase) bt_error("bt_mlir: internal: node %d used before its phase", v);
    bt__mname name;
    bt__me_node(E, v, loop ? &E->body : E->row, loop ? E->ind_loop : E->ind_row, name);
    memcpy(slot, name, sizeof name);
    return slot;
}

/* the phase plan: avail[v] (the phase from which v is known: a reduction's operand must be known
   in the phase that accumulates it) and need[v] (v feeds an output) */
static int bt__me_plan(bt__memit *E) {
    const bt__mgraph *g = E->g;
    for (int v = 0; v < g->n; v++) {
        const bt__mnode *n = &g->v[v];
        switch (n->kind) {
        case BT__MK_INPUT: case BT__MK_CONST: E->avail[v] = 0; break;
        case BT__MK_RSUM: case BT__MK_RMAX: E->avail[v] = E->avail[n->a] + 1; break;
        case BT__MK_BINARY: E->avail[v] = E->avail[n->a] > E->avail[n->b] ? E->avail[n->a] : E->avail[n->b]; break;
        default: E->avail[v] = E->avail[n->a]; break;
        }
    }
    int last = 0;
    for (int m = 0; m < E->pr->n_out; m++) {
        E->need[E->pr->out_node[m]] = 1;
        if (E->avail[E->pr->out_node[m]] > last) last = E->avail[E->pr->out_node[m]];
    }
    for (int v = g->n - 1; v >= 0; v--) {
        if (!E->need[v]) continue;
        const bt__mnode *n = &g->v[v];
        if (n->kind != BT__MK_INPUT && n->kind != BT__MK_CONST) E->need[n->a] = 1;
        if (n->kind == BT__MK_BINARY) E->need[n->b] = 1;
    }
    return last;
}
/* the reductions that phase p accumulates */
static int bt__me_phase_reds(const bt__memit *E, int p, int *reds) {
    int k = 0;
    for (int v = 0; v < E->g->n; v++)
        if (E->need[v] && (E->g->v[v].kind == BT__MK_RSUM || E->g->v[v].kind == BT__MK_RMAX) && E->avail[v] == p + 1) reds[k++] = v;
    return k;
}
static void bt__me_open_loop(bt__memit *E) {
    E->in_loop = 1; E->loop++;
    for (int v = 0; v < E->g->n; v++) E->nloop[v][0] = 0;
    E->body.n = 0; if (E->body.p) E->body.p[0] = 0;
    snprintf(E->j, sizeof E->j, "%%j%d", E->loop);
    snprintf(E->i, sizeof E->i, "%%i%d", E->loop);
    bt__sb_printf(&E->body, "%s%s = arith.addi %%rC, %s : index\n", E->ind_loop, E->i, E->j);
}
static const char *bt__me_loop_bounds(const bt__memit *E) { return E->gpu ? "%tid to %cC step %nt" : "%c0 to %cC step %c1"; }

/* GPU: x (and for a max, its index ix) combined over the 32 lanes of the warp by butterfly
   shuffles; every lane ends with the warp's sum, or its max with the smallest index holding it */
static void bt__me_warp_reduce(bt__memit *E, int is_max, char *x, char *ix) {
    static const int offs[5] = {16, 8, 4, 2, 1};
    bt__sb *s = E->row; const char *ind = E->ind_row;
    for (int k = 0; k < 5; k++) {
        bt__mname o, ok, n;
        bt__me_fresh(E, o); bt__me_fresh(E, ok);
        bt__sb_printf(s, "%s%s, %s = gpu.shuffle xor %s, %%o%d, %%c32i : %s\n", ind, o, ok, x, offs[k], E->T);
        if (!is_max) { bt__me_bin(E, s, ind, "arith.addf", x, o, n); memcpy(x, n, sizeof n); continue; }
        bt__mname oi, oki, gt, eq, lt, tie, take, nv, ni;
        bt__me_fresh(E, oi); bt__me_fresh(E, oki);
        bt__sb_printf(s, "%s%s, %s = gpu.shuffle xor %s, %%o%d, %%c32i : i32\n", ind, oi, oki, ix, offs[k]);
        bt__me_fresh(E, gt); bt__sb_printf(s, "%s%s = arith.cmpf ogt, %s, %s : %s\n", ind, gt, o, x, E->T);
        bt__me_fresh(E, eq); bt__sb_printf(s, "%s%s = arith.cmpf oeq, %s, %s : %s\n", ind, eq, o, x, E->T);
        bt__me_fresh(E, lt); bt__sb_printf(s, "%s%s = arith.cmpi slt, %s, %s : i32\n", ind, lt, oi, ix);
        bt__me_fresh(E, tie); bt__sb_printf(s, "%s%s = arith.andi %s, %s : i1\n", ind, tie, eq, lt);
        bt__me_fresh(E, take); bt__sb_printf(s, "%s%s = arith.ori %s, %s : i1\n", ind, take, gt, tie);
        bt__me_fresh(E, nv); bt__sb_printf(s, "%s%s = arith.select %s, %s, %s : %s\n", ind, nv, take, o, x, E->T);
        bt__me_fresh(E, ni); bt__sb_printf(s, "%s%s = arith.select %s, %s, %s : i32\n", ind, ni, take, oi, ix);
        memcpy(x, nv, sizeof nv); memcpy(ix, ni, sizeof ni);
    }
}
/* phase p's loop: accumulate the reductions reds[0..nred) over j; afterwards their values (and
   argmaxes) are named at row scope */
static void bt__me_phase(bt__memit *E, const int *reds, int nred) {
    const bt__mgraph *g = E->g;
    bt__sb *s = E->row; const char *ind = E->ind_row;
    /* CPU sums accumulate in f64, as bt_tensor.h's CPU reductions do (the GPU's tree sums are short) */
    int wide = !E->gpu && !E->pr->f64;
    const char *A = wide ? "f64" : E->T;
    bt__mname zero, zacc, ninf;
    bt__me_cst(E, s, ind, 0.0, zero);
    bt__me_cst(E, s, ind, -INFINITY, ninf);
    memcpy(zacc, zero, sizeof zero);
    if (wide) { bt__me_fresh(E, zacc); bt__sb_printf(s, "%s%s = arith.constant 0.0 : f64\n", ind, zacc); }
    bt__me_open_loop(E);
    int L = E->loop, nres = 0;
    bt__sb inits = {NULL, 0, 0}, types = {NULL, 0, 0}, yields = {NULL, 0, 0};
    for (int m = 0; m < nred; m++) {
        const bt__mnode *n = &g->v[reds[m]];
        bt__mname val, nv, gt, ni;
        snprintf(val, sizeof val, "%s", bt__me_get(E, n->a));
        const char *sep = nres ? ", " : "";
        if (n->kind == BT__MK_RSUM) {
            bt__sb_printf(&inits, "%s%%a%d_%d = %s", sep, L, nres, zacc);
            bt__sb_printf(&types, "%s%s", sep, A);
            if (wide) {
                bt__me_fresh(E, gt);
                bt__sb_printf(&E->body, "%s%s = arith.extf %s : f32 to f64\n", E->ind_loop, gt, val);
                memcpy(val, gt, sizeof gt);
            }
            bt__me_fresh(E, nv);
            bt__sb_printf(&E->body, "%s%s = arith.addf %%a%d_%d, %s : %s\n", E->ind_loop, nv, L, nres, val, A);
            bt__sb_printf(&yields, "%s%s", sep, nv);
            nres++;
        } else {                      /* max, keeping the first j that holds it */
            bt__sb_printf(&inits, "%s%%a%d_%d = %s, %%a%d_%d = %%c0", sep, L, nres, ninf, L, nres + 1);
            bt__sb_printf(&types, "%s%s, index", sep, E->T);
            bt__me_fresh(E, gt); bt__me_fresh(E, nv); bt__me_fresh(E, ni);
            bt__sb_printf(&E->body, "%s%s = arith.cmpf ogt, %s, %%a%d_%d : %s\n", E->ind_loop, gt, val, L, nres, E->T);
            bt__sb_printf(&E->body, "%s%s = arith.select %s, %s, %%a%d_%d : %s\n", E->ind_loop, nv, gt, val, L, nres, E->T);
            bt__sb_printf(&E->body, "%s%s = arith.select %s, %s, %%a%d_%d : index\n", E->ind_loop, ni, gt, E->j, L, nres + 1);
            bt__sb_printf(&yields, "%s%s, %s", sep, nv, ni);
            nres += 2;
        }
    }
    if (nres == 1) bt__sb_printf(s, "%s%%rs%d = scf.for %s = %s iter_args(%s) -> (%s) {\n", ind, L, E->j, bt__me_loop_bounds(E), inits.p, types.p);
    else bt__sb_printf(s, "%s%%rs%d:%d = scf.for %s = %s iter_args(%s) -> (%s) {\n", ind, L, nres, E->j, bt__me_loop_bounds(E), inits.p, types.p);
    bt__sb_put(s, E->body.p, E->body.n);
    bt__sb_printf(s, "%s  scf.yield %s : %s\n%s}\n", ind, yields.p, types.p, ind);
    bt__sb_free(&inits); bt__sb_free(&types); bt__sb_free(&yields);
    E->in_loop = 0;
    /* the per-thread (GPU) or final (CPU) results */
    bt__mname *res = (bt__mname *)bt__mcalloc(sizeof(bt__mname) * (size_t)(4 * nred + 4));
    bt__mname *x = res + nres, *ix = res + nres + nred;
    for (int m = 0, k = 0; m < nred; m++) {
        int is_max = g->v[reds[m]].kind == BT__MK_RMAX;
        for (int q = 0; q < 1 + is_max; q++, k++) {
            if (nres == 1) snprintf(res[k], sizeof res[k], "%%rs%d", L);
            else snprintf(res[k], sizeof res[k], "%%rs%d#%d", L, k);
        }
    }
    if (!E->gpu) {
        for (int m = 0, k = 0; m < nred; m++) {
            if (wide && g->v[reds[m]].kind == BT__MK_RSUM) {
                bt__me_fresh(E, E->nrow[reds[m]]);
                bt__sb_printf(s, "%s%s = arith.truncf %s : f64 to f32\n", ind, E->nrow[reds[m]], res[k++]);
                continue;
            }
            memcpy(E->nrow[reds[m]], res[k++], sizeof(bt__mname));
            if (g->v[reds[m]].kind == BT__MK_RMAX) memcpy(E->nidx[reds[m]], res[k++], sizeof(bt__mname));
        }
        free(res);
        return;
    }
    /* GPU: reduce each over the warp, then across the warps through shared memory */
    for (int m = 0, k = 0; m < nred; m++) {
        int is_max = g->v[reds[m]].kind == BT__MK_RMAX;
        memcpy(x[m], res[k++], sizeof(bt__mname));
        if (is_max) {
            bt__me_fresh(E, ix[m]);
            bt__sb_printf(s, "%s%s = arith.index_cast %s : index to i32\n", ind, ix[m], res[k++]);
        }
        bt__me_warp_reduce(E, is_max, x[m], ix[m]);
    }
    bt__sb_printf(s, "%sscf.if %%lane0 {\n", ind);
    for (int m = 0, fi = 0, ii = 0; m < nred; m++) {
        bt__sb_printf(s, "%s  %%ws%d_%d = arith.constant %d : index\n", ind, L, m, 32 * fi++);
        bt__sb_printf(s, "%s  %%wa%d_%d = arith.addi %%ws%d_%d, %%warp : index\n", ind, L, m, L, m);
        bt__sb_printf(s, "%s  memref.store %s, %%shf[%%wa%d_%d] : %s\n", ind, x[m], L, m, E->shf_ty);
        if (g->v[reds[m]].kind != BT__MK_RMAX) continue;
        bt__sb_printf(s, "%s  %%wi%d_%d = arith.constant %d : index\n", ind, L, m, 32 * ii++);
        bt__sb_printf(s, "%s  %%wb%d_%d = arith.addi %%wi%d_%d, %%warp : index\n", ind, L, m, L, m);
        bt__sb_printf(s, "%s  memref.store %s, %%shi[%%wb%d_%d] : %s\n", ind, ix[m], L, m, E->shi_ty);
    }
    bt__sb_printf(s, "%s}\n%sgpu.barrier\n", ind, ind);
    for (int m = 0, fi = 0, ii = 0; m < nred; m++) {
        int is_max = g->v[reds[m]].kind == BT__MK_RMAX;
        bt__mname base, ibase, k_, q, nv, r0, r1;
        bt__me_fresh(E, base);
        bt__sb_printf(s, "%s%s = arith.constant %d : index\n", ind, base, 32 * fi++);
        snprintf(k_, sizeof k_, "%%k%d_%d", L, m);
        bt__me_fresh(E, r0);
        if (!is_max) {
            bt__sb_printf(s, "%s%s = scf.for %s = %%c0 to %%nw step %%c1 iter_args(%%b%d_%d = %s) -> (%s) {\n", ind, r0, k_, L, m, zero, E->T);
            bt__me_fresh(E, q); bt__me_fresh(E, nv);
            bt__sb_printf(s, "%s  %s = arith.addi %s, %s : index\n", ind, nv, base, k_);
            bt__sb_printf(s, "%s  %s = memref.load %%shf[%s] : %s\n", ind, q, nv, E->shf_ty);
            bt__me_fresh(E, nv);
            bt__sb_printf(s, "%s  %s = arith.addf %%b%d_%d, %s : %s\n", ind, nv, L, m, q, E->T);
            bt__sb_printf(s, "%s  scf.yield %s : %s\n%s}\n", ind, nv, E->T, ind);
            memcpy(E->nrow[reds[m]], r0, sizeof r0);
            continue;
        }
        bt__me_fresh(E, ibase);
        bt__sb_printf(s, "%s%s = arith.constant %d : index\n", ind, ibase, 32 * ii++);
        bt__mname zi, a1, a2, qv, qi, gt, eq, lt, tie, take, sv, si;
        bt__me_fresh(E, zi);
        bt__sb_printf(s, "%s%s = arith.constant 0 : i32\n", ind, zi);
        bt__sb_printf(s, "%s%s:2 = scf.for %s = %%c0 to %%nw step %%c1 iter_args(%%b%d_%d = %s, %%bi%d_%d = %s) -> (%s, i32) {\n",
                      ind, r0, k_, L, m, ninf, L, m, zi, E->T);
        bt__me_fresh(E, a1); bt__me_fresh(E, a2); bt__me_fresh(E, qv); bt__me_fresh(E, qi);
        bt__sb_printf(s, "%s  %s = arith.addi %s, %s : index\n", ind, a1, base, k_);
        bt__sb_printf(s, "%s  %s = arith.addi %s, %s : index\n", ind, a2, ibase, k_);
        bt__sb_printf(s, "%s  %s = memref.load %%shf[%s] : %s\n", ind, qv, a1, E->shf_ty);
        bt__sb_printf(s, "%s  %s = memref.load %%shi[%s] : %s\n", ind, qi, a2, E->shi_ty);
        bt__me_fresh(E, gt); bt__me_fresh(E, eq); bt__me_fresh(E, lt); bt__me_fresh(E, tie); bt__me_fresh(E, take);
        bt__me_fresh(E, sv); bt__me_fresh(E, si);
        bt__sb_printf(s, "%s  %s = arith.cmpf ogt, %s, %%b%d_%d : %s\n", ind, gt, qv, L, m, E->T);
        bt__sb_printf(s, "%s  %s = arith.cmpf oeq, %s, %%b%d_%d : %s\n", ind, eq, qv, L, m, E->T);
        bt__sb_printf(s, "%s  %s = arith.cmpi slt, %s, %%bi%d_%d : i32\n", ind, lt, qi, L, m);
        bt__sb_printf(s, "%s  %s = arith.andi %s, %s : i1\n", ind, tie, eq, lt);
        bt__sb_printf(s, "%s  %s = arith.ori %s, %s : i1\n", ind, take, gt, tie);
        bt__sb_printf(s, "%s  %s = arith.select %s, %s, %%b%d_%d : %s\n", ind, sv, take, qv, L, m, E->T);
        bt__sb_printf(s, "%s  %s = arith.select %s, %s, %%bi%d_%d : i32\n", ind, si, take, qi, L, m);
        bt__sb_printf(s, "%s  scf.yield %s, %s : %s, i32\n%s}\n", ind, sv, si, E->T, ind);
        snprintf(E->nrow[reds[m]], sizeof(bt__mname), "%.29s#0", r0);
        bt__me_fresh(E, r1);
        bt__sb_printf(s, "%s%s = arith.index_cast %s#1 : i32 to index\n", ind, r1, r0);
        memcpy(E->nidx[reds[m]], r1, sizeof r1);
    }
    bt__sb_printf(s, "%sgpu.barrier\n", ind);    /* the slots are reused by the next phase */
    free(res);
}
/* output m's store: in the last loop (in_loop) or at row scope */
static void bt__me_store(bt__memit *E, int m) {
    int st = E->pr->out_store[m];
    bt__sb *s = E->in_loop ? &E->body : E->row;
    const char *ind = E->in_loop ? E->ind_loop : E->ind_row;
    bt__mname v, y, q, o, sum;
    snprintf(v, sizeof v, "%s", bt__me_get(E, E->pr->out_node[m]));
    if (st == BT__MS_COLSUM || st == BT__MS_SCALARSUM) {
        bt__me_fresh(E, q);
        if (st == BT__MS_COLSUM) bt__sb_printf(s, "%s%s = arith.addi %%pC, %s : index\n", ind, q, E->j);
        else bt__sb_printf(s, "%s%s = arith.addi %s, %%c0 : index\n", ind, q, E->gpu ? "%bid" : "%p");
        if (E->gpu && st == BT__MS_SCALARSUM) { bt__sb_printf(s, "%sscf.if %%t0 {\n", ind); }
        bt__me_fresh(E, o);
        bt__sb_printf(s, "%s%s = memref.load %%out%d[%s] : memref<?x%s>\n", ind, o, m, q, E->T);
        bt__me_bin(E, s, ind, "arith.addf", o, v, sum);
        bt__sb_printf(s, "%smemref.store %s, %%out%d[%s] : memref<?x%s>\n", ind, sum, m, q, E->T);
        if (E->gpu && st == BT__MS_SCALARSUM) bt__sb_printf(s, "%s}\n", ind);
        return;
    }
    bt__me_to_dtype(E, s, ind, v, E->pr->out_dt[m], y);
    const char *ix = st == BT__MS_FULL ? E->i : st == BT__MS_COL ? E->j : st == BT__MS_ROW ? "%r" : "%c0";
    int guard = E->gpu && !E->in_loop;            /* a row-scope store: thread 0 only */
    if (guard) bt__sb_printf(s, "%sscf.if %%t0 {\n", ind);
    bt__sb_printf(s, "%s%smemref.store %s, %%out%d[%s] : memref<?x%s>\n", ind, guard ? "  " : "", y, m, ix, bt__mty(E->pr->out_dt[m]));
    if (guard) bt__sb_printf(s, "%s}\n", ind);
}
/* the kernel's function header and the constants every part uses */
static void bt__me_header(bt__memit *E, int wf, int wi) {
    bt__sb *s = E->row;
    const bt__mprog *pr = E->pr;
    bt__sb args = {NULL, 0, 0};
    for (int k = 0; k < pr->n_in; k++) bt__sb_printf(&args, "%s%%in%d: memref<?x%s>", k ? ", " : "", k, bt__mty(pr->in_dt[k]));
    for (int m = 0; m < pr->n_out; m++) {
        int sum = pr->out_store[m] == BT__MS_COLSUM || pr->out_store[m] == BT__MS_SCALARSUM;
        bt__sb_printf(&args, ", %%out%d: memref<?x%s>", m, sum ? E->T : bt__mty(pr->out_dt[m]));
    }
    if (!E->gpu) {
        bt__sb_printf(s, "module {\n  func.func @k(%s, %%r0: index, %%r1: index, %%p: index) attributes {llvm.emit_c_interface} {\n", args.p);
        bt__sb_printf(s, "    %%c0 = arith.constant 0 : index\n    %%c1 = arith.constant 1 : index\n");
        bt__sb_printf(s, "    %%cC = arith.constant %lld : index\n    %%pC = arith.muli %%p, %%cC : index\n", (long long)pr->C);
        bt__sb_printf(s, "    scf.for %%r = %%r0 to %%r1 step %%c1 {\n");
    } else {
        bt__sb_printf(s, "module attributes {gpu.container_module} {\n  gpu.module @bt_k {\n    gpu.func @k(%s, %%R: index)", args.p);
        if (wf) {
            snprintf(E->shf_ty, sizeof E->shf_ty, "memref<%dx%s, #gpu.address_space<workgroup>>", 32 * wf, E->T);
            snprintf(E->shi_ty, sizeof E->shi_ty, "memref<%dxi32, #gpu.address_space<workgroup>>", 32 * (wi ? wi : 1));
            bt__sb_printf(s, " workgroup(%%shf: %s", E->shf_ty);
            if (wi) bt__sb_printf(s, ", %%shi: %s", E->shi_ty);
            bt__sb_printf(s, ")");
        }
        bt__sb_printf(s, " kernel {\n");
        bt__sb_printf(s, "      %%c0 = arith.constant 0 : index\n      %%c1 = arith.constant 1 : index\n");
        bt__sb_printf(s, "      %%cC = arith.constant %lld : index\n      %%c32 = arith.constant 32 : index\n", (long long)pr->C);
        bt__sb_printf(s, "      %%c32i = arith.constant 32 : i32\n");
        for (int o = 16; o >= 1; o /= 2) bt__sb_printf(s, "      %%o%d = arith.constant %d : i32\n", o, o);
        bt__sb_printf(s, "      %%tid = gpu.thread_id x\n      %%nt = gpu.block_dim x\n      %%bid = gpu.block_id x\n      %%gd = gpu.grid_dim x\n");
        bt__sb_printf(s, "      %%lane = arith.remui %%tid, %%c32 : index\n      %%warp = arith.divui %%tid, %%c32 : index\n");
        bt__sb_printf(s, "      %%nw = arith.divui %%nt, %%c32 : index\n      %%t0 = arith.cmpi eq, %%tid, %%c0 : index\n");
        bt__sb_printf(s, "      %%lane0 = arith.cmpi eq, %%lane, %%c0 : index\n      %%pC = arith.muli %%bid, %%cC : index\n");
        bt__sb_printf(s, "      scf.for %%r = %%bid to %%R step %%gd {\n");
    }
    bt__sb_printf(s, "%s%%rC = arith.muli %%r, %%cC : index\n", E->ind_row);
    bt__sb_free(&args);
}
/* the whole kernel text of program pr into s */
static void bt__memit_program(const bt__mgraph *g, const bt__mprog *pr, int gpu, bt__sb *s) {
    bt__memit E; memset(&E, 0, sizeof E);
    E.g = g; E.pr = pr; E.gpu = gpu; E.T = pr->f64 ? "f64" : "f32"; E.row = s;
    E.ind_row = gpu ? "        " : "      ";
    E.ind_loop = gpu ? "          " : "        ";
    E.nrow = (bt__mname *)bt__mcalloc(sizeof(bt__mname) * (size_t)g->n);
    E.nloop = (bt__mname *)bt__mcalloc(sizeof(bt__mname) * (size_t)g->n);
    E.nidx = (bt__mname *)bt__mcalloc(sizeof(bt__mname) * (size_t)g->n);
    E.avail = (int *)bt__mcalloc(sizeof(int) * (size_t)g->n);
    E.need = (int *)bt__mcalloc(sizeof(int) * (size_t)g->n);
    int *reds = (int *)bt__mmalloc(sizeof(int) * (size_t)g->n);
    int last = bt__me_plan(&E), wf = 0, wi = 0;
    for (int p = 0; p < last; p++) {             /* shared memory: the most slots one phase needs */
        int nr = bt__me_phase_reds(&E, p, reds), ni = 0;
        for (int m = 0; m < nr; m++) ni += g->v[reds[m]].kind == BT__MK_RMAX;
        if (nr > wf) wf = nr;
        if (ni > wi) wi = ni;
    }
    bt__me_header(&E, wf, wi);
    for (int p = 0; p < last; p++) {
        E.phase = p;
        int nr = bt__me_phase_reds(&E, p, reds);
        if (nr) bt__me_phase(&E, reds, nr);
    }
    E.phase = last;
    int any_loop = 0;
    for (int m = 0; m < pr->n_out; m++) any_loop |= bt__mstore_in_loop(pr->out_store[m]);
    if (any_loop) {
        bt__me_open_loop(&E);
        for (int m = 0; m < pr->n_out; m++) if (bt__mstore_in_loop(pr->out_store[m])) bt__me_store(&E, m);
        bt__sb_printf(s, "%sscf.for %s = %s {\n", E.ind_row, E.j, bt__me_loop_bounds(&E));
        bt__sb_put(s, E.body.p, E.body.n);
        bt__sb_printf(s, "%s}\n", E.ind_row);
        E.in_loop = 0;
    }
    for (int m = 0; m < pr->n_out; m++) if (!bt__mstore_in_loop(pr->out_store[m])) bt__me_store(&E, m);
    if (!gpu) bt__sb_printf(s, "    }\n    return\n  }\n}\n");
    else bt__sb_printf(s, "      }\n      gpu.return\n    }\n  }\n}\n");
    free(E.nrow); free(E.nloop); free(E.nidx); free(E.avail); free(E.need); free(reds); bt__sb_free(&E.body);
}

/* ============================================================================================
   6. the kernel cache: memory, then the AOT tables, then the cache directory, then a compile
   ============================================================================================ */
struct bt__mkernel {
    bt__mkernel *next;
    uint64_t key;
    char target[16];                /* "cpu" or a chip such as "sm_90" */
    char name[96];                  /* the chain and the kernel, for messages */
    char *source;                   /* the MLIR text (what the key hashes) */
    char *binary; size_t size;      /* PTX, or the CPU module lowered to the LLVM dialect */
    void (*packed)(void **);        /* CPU: the JIT's entry (ciface arguments, packed) */
#ifdef BT_MLIR
    MlirExecutionEngine jit;
#endif
#ifdef BT_CUDA
    CUmodule mod[BT_MAX_GPUS];
    CUfunction func[BT_MAX_GPUS];
    int max_threads[BT_MAX_GPUS];   /* the most threads a block of it may have (its registers decide) */
#endif
};
static int bt__mtarget_gpu(const char *target) { return strcmp(target, "cpu") != 0; }
static int bt__mc_compile(bt__mkernel *k, char *why, size_t nwhy);
static int bt__mc_load_cpu(bt__mkernel *k, char *why, size_t nwhy);
static void bt__mk_unload(bt__mkernel *k);

BTDEF void bt_mlir_register_aot(const bt_mlir_aot_kernel *kernels, int n) {
    if (n < 0 || (n && !kernels)) bt_error("bt_mlir_register_aot: %d kernels at %p", n, (const void *)kernels);
    if (bt__m.n_aot == bt__m.cap_aot) {
        bt__m.cap_aot = bt__m.cap_aot ? 2 * bt__m.cap_aot : 8;
        bt__m.aot = (const bt_mlir_aot_kernel **)realloc((void *)bt__m.aot, sizeof(*bt__m.aot) * (size_t)bt__m.cap_aot);
        bt__m.aot_n = (int *)realloc(bt__m.aot_n, sizeof(int) * (size_t)bt__m.cap_aot);
        if (!bt__m.aot || !bt__m.aot_n) bt_error("bt_mlir_register_aot: out of host memory");
    }
    bt__m.aot[bt__m.n_aot] = kernels; bt__m.aot_n[bt__m.n_aot++] = n;
}
static const bt_mlir_aot_kernel *bt__maot_find(uint64_t key, const char *target) {
    for (int t = 0; t < bt__m.n_aot; t++)
        for (int i = 0; i < bt__m.aot_n[t]; i++)
            if (bt__m.aot[t][i].key == key && bt__m.aot[t][i].target && !strcmp(bt__m.aot[t][i].target, target)) return &bt__m.aot[t][i];
    return NULL;
}

/* ---- the cache directory ---- */
static void bt__mdisk_path(char *buf, size_t n, const bt__mkernel *k, const char *ext) {
    snprintf(buf, n, "%s/%016llx.%s.%s", bt_mlir_cache_dir(), (unsigned long long)k->key, k->target, ext);
}
static const char *bt__mdisk_ext(const bt__mkernel *k) { return bt__mtarget_gpu(k->target) ? "ptx" : "ll.mlir"; }
static char *bt__mread_file(const char *path, size_t *len) {
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    char *p = NULL; long n = -1;
    if (fseek(f, 0, SEEK_END) == 0) n = ftell(f);
    if (n >= 0 && fseek(f, 0, SEEK_SET) == 0) {
        p = (char *)bt__mmalloc((size_t)n + 1);
        if (fread(p, 1, (size_t)n, f) != (size_t)n) { free(p); p = NULL; }
        else { p[n] = 0; *len = (size_t)n; }
    }
    fclose(f);
    return p;
}
static int bt__mmkdir_p(const char *dir) {
    char buf[4096];
    size_t n = strlen(dir);
    if (n == 0 || n >= sizeof buf) return -1;
    memcpy(buf, dir, n + 1);
    for (size_t i = 1; i <= n; i++) {
        if (buf[i] != '/' && buf[i] != 0) continue;
        char c = buf[i]; buf[i] = 0;
        if (mkdir(buf, 0755) != 0 && errno != EEXIST) return -1;
        buf[i] = c;
    }
    return 0;
}
/* written to a name of our own, then renamed: a reader never sees half a file */
static int bt__mwrite_file(const char *path, const char *data, size_t len) {
    char tmp[4200];
    snprintf(tmp, sizeof tmp, "%s.tmp.%ld", path, (long)getpid());
    FILE *f = fopen(tmp, "wb");
    if (!f) return -1;
    int ok = fwrite(data, 1, len, f) == len;
    ok &= fclose(f) == 0;
    if (!ok || rename(tmp, path) != 0) { remove(tmp); return -1; }
    return 0;
}
/* k's binary from the cache directory, when the stored source is k's source */
static int bt__mdisk_load(bt__mkernel *k) {
    const char *dir = bt_mlir_cache_dir();
    if (!dir[0]) return 0;
    char path[4200]; size_t n = 0, nb = 0;
    bt__mdisk_path(path, sizeof path, k, "mlir");
    char *src = bt__mread_file(path, &n);
    int same = src && !strcmp(src, k->source);
    free(src);
    if (!same) return 0;
    bt__mdisk_path(path, sizeof path, k, bt__mdisk_ext(k));
    k->binary = bt__mread_file(path, &nb);
    k->size = nb;
    return k->binary != NULL;
}
static void bt__mdisk_store(const bt__mkernel *k) {
    const char *dir = bt_mlir_cache_dir();
    if (!dir[0] || !k->binary) return;
    char path[4200];
    int ok = bt__mmkdir_p(dir) == 0;
    bt__mdisk_path(path, sizeof path, k, bt__mdisk_ext(k));
    ok = ok && bt__mwrite_file(path, k->binary, k->size) == 0;
    bt__mdisk_path(path, sizeof path, k, "mlir");           /* the source last: it marks the pair complete */
    ok = ok && bt__mwrite_file(path, k->source, strlen(k->source)) == 0;
    if (!ok) BT_LOG("bt_mlir: cannot write kernel %s to the cache directory %s (%s); it stays in memory only\n",
                    k->name, dir, strerror(errno));
}

/* the kernel for (target, text): NULL, with why, when none can be had */
static bt__mkernel *bt__mkernel_get(const char *target, const char *text, const char *name, char *why, size_t nwhy) {
    uint64_t key = bt__mkey(target, text);
    for (bt__mkernel *k = bt__m.kernels; k; k = k->next)
        if (k->key == key && !strcmp(k->target, target) && !strcmp(k->source, text)) { bt__m.stats.memory_hits++; return k; }
    int gpu = bt__mtarget_gpu(target);
#ifndef BT_MLIR
    if (!gpu) { snprintf(why, nwhy, "CPU kernels need a build with MLIR (make MLIR=1)"); return NULL; }
#endif
    bt__mkernel *k = (bt__mkernel *)bt__mcalloc(sizeof *k);
    k->key = key;
    snprintf(k->target, sizeof k->target, "%s", target);
    snprintf(k->name, sizeof k->name, "%s", name);
    k->source = bt__mstrdup(text);
    const bt_mlir_aot_kernel *aot = gpu ? bt__maot_find(key, target) : NULL;
    int ok = 0;
    if (aot) {
        k->binary = (char *)bt__mmalloc(aot->size + 1);
        memcpy(k->binary, aot->binary, aot->size); k->binary[aot->size] = 0; k->size = aot->size;
        bt__m.stats.aot_hits++; ok = 1;
    } else if (bt__mdisk_load(k)) {
        ok = gpu || bt__mc_load_cpu(k, why, nwhy);
        if (ok) bt__m.stats.disk_hits++;
    } else {
        free(k->binary); k->binary = NULL;
        ok = bt__mc_compile(k, why, nwhy);
        if (ok) bt__mdisk_store(k);
    }
    if (!ok) { bt__mk_unload(k); free(k->source); free(k->binary); free(k); return NULL; }
    k->next = bt__m.kernels; bt__m.kernels = k;
    return k;
}
BTDEF int bt_mlir_kernels(bt_mlir_kernel_info *out, int max) {
    int n = 0;
    for (bt__mkernel *k = bt__m.kernels; k; k = k->next, n++) {
        if (n >= max || !out) continue;
        out[n].key = k->key; out[n].target = k->target; out[n].name = k->name;
        out[n].source = k->source; out[n].binary = k->binary; out[n].size = k->size;
    }
    return n;
}

/* ============================================================================================
   7. compiling with the MLIR C API (BT_MLIR builds; see ../shared/notes/mlir-capi.md)
   One context for the process, made on first use with every dialect, pass and LLVM translation
   registered; its diagnostics are collected into a text that error messages quote.
   ============================================================================================ */
#ifdef BT_MLIR
static double bt__mnow_ms(void) {
    struct timespec ts; timespec_get(&ts, TIME_UTC);
    return 1e3 * (double)ts.tv_sec + 1e-6 * (double)ts.tv_nsec;
}
static struct { int init; MlirContext ctx; bt__sb diag; } bt__mc;
static void bt__mc_put(MlirStringRef s, void *user) { bt__sb_put((bt__sb *)user, s.data, s.length); }
static MlirLogicalResult bt__mc_on_diag(MlirDiagnostic d, void *user) {
    (void)user;
    mlirDiagnosticPrint(d, bt__mc_put, &bt__mc.diag);
    bt__sb_put(&bt__mc.diag, "\n", 1);
    return mlirLogicalResultSuccess();
}
static void bt__mc_init(void) {
    if (bt__mc.init) return;
    bt__mc.ctx = mlirContextCreate();
    MlirDialectRegistry reg = mlirDialectRegistryCreate();
    mlirRegisterAllDialects(reg);
    mlirContextAppendDialectRegistry(bt__mc.ctx, reg);
    mlirDialectRegistryDestroy(reg);
    mlirRegisterAllPasses();
    mlirRegisterAllLLVMTranslations(bt__mc.ctx);     /* needed by the JIT and by gpu-module-to-binary */
    mlirContextAttachDiagnosticHandler(bt__mc.ctx, bt__mc_on_diag, NULL, NULL);
    bt__mc.init = 1;
}
static void bt__mc_shutdown(void) {
    if (!bt__mc.init) return;
    mlirContextDestroy(bt__mc.ctx);
    bt__sb_free(&bt__mc.diag);
    bt__mc.init = 0;
}
static void bt__mc_clear_diag(void) { bt__mc.diag.n = 0; if (bt__mc.diag.p) bt__mc.diag.p[0] = 0; }
static void bt__mc_fail(char *why, size_t n, const char *what, const bt__mkernel *k) {
    snprintf(why, n, "%s %.60s: %.150s", what, k->name, bt__mc.diag.n ? bt__mc.diag.p : "(no diagnostic)");
}
static MlirModule bt__mc_parse(const char *text, const bt__mkernel *k, char *why, size_t n) {
    bt__mc_clear_diag();
    MlirModule m = mlirModuleCreateParse(bt__mc.ctx, mlirStringRefCreateFromCString(text));
    if (mlirModuleIsNull(m)) bt__mc_fail(why, n, "MLIR cannot parse kernel", k);
    return m;
}
static int bt__mc_pipeline(MlirModule m, const char *pipeline, const bt__mkernel *k, char *why, size_t n) {
    MlirPassManager pm = mlirPassManagerCreate(bt__mc.ctx);
    bt__mc_clear_diag();
    int ok = mlirLogicalResultIsSuccess(mlirParsePassPipeline(mlirPassManagerGetAsOpPassManager(pm),
                                                              mlirStringRefCreateFromCString(pipeline), bt__mc_put, &bt__mc.diag));
    if (!ok) bt__mc_fail(why, n, "bad pass pipeline for", k);
    if (ok && mlirLogicalResultIsFailure(mlirPassManagerRunOnOp(pm, mlirModuleGetOperation(m)))) {
        bt__mc_fail(why, n, "the pass pipeline failed on", k);
        ok = 0;
    }
    mlirPassManagerDestroy(pm);
    return ok;
}
static const char *bt__mc_cpu_pipeline =
    "builtin.module(canonicalize,cse,convert-math-to-libm,convert-scf-to-cf,convert-cf-to-llvm,expand-strided-metadata,"
    "finalize-memref-to-llvm,convert-math-to-llvm,convert-arith-to-llvm,convert-index-to-llvm,convert-func-to-llvm,"
    "reconcile-unrealized-casts)";
/* the JIT of a module lowered to the LLVM dialect; k->packed is its entry */
static int bt__mc_jit(bt__mkernel *k, MlirModule lowered, char *why, size_t n) {
    bt__mc_clear_diag();
    k->jit = mlirExecutionEngineCreate(lowered, 3, 0, NULL, false);
    if (mlirExecutionEngineIsNull(k->jit)) { bt__mc_fail(why, n, "the JIT could not compile", k); return 0; }
    void *entry = mlirExecutionEngineLookupPacked(k->jit, mlirStringRefCreateFromCString("_mlir_ciface_k"));
    if (!entry) { snprintf(why, n, "the JIT has no entry _mlir_ciface_k in %s", k->name); return 0; }
    memcpy(&k->packed, &entry, sizeof entry);   /* object pointer -> function pointer, portably */
    return 1;
}
static int bt__mc_load_cpu(bt__mkernel *k, char *why, size_t n) {
    bt__mc_init();
    double t0 = bt__mnow_ms();
    MlirModule m = bt__mc_parse(k->binary, k, why, n);
    if (mlirModuleIsNull(m)) return 0;
    int ok = bt__mc_jit(k, m, why, n);
    mlirModuleDestroy(m);
    bt__m.stats.compile_ms += bt__mnow_ms() - t0;
    return ok;
}
static const char *bt__mc_cuda_path(void) {
    const char *names[] = {"BT_MLIR_CUDA_PATH", "CUDA_HOME", "CUDA_PATH"};
    for (int i = 0; i < 3; i++) { const char *p = getenv(names[i]); if (p && *p) return p; }
    return "/usr/local/cuda";
}
static MlirWalkResult bt__mc_find_binary(MlirOperation op, void *user) {
    MlirStringRef nm = mlirIdentifierStr(mlirOperationGetName(op));
    if (nm.length == 10 && !memcmp(nm.data, "gpu.binary", 10)) { *(MlirOperation *)user = op; return MlirWalkResultInterrupt; }
    return MlirWalkResultAdvance;
}
/* the PTX that gpu-module-to-binary left in the module's gpu.binary op */
static int bt__mc_take_ptx(bt__mkernel *k, MlirModule m, char *why, size_t n) {
    MlirOperation bin = {NULL};
    mlirOperationWalk(mlirModuleGetOperation(m), bt__mc_find_binary, &bin, MlirWalkPreOrder);
    if (mlirOperationIsNull(bin)) { snprintf(why, n, "no gpu.binary in %s after the pipeline", k->name); return 0; }
    MlirAttribute objs = mlirOperationGetAttributeByName(bin, mlirStringRefCreateFromCString("objects"));
    if (mlirAttributeIsNull(objs) || !mlirAttributeIsAArray(objs) || mlirArrayAttrGetNumElements(objs) < 1 ||
        !mlirAttributeIsAGPUObjectAttr(mlirArrayAttrGetElement(objs, 0))) {
        snprintf(why, n, "the gpu.binary of %s holds no object", k->name); return 0;
    }
    MlirStringRef ptx = mlirGPUObjectAttrGetObject(mlirArrayAttrGetElement(objs, 0));
    size_t len = ptx.length;
    while (len && ptx.data[len - 1] == 0) len--;  /* the isa text carries a NUL; ptxas rejects it in a file */
    k->binary = (char *)bt__mmalloc(len + 1);
    memcpy(k->binary, ptx.data, len); k->binary[len] = 0; k->size = len;
    return 1;
}
static int bt__mc_compile(bt__mkernel *k, char *why, size_t n) {
    bt__mc_init();
    int gpu = bt__mtarget_gpu(k->target);
    char pipeline[1024], libdevice[1200];
    if (gpu) {
        const char *cuda = bt__mc_cuda_path();
        snprintf(libdevice, sizeof libdevice, "%s/nvvm/libdevice/libdevice.10.bc", cuda);
        FILE *f = fopen(libdevice, "rb");
        if (!f) { snprintf(why, n, "libdevice not found at %.150s (set BT_MLIR_CUDA_PATH to the CUDA toolkit)", libdevice); return 0; }
        fclose(f);
        snprintf(pipeline, sizeof pipeline,
                 "builtin.module(nvvm-attach-target{chip=%s features=+ptx80 O=3},gpu.module(convert-scf-to-cf,convert-gpu-to-nvvm,"
                 "canonicalize,cse,reconcile-unrealized-casts),gpu-module-to-binary{format=isa toolkit=%s})", k->target, cuda);
    } else snprintf(pipeline, sizeof pipeline, "%s", bt__mc_cpu_pipeline);
    if (bt__m.dump) BT_LOG("bt_mlir: kernel %s (%s):\n%s", k->name, k->target, k->source);
    double t0 = bt__mnow_ms();
    MlirModule m = bt__mc_parse(k->source, k, why, n);
    if (mlirModuleIsNull(m)) return 0;
    int ok = bt__mc_pipeline(m, pipeline, k, why, n);
    bt__m.stats.compiles++;
    if (ok && gpu) ok = bt__mc_take_ptx(k, m, why, n);
    if (ok && !gpu) {
        bt__sb text = {NULL, 0, 0};
        mlirOperationPrint(mlirModuleGetOperation(m), bt__mc_put, &text);
        k->binary = text.p; k->size = text.n;
        ok = bt__mc_jit(k, m, why, n);
    }
    mlirModuleDestroy(m);
    bt__m.stats.compile_ms += bt__mnow_ms() - t0;
    return ok;
}
#else
static int bt__mc_compile(bt__mkernel *k, char *why, size_t n) {
    snprintf(why, n, "kernel %s for %s is in no cache (memory, AOT tables, %s) and this build cannot compile (make MLIR=1)",
             k->name, k->target, bt_mlir_cache_dir()[0] ? bt_mlir_cache_dir() : "no cache directory");
    return 0;
}
static int bt__mc_load_cpu(bt__mkernel *k, char *why, size_t n) { (void)k; snprintf(why, n, "CPU kernels need a build with MLIR"); return 0; }
#endif

/* ============================================================================================
   8. running a kernel: CPU JIT calls, CUDA driver launches
   Arguments, in order: every input then every output as a 1-D memref (5 values: allocated and
   aligned pointer, offset 0, size, stride 1), then on the CPU the row range [r0, r1) and the row
   block p, on the GPU the row count R (the block index is the row block).
   ============================================================================================ */
typedef struct { void *allocated, *aligned; int64_t offset, size, stride; } bt__mdesc;
#define BT__M_MAX_BUF (2 * BT__M_MAX_IN + 1)

static void bt__mrun_cpu(const bt__mkernel *k, int nbuf, void *const *ptr, const int64_t *len, int64_t R, int P, int64_t work) {
    void (*entry)(void **) = k->packed;
    #pragma omp parallel for schedule(dynamic, 1) if (work > 32768)
    for (int p = 0; p < P; p++) {
        bt__mdesc d[BT__M_MAX_BUF]; void *dp[BT__M_MAX_BUF]; void *args[BT__M_MAX_BUF + 3];
        int64_t r0 = R * p / P, r1 = R * (p + 1) / P, pp = p;
        for (int b = 0; b < nbuf; b++) {
            d[b].allocated = d[b].aligned = ptr[b]; d[b].offset = 0; d[b].size = len[b]; d[b].stride = 1;
            dp[b] = &d[b]; args[b] = &dp[b];
        }
        args[nbuf] = &r0; args[nbuf + 1] = &r1; args[nbuf + 2] = &pp;
        entry(args);
    }
}

#ifdef BT_CUDA
#define BT__M_CUDA(call, what) do { cudaError_t e__ = (call); \
    if (e__ != cudaSuccess) bt_error("%s: %s", what, cudaGetErrorString(e__)); } while (0)
/* the driver API through dlopen: no -lcuda, and a binary runs where there is no driver */
typedef CUresult (*bt__cu_load_t)(CUmodule *, const void *, unsigned, CUjit_option *, void **);
typedef CUresult (*bt__cu_getfn_t)(CUfunction *, CUmodule, const char *);
typedef CUresult (*bt__cu_launch_t)(CUfunction, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned,
                                    CUstream, void **, void **);
typedef CUresult (*bt__cu_unload_t)(CUmodule);
typedef CUresult (*bt__cu_errstr_t)(CUresult, const char **);
typedef CUresult (*bt__cu_attr_t)(int *, CUfunction_attribute, CUfunction);
static struct {
    int tried; void *lib;
    bt__cu_load_t load; bt__cu_getfn_t getfn; bt__cu_launch_t launch; bt__cu_unload_t unload; bt__cu_errstr_t errstr;
    bt__cu_attr_t attr;
} bt__mcu;
static void bt__mcu_sym(void *fnptr, const char *name) {
    void *p = dlsym(bt__mcu.lib, name);
    memcpy(fnptr, &p, sizeof p);
}
static void bt__mcu_open(void) {
    if (bt__mcu.tried) return;
    bt__mcu.tried = 1;
    bt__mcu.lib = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
    if (!bt__mcu.lib) bt_error("bt_mlir: cannot open the CUDA driver (libcuda.so.1): %s", dlerror());
    bt__mcu_sym(&bt__mcu.load, "cuModuleLoadDataEx");
    bt__mcu_sym(&bt__mcu.getfn, "cuModuleGetFunction");
    bt__mcu_sym(&bt__mcu.launch, "cuLaunchKernel");
    bt__mcu_sym(&bt__mcu.unload, "cuModuleUnload");
    bt__mcu_sym(&bt__mcu.errstr, "cuGetErrorString");
    bt__mcu_sym(&bt__mcu.attr, "cuFuncGetAttribute");
    if (!bt__mcu.load || !bt__mcu.getfn || !bt__mcu.launch || !bt__mcu.unload || !bt__mcu.errstr || !bt__mcu.attr)
        bt_error("bt_mlir: the CUDA driver lacks cuModuleLoadDataEx / cuModuleGetFunction / cuLaunchKernel / cuFuncGetAttribute");
}
static const char *bt__mcu_err(CUresult r) {
    const char *s = NULL;
    if (bt__mcu.errstr) bt__mcu.errstr(r, &s);
    return s ? s : "unknown CUDA driver error";
}
/* k's function on device dev, its module loaded on first use (the current device must be dev) */
static CUfunction bt__mk_function(bt__mkernel *k, int dev) {
    if (k->func[dev]) return k->func[dev];
    bt__mcu_open();
    char log[4096]; log[0] = 0;
    CUjit_option opt[2] = {CU_JIT_ERROR_LOG_BUFFER, CU_JIT_ERROR_LOG_BUFFER_SIZE_BYTES};
    void *val[2] = {log, (void *)(uintptr_t)sizeof log};
    CUresult r = bt__mcu.load(&k->mod[dev], k->binary, 2, opt, val);
    if (r != CUDA_SUCCESS) bt_error("bt_mlir: loading kernel %s (%s) on cuda:%d: %s %.2000s", k->name, k->target, dev, bt__mcu_err(r), log);
    r = bt__mcu.getfn(&k->func[dev], k->mod[dev], "k");
    if (r != CUDA_SUCCESS) bt_error("bt_mlir: kernel %s has no entry k: %s", k->name, bt__mcu_err(r));
    r = bt__mcu.attr(&k->max_threads[dev], CU_FUNC_ATTRIBUTE_MAX_THREADS_PER_BLOCK, k->func[dev]);
    if (r != CUDA_SUCCESS || k->max_threads[dev] < 32) k->max_threads[dev] = 256;
    return k->func[dev];
}
static int bt__mgpu_threads(int64_t C) {    /* about 4 columns a thread, whole warps, 32..1024 */
    int64_t t = (C + 3) / 4;
    t = (t + 31) / 32 * 32;
    return t < 32 ? 32 : t > 1024 ? 1024 : (int)t;
}
static void bt__mrun_gpu(bt__mkernel *k, int dev, int nbuf, void *const *ptr, const int64_t *len, int64_t R, int64_t C, int grid) {
    int prev = 0;
    BT__M_CUDA(cudaGetDevice(&prev), "bt_mlir");
    if (prev != dev) BT__M_CUDA(cudaSetDevice(dev), "bt_mlir");
    CUfunction f = bt__mk_function(k, dev);
    uint64_t P[5 * BT__M_MAX_BUF + 1]; void *kp[5 * BT__M_MAX_BUF + 1];
    for (int b = 0; b < nbuf; b++) {
        P[5 * b] = P[5 * b + 1] = (uint64_t)(uintptr_t)ptr[b];
        P[5 * b + 2] = 0; P[5 * b + 3] = (uint64_t)len[b]; P[5 * b + 4] = 1;
    }
    P[5 * nbuf] = (uint64_t)R;
    for (int i = 0; i <= 5 * nbuf; i++) kp[i] = &P[i];
    int threads = bt__mgpu_threads(C), most = k->max_threads[dev] / 32 * 32;
    if (threads > most) threads = most;        /* whole warps still: the block reduction needs them */
    CUresult r = bt__mcu.launch(f, (unsigned)grid, 1, 1, (unsigned)threads, 1, 1, 0, (CUstream)bt_k_current_stream(dev), kp, NULL);
    if (r != CUDA_SUCCESS) bt_error("bt_mlir: launching %s on cuda:%d (%d blocks): %s", k->name, dev, grid, bt__mcu_err(r));
    if (prev != dev) BT__M_CUDA(cudaSetDevice(prev), "bt_mlir");
}
static int bt__mgpu_sms(int dev) {
    int sms = 0;
    BT__M_CUDA(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev), "bt_mlir");
    return sms > 0 ? sms : 1;
}
#endif
static void bt__mk_unload(bt__mkernel *k) {
#ifdef BT_MLIR
    if (!mlirExecutionEngineIsNull(k->jit)) mlirExecutionEngineDestroy(k->jit);
    k->jit.ptr = NULL;
#endif
#ifdef BT_CUDA
    for (int d = 0; d < BT_MAX_GPUS; d++)
        if (k->mod[d] && bt__mcu.unload) { bt__mcu.unload(k->mod[d]); k->mod[d] = NULL; k->func[d] = NULL; k->max_threads[d] = 0; }
#endif
    k->packed = NULL;
}
/* the row blocks of a launch: P partial rows for column sums. The CPU uses a fixed count (sums do
   not depend on the thread count); the GPU one block per row, or 8 per SM when partials exist */
static int bt__mblocks(bt_device dev, int64_t R, int partial) {
    if (dev.type == BT_CPU) return (int)(R < BT__M_CPU_BLOCKS ? R : BT__M_CPU_BLOCKS);
#ifdef BT_CUDA
    int64_t cap = partial ? 8 * (int64_t)bt__mgpu_sms(dev.index) : 0x7fffffff;
    return (int)(R < cap ? R : cap);
#else
    (void)partial; return 1;
#endif
}
static void bt__mlaunch(bt__mkernel *k, bt_device dev, int nbuf, void *const *ptr, const int64_t *len, int64_t R, int64_t C, int P) {
    if (R == 0) return;
    if (dev.type == BT_CPU) { bt__mrun_cpu(k, nbuf, ptr, len, R, P, R * C); return; }
#ifdef BT_CUDA
    bt__mrun_gpu(k, dev.index, nbuf, ptr, len, R, C, P);
#else
    bt_error("bt_mlir: kernel %s for cuda:%d in a build without CUDA", k->name, dev.index);
#endif
}

/* ============================================================================================
   9. the fused op: one trace per input signature, the forward kernel, the autograd node, its
   backward (fused kernel, or replay of the body), and the fallback to the body's own ops
   ============================================================================================ */
struct bt__mspec {
    bt__mspec *next;
    bt_dtype in_dt[BT__M_MAX_IN]; bt_shape in_shape[BT__M_MAX_IN];   /* the signature */
    int unsupported; char why[256];
    bt__mgraph g;
    int n_fwd, out;                  /* the forward chain's nodes (the backward's follow) and its output */
    int in_cls[BT__M_MAX_IN], out_cls;
    bt_shape out_shape; bt_dtype out_dt;
    int64_t R, C;
    int f64;
    int reversed, grad[BT__M_MAX_IN];
    bt__mkernel *fwd[2], *bwd[2][1 << BT__M_MAX_IN];   /* [0] CPU, [1] GPU */
    bt_mlir_fn *fn;
};
enum { BT__MREC_NONE, BT__MREC_RECORDING, BT__MREC_PASS };
struct bt_mlir_fn {
    char name[64];
    bt_mlir_body body; int n_in; void *user; int flags;
    bt__mspec *specs;
    int last_fused; char last_why[256]; char warned_why[256];
    bt_mlir_fn *next;                /* every live fn: bt_mlir_reset drops their kernel pointers */
    int rec;                         /* region form: BT__MREC_* */
    bt_tensor *rec_in[BT__M_MAX_IN];
    int rec_flagged[BT__M_MAX_IN];   /* leaves made to require grad for the recording */
    int rec_grad_old;
};

static bt_mlir_fn *bt__mfn_alloc(const char *name, bt_mlir_body body, int n_in, void *user, int flags) {
    if (n_in < 1 || n_in > BT__M_MAX_IN)
        bt_error("bt_mlir: %s: %d inputs (1 to %d: the node saves each input)", name ? name : "(null)", n_in, BT__M_MAX_IN);
    if (flags & ~(BT_MLIR_REPLAY_BACKWARD | BT_MLIR_STRICT)) bt_error("bt_mlir: %s: unknown flags 0x%x", name ? name : "(null)", flags);
    bt_mlir_fn *fn = (bt_mlir_fn *)bt__mcalloc(sizeof *fn);
    snprintf(fn->name, sizeof fn->name, "%s", name && *name ? name : "mlir_fn");
    fn->body = body; fn->n_in = n_in; fn->user = user; fn->flags = flags;
    fn->next = bt__m.fns; bt__m.fns = fn;
    return fn;
}
BTDEF bt_mlir_fn *bt_mlir_fn_new(const char *name, bt_mlir_body body, int n_in, void *user, int flags) {
    if (!body) bt_error("bt_mlir_fn_new: %s: body is NULL (use bt_mlir_region_new for the region form)", name ? name : "(null)");
    return bt__mfn_alloc(name, body, n_in, user, flags);
}
static void bt__mspec_free(bt__mspec *s) { bt__mg_free(&s->g); free(s); }
BTDEF void bt_mlir_fn_free(bt_mlir_fn *fn) {
    if (!fn) return;
    if (fn->rec == BT__MREC_RECORDING) bt_error("bt_mlir_fn_free: %s is recording (bt_mlir_begin without bt_mlir_end)", fn->name);
    for (bt_mlir_fn **p = &bt__m.fns; *p; p = &(*p)->next) if (*p == fn) { *p = fn->next; break; }
    while (fn->specs) { bt__mspec *s = fn->specs; fn->specs = s->next; bt__mspec_free(s); }
    free(fn);
}
BTDEF int bt_mlir_last_fused(const bt_mlir_fn *fn) { return fn ? fn->last_fused : 0; }
BTDEF const char *bt_mlir_last_reason(const bt_mlir_fn *fn) { return fn ? fn->last_why : ""; }

static void bt__mcheck_inputs(const bt_mlir_fn *fn, bt_tensor **in, const char *what) {
    if (!fn) bt_error("%s: fn is NULL", what);
    if (!in) bt_error("%s: %s: inputs is NULL", what, fn->name);
    for (int k = 0; k < fn->n_in; k++) {
        if (!in[k]) bt_error("%s: %s: input %d is NULL", what, fn->name, k);
        if (in[k]->refcount <= 0) bt_error("%s: %s: input %d was already released", what, fn->name, k);
        if (!bt_dtype_is_float(in[k]->dtype)) bt_error("%s: %s: input %d is %s (float dtypes only)", what, fn->name, k, bt_dtype_name(in[k]->dtype));
        if (!bt_device_eq(bt_device_of(in[k]), bt_device_of(in[0])))
            bt_error("%s: %s: input %d is on another device than input 0", what, fn->name, k);
    }
}
static bt__mspec *bt__mspec_find(bt_mlir_fn *fn, bt_tensor **in) {
    for (bt__mspec *s = fn->specs; s; s = s->next) {
        int same = 1;
        for (int k = 0; k < fn->n_in && same; k++)
            same = s->in_dt[k] == in[k]->dtype && s->in_shape[k].ndim == in[k]->ndim &&
                   !memcmp(s->in_shape[k].d, in[k]->shape, sizeof(int64_t) * (size_t)in[k]->ndim);
        if (same) return s;
    }
    return NULL;
}
static bt__mspec *bt__mspec_new(bt_mlir_fn *fn, bt_tensor **in) {
    bt__mspec *s = (bt__mspec *)bt__mcalloc(sizeof *s);
    for (int k = 0; k < fn->n_in; k++) { s->in_dt[k] = in[k]->dtype; s->in_shape[k] = bt_shape_of(in[k]); }
    s->fn = fn;
    s->next = fn->specs; fn->specs = s;
    bt__m.stats.traces++;
    return s;
}
/* the spec's IR from the graph that made out (c: leaves or producer nodes already set) */
static void bt__mspec_build(bt__mspec *s, bt__mcap *c, bt_tensor *out) {
    c->g = &s->g; c->n_in = s->fn->n_in;
    for (int k = 0; k < c->n_in; k++) c->in_dt[k] = s->in_dt[k];
    int id = out ? 0 : bt__mcap_fail(c, "the body returned NULL");
    if (id == 0) id = bt__mcap_frame(c, s->in_shape, bt_shape_of(out));
    if (id == 0) id = bt__mcapture(c, out);
    if (id < 0) { s->unsupported = 1; snprintf(s->why, sizeof s->why, "%s", c->why); return; }
    s->out = id; s->n_fwd = s->g.n;
    s->out_shape = bt_shape_of(out); s->out_dt = out->dtype;
    s->out_cls = bt__mshape_class(c, s->out_shape);
    if (s->out_cls < 0) { s->unsupported = 1; snprintf(s->why, sizeof s->why, "the result's shape is not a class of the frame"); return; }
    s->R = c->R; s->C = c->C;
    for (int k = 0; k < c->n_in; k++) s->in_cls[k] = c->in_cls[k] < 0 ? BT__MC_FULL : c->in_cls[k];
    s->f64 = out->dtype == BT_F64;
    for (int v = 0; v < s->g.n; v++) s->f64 |= s->g.v[v].kind == BT__MK_INPUT && s->g.v[v].dt == BT_F64;
}
/* function form: run the body once on copies of the inputs that require grad */
static bt__mspec *bt__mspec_trace(bt_mlir_fn *fn, bt_tensor **in) {
    bt__mspec *s = bt__mspec_new(fn, in);
    bt__mcap c; memset(&c, 0, sizeof c);
    int old = bt_set_grad_enabled(0);
    bt_scope_begin();
    for (int k = 0; k < fn->n_in; k++) { c.leaf[k] = bt_clone(in[k]); bt_set_requires_grad(c.leaf[k], 1); }
    bt_set_grad_enabled(1);
    bt_tensor *out = fn->body(c.leaf, fn->n_in, fn->user);
    bt_set_grad_enabled(old);
    bt__mspec_build(s, &c, out);
    bt_scope_end();
    bt__mcap_free(&c);
    return s;
}
/* the program (kernel inputs and outputs) of the forward or of the backward for the inputs in mask */
static void bt__mspec_prog(const bt__mspec *s, int bwd, unsigned mask, bt__mprog *pr, int *out_input) {
    static const int direct[4] = {BT__MS_SCALAR, BT__MS_ROW, BT__MS_COL, BT__MS_FULL};
    memset(pr, 0, sizeof *pr);
    pr->C = s->C; pr->f64 = s->f64;
    pr->n_in = s->fn->n_in;
    for (int k = 0; k < pr->n_in; k++) pr->in_dt[k] = s->in_dt[k];
    if (!bwd) {
        pr->n_out = 1; pr->out_node[0] = s->out; pr->out_store[0] = direct[s->out_cls]; pr->out_dt[0] = s->out_dt;
        out_input[0] = -1;
        return;
    }
    pr->in_dt[pr->n_in++] = s->out_dt;                      /* the output's gradient */
    for (int k = 0; k < s->fn->n_in; k++) {
        if (!(mask >> k & 1) || s->grad[k] < 0) continue;
        int m = pr->n_out++, cls = s->in_cls[k], per_row = bt__mg_cls(&s->g, s->grad[k]) & BT__MC_ROW;
        pr->out_node[m] = s->grad[k]; pr->out_dt[m] = s->in_dt[k]; out_input[m] = k;
        pr->out_store[m] = !(cls & BT__MC_ROW) && per_row ? (cls == BT__MC_COL ? BT__MS_COLSUM : BT__MS_SCALARSUM) : direct[cls];
    }
}
static void bt__mspec_reverse(bt__mspec *s) {
    if (s->reversed) return;
    int seed = bt__mg_input(&s->g, s->fn->n_in, s->out_dt, s->out_cls);
    bt__mreverse(&s->g, s->n_fwd, s->out, seed, s->C, s->fn->n_in, s->grad);
    s->reversed = 1;
}
/* the forward (bwd = 0) or backward kernel for the device kind; NULL with why when none */
static bt__mkernel *bt__mspec_kernel(bt__mspec *s, int gpu, int bwd, unsigned mask, char *why, size_t nwhy) {
    const char *target = gpu ? bt__m.chip : "cpu";
    bt__mkernel **slot = bwd ? &s->bwd[gpu][mask] : &s->fwd[gpu];
    if (*slot && !strcmp((*slot)->target, target)) return *slot;
    if (gpu && s->f64) { snprintf(why, nwhy, "f64 chains run on the CPU only"); return NULL; }
    if (bwd) bt__mspec_reverse(s);
    bt__mprog pr; int out_input[BT__M_MAX_IN];
    bt__mspec_prog(s, bwd, mask, &pr, out_input);
    if (bwd && pr.n_out == 0) { snprintf(why, nwhy, "no gradient flows to the inputs asked for"); return NULL; }
    bt__sb text = {NULL, 0, 0};
    bt__memit_program(&s->g, &pr, gpu, &text);
    char name[96];
    if (bwd) snprintf(name, sizeof name, "%s.backward%u", s->fn->name, mask);
    else snprintf(name, sizeof name, "%s.forward", s->fn->name);
    *slot = bt__mkernel_get(target, text.p, name, why, nwhy);
    bt__sb_free(&text);
    return *slot;
}
/* t as a contiguous tensor (+1), recording nothing */
static bt_tensor *bt__mcontig(bt_tensor *t) {
    int old = bt_set_grad_enabled(0);
    bt_scope_begin();
    bt_tensor *c = bt_retain(bt_contiguous(t));
    bt_scope_end();
    bt_set_grad_enabled(old);
    return c;
}
/* the forward kernel on in; saved receives the contiguous inputs (+1 each) */
static bt_tensor *bt__mforward(bt__mspec *s, bt__mkernel *k, bt_tensor **in, bt_tensor **saved) {
    int n = s->fn->n_in;
    bt_device dev = bt_device_of(in[0]);
    void *ptr[BT__M_MAX_BUF]; int64_t len[BT__M_MAX_BUF];
    for (int i = 0; i < n; i++) { saved[i] = bt__mcontig(in[i]); ptr[i] = bt_data_ptr(saved[i]); len[i] = bt_numel(saved[i]); }
    bt_tensor *out = bt_empty(s->out_shape, s->out_dt, dev);
    ptr[n] = bt_data_ptr(out); len[n] = bt_numel(out);
    bt__mlaunch(k, dev, n + 1, ptr, len, s->R, s->C, bt__mblocks(dev, s->R, 0));
    return out;
}
static void bt__mbackward(bt_node *n, bt_tensor *g, bt_tensor **gin);
/* the fused forward and its node; NULL (fn->last_why set) when it cannot run */
static bt_tensor *bt__mrun_spec(bt_mlir_fn *fn, bt__mspec *s, bt_tensor **in) {
    if (s->unsupported) { snprintf(fn->last_why, sizeof fn->last_why, "%s", s->why); fn->last_fused = 0; return NULL; }
    bt__mkernel *k = bt__mspec_kernel(s, bt_device_of(in[0]).type == BT_GPU, 0, 0, fn->last_why, sizeof fn->last_why);
    if (!k) { fn->last_fused = 0; return NULL; }
    bt_tensor *saved[BT__M_MAX_IN];
    bt_tensor *out = bt__mforward(s, k, in, saved);
    bt_node *node = bt__record(fn->name, bt__mbackward, out, in, fn->n_in);
    if (node) { node->i[0] = (int64_t)(intptr_t)s; for (int i = 0; i < fn->n_in; i++) bt__save(node, saved[i]); }
    for (int i = 0; i < fn->n_in; i++) bt_release(saved[i]);
    fn->last_fused = 1; fn->last_why[0] = 0;
    bt__m.stats.fused_calls++;
    return out;
}
/* the reason the fused path did not run, once per fn and reason; an error under BT_MLIR_STRICT */
static void bt__mnote_fallback(bt_mlir_fn *fn) {
    if (fn->flags & BT_MLIR_STRICT) bt_error("bt_mlir: %s: %s", fn->name, fn->last_why);
    if (strcmp(fn->warned_why, fn->last_why)) {
        BT_LOG("bt_mlir: %s: %s; running its ops unfused\n", fn->name, fn->last_why);
        snprintf(fn->warned_why, sizeof fn->warned_why, "%s", fn->last_why);
    }
    bt__m.stats.fallbacks++;
}
BTDEF bt_tensor *bt_mlir_call(bt_mlir_fn *fn, bt_tensor **in) {
    bt__mcheck_inputs(fn, in, "bt_mlir_call");
    if (!fn->body) bt_error("bt_mlir_call: %s is a region: use bt_mlir_begin / bt_mlir_end", fn->name);
    if (bt__m.disabled) {
        fn->last_fused = 0; snprintf(fn->last_why, sizeof fn->last_why, "the fused path is disabled");
        return fn->body(in, fn->n_in, fn->user);
    }
    bt__mspec *s = bt__mspec_find(fn, in);
    if (!s) s = bt__mspec_trace(fn, in);
    bt_tensor *out = bt__mrun_spec(fn, s, in);
    if (out) return out;
    bt__mnote_fallback(fn);
    return fn->body(in, fn->n_in, fn->user);
}

/* ---- backward ---- */
static int bt__mwants(const bt_node *n, int i) { return n->next[i].node || n->next[i].leaf; }
/* the gradients by the backward kernel: 0 when there is none (then the body is replayed) */
static int bt__mbackward_fused(bt__mspec *s, bt_node *n, bt_tensor *g, bt_tensor **gin, unsigned mask, char *why, size_t nwhy) {
    int nin = s->fn->n_in, gpu = bt_device_of(n->saved[0]).type == BT_GPU;
    unsigned all = (1u << nin) - 1, kmask = mask;
    bt__mkernel *k = bt__mspec_kernel(s, gpu, 1, mask, why, nwhy);
    if (!k && mask != all) { kmask = all; k = bt__mspec_kernel(s, gpu, 1, all, why, nwhy); }   /* more than asked */
    if (!k) return 0;
    bt__mprog pr; int out_input[BT__M_MAX_IN];
    bt__mspec_prog(s, 1, kmask, &pr, out_input);
    bt_device dev = bt_device_of(n->saved[0]);
    bt_tensor *gc = bt__mcontig(g), *outs[BT__M_MAX_IN];
    void *ptr[BT__M_MAX_BUF]; int64_t len[BT__M_MAX_BUF];
    int nb = 0, partial = 0;
    for (int i = 0; i < nin; i++, nb++) { ptr[nb] = bt_data_ptr(n->saved[i]); len[nb] = bt_numel(n->saved[i]); }
    ptr[nb] = bt_data_ptr(gc); len[nb++] = bt_numel(gc);
    for (int m = 0; m < pr.n_out; m++) partial |= pr.out_store[m] == BT__MS_COLSUM || pr.out_store[m] == BT__MS_SCALARSUM;
    int P = bt__mblocks(dev, s->R, partial);
    bt_dtype T = s->f64 ? BT_F64 : BT_F32;
    for (int m = 0; m < pr.n_out; m++, nb++) {
        int kin = out_input[m];
        if (pr.out_store[m] == BT__MS_COLSUM) outs[m] = bt_zeros(bt_shape2(P, s->C), T, dev);
        else if (pr.out_store[m] == BT__MS_SCALARSUM) outs[m] = bt_zeros(bt_shape1(P), T, dev);
        else outs[m] = bt_empty(s->in_shape[kin], s->in_dt[kin], dev);
        ptr[nb] = bt_data_ptr(outs[m]); len[nb] = bt_numel(outs[m]);
    }
    bt__mlaunch(k, dev, nb, ptr, len, s->R, s->C, P);
    for (int m = 0; m < pr.n_out; m++) {
        int kin = out_input[m], zero = 0;
        if (!(mask >> kin & 1)) continue;
        bt_tensor *gk = outs[m];
        if (pr.out_store[m] == BT__MS_COLSUM || pr.out_store[m] == BT__MS_SCALARSUM)     /* the row blocks' partial sums */
            gk = bt_reshape(bt_cast(bt_sum(gk, &zero, 1, 0), s->in_dt[kin]), s->in_shape[kin]);
        gin[kin] = gk;
    }
    bt_release(gc);
    bt__m.stats.fused_backwards++;
    return 1;
}
/* the body's own ops on copies of the saved inputs, and their backward */
static void bt__mbackward_replay(bt__mspec *s, bt_node *n, bt_tensor *g, bt_tensor **gin, unsigned mask) {
    bt_mlir_fn *fn = s->fn;
    bt_tensor *x[BT__M_MAX_IN];
    for (int i = 0; i < fn->n_in; i++) {      /* fresh leaves: the body must not reach the outer graph */
        x[i] = bt_clone(n->saved[i]);
        if (mask >> i & 1) bt_set_requires_grad(x[i], 1);
    }
    int old = bt_set_grad_enabled(1);
    bt_tensor *y = fn->body(x, fn->n_in, fn->user);
    bt_set_grad_enabled(old);
    bt_backward_with(y, g);
    for (int i = 0; i < fn->n_in; i++)
        if ((mask >> i & 1) && x[i]->grad) gin[i] = bt__register(bt_retain(x[i]->grad));
    bt__m.stats.replay_backwards++;
}
static void bt__mbackward(bt_node *n, bt_tensor *g, bt_tensor **gin) {
    bt__mspec *s = (bt__mspec *)(intptr_t)n->i[0];
    unsigned mask = 0;
    for (int i = 0; i < s->fn->n_in; i++) if (bt__mwants(n, i)) mask |= 1u << i;
    char why[256]; why[0] = 0;
    int replay = (s->fn->flags & BT_MLIR_REPLAY_BACKWARD) != 0;
    if (!replay && bt__mbackward_fused(s, n, g, gin, mask, why, sizeof why)) return;
    if (!s->fn->body)
        bt_error("bt_mlir: %s: no backward kernel (%s), and a region has no body to replay", s->fn->name, why);
    if (!replay) {
        if (s->fn->flags & BT_MLIR_STRICT) bt_error("bt_mlir: %s: no backward kernel: %s", s->fn->name, why);
        BT_LOG("bt_mlir: %s: no backward kernel (%s); replaying its ops\n", s->fn->name, why);
    }
    bt__mbackward_replay(s, n, g, gin, mask);
}

/* ============================================================================================
   10. the region form: the ops between bt_mlir_begin and bt_mlir_end are recorded the first time
   (inputs that are leaves without grad are made to require it for the walk, then restored), and
   the fused kernel runs from then on
   ============================================================================================ */
BTDEF bt_mlir_fn *bt_mlir_region_new(const char *name, int n_in, int flags) {
    if (flags & BT_MLIR_REPLAY_BACKWARD)
        bt_error("bt_mlir_region_new: %s: a region has no body to replay in the backward (use the function form)", name ? name : "(null)");
    return bt__mfn_alloc(name, NULL, n_in, NULL, flags);
}
BTDEF bt_tensor *bt_mlir_begin(bt_mlir_fn *r, bt_tensor **in) {
    bt__mcheck_inputs(r, in, "bt_mlir_begin");
    if (r->body) bt_error("bt_mlir_begin: %s is a function (made by bt_mlir_fn_new): use bt_mlir_call", r->name);
    if (r->rec != BT__MREC_NONE) bt_error("bt_mlir_begin: %s: the previous bt_mlir_begin has no bt_mlir_end", r->name);
    if (bt__m.disabled) {
        r->last_fused = 0; snprintf(r->last_why, sizeof r->last_why, "the fused path is disabled");
        r->rec = BT__MREC_PASS; return NULL;
    }
    bt__mspec *s = bt__mspec_find(r, in);
    if (s) {
        bt_tensor *out = bt__mrun_spec(r, s, in);
        if (out) return out;
        bt__mnote_fallback(r);
        r->rec = BT__MREC_PASS; return NULL;
    }
    r->rec = BT__MREC_RECORDING;
    r->rec_grad_old = bt_set_grad_enabled(1);
    for (int k = 0; k < r->n_in; k++) {
        r->rec_in[k] = in[k];
        r->rec_flagged[k] = !in[k]->grad_fn && !in[k]->requires_grad;
        if (r->rec_flagged[k]) bt_set_requires_grad(in[k], 1);
    }
    return NULL;
}
/* drop the edges of out's graph that lead to the leaves flagged for a recording */
static void bt__mdetach_flagged(bt_mlir_fn *r, bt_tensor *out) {
    bt_node **todo = NULL; int n = 0, cap = 0;
    if (out->grad_fn) { cap = 64; todo = (bt_node **)bt__mmalloc(sizeof(bt_node *) * (size_t)cap); todo[n++] = out->grad_fn; }
    for (int q = 0; q < n; q++) {
        bt_node *nd = todo[q];
        for (int i = 0; i < nd->n_in; i++) {
            for (int k = 0; k < r->n_in; k++)
                if (r->rec_flagged[k] && nd->next[i].leaf == r->rec_in[k]) { bt_release(nd->next[i].leaf); nd->next[i].leaf = NULL; }
            bt_node *m = nd->next[i].node;
            int seen = !m;
            for (int j = 0; j < n && !seen; j++) seen = todo[j] == m;
            if (seen) continue;
            if (n == cap) { cap *= 2; todo = (bt_node **)realloc(todo, sizeof(bt_node *) * (size_t)cap); if (!todo) bt_error("bt_mlir: out of host memory"); }
            todo[n++] = m;
        }
    }
    free(todo);
}
BTDEF bt_tensor *bt_mlir_end(bt_mlir_fn *r, bt_tensor *out) {
    if (!r) bt_error("bt_mlir_end: region is NULL");
    if (r->rec == BT__MREC_PASS) { r->rec = BT__MREC_NONE; return out; }
    if (r->rec != BT__MREC_RECORDING) bt_error("bt_mlir_end: %s: no bt_mlir_begin is recording (when begin returns a result, skip the ops and end)", r->name);
    r->rec = BT__MREC_NONE;
    bt__mspec *s = bt__mspec_new(r, r->rec_in);
    bt__mcap c; memset(&c, 0, sizeof c);
    for (int k = 0; k < r->n_in; k++) {
        if (r->rec_in[k]->grad_fn) c.made_by[k] = r->rec_in[k]->grad_fn;
        else c.leaf[k] = r->rec_in[k];
    }
    bt__mspec_build(s, &c, out);
    bt__mcap_free(&c);
    bt_set_grad_enabled(r->rec_grad_old);
    for (int k = 0; k < r->n_in; k++) if (r->rec_flagged[k]) bt_set_requires_grad(r->rec_in[k], 0);
    bt_tensor *fused = bt__mrun_spec(r, s, r->rec_in);
    if (fused) { if (out) bt_free_graph(out); return fused; }
    /* the recorded ops' result stands, without the edges the recording added */
    if (out && !r->rec_grad_old) { bt_free_graph(out); out->requires_grad = 0; }
    else if (out) bt__mdetach_flagged(r, out);
    bt__mnote_fallback(r);
    return out;
}

/* ============================================================================================
   11. ready-made chains: RMSNorm, SwiGLU, bias + GELU (for Llama-style blocks and train_gpt2)
   ============================================================================================ */
BTDEF bt_tensor *bt_mlir_sigmoid_ops(bt_tensor *x) { return bt_affine(bt_tanh(bt_scale(x, 0.5)), 0.5, 0.5); }  /* = 1 / (1 + e^-x) */
BTDEF bt_tensor *bt_mlir_silu_ops(bt_tensor *x) { return bt_mul(x, bt_mlir_sigmoid_ops(x)); }
BTDEF bt_tensor *bt_mlir_rmsnorm_ops(bt_tensor *x, bt_tensor *w, double eps) {
    int last = -1;
    bt_tensor *ms = bt_mean(bt_square(x), &last, 1, 1);
    bt_tensor *y = bt_div(x, bt_sqrt(bt_add_scalar(ms, eps)));
    return w ? bt_mul(y, w) : y;
}
#define BT__M_READY_EPS 16
static struct {
    double eps[BT__M_READY_EPS]; bt_mlir_fn *rms[BT__M_READY_EPS]; int n_rms;
    bt_mlir_fn *swiglu, *bias_gelu;
} bt__mready;
static bt_tensor *bt__mrms_body(bt_tensor **in, int n, void *user) { (void)n; return bt_mlir_rmsnorm_ops(in[0], in[1], *(const double *)user); }
static bt_tensor *bt__mswiglu_body(bt_tensor **in, int n, void *user) { (void)n; (void)user; return bt_mul(bt_mlir_silu_ops(in[0]), in[1]); }
static bt_tensor *bt__mbias_gelu_body(bt_tensor **in, int n, void *user) { (void)n; (void)user; return bt_gelu(bt_add(in[0], in[1])); }
BTDEF bt_tensor *bt_mlir_rmsnorm(bt_tensor *x, bt_tensor *w, double eps) {
    if (!w) bt_error("bt_mlir_rmsnorm: w is NULL (use bt_mlir_rmsnorm_ops for no weight)");
    int i = 0;
    while (i < bt__mready.n_rms && bt__mready.eps[i] != eps) i++;
    if (i == bt__mready.n_rms) {
        if (i == BT__M_READY_EPS) bt_error("bt_mlir_rmsnorm: more than %d distinct eps values", BT__M_READY_EPS);
        bt__mready.eps[i] = eps;
        bt__mready.rms[i] = bt_mlir_fn_new("rmsnorm", bt__mrms_body, 2, &bt__mready.eps[i], 0);
        bt__mready.n_rms++;
    }
    bt_tensor *in[2]; in[0] = x; in[1] = w;
    return bt_mlir_call(bt__mready.rms[i], in);
}
BTDEF bt_tensor *bt_mlir_swiglu(bt_tensor *a, bt_tensor *b) {
    if (!bt__mready.swiglu) bt__mready.swiglu = bt_mlir_fn_new("swiglu", bt__mswiglu_body, 2, NULL, 0);
    bt_tensor *in[2]; in[0] = a; in[1] = b;
    return bt_mlir_call(bt__mready.swiglu, in);
}
BTDEF bt_tensor *bt_mlir_bias_gelu(bt_tensor *x, bt_tensor *b) {
    if (!bt__mready.bias_gelu) bt__mready.bias_gelu = bt_mlir_fn_new("bias_gelu", bt__mbias_gelu_body, 2, NULL, 0);
    bt_tensor *in[2]; in[0] = x; in[1] = b;
    return bt_mlir_call(bt__mready.bias_gelu, in);
}

/* ---- one-shot ahead-of-time compile, reset, shutdown ---- */
BTDEF int bt_mlir_precompile(bt_mlir_fn *fn, bt_tensor **examples, const char *target) {
    bt__mcheck_inputs(fn, examples, "bt_mlir_precompile");
    if (!fn->body) bt_error("bt_mlir_precompile: %s is a region: precompile needs a function", fn->name);
    if (!target || (strcmp(target, "cpu") && strncmp(target, "sm_", 3)))
        bt_error("bt_mlir_precompile: %s: target \"%s\" is neither \"cpu\" nor a chip like \"sm_90\"", fn->name, target ? target : "(null)");
    bt__mspec *s = bt__mspec_find(fn, examples);
    if (!s) s = bt__mspec_trace(fn, examples);
    if (s->unsupported) { snprintf(fn->last_why, sizeof fn->last_why, "%s", s->why); return 0; }
    int gpu = strcmp(target, "cpu") != 0, made = 0;
    char chip[16]; snprintf(chip, sizeof chip, "%s", bt__m.chip);
    if (gpu) snprintf(bt__m.chip, sizeof bt__m.chip, "%s", target);
    made += bt__mspec_kernel(s, gpu, 0, 0, fn->last_why, sizeof fn->last_why) != NULL;
    made += bt__mspec_kernel(s, gpu, 1, (1u << fn->n_in) - 1, fn->last_why, sizeof fn->last_why) != NULL;
    snprintf(bt__m.chip, sizeof bt__m.chip, "%s", chip);
    return made == 2 ? 2 : 0;
}
BTDEF void bt_mlir_reset(void) {
    for (bt_mlir_fn *fn = bt__m.fns; fn; fn = fn->next)
        for (bt__mspec *s = fn->specs; s; s = s->next) { memset(s->fwd, 0, sizeof s->fwd); memset(s->bwd, 0, sizeof s->bwd); }
    while (bt__m.kernels) {
        bt__mkernel *k = bt__m.kernels;
        bt__m.kernels = k->next;
        bt__mk_unload(k); free(k->source); free(k->binary); free(k);
    }
#ifdef BT_MLIR
    bt__mc_shutdown();
#endif
}
BTDEF void bt_mlir_shutdown(void) {
    bt_mlir_reset();
    for (int i = 0; i < bt__mready.n_rms; i++) bt_mlir_fn_free(bt__mready.rms[i]);
    bt_mlir_fn_free(bt__mready.swiglu); bt_mlir_fn_free(bt__mready.bias_gelu);
    memset(&bt__mready, 0, sizeof bt__mready);
    free((void *)bt__m.aot); free(bt__m.aot_n); bt__m.aot = NULL; bt__m.aot_n = NULL; bt__m.n_aot = bt__m.cap_aot = 0;
    free(bt__m.cache_dir); bt__m.cache_dir = NULL; bt__m.cache_dir_set = 0;
}

/* ============================================================================================
   12. ahead-of-time source files: every GPU kernel in memory as C data, for a binary without MLIR
   ============================================================================================ */
BTDEF int bt_mlir_write_aot_source(const char *path) {
    if (!path) bt_error("bt_mlir_write_aot_source: path is NULL");
    bt__sb s = {NULL, 0, 0};
    int n = 0;
    bt__sb_printf(&s, "/* %s - written by bt_mlir_write_aot_source (bt_mlir.h): the PTX of every GPU kernel\n"
                      "   compiled in that process. #include it in one file after bt_mlir.h, then call\n"
                      "   bt_mlir_register_aot(bt_mlir_aot_kernels, bt_mlir_aot_count). */\n", path);
    for (bt__mkernel *k = bt__m.kernels; k; k = k->next) {
        if (!bt__mtarget_gpu(k->target) || !k->binary) continue;
        bt__sb_printf(&s, "static const char bt_mlir_aot_%d[] =  /* %s */\n\"", n, k->name);
        for (size_t i = 0; i < k->size; i++) {
            unsigned char ch = (unsigned char)k->binary[i];
            if (ch == '\n') bt__sb_printf(&s, "\\n\"\n\"");
            else if (ch == '"' || ch == '\\') bt__sb_printf(&s, "\\%c", ch);
            else if (ch == '\t') bt__sb_printf(&s, "\\t");
            else if (ch < 32 || ch > 126) bt__sb_printf(&s, "\\%03o", ch);
            else bt__sb_put(&s, (const char *)&ch, 1);
        }
        bt__sb_printf(&s, "\";\n");
        n++;
    }
    bt__sb_printf(&s, "static const bt_mlir_aot_kernel bt_mlir_aot_kernels[] = {\n");
    int i = 0;
    for (bt__mkernel *k = bt__m.kernels; k; k = k->next) {
        if (!bt__mtarget_gpu(k->target) || !k->binary) continue;
        bt__sb_printf(&s, "    {0x%016llxULL, \"%s\", \"%s\", bt_mlir_aot_%d, sizeof bt_mlir_aot_%d - 1},\n",
                      (unsigned long long)k->key, k->target, k->name, i, i);
        i++;
    }
    if (!n) bt__sb_printf(&s, "    {0, 0, 0, 0, 0}\n");
    bt__sb_printf(&s, "};\nstatic const int bt_mlir_aot_count = %d;\n", n);
    int rc = bt__mwrite_file(path, s.p, s.n);
    bt__sb_free(&s);
    return rc == 0 ? n : -1;
}

#endif /* BT_MLIR_IMPLEMENTATION_DONE */
#endif /* BT_MLIR_IMPLEMENTATION */
