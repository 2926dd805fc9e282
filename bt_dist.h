/* bt_dist.h - BluTrain-C distributed execution, v0.4: launchers, rendezvous, NCCL process groups,
   collectives, DDP gradient buckets, ZeRO-1/2.

   USAGE
     #define BT_DIST_IMPLEMENTATION in *one* C/CUDA file (with the BT_ALLOC_ and BT_TENSOR_
     implementations), and define _POSIX_C_SOURCE 200809L (or _GNU_SOURCE) before the first
     #include of that file: the implementation uses POSIX sockets, fork and threads.
     Compiled by nvcc (BT_CUDA) it uses NCCL (link -lnccl; mk/dist.mk adds it); a plain C build
     has everything but NCCL: one process works, and asking for more is an error
     ("this build has no CUDA/NCCL; build with nvcc"). BT_NO_NCCL makes a CUDA build without it.

     int main(int argc, char **argv) {
         bt_dist_launch(nproc_from_argv);      // --nproc N: FIRST, before any CUDA call. The parent
                                               // supervises N children and never returns; each
                                               // child returns here as one rank.
         bt_dist *d = bt_dist_init(NULL);      // reads RANK/WORLD_SIZE/... (torchrun, Slurm, Open
                                               // MPI, or nothing = one process), picks the GPU of
                                               // the local rank, rendezvous, NCCL, watchdog
         ... bt_all_reduce(d->world_comm, g, g, n, BT_F32, BT_RED_AVG, NULL); ...
         bt_dist_shutdown(d);                  // every rank, at the end (a collective)
     }

   LAUNCHERS (section 1)
     torchrun-style  RANK, WORLD_SIZE, LOCAL_RANK (needed when WORLD_SIZE > 1), LOCAL_WORLD_SIZE,
                     MASTER_ADDR (needed when WORLD_SIZE > 1), MASTER_PORT (default 29500).
                     Our own --nproc launcher sets these too.
     Open MPI        OMPI_COMM_WORLD_RANK, _SIZE, _LOCAL_RANK, _LOCAL_SIZE; mpirun does not say
                     where rank 0 is: export MASTER_ADDR (mpirun -x MASTER_ADDR=host ...).
     Slurm (srun)    SLURM_PROCID, SLURM_STEP_NUM_TASKS (else SLURM_NTASKS), SLURM_LOCALID;
                     local world from SLURM_NTASKS_PER_NODE or SLURM_STEP_TASKS_PER_NODE /
                     SLURM_TASKS_PER_NODE ("2(x3),1") at SLURM_NODEID. MASTER_ADDR if set, else
                     the first host of SLURM_STEP_NODELIST (else SLURM_JOB_NODELIST,
                     SLURM_NODELIST): where srun's block and cyclic distributions put task 0.
                     Set MASTER_ADDR for an arbitrary distribution (-m arbitrary / a hostfile),
                     or where node names do not resolve. MASTER_PORT if set, else
                     20000 + SLURM_JOB_ID % 20000 (the same for every rank of a job). Start ranks
                     with srun: a batch script alone looks like rank 0 of SLURM_NTASKS.
     any launcher    BT_DIST_SECRET: the rendezvous's key (section 5); --nproc sets it, a user
                     exports it for the others.
     Precedence: torchrun variables, then Open MPI, then Slurm (torchrun or mpirun inside a Slurm
     allocation see Slurm's variables too). No variables: one process.

   RENDEZVOUS AND LIVENESS (section 5)
     Rank 0 listens on MASTER_PORT at MASTER_ADDR's address: loopback when MASTER_ADDR is
     "localhost" or a loopback number (127.0.0.1: --nproc), else the address of this host that
     MASTER_ADDR resolves to, which is where the other hosts' ranks connect. Every interface only
     where MASTER_ADDR is no address of this host (NAT, a container's published port, a name that
     does not resolve here; a note says so) or a name this host maps to loopback (Debian's
     127.0.1.1 for its own name), which other hosts reach by another address. Every other rank
     connects to MASTER_ADDR:MASTER_PORT twice, retrying with backoff while rank 0 starts: a data
     connection for store operations (broadcast from rank 0, all-gather of small blobs, barrier:
     the NCCL unique id, host names, loader states) and a liveness connection that stays open for
     the whole run. Nothing assumes one host. Everything has a timeout (bt_dist_opts.timeout_s).
     Each connection proves the job's secret before rank 0 takes it, and rank 0 proves it back (a
     challenge answered with HMAC-SHA-256; the secret itself never crosses the wire). The secret
     is BT_DIST_SECRET: --nproc makes a random one for each launch; under torchrun, srun or mpirun
     export the same value to every rank. Unset, the key is public: "slurm job <SLURM_JOB_ID>" in
     a Slurm allocation (a rank of another job that lands on the port is refused), else empty;
     then the rendezvous is only as private as its port, and rank 0 says so when it listens on
     more than loopback. Rank 0 serves every connection at once, each with 2 s to send its hello:
     one that sends nothing, garbage, or a hello without the proof is dropped with a warning, and
     the rendezvous goes on. Only a proven rank's mismatch (world size, rank) stops it.
     A rank whose liveness connection closes without a goodbye has died: rank 0 sees it, tells the
     survivors, and every rank aborts. TCP keepalive catches a host that vanished without a FIN.

   FAULTS (section 6)
     bt_dist_init starts a watchdog thread (with world > 1). It aborts the run when
       - a rank died ("rank 0: rank 1 died ..."), or reported its own failure;
       - a collective did not finish within nccl_timeout_s of being enqueued ("collective
         all_reduce on communicator world timed out after 600 s (a peer may have died or hung)");
       - NCCL reports an asynchronous error (ncclCommGetAsyncError).
     Aborting = tell rank 0 (which tells the others), print the message, ncclCommAbort every
     communicator (non-blocking communicators, so abort works while the main thread is blocked in
     CUDA), flush stdio, _exit(1). A guard thread _exits after 10 s should the abort itself hang.
     opts.blocking_comms makes the communicators blocking: each collective's enqueue then returns
     without the wait for ncclInProgress (with the enqueue, 100-400 us of host time per DDP bucket
     measured on two H200s), too much for the hundreds of collectives of a tensor-parallel step (async TP on two H200s: 1.00-1.04x sync
     with non-blocking communicators, 1.05-1.07x with blocking ones). The abort path is the same;
     should an abort wait on a thread stuck inside NCCL, the guard thread ends the process.
     With world > 1, bt_dist_init also installs bt_dist_error_handler as bt_error's handler
     (bt_alloc.h; bt_dist_shutdown puts the previous one back): any bt_error in a rank prints
     "rank r (host): bt error: ...", aborts the communicators and _exits(1), so the others learn
     of it within moments instead of hanging in a collective.
     A library used inside a multi-process job must not simply exit(): use this handler (or one
     that calls bt_dist_abort). opts.no_error_handler leaves the handler alone.

   THE --nproc LAUNCHER (section 4)
     bt_dist_launch(N) forks N children (no exec: call it before any CUDA call or thread). Each
     child gets RANK, WORLD_SIZE, LOCAL_RANK, LOCAL_WORLD_SIZE, MASTER_ADDR=127.0.0.1,
     MASTER_PORT (a free port), BT_DIST_SECRET (32 bytes of /dev/urandom in hex, new for each
     launch; one the parent had is replaced) and NCCL_NVLS_ENABLE=0, and returns its rank. The parent relays
     rank 0's stdout (the others' goes to /dev/null), prefixes each line of every rank's stderr
     with "[rank k] ", passes SIGINT/SIGTERM on to the ranks, and when a rank fails ("rank k
     exited with code c" / "was killed by signal s") gives the others stop_delay_s to exit on
     their own (their watchdogs report the failure), then SIGTERM, then SIGKILL after
     kill_grace_s. It exits 0 when every rank did, else with the first failure's code
     (128 + signal for a signal). Children die with the parent (PR_SET_PDEATHSIG).

   NVLINK MULTICAST
     bt_dist_init and the launcher set NCCL_NVLS_ENABLE=0 when it is unset, before any NCCL call:
     NVLink SHARP / multicast must stay off on the machines this project uses (a user who knows
     better sets NCCL_NVLS_ENABLE=1 explicitly). Nothing here calls cuMulticastCreate.

   DEVICE MESH (section 2)
     world = dp x tp x cp, tp fastest, then cp, then dp (Megatron's order: a tensor-parallel group
     is tp consecutive ranks, on one node when tp <= GPUs per node):
         rank = (dp_i * cp + cp_i) * tp + tp_i
     bt_dist_mesh_comms splits one communicator per group (ncclCommSplit).

   DDP GRADIENT BUCKETS (sections 3 and 8)
     Gradients live in one flat buffer, parameters at element offsets (the layout of the forward
     pass). The planner cuts it into contiguous buckets [lo, hi) at parameter boundaries, from the
     END of the buffer backwards (backward produces the last layers' gradients first), each up to
     cap bytes (25 MiB default; a larger parameter gets a bucket alone). At run time a gradient-
     ready hook per parameter (bt_ddp_grad_hook, bt_grad_hook_fn's shape) counts down its bucket;
     a full bucket is launched, in plan order, on the engine's communication stream after that
     stream waits on an event recorded on the compute stream: all-reduce with ncclAvg (the mean
     over ranks, divided exactly once), optionally in bf16 (cast into a bf16 buffer, reduce, cast
     back), or, for ranks on one host with opts.copy_engines, through the copy engines (section 8,
     COPY ENGINES: no SMs held while the data moves). bt_ddp_wait makes the compute stream wait for every bucket (no host sync).
     bt_ddp_set_sync(d, 0) skips communication (gradient accumulation: only the last micro-batch
     communicates). ZeRO-1/2 use the same plan with shard_numel > 0: each element is reduced only
     to the rank that owns it (rank r owns [r*S, (r+1)*S) of the flat buffer; grouped ncclReduce
     per owner), and after the optimizer step bt_all_gather(c, flat + r*S, flat, S, ...) in place
     brings back the updated weights (allocate flat buffers of world * S elements,
     S = bt_shard_numel(n, world, align)).
     Overlap needs a layout in which the parameters whose gradients are final first lie at the
     end of the buffer (layers in forward order). Where one tensor kind is stacked over all layers
     (llm.c's checkpoint order), every bucket that holds a slice of a stacked tensor waits for the
     first layer's backward; communication then starts only at the end of the backward pass.
     opts.launch_as_ready sends each bucket as soon as it is full instead of in plan order, so a
     bucket that waits for the first layer holds back only itself. Every rank must then fill its
     buckets in the same order: true when the ranks run the same graph (bt_autograd's order is
     deterministic); a rank that differs makes the collectives mismatch (the watchdog's timeout).
     A parameter that gets no gradient in a pass is communicated by bt_ddp_wait, in plan order.
   CUDA GRAPHS
     A synced pass may be captured in a CUDA graph (the capture started on the compute stream,
     bt_graph_capture_begin in bt_tensor.h) and replayed: the engine sees the capture on the
     compute stream and then enqueues each bucket on the calling thread (the launch thread cannot
     join a thread-local capture), the comm stream joining the capture through the bucket's ready
     event (fork) and leaving it through the done events bt_ddp_wait makes the compute stream wait
     for (join), all before the capture ends. Inside a capture nothing polls on the host: no
     per-bucket trace times, no watchdog events (bt_dist_watch after each replay instead), no
     growth of the rows buffer (run one synced pass eagerly first: it sizes every buffer); the
     rows exchange makes the compute stream wait for it at once (its kernel's scratch memory comes
     from the graph's pool, which does not order streams). A
     replay runs the pass's collectives in the captured order on every rank; the host's
     bookkeeping (bt_ddp_get_stats, the trace) is that of the capture. NCCL's collectives are
     captured on blocking communicators (opts.blocking_comms): on a non-blocking one NCCL enqueues
     from a thread of its own, which this code has not been tried with inside a capture.

   THREADS AND SIGNALS
     One watchdog thread per process (world > 1) with all signals blocked; it uses the liveness
     sockets, CUDA event queries on the rank's device, and ncclCommGetAsyncError. Collectives and
     the DDP engine are called from one host thread. The store, launcher and liveness code never
     raise SIGPIPE (MSG_NOSIGNAL).

   ERRORS
     Pure functions and the store return -1 / NULL and leave a message for bt_dist_error()
     (per thread); bt_dist_init, the collectives and the DDP engine raise bt_error. Messages name
     the rank, host, port and variable concerned.

   SECTIONS
     1. launcher environment      5. TCP store: rendezvous, broadcast, all-gather, barrier, liveness
     2. device mesh               6. process group: init, watchdog, faults, shutdown
     3. bucket planner            7. collectives (NCCL)
     4. the --nproc launcher      8. DDP gradient buckets
     9. all-to-all (grouped send/recv; context parallelism's head scatter, bt_parallel.h)
    10. ZeRO-1/2: the owners' ranges, stage 2's gradient sums, the norm, the all-gathers
   FSDP (weights sharded too) is bt_parallel.h's section 9: its CPU path needs that header's tensor
   collectives through the store, which sit above this one.

   HISTORY
     0.1  first version: launchers, store, watchdog, NCCL setup, mesh, collectives, DDP buckets.
     0.2  DDP buckets through the copy engines for ranks on one host.
     0.3  ZeRO-1/2's orchestration (section 10), formerly train_gpt2.c's.
     0.4  a rendezvous only the job can join: rank 0 listens on MASTER_ADDR's address, serves
          every connection at once, and takes only ranks that prove BT_DIST_SECRET;
          bt_store_open takes the secret.
*/
#ifndef BT_DIST_H
#define BT_DIST_H

#include "bt_tensor.h"
#include "bt_optim.h"    /* ZeRO (section 10): bt_sumsq */
#include <stdio.h>        /* bt_ddp_print_trace's FILE */
#include <stddef.h>
#include <stdint.h>

#if defined(BT_CUDA) && !defined(BT_NO_NCCL)
#define BT_DIST_NCCL 1
#else
#define BT_DIST_NCCL 0
#endif

#ifdef __cplusplus
extern "C" {
#endif

BTDEF const char *bt_dist_error(void);   /* the last failure's message of this thread ("" if none) */

/* ---- 1. launcher environment ---- */
typedef enum { BT_LAUNCHER_NONE = 0, BT_LAUNCHER_TORCHRUN, BT_LAUNCHER_SLURM, BT_LAUNCHER_MPI } bt_launcher;
#define BT_DIST_HOST_MAX 256
#define BT_DIST_SECRET_MAX 256
typedef struct {
    bt_launcher launcher;
    int rank, world;                      /* this process; how many */
    int local_rank, local_world;          /* on this node; local_world 0 = the launcher does not say */
    char master_addr[BT_DIST_HOST_MAX];   /* rank 0's host ("" when world == 1) */
    int master_port;
    char secret[BT_DIST_SECRET_MAX];      /* the rendezvous's key (section 5): BT_DIST_SECRET; unset, "slurm job
                                             <SLURM_JOB_ID>" in a Slurm allocation, else "" (world > 1 only) */
    int secret_set;                       /* 1: from BT_DIST_SECRET; 0: the key is public */
} bt_dist_env;
typedef const char *(*bt_getenv_fn)(const char *name, void *user);   /* NULL = unset */
/* Parses the launcher variables read through get (pure: tests feed fake environments). 0, or -1
   with a message naming the variable (bt_dist_error). */
BTDEF int bt_dist_env_parse(bt_getenv_fn get, void *user, bt_dist_env *env);
BTDEF int bt_dist_env_read(bt_dist_env *env);                /* the same on getenv */
BTDEF const char *bt_launcher_name(bt_launcher l);           /* "torchrun", "slurm", ... */

/* ---- 2. device mesh: world = dp x tp x cp, rank = (dp_i * cp + cp_i) * tp + tp_i ---- */
typedef enum { BT_MESH_DP = 0, BT_MESH_TP, BT_MESH_CP } bt_mesh_axis;
typedef struct { int world, dp, tp, cp; } bt_mesh;
BTDEF int bt_mesh_init(bt_mesh *m, int world, int tp, int cp);   /* dp = world / (tp cp); 0 or -1 */
BTDEF int bt_mesh_rank(const bt_mesh *m, int dp_i, int tp_i, int cp_i);
BTDEF int bt_mesh_coord(const bt_mesh *m, int rank, bt_mesh_axis a);
BTDEF int bt_mesh_size(const bt_mesh *m, bt_mesh_axis a);
/* the group of rank along axis a: ranks[i] = the member with coordinate i; returns its size */
BTDEF int bt_mesh_group(const bt_mesh *m, int rank, bt_mesh_axis a, int *ranks);
/* the group's id (its member with coordinate 0 along a): the color for ncclCommSplit */
BTDEF int bt_mesh_color(const bt_mesh *m, int rank, bt_mesh_axis a);

/* ---- 3. bucket planner ---- */
typedef struct { int64_t offset, numel; } bt_param_span;   /* a parameter in the flat buffer (elements) */
typedef struct { int64_t lo, hi; int first, count; } bt_bucket;  /* [lo, hi); params order[first..+count) */
typedef struct {
    int n_buckets, n_params;
    bt_bucket *buckets;       /* launch order: buckets[0] ends at the end of the buffer */
    int *order;               /* parameter indices by descending offset (backward order) */
    int *param_bucket;        /* [n_params]: the bucket of each parameter */
} bt_bucket_plan;
#define BT_DIST_BUCKET_CAP_DEFAULT ((size_t)25 << 20)
/* params in any order, non-overlapping; cap_bytes 0 = 25 MiB. 0, or -1 (bt_dist_error). */
BTDEF int bt_bucket_plan_make(bt_bucket_plan *p, const bt_param_span *params, int n, size_t elem_size,
                              size_t cap_bytes);
BTDEF void bt_bucket_plan_free(bt_bucket_plan *p);
/* ZeRO shard length: ceil(total / world) rounded up to align (>= 1) elements */
BTDEF int64_t bt_shard_numel(int64_t total, int world, int64_t align);

/* ---- 4. the --nproc launcher ---- */
typedef struct {
    int nproc;                 /* ranks to start (1 = return 0 at once, no fork) */
    const char *master_addr;   /* NULL: 127.0.0.1 */
    int master_port;           /* 0: a free port */
    double stop_delay_s;       /* after a failure, time the others get to exit on their own; <= 0: 3 s */
    double kill_grace_s;       /* SIGTERM -> SIGKILL; <= 0: 5 s */
} bt_spawn_opts;
/* Forks the ranks. Returns the rank in each child; the parent supervises and exit()s. -1 (in
   the parent, nothing forked) on a setup error (bt_dist_error). Works in CPU builds too. */
BTDEF int bt_dist_spawn(const bt_spawn_opts *o);
/* For programs: nproc <= 1 returns 0; else bt_dist_spawn with defaults, and bt_error when the
   build has no NCCL or the process was already started by a launcher. */
BTDEF int bt_dist_launch(int nproc);
BTDEF int bt_dist_free_port(const char *host);   /* a port nobody listens on now, or -1 */

/* ---- 5. TCP store ---- */
typedef struct bt_store bt_store;
/* rank 0 listens on host's address and port (see RENDEZVOUS for the bind rule); the others
   connect to host:port (retrying while rank 0 starts). Every rank proves secret (the job's
   shared key, bt_dist_env.secret; NULL = ""); rank 0 refuses, with a warning, a connection that
   does not. timeout_s bounds the rendezvous and every later operation. NULL on failure
   (bt_dist_error). */
BTDEF bt_store *bt_store_open(const char *host, int port, int rank, int world, double timeout_s, const char *secret);
BTDEF int bt_store_broadcast(bt_store *s, void *buf, size_t n);                /* rank 0's n bytes to all */
BTDEF int bt_store_allgather(bt_store *s, const void *mine, void *all, size_t n);  /* all[k*n..] = rank k's */
BTDEF int bt_store_barrier(bt_store *s);
BTDEF void bt_store_set_timeout(bt_store *s, double timeout_s);
enum { BT_PEER_OK = 0, BT_PEER_DIED = 1, BT_PEER_ABORTED = 2 };
/* Liveness, for the watchdog (one thread): waits up to timeout_ms for news; BT_PEER_DIED /
   BT_PEER_ABORTED with *rank set, BT_PEER_OK, or -1 (bt_dist_error). */
BTDEF int bt_store_check_peers(bt_store *s, int timeout_ms, int *rank);
/* Tells the others (rank 0) or rank 0 (failed_rank == own rank) that failed_rank failed. */
BTDEF void bt_store_notify_failure(bt_store *s, int failed_rank, int aborted);
/* A clean leave: the others learn this rank did not die. Rank 0 waits for every goodbye. */
BTDEF void bt_store_close(bt_store *s);

/* ---- 6. process group ---- */
struct bt_dist;
typedef struct bt_comm {
    int rank, size;
    char name[32];
    void *handle;               /* ncclComm_t; NULL when size == 1 (collectives are local copies) or without NCCL (the store) */
    struct bt_dist *dist;
} bt_comm;

typedef void (*bt_fault_fn)(const char *msg, void *user);
typedef struct {
    double timeout_s;           /* rendezvous and store operations; 0: 300 s */
    double nccl_timeout_s;      /* a collective unfinished this long after its enqueue aborts; 0: 600 s */
    int store_only;             /* 1: store and liveness only, no GPU or NCCL (CPU programs, tests) */
    int no_error_handler;       /* 1: leave bt_error's handler alone */
    int blocking_comms;         /* 1: blocking NCCL communicators (see FAULTS) */
    const bt_dist_env *env;     /* NULL: read the process environment */
    bt_fault_fn on_fault;       /* NULL: print the message; else called after the abort (must not return) */
    void *on_fault_user;
} bt_dist_opts;

#define BT_DIST_MAX_COMMS 16
typedef struct bt_dist {
    int rank, world, local_rank, local_world;
    int device;                 /* the CUDA ordinal in use, -1 without a GPU */
    bt_dist_env env;
    bt_comm *world_comm;
    char host[64];              /* this rank's host name */
    struct bt__dist_state *state;
} bt_dist;

BTDEF bt_dist *bt_dist_init(const bt_dist_opts *opts);     /* NULL = defaults; bt_error on failure */
/* Collective over parent: the ranks with the same color form one communicator, ordered by key.
   color < 0: not a member (returns NULL). Every rank of parent calls it, in the same order. */
BTDEF bt_comm *bt_dist_split(bt_dist *d, bt_comm *parent, int color, int key, const char *name);
BTDEF void bt_dist_mesh_comms(bt_dist *d, const bt_mesh *m, bt_comm **dp, bt_comm **tp, bt_comm **cp);
BTDEF bt_store *bt_dist_store(bt_dist *d);                  /* NULL when world == 1 */
BTDEF void bt_dist_abort(bt_dist *d, const char *msg);      /* tell the others, abort, _exit(1) */
BTDEF void bt_dist_error_handler(const char *msg, void *user);   /* a bt_error_fn; user = the bt_dist */
BTDEF void bt_dist_shutdown(bt_dist *d);                    /* collective: barrier, destroy, goodbye */

/* ---- 7. collectives (stream: a cudaStream_t; NULL = the current stream of the rank's device) ----
   Ranks without NCCL (bt_dist_init with store_only: CPU programs, the tests) run all_reduce,
   reduce_scatter, all_gather, broadcast and reduce_to_owners on host buffers through the world's
   TCP store (every rank's buffer to every rank, reduced in rank order: the same bits everywhere),
   and so do DDP's buckets (each reduced when launched, in the plan's order) and ZeRO: slow, but the
   same arithmetic as one process. The communicator must span the world. */
typedef enum { BT_RED_SUM = 0, BT_RED_AVG, BT_RED_MAX, BT_RED_MIN } bt_red_op;
/* recv[i] = op over ranks of send[i], count elements (send == recv: in place) */
BTDEF void bt_all_reduce(bt_comm *c, const void *send, void *recv, int64_t count, bt_dtype dt, bt_red_op op,
                         void *stream);
/* recv (recv_count) = rank's block of op over ranks of send (size * recv_count) */
BTDEF void bt_reduce_scatter(bt_comm *c, const void *send, void *recv, int64_t recv_count, bt_dtype dt,
                             bt_red_op op, void *stream);
/* recv (size * send_count) = every rank's send, by rank; in place when send == recv + rank*send_count */
BTDEF void bt_all_gather(bt_comm *c, const void *send, void *recv, int64_t send_count, bt_dtype dt, void *stream);
BTDEF void bt_broadcast(bt_comm *c, const void *send, void *recv, int64_t count, bt_dtype dt, int root, void *stream);
/* one group: send to dst and receive from src (either < 0: that side is skipped) */
BTDEF void bt_send_recv(bt_comm *c, const void *send, int64_t send_count, int dst, void *recv, int64_t recv_count,
                        int src, bt_dtype dt, void *stream);
/* The watchdog's timeout for collectives enqueued on stream outside these functions: a CUDA graph
   holding captured collectives (a captured collective is not timed: its event would belong to the
   capture) is watched by an event after each launch. what names it in the timeout's message and
   must outlive the run (a string literal). A no-op on a one-rank communicator. */
BTDEF void bt_dist_watch(bt_comm *c, const char *what, void *stream);
/* ZeRO: span holds elements [span_lo, span_lo + n) of a flat buffer; rank r receives op over ranks
   of the elements it owns, [r*shard, (r+1)*shard) (grouped ncclReduce, one per owner, in place) */
BTDEF void bt_reduce_to_owners(bt_comm *c, void *span, int64_t span_lo, int64_t n, int64_t shard, bt_dtype dt,
                               bt_red_op op, void *stream);

/* ---- 8. DDP gradient buckets ---- */
typedef struct bt_ddp bt_ddp;
typedef struct {
    size_t bucket_cap_bytes;    /* of the gradient buffer; 0: 25 MiB */
    bt_dtype comm_dtype;        /* = the gradient dtype (default, also when 0 = BT_F32), or BT_BF16 */
    int64_t shard_numel;        /* > 0: ZeRO, reduce to owners (see above); 0: all-reduce */
    void *comm_stream;          /* NULL: the engine makes its own non-blocking stream */
    int launch_as_ready;        /* 1: a full bucket goes out at once, in the order buckets fill; 0: in plan order */
    int trace;                  /* 1: time each bucket (ready, start, done; host cost of its launch) for bt_ddp_print_trace */
    int launch_thread;          /* 1: a thread of its own enqueues the collectives (see bt_ddp_create) */
    int defer;                  /* 1: nothing goes out before bt_ddp_wait (no overlap: a measurement's baseline) */
    int copy_engines;           /* 1: all-reduce through the copy engines where the ranks share a host (see COPY ENGINES) */
} bt_ddp_opts;
typedef struct { int buckets, launched, passes, copy_engines; } bt_ddp_stats;   /* launched: in the current pass */

/* flat_grad: flat_numel elements of grad_dtype on the comm's device; params: where each
   parameter's gradient lies in it (bt_ddp_spans_from_grads makes them from the leaves).
   launch_thread: the calling thread only records each bucket's ready event and queues it; a
   thread of the engine's own makes the comm stream wait and enqueues the collective. NCCL's
   enqueue (and on a non-blocking communicator the wait for ncclInProgress to settle) costs the
   host 100-400 us a bucket (measured on two H200s), time the backward pass's kernel launches
   would otherwise lose. Use it only while no other communicator issues collectives during the
   backward pass (plain data parallelism): the thread's order against them would differ by rank.
   A pass captured in a CUDA graph is enqueued by the calling thread (see CUDA GRAPHS). */
BTDEF bt_ddp *bt_ddp_create(bt_comm *c, void *flat_grad, bt_dtype grad_dtype, int64_t flat_numel,
                            const bt_param_span *params, int n_params, const bt_ddp_opts *opts);
BTDEF void bt_ddp_set_sync(bt_ddp *d, int sync);     /* 0: the next backward passes only accumulate */
/* param's gradient is final (its last write was enqueued on stream, NULL = the device's current stream) */
BTDEF void bt_ddp_param_ready(bt_ddp *d, int param, void *stream);
BTDEF void bt_ddp_grad_hook(bt_tensor *leaf, void *user);  /* bt_grad_hook_fn; user = bt_ddp_hook_arg */
BTDEF void *bt_ddp_hook_arg(bt_ddp *d, int param);
/* stream waits for every bucket; buckets whose parameters got no gradient are launched here, in
   order. Call once after each synced backward. */
BTDEF void bt_ddp_wait(bt_ddp *d, void *stream);
BTDEF const bt_bucket_plan *bt_ddp_plan(const bt_ddp *d);
BTDEF bt_ddp_stats bt_ddp_get_stats(const bt_ddp *d);
BTDEF void bt_ddp_free(bt_ddp *d);
/* with opts.trace: one line per bucket of the last synced pass, in launch order: when its gradients
   were ready on the compute stream, when its reduction started and ended on the comm stream (ms
   after the first bucket was ready; start - ready = queued behind earlier buckets), and the host
   time its launch took. Call after a host sync that covers the pass (the events must be done). */
BTDEF void bt_ddp_print_trace(const bt_ddp *d, FILE *f);
/* Rows of an embedding's gradient for parameter param, a [V, C] table: grad[idx[i], :] += rows[i, :]
   for i < n (idx i32, rows of dt, both on stream). Instead of all-reducing the whole table after
   the lookup's backward (the last op of a backward pass, so nothing would hide it), every rank's
   (idx, rows) are all-gathered and each rank adds all of them, scaled by 1/world, to its reduced
   gradient: world x n x C elements move instead of V x C. The parameter's bucket must have been
   launched before (report it ready once the rest of its gradient is final; with a tied output
   layer that is right after the output layer's backward). Every rank passes the same n; an fp32
   gradient buffer. Returns 1 when it took the rows, 0 when it did not (a pass that does not
   communicate, or a single process): the caller adds them itself then. */
BTDEF int bt_ddp_add_rows(bt_ddp *d, int param, const int32_t *idx, const void *rows, bt_dtype dt, int64_t n, int64_t C,
                          void *stream);
/* bt_rows_hook_fn (bt_set_rows_hook) over bt_ddp_add_rows; user = bt_ddp_hook_arg(d, param). Declines
   (returns 0) when the gradient buffer is not fp32. */
BTDEF int bt_ddp_rows_hook(bt_tensor *leaf, bt_tensor *idx, bt_tensor *rows, void *user);
/* spans of the leaves' ->grad inside flat_grad (same storage, contiguous); 0 or -1 (bt_dist_error) */
BTDEF int bt_ddp_spans_from_grads(bt_tensor **params, int n, const bt_tensor *flat_grad, bt_param_span *out);

/* ---- 9. all-to-all ---- */
/* recv[p * count ..] = rank p's send[rank * count ..] for every rank p: equal blocks of count
   elements, one grouped send/recv per peer (send and recv must not overlap) */
BTDEF void bt_all_to_all(bt_comm *c, const void *send, void *recv, int64_t count, bt_dtype dt, void *stream);

/* ---- 10. ZeRO: optimizer state (stage 1) and the gradients' sum (stage 2) sharded ----
   The ranks of comm hold the same flat buffers (parameters, gradients) of shard x comm->size
   elements; rank r owns [r shard, (r+1) shard), clipped to the n real parameters (the padding
   past them holds no state; the last ranks' ranges may be empty). The DDP buckets reduce each
   element to its owner (bt_ddp_opts.shard_numel = shard), the owner's optimizer updates its range
   (bt_adamw_shard(opt, z.lo, z.hi) in bt_optim.h), then bt_zero_all_gather brings every updated
   range to every rank. Stage 2 also folds each micro-batch's reduced range into an fp32 sum
   (bt_zero_accumulate), so the gradient buffer only ever holds one micro-batch (in the compute
   dtype) and the fp32 sums are 1/size of the model per rank.
       bt_zero z; bt_zero_init(&z, 2, comm, n, bt_shard_numel(n, comm->size, 64), dev);
       per micro-batch: backward with the buckets synced, bt_ddp_wait, bt_zero_accumulate(&z, flat_grad)
       per step: norm from bt_zero_sumsq, update of bt_zero_grads(&z, flat_grad), bt_zero_all_gather(&z, flat) */
typedef struct {
    int stage;            /* 1 or 2 (0: not in use) */
    bt_comm *comm;
    int64_t shard;        /* elements a rank owns */
    int64_t lo, hi;       /* this rank's range of the parameters */
    bt_tensor *grad_sum;  /* stage 2: fp32 [hi - lo], this rank's reduced gradients summed over the step */
} bt_zero;
BTDEF void bt_zero_init(bt_zero *z, int stage, bt_comm *comm, int64_t n_params, int64_t shard, bt_device dev);
BTDEF void bt_zero_free(bt_zero *z);
/* this rank's reduced gradients: stage 2's sum, or stage 1's range of flat_grad (a view) */
BTDEF bt_tensor *bt_zero_grads(const bt_zero *z, bt_tensor *flat_grad);
/* stage 2, after each synced micro-batch: grad_sum += this rank's range of flat_grad; flat_grad = 0 */
BTDEF void bt_zero_accumulate(bt_zero *z, bt_tensor *flat_grad);
/* fp32 [2] on the device, summed over comm: the squares of the reduced gradients of the elements
   below W, and of those from W on (tensor parallelism keeps its replicated tensors first: their
   part is counted once, the split part is then summed over tp by the caller; W >= the buffer:
   all in [0]) */
BTDEF bt_tensor *bt_zero_sumsq(const bt_zero *z, bt_tensor *flat_grad, int64_t W);
/* the elements of this rank's range below W: [lo, lo + k) lie there, the rest above */
BTDEF int64_t bt_zero_below(const bt_zero *z, int64_t W);
/* after the owners' update: every rank's range of flat (fp32) to every rank, in place */
BTDEF void bt_zero_all_gather(const bt_zero *z, bt_tensor *flat);
/* x (this rank's range of a per-parameter state, [hi - lo] fp32) gathered into a new buffer laid
   out as the flat buffer ([shard x size], the padding 0), owned by the caller: a checkpoint's */
BTDEF bt_tensor *bt_zero_gather(const bt_zero *z, bt_tensor *x);

#ifdef __cplusplus
}
#endif
#endif /* BT_DIST_H */

/* ============================================================================================ */
/*                                       IMPLEMENTATION                                         */
/* ============================================================================================ */
#ifdef BT_DIST_IMPLEMENTATION
#ifndef BT_DIST_IMPLEMENTATION_DONE
#define BT_DIST_IMPLEMENTATION_DONE

#ifdef _WIN32
#error "bt_dist.h: POSIX only (sockets, fork, pthreads)"
#endif
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <stdarg.h>
#include <errno.h>
#include <ctype.h>
#include <time.h>
#include <unistd.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sched.h>
#include <pthread.h>
#include <netdb.h>
#include <sys/types.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <arpa/inet.h>
#ifdef __linux__
#include <sys/prctl.h>
#endif
#if !defined(_POSIX_C_SOURCE) || _POSIX_C_SOURCE < 200809L
#error "bt_dist.h: #define _POSIX_C_SOURCE 200809L (or _GNU_SOURCE) before the first #include of the file with BT_DIST_IMPLEMENTATION"
#endif
#if BT_DIST_NCCL
#include <cuda_runtime.h>
#include <nccl.h>
#endif
#ifdef BT_CUDA
#include "bt_kernels.cuh"
#define BT__DIST_CUDA(call, what) do { cudaError_t e__ = (call); if (e__ != cudaSuccess) \
    bt_error("bt_dist: %s: %s failed: %s", what, #call, cudaGetErrorString(e__)); } while (0)
/* s, or the current stream of the current device (the rank's: bt_dist_init made it current) */
static cudaStream_t bt__stream(void *s) {
    if (s) return (cudaStream_t)s;
    int d = 0;
    BT__DIST_CUDA(cudaGetDevice(&d), "current stream");
    return bt_k_current_stream(d);
}
/* 1 while s records a CUDA graph (or a capture on it broke: the capture's end reports that) */
static int bt__capturing(cudaStream_t s) {
    cudaStreamCaptureStatus st = cudaStreamCaptureStatusNone;
    if (cudaStreamIsCapturing(s, &st) != cudaSuccess) { (void)cudaGetLastError(); return 1; }
    return st != cudaStreamCaptureStatusNone;
}
#endif

#ifdef __cplusplus
#define BT__DIST_TLS thread_local
#else
#define BT__DIST_TLS _Thread_local
#endif
#ifdef BT_MALLOC
#define bt__dist_malloc(sz) BT_MALLOC(sz)
#define bt__dist_free(p) BT_FREE(p)
#else
#define bt__dist_malloc(sz) malloc(sz)
#define bt__dist_free(p) free(p)
#endif

static BT__DIST_TLS char bt__dist_errbuf[1024];
BTDEF const char *bt_dist_error(void) { return bt__dist_errbuf; }

#if defined(__GNUC__)
__attribute__((format(printf, 1, 2)))
#endif
static int bt__dist_fail_msg(const char *fmt, ...) {   /* sets the message; returns -1 */
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(bt__dist_errbuf, sizeof bt__dist_errbuf, fmt, ap);
    va_end(ap);
    return -1;
}

static void *bt__dist_calloc(size_t n, size_t size) {   /* zeroed, never NULL for n*size > 0 */
    size_t bytes = n * size;
    if (bytes == 0) bytes = 1;
    void *p = bt__dist_malloc(bytes);
    if (!p) bt_error("bt_dist: out of host memory (%zu bytes)", bytes);
    memset(p, 0, bytes);
    return p;
}

static double bt__now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}
static void bt__sleep(double s) {
    if (s <= 0) return;
    struct timespec ts;
    ts.tv_sec = (time_t)s; ts.tv_nsec = (long)((s - (double)ts.tv_sec) * 1e9);
    while (nanosleep(&ts, &ts) != 0 && errno == EINTR) {}
}
static int bt__ms_until(double deadline, double cap_s) {   /* poll timeout: ms left, at most cap_s */
    double left = deadline - bt__now();
    if (left > cap_s) left = cap_s;
    return left <= 0 ? 0 : (int)(left * 1000.0) + 1;
}
/* n bytes from the kernel's generator (the launcher's secret, the rendezvous's nonces); 0, or -1
   with errno */
static int bt__random(unsigned char *out, size_t n) {
    int fd = open("/dev/urandom", O_RDONLY | O_CLOEXEC);
    if (fd < 0) return -1;
    while (n) {
        ssize_t k = read(fd, out, n);
        if (k < 0 && errno == EINTR) continue;
        if (k <= 0) { int e = k < 0 ? errno : EIO; close(fd); errno = e; return -1; }
        out += k; n -= (size_t)k;
    }
    close(fd);
    return 0;
}

/* ============================================================================================
   1. launcher environment
   ============================================================================================ */
BTDEF const char *bt_launcher_name(bt_launcher l) {
    static const char *names[] = {"none", "torchrun", "slurm", "mpirun"};
    return (unsigned)l < 4 ? names[l] : "?";
}

/* a non-negative decimal of at most 9 digits in [lo, hi] */
static int bt__env_int(bt_getenv_fn get, void *user, const char *name, int lo, int hi, int *out) {
    const char *s = get(name, user);
    if (!s) return bt__dist_fail_msg("%s is not set", name);
    size_t n = strlen(s);
    if (n == 0) return bt__dist_fail_msg("%s is set but empty; expected an integer", name);
    for (size_t i = 0; i < n; i++)
        if (!isdigit((unsigned char)s[i]) || n > 9)
            return bt__dist_fail_msg("%s=\"%s\" is not a non-negative integer", name, s);
    long v = strtol(s, NULL, 10);
    if (v < lo || v > hi) return bt__dist_fail_msg("%s=%ld is out of range [%d, %d]", name, v, lo, hi);
    *out = (int)v;
    return 0;
}
static int bt__env_set(bt_getenv_fn get, void *user, const char *name) { return get(name, user) != NULL; }
/* the first of the names that is set, or NULL */
static const char *bt__env_first(bt_getenv_fn get, void *user, const char *const *names, int n) {
    for (int i = 0; i < n; i++) if (bt__env_set(get, user, names[i])) return names[i];
    return NULL;
}

/* Slurm's tasks-per-node list, "2(x3),1": the count of node `node`; 0 if node is beyond it.
   node < 0: the count when all nodes have the same, else 0. -1 on a malformed list. */
static int bt__slurm_tasks_on_node(const char *list, int node, int *count) {
    const char *p = list;
    int at = 0, common = -1, mixed = 0;
    *count = 0;
    while (*p) {
        char *end;
        if (!isdigit((unsigned char)*p)) return -1;
        long c = strtol(p, &end, 10), rep = 1;
        p = end;
        if (*p == '(') {
            if (p[1] != 'x' || !isdigit((unsigned char)p[2])) return -1;
            rep = strtol(p + 2, &end, 10);
            if (*end != ')' || rep < 1) return -1;
            p = end + 1;
        }
        if (*p == ',') { p++; if (!*p) return -1; }
        else if (*p) return -1;
        if (c < 1 || c > 1 << 20) return -1;
        if (node >= at && node < at + rep) *count = (int)c;
        if (common >= 0 && common != c) mixed = 1;
        common = (int)c;
        at += (int)rep;
    }
    if (at == 0) return -1;
    if (node < 0) *count = mixed ? 0 : common;
    return 0;
}

/* The first host of a Slurm host list, "node[01-04,07]-ib,gpu5" -> "node01-ib": each bracket
   group becomes the first number of its first range (zero padding kept). */
static int bt__slurm_first_host(const char *list, char *out, size_t outlen) {
    size_t o = 0;
    const char *p = list;
    while (*p && *p != ',') {
        if (*p == '[') {
            const char *q = ++p;
            while (isdigit((unsigned char)*q)) q++;
            if (q == p) return -1;
            if (o + (size_t)(q - p) >= outlen) return -1;
            memcpy(out + o, p, (size_t)(q - p)); o += (size_t)(q - p);
            while (*q && *q != ']') { if (*q == '[') return -1; q++; }
            if (*q != ']') return -1;
            p = q + 1;
            continue;
        }
        if (*p == ']' || isspace((unsigned char)*p)) return -1;
        if (o + 1 >= outlen) return -1;
        out[o++] = *p++;
    }
    out[o] = 0;
    return o ? 0 : -1;
}

static int bt__env_master(bt_getenv_fn get, void *user, bt_dist_env *e, const char *hint) {
    const char *a = get("MASTER_ADDR", user);
    if (e->world > 1 && (!a || !*a))
        return bt__dist_fail_msg("MASTER_ADDR is not set (%s, WORLD %d): set it to rank 0's host name or address%s",
                                 bt_launcher_name(e->launcher), e->world, hint);
    if (a && strlen(a) >= sizeof e->master_addr) return bt__dist_fail_msg("MASTER_ADDR is longer than %d characters", BT_DIST_HOST_MAX - 1);
    if (a) strcpy(e->master_addr, a);
    e->master_port = 29500;
    if (bt__env_set(get, user, "MASTER_PORT") && bt__env_int(get, user, "MASTER_PORT", 1, 65535, &e->master_port)) return -1;
    return 0;
}

static int bt__env_torchrun(bt_getenv_fn get, void *user, bt_dist_env *e) {
    e->launcher = BT_LAUNCHER_TORCHRUN;
    if (!bt__env_set(get, user, "RANK")) return bt__dist_fail_msg("WORLD_SIZE is set but RANK is not (torchrun-style launch): set both");
    if (!bt__env_set(get, user, "WORLD_SIZE"))
        return bt__dist_fail_msg("RANK is set but WORLD_SIZE is not (torchrun-style launch): set both");
    if (bt__env_int(get, user, "WORLD_SIZE", 1, 1 << 20, &e->world) || bt__env_int(get, user, "RANK", 0, 1 << 20, &e->rank)) return -1;
    if (bt__env_set(get, user, "LOCAL_RANK")) { if (bt__env_int(get, user, "LOCAL_RANK", 0, 1 << 20, &e->local_rank)) return -1; }
    else if (e->world > 1)
        return bt__dist_fail_msg("LOCAL_RANK is not set (RANK=%d WORLD_SIZE=%d): set it to this rank's GPU index on its node",
                                 e->rank, e->world);
    if (bt__env_set(get, user, "LOCAL_WORLD_SIZE") && bt__env_int(get, user, "LOCAL_WORLD_SIZE", 1, 1 << 20, &e->local_world)) return -1;
    return bt__env_master(get, user, e, "");
}

static int bt__env_mpi(bt_getenv_fn get, void *user, bt_dist_env *e) {
    e->launcher = BT_LAUNCHER_MPI;
    if (bt__env_int(get, user, "OMPI_COMM_WORLD_SIZE", 1, 1 << 20, &e->world) ||
        bt__env_int(get, user, "OMPI_COMM_WORLD_RANK", 0, 1 << 20, &e->rank) ||
        bt__env_int(get, user, "OMPI_COMM_WORLD_LOCAL_RANK", 0, 1 << 20, &e->local_rank) ||
        bt__env_int(get, user, "OMPI_COMM_WORLD_LOCAL_SIZE", 1, 1 << 20, &e->local_world))
        return -1;
    return bt__env_master(get, user, e, " (mpirun does not say where rank 0 runs: mpirun -x MASTER_ADDR=host)");
}

static int bt__env_slurm(bt_getenv_fn get, void *user, bt_dist_env *e) {
    static const char *const ntasks[] = {"SLURM_STEP_NUM_TASKS", "SLURM_NTASKS", "SLURM_NPROCS"};
    static const char *const per_node[] = {"SLURM_STEP_TASKS_PER_NODE", "SLURM_TASKS_PER_NODE"};
    static const char *const nodelists[] = {"SLURM_STEP_NODELIST", "SLURM_JOB_NODELIST", "SLURM_NODELIST"};
    e->launcher = BT_LAUNCHER_SLURM;
    const char *nt = bt__env_first(get, user, ntasks, 3);
    if (!nt) return bt__dist_fail_msg("SLURM_PROCID is set but none of SLURM_STEP_NUM_TASKS, SLURM_NTASKS, SLURM_NPROCS is");
    if (bt__env_int(get, user, nt, 1, 1 << 20, &e->world) || bt__env_int(get, user, "SLURM_PROCID", 0, 1 << 20, &e->rank) ||
        bt__env_int(get, user, "SLURM_LOCALID", 0, 1 << 20, &e->local_rank))
        return -1;
    const char *pn = bt__env_first(get, user, per_node, 2);
    if (bt__env_set(get, user, "SLURM_NTASKS_PER_NODE")) {
        if (bt__env_int(get, user, "SLURM_NTASKS_PER_NODE", 1, 1 << 20, &e->local_world)) return -1;
    } else if (pn) {
        int node = -1;
        if (bt__env_set(get, user, "SLURM_NODEID") && bt__env_int(get, user, "SLURM_NODEID", 0, 1 << 20, &node)) return -1;
        if (bt__slurm_tasks_on_node(get(pn, user), node, &e->local_world))
            return bt__dist_fail_msg("%s=\"%s\" is not a Slurm task count list like \"2(x3),1\"", pn, get(pn, user));
    }
    if (bt__env_set(get, user, "MASTER_ADDR")) {
        if (bt__env_master(get, user, e, "")) return -1;
    } else if (e->world > 1) {
        const char *nl = bt__env_first(get, user, nodelists, 3);
        if (!nl) return bt__dist_fail_msg("MASTER_ADDR is not set and Slurm gives no node list (SLURM_STEP_NODELIST): set MASTER_ADDR");
        if (bt__slurm_first_host(get(nl, user), e->master_addr, sizeof e->master_addr))
            return bt__dist_fail_msg("%s=\"%s\" is not a Slurm host list; set MASTER_ADDR to rank 0's host", nl, get(nl, user));
    }
    e->master_port = 29500;
    if (bt__env_set(get, user, "MASTER_PORT")) {
        if (bt__env_int(get, user, "MASTER_PORT", 1, 65535, &e->master_port)) return -1;
    } else if (bt__env_set(get, user, "SLURM_JOB_ID")) {
        int job = 0;
        if (bt__env_int(get, user, "SLURM_JOB_ID", 0, 999999999, &job)) return -1;
        e->master_port = 20000 + job % 20000;
    }
    return 0;
}

/* The rendezvous's key (section 5): BT_DIST_SECRET, which the --nproc launcher sets and a user
   exports for the others. Without it the key is public: "slurm job <SLURM_JOB_ID>" in a Slurm
   allocation (a rank of another job that lands on this port is refused), else empty. */
static int bt__env_secret(bt_getenv_fn get, void *user, bt_dist_env *e) {
    const char *v = get("BT_DIST_SECRET", user), *job = get("SLURM_JOB_ID", user);
    if (v && !*v)
        return bt__dist_fail_msg("BT_DIST_SECRET is set but empty: unset it, or give every rank the same random string "
                                 "(openssl rand -hex 32)");
    if (v && strlen(v) >= sizeof e->secret) return bt__dist_fail_msg("BT_DIST_SECRET is longer than %d characters", BT_DIST_SECRET_MAX - 1);
    if (v) { strcpy(e->secret, v); e->secret_set = 1; }
    else if (job && *job) snprintf(e->secret, sizeof e->secret, "slurm job %.200s", job);
    return 0;
}

static int bt__env_check(const bt_dist_env *e) {
    static const char *const rank_var[] = {"RANK", "RANK", "SLURM_PROCID", "OMPI_COMM_WORLD_RANK"};
    static const char *const world_var[] = {"WORLD_SIZE", "WORLD_SIZE", "SLURM_NTASKS", "OMPI_COMM_WORLD_SIZE"};
    static const char *const local_var[] = {"LOCAL_RANK", "LOCAL_RANK", "SLURM_LOCALID", "OMPI_COMM_WORLD_LOCAL_RANK"};
    static const char *const lworld_var[] = {"LOCAL_WORLD_SIZE", "LOCAL_WORLD_SIZE", "SLURM_NTASKS_PER_NODE",
                                             "OMPI_COMM_WORLD_LOCAL_SIZE"};
    int l = (int)e->launcher;
    if (e->rank >= e->world)
        return bt__dist_fail_msg("%s=%d is not below %s=%d (%s)", rank_var[l], e->rank, world_var[l], e->world,
                                 bt_launcher_name(e->launcher));
    if (e->local_world > e->world)
        return bt__dist_fail_msg("%s=%d is larger than %s=%d", lworld_var[l], e->local_world, world_var[l], e->world);
    if (e->local_world > 0 && e->local_rank >= e->local_world)
        return bt__dist_fail_msg("%s=%d is not below %s=%d", local_var[l], e->local_rank, lworld_var[l], e->local_world);
    if (e->local_rank >= e->world)
        return bt__dist_fail_msg("%s=%d is not below %s=%d", local_var[l], e->local_rank, world_var[l], e->world);
    return 0;
}

BTDEF int bt_dist_env_parse(bt_getenv_fn get, void *user, bt_dist_env *e) {
    memset(e, 0, sizeof *e);
    int r;
    if (bt__env_set(get, user, "RANK") || bt__env_set(get, user, "WORLD_SIZE")) r = bt__env_torchrun(get, user, e);
    else if (bt__env_set(get, user, "OMPI_COMM_WORLD_SIZE") || bt__env_set(get, user, "OMPI_COMM_WORLD_RANK"))
        r = bt__env_mpi(get, user, e);
    else if (bt__env_set(get, user, "SLURM_PROCID")) r = bt__env_slurm(get, user, e);
    else { e->world = 1; e->local_world = 1; return 0; }
    if (r == 0) r = bt__env_check(e);
    if (r == 0 && e->world > 1) r = bt__env_secret(get, user, e);
    return r;
}

static const char *bt__getenv(const char *name, void *user) { (void)user; return getenv(name); }
BTDEF int bt_dist_env_read(bt_dist_env *e) { return bt_dist_env_parse(bt__getenv, NULL, e); }

/* ============================================================================================
   2. device mesh
   ============================================================================================ */
BTDEF int bt_mesh_init(bt_mesh *m, int world, int tp, int cp) {
    memset(m, 0, sizeof *m);
    if (world < 1) return bt__dist_fail_msg("mesh: world size %d; expected >= 1", world);
    if (tp < 1 || cp < 1) return bt__dist_fail_msg("mesh: tp %d, cp %d; expected sizes >= 1", tp, cp);
    if (world % (tp * cp))
        return bt__dist_fail_msg("mesh: world %d is not divisible by tp x cp = %d x %d = %d", world, tp, cp, tp * cp);
    m->world = world; m->tp = tp; m->cp = cp; m->dp = world / (tp * cp);
    return 0;
}
BTDEF int bt_mesh_rank(const bt_mesh *m, int dp_i, int tp_i, int cp_i) { return (dp_i * m->cp + cp_i) * m->tp + tp_i; }
BTDEF int bt_mesh_size(const bt_mesh *m, bt_mesh_axis a) { return a == BT_MESH_TP ? m->tp : a == BT_MESH_CP ? m->cp : m->dp; }
BTDEF int bt_mesh_coord(const bt_mesh *m, int rank, bt_mesh_axis a) {
    if (a == BT_MESH_TP) return rank % m->tp;
    if (a == BT_MESH_CP) return rank / m->tp % m->cp;
    return rank / (m->tp * m->cp);
}
static int bt__mesh_with(const bt_mesh *m, int rank, bt_mesh_axis a, int v) {   /* rank with coord a := v */
    int c[3] = {bt_mesh_coord(m, rank, BT_MESH_DP), bt_mesh_coord(m, rank, BT_MESH_TP), bt_mesh_coord(m, rank, BT_MESH_CP)};
    c[a] = v;
    return bt_mesh_rank(m, c[0], c[1], c[2]);
}
BTDEF int bt_mesh_group(const bt_mesh *m, int rank, bt_mesh_axis a, int *ranks) {
    int n = bt_mesh_size(m, a);
    for (int i = 0; i < n; i++) ranks[i] = bt__mesh_with(m, rank, a, i);
    return n;
}
BTDEF int bt_mesh_color(const bt_mesh *m, int rank, bt_mesh_axis a) { return bt__mesh_with(m, rank, a, 0); }

/* ============================================================================================
   3. bucket planner
   ============================================================================================ */
static const bt_param_span *bt__sort_spans;
static int bt__span_desc(const void *pa, const void *pb) {   /* by offset, then end, descending */
    const bt_param_span *a = &bt__sort_spans[*(const int *)pa], *b = &bt__sort_spans[*(const int *)pb];
    if (a->offset != b->offset) return a->offset < b->offset ? 1 : -1;
    if (a->numel != b->numel) return a->numel < b->numel ? 1 : -1;
    return *(const int *)pa - *(const int *)pb;
}

BTDEF void bt_bucket_plan_free(bt_bucket_plan *p) {
    bt__dist_free(p->buckets); bt__dist_free(p->order); bt__dist_free(p->param_bucket);
    memset(p, 0, sizeof *p);
}

static int bt__plan_check(const bt_param_span *params, int n, size_t elem_size) {
    if (n < 0) return bt__dist_fail_msg("bucket plan: %d parameters", n);
    if (elem_size == 0) return bt__dist_fail_msg("bucket plan: element size 0");
    for (int i = 0; i < n; i++)
        if (params[i].offset < 0 || params[i].numel < 0)
            return bt__dist_fail_msg("bucket plan: parameter %d has offset %lld, numel %lld; expected both >= 0", i,
                                     (long long)params[i].offset, (long long)params[i].numel);
    return 0;
}

/* Greedy from the end: a bucket grows down while its span stays within the cap; the parameter
   that would break it starts the next one (alone, if it is larger than the cap itself). */
BTDEF int bt_bucket_plan_make(bt_bucket_plan *p, const bt_param_span *params, int n, size_t elem_size, size_t cap_bytes) {
    memset(p, 0, sizeof *p);
    if (bt__plan_check(params, n, elem_size)) return -1;
    int64_t cap = (int64_t)((cap_bytes ? cap_bytes : BT_DIST_BUCKET_CAP_DEFAULT) / elem_size);
    if (cap < 1) cap = 1;
    p->n_params = n;
    p->order = (int *)bt__dist_calloc((size_t)n, sizeof(int));
    p->param_bucket = (int *)bt__dist_calloc((size_t)n, sizeof(int));
    p->buckets = (bt_bucket *)bt__dist_calloc((size_t)n, sizeof(bt_bucket));
    for (int i = 0; i < n; i++) p->order[i] = i;
    bt__sort_spans = params;
    qsort(p->order, (size_t)n, sizeof(int), bt__span_desc);
    for (int k = 1; k < n; k++) {
        const bt_param_span *hi = &params[p->order[k - 1]], *lo = &params[p->order[k]];
        if (lo->offset + lo->numel > hi->offset && lo->numel > 0 && hi->numel > 0) {
            int a = p->order[k], b = p->order[k - 1];
            bt_bucket_plan_free(p);
            return bt__dist_fail_msg("bucket plan: parameters %d [%lld, %lld) and %d [%lld, %lld) overlap", a,
                                     (long long)params[a].offset, (long long)(params[a].offset + params[a].numel), b,
                                     (long long)params[b].offset, (long long)(params[b].offset + params[b].numel));
        }
    }
    bt_bucket *cur = NULL;
    for (int k = 0; k < n; k++) {
        const bt_param_span *s = &params[p->order[k]];
        if (!cur || cur->hi - s->offset > cap) {
            cur = &p->buckets[p->n_buckets++];
            cur->hi = s->offset + s->numel; cur->lo = s->offset; cur->first = k; cur->count = 0;
        }
        if (s->offset < cur->lo) cur->lo = s->offset;
        cur->count++;
        p->param_bucket[p->order[k]] = p->n_buckets - 1;
    }
    return 0;
}

BTDEF int64_t bt_shard_numel(int64_t total, int world, int64_t align) {
    if (world < 1) world = 1;
    if (align < 1) align = 1;
    int64_t s = (total + world - 1) / world;
    return (s + align - 1) / align * align;
}

/* ============================================================================================
   4. the --nproc launcher
   ============================================================================================ */
static int bt__set_nonblock(int fd) {
    int fl = fcntl(fd, F_GETFL, 0);
    return fl < 0 ? -1 : fcntl(fd, F_SETFL, fl | O_NONBLOCK);
}
static void bt__fd_write_all(int fd, const char *buf, size_t n) {   /* best effort, blocking fd */
    while (n) {
        ssize_t w = write(fd, buf, n);
        if (w < 0 && errno == EINTR) continue;
        if (w <= 0) return;
        buf += w; n -= (size_t)w;
    }
}
#if defined(__GNUC__)
__attribute__((format(printf, 1, 2)))
#endif
static void bt__launcher_say(const char *fmt, ...) {   /* one line to stderr, one write */
    char line[512];
    int k = snprintf(line, sizeof line, "bt_dist: ");
    va_list ap;
    va_start(ap, fmt);
    k += vsnprintf(line + k, sizeof line - (size_t)k - 1, fmt, ap);
    va_end(ap);
    if (k > (int)sizeof line - 2) k = (int)sizeof line - 2;
    line[k++] = '\n';
    bt__fd_write_all(2, line, (size_t)k);
}

BTDEF int bt_dist_free_port(const char *host) {
    struct sockaddr_in a;
    memset(&a, 0, sizeof a);
    a.sin_family = AF_INET;
    a.sin_port = 0;
    if (inet_pton(AF_INET, host ? host : "127.0.0.1", &a.sin_addr) != 1) a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    if (fd < 0) return -1;
    socklen_t len = sizeof a;
    int port = -1;
    if (bind(fd, (struct sockaddr *)&a, sizeof a) == 0 && getsockname(fd, (struct sockaddr *)&a, &len) == 0) port = ntohs(a.sin_port);
    close(fd);
    return port;
}

/* A rank's stderr, cut into lines that go out whole with the "[rank k] " prefix. */
typedef struct { int fd; size_t len; char buf[4096]; } bt__relay;

static void bt__relay_line(int rank, const char *s, size_t n) {
    char out[4096 + 32];
    int k = snprintf(out, 32, "[rank %d] ", rank);
    memcpy(out + k, s, n);
    out[(size_t)k + n] = '\n';
    bt__fd_write_all(2, out, (size_t)k + n + 1);
}
static void bt__relay_feed(bt__relay *r, int rank, const char *s, size_t n) {
    for (size_t i = 0; i < n; i++) {
        if (s[i] == '\n') { bt__relay_line(rank, r->buf, r->len); r->len = 0; continue; }
        if (r->len == sizeof r->buf) { bt__relay_line(rank, r->buf, r->len); r->len = 0; }
        r->buf[r->len++] = s[i];
    }
}
static void bt__relay_read(bt__relay *r, int rank) {   /* drains what is there; closes on EOF */
    char tmp[4096];
    for (;;) {
        ssize_t n = read(r->fd, tmp, sizeof tmp);
        if (n > 0) { bt__relay_feed(r, rank, tmp, (size_t)n); continue; }
        if (n < 0 && errno == EINTR) continue;
        if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) return;
        if (r->len) { bt__relay_line(rank, r->buf, r->len); r->len = 0; }
        close(r->fd); r->fd = -1;
        return;
    }
}

static volatile sig_atomic_t bt__launcher_signal;
static void bt__launcher_on_signal(int sig) { bt__launcher_signal = sig; }

typedef struct {
    int n;
    pid_t *pid;
    int *status, *done;        /* waitpid status; 1 once reaped */
    bt__relay *err;
    int fail_rank, fail_code;  /* the first failure; -1 none */
    double stop_at, kill_at;   /* when the survivors get SIGTERM, then SIGKILL; 0 = not planned */
    int termed, killed, got_signal;
} bt__sup;

static void bt__sup_signal_all(bt__sup *S, int sig) {
    for (int k = 0; k < S->n; k++) if (!S->done[k]) kill(S->pid[k], sig);
}

static void bt__sup_reaped(bt__sup *S, int k, int st, const bt_spawn_opts *o) {
    S->done[k] = 1; S->status[k] = st;
    int ok = WIFEXITED(st) && WEXITSTATUS(st) == 0;
    if (ok) return;
    int code = WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
    int ours = WIFSIGNALED(st) && (S->termed || S->killed || S->got_signal);
    if (WIFEXITED(st)) bt__launcher_say("rank %d exited with code %d", k, WEXITSTATUS(st));
    else if (!ours) bt__launcher_say("rank %d was killed by signal %d (%s)", k, WTERMSIG(st), strsignal(WTERMSIG(st)));
    if (S->fail_rank >= 0 || S->got_signal) return;
    S->fail_rank = k; S->fail_code = code;
    S->stop_at = bt__now() + (o->stop_delay_s > 0 ? o->stop_delay_s : 3.0);
    int alive = 0;
    for (int j = 0; j < S->n; j++) alive += !S->done[j];
    if (alive) bt__launcher_say("stopping the other ranks");
}

static void bt__sup_poll_pipes(bt__sup *S, int timeout_ms) {
    struct pollfd pf[1024];
    int idx[1024], m = 0;
    for (int k = 0; k < S->n && m < 1024; k++)
        if (S->err[k].fd >= 0) { pf[m].fd = S->err[k].fd; pf[m].events = POLLIN; pf[m].revents = 0; idx[m++] = k; }
    if (poll(pf, (nfds_t)m, timeout_ms) <= 0) return;
    for (int i = 0; i < m; i++) if (pf[i].revents) bt__relay_read(&S->err[idx[i]], idx[i]);
}

static void bt__sup_escalate(bt__sup *S, const bt_spawn_opts *o) {
    double now = bt__now();
    if (S->stop_at > 0 && !S->termed && now >= S->stop_at) {
        S->termed = 1; bt__sup_signal_all(S, SIGTERM);
        S->kill_at = now + (o->kill_grace_s > 0 ? o->kill_grace_s : 5.0);
    }
    if (S->kill_at > 0 && !S->killed && now >= S->kill_at) { S->killed = 1; bt__sup_signal_all(S, SIGKILL); }
}

/* The parent: relay, reap, pass signals on, stop the others after a failure; never returns. */
static void bt__supervise(bt__sup *S, const bt_spawn_opts *o) {
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = bt__launcher_on_signal;
    sigemptyset(&sa.sa_mask);
    sigaction(SIGINT, &sa, NULL); sigaction(SIGTERM, &sa, NULL); sigaction(SIGHUP, &sa, NULL);
    signal(SIGPIPE, SIG_IGN);
    int alive = S->n;
    while (alive) {
        bt__sup_poll_pipes(S, 50);
        int sig = bt__launcher_signal;
        if (sig) {
            bt__launcher_signal = 0;
            if (!S->got_signal) bt__launcher_say("got signal %d (%s): passing it to the ranks", sig, strsignal(sig));
            S->got_signal = sig;
            bt__sup_signal_all(S, sig);
            if (S->stop_at == 0) S->stop_at = bt__now() + (o->stop_delay_s > 0 ? o->stop_delay_s : 3.0);
        }
        int st;
        pid_t p;
        while ((p = waitpid(-1, &st, WNOHANG)) > 0)
            for (int k = 0; k < S->n; k++)
                if (S->pid[k] == p && !S->done[k]) { bt__sup_reaped(S, k, st, o); alive--; }
        bt__sup_escalate(S, o);
    }
    for (int k = 0; k < S->n; k++) if (S->err[k].fd >= 0) bt__relay_read(&S->err[k], k);   /* the rest */
    int code = S->got_signal ? 128 + S->got_signal : S->fail_rank >= 0 ? S->fail_code : 0;
    bt__dist_free(S->pid); bt__dist_free(S->status); bt__dist_free(S->done); bt__dist_free(S->err);
    fflush(NULL);
    exit(code);
}

static void bt__child_env(int rank, const bt_spawn_opts *o, const char *addr, int port, const char *secret) {
    char v[32];
    snprintf(v, sizeof v, "%d", rank); setenv("RANK", v, 1); setenv("LOCAL_RANK", v, 1);
    snprintf(v, sizeof v, "%d", o->nproc); setenv("WORLD_SIZE", v, 1); setenv("LOCAL_WORLD_SIZE", v, 1);
    snprintf(v, sizeof v, "%d", port); setenv("MASTER_PORT", v, 1);
    setenv("MASTER_ADDR", addr, 1);
    setenv("BT_DIST_SECRET", secret, 1);
    setenv("NCCL_NVLS_ENABLE", "0", 0);
}

/* this launch's rendezvous secret: 32 random bytes in hex, which only its ranks are given */
static int bt__new_secret(char out[65]) {
    unsigned char b[32];
    if (bt__random(b, sizeof b)) return -1;
    for (int i = 0; i < 32; i++) snprintf(out + 2 * i, 3, "%02x", b[i]);
    return 0;
}

/* in the child: stderr -> its pipe, stdout -> the parent's (rank 0) or /dev/null; die with the parent */
static void bt__child_setup(bt__sup *S, int k, int *wfd, pid_t parent) {
    for (int j = 0; j < S->n; j++) if (S->err[j].fd >= 0) close(S->err[j].fd);
    if (wfd[k] != 2) { dup2(wfd[k], 2); close(wfd[k]); }   /* the others' write ends are closed already */
    if (k > 0) {
        int nul = open("/dev/null", O_WRONLY);
        if (nul >= 0) { dup2(nul, 1); close(nul); }
    }
#ifdef __linux__
    prctl(PR_SET_PDEATHSIG, SIGTERM);
#endif
    if (getppid() != parent) _exit(1);
    bt__dist_free(S->pid); bt__dist_free(S->status); bt__dist_free(S->done); bt__dist_free(S->err); bt__dist_free(wfd);
}

BTDEF int bt_dist_spawn(const bt_spawn_opts *o) {
    if (o->nproc < 1 || o->nproc > 1024) return bt__dist_fail_msg("--nproc %d: expected 1 to 1024 processes", o->nproc);
    if (o->nproc == 1) return 0;
    const char *addr = o->master_addr ? o->master_addr : "127.0.0.1";
    int port = o->master_port ? o->master_port : bt_dist_free_port(addr);
    if (port <= 0 || port > 65535) return bt__dist_fail_msg("--nproc: found no free TCP port on %s", addr);
    char secret[65];
    if (bt__new_secret(secret)) return bt__dist_fail_msg("--nproc: cannot read /dev/urandom for the ranks' rendezvous secret: %s", strerror(errno));
    bt__sup S;
    memset(&S, 0, sizeof S);
    S.n = o->nproc; S.fail_rank = -1;
    S.pid = (pid_t *)bt__dist_calloc((size_t)S.n, sizeof(pid_t));
    S.status = (int *)bt__dist_calloc((size_t)S.n, sizeof(int));
    S.done = (int *)bt__dist_calloc((size_t)S.n, sizeof(int));
    S.err = (bt__relay *)bt__dist_calloc((size_t)S.n, sizeof(bt__relay));
    int *wfd = (int *)bt__dist_calloc((size_t)S.n, sizeof(int));
    for (int k = 0; k < S.n; k++) S.err[k].fd = -1;
    fflush(NULL);
    pid_t parent = getpid();
    for (int k = 0; k < S.n; k++) {
        int pfd[2];
        if (pipe(pfd) != 0) { bt__launcher_say("pipe: %s", strerror(errno)); bt__sup_signal_all(&S, SIGKILL); exit(1); }
        S.err[k].fd = pfd[0]; wfd[k] = pfd[1];
        pid_t p = fork();
        if (p < 0) { bt__launcher_say("fork: %s", strerror(errno)); S.n = k; bt__sup_signal_all(&S, SIGKILL); exit(1); }
        if (p == 0) {
            bt__child_setup(&S, k, wfd, parent);
            bt__child_env(k, o, addr, port, secret);
            return k;
        }
        S.pid[k] = p;
        close(wfd[k]);
        bt__set_nonblock(pfd[0]);
    }
    bt__dist_free(wfd);
    bt__supervise(&S, o);
    return -1;   /* not reached */
}

BTDEF int bt_dist_launch(int nproc) {
    if (nproc <= 1) return 0;
#if !BT_DIST_NCCL
    bt_error("--nproc %d: this build has no CUDA/NCCL; build with nvcc (make) to run more than one process", nproc);
#endif
    const char *r = getenv("RANK") ? "RANK" : getenv("OMPI_COMM_WORLD_RANK") ? "OMPI_COMM_WORLD_RANK" : NULL;
    if (r) bt_error("--nproc %d: this process was already started by a launcher (%s=%s); drop --nproc", nproc, r, getenv(r));
    const char *nt = getenv("SLURM_STEP_NUM_TASKS");
    if (getenv("SLURM_PROCID") && nt && atoi(nt) > 1)
        bt_error("--nproc %d: running as one of %s srun tasks (SLURM_STEP_NUM_TASKS); let srun start the ranks or drop --nproc", nproc, nt);
    bt_spawn_opts o;
    memset(&o, 0, sizeof o);
    o.nproc = nproc;
    int rank = bt_dist_spawn(&o);
    if (rank < 0) bt_error("%s", bt_dist_error());
    return rank;
}

/* ============================================================================================
   5. TCP store
   A star around rank 0. Every message starts with a 16-byte header {magic, type, a, b} (network
   order), some with a body after it.
   Handshake, on each of a rank's two connections, keyed by the job's secret K (bt_dist_env.secret)
   through HMAC-SHA-256; kind = HELLO_DATA or HELLO_LIVE, r = the rank, w = its world:
     rank 0 -> {CHALLENGE, 0, 32} + n0          n0: 32 random bytes, new for each connection
     rank r -> {kind, r, w} + n1 + HMAC(K, "hello" | kind r w | n0 | n1)
     rank 0 -> {ACK, 0, world} + HMAC(K, "rank 0" | kind r w | n0 | n1)  or  {NAK, reason, world}
   Rank 0 serves every connection at once (poll), each with BT__HELLO_S to send its hello; one
   without a valid proof is refused with a warning (NAK AUTH where it sent a whole hello) and the
   rendezvous goes on. A rank accepts rank 0's answer only with rank 0's proof. Only a proven
   rank's mismatch (world, rank, a rank twice) stops the rendezvous. The secret never crosses the
   wire; n0 makes a recorded hello useless on another connection, n1 a recorded answer. Nothing
   after the handshake is keyed: a host that can take over a TCP connection is out of scope.
   Broadcast: rank 0 sends {BCAST, n} + n bytes. All-gather: each sends {GATHER, n} + n bytes to
   rank 0, which answers {ALL, world*n} + all. Liveness: {BYE} (leaving cleanly), {ABORT} (this
   rank failed) to rank 0; {FAILED, rank, aborted} from rank 0.
   ============================================================================================ */
#define BT__STORE_MAGIC 0x42544432u   /* "BTD2": the keyed handshake ("BTDS" was the one before) */
enum { BT__M_HELLO_DATA = 1, BT__M_HELLO_LIVE, BT__M_ACK, BT__M_NAK, BT__M_BCAST, BT__M_GATHER, BT__M_ALL,
       BT__M_BYE, BT__M_ABORT, BT__M_FAILED, BT__M_CHALLENGE };
enum { BT__NAK_WORLD = 1, BT__NAK_RANK, BT__NAK_DUP, BT__NAK_AUTH };
#define BT__HELLO_S 2.0        /* a new connection's time to send its hello */
#define BT__WAITING_MAX 64     /* connections waiting for their hello; one more pushes out the oldest */
#define BT__WARN_MAX 5         /* refused connections reported, then quiet */

struct bt_store {
    int rank, world, port;
    double timeout_s;
    char host[BT_DIST_HOST_MAX];
    char secret[BT_DIST_SECRET_MAX];
    char bound[64];             /* rank 0: the address it listens on, for messages */
    int listen_fd;
    int *data_fd, *live_fd;     /* rank 0: [world] (index = peer rank); others: [1], the link to rank 0 */
    int *left;                  /* rank 0: rank k said goodbye */
    unsigned char (*live_buf)[16];
    int *live_len;
};

typedef struct { uint32_t magic, type, a, b; } bt__msg;

static void bt__msg_pack(unsigned char out[16], uint32_t type, uint32_t a, uint32_t b) {
    uint32_t w[4] = {htonl(BT__STORE_MAGIC), htonl(type), htonl(a), htonl(b)};
    memcpy(out, w, 16);
}
static bt__msg bt__msg_unpack(const unsigned char in[16]) {
    uint32_t w[4];
    memcpy(w, in, 16);
    bt__msg m = {ntohl(w[0]), ntohl(w[1]), ntohl(w[2]), ntohl(w[3])};
    return m;
}

/* ---- SHA-256 (FIPS 180-4) and HMAC-SHA-256 (RFC 2104): the handshake's proofs ---- */
typedef struct { uint32_t h[8]; uint64_t bytes; unsigned char buf[64]; } bt__sha256;

static const uint32_t bt__sha256_k[64] = {   /* the cube roots of the first 64 primes, fractions' first 32 bits */
    0x428a2f98, 0x71374491, 0xb5c0fbcf, 0xe9b5dba5, 0x3956c25b, 0x59f111f1, 0x923f82a4, 0xab1c5ed5, 0xd807aa98, 0x12835b01,
    0x243185be, 0x550c7dc3, 0x72be5d74, 0x80deb1fe, 0x9bdc06a7, 0xc19bf174, 0xe49b69c1, 0xefbe4786, 0x0fc19dc6, 0x240ca1cc,
    0x2de92c6f, 0x4a7484aa, 0x5cb0a9dc, 0x76f988da, 0x983e5152, 0xa831c66d, 0xb00327c8, 0xbf597fc7, 0xc6e00bf3, 0xd5a79147,
    0x06ca6351, 0x14292967, 0x27b70a85, 0x2e1b2138, 0x4d2c6dfc, 0x53380d13, 0x650a7354, 0x766a0abb, 0x81c2c92e, 0x92722c85,
    0xa2bfe8a1, 0xa81a664b, 0xc24b8b70, 0xc76c51a3, 0xd192e819, 0xd6990624, 0xf40e3585, 0x106aa070, 0x19a4c116, 0x1e376c08,
    0x2748774c, 0x34b0bcb5, 0x391c0cb3, 0x4ed8aa4a, 0x5b9cca4f, 0x682e6ff3, 0x748f82ee, 0x78a5636f, 0x84c87814, 0x8cc70208,
    0x90befffa, 0xa4506ceb, 0xbef9a3f7, 0xc67178f2};

#define BT__ROR32(x, r) ((x) >> (r) | (x) << (32 - (r)))
static void bt__sha256_block(uint32_t h[8], const unsigned char *p) {
    uint32_t w[64], v[8];
    for (int i = 0; i < 16; i++) w[i] = (uint32_t)p[4 * i] << 24 | (uint32_t)p[4 * i + 1] << 16 | (uint32_t)p[4 * i + 2] << 8 | p[4 * i + 3];
    for (int i = 16; i < 64; i++)
        w[i] = w[i - 16] + w[i - 7] + (BT__ROR32(w[i - 15], 7) ^ BT__ROR32(w[i - 15], 18) ^ w[i - 15] >> 3) +
               (BT__ROR32(w[i - 2], 17) ^ BT__ROR32(w[i - 2], 19) ^ w[i - 2] >> 10);
    memcpy(v, h, sizeof v);
    for (int i = 0; i < 64; i++) {   /* v = a b c d e f g h; each round shifts them by one */
        uint32_t a = v[0], e = v[4];
        uint32_t t1 = v[7] + (BT__ROR32(e, 6) ^ BT__ROR32(e, 11) ^ BT__ROR32(e, 25)) + ((e & v[5]) ^ (~e & v[6])) + bt__sha256_k[i] + w[i];
        uint32_t t2 = (BT__ROR32(a, 2) ^ BT__ROR32(a, 13) ^ BT__ROR32(a, 22)) + ((a & v[1]) ^ (a & v[2]) ^ (v[1] & v[2]));
        memmove(v + 1, v, 7 * sizeof v[0]);
        v[4] += t1; v[0] = t1 + t2;
    }
    for (int i = 0; i < 8; i++) h[i] += v[i];
}
static void bt__sha256_init(bt__sha256 *c) {
    static const uint32_t h0[8] = {0x6a09e667, 0xbb67ae85, 0x3c6ef372, 0xa54ff53a, 0x510e527f, 0x9b05688c, 0x1f83d9ab, 0x5be0cd19};
    memcpy(c->h, h0, sizeof h0);
    c->bytes = 0;
}
static void bt__sha256_add(bt__sha256 *c, const void *data, size_t n) {
    const unsigned char *p = (const unsigned char *)data;
    while (n) {
        size_t at = (size_t)(c->bytes % 64), k = 64 - at < n ? 64 - at : n;
        memcpy(c->buf + at, p, k);
        c->bytes += k; p += k; n -= k;
        if (c->bytes % 64 == 0) bt__sha256_block(c->h, c->buf);
    }
}
static void bt__sha256_end(bt__sha256 *c, unsigned char out[32]) {   /* pad: 0x80, zeros, the length in bits */
    unsigned char pad[64] = {0x80}, len[8];
    size_t at = (size_t)(c->bytes % 64);
    uint64_t bits = c->bytes * 8;
    for (int i = 0; i < 8; i++) len[i] = (unsigned char)(bits >> (56 - 8 * i));
    bt__sha256_add(c, pad, at < 56 ? 56 - at : 120 - at);
    bt__sha256_add(c, len, 8);
    for (int i = 0; i < 32; i++) out[i] = (unsigned char)(c->h[i / 4] >> (24 - 8 * (i % 4)));
}
/* HMAC-SHA-256: H((K ^ opad) | H((K ^ ipad) | msg)), K the key zero-padded to 64 bytes (hashed first
   when longer) */
static void bt__hmac_sha256(const void *key, size_t kn, const void *msg, size_t mn, unsigned char out[32]) {
    unsigned char k[64], pad[64], inner[32];
    bt__sha256 c;
    memset(k, 0, sizeof k);
    if (kn > 64) { bt__sha256_init(&c); bt__sha256_add(&c, key, kn); bt__sha256_end(&c, k); }
    else if (kn) memcpy(k, key, kn);
    for (int i = 0; i < 64; i++) pad[i] = k[i] ^ 0x36;
    bt__sha256_init(&c); bt__sha256_add(&c, pad, 64); bt__sha256_add(&c, msg, mn); bt__sha256_end(&c, inner);
    for (int i = 0; i < 64; i++) pad[i] = k[i] ^ 0x5c;
    bt__sha256_init(&c); bt__sha256_add(&c, pad, 64); bt__sha256_add(&c, inner, 32); bt__sha256_end(&c, out);
}

/* 32 bytes no other connection has had: the kernel's, else a hash of the time, process and a count */
static void bt__nonce(unsigned char out[32]) {
    static uint64_t count;
    if (bt__random(out, 32) == 0) return;
    struct { double t; uint64_t n; long pid; } x;
    memset(&x, 0, sizeof x);
    x.t = bt__now(); x.n = ++count; x.pid = (long)getpid();
    bt__sha256 c;
    bt__sha256_init(&c); bt__sha256_add(&c, &x, sizeof x); bt__sha256_end(&c, out);
}

/* a side's proof: HMAC-SHA-256 under the job's secret of the label ("hello" a rank's, "rank 0" rank
   0's answer), the connection's kind, rank and world, and both nonces */
static void bt__store_proof(const bt_store *s, const char *label, uint32_t kind, uint32_t rank, uint32_t world,
                            const unsigned char *n0, const unsigned char *n1, unsigned char out[32]) {
    unsigned char m[8 + 12 + 64];
    uint32_t w[3] = {htonl(kind), htonl(rank), htonl(world)};
    memset(m, 0, 8);
    memcpy(m, label, strlen(label) < 8 ? strlen(label) : 8);
    memcpy(m + 8, w, 12); memcpy(m + 20, n0, 32); memcpy(m + 52, n1, 32);
    bt__hmac_sha256(s->secret, strlen(s->secret), m, sizeof m, out);
}
static int bt__same32(const unsigned char *a, const unsigned char *b) {   /* in a time that does not say where they differ */
    unsigned d = 0;
    for (int i = 0; i < 32; i++) d |= (unsigned)(a[i] ^ b[i]);
    return d == 0;
}

/* 0 done; -1 error (errno), -2 peer closed, -3 deadline passed */
static int bt__io(int fd, void *buf, size_t n, double deadline, int writing) {
    char *p = (char *)buf;
    while (n) {
        struct pollfd pf = {fd, (short)(writing ? POLLOUT : POLLIN), 0};
        int ms = bt__ms_until(deadline, 1.0);
        if (ms == 0 && bt__now() >= deadline) return -3;
        int r = poll(&pf, 1, ms);
        if (r < 0 && errno != EINTR) return -1;
        if (r <= 0) continue;
        ssize_t k = writing ? send(fd, p, n, MSG_NOSIGNAL) : recv(fd, p, n, 0);
        if (k > 0) { p += k; n -= (size_t)k; continue; }
        if (k == 0 && !writing) return -2;
        if (k < 0 && (errno == EINTR || errno == EAGAIN || errno == EWOULDBLOCK)) continue;
        return errno == EPIPE || errno == ECONNRESET ? -2 : -1;
    }
    return 0;
}
static const char *bt__io_why(int r) {
    return r == -2 ? "the connection closed" : r == -3 ? "timed out" : strerror(errno);
}

static int bt__send_msg(int fd, uint32_t type, uint32_t a, uint32_t b, double deadline) {
    unsigned char m[16];
    bt__msg_pack(m, type, a, b);
    return bt__io(fd, m, 16, deadline, 1);
}
static int bt__recv_msg(int fd, bt__msg *m, double deadline) {
    unsigned char raw[16];
    int r = bt__io(fd, raw, 16, deadline, 0);
    if (r == 0) *m = bt__msg_unpack(raw);
    return r;
}

static void bt__sock_opts(int fd, int live) {
    int one = 1;
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    if (!live) return;
    setsockopt(fd, SOL_SOCKET, SO_KEEPALIVE, &one, sizeof one);
#if defined(TCP_KEEPIDLE) && defined(TCP_KEEPINTVL) && defined(TCP_KEEPCNT)
    int idle = 10, intvl = 5, cnt = 3;   /* a vanished host is noticed in about 25 s */
    setsockopt(fd, IPPROTO_TCP, TCP_KEEPIDLE, &idle, sizeof idle);
    setsockopt(fd, IPPROTO_TCP, TCP_KEEPINTVL, &intvl, sizeof intvl);
    setsockopt(fd, IPPROTO_TCP, TCP_KEEPCNT, &cnt, sizeof cnt);
#endif
}

/* one non-blocking connect attempt to any address of host:port; fd or -1 (why filled) */
static int bt__connect_once(const char *host, int port, double deadline, char *why, size_t wl, int *fatal) {
    struct addrinfo hints, *res = NULL, *ai;
    char ps[16];
    memset(&hints, 0, sizeof hints);
    hints.ai_family = AF_UNSPEC; hints.ai_socktype = SOCK_STREAM;
    snprintf(ps, sizeof ps, "%d", port);
    int g = getaddrinfo(host, ps, &hints, &res);
    if (g) {
        snprintf(why, wl, "cannot resolve %s: %s", host, gai_strerror(g));
        *fatal = g != EAI_AGAIN;
        return -1;
    }
    int fd = -1;
    for (ai = res; ai && fd < 0; ai = ai->ai_next) {
        fd = socket(ai->ai_family, ai->ai_socktype, ai->ai_protocol);
        if (fd < 0) { snprintf(why, wl, "socket: %s", strerror(errno)); continue; }
        bt__set_nonblock(fd);
        int r = connect(fd, ai->ai_addr, ai->ai_addrlen);
        if (r != 0 && errno == EINPROGRESS) {
            struct pollfd pf = {fd, POLLOUT, 0};
            int err = 0;
            socklen_t el = sizeof err;
            r = poll(&pf, 1, bt__ms_until(deadline, 2.0)) == 1 && getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &el) == 0 && !err ? 0 : -1;
            if (r) errno = err ? err : ETIMEDOUT;
        }
        if (r != 0) { snprintf(why, wl, "%s", strerror(errno)); close(fd); fd = -1; }
    }
    freeaddrinfo(res);
    return fd;
}

/* connect, retrying with backoff until the deadline; -1 with the store error set */
static int bt__connect_retry(const bt_store *s, double t0, double deadline) {
    char why[768] = "no attempt";
    double backoff = 0.05;
    for (;;) {
        int fatal = 0, fd = bt__connect_once(s->host, s->port, deadline, why, sizeof why, &fatal);
        if (fd >= 0) return fd;
        if (fatal) return bt__dist_fail_msg("rank %d: could not reach rank 0 at %s:%d: %s (MASTER_ADDR)", s->rank, s->host, s->port, why);
        double left = deadline - bt__now();
        if (left <= 0) break;
        bt__sleep(backoff < left ? backoff : left);
        backoff = backoff * 2 > 1.0 ? 1.0 : backoff * 2;
    }
    return bt__dist_fail_msg("rank %d: could not reach rank 0 at %s:%d after %.3g s (last error: %s); is rank 0 running, and are "
                             "MASTER_ADDR and MASTER_PORT right?", s->rank, s->host, s->port, bt__now() - t0, why);
}

static const char *bt__nak_why(uint32_t reason) {
    return reason == BT__NAK_WORLD ? "its world size differs"
         : reason == BT__NAK_RANK  ? "the rank is out of range"
         : reason == BT__NAK_DUP   ? "another process already has this rank"
                                   : "it did not prove this job's secret (is BT_DIST_SECRET the same for every rank?)";
}

/* a rank's handshake on a new connection to rank 0: 0 admitted; 1 the connection closed before
   rank 0's answer (rank 0 may have pushed it out: connect again); -1 refused, or the peer is not
   this job's rank 0 (the error is set) */
static int bt__store_hello(const bt_store *s, int fd, uint32_t kind, double deadline) {
    unsigned char n0[32], out[80], got[32], want[32];
    bt__msg m;
    int r = bt__recv_msg(fd, &m, deadline);
    if (r == 0 && (m.magic != BT__STORE_MAGIC || m.type != BT__M_CHALLENGE || m.b != 32))
        return bt__dist_fail_msg("rank %d: %s:%d is not a BluTrain-C rank 0 of this version (bad handshake)", s->rank, s->host, s->port);
    if (r == 0) r = bt__io(fd, n0, 32, deadline, 0);
    if (r == 0) {   /* header, n1, proof */
        bt__msg_pack(out, kind, (uint32_t)s->rank, (uint32_t)s->world);
        bt__nonce(out + 16);
        bt__store_proof(s, "hello", kind, (uint32_t)s->rank, (uint32_t)s->world, n0, out + 16, out + 48);
        r = bt__io(fd, out, sizeof out, deadline, 1);
    }
    if (r == 0) r = bt__recv_msg(fd, &m, deadline);
    if (r == 0 && m.magic == BT__STORE_MAGIC && m.type == BT__M_ACK) r = bt__io(fd, got, 32, deadline, 0);
    if (r == -3)
        return bt__dist_fail_msg("rank %d: no handshake from %s:%d within %.3g s; is it this job's rank 0?", s->rank, s->host, s->port,
                                 s->timeout_s);
    if (r) return 1;
    if (m.magic != BT__STORE_MAGIC)
        return bt__dist_fail_msg("rank %d: %s:%d is not a BluTrain-C rank 0 (bad handshake)", s->rank, s->host, s->port);
    if (m.type == BT__M_NAK)
        return bt__dist_fail_msg("rank %d (of world %d): rank 0 at %s:%d refused this process: %s (rank 0's world is %u)",
                                 s->rank, s->world, s->host, s->port, bt__nak_why(m.a), m.b);
    if (m.type != BT__M_ACK)
        return bt__dist_fail_msg("rank %d: unexpected handshake reply %u from %s:%d", s->rank, m.type, s->host, s->port);
    bt__store_proof(s, "rank 0", kind, (uint32_t)s->rank, (uint32_t)s->world, n0, out + 16, want);
    if (!bt__same32(got, want))
        return bt__dist_fail_msg("rank %d: the process at %s:%d answered without this job's secret: it is not this job's rank 0 "
                                 "(another job on the same port, or BT_DIST_SECRET differs between the ranks)", s->rank, s->host, s->port);
    return 0;
}

/* a non-zero rank: the data and the liveness connection, each with its handshake */
static int bt__store_join(bt_store *s) {
    double t0 = bt__now(), deadline = t0 + s->timeout_s;
    for (uint32_t kind = BT__M_HELLO_DATA; kind <= BT__M_HELLO_LIVE; kind++)
        for (double backoff = 0.05;; backoff = backoff * 2 > 1.0 ? 1.0 : backoff * 2) {
            int fd = bt__connect_retry(s, t0, deadline);
            if (fd < 0) return -1;
            bt__sock_opts(fd, kind == BT__M_HELLO_LIVE);
            int r = bt__store_hello(s, fd, kind, deadline);
            if (r == 0) { *(kind == BT__M_HELLO_DATA ? s->data_fd : s->live_fd) = fd; break; }
            close(fd);
            if (r < 0) return -1;
            if (bt__now() + backoff >= deadline)
                return bt__dist_fail_msg("rank %d: %s:%d closed every connection before its answer, for %.3g s; is it this job's rank 0?",
                                         s->rank, s->host, s->port, s->timeout_s);
            bt__sleep(backoff);
        }
    return 0;
}

/* 1 for a loopback address: 127.0.0.0/8, ::1, ::ffff:127.0.0.0/104 */
static int bt__addr_loopback(const struct sockaddr *a) {
    if (a->sa_family == AF_INET) return ntohl(((const struct sockaddr_in *)(const void *)a)->sin_addr.s_addr) >> 24 == 127;
    if (a->sa_family != AF_INET6) return 0;
    const struct in6_addr *x = &((const struct sockaddr_in6 *)(const void *)a)->sin6_addr;
    return IN6_IS_ADDR_LOOPBACK(x) || (IN6_IS_ADDR_V4MAPPED(x) && x->s6_addr[12] == 127);
}
/* 1 when host means the loopback of whichever host reads it: "localhost" or a loopback number */
static int bt__host_loopback(const char *host) {
    struct addrinfo hints, *res = NULL;
    if (!strcmp(host, "localhost")) return 1;
    memset(&hints, 0, sizeof hints);
    hints.ai_flags = AI_NUMERICHOST; hints.ai_socktype = SOCK_STREAM;
    if (getaddrinfo(host, NULL, &hints, &res) != 0) return 0;
    int lo = bt__addr_loopback(res->ai_addr);
    freeaddrinfo(res);
    return lo;
}

/* a non-blocking listening socket on a, or -1 with errno */
static int bt__listen_at(const bt_store *s, const struct sockaddr *a, socklen_t n) {
    int fd = socket(a->sa_family, SOCK_STREAM, 0), one = 1, zero = 0;
    if (fd < 0) return -1;
    setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    if (a->sa_family == AF_INET6) setsockopt(fd, IPPROTO_IPV6, IPV6_V6ONLY, &zero, sizeof zero);   /* the wildcard: IPv4 too */
    if (bind(fd, a, n) != 0 || listen(fd, 2 * s->world + BT__WAITING_MAX) != 0) {
        int e = errno;
        close(fd); errno = e;
        return -1;
    }
    bt__set_nonblock(fd);
    return fd;
}
/* a bind error every address of this host would meet: the port is taken, or not ours to take */
static int bt__bind_final(int e) { return e == EADDRINUSE || e == EACCES; }

static int bt__listen_any(const bt_store *s) {   /* every interface: IPv6 and IPv4 on one socket, else IPv4 */
    struct sockaddr_in6 a6;
    struct sockaddr_in a4;
    memset(&a6, 0, sizeof a6); memset(&a4, 0, sizeof a4);
    a6.sin6_family = AF_INET6; a6.sin6_addr = in6addr_any; a6.sin6_port = htons((uint16_t)s->port);
    a4.sin_family = AF_INET; a4.sin_addr.s_addr = htonl(INADDR_ANY); a4.sin_port = htons((uint16_t)s->port);
    int fd = bt__listen_at(s, (const struct sockaddr *)&a6, sizeof a6);
    return fd >= 0 || bt__bind_final(errno) ? fd : bt__listen_at(s, (const struct sockaddr *)&a4, sizeof a4);
}

/* Rank 0 listens where MASTER_ADDR points (see RENDEZVOUS): on loopback for "localhost" or a
   loopback number; else on the first of its addresses that is this host's, skipping loopback ones
   (a host's own name mapped to 127.0.1.1, as Debian does, is reached from other hosts by another
   address). No address of this host (NAT, a container's published port, a name that does not
   resolve here): every interface. */
static int bt__store_listen(bt_store *s) {
    struct addrinfo hints, *res = NULL, *ai;
    char ps[16];
    memset(&hints, 0, sizeof hints);
    hints.ai_family = AF_UNSPEC; hints.ai_socktype = SOCK_STREAM; hints.ai_flags = AI_NUMERICSERV;
    snprintf(ps, sizeof ps, "%d", s->port);
    int loop = bt__host_loopback(s->host), g = getaddrinfo(s->host, ps, &hints, &res), fd = -1, err = 0, tried = 0;
    for (ai = g ? NULL : res; ai && fd < 0 && !bt__bind_final(err); ai = ai->ai_next) {
        if (!loop && bt__addr_loopback(ai->ai_addr)) continue;
        tried++;
        fd = bt__listen_at(s, ai->ai_addr, ai->ai_addrlen);
        err = fd < 0 ? errno : 0;
        if (fd >= 0 && getnameinfo(ai->ai_addr, ai->ai_addrlen, s->bound, sizeof s->bound, NULL, 0, NI_NUMERICHOST)) strcpy(s->bound, "?");
    }
    if (!g) freeaddrinfo(res);
    if (fd < 0 && !loop && !bt__bind_final(err)) {
        if (g) bt__launcher_say("rank 0: MASTER_ADDR=%s does not resolve here (%s): listening on every interface", s->host, gai_strerror(g));
        else if (tried) bt__launcher_say("rank 0: MASTER_ADDR=%s is not an address of this host: listening on every interface", s->host);
        fd = bt__listen_any(s);
        err = fd < 0 ? errno : 0;
        strcpy(s->bound, "every interface");
    }
    if (fd < 0)
        return bt__dist_fail_msg("rank 0: cannot listen on %s port %d (MASTER_ADDR, MASTER_PORT): %s", s->host, s->port,
                                 err ? strerror(err) : g ? gai_strerror(g) : "no address");
    s->listen_fd = fd;
    return 0;
}

static void bt__store_missing(const bt_store *s, char *out, size_t n) {   /* "1, 3" */
    size_t o = 0;
    out[0] = 0;
    for (int k = 1; k < s->world && o + 16 < n; k++)
        if (s->data_fd[k] < 0 || s->live_fd[k] < 0) o += (size_t)snprintf(out + o, n - o, "%s%d", o ? ", " : "", k);
}

/* rank 0's connections that have not proved themselves yet */
typedef struct {
    int fd, got;                 /* got: bytes of the hello read */
    double deadline;             /* for the whole hello */
    unsigned char nonce[32], hello[80];
    char peer[80];               /* "address:port", for the warnings */
} bt__caller;
typedef struct { bt__caller c[BT__WAITING_MAX]; int n, refused, unproved; } bt__door;

static void bt__door_refuse(const bt_store *s, bt__door *d, int i, const char *why) {   /* closes caller i, with a warning */
    if (++d->refused <= BT__WARN_MAX)
        bt__launcher_say("rank 0: refused a connection from %s to port %d: %s%s", d->c[i].peer, s->port, why,
                         d->refused == BT__WARN_MAX ? " (further refusals are not reported)" : "");
    close(d->c[i].fd);
    d->c[i] = d->c[--d->n];
}

/* a new connection: its challenge goes out at once; with the list full the oldest caller leaves */
static void bt__door_greet(const bt_store *s, bt__door *d, int fd, const struct sockaddr *a, socklen_t al) {
    if (d->n == BT__WAITING_MAX) {
        int old = 0;
        for (int i = 1; i < d->n; i++) if (d->c[i].deadline < d->c[old].deadline) old = i;
        bt__door_refuse(s, d, old, "too many connections were waiting for their hello");
    }
    bt__caller *c = &d->c[d->n++];
    char host[64], serv[16];
    if (getnameinfo(a, al, host, sizeof host, serv, sizeof serv, NI_NUMERICHOST | NI_NUMERICSERV)) snprintf(c->peer, sizeof c->peer, "?");
    else snprintf(c->peer, sizeof c->peer, "%s:%s", host, serv);
    c->fd = fd; c->got = 0; c->deadline = bt__now() + BT__HELLO_S;
    bt__set_nonblock(fd);
    unsigned char m[48];
    bt__msg_pack(m, BT__M_CHALLENGE, 0, 32);
    bt__nonce(c->nonce);
    memcpy(m + 16, c->nonce, 32);
    if (bt__io(fd, m, sizeof m, bt__now() + 0.5, 1)) bt__door_refuse(s, d, d->n - 1, "it closed at once");
}

/* caller i sent a whole hello: 1 admitted; 0 refused (no valid proof, or it left); -1 a proven
   rank that does not fit this job (the error is set: the rendezvous stops, as for a real mismatch) */
static int bt__door_admit(bt_store *s, bt__door *d, int i) {
    bt__caller *c = &d->c[i];
    bt__msg m = bt__msg_unpack(c->hello);
    unsigned char want[32], ack[48];
    bt__store_proof(s, "hello", m.type, m.a, m.b, c->nonce, c->hello + 16, want);
    if (!bt__same32(c->hello + 48, want)) {
        bt__send_msg(c->fd, BT__M_NAK, BT__NAK_AUTH, (uint32_t)s->world, bt__now() + 0.5);
        d->unproved++;
        bt__door_refuse(s, d, i, "its hello does not prove this job's secret (BT_DIST_SECRET)");
        return 0;
    }
    int fd = c->fd, rank = (int)m.a, live = m.type == BT__M_HELLO_LIVE;
    bt__msg_pack(ack, BT__M_ACK, 0, (uint32_t)s->world);
    bt__store_proof(s, "rank 0", m.type, m.a, m.b, c->nonce, c->hello + 16, ack + 16);
    d->c[i] = d->c[--d->n];   /* a rank of this job: it leaves the list */
    int *slot = rank >= 1 && rank < s->world ? (live ? &s->live_fd[rank] : &s->data_fd[rank]) : NULL;
    uint32_t nak = (int)m.b != s->world ? BT__NAK_WORLD : !slot ? BT__NAK_RANK : *slot >= 0 ? BT__NAK_DUP : 0;
    if (nak) {
        bt__send_msg(fd, BT__M_NAK, nak, (uint32_t)s->world, bt__now() + 1.0);
        close(fd);
        if (nak == BT__NAK_WORLD)
            return bt__dist_fail_msg("rank 0: a process that says it is rank %d of world %u connected to port %d, but this job's world "
                                     "is %d: the ranks disagree on WORLD_SIZE", rank, m.b, s->port, s->world);
        if (nak == BT__NAK_RANK)
            return bt__dist_fail_msg("rank 0: a process that says it is rank %d connected to port %d; expected ranks 1 to %d", rank,
                                     s->port, s->world - 1);
        return bt__dist_fail_msg("rank 0: two processes claim rank %d (check RANK / SLURM_PROCID of every process)", rank);
    }
    if (bt__io(fd, ack, sizeof ack, bt__now() + 1.0, 1)) { close(fd); return 0; }   /* it left; it connects again */
    bt__sock_opts(fd, live);
    *slot = fd;
    return 1;
}

/* reads what caller i sent: 1 admitted, 0 not yet or refused, -1 a fatal mismatch */
static int bt__door_read(bt_store *s, bt__door *d, int i) {
    bt__caller *c = &d->c[i];
    ssize_t k = recv(c->fd, c->hello + c->got, sizeof c->hello - (size_t)c->got, 0);
    if (k < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR)) return 0;
    if (k <= 0) { bt__door_refuse(s, d, i, "it closed before its hello"); return 0; }
    c->got += (int)k;
    if (c->got < 16) return 0;
    bt__msg m = bt__msg_unpack(c->hello);
    if (m.magic != BT__STORE_MAGIC || (m.type != BT__M_HELLO_DATA && m.type != BT__M_HELLO_LIVE)) {
        bt__door_refuse(s, d, i, "what it sent is not a BluTrain-C hello");
        return 0;
    }
    return c->got < (int)sizeof c->hello ? 0 : bt__door_admit(s, d, i);
}

static int bt__store_timed_out(const bt_store *s, const bt__door *d, int have) {
    char miss[256], more[160] = "";
    bt__store_missing(s, miss, sizeof miss);
    if (d->unproved)
        snprintf(more, sizeof more, " %d connection(s) did not prove this job's secret: is BT_DIST_SECRET the same for every rank?",
                 d->unproved);
    return bt__dist_fail_msg("rank 0: timed out after %.3g s waiting for rank(s) %s to connect to port %d on %s (%d of %d connected); "
                             "did every rank start, with the same MASTER_ADDR:MASTER_PORT?%s", s->timeout_s, miss, s->port, s->bound,
                             have / 2, s->world - 1, more);
}

/* rank 0: every caller at once (poll), until each rank has its two connections */
static int bt__store_accept_all(bt_store *s) {
    double deadline = bt__now() + s->timeout_s;
    int need = 2 * (s->world - 1), have = 0, r = 0;
    bt__door *d = (bt__door *)bt__dist_calloc(1, sizeof(bt__door));
    struct pollfd pf[1 + BT__WAITING_MAX];
    char late[64];
    snprintf(late, sizeof late, "it sent no hello within %.3g s", BT__HELLO_S);
    while (have < need && r == 0) {
        if (bt__now() >= deadline) { r = bt__store_timed_out(s, d, have); break; }
        double wake = deadline;
        int n = d->n;
        pf[0].fd = s->listen_fd; pf[0].events = POLLIN; pf[0].revents = 0;
        for (int i = 0; i < n; i++) {
            pf[1 + i].fd = d->c[i].fd; pf[1 + i].events = POLLIN; pf[1 + i].revents = 0;
            if (d->c[i].deadline < wake) wake = d->c[i].deadline;
        }
        if (poll(pf, (nfds_t)(1 + n), bt__ms_until(wake, 0.5)) < 0 && errno != EINTR) { r = bt__dist_fail_msg("rank 0: poll: %s", strerror(errno)); break; }
        for (int i = n - 1; i >= 0 && r == 0; i--) {   /* from the end: a caller that leaves takes the last one's place */
            int a = pf[1 + i].revents ? bt__door_read(s, d, i) : 0;
            if (a < 0) r = -1;
            else if (a > 0) have++;
            else if (!pf[1 + i].revents && bt__now() >= d->c[i].deadline) bt__door_refuse(s, d, i, late);
        }
        for (int k = 0; k < 16 && r == 0 && (pf[0].revents & POLLIN); k++) {
            struct sockaddr_storage a;
            socklen_t al = sizeof a;
            int fd = accept(s->listen_fd, (struct sockaddr *)&a, &al);
            if (fd < 0) break;
            bt__door_greet(s, d, fd, (const struct sockaddr *)&a, al);
        }
    }
    for (int i = 0; i < d->n; i++) close(d->c[i].fd);
    bt__dist_free(d);
    return r;
}

static void bt__store_free(bt_store *s) {
    if (!s) return;
    int n = s->rank == 0 ? s->world : 1;
    for (int k = 0; k < n; k++) {
        if (s->data_fd[k] >= 0) close(s->data_fd[k]);
        if (s->live_fd[k] >= 0) close(s->live_fd[k]);
    }
    if (s->listen_fd >= 0) close(s->listen_fd);
    memset(s->secret, 0, sizeof s->secret);
    bt__dist_free(s->data_fd); bt__dist_free(s->live_fd); bt__dist_free(s->left); bt__dist_free(s->live_buf); bt__dist_free(s->live_len);
    bt__dist_free(s);
}

BTDEF bt_store *bt_store_open(const char *host, int port, int rank, int world, double timeout_s, const char *secret) {
    if (world < 1 || rank < 0 || rank >= world) { bt__dist_fail_msg("store: rank %d of world %d", rank, world); return NULL; }
    if (port < 1 || port > 65535) { bt__dist_fail_msg("store: port %d (MASTER_PORT) is not in 1..65535", port); return NULL; }
    if (!host || !*host || strlen(host) >= BT_DIST_HOST_MAX) { bt__dist_fail_msg("store: bad host name (MASTER_ADDR)"); return NULL; }
    if (secret && strlen(secret) >= BT_DIST_SECRET_MAX) {
        bt__dist_fail_msg("store: the secret (BT_DIST_SECRET) is longer than %d characters", BT_DIST_SECRET_MAX - 1);
        return NULL;
    }
    bt_store *s = (bt_store *)bt__dist_calloc(1, sizeof(bt_store));
    int n = rank == 0 ? world : 1;
    s->rank = rank; s->world = world; s->port = port; s->listen_fd = -1;
    s->timeout_s = timeout_s > 0 ? timeout_s : 300;
    strcpy(s->host, host);
    if (secret) strcpy(s->secret, secret);
    s->data_fd = (int *)bt__dist_calloc((size_t)n, sizeof(int));
    s->live_fd = (int *)bt__dist_calloc((size_t)n, sizeof(int));
    s->left = (int *)bt__dist_calloc((size_t)n, sizeof(int));
    s->live_buf = (unsigned char(*)[16])bt__dist_calloc((size_t)n, 16);
    s->live_len = (int *)bt__dist_calloc((size_t)n, sizeof(int));
    for (int k = 0; k < n; k++) s->data_fd[k] = s->live_fd[k] = -1;
    int r = world == 1 ? 0 : rank == 0 ? (bt__store_listen(s) || bt__store_accept_all(s)) : bt__store_join(s);
    if (r) { bt__store_free(s); return NULL; }
    if (s->listen_fd >= 0) { close(s->listen_fd); s->listen_fd = -1; }
    return s;
}

BTDEF void bt_store_set_timeout(bt_store *s, double timeout_s) { if (timeout_s > 0) s->timeout_s = timeout_s; }

static int bt__store_io_fail(const bt_store *s, const char *op, int peer, int r) {
    if (s->rank == 0)
        return bt__dist_fail_msg("rank 0: store %s: rank %d: %s (after up to %.3g s)", op, peer, bt__io_why(r), s->timeout_s);
    return bt__dist_fail_msg("rank %d: store %s with rank 0 at %s:%d: %s (after up to %.3g s)", s->rank, op, s->host, s->port,
                             bt__io_why(r), s->timeout_s);
}
/* receive a header of the given type and size from fd */
static int bt__store_expect(const bt_store *s, int fd, int peer, uint32_t type, uint64_t n, const char *op, double deadline) {
    bt__msg m;
    int r = bt__recv_msg(fd, &m, deadline);
    if (r) return bt__store_io_fail(s, op, peer, r);
    uint64_t got = ((uint64_t)m.a << 32) | m.b;
    if (m.magic != BT__STORE_MAGIC || m.type != type || got != n)
        return bt__dist_fail_msg("rank %d: store %s: rank %d sent message %u of %llu bytes, expected %u of %llu (did the ranks call "
                                 "different store operations?)", s->rank, op, peer, m.type, (unsigned long long)got, type,
                                 (unsigned long long)n);
    return 0;
}
static int bt__store_send(const bt_store *s, int fd, int peer, uint32_t type, const void *buf, uint64_t n, const char *op,
                          double deadline) {
    int r = bt__send_msg(fd, type, (uint32_t)(n >> 32), (uint32_t)n, deadline);
    if (r == 0 && n) r = bt__io(fd, (void *)buf, (size_t)n, deadline, 1);
    return r ? bt__store_io_fail(s, op, peer, r) : 0;
}

BTDEF int bt_store_broadcast(bt_store *s, void *buf, size_t n) {
    double deadline = bt__now() + s->timeout_s;
    if (s->world == 1) return 0;
    if (s->rank != 0) {
        if (bt__store_expect(s, s->data_fd[0], 0, BT__M_BCAST, n, "broadcast", deadline)) return -1;
        int r = n ? bt__io(s->data_fd[0], buf, n, deadline, 0) : 0;
        return r ? bt__store_io_fail(s, "broadcast", 0, r) : 0;
    }
    for (int k = 1; k < s->world; k++)
        if (bt__store_send(s, s->data_fd[k], k, BT__M_BCAST, buf, n, "broadcast", deadline)) return -1;
    return 0;
}

BTDEF int bt_store_allgather(bt_store *s, const void *mine, void *all, size_t n) {
    double deadline = bt__now() + s->timeout_s;
    uint64_t total = (uint64_t)n * (uint64_t)s->world;
    if (n) memmove((char *)all + (size_t)s->rank * n, mine, n);
    if (s->world == 1) return 0;
    if (s->rank != 0) {
        if (bt__store_send(s, s->data_fd[0], 0, BT__M_GATHER, mine, n, "all-gather", deadline) ||
            bt__store_expect(s, s->data_fd[0], 0, BT__M_ALL, total, "all-gather", deadline))
            return -1;
        int r = total ? bt__io(s->data_fd[0], all, (size_t)total, deadline, 0) : 0;
        return r ? bt__store_io_fail(s, "all-gather", 0, r) : 0;
    }
    for (int k = 1; k < s->world; k++) {
        if (bt__store_expect(s, s->data_fd[k], k, BT__M_GATHER, n, "all-gather", deadline)) return -1;
        int r = n ? bt__io(s->data_fd[k], (char *)all + (size_t)k * n, n, deadline, 0) : 0;
        if (r) return bt__store_io_fail(s, "all-gather", k, r);
    }
    for (int k = 1; k < s->world; k++)
        if (bt__store_send(s, s->data_fd[k], k, BT__M_ALL, all, total, "all-gather", deadline)) return -1;
    return 0;
}

BTDEF int bt_store_barrier(bt_store *s) { return bt_store_allgather(s, NULL, NULL, 0); }

/* reads what a liveness socket has; returns 1 and *m for a whole message, 0 for nothing yet,
   -2 when the peer closed or the link broke */
static int bt__live_read(bt_store *s, int k, bt__msg *m) {
    int fd = s->live_fd[k];
    ssize_t r = recv(fd, s->live_buf[k] + s->live_len[k], (size_t)(16 - s->live_len[k]), 0);
    if (r == 0 || (r < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR)) return -2;
    if (r < 0) return 0;
    s->live_len[k] += (int)r;
    if (s->live_len[k] < 16) return 0;
    s->live_len[k] = 0;
    *m = bt__msg_unpack(s->live_buf[k]);
    return 1;
}

static int bt__check_root(bt_store *s, int timeout_ms, int *rank) {
    struct pollfd pf[1024];
    int idx[1024], n = 0;
    for (int k = 1; k < s->world && n < 1024; k++)
        if (s->live_fd[k] >= 0) { pf[n].fd = s->live_fd[k]; pf[n].events = POLLIN; pf[n].revents = 0; idx[n++] = k; }
    if (poll(pf, (nfds_t)n, timeout_ms) <= 0) return BT_PEER_OK;
    for (int i = 0; i < n; i++) {
        int k = idx[i];
        if (!pf[i].revents) continue;
        bt__msg m;
        int r = bt__live_read(s, k, &m);
        if (r == -2) {
            close(s->live_fd[k]); s->live_fd[k] = -1;
            if (!s->left[k]) { *rank = k; return BT_PEER_DIED; }
        } else if (r == 1 && m.type == BT__M_BYE) s->left[k] = 1;
        else if (r == 1 && m.type == BT__M_ABORT) { *rank = k; return BT_PEER_ABORTED; }
    }
    return BT_PEER_OK;
}

static int bt__check_member(bt_store *s, int timeout_ms, int *rank) {
    struct pollfd pf = {s->live_fd[0], POLLIN, 0};
    if (s->live_fd[0] < 0 || poll(&pf, 1, timeout_ms) <= 0) return BT_PEER_OK;
    bt__msg m;
    int r = bt__live_read(s, 0, &m);
    if (r == -2) { *rank = 0; return BT_PEER_DIED; }
    if (r == 1 && m.type == BT__M_FAILED) { *rank = (int)m.a; return m.b ? BT_PEER_ABORTED : BT_PEER_DIED; }
    return BT_PEER_OK;
}

BTDEF int bt_store_check_peers(bt_store *s, int timeout_ms, int *rank) {
    *rank = -1;
    if (s->world == 1) { poll(NULL, 0, timeout_ms); return BT_PEER_OK; }
    return s->rank == 0 ? bt__check_root(s, timeout_ms, rank) : bt__check_member(s, timeout_ms, rank);
}

BTDEF void bt_store_notify_failure(bt_store *s, int failed_rank, int aborted) {
    double deadline = bt__now() + 0.5;
    if (s->world == 1) return;
    if (s->rank != 0) {
        if (failed_rank == s->rank && s->live_fd[0] >= 0) bt__send_msg(s->live_fd[0], BT__M_ABORT, (uint32_t)s->rank, 0, deadline);
        return;
    }
    for (int k = 1; k < s->world; k++)
        if (k != failed_rank && s->live_fd[k] >= 0)
            bt__send_msg(s->live_fd[k], BT__M_FAILED, (uint32_t)failed_rank, (uint32_t)(aborted != 0), deadline);
}

/* rank 0 closes only after every other rank has said goodbye (or is gone), so no rank still
   watching its liveness link sees rank 0 vanish during a clean shutdown */
BTDEF void bt_store_close(bt_store *s) {
    if (!s) return;
    if (s->world > 1 && s->rank != 0 && s->live_fd[0] >= 0) bt__send_msg(s->live_fd[0], BT__M_BYE, (uint32_t)s->rank, 0, bt__now() + 1.0);
    if (s->world > 1 && s->rank == 0) {
        double deadline = bt__now() + s->timeout_s;
        for (int k = 1; k < s->world; k++) {
            while (s->live_fd[k] >= 0 && !s->left[k] && bt__now() < deadline) {
                struct pollfd pf = {s->live_fd[k], POLLIN, 0};
                if (poll(&pf, 1, bt__ms_until(deadline, 0.5)) <= 0) continue;
                bt__msg m;
                int r = bt__live_read(s, k, &m);
                if (r == -2) break;
                if (r == 1 && m.type == BT__M_BYE) s->left[k] = 1;
            }
        }
    }
    bt__store_free(s);
}

/* ============================================================================================
   6. process group: init, watchdog, faults, shutdown
   ============================================================================================ */
#define BT__DIST_RING 256   /* collectives in flight tracked by the watchdog */

typedef struct bt__dist_state {
    bt_store *store;
    bt_dist_opts opts;
    pthread_t watchdog;
    int watchdog_on, stop, failing;       /* stop, failing: __atomic */
    pthread_mutex_t nccl_lock, ring_lock;
    bt_comm *comms[BT_DIST_MAX_COMMS];
    int n_comms;
    char (*hosts)[64];                    /* every rank's host name */
    bt_error_fn prev_fn;
    void *prev_user;
    int handler_installed;
#if BT_DIST_NCCL
    struct { cudaEvent_t ev; double t0; const char *op; char comm[32]; } ring[BT__DIST_RING];
    int ring_head, ring_count, ring_ready;
#endif
} bt__dist_state;
/* A thread that meets a dying process stops here: the thread in bt__dist_die aborts the
   communicators (which lets a blocked replay or collective return) and _exits; nothing may train on
   meanwhile or return 0 from main before it does. */
static void bt__halt_if_failing(bt__dist_state *S) {
    if (__atomic_load_n(&S->failing, __ATOMIC_SEQ_CST)) for (;;) pause();
}

static const char *bt__host_of(const bt_dist *d, int rank) {
    return d->state->hosts && rank >= 0 && rank < d->world ? d->state->hosts[rank] : "?";
}

static void *bt__exit_guard(void *arg) {
    bt__sleep(*(double *)arg);
    bt__launcher_say("the abort did not finish in time: exiting");
    _exit(1);
    return NULL;
}
static void bt__start_exit_guard(void) {
    static double secs = 10.0;
    pthread_t t;
    if (pthread_create(&t, NULL, bt__exit_guard, &secs) == 0) pthread_detach(t);
}

static void bt__abort_comms(bt_dist *d) {
#if BT_DIST_NCCL
    bt__dist_state *S = d->state;
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    ts.tv_sec += 2;
    int locked = pthread_mutex_timedlock(&S->nccl_lock, &ts) == 0;   /* EDEADLK: this thread holds it */
    for (int i = 0; i < S->n_comms; i++)
        if (S->comms[i] && S->comms[i]->handle) { ncclCommAbort((ncclComm_t)S->comms[i]->handle); S->comms[i]->handle = NULL; }
    if (locked) pthread_mutex_unlock(&S->nccl_lock);
#else
    (void)d;
#endif
}

/* The one way out of a failed run: tell the others, say why, abort NCCL, _exit. The first
   thread to get here wins; a second one parks until the first has ended the process. */
static void bt__dist_die(bt_dist *d, int failed_rank, int aborted, const char *msg) {
    bt__dist_state *S = d->state;
    if (__atomic_exchange_n(&S->failing, 1, __ATOMIC_SEQ_CST)) for (;;) pause();
    if (S->store) bt_store_notify_failure(S->store, failed_rank, aborted);
    if (!S->opts.on_fault) { fprintf(stderr, "%s\n", msg); fflush(stderr); }
    bt__start_exit_guard();
    bt__abort_comms(d);
    if (S->opts.on_fault) S->opts.on_fault(msg, S->opts.on_fault_user);
    fflush(NULL);
    _exit(1);
}

BTDEF void bt_dist_abort(bt_dist *d, const char *msg) {
    char m[1200];
    snprintf(m, sizeof m, "rank %d (%s): %s; aborting", d->rank, d->host, msg);
    bt__dist_die(d, d->rank, 1, m);
}

BTDEF void bt_dist_error_handler(const char *msg, void *user) {
    bt_dist *d = (bt_dist *)user;
    char m[1200];
    /* an NCCL call that failed because a peer died: give the watchdog a moment to say so first */
    if (d->state->watchdog_on) bt__sleep(0.3);
    snprintf(m, sizeof m, "rank %d (%s): bt error: %s", d->rank, d->host, msg);
    bt__dist_die(d, d->rank, 1, m);
}

static void bt__peer_failed(bt_dist *d, int st, int who) {
    char m[512];
    if (st == BT_PEER_DIED && (d->rank == 0 || who == 0))
        snprintf(m, sizeof m, "rank %d (%s): rank %d (%s) died (its connection closed); aborting", d->rank, d->host, who,
                 bt__host_of(d, who));
    else if (st == BT_PEER_DIED)
        snprintf(m, sizeof m, "rank %d (%s): rank %d (%s) died (reported by rank 0); aborting", d->rank, d->host, who, bt__host_of(d, who));
    else
        snprintf(m, sizeof m, "rank %d (%s): rank %d (%s) failed (see its message); aborting", d->rank, d->host, who, bt__host_of(d, who));
    bt__dist_die(d, who, st == BT_PEER_ABORTED, m);
}

#if BT_DIST_NCCL
/* A collective that fails or hangs is usually a peer that died: when the liveness links say so
   within a moment, that is the message (the root cause), not the collective's. Watchdog only. */
static void bt__prefer_peer_news(bt_dist *d) {
    int who = -1, st = d->state->store ? bt_store_check_peers(d->state->store, 300, &who) : BT_PEER_OK;
    if (st > 0) bt__peer_failed(d, st, who);
}

/* retire finished collectives from the head; the watchdog's timeout and error checks */
static void bt__ring_retire(bt__dist_state *S, int *timed_out, const char **op, char *comm, double *age, cudaError_t *err) {
    while (S->ring_count) {
        int h = S->ring_head;
        cudaError_t q = cudaEventQuery(S->ring[h].ev);
        if (q == cudaErrorNotReady) {
            double a = bt__now() - S->ring[h].t0;
            if (timed_out && a > S->opts.nccl_timeout_s) {
                *timed_out = 1; *op = S->ring[h].op; *age = a;
                memcpy(comm, S->ring[h].comm, 32);
            }
            return;
        }
        if (q != cudaSuccess) { if (err) *err = q; return; }
        S->ring_head = (h + 1) % BT__DIST_RING;
        S->ring_count--;
    }
}

static void bt__watch_collectives(bt_dist *d) {
    bt__dist_state *S = d->state;
    int timed_out = 0;
    const char *op = "";
    char comm[32] = "";
    double age = 0;
    cudaError_t err = cudaSuccess;
    pthread_mutex_lock(&S->ring_lock);
    bt__ring_retire(S, &timed_out, &op, comm, &age, &err);
    pthread_mutex_unlock(&S->ring_lock);
    char m[512];
    if (timed_out || err != cudaSuccess) bt__prefer_peer_news(d);
    if (timed_out) {
        snprintf(m, sizeof m, "rank %d (%s): collective %s on communicator %s timed out after %.0f s (a peer may have died or hung); "
                 "aborting", d->rank, d->host, op, comm, age);
        bt__dist_die(d, d->rank, 1, m);
    }
    if (err != cudaSuccess) {
        snprintf(m, sizeof m, "rank %d (%s): CUDA error behind a collective: %s; aborting", d->rank, d->host, cudaGetErrorString(err));
        bt__dist_die(d, d->rank, 1, m);
    }
    if (pthread_mutex_trylock(&S->nccl_lock) != 0) return;   /* the main thread is in NCCL: next round */
    for (int i = 0; i < S->n_comms; i++) {
        ncclResult_t r = ncclSuccess;
        if (!S->comms[i] || !S->comms[i]->handle) continue;
        ncclCommGetAsyncError((ncclComm_t)S->comms[i]->handle, &r);
        if (r == ncclSuccess || r == ncclInProgress) continue;
        pthread_mutex_unlock(&S->nccl_lock);
        bt__prefer_peer_news(d);
        snprintf(m, sizeof m, "rank %d (%s): NCCL error on communicator %s: %s (%s); aborting", d->rank, d->host, S->comms[i]->name,
                 ncclGetErrorString(r), ncclGetLastError((ncclComm_t)S->comms[i]->handle));
        bt__dist_die(d, d->rank, 1, m);
    }
    pthread_mutex_unlock(&S->nccl_lock);
}
#endif

static void *bt__watchdog_main(void *arg) {
    bt_dist *d = (bt_dist *)arg;
    bt__dist_state *S = d->state;
#if BT_DIST_NCCL
    if (d->device >= 0) cudaSetDevice(d->device);
#endif
    while (!__atomic_load_n(&S->stop, __ATOMIC_SEQ_CST)) {
        int who = -1;
        int st = S->store ? bt_store_check_peers(S->store, 100, &who) : (poll(NULL, 0, 100), BT_PEER_OK);
        if (st > 0 && !__atomic_load_n(&S->stop, __ATOMIC_SEQ_CST)) bt__peer_failed(d, st, who);
#if BT_DIST_NCCL
        if (S->ring_ready) bt__watch_collectives(d);
#endif
    }
    return NULL;
}

static void bt__watchdog_start(bt_dist *d) {
    sigset_t all, old;
    sigfillset(&all);
    pthread_sigmask(SIG_SETMASK, &all, &old);   /* the thread inherits a mask that blocks every signal */
    int r = pthread_create(&d->state->watchdog, NULL, bt__watchdog_main, d);
    pthread_sigmask(SIG_SETMASK, &old, NULL);
    if (r != 0) bt_error("rank %d: cannot start the watchdog thread: %s", d->rank, strerror(r));
    d->state->watchdog_on = 1;
}
static void bt__watchdog_stop(bt_dist *d) {
    if (!d->state->watchdog_on) return;
    __atomic_store_n(&d->state->stop, 1, __ATOMIC_SEQ_CST);
    pthread_join(d->state->watchdog, NULL);
    d->state->watchdog_on = 0;
}

static bt_comm *bt__comm_new(bt_dist *d, const char *name, int rank, int size, void *handle) {
    bt__dist_state *S = d->state;
    if (S->n_comms == BT_DIST_MAX_COMMS) bt_error("rank %d: more than %d communicators", d->rank, BT_DIST_MAX_COMMS);
    bt_comm *c = (bt_comm *)bt__dist_calloc(1, sizeof(bt_comm));
    snprintf(c->name, sizeof c->name, "%s", name ? name : "comm");
    c->rank = rank; c->size = size; c->handle = handle; c->dist = d;
    pthread_mutex_lock(&S->nccl_lock);
    S->comms[S->n_comms++] = c;
    pthread_mutex_unlock(&S->nccl_lock);
    return c;
}

#if BT_DIST_NCCL
/* Waits out ncclInProgress on a non-blocking communicator (called and returning with nccl_lock
   held, released between polls so that the watchdog can abort). ncclInProgress past the
   deadline comes back as is. */
static ncclResult_t bt__nccl_settle(bt_dist *d, ncclComm_t comm, ncclResult_t r, double timeout_s) {
    bt__dist_state *S = d->state;
    /* a non-blocking communicator's call usually settles within microseconds: poll without
       sleeping for the first 2 ms (a sleep costs ~60 us of timer slack per collective, which
       adds up over the hundreds of collectives of a tensor-parallel step), then back off */
    double now = bt__now(), deadline = now + timeout_s, spin_until = now + 2e-3, nap = 20e-6;
    while (r == ncclInProgress && bt__now() < deadline) {
        pthread_mutex_unlock(&S->nccl_lock);
        if (bt__now() < spin_until) sched_yield();
        else { bt__sleep(nap); nap = nap * 2 < 1e-3 ? nap * 2 : 1e-3; }
        pthread_mutex_lock(&S->nccl_lock);
        if (__atomic_load_n(&S->failing, __ATOMIC_SEQ_CST)) { pthread_mutex_unlock(&S->nccl_lock); for (;;) pause(); }
        if (ncclCommGetAsyncError(comm, &r) != ncclSuccess) r = ncclInternalError;
    }
    return r;
}

static void bt__nccl_lock(bt_dist *d) {
    pthread_mutex_lock(&d->state->nccl_lock);
    if (__atomic_load_n(&d->state->failing, __ATOMIC_SEQ_CST)) { pthread_mutex_unlock(&d->state->nccl_lock); for (;;) pause(); }
}

/* settles r, unlocks, raises on failure */
static void bt__nccl_done(bt_comm *c, ncclComm_t comm, ncclResult_t r, const char *what, double timeout_s) {
    bt_dist *d = c->dist;
    r = bt__nccl_settle(d, comm, r, timeout_s);
    const char *last = comm ? ncclGetLastError(comm) : "";
    pthread_mutex_unlock(&d->state->nccl_lock);
    if (r == ncclInProgress)
        bt_error("rank %d (%s): %s on communicator %s did not finish within %.0f s (did every rank get here?)", d->rank, d->host,
                 what, c->name, timeout_s);
    if (r != ncclSuccess)
        bt_error("rank %d (%s): %s on communicator %s failed: %s (%s)", d->rank, d->host, what, c->name, ncclGetErrorString(r), last);
}

static void bt__nccl_config(ncclConfig_t *cfg, const char *name, int blocking) {
    ncclConfig_t init = NCCL_CONFIG_INITIALIZER;
    *cfg = init;
    cfg->blocking = blocking != 0;   /* non-blocking by default: ncclCommAbort must be able to stop a hung collective */
    cfg->commName = name;
}

static void bt__ring_init(bt_dist *d) {
    bt__dist_state *S = d->state;
    for (int i = 0; i < BT__DIST_RING; i++) BT__DIST_CUDA(cudaEventCreateWithFlags(&S->ring[i].ev, cudaEventDisableTiming), "init");
    S->ring_ready = 1;
}
static void bt__ring_free(bt_dist *d) {
    bt__dist_state *S = d->state;
    if (!S->ring_ready) return;
    for (int i = 0; i < BT__DIST_RING; i++) cudaEventDestroy(S->ring[i].ev);
    S->ring_ready = 0;
}

/* an event after the collective just enqueued on s, for the watchdog's timeout; none inside a
   capture: an event recorded there cannot be queried (the graph's launch is watched instead) */
static void bt__track(bt_comm *c, const char *op, cudaStream_t s) {
    bt__dist_state *S = c->dist->state;
    bt__halt_if_failing(S);
    if (!S->ring_ready || bt__capturing(s)) return;
    pthread_mutex_lock(&S->ring_lock);
    bt__ring_retire(S, NULL, NULL, NULL, NULL, NULL);
    while (S->ring_count == BT__DIST_RING) {   /* the GPU is far behind: wait (the watchdog times it) */
        pthread_mutex_unlock(&S->ring_lock);
        bt__sleep(1e-3);
        pthread_mutex_lock(&S->ring_lock);
        bt__ring_retire(S, NULL, NULL, NULL, NULL, NULL);
    }
    int t = (S->ring_head + S->ring_count) % BT__DIST_RING;
    cudaError_t e = cudaEventRecord(S->ring[t].ev, s);
    S->ring[t].t0 = bt__now(); S->ring[t].op = op;
    memcpy(S->ring[t].comm, c->name, sizeof c->name);
    S->ring_count++;
    pthread_mutex_unlock(&S->ring_lock);
    if (e != cudaSuccess) bt_error("rank %d: %s: cudaEventRecord failed: %s", c->dist->rank, op, cudaGetErrorString(e));
}

static void bt__dist_gpu(bt_dist *d) {
    int n = bt_k_device_count();
    d->device = d->local_rank < n ? d->local_rank : -1;
    if (d->device >= 0) BT__DIST_CUDA(cudaSetDevice(d->device), "init");
}

static void bt__dist_nccl_world(bt_dist *d) {
    bt__dist_state *S = d->state;
    ncclUniqueId id;
    memset(&id, 0, sizeof id);
    if (d->rank == 0) {
        ncclResult_t r = ncclGetUniqueId(&id);
        if (r != ncclSuccess) bt_error("rank 0 (%s): ncclGetUniqueId failed: %s", d->host, ncclGetErrorString(r));
    }
    if (bt_store_broadcast(S->store, &id, sizeof id)) bt_error("%s", bt_dist_error());
    ncclConfig_t cfg;
    bt__nccl_config(&cfg, "world", S->opts.blocking_comms);
    ncclComm_t comm = NULL;
    bt__nccl_lock(d);
    ncclResult_t r = ncclCommInitRankConfig(&comm, d->world, id, d->rank, &cfg);
    bt_comm tmp;
    memset(&tmp, 0, sizeof tmp);
    snprintf(tmp.name, sizeof tmp.name, "world"); tmp.dist = d;
    bt__nccl_done(&tmp, comm, r, "ncclCommInitRankConfig", S->opts.timeout_s);
    bt__ring_init(d);
    d->world_comm = bt__comm_new(d, "world", d->rank, d->world, comm);
}
#endif

/* every rank's host, GPU count and local rank, so that a bad placement is one clear error on
   every rank instead of a hang */
typedef struct { char host[64], machine[64]; int32_t local_rank, gpus; } bt__rank_info;

/* which ranks share a machine: the kernel's boot id (containers of one host share it, two hosts
   that both call themselves "localhost" do not), else the host name */
static void bt__machine_id(char *out, size_t n, const char *host) {
    FILE *f = fopen("/proc/sys/kernel/random/boot_id", "r");
    out[0] = 0;
    if (f) {
        if (!fgets(out, (int)n, f)) out[0] = 0;
        fclose(f);
        out[strcspn(out, "\n")] = 0;
    }
    if (!out[0]) snprintf(out, n, "%s", host);
}

static void bt__dist_check_placement(bt_dist *d, const bt__rank_info *all) {
    bt__dist_state *S = d->state;
    for (int k = 0; k < d->world; k++) memcpy(S->hosts[k], all[k].host, 64);
    if (S->opts.store_only) return;
    for (int k = 0; k < d->world; k++) {
        if (all[k].gpus == 0) bt_error("rank %d (%s): no GPU visible (CUDA_VISIBLE_DEVICES?)", k, all[k].host);
        if (all[k].local_rank >= all[k].gpus)
            bt_error("rank %d (%s): local rank %d, but only %d GPU(s) visible there: one process per GPU", k, all[k].host,
                     all[k].local_rank, all[k].gpus);
        int on_host = 0;
        for (int j = 0; j < d->world; j++) on_host += !strcmp(all[j].machine, all[k].machine);
        if (on_host > all[k].gpus)
            bt_error("%d ranks run on host %s, which has %d GPU(s) visible: the world is larger than the GPUs (one process per GPU)",
                     on_host, all[k].host, all[k].gpus);
    }
}

static void bt__dist_rendezvous(bt_dist *d) {
    bt__dist_state *S = d->state;
    const bt_dist_env *e = &d->env;
    if (d->rank == 0 && !e->secret_set && !bt__host_loopback(e->master_addr))
        bt__launcher_say("rank 0: BT_DIST_SECRET is not set: any process that reaches %s:%d%s can join this job's rendezvous; export "
                         "the same BT_DIST_SECRET to every rank (docs/many-gpus.md)", e->master_addr, e->master_port,
                         e->secret[0] ? " and knows SLURM_JOB_ID" : "");
    S->store = bt_store_open(e->master_addr, e->master_port, d->rank, d->world, S->opts.timeout_s, e->secret);
    if (!S->store) bt_error("%s", bt_dist_error());
    bt__rank_info mine, *all = (bt__rank_info *)bt__dist_calloc((size_t)d->world, sizeof(bt__rank_info));
    memset(&mine, 0, sizeof mine);
    memcpy(mine.host, d->host, sizeof mine.host);
    bt__machine_id(mine.machine, sizeof mine.machine, d->host);
    mine.local_rank = d->local_rank;
#if BT_DIST_NCCL
    mine.gpus = S->opts.store_only ? 0 : bt_k_device_count();
#endif
    if (bt_store_allgather(S->store, &mine, all, sizeof mine)) { bt__dist_free(all); bt_error("%s", bt_dist_error()); }
    S->hosts = (char(*)[64])bt__dist_calloc((size_t)d->world, 64);
    bt__dist_check_placement(d, all);
    bt__dist_free(all);
}

static void bt__dist_install_handler(bt_dist *d) {
    bt__dist_state *S = d->state;
    if (S->opts.no_error_handler) return;
    bt_get_error_handler(&S->prev_fn, &S->prev_user);
    bt_set_error_handler(bt_dist_error_handler, d);
    S->handler_installed = 1;
}

static void bt__dist_opts_defaults(bt_dist_opts *o, const bt_dist_opts *in) {
    if (in) *o = *in; else memset(o, 0, sizeof *o);
    if (o->timeout_s <= 0) o->timeout_s = 300;
    if (o->nccl_timeout_s <= 0) o->nccl_timeout_s = 600;
}

BTDEF bt_dist *bt_dist_init(const bt_dist_opts *opts) {
    bt_dist_env env;
    setenv("NCCL_NVLS_ENABLE", "0", 0);   /* before any NCCL call: multicast stays off (see the top) */
    if (opts && opts->env) env = *opts->env;
    else if (bt_dist_env_read(&env)) bt_error("bt_dist_init: %s", bt_dist_error());
#if !BT_DIST_NCCL
    if (env.world > 1 && !(opts && opts->store_only))
        bt_error("bt_dist_init: world size %d (%s), but this build has no CUDA/NCCL; build with nvcc (make) to run more than one "
                 "process", env.world, bt_launcher_name(env.launcher));
#endif
    bt_dist *d = (bt_dist *)bt__dist_calloc(1, sizeof(bt_dist));
    bt__dist_state *S = d->state = (bt__dist_state *)bt__dist_calloc(1, sizeof(bt__dist_state));
    bt__dist_opts_defaults(&S->opts, opts);
    d->env = env;
    d->rank = env.rank; d->world = env.world; d->local_rank = env.local_rank; d->local_world = env.local_world;
    d->device = -1;
    if (gethostname(d->host, sizeof d->host - 1) != 0) snprintf(d->host, sizeof d->host, "?");
    pthread_mutexattr_t ma;
    pthread_mutexattr_init(&ma);
    pthread_mutexattr_settype(&ma, PTHREAD_MUTEX_ERRORCHECK);
    pthread_mutex_init(&S->nccl_lock, &ma);
    pthread_mutex_init(&S->ring_lock, NULL);
    pthread_mutexattr_destroy(&ma);
#if BT_DIST_NCCL
    if (!S->opts.store_only) bt__dist_gpu(d);
#endif
    if (d->world == 1) { d->world_comm = bt__comm_new(d, "world", 0, 1, NULL); return d; }
    bt__dist_install_handler(d);
    bt__dist_rendezvous(d);
    bt__watchdog_start(d);
#if BT_DIST_NCCL
    if (!S->opts.store_only) bt__dist_nccl_world(d);
#endif
    if (!d->world_comm) d->world_comm = bt__comm_new(d, "world", d->rank, d->world, NULL);
    return d;
}

BTDEF bt_store *bt_dist_store(bt_dist *d) { return d->state->store; }

BTDEF bt_comm *bt_dist_split(bt_dist *d, bt_comm *parent, int color, int key, const char *name) {
    if (!parent->handle) {   /* size 1, or no NCCL: the only possible group is this rank alone */
        if (parent->size > 1) bt_error("rank %d: split of communicator %s: this build has no NCCL", d->rank, parent->name);
        (void)key;
        return color < 0 ? NULL : bt__comm_new(d, name, 0, 1, NULL);
    }
#if BT_DIST_NCCL
    ncclConfig_t cfg;
    bt__nccl_config(&cfg, name, d->state->opts.blocking_comms);
    ncclComm_t nc = NULL;
    bt__nccl_lock(d);
    ncclResult_t r = ncclCommSplit((ncclComm_t)parent->handle, color < 0 ? NCCL_SPLIT_NOCOLOR : color, key, &nc, &cfg);
    bt__nccl_done(parent, (ncclComm_t)parent->handle, r, "ncclCommSplit", d->state->opts.timeout_s);
    if (nc) {   /* the new communicator settles on its own */
        bt_comm tmp;
        memset(&tmp, 0, sizeof tmp);
        snprintf(tmp.name, sizeof tmp.name, "%s", name ? name : "split"); tmp.dist = d;
        bt__nccl_lock(d);
        bt__nccl_done(&tmp, nc, ncclInProgress, "ncclCommSplit", d->state->opts.timeout_s);
    }
    /* a non-blocking split keeps the parent "in progress" until its part of the child's setup is
       over (measured: the next split on it failed with "Attempt to use communicator before the
       previous operation returned ncclSuccess"), so wait the parent out too */
    bt__nccl_lock(d);
    bt__nccl_done(parent, (ncclComm_t)parent->handle, ncclInProgress, "ncclCommSplit (parent)", d->state->opts.timeout_s);
    if (color < 0 || !nc) return NULL;
    int rank = 0, size = 0;
    ncclCommUserRank(nc, &rank);
    ncclCommCount(nc, &size);
    return bt__comm_new(d, name, rank, size, nc);
#else
    return NULL;
#endif
}

BTDEF void bt_dist_mesh_comms(bt_dist *d, const bt_mesh *m, bt_comm **dp, bt_comm **tp, bt_comm **cp) {
    if (m->world != d->world) bt_error("rank %d: mesh of %d ranks, but the world has %d", d->rank, m->world, d->world);
    bt_comm **out[3] = {dp, tp, cp};
    static const char *names[3] = {"dp", "tp", "cp"};
    for (int a = 0; a < 3; a++) {   /* every rank splits in the same order: dp, tp, cp */
        bt_comm *c = bt_dist_split(d, d->world_comm, bt_mesh_color(m, d->rank, (bt_mesh_axis)a),
                                   bt_mesh_coord(m, d->rank, (bt_mesh_axis)a), names[a]);
        if (out[a]) *out[a] = c;
    }
}

static void bt__dist_destroy_comms(bt_dist *d) {
    bt__dist_state *S = d->state;
    for (int i = S->n_comms - 1; i >= 0; i--) {
        bt_comm *c = S->comms[i];
#if BT_DIST_NCCL
        ncclComm_t h = (ncclComm_t)c->handle;
        if (h) {
            bt__nccl_lock(d);
            bt__nccl_done(c, h, ncclCommFinalize(h), "ncclCommFinalize", S->opts.nccl_timeout_s);
        }
#endif
        pthread_mutex_lock(&S->nccl_lock);   /* the watchdog reads S->comms under this lock */
        S->comms[i] = NULL;
#if BT_DIST_NCCL
        if (h) ncclCommDestroy(h);
#endif
        pthread_mutex_unlock(&S->nccl_lock);
        bt__dist_free(c);
    }
    S->n_comms = 0;
}

BTDEF void bt_dist_shutdown(bt_dist *d) {
    if (!d) return;
    bt__dist_state *S = d->state;
    bt__halt_if_failing(S);
    if (S->store && bt_store_barrier(S->store)) bt_error("%s", bt_dist_error());
    bt__dist_destroy_comms(d);
    bt__watchdog_stop(d);
#if BT_DIST_NCCL
    bt__ring_free(d);
#endif
    bt_store_close(S->store);
    if (S->handler_installed) bt_set_error_handler(S->prev_fn, S->prev_user);
    pthread_mutex_destroy(&S->nccl_lock);
    pthread_mutex_destroy(&S->ring_lock);
    bt__dist_free(S->hosts);
    bt__dist_free(S);
    bt__dist_free(d);
}

/* ============================================================================================
   7. collectives
   ============================================================================================ */
static size_t bt__coll_check(bt_comm *c, const char *op, const void *a, const void *b, int64_t count, bt_dtype dt) {
    if (!c) bt_error("%s: no communicator (NULL)", op);
    if (count < 0) bt_error("%s: count %lld < 0", op, (long long)count);
    if (count > 0 && (!a || !b)) bt_error("%s on %s: NULL buffer with count %lld", op, c->name, (long long)count);
    if (dt != BT_F32 && dt != BT_F64 && dt != BT_BF16 && dt != BT_F16 && dt != BT_I32)
        bt_error("%s on %s: dtype %s; NCCL collectives here take f32, f64, bf16, f16 or i32", op, c->name, bt_dtype_name(dt));
    return bt_dtype_size(dt);
}

/* a size-1 communicator: the collective is a copy (or nothing) */
static void bt__local_copy(void *dst, const void *src, size_t bytes, void *stream) {
    if (dst == src || bytes == 0) return;
#ifdef BT_CUDA
    cudaStream_t s = bt__stream(stream);
    cudaError_t e = cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDefault, s);
    if (e != cudaSuccess) bt_error("bt_dist: local collective copy failed: %s", cudaGetErrorString(e));
#else
    (void)stream;
    memmove(dst, src, bytes);
#endif
}

/* Several ranks without NCCL (bt_dist_init's store_only: CPU programs, the tests' CPU ranks): host
   buffers through the world's TCP store. Every rank's bytes go to every rank (bt_store_allgather),
   then each rank reduces them in rank order in double, rounded once: the same bits on every rank.
   Slow (each rank's buffer W times through the store's sockets), for host memory only, and the
   communicator must span the world (the store's). A communicator of no bt_dist (a stand-in a test
   fills in) keeps the local copies. */
static int bt__on_store(const bt_comm *c) { return c->size > 1 && !c->handle && c->dist; }
/* every rank's n bytes of mine, by rank, in a new buffer (the caller frees it) */
static char *bt__store_all(bt_comm *c, const void *mine, size_t n, const char *op) {
    bt_store *s = c->dist ? c->dist->state->store : NULL;
    if (!s || c->size != c->dist->world)
        bt_error("%s on %s: %d ranks without NCCL go through the world's store, so the communicator must span the world (%d ranks; "
                 "bt_dist_init with store_only)", op, c->name, c->size, c->dist ? c->dist->world : 0);
    char *all = (char *)bt__dist_calloc(n ? n * (size_t)c->size : 1, 1);
    if (bt_store_allgather(s, mine, all, n)) { bt__dist_free(all); bt_error("%s on %s: %s", op, c->name, bt_dist_error()); }
    return all;
}
/* dst[i] = op over p of all[p * stride + i] (elements), i < n */
static void bt__store_reduce(void *dst, const char *all, int W, int64_t n, int64_t stride, bt_dtype dt, bt_red_op op) {
    size_t es = bt_dtype_size(dt);
    for (int64_t i = 0; i < n; i++) {
        double a = bt__ld(all, dt, i);
        for (int p = 1; p < W; p++) {
            double b = bt__ld(all + (size_t)p * (size_t)stride * es, dt, i);
            a = op == BT_RED_MAX ? (b > a ? b : a) : op == BT_RED_MIN ? (b < a ? b : a) : a + b;
        }
        bt__st(dst, dt, i, op == BT_RED_AVG ? a / W : a);
    }
}

#if BT_DIST_NCCL
static ncclDataType_t bt__nccl_dtype(bt_dtype dt) {
    switch (dt) {
    case BT_F64: return ncclFloat64;
    case BT_BF16: return ncclBfloat16;
    case BT_F16: return ncclFloat16;
    case BT_I32: return ncclInt32;
    default: return ncclFloat32;
    }
}
static ncclRedOp_t bt__nccl_op(bt_red_op op) {
    return op == BT_RED_SUM ? ncclSum : op == BT_RED_AVG ? ncclAvg : op == BT_RED_MAX ? ncclMax : ncclMin;
}
/* call is evaluated with nccl_lock held: it must not raise (arguments are checked before) */
#define BT__COLL(c, what, call, stream) do { ncclComm_t nc__ = (ncclComm_t)(c)->handle; bt__nccl_lock((c)->dist); \
    bt__nccl_done((c), nc__, (call), what, (c)->dist->state->opts.nccl_timeout_s); bt__track((c), what, (stream)); } while (0)
/* several NCCL calls on c as one group: bt__group_begin takes nccl_lock and returns the group's
   start; the calls follow while the result stays ncclSuccess; bt__group_end reports the first
   failure (r, else the group's end) as what and tracks the work on s */
static ncclResult_t bt__group_begin(bt_comm *c) {
    bt__nccl_lock(c->dist);
    return ncclGroupStart();
}
static void bt__group_end(bt_comm *c, ncclResult_t r, const char *what, cudaStream_t s) {
    ncclResult_t e = ncclGroupEnd();
    bt__nccl_done(c, (ncclComm_t)c->handle, r != ncclSuccess ? r : e, what, c->dist->state->opts.nccl_timeout_s);
    bt__track(c, what, s);
}
#endif

/* bt__coll_check, plus the reduction op for dtype dt */
static size_t bt__reduce_check(bt_comm *c, const char *what, const void *a, const void *b, int64_t count, bt_dtype dt, bt_red_op op) {
    size_t es = bt__coll_check(c, what, a, b, count, dt);
    if ((unsigned)op > BT_RED_MIN) bt_error("%s on %s: reduction %d; expected BT_RED_SUM, _AVG, _MAX or _MIN", what, c->name, (int)op);
    if (op == BT_RED_AVG && dt == BT_I32) bt_error("%s on %s: the average of i32 values is not an i32; sum them instead", what, c->name);
    return es;
}

BTDEF void bt_all_reduce(bt_comm *c, const void *send, void *recv, int64_t count, bt_dtype dt, bt_red_op op, void *stream) {
    size_t es = bt__reduce_check(c, "all_reduce", send, recv, count, dt, op);
    if (bt__on_store(c)) {
        char *all = bt__store_all(c, send, (size_t)count * es, "all_reduce");
        bt__store_reduce(recv, all, c->size, count, count, dt, op);
        bt__dist_free(all);
        return;
    }
    if (c->size == 1 || !c->handle) { bt__local_copy(recv, send, (size_t)count * es, stream); return; }
#if BT_DIST_NCCL
    cudaStream_t s = bt__stream(stream);
    BT__COLL(c, "all_reduce", ncclAllReduce(send, recv, (size_t)count, bt__nccl_dtype(dt), bt__nccl_op(op), nc__, s), s);
#endif
}

BTDEF void bt_reduce_scatter(bt_comm *c, const void *send, void *recv, int64_t recv_count, bt_dtype dt, bt_red_op op, void *stream) {
    size_t es = bt__reduce_check(c, "reduce_scatter", send, recv, recv_count, dt, op);
    if (bt__on_store(c)) {   /* recv = op over ranks of block `rank` of send */
        char *all = bt__store_all(c, send, (size_t)recv_count * es * (size_t)c->size, "reduce_scatter");
        bt__store_reduce(recv, all + (size_t)c->rank * (size_t)recv_count * es, c->size, recv_count, recv_count * c->size, dt, op);
        bt__dist_free(all);
        return;
    }
    if (c->size == 1 || !c->handle) { bt__local_copy(recv, send, (size_t)recv_count * es, stream); return; }
#if BT_DIST_NCCL
    cudaStream_t s = bt__stream(stream);
    BT__COLL(c, "reduce_scatter", ncclReduceScatter(send, recv, (size_t)recv_count, bt__nccl_dtype(dt),
                                                    bt__nccl_op(op), nc__, s), s);
#endif
}

BTDEF void bt_all_gather(bt_comm *c, const void *send, void *recv, int64_t send_count, bt_dtype dt, void *stream) {
    size_t es = bt__coll_check(c, "all_gather", send, recv, send_count, dt);
    if (bt__on_store(c)) {   /* send may lie inside recv (in place): gathered aside first */
        char *all = bt__store_all(c, send, (size_t)send_count * es, "all_gather");
        memcpy(recv, all, (size_t)send_count * es * (size_t)c->size);
        bt__dist_free(all);
        return;
    }
    if (c->size == 1 || !c->handle) { bt__local_copy(recv, send, (size_t)send_count * es, stream); return; }
#if BT_DIST_NCCL
    cudaStream_t s = bt__stream(stream);
    BT__COLL(c, "all_gather", ncclAllGather(send, recv, (size_t)send_count, bt__nccl_dtype(dt), nc__, s), s);
#endif
}

BTDEF void bt_broadcast(bt_comm *c, const void *send, void *recv, int64_t count, bt_dtype dt, int root, void *stream) {
    size_t es = bt__coll_check(c, "broadcast", c && c->rank == root ? send : recv, recv, count, dt);
    if (root < 0 || root >= c->size) bt_error("broadcast on %s: root %d; expected 0..%d", c->name, root, c->size - 1);
    if (bt__on_store(c)) {
        char *all = bt__store_all(c, c->rank == root ? send : recv, (size_t)count * es, "broadcast");
        memcpy(recv, all + (size_t)root * (size_t)count * es, (size_t)count * es);
        bt__dist_free(all);
        return;
    }
    if (c->size == 1 || !c->handle) { bt__local_copy(recv, send, (size_t)count * es, stream); return; }
#if BT_DIST_NCCL
    cudaStream_t s = bt__stream(stream);
    BT__COLL(c, "broadcast", ncclBroadcast(send, recv, (size_t)count, bt__nccl_dtype(dt), root, nc__, s), s);
#endif
}

BTDEF void bt_send_recv(bt_comm *c, const void *send, int64_t send_count, int dst, void *recv, int64_t recv_count, int src,
                        bt_dtype dt, void *stream) {
    size_t es = bt__coll_check(c, "send_recv", dst >= 0 ? send : recv, src >= 0 ? recv : send, dst >= 0 ? send_count : recv_count, dt);
    if (dst >= c->size || src >= c->size) bt_error("send_recv on %s: peer %d / %d; expected < %d", c->name, dst, src, c->size);
    if (c->size == 1 || !c->handle) {   /* only this rank: a send to itself meets a receive from itself */
        if ((dst >= 0) != (src >= 0) || send_count != recv_count)
            bt_error("send_recv on %s (one rank): a send to self needs the matching receive of the same count", c->name);
        if (dst >= 0) bt__local_copy(recv, send, (size_t)send_count * es, stream);
        return;
    }
#if BT_DIST_NCCL
    cudaStream_t s = bt__stream(stream);
    ncclComm_t nc = (ncclComm_t)c->handle;
    ncclDataType_t t = bt__nccl_dtype(dt);
    ncclResult_t r = bt__group_begin(c);
    if (r == ncclSuccess && dst >= 0) r = ncclSend(send, (size_t)send_count, t, dst, nc, s);
    if (r == ncclSuccess && src >= 0) r = ncclRecv(recv, (size_t)recv_count, t, src, nc, s);
    bt__group_end(c, r, "send_recv", s);
#endif
}

BTDEF void bt_reduce_to_owners(bt_comm *c, void *span, int64_t span_lo, int64_t n, int64_t shard, bt_dtype dt, bt_red_op op,
                               void *stream) {
    size_t es = bt__reduce_check(c, "reduce_to_owners", span, span, n, dt, op);
    if (shard < 1 || span_lo < 0 || span_lo + n > shard * (int64_t)c->size)
        bt_error("reduce_to_owners on %s: elements [%lld, %lld) with shards of %lld over %d ranks", c->name, (long long)span_lo,
                 (long long)(span_lo + n), (long long)shard, c->size);
    if (bt__on_store(c) && n > 0) {   /* this rank's owned part of the span, reduced in place */
        int64_t lo = (int64_t)c->rank * shard, hi = lo + shard;
        if (lo < span_lo) lo = span_lo;
        if (hi > span_lo + n) hi = span_lo + n;
        char *all = bt__store_all(c, span, (size_t)n * es, "reduce_to_owners");
        if (hi > lo) bt__store_reduce((char *)span + (size_t)(lo - span_lo) * es, all + (size_t)(lo - span_lo) * es, c->size, hi - lo, n, dt, op);
        bt__dist_free(all);
        return;
    }
    if (c->size == 1 || !c->handle || n == 0) return;
#if BT_DIST_NCCL
    cudaStream_t s = bt__stream(stream);
    ncclComm_t nc = (ncclComm_t)c->handle;
    ncclResult_t r = bt__group_begin(c);
    for (int64_t lo = span_lo; r == ncclSuccess && lo < span_lo + n;) {   /* one reduce per owner the span touches */
        int owner = (int)(lo / shard);
        int64_t hi = (int64_t)(owner + 1) * shard < span_lo + n ? (int64_t)(owner + 1) * shard : span_lo + n;
        char *p = (char *)span + (size_t)(lo - span_lo) * es;
        r = ncclReduce(p, p, (size_t)(hi - lo), bt__nccl_dtype(dt), bt__nccl_op(op), owner, nc, s);
        lo = hi;
    }
    bt__group_end(c, r, "reduce_to_owners", s);
#else
    (void)es; (void)stream;
#endif
}

BTDEF void bt_dist_watch(bt_comm *c, const char *what, void *stream) {
    if (!c) bt_error("bt_dist_watch: no communicator (NULL)");
    if (c->size == 1 || !c->handle) return;
#if BT_DIST_NCCL
    bt__track(c, what ? what : "work", bt__stream(stream));
#else
    (void)what; (void)stream;
#endif
}

/* ============================================================================================
   8. DDP gradient buckets
   ============================================================================================ */
typedef struct { struct bt_ddp *ddp; int param; } bt__ddp_arg;

#ifdef BT_CUDA
/* COPY ENGINES. Where every rank of the communicator runs on one host and can map the others'
   memory (CUDA IPC), a bucket's all-reduce moves its data with the copy engines instead of NCCL's
   kernels, which hold ~24 SMs for as long as a reduction runs (and wait there for the peer's
   blocks, which a long compute kernel may keep off its SMs): measured on two H200s, the
   overlapped NCCL reductions slowed the backward pass by ~1.5 ms a step, most of their own 2.1 ms.
   Bucket [lo, hi) is cut into W chunks, chunk k owned by rank k. Per bucket, on the comm stream:
     1. push: each rank copies chunk k of its gradient into rank k's receive area (xin, slot of
        the sender), for every k != self: peer-to-peer copies, no SM involved;
     2. signal phase 0 to each peer; wait for every peer's phase-0 signal;
     3. reduce its own chunk: g = (sum over ranks, in rank order) / W, reading the slots;
     4. push the reduced chunk into every peer's gradient buffer; signal phase 1; wait for every
        peer's phase 1: the whole bucket is then reduced here, the same bits on every rank.
   A signal is a one-thread kernel storing 1 into the peer's flag for (bucket, phase, sender)
   (release, system scope); a wait is a stream memory operation (the GPU's front end holds the
   stream until the flag is 1, no SM spins) followed by a store of 0 there. The values are
   constants, so a CUDA graph replays them as captured. The reset is safe: the peer's next 1 for
   that flag follows a signal of ours issued after the reset. So is reuse of the buffers: a rank
   writes into a peer's xin or gradient only after that peer's last reads of it (its phase-1 wait of
   the previous pass ordered them), and a peer zeroes its gradients only after its phase-1 wait. A
   dead peer leaves a wait unsatisfied: the watchdog's timeout (or the liveness check) stops the job.
   Used for plain DDP (no shards) on fp32 gradients sent in fp32, W <= 8, when opts.copy_engines is
   1, NCCL_P2P_DISABLE is not 1 and every rank manages the setup (bt_ddp_get_stats tells); the
   gradient buffer must be a bt_alloc block. Memory: flags and xin, (W - 1) / W of the gradient
   buffer, from cudaMalloc (outside bt_alloc's pools and stats). */
#define BT__CE_MAX 8
typedef struct { unsigned *p[BT__CE_MAX]; } bt__ce_ptrs;
typedef struct {
    int on, W, me;
    char *mem;                  /* cudaMalloc (shareable whole): flags [nb][2][W] (by sender), then xin */
    unsigned *flags;
    char *xin;
    int64_t *xoff, *chunk;      /* per bucket: element offset of its slots in xin, chunk length (elements) */
    char *peer_mem[BT__CE_MAX], *peer_flat[BT__CE_MAX];   /* the others' mem and gradient buffers, mapped */
    void *peer_seg[BT__CE_MAX];                           /* what cudaIpcOpenMemHandle returned for the gradients */
} bt__ce_state;
#endif

struct bt_ddp {
    bt_comm *comm;
    char *flat;
    int64_t flat_numel, shard;
    bt_param_span *spans;       /* [n_params] */
    bt_dtype grad_dt, comm_dt;
    size_t grad_es, comm_es;
    bt_bucket_plan plan;
    int *pending;               /* per bucket: parameters still to report this pass */
    unsigned char *seen;        /* per parameter: reported this pass */
    int next;                   /* plan order: the next bucket to launch */
    int reported, launched;     /* parameters reported, buckets launched this pass */
    int as_ready, defer;
    unsigned char *out;         /* per bucket: launched this pass */
    int sync, passes;
    bt__ddp_arg *args;
#ifdef BT_CUDA
    cudaStream_t stream;
    int own_stream;
    cudaEvent_t *ready_ev, *done_ev;
    void *stage;                /* comm_dtype copy of the largest bucket, when the dtypes differ */
    cudaEvent_t *start_ev;      /* trace: after the comm stream's wait for the bucket */
    double *host_us;            /* trace: host time of each bucket's launch */
    int *order;                 /* trace: bucket launched k-th */
    int captured, last_captured;   /* this pass / the last synced pass was captured in a CUDA graph */
    int threaded, device, quit; /* launch_thread: the queue of ready buckets, [q_head, q_tail) not yet enqueued */
    int *queue, q_head, q_tail;
    pthread_t thread;
    pthread_mutex_t q_lock;
    pthread_cond_t q_cv;
    void *rows_buf;             /* bt_ddp_add_rows: world x n idx then world x n x C rows */
    size_t rows_cap;
    cudaEvent_t rows_ev, rows_done_ev;
    int rows_pending;
    bt__ce_state ce;            /* the copy-engine transport (on: 1 when the buckets use it) */
#endif
};

#ifdef BT_CUDA
static int bt__ddp_remote(const bt_ddp *d) { return d->comm->size > 1 && d->comm->handle; }
static void bt__ce_setup(bt_ddp *d);
static void bt__ce_release(bt_ddp *d);
#endif

BTDEF int bt_ddp_spans_from_grads(bt_tensor **params, int n, const bt_tensor *flat_grad, bt_param_span *out) {
    for (int i = 0; i < n; i++) {
        const bt_tensor *g = params[i] ? params[i]->grad : NULL;
        if (!g)
            return bt__dist_fail_msg("ddp: parameter %d (%s) has no ->grad view", i, params[i] && params[i]->name ? params[i]->name : "?");
        if (g->storage != flat_grad->storage || !bt_is_contiguous(g) || g->dtype != flat_grad->dtype)
            return bt__dist_fail_msg("ddp: parameter %d's gradient is not a contiguous %s view of the flat gradient buffer", i,
                                     bt_dtype_name(flat_grad->dtype));
        out[i].offset = g->offset - flat_grad->offset;
        out[i].numel = bt_numel(g);
        if (out[i].offset < 0 || out[i].offset + out[i].numel > bt_numel(flat_grad))
            return bt__dist_fail_msg("ddp: parameter %d's gradient lies outside the flat gradient buffer", i);
    }
    return 0;
}

static void bt__ddp_reset(bt_ddp *d) {
    for (int b = 0; b < d->plan.n_buckets; b++) d->pending[b] = d->plan.buckets[b].count;
    memset(d->seen, 0, (size_t)(d->plan.n_params ? d->plan.n_params : 1));
    memset(d->out, 0, (size_t)(d->plan.n_buckets ? d->plan.n_buckets : 1));
    d->next = 0; d->reported = 0; d->launched = 0;
}

#ifdef BT_CUDA
static void bt__ddp_gpu_init(bt_ddp *d, const bt_ddp_opts *o) {
    int nb = d->plan.n_buckets;
    d->stream = (cudaStream_t)o->comm_stream;
    if (!d->stream) {
        /* the highest priority: a bucket's reduction kernels may take SMs as soon as compute
           blocks retire, instead of queuing behind the rest of the backward pass's grid (two H200s
           at GPT-2 d12 measured the same throughput at the default priority: bench/RESULTS.md) */
        int lo = 0, hi = 0;
        BT__DIST_CUDA(cudaDeviceGetStreamPriorityRange(&lo, &hi), "ddp");
        BT__DIST_CUDA(cudaStreamCreateWithPriority(&d->stream, cudaStreamNonBlocking, hi), "ddp");
        d->own_stream = 1;
    }
    d->ready_ev = (cudaEvent_t *)bt__dist_calloc((size_t)nb, sizeof(cudaEvent_t));
    d->done_ev = (cudaEvent_t *)bt__dist_calloc((size_t)nb, sizeof(cudaEvent_t));
    BT__DIST_CUDA(cudaEventCreateWithFlags(&d->rows_ev, cudaEventDisableTiming), "ddp");
    BT__DIST_CUDA(cudaEventCreateWithFlags(&d->rows_done_ev, cudaEventDisableTiming), "ddp");
    unsigned flags = o->trace ? cudaEventDefault : cudaEventDisableTiming;
    if (o->trace) {
        d->start_ev = (cudaEvent_t *)bt__dist_calloc((size_t)nb, sizeof(cudaEvent_t));
        d->host_us = (double *)bt__dist_calloc((size_t)nb, sizeof(double));
        d->order = (int *)bt__dist_calloc((size_t)nb, sizeof(int));
    }
    int64_t most = 0;
    for (int b = 0; b < nb; b++) {
        BT__DIST_CUDA(cudaEventCreateWithFlags(&d->ready_ev[b], flags), "ddp");
        BT__DIST_CUDA(cudaEventCreateWithFlags(&d->done_ev[b], flags), "ddp");
        if (o->trace) BT__DIST_CUDA(cudaEventCreate(&d->start_ev[b]), "ddp");
        if (d->plan.buckets[b].hi - d->plan.buckets[b].lo > most) most = d->plan.buckets[b].hi - d->plan.buckets[b].lo;
    }
    if (d->comm_dt != d->grad_dt) d->stage = bt_alloc(bt_cuda_device(d->comm->dist->device), (size_t)most * d->comm_es, (void *)d->stream);
    if (o->copy_engines) bt__ce_setup(d);
}

/* [lo, hi) of bucket b that this rank must hold reduced afterwards */
static void bt__ddp_result_span(const bt_ddp *d, const bt_bucket *b, int64_t *lo, int64_t *hi) {
    *lo = b->lo; *hi = b->hi;
    if (d->shard <= 0) return;
    int64_t mlo = (int64_t)d->comm->rank * d->shard, mhi = mlo + d->shard;
    *lo = b->lo > mlo ? b->lo : mlo;
    *hi = b->hi < mhi ? b->hi : mhi;
    if (*hi < *lo) *hi = *lo;
}

/* ---- the copy-engine transport (see COPY ENGINES above) ---- */
#if defined(__CUDACC__)
/* thread s: 1 into peer s's flag for this rank and (bucket, phase), after all the stream's earlier
   work (the copies into s) */
__global__ void bt__ce_signal(bt__ce_ptrs peer_flags, int64_t at, int me, int W) {
    int s = threadIdx.x;
    if (s >= W || s == me) return;
    __threadfence_system();
    asm volatile("st.release.sys.global.u32 [%0], %1;" ::"l"(peer_flags.p[s] + at + me), "r"(1u) : "memory");
}
/* the owner's chunk: g = (sum over ranks k, in rank order, of k's value) / W; its own value is g,
   rank k's is in slot (k < me ? k : k - 1) of x, slots `slot` elements apart (float4 at a time) */
__global__ void bt__ce_reduce4(float *g, const float *x, int64_t n, int64_t slot, int me, int W, float inv) {
    for (int64_t i = (blockIdx.x * (int64_t)blockDim.x + threadIdx.x) * 4; i < n; i += (int64_t)gridDim.x * blockDim.x * 4) {
        float4 a = make_float4(0.f, 0.f, 0.f, 0.f);
        for (int k = 0, j = 0; k < W; k++) {
            float4 v = *(const float4 *)(k == me ? g + i : x + (j++) * slot + i);
            a.x += v.x; a.y += v.y; a.z += v.z; a.w += v.w;
        }
        *(float4 *)(g + i) = make_float4(a.x * inv, a.y * inv, a.z * inv, a.w * inv);
    }
}
__global__ void bt__ce_reduce1(float *g, const float *x, int64_t n, int64_t slot, int me, int W, float inv) {
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x) {
        float a = 0.f;
        for (int k = 0, j = 0; k < W; k++) a += k == me ? g[i] : x[(j++) * slot + i];
        g[i] = a * inv;
    }
}
#endif

/* chunk k of bucket b (chunks of c elements, the last one shorter or empty) */
static void bt__ce_chunk(const bt_bucket *b, int64_t c, int k, int64_t *lo, int64_t *len) {
    int64_t n = b->hi - b->lo, a = (int64_t)k * c < n ? (int64_t)k * c : n, e = a + c < n ? a + c : n;
    *lo = b->lo + a; *len = e - a;
}
static size_t bt__ce_flag_bytes(const bt_ddp *d) { return ((size_t)d->plan.n_buckets * 2 * d->ce.W * sizeof(unsigned) + 255) / 256 * 256; }

/* the driver's stream memory operations (cuStreamWaitValue32, cuStreamWriteValue32), found through
   the runtime so that nothing links libcuda: a wait on a flag held by the GPU's front end, not by a
   kernel spinning on an SM (which a persistent compute kernel would then miss) */
typedef int (*bt__memop_fn)(cudaStream_t s, unsigned long long addr, unsigned value, unsigned flags);
static bt__memop_fn bt__ce_wait_value, bt__ce_write_value;
static int bt__ce_memops(void) {
    if (bt__ce_wait_value && bt__ce_write_value) return 1;
    void *w = NULL, *v = NULL;
    cudaDriverEntryPointQueryResult qw, qv;
    if (cudaGetDriverEntryPointByVersion("cuStreamWaitValue32", &w, 12000, cudaEnableDefault, &qw) != cudaSuccess ||
        cudaGetDriverEntryPointByVersion("cuStreamWriteValue32", &v, 12000, cudaEnableDefault, &qv) != cudaSuccess ||
        qw != cudaDriverEntryPointSuccess || qv != cudaDriverEntryPointSuccess || !w || !v) {
        cudaGetLastError();
        return 0;
    }
    bt__ce_wait_value = (bt__memop_fn)w; bt__ce_write_value = (bt__memop_fn)v;
    return 1;
}

static void bt__ce_release(bt_ddp *d) {
    bt__ce_state *x = &d->ce;
    for (int k = 0; k < BT__CE_MAX; k++) {
        if (x->peer_mem[k]) cudaIpcCloseMemHandle(x->peer_mem[k]);
        if (x->peer_seg[k]) cudaIpcCloseMemHandle(x->peer_seg[k]);
    }
    if (x->mem) cudaFree(x->mem);
    cudaGetLastError();
    bt__dist_free(x->xoff); bt__dist_free(x->chunk);
    memset(x, 0, sizeof *x);
}

/* what a rank tells the others: its host, its exchange memory and gradient buffer to map, ok */
typedef struct {
    char machine[64];
    cudaIpcMemHandle_t mem, seg;
    uint64_t flat_off;          /* the gradient buffer's offset in its bt_alloc segment (what the handle maps) */
    int32_t ok, pad;
} bt__ce_rec;

/* collective over the communicator (the world): every rank takes the copy-engine path or none */
static void bt__ce_setup(bt_ddp *d) {
    bt__ce_state *x = &d->ce;
    bt_comm *c = d->comm;
    bt_store *st = bt_dist_store(c->dist);
#if !defined(__CUDACC__)
    st = NULL;   /* the kernels need nvcc: NCCL then */
#endif
    if (c->size < 2 || c->size > BT__CE_MAX || c->size != c->dist->world || !st || d->shard > 0 || d->grad_dt != BT_F32 ||
        d->comm_dt != BT_F32)
        return;
    x->W = c->size; x->me = c->rank;
    int nb = d->plan.n_buckets;
    x->xoff = (int64_t *)bt__dist_calloc((size_t)nb, sizeof(int64_t));
    x->chunk = (int64_t *)bt__dist_calloc((size_t)nb, sizeof(int64_t));
    int64_t xin = 0;
    for (int b = 0; b < nb; b++) {   /* chunks of whole 256-byte lines: slots stay 16-byte aligned */
        int64_t n = d->plan.buckets[b].hi - d->plan.buckets[b].lo;
        x->chunk[b] = ((n + x->W - 1) / x->W + 63) / 64 * 64;
        x->xoff[b] = xin;
        xin += (int64_t)(x->W - 1) * x->chunk[b];
    }
    size_t fb = bt__ce_flag_bytes(d), bytes = fb + (size_t)xin * sizeof(float), seg_off = 0;
    const char *p2p = getenv("NCCL_P2P_DISABLE");
    bt__ce_rec mine, *all = (bt__ce_rec *)bt__dist_calloc((size_t)x->W, sizeof(bt__ce_rec));
    memset(&mine, 0, sizeof mine);
    bt__machine_id(mine.machine, sizeof mine.machine, c->dist->host);
    void *seg = bt_alloc_segment(d->flat, &seg_off);
    mine.ok = !(p2p && atoi(p2p) == 1) && seg && bt__ce_memops() && cudaMalloc((void **)&x->mem, bytes) == cudaSuccess &&
              cudaMemset(x->mem, 0, fb) == cudaSuccess && cudaIpcGetMemHandle(&mine.mem, x->mem) == cudaSuccess &&
              cudaIpcGetMemHandle(&mine.seg, seg) == cudaSuccess && cudaDeviceSynchronize() == cudaSuccess;
    mine.flat_off = seg_off;
    if (bt_store_allgather(st, &mine, all, sizeof mine)) bt_error("ddp (copy engines): %s", bt_dist_error());
    int ok = 1;
    for (int k = 0; k < x->W; k++) ok &= all[k].ok && !strcmp(all[k].machine, mine.machine);
    for (int k = 0; k < x->W && ok; k++) {
        if (k == x->me) continue;
        ok = cudaIpcOpenMemHandle((void **)&x->peer_mem[k], all[k].mem, cudaIpcMemLazyEnablePeerAccess) == cudaSuccess &&
             cudaIpcOpenMemHandle(&x->peer_seg[k], all[k].seg, cudaIpcMemLazyEnablePeerAccess) == cudaSuccess;
        if (ok) x->peer_flat[k] = (char *)x->peer_seg[k] + all[k].flat_off;
    }
    int32_t okk = ok, *oks = (int32_t *)bt__dist_calloc((size_t)x->W, sizeof(int32_t));
    if (bt_store_allgather(st, &okk, oks, sizeof okk)) bt_error("ddp (copy engines): %s", bt_dist_error());
    for (int k = 0; k < x->W; k++) ok &= oks[k] != 0;
    bt__dist_free(all); bt__dist_free(oks);
    if (!ok) { bt__ce_release(d); return; }
    x->flags = (unsigned *)x->mem;
    x->xin = x->mem + fb;
    x->on = 1;
}

/* a signal of (bucket bi, phase ph) to every peer, then the wait for every peer's */
static void bt__ce_sync(bt_ddp *d, int bi, int ph) {
#if defined(__CUDACC__)
    bt__ce_state *x = &d->ce;
    bt__ce_ptrs pf;
    memset(&pf, 0, sizeof pf);
    for (int k = 0; k < x->W; k++) pf.p[k] = k == x->me ? NULL : (unsigned *)x->peer_mem[k];
    int64_t at = ((int64_t)bi * 2 + ph) * x->W;
    bt__ce_signal<<<1, 32, 0, d->stream>>>(pf, at, x->me, x->W);
    BT__DIST_CUDA(cudaGetLastError(), "ddp (copy engines)");
    for (int k = 0; k < x->W; k++) {   /* each peer's 1, then 0 for the next pass (its next 1 comes after our next signal) */
        if (k == x->me) continue;
        unsigned long long f = (unsigned long long)(uintptr_t)(x->flags + at + k);
        if (bt__ce_wait_value(d->stream, f, 1, 0 /* CU_STREAM_WAIT_VALUE_GEQ */) || bt__ce_write_value(d->stream, f, 0, 0))
            bt_error("rank %d: ddp (copy engines): a stream memory operation failed", x->me);
    }
#else
    (void)d; (void)bi; (void)ph;
#endif
}

/* bucket bi's all-reduce (the mean) on the comm stream through the copy engines */
static void bt__ce_bucket(bt_ddp *d, int bi) {
#if defined(__CUDACC__)
    bt__ce_state *x = &d->ce;
    const bt_bucket *b = &d->plan.buckets[bi];
    int64_t c = x->chunk[bi], lo, len, mlo, mlen;
    float *g = (float *)d->flat;
    size_t xin_at = bt__ce_flag_bytes(d) + (size_t)x->xoff[bi] * sizeof(float);
    for (int k = 0; k < x->W; k++) {   /* 1. chunk k into owner k's slot for this rank */
        bt__ce_chunk(b, c, k, &lo, &len);
        if (k == x->me || !len) continue;
        char *dst = x->peer_mem[k] + xin_at + (size_t)(x->me < k ? x->me : x->me - 1) * (size_t)c * sizeof(float);
        BT__DIST_CUDA(cudaMemcpyAsync(dst, g + lo, (size_t)len * sizeof(float), cudaMemcpyDeviceToDevice, d->stream), "ddp (copy engines)");
    }
    bt__ce_sync(d, bi, 0);
    bt__ce_chunk(b, c, x->me, &mlo, &mlen);
    if (mlen) {   /* 3. this rank's chunk reduced */
        const float *xs = (const float *)(x->xin + (size_t)x->xoff[bi] * sizeof(float));
        int vec = mlen % 4 == 0 && ((uintptr_t)(g + mlo) & 15) == 0;
        int64_t blocks = (mlen / (vec ? 4 : 1) + 255) / 256;   /* 1024 blocks: faster than 132 or 264 (H200) */
        if (blocks > 1024) blocks = 1024;
        if (vec) bt__ce_reduce4<<<(unsigned)blocks, 256, 0, d->stream>>>(g + mlo, xs, mlen, c, x->me, x->W, 1.f / (float)x->W);
        else bt__ce_reduce1<<<(unsigned)blocks, 256, 0, d->stream>>>(g + mlo, xs, mlen, c, x->me, x->W, 1.f / (float)x->W);
        BT__DIST_CUDA(cudaGetLastError(), "ddp (copy engines)");
        for (int k = 0; k < x->W; k++)   /* 4. into every peer's gradient buffer */
            if (k != x->me)
                BT__DIST_CUDA(cudaMemcpyAsync(x->peer_flat[k] + (size_t)mlo * sizeof(float), g + mlo, (size_t)mlen * sizeof(float),
                                              cudaMemcpyDeviceToDevice, d->stream), "ddp (copy engines)");
    }
    bt__ce_sync(d, bi, 1);
#else
    (void)d; (void)bi;
#endif
}

/* comm stream: wait for the bucket's ready event, (cast,) reduce, (cast back,) mark done */
static void bt__ddp_enqueue(bt_ddp *d, int bi) {
    const bt_bucket *b = &d->plan.buckets[bi];
    int64_t n = b->hi - b->lo, rlo, rhi;
    char *grad = d->flat + (size_t)b->lo * d->grad_es;
    void *buf = d->stage ? d->stage : grad;
    int timed = d->host_us && !d->captured;   /* a captured pass has no times of its own */
    double t0 = timed ? bt__now() : 0;
    BT__DIST_CUDA(cudaStreamWaitEvent(d->stream, d->ready_ev[bi], 0), "ddp");
    if (timed) BT__DIST_CUDA(cudaEventRecord(d->start_ev[bi], d->stream), "ddp");
    if (d->stage) bt_k_cast(d->comm_dt, d->stage, d->grad_dt, grad, n, d->stream);
    if (d->ce.on) { bt__ce_bucket(d, bi); bt__track(d->comm, "ddp bucket (copy engines)", d->stream); }
    else if (d->shard > 0) bt_reduce_to_owners(d->comm, buf, b->lo, n, d->shard, d->comm_dt, BT_RED_AVG, d->stream);
    else bt_all_reduce(d->comm, buf, buf, n, d->comm_dt, BT_RED_AVG, d->stream);
    bt__ddp_result_span(d, b, &rlo, &rhi);
    if (d->stage && rhi > rlo)
        bt_k_cast(d->grad_dt, d->flat + (size_t)rlo * d->grad_es, d->comm_dt, (char *)d->stage + (size_t)(rlo - b->lo) * d->comm_es,
                  rhi - rlo, d->stream);
    BT__DIST_CUDA(cudaEventRecord(d->done_ev[bi], d->stream), "ddp");
    if (timed) d->host_us[bi] = (bt__now() - t0) * 1e6;
}

static void *bt__ddp_thread_main(void *arg) {
    bt_ddp *d = (bt_ddp *)arg;
    BT__DIST_CUDA(cudaSetDevice(d->device), "ddp launch thread");
    pthread_mutex_lock(&d->q_lock);
    for (;;) {
        while (d->q_head == d->q_tail && !d->quit) pthread_cond_wait(&d->q_cv, &d->q_lock);
        if (d->q_head == d->q_tail) break;
        int b = d->queue[d->q_head];
        pthread_mutex_unlock(&d->q_lock);
        bt__ddp_enqueue(d, b);
        pthread_mutex_lock(&d->q_lock);
        d->q_head++;
        pthread_cond_broadcast(&d->q_cv);
    }
    pthread_mutex_unlock(&d->q_lock);
    return NULL;
}

/* the compute stream's work for bucket bi is enqueued: mark it, then enqueue (or queue) its reduction */
static void bt__ddp_launch_gpu(bt_ddp *d, int bi, cudaStream_t compute) {
    /* the pass's first launch tells whether it is being captured (see CUDA GRAPHS): a capture is
       thread-local, so its buckets go out from this thread (the queue is empty: drained by the
       last bt_ddp_wait) */
    if (d->launched == 0) d->captured = bt__capturing(compute);
    BT__DIST_CUDA(cudaEventRecord(d->ready_ev[bi], compute), "ddp");
    if (!d->threaded || d->captured) { bt__ddp_enqueue(d, bi); return; }
    pthread_mutex_lock(&d->q_lock);
    d->queue[d->q_tail++] = bi;
    pthread_cond_broadcast(&d->q_cv);
    pthread_mutex_unlock(&d->q_lock);
}

/* the launch thread has enqueued every queued bucket (the queue restarts empty) */
static void bt__ddp_drain(bt_ddp *d) {
    if (!d->threaded) return;
    pthread_mutex_lock(&d->q_lock);
    while (d->q_head < d->q_tail) pthread_cond_wait(&d->q_cv, &d->q_lock);
    d->q_head = d->q_tail = 0;
    pthread_mutex_unlock(&d->q_lock);
}

static void bt__ddp_thread_start(bt_ddp *d) {
    BT__DIST_CUDA(cudaGetDevice(&d->device), "ddp");
    d->queue = (int *)bt__dist_calloc((size_t)d->plan.n_buckets + 1, sizeof(int));
    pthread_mutex_init(&d->q_lock, NULL);
    pthread_cond_init(&d->q_cv, NULL);
    if (pthread_create(&d->thread, NULL, bt__ddp_thread_main, d)) bt_error("ddp: cannot start the launch thread");
    d->threaded = 1;
}
static void bt__ddp_thread_stop(bt_ddp *d) {
    if (!d->threaded) return;
    pthread_mutex_lock(&d->q_lock);
    d->quit = 1;
    pthread_cond_broadcast(&d->q_cv);
    pthread_mutex_unlock(&d->q_lock);
    pthread_join(d->thread, NULL);
    pthread_mutex_destroy(&d->q_lock);
    pthread_cond_destroy(&d->q_cv);
    bt__dist_free(d->queue);
    d->threaded = 0;
}
#endif

/* ranks without NCCL (host gradients, bt__on_store): bucket b reduced now, on the host, in the
   plan's order on every rank (launch_as_ready is refused there) */
static void bt__ddp_store_bucket(bt_ddp *d, int b) {
    const bt_bucket *k = &d->plan.buckets[b];
    char *grad = d->flat + (size_t)k->lo * d->grad_es;
    if (d->shard > 0) bt_reduce_to_owners(d->comm, grad, k->lo, k->hi - k->lo, d->shard, d->grad_dt, BT_RED_AVG, NULL);
    else bt_all_reduce(d->comm, grad, grad, k->hi - k->lo, d->grad_dt, BT_RED_AVG, NULL);
}
static void bt__ddp_launch(bt_ddp *d, int b, void *stream) {
    if (d->out[b]) return;
#ifdef BT_CUDA
    if (bt__ddp_remote(d)) {
        if (d->order) d->order[d->launched] = b;
        bt__ddp_launch_gpu(d, b, bt__stream(stream));
    }
#else
    (void)stream;
#endif
    if (bt__on_store(d->comm)) bt__ddp_store_bucket(d, b);
    d->out[b] = 1;
    d->launched++;
}

/* plan order: every full bucket at the head of the plan (force: all the rest) */
static void bt__ddp_launch_ready(bt_ddp *d, void *stream, int force) {
    for (; d->next < d->plan.n_buckets && (force || d->pending[d->next] == 0); d->next++) bt__ddp_launch(d, d->next, stream);
}

BTDEF bt_ddp *bt_ddp_create(bt_comm *c, void *flat_grad, bt_dtype grad_dtype, int64_t flat_numel, const bt_param_span *params,
                            int n_params, const bt_ddp_opts *opts) {
    bt_ddp_opts o;
    if (opts) o = *opts; else memset(&o, 0, sizeof o);
    if (!c) bt_error("ddp: no communicator");
    bt_dtype cdt = o.comm_dtype == BT_F32 ? grad_dtype : o.comm_dtype;
    if (bt__on_store(c) && (cdt != grad_dtype || o.launch_as_ready))
        bt_error("ddp on %s: ranks without NCCL (host gradients through the store) reduce each bucket in its own dtype (%s, not %s) "
                 "in the plan's order (not launch_as_ready)", c->name, bt_dtype_name(grad_dtype), bt_dtype_name(cdt));
    if (cdt != grad_dtype && !(grad_dtype == BT_F32 && cdt == BT_BF16))
        bt_error("ddp: gradients of %s communicated in %s; expected the same dtype or f32 gradients in bf16", bt_dtype_name(grad_dtype),
                 bt_dtype_name(cdt));
    if (o.shard_numel > 0 && o.shard_numel * (int64_t)c->size < flat_numel)
        bt_error("ddp: shards of %lld elements over %d ranks do not cover the %lld of the flat buffer", (long long)o.shard_numel,
                 c->size, (long long)flat_numel);
    for (int i = 0; i < n_params; i++)
        if (params[i].offset + params[i].numel > flat_numel)
            bt_error("ddp: parameter %d ends at element %lld, past the flat buffer's %lld", i,
                     (long long)(params[i].offset + params[i].numel), (long long)flat_numel);
    bt_ddp *d = (bt_ddp *)bt__dist_calloc(1, sizeof(bt_ddp));
    if (bt_bucket_plan_make(&d->plan, params, n_params, bt_dtype_size(grad_dtype), o.bucket_cap_bytes)) {
        bt__dist_free(d);
        bt_error("ddp: %s", bt_dist_error());
    }
    d->comm = c; d->flat = (char *)flat_grad; d->flat_numel = flat_numel; d->shard = o.shard_numel;
    d->spans = (bt_param_span *)bt__dist_calloc((size_t)(n_params ? n_params : 1), sizeof(bt_param_span));
    memcpy(d->spans, params, sizeof(bt_param_span) * (size_t)n_params);
    d->grad_dt = grad_dtype; d->comm_dt = cdt; d->grad_es = bt_dtype_size(grad_dtype); d->comm_es = bt_dtype_size(cdt);
    d->sync = 1;
    d->pending = (int *)bt__dist_calloc((size_t)d->plan.n_buckets, sizeof(int));
    d->out = (unsigned char *)bt__dist_calloc((size_t)d->plan.n_buckets, 1);
    d->as_ready = o.launch_as_ready != 0;
    d->defer = o.defer != 0;
    d->seen = (unsigned char *)bt__dist_calloc((size_t)n_params, 1);
    d->args = (bt__ddp_arg *)bt__dist_calloc((size_t)n_params, sizeof(bt__ddp_arg));
    for (int i = 0; i < n_params; i++) { d->args[i].ddp = d; d->args[i].param = i; }
    bt__ddp_reset(d);
#ifdef BT_CUDA
    if (bt__ddp_remote(d)) bt__ddp_gpu_init(d, &o);
    if (bt__ddp_remote(d) && o.launch_thread) bt__ddp_thread_start(d);
#endif
    return d;
}

BTDEF void bt_ddp_set_sync(bt_ddp *d, int sync) {
    if (d->reported > 0 && !sync) bt_error("ddp: set_sync(0) in the middle of a synced pass (call bt_ddp_wait first)");
    d->sync = sync != 0;
}

BTDEF void bt_ddp_param_ready(bt_ddp *d, int param, void *stream) {
    if (param < 0 || param >= d->plan.n_params) bt_error("ddp: parameter %d; expected 0..%d", param, d->plan.n_params - 1);
    if (!d->sync) return;
    if (d->seen[param])
        bt_error("ddp: parameter %d reported ready twice in one backward pass (a hook registered twice, or bt_ddp_wait not called "
                 "after the last pass?)", param);
    d->seen[param] = 1;
    d->reported++;
    int b = d->plan.param_bucket[param];
    if (--d->pending[b] == 0 && d->as_ready && !d->defer) bt__ddp_launch(d, b, stream);
    else if (!d->defer) bt__ddp_launch_ready(d, stream, 0);
}

BTDEF void bt_ddp_grad_hook(bt_tensor *leaf, void *user) {
    bt__ddp_arg *a = (bt__ddp_arg *)user;
    (void)leaf;
    bt_ddp_param_ready(a->ddp, a->param, NULL);
}
BTDEF void *bt_ddp_hook_arg(bt_ddp *d, int param) {
    if (param < 0 || param >= d->plan.n_params) bt_error("ddp: parameter %d; expected 0..%d", param, d->plan.n_params - 1);
    return &d->args[param];
}

BTDEF void bt_ddp_wait(bt_ddp *d, void *stream) {
    if (!d->sync) return;
    bt__ddp_launch_ready(d, stream, 1);
#ifdef BT_CUDA
    if (bt__ddp_remote(d)) {
        cudaStream_t s = bt__stream(stream);
        bt__ddp_drain(d);
        for (int b = 0; b < d->plan.n_buckets; b++) BT__DIST_CUDA(cudaStreamWaitEvent(s, d->done_ev[b], 0), "ddp wait");
        if (d->rows_pending) BT__DIST_CUDA(cudaStreamWaitEvent(s, d->rows_done_ev, 0), "ddp wait");
        d->rows_pending = 0;
        d->last_captured = d->captured;
        d->captured = 0;
    }
#endif
    bt__ddp_reset(d);
    d->passes++;
}

BTDEF const bt_bucket_plan *bt_ddp_plan(const bt_ddp *d) { return &d->plan; }
BTDEF bt_ddp_stats bt_ddp_get_stats(const bt_ddp *d) {
    bt_ddp_stats s;
    s.buckets = d->plan.n_buckets; s.launched = d->launched; s.passes = d->passes;
#ifdef BT_CUDA
    s.copy_engines = d->ce.on;
#else
    s.copy_engines = 0;
#endif
    return s;
}

BTDEF int bt_ddp_add_rows(bt_ddp *d, int param, const int32_t *idx, const void *rows, bt_dtype dt, int64_t n, int64_t C,
                          void *stream) {
    if (param < 0 || param >= d->plan.n_params) bt_error("ddp add_rows: parameter %d; expected 0..%d", param, d->plan.n_params - 1);
    int64_t numel = d->spans[param].numel;
    if (n < 0 || C <= 0 || numel % C) bt_error("ddp add_rows: parameter %d (%lld elements) is not a table of rows of %lld", param,
                                               (long long)numel, (long long)C);
    if (d->grad_dt != BT_F32) bt_error("ddp add_rows: the gradient buffer is %s; rows need fp32", bt_dtype_name(d->grad_dt));
    if (!d->sync) return 0;
#ifdef BT_CUDA
    if (!bt__ddp_remote(d)) return 0;
    if (!d->out[d->plan.param_bucket[param]])
        bt_error("ddp add_rows: parameter %d's bucket was not launched yet (report the parameter ready before its rows)", param);
    int W = d->comm->size, r = d->comm->rank;
    size_t es = bt_dtype_size(dt), idx_bytes = ((size_t)(W * n) * 4 + 255) / 256 * 256, need = idx_bytes + (size_t)(W * n * C) * es;
    if (need > d->rows_cap && d->captured)
        bt_error("ddp add_rows: %lld rows of %lld need a larger exchange buffer inside a CUDA graph capture (run one synced "
                 "pass with the same rows eagerly before capturing)", (long long)n, (long long)C);
    if (need > d->rows_cap) {   /* freed on the comm stream, the last to use it */
        if (d->rows_buf) bt_free(d->rows_buf);
        d->rows_buf = bt_alloc(bt_cuda_device(d->comm->dist->device), need, (void *)d->stream);
        d->rows_cap = need;
    }
    int32_t *gidx = (int32_t *)d->rows_buf;
    char *grows = (char *)d->rows_buf + idx_bytes;
    /* this rank's slot on the rows' stream (the previous pass's reads of the buffer finished before
       bt_ddp_wait returned that stream), then the comm stream takes over */
    cudaStream_t cs = bt__stream(stream);
    BT__DIST_CUDA(cudaMemcpyAsync(gidx + (size_t)r * n, idx, (size_t)n * 4, cudaMemcpyDeviceToDevice, cs), "ddp add_rows");
    BT__DIST_CUDA(cudaMemcpyAsync(grows + (size_t)(r * n * C) * es, rows, (size_t)(n * C) * es, cudaMemcpyDeviceToDevice, cs), "ddp add_rows");
    BT__DIST_CUDA(cudaEventRecord(d->rows_ev, cs), "ddp add_rows");
    bt__ddp_drain(d);   /* the buckets queued so far go first, in the same order on every rank */
    BT__DIST_CUDA(cudaStreamWaitEvent(d->stream, d->rows_ev, 0), "ddp add_rows");
    bt_all_gather(d->comm, gidx + (size_t)r * n, gidx, n, BT_I32, d->stream);
    bt_all_gather(d->comm, grows + (size_t)(r * n * C) * es, grows, n * C, dt, d->stream);
    /* rank order, and the deterministic kernel keeps equal indices in that order: the same sum on every rank */
    bt_k_embedding_backward_f32(dt, (float *)d->flat + d->spans[param].offset, grows, gidx, W * n, C, numel / C, 1.f / (float)W,
                                bt_get_deterministic(), d->stream);
    BT__DIST_CUDA(cudaEventRecord(d->rows_done_ev, d->stream), "ddp add_rows");
    d->rows_pending = 1;
    /* the embedding backward may take scratch memory on the comm stream; inside a capture it comes
       from the graph's pool, which ignores streams: the compute stream's later allocations could
       reuse it, so its later work waits for the rows (the last gradient of the pass) */
    if (d->captured) BT__DIST_CUDA(cudaStreamWaitEvent(cs, d->rows_done_ev, 0), "ddp add_rows");
    return 1;
#else
    (void)idx; (void)rows; (void)dt; (void)stream;
    return 0;
#endif
}

BTDEF int bt_ddp_rows_hook(bt_tensor *leaf, bt_tensor *idx, bt_tensor *rows, void *user) {
    bt__ddp_arg *a = (bt__ddp_arg *)user;
    (void)leaf;
    if (a->ddp->grad_dt != BT_F32 || rows->ndim < 1) return 0;
    return bt_ddp_add_rows(a->ddp, a->param, (const int32_t *)bt_data_ptr(idx), bt_data_ptr(rows), rows->dtype, bt_numel(idx),
                           rows->shape[rows->ndim - 1], NULL);
}

BTDEF void bt_ddp_print_trace(const bt_ddp *d, FILE *f) {
#ifdef BT_CUDA
    if (!bt__ddp_remote(d) || !d->start_ev) return;
    if (d->last_captured) { fprintf(f, "ddp trace: the last synced pass ran in a CUDA graph (no per-bucket times)\n"); return; }
    int n = d->plan.n_buckets;
    cudaEvent_t t0 = d->ready_ev[d->order[0]];
    double busy = 0, host = 0;
    fprintf(f, "ddp trace (ms after the first bucket was ready): bucket MB ready start done | host us\n");
    for (int k = 0; k < n; k++) {
        int b = d->order[k];
        float r = 0, s = 0, e = 0;
        if (cudaEventElapsedTime(&r, t0, d->ready_ev[b]) || cudaEventElapsedTime(&s, t0, d->start_ev[b]) ||
            cudaEventElapsedTime(&e, t0, d->done_ev[b])) { fprintf(f, "ddp trace: events not complete\n"); cudaGetLastError(); return; }
        double mb = (double)(d->plan.buckets[b].hi - d->plan.buckets[b].lo) * d->grad_es / 1048576.0;
        fprintf(f, "  %2d %7.1f %8.3f %8.3f %8.3f | %6.1f\n", b, mb, r, s, e, d->host_us[b]);
        busy += e - s; host += d->host_us[b];
    }
    fprintf(f, "ddp trace: %d buckets, comm stream busy %.3f ms, host %.1f us in launches\n", n, busy, host);
#else
    (void)d; (void)f;
#endif
}

BTDEF void bt_ddp_free(bt_ddp *d) {
    if (!d) return;
#ifdef BT_CUDA
    if (bt__ddp_remote(d)) {
        bt__ddp_drain(d);
        bt__ddp_thread_stop(d);
        cudaStreamSynchronize(d->stream);
        for (int b = 0; b < d->plan.n_buckets; b++) {
            cudaEventDestroy(d->ready_ev[b]); cudaEventDestroy(d->done_ev[b]);
            if (d->start_ev) cudaEventDestroy(d->start_ev[b]);
        }
        if (d->stage) bt_free(d->stage);
        if (d->rows_buf) bt_free(d->rows_buf);
        if (d->ce.on) bt__ce_release(d);
        cudaEventDestroy(d->rows_ev); cudaEventDestroy(d->rows_done_ev);
        if (d->own_stream) cudaStreamDestroy(d->stream);
        bt__dist_free(d->ready_ev); bt__dist_free(d->done_ev);
        bt__dist_free(d->start_ev); bt__dist_free(d->host_us); bt__dist_free(d->order);
    }
#endif
    bt_bucket_plan_free(&d->plan);
    bt__dist_free(d->pending); bt__dist_free(d->seen); bt__dist_free(d->args); bt__dist_free(d->out); bt__dist_free(d->spans);
    bt__dist_free(d);
}

/* ============================================================================================
   9. all-to-all
   ============================================================================================ */
BTDEF void bt_all_to_all(bt_comm *c, const void *send, void *recv, int64_t count, bt_dtype dt, void *stream) {
    size_t es = bt__coll_check(c, "all_to_all", send, recv, count, dt);
    size_t block = (size_t)count * es;
    if (count > 0 && send != recv && (const char *)send < (char *)recv + block * (size_t)c->size &&
        (char *)recv < (const char *)send + block * (size_t)c->size)
        bt_error("all_to_all on %s: the send and receive buffers overlap", c->name);
    if (c->size == 1 || !c->handle) { bt__local_copy(recv, send, block, stream); return; }
#if BT_DIST_NCCL
    cudaStream_t s = bt__stream(stream);
    ncclComm_t nc = (ncclComm_t)c->handle;
    ncclDataType_t t = bt__nccl_dtype(dt);
    ncclResult_t r = bt__group_begin(c);
    for (int p = 0; r == ncclSuccess && p < c->size; p++) {   /* every peer, this rank included */
        r = ncclSend((const char *)send + (size_t)p * block, (size_t)count, t, p, nc, s);
        if (r == ncclSuccess) r = ncclRecv((char *)recv + (size_t)p * block, (size_t)count, t, p, nc, s);
    }
    bt__group_end(c, r, "all_to_all", s);
#endif
}

/* ============================================================================================
   10. ZeRO
   ============================================================================================ */
BTDEF void bt_zero_init(bt_zero *z, int stage, bt_comm *comm, int64_t n_params, int64_t shard, bt_device dev) {
    memset(z, 0, sizeof *z);
    if (stage < 1 || stage > 2) bt_error("bt_zero_init: stage %d (1 or 2)", stage);
    if (shard < 0 || shard * (int64_t)comm->size < n_params)
        bt_error("bt_zero_init: shards of %lld elements over %d ranks do not cover %lld parameters", (long long)shard, comm->size, (long long)n_params);
    z->stage = stage; z->comm = comm; z->shard = shard;
    int64_t a = (int64_t)comm->rank * shard, b = a + shard;
    z->lo = a < n_params ? a : n_params;
    z->hi = b < n_params ? b : n_params;
    if (stage == 2) {
        bt_scope_begin();
        z->grad_sum = bt_keep(bt_zeros(bt_shape1(z->hi - z->lo), BT_F32, dev));
        bt_scope_end();
    }
}
BTDEF void bt_zero_free(bt_zero *z) { bt_release(z->grad_sum); memset(z, 0, sizeof *z); }
BTDEF bt_tensor *bt_zero_grads(const bt_zero *z, bt_tensor *flat_grad) {
    return z->stage == 2 ? z->grad_sum : bt_narrow(flat_grad, 0, z->lo, z->hi - z->lo);
}
BTDEF void bt_zero_accumulate(bt_zero *z, bt_tensor *flat_grad) {
    bt_scope_begin();
    bt_add_(z->grad_sum, bt_cast(bt_narrow(flat_grad, 0, z->lo, z->hi - z->lo), BT_F32), 1.0);
    bt_scope_end();
    bt_zero_(flat_grad);
}
BTDEF int64_t bt_zero_below(const bt_zero *z, int64_t W) {
    int64_t k = W - z->lo;
    return k < 0 ? 0 : k > z->hi - z->lo ? z->hi - z->lo : k;
}
BTDEF bt_tensor *bt_zero_sumsq(const bt_zero *z, bt_tensor *flat_grad, int64_t W) {
    bt_tensor *g = bt_zero_grads(z, flat_grad);
    int64_t n = bt_numel(g), w = bt_zero_below(z, W);
    bt_tensor *sq = bt_zeros(bt_shape1(2), BT_F32, bt_device_of(g));
    if (w > 0) bt_add_(bt_narrow(sq, 0, 0, 1), bt_sumsq(bt_narrow(g, 0, 0, w)), 1.0);
    if (n > w) bt_add_(bt_narrow(sq, 0, 1, 1), bt_sumsq(bt_narrow(g, 0, w, n - w)), 1.0);
    bt_all_reduce(z->comm, bt_data_ptr(sq), bt_data_ptr(sq), 2, BT_F32, BT_RED_SUM, NULL);
    return sq;
}
BTDEF void bt_zero_all_gather(const bt_zero *z, bt_tensor *flat) {
    bt_all_gather(z->comm, (float *)bt_data_ptr(flat) + z->comm->rank * z->shard, bt_data_ptr(flat), z->shard, BT_F32, NULL);
}
BTDEF bt_tensor *bt_zero_gather(const bt_zero *z, bt_tensor *x) {
    bt_comm *c = z->comm;
    int64_t S = z->shard, n = z->hi - z->lo;
    bt_scope_begin();
    bt_tensor *all = bt_keep(bt_zeros(bt_shape1(S * c->size), BT_F32, bt_device_of(x)));
    if (n > 0) bt_copy_(bt_narrow(all, 0, c->rank * S, n), x);
    bt_all_gather(c, (float *)bt_data_ptr(all) + c->rank * S, bt_data_ptr(all), S, BT_F32, NULL);
    bt_scope_end();
    return all;
}

#endif /* BT_DIST_IMPLEMENTATION_DONE */
#endif /* BT_DIST_IMPLEMENTATION */
