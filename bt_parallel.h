/* bt_parallel.h - BluTrain-C model parallelism, v0.3: tensor parallelism (Megatron-style, with
   sequence parallelism and asynchronous overlap) and context parallelism (ring attention with a
   zig-zag causal balance, all-gather and all-to-all variants), as autograd ops over bt_dist.h.

   USAGE
     #define BT_PARALLEL_IMPLEMENTATION in *one* C/CUDA file (with the BT_ALLOC_, BT_TENSOR_ and
     BT_DIST_ implementations, which may live in other files) and include this header. It
     includes bt_dist.h. Compiled by nvcc (BT_CUDA) the GPU path is built: NCCL collectives and
     the small kernels of section 4; a plain C build runs everything on CPU tensors.

       bt_mesh m; bt_mesh_init(&m, d->world, tp, cp);
       bt_comm *dpc, *tpc, *cpc; bt_dist_mesh_comms(d, &m, &dpc, &tpc, &cpc);
       bt_tp_opts to = {0}; to.sp = 1; to.async = 1;
       bt_tp *tp = bt_tp_create(tpc, &to);
       bt_cp *cp = bt_cp_create(cpc, BT_CP_RING);
       ...
       h = bt_tp_linear_col(tp, x, w_fc_shard, b_fc_shard);     // [.., 4C/tp]
       h = bt_tp_linear_row(tp, bt_gelu(h), w_proj_shard, b_proj);  // [.., C]
       o = bt_cp_attention_qkv(cp, qkv, heads, 1);               // local tokens, zig-zag
       ...
       bt_cp_free(cp); bt_tp_free(tp);                           // before bt_dist_shutdown

   TENSOR PARALLELISM (sections 5-7)
     A TP region is a stretch of the model where each rank of the tp group holds a slice of the
     features. The conjugate pairs cross its borders:
         bt_tp_copy        f: forward identity,          backward all-reduce (sum)
         bt_tp_all_reduce  g: forward all-reduce (sum),   backward identity
     With sequence parallelism the activations outside the regions hold 1/tp of the sequence
     (dim -2 of a [.., T, C] tensor: rank r holds rows [r T/tp, (r+1) T/tp)), and the pairs are
         bt_tp_all_gather      forward all-gather along dim -2,      backward reduce-scatter
         bt_tp_reduce_scatter  forward reduce-scatter along dim -2,  backward all-gather
         bt_tp_split           forward this rank's slice of dim -2,  backward all-gather
     bt_tp_enter / bt_tp_exit pick the pair the context's sp flag asks for (f or all-gather in;
     g or reduce-scatter out). The linear layers (y = x w^T + b, w [out, in] as bt_linear):
         bt_tp_linear_col  w [out/tp, in] (rows split), b [out/tp]: y = enter(x) w^T + b, sharded
         bt_tp_linear_row  w [out, in/tp] (columns split), b [out]: y = exit(x w^T) + b, the bias
                           added once, after the partial sums are reduced
     so an MLP is col -> elementwise -> row with one collective each way per direction.
     Vocabulary parallelism: rank r holds rows [r Vp/tp, (r+1) Vp/tp) of a [Vp, C] table
     (bt_vocab_shard). bt_tp_embedding looks ids up in its rows (zeros for ids it does not own)
     and exits the region (the ranks' rows add up to the full lookup). bt_tp_cross_entropy takes
     each rank's logits for its vocabulary slice only: the row max is all-reduced (max), then
     the sum of exp(z - max) together with the target's logit (from the rank that owns it, 0
     elsewhere) in one all-reduce (sum); loss = max + log(sum) - z_target. The logits are never
     gathered. Backward: dz = (softmax - onehot) / n_valid on each rank's own columns.
     bt_tp_linear_cross_entropy fuses the head (x enters the region, z = x w_shard^T) a chunk of
     rows at a time, as bt_linear_cross_entropy does.
     Gradients of replicated parameters: without sp they come out identical on every tp rank.
     With sp, a replicated parameter used on a sequence slice (layernorm weights, the row-
     parallel bias, a position embedding added after the embedding's exit) gets only its slice's
     contribution: sum those over the group with bt_tp_reduce_grad before the optimizer step.

   ASYNC TP (opts.async; section 6)
     The linear layers split their collective into chunks overlapped with the matmul that
     produces or consumes it, the collectives on the context's communication stream and the
     matmuls on the compute stream, ordered by events only:
       col forward (sp)    all-gather of chunk j+1 while the GEMMs of chunk j run
       col backward        dx GEMM per chunk, its all-reduce (reduce-scatter with sp) launched as
                           soon as the chunk is done; with sp the all-gather of x for dw runs
                           meanwhile; dw and db overlap the last chunks' collectives
       row forward         GEMM per chunk, its all-reduce / reduce-scatter right behind it (the
                           bias is added by rank 0's GEMM, so the reduction adds it once)
       row backward (sp)   chunked all-gather of dy overlapped with the dx GEMMs
     Without sp a chunk is a block of whole rows of x. With sp it is A / chunks whole sequences
     (A: the product of the dims before the last two), so a chunk of the local slice is
     contiguous and the GEMMs read and write the rank-major collective buffers in place (strided
     batches; one plain GEMM per chunk when it is one sequence): no permuted copies, except one of
     the gathered x or dy for dw when a chunk holds several sequences. Every collective costs the
     host a launch (tens of us with a non-blocking NCCL communicator), so chunks are few.
     The results equal the synchronous ops' up to the matmuls' summation order. chunks (default 2,
     at most 16) is lowered to a divisor of the rows (of A with sp); 1 is the synchronous schedule.

   CONTEXT PARALLELISM (section 8)
     The sequence of T tokens is cut into 2 cp chunks of c = T / (2 cp); rank i holds chunks i and
     2 cp - 1 - i, in that order (bt_zigzag_positions: its tokens' global positions, for position
     embeddings and targets; bt_zigzag_shard cuts a full-sequence tensor). Under a causal mask
     every rank then has the same work. bt_cp_attention takes each rank's q, k, v [B, H, 2c, D].
     Each (query half a, key half b) pair of a step is a c x c tile: causal when both are the same
     chunk, full when the key chunk precedes the query chunk, skipped when it follows. Tiles run on
     the attention kernels of bt_kernels.cuh (causal flag, per-row log-sum-exp lse) and merge into
     fp32 accumulators by the online-softmax rule:
         l = log(exp(l1) + exp(l2)),  o = exp(l1 - l) o1 + exp(l2 - l) o2.
     K/V strategies (bt_cp_kv, --cp-comm):
       BT_CP_RING       K/V travel the ring (send to rank + 1, receive from rank - 1) on the
                        communication stream while the tiles of the block in hand run: step s
                        holds rank (r - s) mod cp's K/V. Backward: the same ring for K/V, and each
                        block's dK/dV partial travels with it (a rank adds its tiles' share and
                        passes it on); after cp steps the sums arrive at their owners.
       BT_CP_ALLGATHER  one all-gather of every rank's K/V (overlapped with the local tiles);
                        backward gathers again and reduce-scatters the dK/dV partials.
       BT_CP_ALLTOALL   Ulysses: an all-to-all gives each rank all T tokens of H / cp heads, plain
                        attention over the whole sequence, an all-to-all back. H % cp == 0.

   FULLY SHARDED DATA PARALLELISM (section 9: bt_fsdp)
     A model's flat fp32 parameter buffer (its leaves tile it, as gpt2.h's and llama.h's do) is
     cut into units [lo, hi) that tile it (the embeddings, each block, the final norm). Every rank
     of the communicator owns one contiguous shard of every unit: unit u of n_u elements has
     shards of S_u = bt_shard_numel(n_u, W, align) elements, rank r holding [r S_u, (r+1) S_u)
     clipped to n_u (the rest is zero padding). A rank's shards of all units lie one after the
     other in f->param (fp32, sum_u S_u elements) with the reduced gradients beside them in
     f->grad; nothing of the full model is kept. Per unit and pass:
         bt_fsdp_gather(f, u, dt)   all-gather of the shards (cast to the compute dtype dt first:
                                    the wire and the buffer carry dt) into a new [n_u] tensor of
                                    the current scope; it lives while the caller's views and the
                                    autograd graph hold it, so dropping those references is the
                                    release. With grad mode on it is a leaf whose gradient hook
                                    (fired once the unit's gradient is final for the pass) runs
                                    bt_fsdp_reduce: the only way its gradient leaves the unit.
         bt_fsdp_reduce(f, u, g)    g [n_u], the unit's full gradient on this rank: cast to fp32,
                                    padded to W S_u, reduce-scattered (sum), scaled by 1/W for the
                                    mean (opts.sum keeps the sum), added to this rank's f->grad:
                                    micro-batches accumulate there (zero it per step).
     The update: bt_fsdp_params gives views of f->param that tile it, one per piece of a leaf this
     rank owns (2-D when the leaf had >= 2 dims, so AdamW decays exactly the elements one process
     decays) plus the padding; bt_adamw_init over them holds m and v for the shards only, and
     bt_adamw_update(opt, lr, f->grad) updates them. bt_fsdp_grad_norm: the sum of every rank's
     squared shard, all-reduced (the padding is 0): the one-process norm and so its clipping.
     Files: bt_fsdp_full gathers any shard-space tensor (the weights, AdamW's m and v) into the
     full buffer's layout ([numel], fp32); bt_fsdp_load takes this rank's shards out of one.
     Memory per rank, fp32 training with AdamW: 16 / W bytes a parameter (weights, gradient, m,
     v) plus the gathered units alive (in dt) and one unit's fp32 gradient during its reduce.
     The collectives are section 3's: NCCL on the compute stream for GPU tensors (no prefetch on
     a second stream yet), the TCP store for CPU tensors (the tests). Every rank must gather and
     reduce the same units in the same order (the same graph on every rank).

   A MODEL ON THE MESH (section 10: what gpt2_parallel.h and llama_parallel.h share)
     bt_par holds one model's mesh state: dp x tp x cp coordinates, the tp and cp contexts (on
     CPUs the one parallel axis spans the world, through the TCP store), and this rank's zig-zag
     positions (bt_par_batch cuts a batch's rows into its tokens and targets). A model's leaves
     under tp are described by bt_tp_shard (whole, rows, columns, or packed parts each split by
     rows); bt_tp_layout puts a rank's whole tensors first in its buffer, then its shards, so
     with sp the whole tensors' gradients (made from the rank's sequence slice only) are one span
     summed over tp by one collective (bt_par_reduce_grads). Every shard element is drawn at its
     whole tensor's offset (bt_tp_shard_normal_), so a tp run starts from the 1-process weights;
     bt_par_gather_whole and bt_par_shard_of_whole move any buffer (weights, AdamW's m and v)
     between a rank's layout and the 1-process one, so checkpoints hold the 1-process layout.
     A rank's loss is its tokens' mean; the cp ranks hold equal token counts, so the mean of their
     means is the sequence's mean and the gradients are averaged over dp x cp (dpcp_comm).

   STREAMS AND MEMORY
     Each context (bt_tp, bt_cp) owns one communication stream on its device; every collective of
     the context runs there, in host issue order, so two collectives of one communicator never run
     at once. A synchronous collective is fenced both ways (the comm stream waits for the compute
     stream's work so far, the compute stream waits for the collective). Every buffer is allocated
     while the compute stream (the device's current stream) is current, so it belongs to that
     stream's pool; each op ends with the compute stream waiting for the last collective it
     launched, so a buffer released afterwards is reused only after the communication that touched
     it. Events come from a small pool per context, re-recorded only after their waits are queued.
     Free a context before bt_dist_shutdown (its stream is destroyed, after it drains).

   CPU TENSORS
     Collectives on CPU tensors go through the world's TCP store (bt_dist_init with store_only):
     slow, but the same ops and the same chunk arithmetic run on the CPU, which is how the tests
     check multi-rank results without GPUs. The communicator must then span the world.

   ERRORS
     Ops check shapes, dtypes, devices and divisibility and raise bt_error naming the op and the
     shapes. The pure helpers return -1 and leave a message for bt_parallel_error(). On the GPU an
     embedding id or a target outside the vocabulary cannot be raised by the kernel that finds it:
     it sets the context's flag, which bt_tp_check (one host sync) and bt_tp_free raise.

   SECTIONS (implementation)
     1. pure helpers: vocabulary shards, zig-zag chunks
     2. contexts: communication stream, events, device binding
     3. collectives: NCCL for GPU tensors, the TCP store for CPU tensors
     4. kernels and their CPU loops: matmul, masked embedding, vocabulary-parallel cross-entropy
        statistics, lse merge, accumulation, attention tiles
     5. tensor parallel: the conjugate pairs
     6. tensor parallel: linear layers, synchronous and asynchronous
     7. tensor parallel: vocabulary embedding and cross-entropy
     8. context parallel: ring, all-gather and all-to-all attention
     9. fully sharded data parallelism: units, shards, gather, reduce-scatter, the update's views
    10. a model on the mesh: tp shards and layouts, the mesh's state (bt_par), a step's reductions

   HISTORY
     0.1  first version.
     0.2  fully sharded data parallelism (bt_fsdp).
     0.3  a model on the mesh (bt_par, bt_tp_shard, bt_tp_layout: what gpt2_parallel.h and
          llama_parallel.h share); bt_cp_attention_qkv_ex (grouped-query heads, RoPE).
*/
#ifndef BT_PARALLEL_H
#define BT_PARALLEL_H

#include "bt_dist.h"

#ifdef __cplusplus
extern "C" {
#endif

BTDEF const char *bt_parallel_error(void);   /* the last pure helper's failure ("" if none) */

/* ---- 1. pure helpers ---- */
/* rows [lo, hi) of a Vp-row table on rank `rank` of tp (Vp a multiple of tp); 0 or -1 */
BTDEF int bt_vocab_shard(int64_t Vp, int tp, int rank, int64_t *lo, int64_t *hi);
/* the real (non-padding) columns of the shard [lo, hi) of a vocabulary of V classes */
BTDEF int64_t bt_vocab_shard_valid(int64_t V, int64_t lo, int64_t hi);
/* 0 when T tokens cut into 2 cp equal chunks, else -1 */
BTDEF int bt_zigzag_check(int64_t T, int cp);
/* the first global position of rank's half (0: chunk rank, 1: chunk 2 cp - 1 - rank) */
BTDEF int64_t bt_zigzag_start(int64_t T, int cp, int rank, int half);
/* the global position of the rank's local token `local` (0 <= local < T / cp) */
BTDEF int64_t bt_zigzag_global(int64_t T, int cp, int rank, int64_t local);
/* pos[0 .. T/cp) = the global positions of the rank's tokens, in local order; 0 or -1 */
BTDEF int bt_zigzag_positions(int64_t T, int cp, int rank, int32_t *pos);
/* the rank's tokens of a full-sequence tensor, along dim (differentiable; any dtype) */
BTDEF bt_tensor *bt_zigzag_shard(bt_tensor *x, int dim, int cp, int rank);

/* ---- 2. tensor parallelism ---- */
typedef struct bt_tp bt_tp;
typedef struct {
    int sp;              /* sequence parallelism: activations outside TP regions hold 1/tp of dim -2 */
    int async;           /* overlap each linear layer's collective with its matmul (section 6) */
    int chunks;          /* async: chunks per layer; 0: 2 (at most 16) */
    int deterministic;   /* the GPU embedding backward without float atomics (as bt_set_deterministic) */
} bt_tp_opts;
BTDEF bt_tp *bt_tp_create(bt_comm *comm, const bt_tp_opts *opts);   /* opts NULL: all 0 */
BTDEF void bt_tp_free(bt_tp *tp);                  /* raises a pending bt_tp_check error first */
BTDEF int bt_tp_rank(const bt_tp *tp);
BTDEF int bt_tp_size(const bt_tp *tp);
BTDEF void bt_tp_check(bt_tp *tp);                 /* raise an out-of-vocabulary id/target seen on the GPU */
/* the conjugate pairs (size 1: identity) */
BTDEF bt_tensor *bt_tp_copy(bt_tp *tp, bt_tensor *x);
BTDEF bt_tensor *bt_tp_all_reduce(bt_tp *tp, bt_tensor *x);
BTDEF bt_tensor *bt_tp_all_gather(bt_tp *tp, bt_tensor *x);
BTDEF bt_tensor *bt_tp_reduce_scatter(bt_tp *tp, bt_tensor *x);
BTDEF bt_tensor *bt_tp_split(bt_tp *tp, bt_tensor *x);
BTDEF bt_tensor *bt_tp_enter(bt_tp *tp, bt_tensor *x);
BTDEF bt_tensor *bt_tp_exit(bt_tp *tp, bt_tensor *x);
/* linear layers: x [.., in], w [out/tp, in], b [out/tp] or NULL -> [.., out/tp] (the sequence
   dim gathered with sp); row: x [.., in/tp], w [out, in/tp], b [out] or NULL -> [.., out] */
BTDEF bt_tensor *bt_tp_linear_col(bt_tp *tp, bt_tensor *x, bt_tensor *w, bt_tensor *b);
BTDEF bt_tensor *bt_tp_linear_row(bt_tp *tp, bt_tensor *x, bt_tensor *w, bt_tensor *b);
/* vocabulary parallel: table [Vp/tp, C] (this rank's rows), idx i32 [..] (global ids in [0, Vp))
   -> [.., C] after bt_tp_exit (so with sp the rank's 1/tp of dim -2 of [.., T, C]) */
BTDEF bt_tensor *bt_tp_embedding(bt_tp *tp, bt_tensor *table, bt_tensor *idx);
/* logits [.., Vp/tp] (this rank's columns), targets i32 [..] (global, the same on every rank);
   V: the real classes of the whole vocabulary (<= 0: Vp); mean over rows whose target != ignore */
BTDEF bt_tensor *bt_tp_cross_entropy(bt_tp *tp, bt_tensor *logits, bt_tensor *targets, int64_t V, int ignore_index);
/* cross_entropy(linear_col(x, w)): x as bt_tp_linear_col's (entered here), w [Vp/tp, C], targets
   for the rows of the entered x; the logits made a chunk of rows at a time */
BTDEF bt_tensor *bt_tp_linear_cross_entropy(bt_tp *tp, bt_tensor *x, bt_tensor *w, bt_tensor *targets, int64_t V,
                                            int ignore_index);
/* grad (contiguous) = its sum over the tp group, in place: a replicated parameter's gradient with sp */
BTDEF void bt_tp_reduce_grad(bt_tp *tp, bt_tensor *grad);

/* ---- 3. context parallelism ---- */
typedef enum { BT_CP_RING = 0, BT_CP_ALLGATHER = 1, BT_CP_ALLTOALL = 2 } bt_cp_kv;
typedef struct bt_cp bt_cp;
BTDEF bt_cp *bt_cp_create(bt_comm *comm, bt_cp_kv kv);
BTDEF void bt_cp_free(bt_cp *cp);
BTDEF int bt_cp_rank(const bt_cp *cp);
BTDEF int bt_cp_size(const bt_cp *cp);
BTDEF const char *bt_cp_kv_name(bt_cp_kv kv);             /* "ring", "allgather", "alltoall" */
BTDEF int bt_cp_kv_parse(const char *s, bt_cp_kv *kv);    /* the names above; 0 or -1 */
/* attention over the whole sequence, each rank holding its zig-zag tokens: q, k, v [B, H, 2c, D]
   (D contiguous) -> [B, H, 2c, D]. causal 1: key j hidden from query i for global j > i. */
BTDEF bt_tensor *bt_cp_attention(bt_cp *cp, bt_tensor *q, bt_tensor *k, bt_tensor *v, int causal);
/* the same on a packed projection (bt_attention_qkv's layout): qkv [B, 2c, 3C] -> [B, 2c, C] */
BTDEF bt_tensor *bt_cp_attention_qkv(bt_cp *cp, bt_tensor *qkv, int64_t H, int causal);
/* the same on a grouped-query projection with RoPE (bt_attention_qkv_ex's layout): qkv [B, 2c,
   (H + 2 Hkv) D] -> [B, 2c, H D], Hkv dividing H; rope (NULL: none) rotates q and k at the tokens'
   global positions (each zig-zag half from its own start). Composed of autograd ops: the halves'
   rotations, each K/V head repeated for its group's H / Hkv query heads, bt_cp_attention_qkv. */
BTDEF bt_tensor *bt_cp_attention_qkv_ex(bt_cp *cp, bt_tensor *qkv, int64_t H, int64_t Hkv, const bt_rope_opts *rope, int causal);

/* ---- 4. fully sharded data parallelism (see FULLY SHARDED DATA PARALLELISM) ---- */
typedef struct { int64_t lo, hi; } bt_fsdp_unit;   /* elements [lo, hi) of the flat buffer */
typedef struct {
    int64_t align;        /* each unit's shard length is rounded up to this; 0: 64 elements */
    int sum;              /* 1: gradients summed over the ranks; 0: their mean (DDP's) */
} bt_fsdp_opts;
typedef struct bt_fsdp {
    bt_comm *comm;
    bt_device dev;
    int64_t numel;        /* the flat buffer's elements (the leaves' total) */
    int n_units;
    bt_fsdp_unit *units;
    int64_t *shard;       /* [n_units]: S_u, elements a rank holds of unit u (padded) */
    int64_t *soff;        /* [n_units + 1]: unit u's shard starts at soff[u] of param and grad */
    bt_tensor *param;     /* fp32 [soff[n_units]]: this rank's shards, the padding 0 */
    bt_tensor *grad;      /* fp32 [soff[n_units]]: the reduced gradients, summed over micro-batches */
    bt_tensor **pieces;   /* views of param tiling it, for the optimizer (bt_fsdp_params) */
    int n_pieces;
    int sum;
    int64_t gathers, reduces;   /* collectives issued (the tests count them) */
    void *hook_args;      /* [n_units]: each unit's gradient hook's argument */
} bt_fsdp;
/* params: the model's leaves, which tile one buffer of fp32 (their offsets in it, from 0, are the
   flat layout); units: sorted, tiling [0, numel) exactly (a gap, an overlap or a short end is an
   error naming it); flat (may be NULL): the full fp32 weights, this rank's shards copied out of
   them. A collective only in that every rank must call it alike. */
BTDEF bt_fsdp *bt_fsdp_create(bt_comm *comm, bt_device dev, bt_tensor **params, int n_params, const bt_fsdp_unit *units, int n_units,
                              bt_tensor *flat, const bt_fsdp_opts *opts);
BTDEF void bt_fsdp_free(bt_fsdp *f);
/* unit u's full parameters in dt ([n_u], current scope; with grad mode on a leaf whose gradient
   hook reduce-scatters it): a collective */
BTDEF bt_tensor *bt_fsdp_gather(bt_fsdp *f, int u, bt_dtype dt);
/* g: unit u's full gradient [n_u] (any float dtype): reduce-scattered, this rank's part (mean or
   sum) added to f->grad. A collective. */
BTDEF void bt_fsdp_reduce(bt_fsdp *f, int u, bt_tensor *g);
BTDEF void bt_fsdp_zero_grad(bt_fsdp *f);
/* x (fp32, contiguous, on the engine's device: a loss) averaged over the ranks in place: a collective */
BTDEF void bt_fsdp_mean(bt_fsdp *f, bt_tensor *x);
/* fp32 [1]: the L2 norm of the whole reduced gradient (every rank's shards): a collective */
BTDEF bt_tensor *bt_fsdp_grad_norm(bt_fsdp *f);
/* the optimizer's leaves: views of f->param tiling it, their .grad the same spans of f->grad */
BTDEF bt_tensor **bt_fsdp_params(bt_fsdp *f, int *n);
/* x: a shard-space tensor ([soff[n_units]] fp32: the weights, AdamW's m or v) -> every rank's
   shards in the flat layout, a new fp32 [numel] on x's device (current scope): a collective */
BTDEF bt_tensor *bt_fsdp_full(bt_fsdp *f, bt_tensor *x);
/* full: fp32 [numel] in the flat layout (any device) -> this rank's shards of it into x ([soff[n]]),
   the padding 0 */
BTDEF void bt_fsdp_load(bt_fsdp *f, bt_tensor *full, bt_tensor *x);

/* ---- 5. a model on the mesh: tp shards, the mesh's state, a step's reductions (see A MODEL ON
   THE MESH) ---- */
/* which part of a whole tensor [R, K] (K = 1: a vector) rank r of tp holds: all of it, rows
   [r R/tp, ..), columns [r K/tp, ..), or (PACKED) the rows of parts stacked along R (part[0] rows,
   then part[1], ..), each part split by rows, the rank's slices of them kept in the parts' order
   (a packed q | k | v or gate | up projection: the rank's heads' rows of each) */
enum { BT_TP_WHOLE, BT_TP_ROWS, BT_TP_COLS, BT_TP_PACKED };
#define BT_TP_MAX_PARTS 4
typedef struct { int kind; int64_t R, K; int ndim; int nparts; int64_t part[BT_TP_MAX_PARTS]; } bt_tp_shard;
BTDEF bt_tp_shard bt_tp_shard_make(int kind, int64_t R, int64_t K, int ndim);            /* WHOLE, ROWS, COLS */
BTDEF bt_tp_shard bt_tp_shard_packed(const int64_t *parts, int nparts, int64_t K, int ndim);
BTDEF bt_shape bt_tp_shard_shape(bt_tp_shard s, int tp);
BTDEF int64_t bt_tp_shard_numel(bt_tp_shard s, int tp);
/* rank r's shard (local: its elements, contiguous 1-D) to (to_full 1) or from the whole tensor full [R, K] */
BTDEF void bt_tp_shard_copy(bt_tp_shard s, int tp, int r, bt_tensor *local, bt_tensor *full, int to_full);
/* local := rank r's shard of a whole tensor drawn N(0, sd) from Philox at (seed, base + element):
   the elements the 1-process init draws at the whole tensor's offset base */
BTDEF void bt_tp_shard_normal_(bt_tp_shard s, int tp, int r, bt_tensor *local, double sd, uint64_t seed, uint64_t base);
/* A model's leaves under tp: leaf i's shard s[i]; a rank's buffer holds the whole tensors first,
   then the shards, each group in leaf order (local_off, whole_numel: that span's length); the
   1-process buffer holds every leaf whole in leaf order (whole_off), and so does a tp 1 layout */
typedef struct {
    int n, tp;
    bt_tp_shard *s;
    int64_t *local_off, *whole_off;
    int64_t local_numel, whole_numel, num_params;
} bt_tp_layout;
BTDEF void bt_tp_layout_init(bt_tp_layout *l, const bt_tp_shard *s, int n, int tp);   /* copies s */
/* the same with leaf i's shard of(cfg, i): a model's own table (gpt2_shard_of, llama_shard_of) */
typedef bt_tp_shard (*bt_tp_shard_fn)(const void *cfg, int leaf);
BTDEF void bt_tp_layout_of(bt_tp_layout *l, bt_tp_shard_fn of, const void *cfg, int n, int tp);
/* a rank's parameters in such a layout (local_numel); *whole (may be NULL): its whole tensors' */
BTDEF int64_t bt_tp_local_numel(bt_tp_shard_fn of, const void *cfg, int n, int tp, int64_t *whole);
BTDEF void bt_tp_layout_free(bt_tp_layout *l);
/* rank's buffer local ([>= local_numel]: weights, AdamW's m or v, which follow them element for
   element) to or from the whole model whole, leaf i at whole_off[i] (NULL: l->whole_off, the
   1-process buffer; a model file's order otherwise); both on one device */
BTDEF void bt_tp_layout_map(const bt_tp_layout *l, int rank, bt_tensor *local, bt_tensor *whole, const int64_t *whole_off, int to_whole);

/* The mesh's state for one model: dp x tp x cp (bt_dist.h: rank = (dp_i cp + cp_i) tp + tp_i),
   the tp and cp contexts, this rank's zig-zag tokens, the model's tp layout */
typedef struct {
    int tp, cp;              /* group sizes (1: none) */
    int sp, async_tp;        /* sequence parallelism, overlapped tp collectives (bt_tp_opts) */
    int deterministic;
    const char *cp_comm;     /* ring | allgather | alltoall (NULL: ring) */
    int B, T;                /* the micro-batch's rows and sequence length */
} bt_par_opts;
typedef struct bt_par {
    int tp, cp, dp, tp_rank, cp_rank, dp_rank, sp, on_cpu;
    bt_dist *dist;
    bt_comm *dpcp_comm;        /* the ranks of this tp index: they hold the same shard (DDP's and ZeRO's group) */
    bt_tp *tpc;                /* tp > 1 */
    bt_cp *cpc;                /* cp > 1 */
    bt_tp *cp_sum;             /* CPU with cp > 1: sums over the cp group through the store */
    int Tl;                    /* this rank's tokens of a sequence: T / cp */
    int32_t *pos;              /* [Tl]: their global positions */
    int32_t *loc_in, *loc_tg;  /* [B Tl]: a batch's tokens and targets of this rank */
    void *stage_ev[3];         /* GPU: timed events before the forward, after it, after the backward */
    double fwd_ms, bwd_ms;     /* their intervals in the last step */
    bt_tp_layout lay;          /* the model's shards (bt_par_set_layout; n 0: none set) */
} bt_par;
BTDEF bt_par *bt_par_open(const bt_par_opts *o, bt_dist *d, int on_gpu);   /* a collective */
BTDEF void bt_par_free(bt_par *p);                                          /* before bt_dist_shutdown */
BTDEF void bt_par_set_layout(bt_par *p, bt_tp_shard_fn of, const void *cfg, int n);   /* the model's n leaves' shards */
/* a batch's rows (full sequences: inputs, targets [B, T] on the host) -> this rank's zig-zag tokens
   (cp > 1; else *idx, *tgt are left as they are) */
BTDEF void bt_par_batch(bt_par *p, const int32_t *inputs, const int32_t *targets, int B, int T, bt_device dev,
                        bt_tensor **idx, bt_tensor **tgt);
/* after a step's backward passes: with sp the whole tensors' gradients summed over tp (of flat_grad,
   or with ZeRO (z->stage > 0) of this rank's reduced range); on CPUs the gradients' mean over cp */
BTDEF void bt_par_reduce_grads(bt_par *p, bt_tensor *flat_grad, const bt_zero *z);
BTDEF void bt_par_mean(bt_par *p, bt_tensor *t);              /* t (fp32, one element) := its mean over the ranks */
BTDEF void bt_par_tp_sum(bt_par *p, bt_tensor *t);            /* t := its sum over the tp group */
/* tp > 1, without ZeRO: the shards' squares summed over tp, the whole tensors' counted once */
BTDEF bt_tensor *bt_par_grad_norm(bt_par *p, bt_tensor *flat_grad);
/* x (a tp rank's buffer: weights, AdamW's m or v) gathered into the 1-process buffer's order on
   rank 0 ([num_params], owned by the caller; NULL elsewhere); a collective */
BTDEF bt_tensor *bt_par_gather_whole(bt_par *p, bt_tensor *x);
/* this rank's shard of whole ([num_params] in the 1-process order) as a new [n] tensor (n >= local_numel) */
BTDEF bt_tensor *bt_par_shard_of_whole(bt_par *p, bt_tensor *whole, int64_t n);
/* the compute stream's time of the last micro-batch's forward (k 0 -> 1) and backward (1 -> 2) */
BTDEF void bt_par_stage_mark(bt_par *p, bt_device dev, int k);
BTDEF void bt_par_stage_report(bt_par *p, char *json, size_t cap);   /* read, and appended to json */

#ifdef __cplusplus
}
#endif
#endif /* BT_PARALLEL_H */

/* ============================================================================================ */
/*                                       IMPLEMENTATION                                         */
/* ============================================================================================ */
#ifdef BT_PARALLEL_IMPLEMENTATION
#ifndef BT_PARALLEL_IMPLEMENTATION_DONE
#define BT_PARALLEL_IMPLEMENTATION_DONE

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <stdarg.h>
#include <stdint.h>
#include <math.h>
#ifdef BT_CUDA
#include <cuda_runtime.h>
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include "bt_kernels.cuh"
#endif

#ifdef __cplusplus
#define BT__PAR_TLS thread_local
#else
#define BT__PAR_TLS _Thread_local
#endif

/* ============================================================================================
   1. pure helpers: vocabulary shards, zig-zag chunks
   ============================================================================================ */
static BT__PAR_TLS char bt__par_errbuf[512];
BTDEF const char *bt_parallel_error(void) { return bt__par_errbuf; }

#if defined(__GNUC__)
__attribute__((format(printf, 1, 2)))
#endif
static int bt__par_fail(const char *fmt, ...) {   /* sets the message; returns -1 */
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(bt__par_errbuf, sizeof bt__par_errbuf, fmt, ap);
    va_end(ap);
    return -1;
}

BTDEF int bt_vocab_shard(int64_t Vp, int tp, int rank, int64_t *lo, int64_t *hi) {
    if (tp < 1 || rank < 0 || rank >= tp) return bt__par_fail("vocab shard: rank %d of a group of %d", rank, tp);
    if (Vp < tp || Vp % tp)
        return bt__par_fail("vocab shard: a vocabulary of %lld rows does not split into %d equal shards (pad it to a multiple of %d)",
                            (long long)Vp, tp, tp);
    *lo = Vp / tp * rank;
    *hi = *lo + Vp / tp;
    return 0;
}
BTDEF int64_t bt_vocab_shard_valid(int64_t V, int64_t lo, int64_t hi) {
    int64_t n = V - lo;
    return n < 0 ? 0 : n > hi - lo ? hi - lo : n;
}

BTDEF int bt_zigzag_check(int64_t T, int cp) {
    if (cp < 1) return bt__par_fail("zig-zag: %d context-parallel ranks", cp);
    if (T <= 0 || T % (2 * (int64_t)cp))
        return bt__par_fail("zig-zag: a sequence of %lld tokens does not cut into 2 x %d = %d equal chunks", (long long)T, cp, 2 * cp);
    return 0;
}
BTDEF int64_t bt_zigzag_start(int64_t T, int cp, int rank, int half) {
    int64_t c = T / (2 * (int64_t)cp);
    return (half ? 2 * (int64_t)cp - 1 - rank : rank) * c;
}
BTDEF int64_t bt_zigzag_global(int64_t T, int cp, int rank, int64_t local) {
    int64_t c = T / (2 * (int64_t)cp);
    return bt_zigzag_start(T, cp, rank, local >= c) + local % c;
}
BTDEF int bt_zigzag_positions(int64_t T, int cp, int rank, int32_t *pos) {
    if (bt_zigzag_check(T, cp)) return -1;
    if (rank < 0 || rank >= cp) return bt__par_fail("zig-zag: rank %d of %d", rank, cp);
    if (T > INT32_MAX) return bt__par_fail("zig-zag: %lld positions do not fit i32", (long long)T);
    for (int64_t i = 0; i < T / cp; i++) pos[i] = (int32_t)bt_zigzag_global(T, cp, rank, i);
    return 0;
}
BTDEF bt_tensor *bt_zigzag_shard(bt_tensor *x, int dim, int cp, int rank) {
    if (!x) bt_error("zigzag_shard: x is NULL");
    int d = dim < 0 ? dim + x->ndim : dim;
    if (d < 0 || d >= x->ndim) bt_error("zigzag_shard: dim %d out of range for %d dims", dim, x->ndim);
    int64_t T = x->shape[d];
    if (bt_zigzag_check(T, cp)) bt_error("zigzag_shard: dim %d of %lld: %s", d, (long long)T, bt__par_errbuf);
    if (rank < 0 || rank >= cp) bt_error("zigzag_shard: rank %d of %d", rank, cp);
    int64_t c = T / (2 * (int64_t)cp);
    bt_scope_begin();
    bt_tensor *parts[2] = {bt_narrow(x, d, bt_zigzag_start(T, cp, rank, 0), c), bt_narrow(x, d, bt_zigzag_start(T, cp, rank, 1), c)};
    bt_tensor *out = bt_retain(bt_concat(parts, 2, d));
    bt_scope_end();
    return bt__register(out);
}

/* ============================================================================================
   2. contexts: communication stream, events, device binding
   ============================================================================================ */
#define BT__PAR_NEV 64          /* events per context, used round robin (at most 2 x 16 + 4 outstanding) */
#define BT__PAR_MAX_CHUNKS 16

typedef struct {
    bt_comm *comm;
    bt_device dev;
    int bound;                  /* dev is set (GPU: stream and events made) */
    void *stream;               /* GPU: every collective of the context runs here */
    void *ev[BT__PAR_NEV];
    int ev_next;
} bt__par_ctx;

static void bt__par_ctx_init(bt__par_ctx *x, bt_comm *comm, const char *what) {
    if (!comm) bt_error("%s: no communicator (NULL)", what);
    memset(x, 0, sizeof *x);
    x->comm = comm;
}
/* the first op fixes the context's device; on a GPU it makes the stream and the events there */
static void bt__par_bind(bt__par_ctx *x, bt_device dev, const char *op) {
    if (x->bound) {
        if (!bt_device_eq(x->dev, dev))
            bt_error("%s: tensors on %s %d, but this context (communicator %s) works on %s %d", op, dev.type == BT_GPU ? "cuda" : "cpu",
                     dev.index, x->comm->name, x->dev.type == BT_GPU ? "cuda" : "cpu", x->dev.index);
        return;
    }
    x->dev = dev;
    x->bound = 1;
    if (dev.type != BT_GPU) return;
    x->stream = bt_stream_create(dev);
    for (int i = 0; i < BT__PAR_NEV; i++) x->ev[i] = bt_event_create(dev);
}
static void bt__par_ctx_free(bt__par_ctx *x) {
    if (!x->bound || x->dev.type != BT_GPU) return;
    bt_stream_destroy(x->dev, x->stream);   /* waits for its work first */
    for (int i = 0; i < BT__PAR_NEV; i++) bt_event_destroy(x->ev[i]);
}
static void *bt__par_ev(bt__par_ctx *x) {
    void *e = x->ev[x->ev_next];
    x->ev_next = (x->ev_next + 1) % BT__PAR_NEV;
    return e;
}
static void *bt__par_compute(const bt__par_ctx *x) { return x->dev.type == BT_GPU ? bt_stream_current(x->dev) : NULL; }
static void *bt__par_comm(const bt__par_ctx *x) { return x->dev.type == BT_GPU ? x->stream : NULL; }
/* an event after the work queued on `s` so far (NULL on the CPU, where everything is in order) */
static void *bt__par_mark(bt__par_ctx *x, void *s) {
    if (x->dev.type != BT_GPU) return NULL;
    void *e = bt__par_ev(x);
    bt_event_record(e, s);
    return e;
}
static void bt__par_wait(const bt__par_ctx *x, void *s, void *ev) {
    if (x->dev.type == BT_GPU && ev) bt_stream_wait_event(s, ev);
}
/* the comm stream waits for the compute stream's work so far; and the reverse */
static void bt__par_fence_in(bt__par_ctx *x) { bt__par_wait(x, bt__par_comm(x), bt__par_mark(x, bt__par_compute(x))); }
static void bt__par_fence_out(bt__par_ctx *x) { bt__par_wait(x, bt__par_compute(x), bt__par_mark(x, bt__par_comm(x))); }

/* the op's device is the current CUDA device while it runs (raw kernels and NCCL run there) */
static int bt__par_dev_enter(bt_device d) {
#ifdef BT_CUDA
    if (d.type == BT_GPU) {
        int prev = 0;
        if (cudaGetDevice(&prev) != cudaSuccess) bt_error("bt_parallel: cudaGetDevice failed");
        if (prev != d.index && cudaSetDevice(d.index) != cudaSuccess) bt_error("bt_parallel: cudaSetDevice(%d) failed", d.index);
        return prev;
    }
#else
    (void)d;
#endif
    return -1;
}
static void bt__par_dev_leave(int prev) {
#ifdef BT_CUDA
    if (prev >= 0) cudaSetDevice(prev);
#else
    (void)prev;
#endif
}

/* internal tensor work: grad mode off, inside a scope; bt__par_end keeps `keep` (+1, unregistered) */
static int bt__par_begin(void) {
    int old = bt_set_grad_enabled(0);
    bt_scope_begin();
    return old;
}
static bt_tensor *bt__par_end(int old, bt_tensor *keep) {
    bt_retain(keep);
    bt_scope_end();
    bt_set_grad_enabled(old);
    return keep;
}
/* a node's context pointer rides in its integer parameters */
static void bt__par_node_ctx(bt_node *n, void *ctx) { n->i[0] = (int64_t)(intptr_t)ctx; }
static void *bt__par_ctx_of(const bt_node *n) { return (void *)(intptr_t)n->i[0]; }
static int bt__par_wants(const bt_node *n, int i) { return n->next[i].node || n->next[i].leaf; }

static char *bt__par_at(bt_tensor *t, int64_t elems) { return (char *)bt_data_ptr(t) + elems * (int64_t)bt_dtype_size(t->dtype); }
static bt_dtype bt__par_sdt(bt_dtype dt) { return dt == BT_F64 ? BT_F64 : BT_F32; }   /* statistics dtype */

/* ============================================================================================
   3. collectives: NCCL (bt_dist.h) for GPU data on the context's stream; the world's TCP store
      for CPU data. Size 1: a copy or nothing.
   ============================================================================================ */
static void bt__par_copy(bt_device dev, void *dst, const void *src, size_t bytes, void *stream) {
    if (dst == src || bytes == 0) return;
    if (dev.type == BT_GPU) {
#ifdef BT_CUDA
        cudaError_t e = cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToDevice, (cudaStream_t)stream);
        if (e != cudaSuccess) bt_error("bt_parallel: device copy failed: %s", cudaGetErrorString(e));
#endif
        return;
    }
    (void)stream;
    memmove(dst, src, bytes);
}
/* [K, Q, P, X] -> [K, P, Q, X] (x contiguous, X elements a row): the reorder between a collective's
   rank-major blocks and the natural rows, as 2-D copies of whole rows (cudaMemcpy2DAsync on the
   compute stream: one read and one write of each byte, no per-element index math), min(P, Q) of
   them per k */
static bt_tensor *bt__par_swap(bt_tensor *x, int64_t K, int64_t Q, int64_t P, int64_t X) {
    bt_device dev = bt_device_of(x);
    bt_tensor *y = bt_empty(bt_shape1(bt_numel(x)), x->dtype, dev);
    size_t row = (size_t)X * bt_dtype_size(x->dtype);
    const char *s = (const char *)bt_data_ptr(x);
    char *d = (char *)bt_data_ptr(y);
    int by_q = Q <= P;
    for (int64_t k = 0; k < K; k++)
        for (int64_t i = 0; i < (by_q ? Q : P); i++) {   /* rows (q, p) for p < P (by_q) or q < Q */
            const char *sp = s + (size_t)(k * Q * P) * row + (size_t)(by_q ? i * P : i) * row;
            char *dp = d + (size_t)(k * P * Q) * row + (size_t)(by_q ? i : i * Q) * row;
            size_t ss = by_q ? row : (size_t)P * row, ds = by_q ? (size_t)Q * row : row, h = (size_t)(by_q ? P : Q);
            if (dev.type == BT_GPU) {
#ifdef BT_CUDA
                cudaError_t e = cudaMemcpy2DAsync(dp, ds, sp, ss, row, h, cudaMemcpyDeviceToDevice, (cudaStream_t)bt_stream_current(dev));
                if (e != cudaSuccess) bt_error("bt_parallel: reorder copy failed: %s", cudaGetErrorString(e));
#endif
            } else
                for (size_t r = 0; r < h; r++) memcpy(dp + r * ds, sp + r * ss, row);
        }
    return y;
}
/* every rank's n bytes, by rank, through the store (CPU data; the communicator spans the world) */
static void bt__par_store_gather(bt_comm *c, const void *mine, void *all, size_t n, const char *op) {
    bt_store *s = c->dist ? bt_dist_store(c->dist) : NULL;
    if (!s || c->size != c->dist->world)
        bt_error("%s on %s: CPU tensors across %d ranks go through the world's store, so the communicator must span the world "
                 "(bt_dist_init with store_only; world %d)", op, c->name, c->size, c->dist ? c->dist->world : 0);
    if (bt_store_allgather(s, mine, all, n)) bt_error("%s on %s: %s", op, c->name, bt_dist_error());
}
static char *bt__par_host_buf(size_t n) {
    char *p = (char *)malloc(n ? n : 1);
    if (!p) bt_error("bt_parallel: out of host memory (%zu bytes)", n);
    return p;
}

/* bt_dist.h's collectives, GPU (NCCL) or CPU (the store, which is why the communicator must span
   the world there) */
static void bt__par_all_reduce(bt_comm *c, bt_device dev, void *buf, int64_t n, bt_dtype dt, bt_red_op op, void *stream) {
    (void)dev;
    if (c->size == 1 || n == 0) return;
    bt_all_reduce(c, buf, buf, n, dt, op, stream);
}
/* recv [size * n] = every rank's send [n], by rank */
static void bt__par_all_gather(bt_comm *c, bt_device dev, const void *send, void *recv, int64_t n, bt_dtype dt, void *stream) {
    if (c->size == 1) { bt__par_copy(dev, recv, send, (size_t)n * bt_dtype_size(dt), stream); return; }
    bt_all_gather(c, send, recv, n, dt, stream);
}
/* recv [n] = the sum over ranks of block `rank` of send [size * n] */
static void bt__par_reduce_scatter(bt_comm *c, bt_device dev, const void *send, void *recv, int64_t n, bt_dtype dt, void *stream) {
    if (c->size == 1) { bt__par_copy(dev, recv, send, (size_t)n * bt_dtype_size(dt), stream); return; }
    bt_reduce_scatter(c, send, recv, n, dt, BT_RED_SUM, stream);
}
/* send n elements to dst and receive n from src (every rank of the group calls it) */
static void bt__par_send_recv(bt_comm *c, bt_device dev, const void *send, int dst, void *recv, int src, int64_t n, bt_dtype dt,
                              void *stream) {
    size_t bytes = (size_t)n * bt_dtype_size(dt);
    if (c->size == 1) { bt__par_copy(dev, recv, send, bytes, stream); return; }
    if (dev.type == BT_GPU) { bt_send_recv(c, send, n, dst, recv, n, src, dt, stream); return; }
    char *all = bt__par_host_buf(bytes * (size_t)c->size);
    bt__par_store_gather(c, send, all, bytes, "send_recv");
    memcpy(recv, all + (size_t)src * bytes, bytes);
    free(all);
}
/* recv[p * n ..] = rank p's send[rank * n ..] */
static void bt__par_all_to_all(bt_comm *c, bt_device dev, const void *send, void *recv, int64_t n, bt_dtype dt, void *stream) {
    size_t bytes = (size_t)n * bt_dtype_size(dt);
    if (c->size == 1) { bt__par_copy(dev, recv, send, bytes, stream); return; }
    if (dev.type == BT_GPU) { bt_all_to_all(c, send, recv, n, dt, stream); return; }
    size_t all_bytes = bytes * (size_t)c->size;
    char *all = bt__par_host_buf(all_bytes * (size_t)c->size);
    bt__par_store_gather(c, send, all, all_bytes, "all_to_all");
    for (int p = 0; p < c->size; p++) memcpy((char *)recv + (size_t)p * bytes, all + (size_t)p * all_bytes + (size_t)c->rank * bytes, bytes);
    free(all);
}

/* ============================================================================================
   4. kernels and their CPU loops. Each runs on the device's current (compute) stream; the CPU
      loops compute in double through bt__ld / bt__st, so f64 tensors check the math exactly.
   ============================================================================================ */
#ifdef BT_CUDA
#define BT__PAR_CUDA(call, what) do { cudaError_t e__ = (call); \
    if (e__ != cudaSuccess) bt_error("bt_parallel: %s: %s", what, cudaGetErrorString(e__)); } while (0)
#define BT__PAR_LAUNCHED(what) BT__PAR_CUDA(cudaGetLastError(), what)
__device__ __forceinline__ float bt__par_tof(float x) { return x; }
__device__ __forceinline__ float bt__par_tof(__nv_bfloat16 x) { return __bfloat162float(x); }
__device__ __forceinline__ float bt__par_tof(__half x) { return __half2float(x); }
template <typename T> __device__ __forceinline__ T bt__par_from(float x);
template <> __device__ __forceinline__ float bt__par_from<float>(float x) { return x; }
template <> __device__ __forceinline__ __nv_bfloat16 bt__par_from<__nv_bfloat16>(float x) { return __float2bfloat16(x); }
template <> __device__ __forceinline__ __half bt__par_from<__half>(float x) { return __float2half(x); }
#define BT__PAR_DISPATCH(dt, what, ...) switch (dt) { \
    case BT_F32: { typedef float T; __VA_ARGS__; } break; \
    case BT_BF16: { typedef __nv_bfloat16 T; __VA_ARGS__; } break; \
    case BT_F16: { typedef __half T; __VA_ARGS__; } break; \
    default: bt_error("%s: %s on the GPU (f32, bf16 or f16)", what, bt_dtype_name(dt)); }
static unsigned bt__par_grid(int64_t work, int threads) {
    int64_t b = (work + threads - 1) / threads;
    return (unsigned)(b < 1 ? 1 : b > 1048576 ? 1048576 : b);
}
static cudaStream_t bt__par_cur(bt_device dev) { return (cudaStream_t)bt_stream_current(dev); }

__device__ __forceinline__ float bt__par_warp_max(float v) {
    for (int o = 16; o; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
    return v;
}
__device__ __forceinline__ float bt__par_warp_sum(float v) {
    for (int o = 16; o; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}
/* the block's max (sum) in every thread; sh: 32 floats; blockDim.x a multiple of 32 */
__device__ float bt__par_block_max(float v, float *sh) {
    int w = threadIdx.x / 32, l = threadIdx.x % 32;
    v = bt__par_warp_max(v);
    __syncthreads();                     /* sh's previous readers are done */
    if (l == 0) sh[w] = v;
    __syncthreads();
    return bt__par_warp_max(l < (int)(blockDim.x / 32) ? sh[l] : -INFINITY);
}
__device__ float bt__par_block_sum(float v, float *sh) {
    int w = threadIdx.x / 32, l = threadIdx.x % 32;
    v = bt__par_warp_sum(v);
    __syncthreads();
    if (l == 0) sh[w] = v;
    __syncthreads();
    return bt__par_warp_sum(l < (int)(blockDim.x / 32) ? sh[l] : 0.f);
}

/* out[i, :] = table[idx[i] - lo, :] for an id this rank owns (lo <= id < lo + Vs), else 0; an id
   outside [0, Vall) sets *bad. Traffic: n C elements written, the owned rows read once. */
template <typename T>
__global__ void bt__par_embed_k(T *out, const T *table, const int32_t *idx, int64_t n, int64_t C, int64_t lo, int64_t Vs,
                                int64_t Vall, int *bad) {
    for (int64_t e = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; e < n * C; e += (int64_t)gridDim.x * blockDim.x) {
        int64_t i = e / C, j = e - i * C, id = idx[i], loc = id - lo;
        if (j == 0 && (id < 0 || id >= Vall) && bad) *bad = 1;
        out[e] = loc >= 0 && loc < Vs ? table[loc * C + j] : bt__par_from<T>(0.f);
    }
}
/* out[i] = idx[i] - lo where that falls in [0, range), keep (ignore) stays, anything else `other` */
__global__ void bt__par_remap_k(int32_t *out, const int32_t *idx, int64_t n, int64_t lo, int64_t range, int32_t other,
                                int keep_on, int32_t keep) {
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x) {
        int64_t loc = (int64_t)idx[i] - lo;
        out[i] = keep_on && idx[i] == keep ? keep : loc >= 0 && loc < range ? (int32_t)loc : other;
    }
}
/* Vocabulary-parallel cross-entropy, per row r of this rank's logits z [n, Vs]: L[r] = log sum_j
   exp(z_rj) over the real columns j < Vl (-inf when there are none), Z[r] = z_r,t-lo when this
   rank owns the target t, else 0. One block per row, two passes over the row (max, then sum);
   a target outside [0, V) that is not ignore sets *bad. */
template <typename T>
__global__ void __launch_bounds__(256) bt__par_xstats_k(float *L, float *Z, const T *z, const int32_t *tg, int64_t n, int64_t Vs,
                                                        int64_t Vl, int64_t lo, int64_t V, int ign, int *bad) {
    __shared__ float sh[32];
    for (int64_t r = blockIdx.x; r < n; r += gridDim.x) {
        const T *zr = z + r * Vs;
        float m = -INFINITY, s = 0.f;
        for (int64_t j = threadIdx.x; j < Vl; j += blockDim.x) m = fmaxf(m, bt__par_tof(zr[j]));
        m = bt__par_block_max(m, sh);
        if (m > -INFINITY)
            for (int64_t j = threadIdx.x; j < Vl; j += blockDim.x) s += expf(bt__par_tof(zr[j]) - m);
        s = bt__par_block_sum(s, sh);
        if (threadIdx.x == 0) {
            int64_t t = tg[r];
            float zt = 0.f;
            if (t != ign && (t < 0 || t >= V)) { if (bad) *bad = 1; }
            else if (t != ign && t >= lo && t < lo + Vl) zt = bt__par_tof(zr[t - lo]);
            L[r] = m > -INFINITY ? m + logf(s) : -INFINITY;
            Z[r] = zt;
        }
    }
}
/* S[r] = exp(L[r] - M[r]): this rank's share of the row's sum of exponentials at the global max */
__global__ void bt__par_xexp_k(float *S, const float *L, const float *M, int64_t n) {
    for (int64_t r = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; r < n; r += (int64_t)gridDim.x * blockDim.x)
        S[r] = L[r] > -INFINITY ? expf(L[r] - M[r]) : 0.f;
}
/* lse[r] = M[r] + log S[r]; loss[r] = lse[r] - S[n + r] (the target's logit), 0 for ignored rows */
__global__ void bt__par_xfinish_k(float *lse, float *loss, const float *M, const float *S, const int32_t *tg, int64_t n, int ign) {
    for (int64_t r = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; r < n; r += (int64_t)gridDim.x * blockDim.x) {
        float l = M[r] + logf(S[r]);
        lse[r] = l;
        loss[r] = tg[r] == ign ? 0.f : l - S[n + r];
    }
}
/* online-softmax merge of a block into an accumulator, one warp per row of D:
   l = log(e^la + e^lb), ao = e^(la - l) ao + e^(lb - l) bo. The block's rows always saw a key, so
   lb is finite; la starts at -inf (weight 0). Traffic: 2 reads and 1 write of fp32/T per element. */
template <typename T>
__global__ void bt__par_merge_k(float *ao, float *al, const T *bo, const float *bl, int64_t rows, int64_t D) {
    int64_t nw = (int64_t)gridDim.x * blockDim.x / 32;
    int lane = threadIdx.x % 32;
    for (int64_t r = (blockIdx.x * (int64_t)blockDim.x + threadIdx.x) / 32; r < rows; r += nw) {
        float a = al[r], b = bl[r], mx = fmaxf(a, b), l = mx + log1pf(expf(-fabsf(a - b)));
        float wa = expf(a - l), wb = expf(b - l);
        for (int64_t d = lane; d < D; d += 32) ao[r * D + d] = wa * ao[r * D + d] + wb * bt__par_tof(bo[r * D + d]);
        __syncwarp();
        if (lane == 0) al[r] = l;
    }
}
/* acc[i] += x[i], acc fp32 */
template <typename T>
__global__ void bt__par_acc_k(float *acc, const T *x, int64_t n) {
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x)
        acc[i] += bt__par_tof(x[i]);
}
#endif /* BT_CUDA */

/* C_b (+)= op(A_b) op(B_b) (+ bias) for b < batch: A, B of dtype dt, C and the bias of dt_c (dt,
   or f32 from bf16/f16 on the GPU); row-major, matrices sA/sB/sC elements apart; beta 0 or 1 */
static void bt__par_gemm(bt_device dev, bt_dtype dt, bt_dtype dt_c, void *C, const void *A, const void *B, const void *bias,
                         int64_t M, int64_t N, int64_t K, int ta, int tb, int64_t batch, int64_t sA, int64_t sB, int64_t sC,
                         double beta) {
    if (M <= 0 || N <= 0 || batch <= 0) return;
    if (dev.type == BT_GPU) {
#ifdef BT_CUDA
        if (dt_c == dt)
            bt_k_matmul(dt, C, A, B, bias, M, N, K, ta, tb, batch, sA, sB, sC, 1.f, (float)beta, bt_get_matmul_precision(), bt__par_cur(dev));
        else
            bt_k_matmul_out(dt, dt_c, C, A, B, bias, M, N, K, ta, tb, batch, sA, sB, sC, 1.f, (float)beta, bt_get_matmul_precision(),
                            bt__par_cur(dev));
#endif
        return;
    }
    size_t ea = bt_dtype_size(dt), ec = bt_dtype_size(dt_c);
    #pragma omp parallel for if (batch * M * N * K > 100000)
    for (int64_t bi = 0; bi < batch * M; bi++) {
        int64_t b = bi / M, i = bi % M;
        const char *a = (const char *)A + (size_t)(b * sA) * ea, *bb = (const char *)B + (size_t)(b * sB) * ea;
        char *c = (char *)C + (size_t)(b * sC) * ec;
        for (int64_t j = 0; j < N; j++) {
            double s = 0;
            for (int64_t k = 0; k < K; k++) s += bt__ld(a, dt, ta ? k * M + i : i * K + k) * bt__ld(bb, dt, tb ? j * K + k : k * N + j);
            double v = s + (beta != 0 ? beta * bt__ld(c, dt_c, i * N + j) : 0) + (bias ? bt__ld(bias, dt_c, j) : 0);
            bt__st(c, dt_c, i * N + j, v);
        }
    }
}

static void bt__par_embed_fwd(bt_device dev, bt_dtype dt, void *out, const void *table, const int32_t *idx, int64_t n, int64_t C,
                              int64_t lo, int64_t Vs, int64_t Vall, int *bad) {
    if (dev.type == BT_GPU) {
#ifdef BT_CUDA
        BT__PAR_DISPATCH(dt, "tp_embedding",
            bt__par_embed_k<T><<<bt__par_grid(n * C, 256), 256, 0, bt__par_cur(dev)>>>((T *)out, (const T *)table, idx, n, C, lo, Vs,
                                                                                         Vall, bad))
        BT__PAR_LAUNCHED("tp_embedding");
#endif
        return;
    }
    size_t es = bt_dtype_size(dt);
    (void)bad;
    for (int64_t i = 0; i < n; i++)
        if (idx[i] < 0 || idx[i] >= Vall)
            bt_error("tp_embedding: id %lld at position %lld is outside the vocabulary [0, %lld)", (long long)idx[i], (long long)i,
                     (long long)Vall);
    for (int64_t i = 0; i < n; i++) {
        int64_t loc = (int64_t)idx[i] - lo;
        if (loc >= 0 && loc < Vs) memcpy((char *)out + (size_t)(i * C) * es, (const char *)table + (size_t)(loc * C) * es, (size_t)C * es);
        else for (int64_t j = 0; j < C; j++) bt__st(out, dt, i * C + j, 0.0);
    }
}
/* out = the ids as local rows of [0, range) (keep stays when keep_on), else other */
static void bt__par_remap(bt_device dev, int32_t *out, const int32_t *idx, int64_t n, int64_t lo, int64_t range, int32_t other,
                          int keep_on, int32_t keep) {
    if (dev.type == BT_GPU) {
#ifdef BT_CUDA
        bt__par_remap_k<<<bt__par_grid(n, 256), 256, 0, bt__par_cur(dev)>>>(out, idx, n, lo, range, other, keep_on, keep);
        BT__PAR_LAUNCHED("tp remap");
#endif
        return;
    }
    for (int64_t i = 0; i < n; i++) {
        int64_t loc = (int64_t)idx[i] - lo;
        out[i] = keep_on && idx[i] == keep ? keep : loc >= 0 && loc < range ? (int32_t)loc : other;
    }
}
/* L[r], Z[r] of the kernel above, sdt = f32 (f64 on the CPU for f64 logits) */
static void bt__par_xent_stats(bt_device dev, bt_dtype dt, bt_dtype sdt, void *L, void *Z, const void *z, const int32_t *tg, int64_t n,
                               int64_t Vs, int64_t Vl, int64_t lo, int64_t V, int ign, int *bad, const char *op) {
    if (dev.type == BT_GPU) {
#ifdef BT_CUDA
        unsigned nb = (unsigned)(n < 1048576 ? (n > 0 ? n : 1) : 1048576);
        BT__PAR_DISPATCH(dt, op, bt__par_xstats_k<T><<<nb, 256, 0, bt__par_cur(dev)>>>((float *)L, (float *)Z, (const T *)z, tg, n, Vs, Vl, lo,
                                                                                        V, ign, bad))
        BT__PAR_LAUNCHED(op);
#endif
        return;
    }
    (void)bad;
    for (int64_t r = 0; r < n; r++)
        if (tg[r] != ign && (tg[r] < 0 || tg[r] >= V))
            bt_error("%s: target %lld at row %lld is outside [0, %lld) and not ignore_index %d", op, (long long)tg[r], (long long)r,
                     (long long)V, ign);
    #pragma omp parallel for if (n * Vl > 32768)
    for (int64_t r = 0; r < n; r++) {
        double m = -INFINITY, s = 0;
        for (int64_t j = 0; j < Vl; j++) { double v = bt__ld(z, dt, r * Vs + j); if (v > m) m = v; }
        for (int64_t j = 0; j < Vl && m > -INFINITY; j++) s += exp(bt__ld(z, dt, r * Vs + j) - m);
        int64_t t = tg[r];
        bt__st(L, sdt, r, m > -INFINITY ? m + log(s) : -INFINITY);
        bt__st(Z, sdt, r, t != ign && t >= lo && t < lo + Vl ? bt__ld(z, dt, r * Vs + (t - lo)) : 0.0);
    }
}
static void bt__par_xent_exp(bt_device dev, bt_dtype sdt, void *S, const void *L, const void *M, int64_t n) {
    if (dev.type == BT_GPU) {
#ifdef BT_CUDA
        bt__par_xexp_k<<<bt__par_grid(n, 256), 256, 0, bt__par_cur(dev)>>>((float *)S, (const float *)L, (const float *)M, n);
        BT__PAR_LAUNCHED("tp cross_entropy");
#endif
        return;
    }
    for (int64_t r = 0; r < n; r++) {
        double l = bt__ld(L, sdt, r);
        bt__st(S, sdt, r, l > -INFINITY ? exp(l - bt__ld(M, sdt, r)) : 0.0);
    }
}
static void bt__par_xent_finish(bt_device dev, bt_dtype sdt, void *lse, void *loss, const void *M, const void *S, const int32_t *tg,
                                int64_t n, int ign) {
    if (dev.type == BT_GPU) {
#ifdef BT_CUDA
        bt__par_xfinish_k<<<bt__par_grid(n, 256), 256, 0, bt__par_cur(dev)>>>((float *)lse, (float *)loss, (const float *)M,
                                                                               (const float *)S, tg, n, ign);
        BT__PAR_LAUNCHED("tp cross_entropy");
#endif
        return;
    }
    for (int64_t r = 0; r < n; r++) {
        double l = bt__ld(M, sdt, r) + log(bt__ld(S, sdt, r));
        bt__st(lse, sdt, r, l);
        bt__st(loss, sdt, r, tg[r] == ign ? 0.0 : l - bt__ld(S, sdt, n + r));
    }
}
/* gz [n, Vs] = gl[r] (exp(z - lse[r]) - [j == tl[r]]) for j < Vl, 0 elsewhere and on ignored rows
   (tl: local targets, `other` where another rank owns the target); gz may be z */
static void bt__par_xent_grad(bt_device dev, bt_dtype dt, bt_dtype sdt, void *gz, const void *z, const void *lse, const int32_t *tl,
                              const void *gl, int64_t n, int64_t Vl, int64_t Vs, int ign) {
    if (dev.type == BT_GPU) {
#ifdef BT_CUDA
        if (Vl > 0)
            bt_k_cross_entropy_backward(dt, gz, z, (const float *)lse, tl, (const float *)gl, n, Vl, Vs, ign, bt__par_cur(dev));
        else
            BT__PAR_CUDA(cudaMemsetAsync(gz, 0, (size_t)(n * Vs) * bt_dtype_size(dt), bt__par_cur(dev)), "tp cross_entropy");
#endif
        return;
    }
    #pragma omp parallel for if (n * Vs > 32768)
    for (int64_t r = 0; r < n; r++) {
        int valid = tl[r] != ign;
        double l = bt__ld(lse, sdt, r), s = valid ? bt__ld(gl, sdt, r) : 0;
        for (int64_t j = 0; j < Vs; j++) {
            double v = j < Vl && valid ? s * (exp(bt__ld(z, dt, r * Vs + j) - l) - (j == tl[r])) : 0;
            bt__st(gz, dt, r * Vs + j, v);
        }
    }
}
/* the merge kernel's math on `rows` rows of D (ao, al of sdt; bo of dt; bl of sdt) */
static void bt__par_merge(bt_device dev, bt_dtype dt, bt_dtype sdt, void *ao, void *al, const void *bo, const void *bl, int64_t rows,
                          int64_t D) {
    if (dev.type == BT_GPU) {
#ifdef BT_CUDA
        BT__PAR_DISPATCH(dt, "cp attention merge",
            bt__par_merge_k<T><<<bt__par_grid(rows * 32, 256), 256, 0, bt__par_cur(dev)>>>((float *)ao, (float *)al, (const T *)bo,
                                                                                            (const float *)bl, rows, D))
        BT__PAR_LAUNCHED("cp attention merge");
#endif
        return;
    }
    #pragma omp parallel for if (rows * D > 32768)
    for (int64_t r = 0; r < rows; r++) {
        double a = bt__ld(al, sdt, r), b = bt__ld(bl, sdt, r), mx = a > b ? a : b;
        double l = mx + log1p(exp(-fabs(a - b))), wa = exp(a - l), wb = exp(b - l);
        for (int64_t d = 0; d < D; d++) bt__st(ao, sdt, r * D + d, wa * bt__ld(ao, sdt, r * D + d) + wb * bt__ld(bo, dt, r * D + d));
        bt__st(al, sdt, r, l);
    }
}
/* acc (sdt) += x (dt), n elements */
static void bt__par_acc(bt_device dev, bt_dtype dt, bt_dtype sdt, void *acc, const void *x, int64_t n) {
    if (dev.type == BT_GPU) {
#ifdef BT_CUDA
        BT__PAR_DISPATCH(dt, "cp attention accumulate",
            bt__par_acc_k<T><<<bt__par_grid(n, 256), 256, 0, bt__par_cur(dev)>>>((float *)acc, (const T *)x, n))
        BT__PAR_LAUNCHED("cp attention accumulate");
#endif
        return;
    }
    #pragma omp parallel for if (n > 32768)
    for (int64_t i = 0; i < n; i++) bt__st(acc, sdt, i, bt__ld(acc, sdt, i) + bt__ld(x, dt, i));
}
/* *acc += the sum of x[0 .. n) (sdt) */
static void bt__par_sum_into(bt_device dev, bt_dtype sdt, void *acc, const void *x, int64_t n) {
    if (dev.type == BT_GPU) {
#ifdef BT_CUDA
        bt_k_sum_rows_acc(BT_F32, (float *)acc, x, n, 1, bt__par_cur(dev));
#endif
        return;
    }
    double s = bt__ld(acc, sdt, 0);
    for (int64_t i = 0; i < n; i++) s += bt__ld(x, sdt, i);
    bt__st(acc, sdt, 0, s);
}
/* *inv = 1 / max(1, #{r : tg[r] != ign}) */
static void bt__par_inv_count(bt_device dev, bt_dtype sdt, void *inv, const int32_t *tg, int64_t n, int ign) {
    if (dev.type == BT_GPU) {
#ifdef BT_CUDA
        bt_k_inv_count_ne((float *)inv, tg, n, ign, bt__par_cur(dev));
#endif
        return;
    }
    int64_t valid = 0;
    for (int64_t r = 0; r < n; r++) valid += tg[r] != ign;
    bt__st(inv, sdt, 0, 1.0 / (double)(valid ? valid : 1));
}

/* ---- attention tiles: [B, H, T, D] operands at p with element strides {b, h, t} (d contiguous);
   lse [B, H, T] contiguous (f32 on the GPU). The GPU runs bt_kernels.cuh's flash kernels; the CPU
   loops are the same math in double (S = q k^T / sqrt(D), masked above the diagonal when causal). */
typedef struct { char *p; int64_t s[3]; } bt__cp_mat;
static int64_t bt__cp_off(const bt__cp_mat *m, int64_t b, int64_t h, int64_t t) { return b * m->s[0] + h * m->s[1] + t * m->s[2]; }

static void bt__cp_tile_fwd(bt_device dev, bt_dtype dt, bt_dtype sdt, bt__cp_mat o, void *lse, bt__cp_mat q, bt__cp_mat k, bt__cp_mat v,
                            int64_t B, int64_t H, int64_t T, int64_t D, int causal) {
    double scale = 1.0 / sqrt((double)D);
    if (dev.type == BT_GPU) {
#ifdef BT_CUDA
        bt_k_attention_strided(dt, o.p, o.s, (float *)lse, q.p, q.s, k.p, k.s, v.p, v.s, B, H, H, T, D, (float)scale, causal,
                               bt_get_matmul_precision(), bt__par_cur(dev));
#endif
        return;
    }
    int oom = 0;
    #pragma omp parallel for if (B * H * T * T * D > 32768)
    for (int64_t bh = 0; bh < B * H; bh++) {
        int64_t b = bh / H, h = bh % H;
        double *s = (double *)malloc(sizeof(double) * (size_t)(T + D)), *acc = s + T;
        if (!s) {
            #pragma omp atomic write
            oom = 1;
            continue;
        }
        for (int64_t i = 0; i < T; i++) {
            int64_t qi = bt__cp_off(&q, b, h, i), last = causal ? i : T - 1;
            double mx = -INFINITY, sum = 0;
            for (int64_t j = 0; j <= last; j++) {
                double dot = 0;
                int64_t kj = bt__cp_off(&k, b, h, j);
                for (int64_t d = 0; d < D; d++) dot += bt__ld(q.p, dt, qi + d) * bt__ld(k.p, dt, kj + d);
                s[j] = dot * scale;
                if (s[j] > mx) mx = s[j];
            }
            for (int64_t d = 0; d < D; d++) acc[d] = 0;
            for (int64_t j = 0; j <= last; j++) {
                double p = exp(s[j] - mx);
                int64_t vj = bt__cp_off(&v, b, h, j);
                sum += p;
                for (int64_t d = 0; d < D; d++) acc[d] += p * bt__ld(v.p, dt, vj + d);
            }
            int64_t oi = bt__cp_off(&o, b, h, i);
            for (int64_t d = 0; d < D; d++) bt__st(o.p, dt, oi + d, acc[d] / sum);
            bt__st(lse, sdt, bh * T + i, mx + log(sum));
        }
        free(s);
    }
    if (oom) bt_error("cp attention (CPU): out of host memory for a tile of %lld tokens", (long long)T);
}
/* gq, gk, gv written (not accumulated) from go = d loss / d o, with the FINAL o and lse of the
   whole attention (a tile's share of the gradient: P = exp(S - lse), Dvec = rowsum(go * o)) */
static void bt__cp_tile_bwd(bt_device dev, bt_dtype dt, bt_dtype sdt, bt__cp_mat gq, bt__cp_mat gk, bt__cp_mat gv, bt__cp_mat go,
                            bt__cp_mat q, bt__cp_mat k, bt__cp_mat v, bt__cp_mat o, const void *lse, int64_t B, int64_t H, int64_t T,
                            int64_t D, int causal) {
    double scale = 1.0 / sqrt((double)D);
    if (dev.type == BT_GPU) {
#ifdef BT_CUDA
        bt_k_attention_backward_strided(dt, gq.p, gq.s, gk.p, gk.s, gv.p, gv.s, go.p, go.s, q.p, q.s, k.p, k.s, v.p, v.s, o.p, o.s,
                                        (const float *)lse, B, H, H, T, D, (float)scale, causal, bt_get_matmul_precision(),
                                        bt__par_cur(dev));
#endif
        return;
    }
    int oom = 0;
    #pragma omp parallel for if (B * H * T * T * D > 32768)
    for (int64_t bh = 0; bh < B * H; bh++) {
        int64_t b = bh / H, h = bh % H;
        double *dq = (double *)calloc((size_t)(3 * T * D + T), sizeof(double));
        if (!dq) {
            #pragma omp atomic write
            oom = 1;
            continue;
        }
        double *dk = dq + T * D, *dv = dk + T * D, *p = dv + T * D;
        for (int64_t i = 0; i < T; i++) {
            int64_t qi = bt__cp_off(&q, b, h, i), gi = bt__cp_off(&go, b, h, i), oi = bt__cp_off(&o, b, h, i), last = causal ? i : T - 1;
            double l = bt__ld(lse, sdt, bh * T + i), Di = 0;
            for (int64_t d = 0; d < D; d++) Di += bt__ld(go.p, dt, gi + d) * bt__ld(o.p, dt, oi + d);
            for (int64_t j = 0; j <= last; j++) {
                double dot = 0;
                int64_t kj = bt__cp_off(&k, b, h, j);
                for (int64_t d = 0; d < D; d++) dot += bt__ld(q.p, dt, qi + d) * bt__ld(k.p, dt, kj + d);
                p[j] = exp(dot * scale - l);
            }
            for (int64_t j = 0; j <= last; j++) {
                double dp = 0;
                int64_t kj = bt__cp_off(&k, b, h, j), vj = bt__cp_off(&v, b, h, j);
                for (int64_t d = 0; d < D; d++) {
                    double g = bt__ld(go.p, dt, gi + d);
                    dv[j * D + d] += p[j] * g;
                    dp += g * bt__ld(v.p, dt, vj + d);
                }
                double ds = p[j] * (dp - Di) * scale;
                for (int64_t d = 0; d < D; d++) {
                    dq[i * D + d] += ds * bt__ld(k.p, dt, kj + d);
                    dk[j * D + d] += ds * bt__ld(q.p, dt, qi + d);
                }
            }
        }
        for (int64_t t = 0; t < T; t++)
            for (int64_t d = 0; d < D; d++) {
                bt__st(gq.p, dt, bt__cp_off(&gq, b, h, t) + d, dq[t * D + d]);
                bt__st(gk.p, dt, bt__cp_off(&gk, b, h, t) + d, dk[t * D + d]);
                bt__st(gv.p, dt, bt__cp_off(&gv, b, h, t) + d, dv[t * D + d]);
            }
        free(dq);
    }
    if (oom) bt_error("cp attention backward (CPU): out of host memory for a tile of %lld tokens", (long long)T);
}

/* ============================================================================================
   5. tensor parallel: the context and the conjugate pairs
   ============================================================================================ */
struct bt_tp {
    bt__par_ctx x;
    int sp, async, chunks, det;
    int *bad;                   /* GPU: set by the embedding / cross-entropy kernels on a bad id or target */
    int64_t bad_V;              /* the vocabulary the last such op checked against (for the message) */
};

/* "[2, 3] f32 cpu" for messages, in rotating buffers */
static const char *bt__par_s(const bt_tensor *t) {
    static char bufs[4][160];
    static int k;
    k = (k + 1) & 3;
    return t ? bt_shape_str(t, bufs[k], sizeof bufs[k]) : "(null)";
}
static void bt__par_need(bt_tensor *t, const char *op, const char *arg, int float_only) {
    if (!t) bt_error("%s: %s is NULL", op, arg);
    if (t->refcount <= 0) bt_error("%s: %s was already released", op, arg);
    if (float_only && !bt_dtype_is_float(t->dtype)) bt_error("%s: %s must be a float tensor, got %s", op, arg, bt__par_s(t));
}
static void bt__par_same(bt_tensor *a, bt_tensor *b, int dtype_too, const char *op) {
    if (!bt_device_eq(bt_device_of(a), bt_device_of(b))) bt_error("%s: tensors on different devices: %s and %s", op, bt__par_s(a), bt__par_s(b));
    if (dtype_too && a->dtype != b->dtype) bt_error("%s: dtypes differ: %s and %s", op, bt__par_s(a), bt__par_s(b));
}
/* CPU ids: every one in [0, V) (or ignore when ign_on), checked before an op opens its scope, so an
   error leaves grad mode and the scope stack as they were; GPU ids are flagged by the kernels */
static void bt__par_check_ids(bt_tensor *ids, int64_t V, int ign_on, int ign, const char *op, const char *what) {
    if (bt_device_of(ids).type != BT_CPU) return;
    const int32_t *p = (const int32_t *)ids->storage->data;
    int64_t n = bt_numel(ids);
    for (int64_t i = 0; i < n; i++) {
        int64_t off = ids->offset, rem = i;
        for (int d = ids->ndim - 1; d >= 0; d--) { off += rem % ids->shape[d] * ids->stride[d]; rem /= ids->shape[d]; }
        int32_t v = p[off];
        if ((v < 0 || v >= V) && !(ign_on && v == ign))
            bt_error("%s: %s %lld at position %lld is outside [0, %lld)%s", op, what, (long long)v, (long long)i, (long long)V,
                     ign_on ? " and not ignore_index" : "");
    }
}
static bt_tensor *bt__par_rows_dense(bt_tensor *t) {   /* t (+1, registered) when its last dim is contiguous */
    return t->ndim == 0 || t->stride[t->ndim - 1] == 1 ? bt__register(bt_retain(t)) : bt_contiguous(t);
}

BTDEF bt_tp *bt_tp_create(bt_comm *comm, const bt_tp_opts *opts) {
    if (!comm) bt_error("bt_tp_create: no communicator (NULL)");
    bt_tp *tp = (bt_tp *)calloc(1, sizeof(bt_tp));
    if (!tp) bt_error("bt_tp_create: out of host memory");
    bt__par_ctx_init(&tp->x, comm, "bt_tp_create");
    if (opts) { tp->sp = opts->sp != 0; tp->async = opts->async != 0; tp->chunks = opts->chunks; tp->det = opts->deterministic != 0; }
    if (tp->chunks <= 0) tp->chunks = 2;
    if (tp->chunks > BT__PAR_MAX_CHUNKS) tp->chunks = BT__PAR_MAX_CHUNKS;
    return tp;
}
BTDEF int bt_tp_rank(const bt_tp *tp) { return tp->x.comm->rank; }
BTDEF int bt_tp_size(const bt_tp *tp) { return tp->x.comm->size; }

static void bt__tp_bind(bt_tp *tp, bt_device dev, const char *op) {
    int was = tp->x.bound;
    bt__par_bind(&tp->x, dev, op);
    if (was || dev.type != BT_GPU) return;
#ifdef BT_CUDA
    tp->bad = (int *)bt_alloc(dev, sizeof(int), bt_stream_current(dev));
    BT__PAR_CUDA(cudaMemsetAsync(tp->bad, 0, sizeof(int), bt__par_cur(dev)), "bt_tp");
#endif
}
/* the GPU flag (one host sync), cleared; 0 without a GPU */
static int bt__tp_take_bad(bt_tp *tp) {
    int v = 0;
#ifdef BT_CUDA
    if (!tp->bad) return 0;
    int pg = bt__par_dev_enter(tp->x.dev);
    bt_synchronize(tp->x.dev);
    BT__PAR_CUDA(cudaMemcpy(&v, tp->bad, sizeof(int), cudaMemcpyDeviceToHost), "bt_tp_check");
    if (v) BT__PAR_CUDA(cudaMemset(tp->bad, 0, sizeof(int)), "bt_tp_check");
    bt__par_dev_leave(pg);
#else
    (void)tp;
#endif
    return v;
}
static void bt__tp_raise_bad(int64_t V) {
    bt_error("bt_tp: an embedding id or a cross-entropy target outside the vocabulary [0, %lld) (and not ignore_index) was seen on "
             "the GPU since the last check", (long long)V);
}
BTDEF void bt_tp_check(bt_tp *tp) { if (tp && bt__tp_take_bad(tp)) bt__tp_raise_bad(tp->bad_V); }
BTDEF void bt_tp_free(bt_tp *tp) {
    if (!tp) return;
    int bad = bt__tp_take_bad(tp);
    int64_t V = tp->bad_V;
    if (tp->bad) bt_free(tp->bad);
    bt__par_ctx_free(&tp->x);
    free(tp);
    if (bad) bt__tp_raise_bad(V);
}

/* x viewed [A, n, F]: n = dim -2 (the sequence with sp), F the features */
typedef struct { int64_t A, n, F; } bt__sp_geo;
static bt__sp_geo bt__sp_geo_of(bt_tensor *x, const char *op) {
    if (x->ndim < 2) bt_error("%s: %s needs [.., T, C] (dim -2 is the sequence) for sequence parallelism", op, bt__par_s(x));
    bt__sp_geo g;
    g.F = x->shape[x->ndim - 1]; g.n = x->shape[x->ndim - 2]; g.A = 1;
    for (int d = 0; d < x->ndim - 2; d++) g.A *= x->shape[d];
    return g;
}
static bt_shape bt__shape_with(bt_tensor *x, int dim_from_end, int64_t v) {
    bt_shape s = bt_shape_of(x);
    s.d[s.ndim - dim_from_end] = v;
    return s;
}

/* y = x summed over the group (a new tensor) */
static bt_tensor *bt__tp_sum(bt_tp *tp, bt_tensor *x) {
    bt_tensor *y = bt_clone(x);
    bt__par_fence_in(&tp->x);
    bt__par_all_reduce(tp->x.comm, tp->x.dev, bt_data_ptr(y), bt_numel(y), y->dtype, BT_RED_SUM, bt__par_comm(&tp->x));
    bt__par_fence_out(&tp->x);
    return y;
}
/* [.., n, F] -> [.., W n, F]: every rank's slice of dim -2, by rank */
static bt_tensor *bt__tp_gather(bt_tp *tp, bt_tensor *x) {
    bt__sp_geo g = bt__sp_geo_of(x, "tp all_gather");
    int W = tp->x.comm->size;
    bt_tensor *xc = bt_contiguous(x), *buf = bt_empty(bt_shape3(W, g.A, g.n * g.F), x->dtype, bt_device_of(x));
    bt__par_fence_in(&tp->x);
    bt__par_all_gather(tp->x.comm, tp->x.dev, bt_data_ptr(xc), bt_data_ptr(buf), g.A * g.n * g.F, x->dtype, bt__par_comm(&tp->x));
    bt__par_fence_out(&tp->x);
    if (g.A != 1) buf = bt__par_swap(buf, 1, W, g.A, g.n * g.F);   /* [W, A, n F] -> [A, W, n F] */
    return bt_view(buf, bt__shape_with(x, 2, W * g.n));
}
/* [.., W n, F] -> [.., n, F]: this rank's slice of dim -2 of the sum over the group */
static bt_tensor *bt__tp_scatter_sum(bt_tp *tp, bt_tensor *x) {
    bt__sp_geo g = bt__sp_geo_of(x, "tp reduce_scatter");
    int W = tp->x.comm->size;
    if (g.n % W) bt_error("tp reduce_scatter: dim -2 of %s is not a multiple of the %d tensor-parallel ranks", bt__par_s(x), W);
    int64_t n = g.n / W;
    bt_tensor *xs = bt_contiguous(x);
    if (g.A != 1) xs = bt__par_swap(xs, 1, g.A, W, n * g.F);   /* [A, W, n F] -> [W, A, n F]: each rank's block contiguous */
    bt_tensor *out = bt_empty(bt__shape_with(x, 2, n), x->dtype, bt_device_of(x));
    bt__par_fence_in(&tp->x);
    bt__par_reduce_scatter(tp->x.comm, tp->x.dev, bt_data_ptr(xs), bt_data_ptr(out), g.A * n * g.F, x->dtype, bt__par_comm(&tp->x));
    bt__par_fence_out(&tp->x);
    return out;
}
static bt_tensor *bt__tp_slice(bt_tp *tp, bt_tensor *x) {
    bt__sp_geo g = bt__sp_geo_of(x, "tp split");
    int W = tp->x.comm->size;
    if (g.n % W) bt_error("tp split: dim -2 of %s is not a multiple of the %d tensor-parallel ranks", bt__par_s(x), W);
    return bt_contiguous(bt_narrow(x, x->ndim - 2, tp->x.comm->rank * (g.n / W), g.n / W));
}
static bt_tensor *bt__tp_alias(bt_tp *tp, bt_tensor *x) { (void)tp; return bt_view(x, bt_shape_of(x)); }

/* the backward functions of the pairs: the dual collective of the forward */
static void bt__tp_sum_back(bt_node *n, bt_tensor *g, bt_tensor **gin) {
    bt_tp *tp = (bt_tp *)bt__par_ctx_of(n);
    int pg = bt__par_dev_enter(bt_device_of(g));
    gin[0] = bt__tp_sum(tp, g);
    bt__par_dev_leave(pg);
}
static void bt__tp_identity_back(bt_node *n, bt_tensor *g, bt_tensor **gin) { (void)n; gin[0] = bt__register(bt_retain(g)); }
static void bt__tp_scatter_back(bt_node *n, bt_tensor *g, bt_tensor **gin) {
    bt_tp *tp = (bt_tp *)bt__par_ctx_of(n);
    int pg = bt__par_dev_enter(bt_device_of(g));
    gin[0] = bt__tp_scatter_sum(tp, g);
    bt__par_dev_leave(pg);
}
static void bt__tp_gather_back(bt_node *n, bt_tensor *g, bt_tensor **gin) {
    bt_tp *tp = (bt_tp *)bt__par_ctx_of(n);
    int pg = bt__par_dev_enter(bt_device_of(g));
    gin[0] = bt__tp_gather(tp, g);
    bt__par_dev_leave(pg);
}

/* sequence parallelism's shape rules, checked before an op opens its scope: [.., T, C], and
   (split) T a multiple of the group size */
static void bt__sp_check(bt_tp *tp, bt_tensor *x, int divisible, const char *op) {
    if (x->ndim < 2) bt_error("%s: %s needs [.., T, C] (dim -2 is the sequence) for sequence parallelism", op, bt__par_s(x));
    if (divisible && x->shape[x->ndim - 2] % tp->x.comm->size)
        bt_error("%s: dim -2 of %s is not a multiple of the %d tensor-parallel ranks", op, bt__par_s(x), tp->x.comm->size);
}
typedef bt_tensor *(*bt__tp_fn)(bt_tp *, bt_tensor *);
/* y = fwd(x), recorded with the dual collective as its backward; size 1: x itself.
   sp_rule: 0 any shape, 1 [.., T, C], 2 that with T a multiple of the group size */
static bt_tensor *bt__tp_pair(bt_tp *tp, bt_tensor *x, bt__tp_fn fwd, bt_backward_fn back, int sp_rule, const char *op) {
    if (!tp) bt_error("%s: no tensor-parallel context (NULL)", op);
    bt__par_need(x, op, "x", 1);
    if (sp_rule) bt__sp_check(tp, x, sp_rule == 2, op);
    if (tp->x.comm->size == 1) return bt__register(bt_retain(x));
    bt_device dev = bt_device_of(x);
    int pg = bt__par_dev_enter(dev);
    bt__tp_bind(tp, dev, op);
    int old = bt__par_begin();
    bt_tensor *y = bt__par_end(old, fwd(tp, x));
    bt_node *n = bt__record(op, back, y, &x, 1);
    if (n) bt__par_node_ctx(n, tp);
    bt__par_dev_leave(pg);
    return bt__register(y);
}
BTDEF bt_tensor *bt_tp_copy(bt_tp *tp, bt_tensor *x) { return bt__tp_pair(tp, x, bt__tp_alias, bt__tp_sum_back, 0, "tp_copy"); }
BTDEF bt_tensor *bt_tp_all_reduce(bt_tp *tp, bt_tensor *x) {
    return bt__tp_pair(tp, x, bt__tp_sum, bt__tp_identity_back, 0, "tp_all_reduce");
}
BTDEF bt_tensor *bt_tp_all_gather(bt_tp *tp, bt_tensor *x) {
    return bt__tp_pair(tp, x, bt__tp_gather, bt__tp_scatter_back, 1, "tp_all_gather");
}
BTDEF bt_tensor *bt_tp_reduce_scatter(bt_tp *tp, bt_tensor *x) {
    return bt__tp_pair(tp, x, bt__tp_scatter_sum, bt__tp_gather_back, 2, "tp_reduce_scatter");
}
BTDEF bt_tensor *bt_tp_split(bt_tp *tp, bt_tensor *x) { return bt__tp_pair(tp, x, bt__tp_slice, bt__tp_gather_back, 2, "tp_split"); }
BTDEF bt_tensor *bt_tp_enter(bt_tp *tp, bt_tensor *x) {
    if (!tp) bt_error("tp_enter: no tensor-parallel context (NULL)");
    return tp->sp ? bt_tp_all_gather(tp, x) : bt_tp_copy(tp, x);
}
BTDEF bt_tensor *bt_tp_exit(bt_tp *tp, bt_tensor *x) {
    if (!tp) bt_error("tp_exit: no tensor-parallel context (NULL)");
    return tp->sp ? bt_tp_reduce_scatter(tp, x) : bt_tp_all_reduce(tp, x);
}
BTDEF void bt_tp_reduce_grad(bt_tp *tp, bt_tensor *grad) {
    if (!tp) bt_error("tp_reduce_grad: no tensor-parallel context (NULL)");
    bt__par_need(grad, "tp_reduce_grad", "grad", 1);
    if (!bt_is_contiguous(grad)) bt_error("tp_reduce_grad: %s is not contiguous", bt__par_s(grad));
    if (tp->x.comm->size == 1) return;
    bt_device dev = bt_device_of(grad);
    int pg = bt__par_dev_enter(dev);
    bt__tp_bind(tp, dev, "tp_reduce_grad");
    grad->storage->version++;
    bt__par_fence_in(&tp->x);
    bt__par_all_reduce(tp->x.comm, dev, bt_data_ptr(grad), bt_numel(grad), grad->dtype, BT_RED_SUM, bt__par_comm(&tp->x));
    bt__par_fence_out(&tp->x);
    bt__par_dev_leave(pg);
}

/* ============================================================================================
   6. tensor parallel: linear layers
   ============================================================================================ */
static void bt__tp_linear_check(bt_tp *tp, bt_tensor *x, bt_tensor *w, bt_tensor *b, int row, const char *op) {
    if (!tp) bt_error("%s: no tensor-parallel context (NULL)", op);
    bt__par_need(x, op, "x", 1); bt__par_need(w, op, "w", 1);
    if (tp->sp) bt__sp_check(tp, x, row, op);
    bt__par_same(x, w, 1, op);
    if (w->ndim != 2 || x->ndim < 1 || x->shape[x->ndim - 1] != w->shape[1])
        bt_error("%s: x %s needs its last dim = in of w %s ([out, in])", op, bt__par_s(x), bt__par_s(w));
    if (b) {
        bt__par_need(b, op, "b", 1); bt__par_same(x, b, 1, op);
        if (b->ndim != 1 || b->shape[0] != w->shape[0]) bt_error("%s: bias %s must be [%lld]", op, bt__par_s(b), (long long)w->shape[0]);
    }
}
/* the largest chunk count <= tp->chunks that divides n */
static int64_t bt__tp_chunks(const bt_tp *tp, int64_t n) {
    int64_t k = tp->chunks < n ? tp->chunks : n;
    while (k > 1 && n % k) k--;
    return k < 1 ? 1 : k;
}
/* With sp a chunk is Ac = A / K whole rows of A ([A, n, F] local, [A, S = W n, F] gathered), so its
   local part is contiguous and what one collective moves is its rank-major form [W, Ac, n, F]. The
   GEMMs go straight between that form and the natural rows [Ac, S, F]: per rank r a GEMM batched
   over the Ac rows of A (natural side strided S rows, rank-major side n rows); for Ac = 1 the two
   forms are the same memory and one plain GEMM of S rows does it. No permuted copies.
   C = op(A) w (+ bias): the natural side is C when nat_is_c (else the A operand); fa, fc the
   widths of A's and C's rows, tb: w is [fc, fa] (y = x w^T) rather than [fa, fc]. */
static void bt__tp_chunk_gemm(bt_device dev, bt_dtype dt, char *nat, char *rm, int nat_is_c, const void *w, const void *bias, int W,
                              int64_t Ac, int64_t n, int64_t fa, int64_t fc, int tb) {
    int64_t es = (int64_t)bt_dtype_size(dt), fn = nat_is_c ? fc : fa, fr = nat_is_c ? fa : fc;
    if (Ac == 1 || W == 1) {
        bt__par_gemm(dev, dt, dt, nat_is_c ? nat : rm, nat_is_c ? rm : nat, w, bias, Ac * W * n, fc, fa, 0, tb, 1, 0, 0, 0, 0.0);
        return;
    }
    for (int r = 0; r < W; r++) {
        char *pn = nat + r * n * fn * es, *pr = rm + r * Ac * n * fr * es;
        int64_t sn = W * n * fn, sr = n * fr;
        bt__par_gemm(dev, dt, dt, nat_is_c ? pn : pr, nat_is_c ? pr : pn, w, bias, n, fc, fa, 0, tb, Ac, nat_is_c ? sr : sn, 0,
                     nat_is_c ? sn : sr, 0.0);
    }
}
/* gathered chunks G [K, W, Ac, n, F] -> natural [K Ac, W n, F]: a copy only when Ac > 1 */
static bt_tensor *bt__tp_gathered_natural(bt_tensor *G, int64_t K, int W, int64_t Ac, int64_t n, int64_t F) {
    if (Ac == 1 || W == 1) return bt_reshape(G, bt_shape3(K * Ac, W * n, F));
    return bt_reshape(bt__par_swap(G, K, W, Ac, n * F), bt_shape3(K * Ac, W * n, F));
}

/* Where bt_linear would add a weight's gradient straight into its leaf's .grad (the leaf, or the
   fp32 master behind a "cast" node), so do these ops: the same numerics as the synchronous path. */
static bt_tensor *bt__par_grad_sink(bt_node *n, int i, bt_dtype compute) {
    bt_tensor *leaf = n->next[i].leaf;
    bt_node *c = n->next[i].node;
    if (!leaf && c && c->n_in == 1 && c->op && !strcmp(c->op, "cast")) leaf = c->next[0].leaf;
    if (!leaf || !leaf->grad || !bt_is_contiguous(leaf->grad)) return NULL;
    bt_tensor *g = leaf->grad;
    int64_t want = 1;
    for (int d = 0; d < n->in_shape[i].ndim; d++) want *= n->in_shape[i].d[d];
    if (bt_numel(g) != want) return NULL;
    int gpu = bt_device_of(g).type == BT_GPU;
    return g->dtype == compute || (gpu && g->dtype == BT_F32 && (compute == BT_BF16 || compute == BT_F16)) ? g : NULL;
}
/* input i's weight gradient G^T X ([out, in] from G [rows, out], X [rows, in]): into the sink, or returned */
static bt_tensor *bt__par_wgrad(bt_node *n, int i, bt_device dev, bt_dtype dt, const void *G, const void *X, int64_t rows, int64_t out,
                                int64_t in) {
    bt_tensor *sink = bt__par_grad_sink(n, i, dt);
    if (sink) {
        sink->storage->version++;
        bt__par_gemm(dev, dt, sink->dtype, bt_data_ptr(sink), G, X, NULL, out, in, rows, 1, 0, 1, 0, 0, 0, 1.0);
        return NULL;
    }
    bt_tensor *gw = bt_empty(bt_shape2(out, in), dt, dev);
    bt__par_gemm(dev, dt, dt, bt_data_ptr(gw), G, X, NULL, out, in, rows, 1, 0, 1, 0, 0, 0, 0.0);
    return gw;
}
/* input i's bias gradient: the column sums of g2 [rows, out] */
static bt_tensor *bt__par_bgrad(bt_node *n, int i, bt_tensor *g2) {
    bt_device dev = bt_device_of(g2);
    bt_tensor *sink = dev.type == BT_GPU ? bt__par_grad_sink(n, i, g2->dtype) : NULL;
    if (sink && sink->dtype == BT_F32) {
#ifdef BT_CUDA
        sink->storage->version++;
        bt_k_sum_rows_acc(g2->dtype, (float *)bt_data_ptr(sink), bt_data_ptr(g2), g2->shape[0], g2->shape[1], bt__par_cur(dev));
#endif
        return NULL;
    }
    int dims[1] = {0};
    return bt_sum(g2, dims, 1, 0);
}

/* what an asynchronous linear's forward works on: x, and x and w made contiguous; the bias's data
   (NULL: none, or not this rank's to add); device, dtype, sizes and the tensor-parallel ranks W */
typedef struct {
    bt_device dev;
    bt_dtype dt;
    int W;
    int64_t Fin, out;
    bt_tensor *x, *xc, *wc;
    const void *bias;
} bt__tp_call;
/* src's K chunks of Ac n F elements (sp's rows: chunk j at j Ac n F) all-gathered on the comm
   stream, chunk j into [W, Ac, n, F] at j W Ac n F of the result; ev[j] marks chunk j gathered */
static bt_tensor *bt__tp_gather_chunks(bt__par_ctx *cx, bt_device dev, bt_dtype dt, bt_tensor *src, int64_t K, int64_t Ac, int64_t n,
                                       int64_t F, void **ev) {
    int64_t W = cx->comm->size, m = Ac * n * F;
    bt_tensor *G = bt_empty(bt_shape1(W * K * m), dt, dev);
    void *cs = bt__par_comm(cx);
    bt__par_fence_in(cx);
    for (int64_t j = 0; j < K; j++) {
        bt__par_all_gather(cx->comm, dev, bt__par_at(src, j * m), bt__par_at(G, j * W * m), m, dt, cs);
        ev[j] = bt__par_mark(cx, cs);
    }
    return G;
}
/* dst [N, M] = A [N, K] B (tb: B^T) + bias, over contiguous rows, a chunk of rows at a time
   (tp->chunks of them), each chunk's all-reduce on the comm stream right behind its GEMM */
static void bt__tp_gemm_all_reduce(bt_tp *tp, bt_device dev, bt_dtype dt, char *dst, const char *A, const void *B, const void *bias,
                                   int64_t N, int64_t M, int64_t K, int tb) {
    bt__par_ctx *cx = &tp->x;
    void *cs = bt__par_comm(cx), *ks = bt__par_compute(cx);
    int64_t es = (int64_t)bt_dtype_size(dt), chunks = tp->chunks < N ? tp->chunks : N, step = chunks > 0 ? (N + chunks - 1) / chunks : N;
    for (int64_t r0 = 0; r0 < N; r0 += step) {
        int64_t nr = step < N - r0 ? step : N - r0;
        bt__par_gemm(dev, dt, dt, dst + r0 * M * es, A + r0 * K * es, B, bias, nr, M, K, 0, tb, 1, 0, 0, 0, 0.0);
        bt__par_wait(cx, cs, bt__par_mark(cx, ks));
        bt__par_all_reduce(cx->comm, dev, dst + r0 * M * es, nr * M, dt, BT_RED_SUM, cs);
    }
}

/* ---- column-parallel, asynchronous (the synchronous one is bt_linear after bt_tp_enter) ---- */
static void bt__tp_col_back(bt_node *nd, bt_tensor *g, bt_tensor **gin) {
    bt_tp *tp = (bt_tp *)bt__par_ctx_of(nd);
    bt_tensor *xc = nd->saved[0], *wc = nd->saved[1];
    bt_device dev = bt_device_of(g);
    bt_dtype dt = g->dtype;
    int64_t Fin = wc->shape[1], out = wc->shape[0], es = (int64_t)bt_dtype_size(dt);
    int want_x = bt__par_wants(nd, 0), want_w = bt__par_wants(nd, 1), want_b = nd->n_in > 2 && bt__par_wants(nd, 2);
    int pg = bt__par_dev_enter(dev), W = tp->x.comm->size;
    bt__par_ctx *x = &tp->x;
    void *cs = bt__par_comm(x), *ks = bt__par_compute(x);
    bt_tensor *gc = bt_contiguous(g);
    const char *gp = (const char *)bt_data_ptr(gc);
    if (!tp->sp) {                        /* dx = all_reduce(g w), chunk by chunk of rows, behind the GEMMs */
        int64_t N = bt_numel(gc) / out;
        bt_tensor *dx = want_x ? bt_empty(bt_shape_of(xc), dt, dev) : NULL;
        if (dx) bt__tp_gemm_all_reduce(tp, dev, dt, (char *)bt_data_ptr(dx), gp, bt_data_ptr(wc), NULL, N, Fin, out, 0);   /* dx = g w */
        if (want_w) gin[1] = bt__par_wgrad(nd, 1, dev, dt, gp, bt_data_ptr(xc), N, out, Fin);
        if (want_b) gin[2] = bt__par_bgrad(nd, 2, bt_reshape(gc, bt_shape2(N, out)));
        if (dx) { bt__par_fence_out(x); gin[0] = dx; }
    } else {                              /* dx = reduce_scatter(g w) by chunks; x gathered again for dw */
        bt__sp_geo sg = bt__sp_geo_of(gc, "tp_linear_col backward");
        int64_t A = sg.A, S = sg.n, n = S / W, K = bt__tp_chunks(tp, A), Ac = A / K;
        bt__par_fence_in(x);
        bt_tensor *XG = NULL;
        void *xg_ev = NULL;
        if (want_w) {                      /* one collective, not K: each costs the host more than the copy below */
            XG = bt_empty(bt_shape1(W * A * n * Fin), dt, dev);
            bt__par_all_gather(tp->x.comm, dev, bt_data_ptr(xc), bt_data_ptr(XG), A * n * Fin, dt, cs);
            xg_ev = bt__par_mark(x, cs);
        }
        bt_tensor *DX = NULL;
        if (want_x) {                      /* D chunk j [W, Ac, n, Fin] = g w, reduce-scattered into DX's rows of chunk j */
            bt_tensor *D = bt_empty(bt_shape1(W * A * n * Fin), dt, dev);
            DX = bt_empty(bt_shape_of(xc), dt, dev);
            for (int64_t j = 0; j < K; j++) {
                char *Dj = bt__par_at(D, j * W * Ac * n * Fin);
                bt__tp_chunk_gemm(dev, dt, (char *)gp + j * Ac * S * out * es, Dj, 0, bt_data_ptr(wc), NULL, W, Ac, n, out, Fin, 0);
                bt__par_wait(x, cs, bt__par_mark(x, ks));
                bt__par_reduce_scatter(tp->x.comm, dev, Dj, bt__par_at(DX, j * Ac * n * Fin), Ac * n * Fin, dt, cs);
            }
        }
        if (want_w) {
            bt__par_wait(x, ks, xg_ev);
            bt_tensor *xf = bt__tp_gathered_natural(XG, 1, W, A, n, Fin);
            gin[1] = bt__par_wgrad(nd, 1, dev, dt, gp, bt_data_ptr(xf), A * S, out, Fin);
        }
        if (want_b) gin[2] = bt__par_bgrad(nd, 2, bt_reshape(gc, bt_shape2(A * S, out)));
        bt__par_fence_out(x);
        if (DX) gin[0] = DX;
    }
    bt__par_dev_leave(pg);
}
static bt_tensor *bt__tp_col_fwd(bt_tp *tp, const bt__tp_call *c) {
    bt_device dev = c->dev;
    bt_dtype dt = c->dt;
    int64_t Fin = c->Fin, out = c->out;
    if (!tp->sp) {
        int64_t N = bt_numel(c->xc) / Fin;
        bt_tensor *y = bt_empty(bt__shape_with(c->x, 1, out), dt, dev);
        bt__par_gemm(dev, dt, dt, bt_data_ptr(y), bt_data_ptr(c->xc), bt_data_ptr(c->wc), c->bias, N, out, Fin, 0, 1, 1, 0, 0, 0, 0.0);
        return y;
    }
    /* all-gather chunk j on the comm stream, the GEMMs of chunk j behind it */
    bt__sp_geo sg = bt__sp_geo_of(c->x, "tp_linear_col");
    int64_t A = sg.A, n = sg.n, W = c->W, S = W * n, K = bt__tp_chunks(tp, A), Ac = A / K;
    bt_shape os = bt__shape_with(c->x, 2, S);
    os.d[os.ndim - 1] = out;
    bt_tensor *y = bt_empty(os, dt, dev);
    void *ks = bt__par_compute(&tp->x), *ev[BT__PAR_MAX_CHUNKS];
    bt_tensor *G = bt__tp_gather_chunks(&tp->x, dev, dt, c->xc, K, Ac, n, Fin, ev);
    for (int64_t j = 0; j < K; j++) {
        bt__par_wait(&tp->x, ks, ev[j]);
        bt__tp_chunk_gemm(dev, dt, bt__par_at(y, j * Ac * S * out), bt__par_at(G, j * W * Ac * n * Fin), 1, bt_data_ptr(c->wc), c->bias, W,
                          Ac, n, Fin, out, 1);
    }
    return y;
}

/* ---- row-parallel, asynchronous (the synchronous one is bt_tp_exit after bt_linear, + b) ---- */
static void bt__tp_row_back(bt_node *nd, bt_tensor *g, bt_tensor **gin) {
    bt_tp *tp = (bt_tp *)bt__par_ctx_of(nd);
    bt_tensor *xc = nd->saved[0], *wc = nd->saved[1];
    bt_device dev = bt_device_of(g);
    bt_dtype dt = g->dtype;
    int64_t Fin = wc->shape[1], out = wc->shape[0];
    int want_x = bt__par_wants(nd, 0), want_w = bt__par_wants(nd, 1), want_b = nd->n_in > 2 && bt__par_wants(nd, 2);
    int pg = bt__par_dev_enter(dev), W = tp->x.comm->size;
    bt__par_ctx *x = &tp->x;
    bt_tensor *gc = bt_contiguous(g);
    if (!tp->sp) {                        /* nothing to communicate: dx = g w, dw = g^T x */
        int64_t N = bt_numel(gc) / out;
        if (want_x) {
            bt_tensor *dx = bt_empty(bt_shape_of(xc), dt, dev);
            bt__par_gemm(dev, dt, dt, bt_data_ptr(dx), bt_data_ptr(gc), bt_data_ptr(wc), NULL, N, Fin, out, 0, 0, 1, 0, 0, 0, 0.0);
            gin[0] = dx;
        }
        if (want_w) gin[1] = bt__par_wgrad(nd, 1, dev, dt, bt_data_ptr(gc), bt_data_ptr(xc), N, out, Fin);
        if (want_b) gin[2] = bt__par_bgrad(nd, 2, bt_reshape(gc, bt_shape2(N, out)));
    } else {                              /* g gathered chunk by chunk on the comm stream, dx GEMMs behind it */
        bt__sp_geo sg = bt__sp_geo_of(gc, "tp_linear_row backward");
        int64_t A = sg.A, n = sg.n, S = W * n, K = bt__tp_chunks(tp, A), Ac = A / K;
        void *ks = bt__par_compute(x), *ev[BT__PAR_MAX_CHUNKS];
        bt_tensor *G = bt__tp_gather_chunks(x, dev, dt, gc, K, Ac, n, out, ev);
        bt_tensor *dx = want_x ? bt_empty(bt_shape_of(xc), dt, dev) : NULL;
        for (int64_t j = 0; j < K; j++) {
            bt__par_wait(x, ks, ev[j]);
            if (dx)                           /* dx rows of chunk j = G chunk j w */
                bt__tp_chunk_gemm(dev, dt, bt__par_at(dx, j * Ac * S * Fin), bt__par_at(G, j * W * Ac * n * out), 1, bt_data_ptr(wc), NULL, W,
                                  Ac, n, out, Fin, 0);
        }
        if (want_w) {
            bt_tensor *gf = bt__tp_gathered_natural(G, K, W, Ac, n, out);
            gin[1] = bt__par_wgrad(nd, 1, dev, dt, bt_data_ptr(gf), bt_data_ptr(xc), A * S, out, Fin);
        }
        if (want_b) gin[2] = bt__par_bgrad(nd, 2, bt_reshape(gc, bt_shape2(A * n, out)));   /* this slice's share (sp) */
        bt__par_fence_out(x);
        if (dx) gin[0] = dx;
    }
    bt__par_dev_leave(pg);
}
static bt_tensor *bt__tp_row_fwd(bt_tp *tp, const bt__tp_call *c) {
    bt_device dev = c->dev;
    bt_dtype dt = c->dt;
    bt__par_ctx *cx = &tp->x;
    int64_t Fin = c->Fin, out = c->out, W = c->W;
    bt_tensor *y;
    if (!tp->sp) {                        /* y = x w^T (+ b on rank 0), all-reduced */
        y = bt_empty(bt__shape_with(c->x, 1, out), dt, dev);
        bt__tp_gemm_all_reduce(tp, dev, dt, (char *)bt_data_ptr(y), (const char *)bt_data_ptr(c->xc), bt_data_ptr(c->wc), c->bias,
                               bt_numel(c->xc) / Fin, out, Fin, 1);
    } else {                              /* GEMMs of chunk j into [W, Ac, n, out], its reduce-scatter behind them */
        bt__sp_geo sg = bt__sp_geo_of(c->x, "tp_linear_row");
        int64_t A = sg.A, S = sg.n;
        if (S % W) bt_error("tp_linear_row: dim -2 of %s is not a multiple of the %d tensor-parallel ranks", bt__par_s(c->x), (int)W);
        int64_t n = S / W, K = bt__tp_chunks(tp, A), Ac = A / K;
        void *cs = bt__par_comm(cx), *ks = bt__par_compute(cx);
        bt_tensor *D = bt_empty(bt_shape1(W * A * n * out), dt, dev);
        bt_shape os = bt__shape_with(c->x, 2, n);
        os.d[os.ndim - 1] = out;
        y = bt_empty(os, dt, dev);
        for (int64_t j = 0; j < K; j++) {     /* D chunk j = x rows of chunk j w^T (+ b on rank 0) */
            char *Dj = bt__par_at(D, j * W * Ac * n * out);
            bt__tp_chunk_gemm(dev, dt, bt__par_at(c->xc, j * Ac * S * Fin), Dj, 0, bt_data_ptr(c->wc), c->bias, W, Ac, n, Fin, out, 1);
            bt__par_wait(cx, cs, bt__par_mark(cx, ks));
            bt__par_reduce_scatter(cx->comm, dev, Dj, bt__par_at(y, j * Ac * n * out), Ac * n * out, dt, cs);
        }
    }
    bt__par_fence_out(cx);
    return y;
}

/* ---- the asynchronous linears' frame, and the two public functions ---- */
/* the operands made contiguous (kept for the backward), the node recorded; the forward of the
   column- or row-parallel layer in between */
static bt_tensor *bt__tp_linear_async(bt_tp *tp, bt_tensor *x, bt_tensor *w, bt_tensor *b, int row) {
    const char *name = row ? "tp_linear_row" : "tp_linear_col";
    bt__tp_call c;
    c.dev = bt_device_of(x); c.dt = x->dtype; c.W = tp->x.comm->size; c.Fin = w->shape[1]; c.out = w->shape[0]; c.x = x;
    int pg = bt__par_dev_enter(c.dev);
    bt__tp_bind(tp, c.dev, name);
    int old = bt__par_begin();
    c.xc = bt_retain(bt_contiguous(x)); c.wc = bt_retain(bt_contiguous(w));
    bt_tensor *bc = b ? bt_contiguous(b) : NULL;
    c.bias = bc && (!row || tp->x.comm->rank == 0) ? bt_data_ptr(bc) : NULL;   /* row: rank 0's partial sums carry the bias */
    bt_tensor *y = bt__par_end(old, row ? bt__tp_row_fwd(tp, &c) : bt__tp_col_fwd(tp, &c));
    bt_tensor *in[3] = {x, w, b};
    bt_node *nd = bt__record(name, row ? bt__tp_row_back : bt__tp_col_back, y, in, b ? 3 : 2);
    if (nd) { bt__par_node_ctx(nd, tp); bt__save(nd, c.xc); bt__save(nd, c.wc); }
    bt_release(c.xc); bt_release(c.wc);
    bt__par_dev_leave(pg);
    return bt__register(y);
}
BTDEF bt_tensor *bt_tp_linear_col(bt_tp *tp, bt_tensor *x, bt_tensor *w, bt_tensor *b) {
    bt__tp_linear_check(tp, x, w, b, 0, "tp_linear_col");
    if (tp->async) return bt__tp_linear_async(tp, x, w, b, 0);
    bt_scope_begin();
    bt_tensor *y = bt_retain(bt_linear(bt_tp_enter(tp, x), w, b));
    bt_scope_end();
    return bt__register(y);
}
BTDEF bt_tensor *bt_tp_linear_row(bt_tp *tp, bt_tensor *x, bt_tensor *w, bt_tensor *b) {
    bt__tp_linear_check(tp, x, w, b, 1, "tp_linear_row");
    if (tp->async) return bt__tp_linear_async(tp, x, w, b, 1);
    if (tp->x.comm->size == 1) return bt_linear(x, w, b);
    bt_scope_begin();
    bt_tensor *y = bt_tp_exit(tp, bt_linear(x, w, NULL));
    if (b) y = bt_add(y, b);
    bt_retain(y);
    bt_scope_end();
    return bt__register(y);
}

/* ============================================================================================
   7. tensor parallel: vocabulary embedding and cross-entropy
   ============================================================================================ */
/* ---- embedding: the rows this rank owns; the ranks' lookups add up in bt_tp_exit ---- */
static void bt__tp_embed_back(bt_node *nd, bt_tensor *g, bt_tensor **gin) {
    bt_tp *tp = (bt_tp *)bt__par_ctx_of(nd);   /* its deterministic flag */
    bt_tensor *ic = nd->saved[0];
    (void)tp;
    int64_t Vs = nd->in_shape[0].d[0], C = nd->in_shape[0].d[1], lo = nd->i[1], cnt = bt_numel(ic);
    bt_device dev = bt_device_of(g);
    bt_dtype dt = g->dtype;
    int pg = bt__par_dev_enter(dev);
    bt_tensor *gc = bt_contiguous(g);
    const int32_t *ids = (const int32_t *)bt_data_ptr(ic);
    if (dev.type == BT_GPU) {             /* ids of other ranks go to a spare row Vs, dropped after */
#ifdef BT_CUDA
        bt_tensor *loc = bt_empty(bt_shape1(cnt), BT_I32, dev), *gext = bt_zeros(bt_shape2(Vs + 1, C), dt, dev);
        bt__par_remap(dev, (int32_t *)bt_data_ptr(loc), ids, cnt, lo, Vs, (int32_t)Vs, 0, 0);
        bt_k_embedding_backward(dt, bt_data_ptr(gext), bt_data_ptr(gc), (const int32_t *)bt_data_ptr(loc), cnt, C, Vs + 1, tp->det,
                                bt__par_cur(dev));
        gin[0] = bt_narrow(gext, 0, 0, Vs);
#endif
    } else {
        bt_tensor *gt = bt_zeros(bt_shape2(Vs, C), dt, dev);
        void *tpd = bt_data_ptr(gt);
        const void *gp = bt_data_ptr(gc);
        for (int64_t i = 0; i < cnt; i++) {
            int64_t r = (int64_t)ids[i] - lo;
            if (r < 0 || r >= Vs) continue;
            for (int64_t j = 0; j < C; j++) bt__st(tpd, dt, r * C + j, bt__ld(tpd, dt, r * C + j) + bt__ld(gp, dt, i * C + j));
        }
        gin[0] = gt;
    }
    bt__par_dev_leave(pg);
}
BTDEF bt_tensor *bt_tp_embedding(bt_tp *tp, bt_tensor *table, bt_tensor *idx) {
    const char *op = "tp_embedding";
    if (!tp) bt_error("%s: no tensor-parallel context (NULL)", op);
    bt__par_need(table, op, "table", 1); bt__par_need(idx, op, "idx", 0);
    if (table->ndim != 2) bt_error("%s: table must be [V / tp, C], got %s", op, bt__par_s(table));
    if (idx->dtype != BT_I32) bt_error("%s: idx must be i32, got %s", op, bt__par_s(idx));
    if (idx->ndim + 1 > BT_MAX_DIMS) bt_error("%s: idx %s has too many dims", op, bt__par_s(idx));
    bt__par_same(table, idx, 0, op);
    if (tp->sp && (idx->ndim < 1 || idx->shape[idx->ndim - 1] % tp->x.comm->size))
        bt_error("%s: with sequence parallelism the last dim of idx %s (the sequence) must be a multiple of the %d ranks", op,
                 bt__par_s(idx), tp->x.comm->size);
    bt_device dev = bt_device_of(table);
    int64_t Vs = table->shape[0], C = table->shape[1], lo = (int64_t)tp->x.comm->rank * Vs, cnt = bt_numel(idx);
    bt__par_check_ids(idx, Vs * tp->x.comm->size, 0, 0, op, "id");
    int pg = bt__par_dev_enter(dev);
    bt__tp_bind(tp, dev, op);
    tp->bad_V = Vs * tp->x.comm->size;
    int old = bt__par_begin();
    bt_tensor *ic = bt_retain(bt_contiguous(idx)), *tc = bt_contiguous(table);
    bt_shape os = bt_shape_of(idx);
    os.d[os.ndim++] = C;
    bt_tensor *part = bt_empty(os, table->dtype, dev);
    bt__par_embed_fwd(dev, table->dtype, bt_data_ptr(part), bt_data_ptr(tc), (const int32_t *)bt_data_ptr(ic), cnt, C, lo, Vs, tp->bad_V,
                      tp->bad);
    part = bt__par_end(old, part);
    bt_node *nd = bt__record(op, bt__tp_embed_back, part, &table, 1);
    if (nd) { bt__par_node_ctx(nd, tp); nd->i[1] = lo; bt__save(nd, ic); }
    bt_release(ic);
    bt__par_dev_leave(pg);
    bt_scope_begin();
    bt__register(part);
    bt_tensor *y = bt_retain(bt_tp_exit(tp, part));
    bt_scope_end();
    return bt__register(y);
}

/* ---- cross-entropy over a vocabulary split by columns ---- */
/* lse and losses of n rows of this rank's logits z [n, Vs]: two all-reduces (max; then the sums of
   exponentials next to the target logits). scratch: 4 n of the stat dtype. */
static void bt__tp_xent_rows(bt_tp *tp, bt_dtype dt, bt_dtype sdt, const void *z, const int32_t *tg, int64_t n, int64_t Vs, int64_t Vl,
                             int64_t lo, int64_t V, int ign, void *lse, void *losses, bt_tensor *scratch, const char *op) {
    bt__par_ctx *x = &tp->x;
    bt_device dev = x->dev;
    size_t ses = bt_dtype_size(sdt);
    char *L = (char *)bt_data_ptr(scratch), *M = L + (size_t)n * ses, *S = M + (size_t)n * ses;   /* S: [2 n] */
    bt__par_xent_stats(dev, dt, sdt, L, S + (size_t)n * ses, z, tg, n, Vs, Vl, lo, V, ign, tp->bad, op);
    bt__par_copy(dev, M, L, (size_t)n * ses, bt__par_compute(x));
    bt__par_fence_in(x);
    bt__par_all_reduce(x->comm, dev, M, n, sdt, BT_RED_MAX, bt__par_comm(x));
    bt__par_fence_out(x);
    bt__par_xent_exp(dev, sdt, S, L, M, n);
    bt__par_fence_in(x);
    bt__par_all_reduce(x->comm, dev, S, 2 * n, sdt, BT_RED_SUM, bt__par_comm(x));
    bt__par_fence_out(x);
    bt__par_xent_finish(dev, sdt, lse, losses, M, S, tg, n, ign);
}
/* the sentinel for "another rank owns this target" in the local targets: never a column, never ignore */
static int32_t bt__tp_other(int ign) { return ign == -2 ? -3 : -2; }
static void bt__tp_xent_check(bt_tp *tp, bt_tensor *zx, bt_tensor *targets, int64_t Vs, int64_t *V, int ign, const char *op) {
    if (!tp) bt_error("%s: no tensor-parallel context (NULL)", op);
    bt__par_need(zx, op, "logits / x", 1); bt__par_need(targets, op, "targets", 0);
    if (targets->dtype != BT_I32) bt_error("%s: targets must be i32, got %s", op, bt__par_s(targets));
    bt__par_same(zx, targets, 0, op);
    if (bt_device_of(zx).type == BT_GPU && zx->dtype == BT_F64) bt_error("%s: f64 is CPU-only, got %s", op, bt__par_s(zx));
    int64_t Vall = Vs * tp->x.comm->size;
    if (*V <= 0) *V = Vall;
    if (*V > Vall) bt_error("%s: V = %lld, but the %d shards of %lld columns hold %lld", op, (long long)*V, tp->x.comm->size, (long long)Vs,
                            (long long)Vall);
    bt__par_check_ids(targets, *V, 1, ign, op, "target");
}
static void bt__tp_xent_back(bt_node *nd, bt_tensor *g, bt_tensor **gin) {
    bt_tensor *z2 = nd->saved[0], *t1 = nd->saved[1], *lse = nd->saved[2], *inv = nd->saved[3];
    int64_t N = z2->shape[0], Vs = z2->shape[1], lo = nd->i[3], Vl = nd->i[4];
    int ign = (int)nd->i[2];
    bt_device dev = bt_device_of(z2);
    int pg = bt__par_dev_enter(dev);
    bt_tensor *gl = bt_contiguous(bt_expand(bt_reshape(bt_mul(bt_cast(g, inv->dtype), inv), bt_shape1(1)), bt_shape1(N)));
    bt_tensor *tl = bt_empty(bt_shape1(N), BT_I32, dev), *gz = bt_empty(bt_shape2(N, Vs), z2->dtype, dev);
    bt__par_remap(dev, (int32_t *)bt_data_ptr(tl), (const int32_t *)bt_data_ptr(t1), N, lo, Vl, bt__tp_other(ign), 1, ign);
    bt__par_xent_grad(dev, z2->dtype, lse->dtype, bt_data_ptr(gz), bt_data_ptr(z2), bt_data_ptr(lse), (const int32_t *)bt_data_ptr(tl),
                      bt_data_ptr(gl), N, Vl, Vs, ign);
    gin[0] = bt_reshape(gz, nd->in_shape[0]);
    bt__par_dev_leave(pg);
}
BTDEF bt_tensor *bt_tp_cross_entropy(bt_tp *tp, bt_tensor *logits, bt_tensor *targets, int64_t V, int ignore_index) {
    const char *op = "tp_cross_entropy";
    bt__par_need(logits, op, "logits", 1);
    if (logits->ndim < 1) bt_error("%s: logits %s need a last dim", op, bt__par_s(logits));
    int64_t Vs = logits->shape[logits->ndim - 1];
    bt__tp_xent_check(tp, logits, targets, Vs, &V, ignore_index, op);
    if (targets->ndim != logits->ndim - 1 || memcmp(targets->shape, logits->shape, sizeof(int64_t) * (size_t)targets->ndim))
        bt_error("%s: logits %s must be targets %s plus a last dim", op, bt__par_s(logits), bt__par_s(targets));
    bt_device dev = bt_device_of(logits);
    bt_dtype dt = logits->dtype, sdt = bt__par_sdt(dt);
    int64_t N = bt_numel(targets), lo = (int64_t)tp->x.comm->rank * Vs, Vl = bt_vocab_shard_valid(V, lo, lo + Vs);
    int pg = bt__par_dev_enter(dev);
    bt__tp_bind(tp, dev, op);
    tp->bad_V = V;
    int old = bt__par_begin();
    bt_tensor *z2 = bt_retain(bt_reshape(bt_contiguous(logits), bt_shape2(N, Vs))), *t1 = bt_retain(bt_reshape(bt_contiguous(targets), bt_shape1(N)));
    bt_tensor *lse = bt_retain(bt_empty(bt_shape1(N), sdt, dev)), *inv = bt_retain(bt_empty(bt_shape1(1), sdt, dev));
    bt_tensor *losses = bt_empty(bt_shape1(N), sdt, dev), *scratch = bt_empty(bt_shape1(4 * N), sdt, dev);
    bt__tp_xent_rows(tp, dt, sdt, bt_data_ptr(z2), (const int32_t *)bt_data_ptr(t1), N, Vs, Vl, lo, V, ignore_index, bt_data_ptr(lse),
                     bt_data_ptr(losses), scratch, op);
    bt__par_inv_count(dev, sdt, bt_data_ptr(inv), (const int32_t *)bt_data_ptr(t1), N, ignore_index);
    bt_tensor *acc = bt_zeros(bt_shapev(0, NULL), sdt, dev);
    bt__par_sum_into(dev, sdt, bt_data_ptr(acc), bt_data_ptr(losses), N);
    bt_tensor *loss = bt__par_end(old, bt_reshape(bt_mul(acc, inv), bt_shapev(0, NULL)));
    bt_node *nd = bt__record(op, bt__tp_xent_back, loss, &logits, 1);
    if (nd) {
        bt__par_node_ctx(nd, tp);
        nd->i[2] = ignore_index; nd->i[3] = lo; nd->i[4] = Vl;
        bt__save(nd, z2); bt__save(nd, t1); bt__save(nd, lse); bt__save(nd, inv);
    }
    bt_release(z2); bt_release(t1); bt_release(lse); bt_release(inv);
    bt__par_dev_leave(pg);
    return bt__register(loss);
}

/* ---- the fused head: cross_entropy(x w_shard^T) a chunk of rows at a time; the chunk's logit
   gradient is made at once (for an upstream gradient of 1) and turned into its parts of dx = dz w
   and dw = dz^T x; the backward scales those by the upstream gradient (bt_linear_cross_entropy's
   scheme, with the vocabulary split over the ranks) ---- */
static void bt__tp_lxent_back(bt_node *nd, bt_tensor *g, bt_tensor **gin) {
    int has_dx = (int)nd->i[1], has_dw = (int)nd->i[2];
    bt_tensor *dx = has_dx ? nd->saved[0] : NULL, *dw = has_dw ? nd->saved[has_dx ? 1 : 0] : NULL;
    int pg = bt__par_dev_enter(bt_device_of(g));
    if (dx && bt__par_wants(nd, 0)) gin[0] = bt_reshape(bt_mul(dx, bt_cast(g, dx->dtype)), nd->in_shape[0]);
    if (dw && bt__par_wants(nd, 1)) {
        bt_tensor *gs = bt_contiguous(bt_reshape(bt_cast(g, dw->dtype), bt_shape1(1)));
        bt_tensor *sink = bt__par_grad_sink(nd, 1, dw->dtype);
        bt_device dev = bt_device_of(dw);
        if (sink && sink->dtype == dw->dtype && (dev.type == BT_CPU || dw->dtype == BT_F32)) {   /* leaf += g dw */
            sink->storage->version++;
            if (dev.type == BT_GPU) {
#ifdef BT_CUDA
                bt_k_axpy_f32((float *)bt_data_ptr(sink), (const float *)bt_data_ptr(gs), (const float *)bt_data_ptr(dw), bt_numel(dw),
                              bt__par_cur(dev));
#endif
            } else {
                double a = bt__ld(bt_data_ptr(gs), gs->dtype, 0);
                void *sp = bt_data_ptr(sink);
                const void *wp = bt_data_ptr(dw);
                for (int64_t i = 0; i < bt_numel(dw); i++) bt__st(sp, sink->dtype, i, bt__ld(sp, sink->dtype, i) + a * bt__ld(wp, dw->dtype, i));
            }
        } else gin[1] = bt_cast(bt_mul(dw, gs), nd->in_dtype[1]);
    }
    bt__par_dev_leave(pg);
}
static bt_tensor *bt__tp_lxent(bt_tp *tp, bt_tensor *x, bt_tensor *w, bt_tensor *targets, int64_t V, int ign) {
    const char *op = "tp_linear_cross_entropy";
    bt_device dev = bt_device_of(x);
    bt_dtype dt = x->dtype, sdt = bt__par_sdt(dt);
    int64_t N = bt_numel(targets), C = w->shape[1], Vs = w->shape[0], lo = (int64_t)tp->x.comm->rank * Vs;
    int64_t Vl = bt_vocab_shard_valid(V, lo, lo + Vs), es = (int64_t)bt_dtype_size(dt);
    if (bt_numel(x) != N * C) bt_error("%s: x %s has %lld rows, targets %s %lld", op, bt__par_s(x), (long long)(bt_numel(x) / (C ? C : 1)),
                                       bt__par_s(targets), (long long)N);
    int want_dx = bt_grad_enabled() && bt__needs_grad(x), want_dw = bt_grad_enabled() && bt__needs_grad(w);
    if (want_dw && dev.type == BT_CPU && dt != sdt) bt_error("%s: a gradient of a %s w on the CPU (f32 or f64)", op, bt_dtype_name(dt));
    int pg = bt__par_dev_enter(dev);
    bt__tp_bind(tp, dev, op);
    tp->bad_V = V;
    int64_t chunk = bt__lxent_rows(N, (int64_t)(bt_linear_cross_entropy_chunk(0) / ((size_t)Vs * (size_t)es)));   /* the same on every rank */
    if (chunk < 1) chunk = 1;
    int old = bt__par_begin();
    bt_tensor *xc = bt_contiguous(x), *wc = bt_contiguous(w), *tc = bt_reshape(bt_contiguous(targets), bt_shape1(N));
    bt_tensor *z = bt_empty(bt_shape2(chunk, Vs), dt, dev), *scratch = bt_empty(bt_shape1(4 * chunk), sdt, dev);
    bt_tensor *lse = bt_empty(bt_shape1(chunk), sdt, dev), *losses = bt_empty(bt_shape1(chunk), sdt, dev);
    bt_tensor *tl = bt_empty(bt_shape1(chunk), BT_I32, dev), *inv = bt_empty(bt_shape1(1), sdt, dev);
    bt_tensor *acc = bt_zeros(bt_shapev(0, NULL), sdt, dev), *gl = NULL;
    bt_tensor *dx = want_dx ? bt_retain(bt_empty(bt_shape2(N, C), dt, dev)) : NULL;
    bt_tensor *dw = want_dw ? bt_retain(bt_empty(bt_shape2(Vs, C), sdt, dev)) : NULL;
    const int32_t *tp_ = (const int32_t *)bt_data_ptr(tc);
    bt__par_inv_count(dev, sdt, bt_data_ptr(inv), tp_, N, ign);
    if (dx || dw) gl = bt_contiguous(bt_expand(inv, bt_shape1(chunk)));   /* d loss / d z_r = inv (softmax - onehot) */
    for (int64_t r0 = 0; r0 < N; r0 += chunk) {
        int64_t n = N - r0 < chunk ? N - r0 : chunk;
        const char *xr = (const char *)bt_data_ptr(xc) + r0 * C * es;
        bt__par_gemm(dev, dt, dt, bt_data_ptr(z), xr, bt_data_ptr(wc), NULL, n, Vs, C, 0, 1, 1, 0, 0, 0, 0.0);
        bt__tp_xent_rows(tp, dt, sdt, bt_data_ptr(z), tp_ + r0, n, Vs, Vl, lo, V, ign, bt_data_ptr(lse), bt_data_ptr(losses), scratch, op);
        bt__par_sum_into(dev, sdt, bt_data_ptr(acc), bt_data_ptr(losses), n);
        if (!gl) continue;
        bt__par_remap(dev, (int32_t *)bt_data_ptr(tl), tp_ + r0, n, lo, Vl, bt__tp_other(ign), 1, ign);
        bt__par_xent_grad(dev, dt, sdt, bt_data_ptr(z), bt_data_ptr(z), bt_data_ptr(lse), (const int32_t *)bt_data_ptr(tl), bt_data_ptr(gl), n,
                          Vl, Vs, ign);
        if (dx) bt__par_gemm(dev, dt, dt, bt__par_at(dx, r0 * C), bt_data_ptr(z), bt_data_ptr(wc), NULL, n, C, Vs, 0, 0, 1, 0, 0, 0, 0.0);
        if (dw) bt__par_gemm(dev, dt, sdt, bt_data_ptr(dw), bt_data_ptr(z), xr, NULL, Vs, C, n, 1, 0, 1, 0, 0, 0, r0 ? 1.0 : 0.0);
    }
    if (dw && N == 0) bt_zero_(dw);
    bt_tensor *loss = bt__par_end(old, bt_reshape(bt_mul(acc, inv), bt_shapev(0, NULL)));
    bt_tensor *in[2] = {x, w};
    bt_node *nd = bt__record(op, bt__tp_lxent_back, loss, in, 2);
    if (nd) {
        nd->i[1] = dx != NULL; nd->i[2] = dw != NULL;
        if (dx) bt__save(nd, dx);
        if (dw) bt__save(nd, dw);
    }
    bt_release(dx); bt_release(dw);
    bt__par_dev_leave(pg);
    return bt__register(loss);
}
BTDEF bt_tensor *bt_tp_linear_cross_entropy(bt_tp *tp, bt_tensor *x, bt_tensor *w, bt_tensor *targets, int64_t V, int ignore_index) {
    const char *op = "tp_linear_cross_entropy";
    bt__par_need(w, op, "w", 1);
    if (w->ndim != 2) bt_error("%s: w must be [Vp / tp, C], got %s", op, bt__par_s(w));
    bt__tp_xent_check(tp, x, targets, w->shape[0], &V, ignore_index, op);
    bt__par_same(x, w, 1, op);
    if (x->ndim < 1 || x->shape[x->ndim - 1] != w->shape[1])
        bt_error("%s: x %s needs its last dim = C of w %s", op, bt__par_s(x), bt__par_s(w));
    if (tp->sp) bt__sp_check(tp, x, 0, op);
    int64_t rows = (w->shape[1] ? bt_numel(x) / w->shape[1] : 0) * (tp->sp ? tp->x.comm->size : 1);   /* after bt_tp_enter */
    if (rows != bt_numel(targets))
        bt_error("%s: x %s makes %lld rows (sp %d, tp %d), but targets %s have %lld", op, bt__par_s(x), (long long)rows, tp->sp,
                 tp->x.comm->size, bt__par_s(targets), (long long)bt_numel(targets));
    bt_scope_begin();
    bt_tensor *loss = bt_retain(bt__tp_lxent(tp, bt_tp_enter(tp, x), w, targets, V, ignore_index));
    bt_scope_end();
    return bt__register(loss);
}

/* ============================================================================================
   8. context parallel: ring, all-gather and all-to-all attention
   ============================================================================================ */
struct bt_cp {
    bt__par_ctx x;
    bt_cp_kv kv;
};

BTDEF bt_cp *bt_cp_create(bt_comm *comm, bt_cp_kv kv) {
    if ((unsigned)kv > BT_CP_ALLTOALL) bt_error("bt_cp_create: K/V strategy %d; expected BT_CP_RING, _ALLGATHER or _ALLTOALL", (int)kv);
    if (!comm) bt_error("bt_cp_create: no communicator (NULL)");
    bt_cp *cp = (bt_cp *)calloc(1, sizeof(bt_cp));
    if (!cp) bt_error("bt_cp_create: out of host memory");
    bt__par_ctx_init(&cp->x, comm, "bt_cp_create");
    cp->kv = kv;
    return cp;
}
BTDEF void bt_cp_free(bt_cp *cp) {
    if (!cp) return;
    bt__par_ctx_free(&cp->x);
    free(cp);
}
BTDEF int bt_cp_rank(const bt_cp *cp) { return cp->x.comm->rank; }
BTDEF int bt_cp_size(const bt_cp *cp) { return cp->x.comm->size; }
BTDEF const char *bt_cp_kv_name(bt_cp_kv kv) {
    static const char *names[3] = {"ring", "allgather", "alltoall"};
    return (unsigned)kv <= BT_CP_ALLTOALL ? names[kv] : "?";
}
BTDEF int bt_cp_kv_parse(const char *s, bt_cp_kv *kv) {
    for (int i = 0; i <= BT_CP_ALLTOALL; i++)
        if (s && !strcmp(s, bt_cp_kv_name((bt_cp_kv)i))) { *kv = (bt_cp_kv)i; return 0; }
    return bt__par_fail("cp K/V strategy \"%s\"; expected ring, allgather or alltoall", s ? s : "(null)");
}

/* one call's geometry: the rank's 2c tokens in two halves of c (a tile is c x c) */
typedef struct {
    bt_cp *cp;
    bt_device dev;
    bt_dtype dt, sdt;
    int64_t B, H, c, D, ses, es;
    int W, r, causal;
} bt__cp_geo;
static int64_t bt__cp_half(const bt__cp_geo *g) { return g->B * g->H * g->c * g->D; }   /* elements of a [B, H, c, D] half */
static int64_t bt__cp_rows(const bt__cp_geo *g) { return g->B * g->H * g->c; }

/* checks the shape rules (before an op opens its scope) and fills g; t names the input in messages */
static void bt__cp_geo_init(bt__cp_geo *g, bt_cp *cp, bt_tensor *t, int64_t B, int64_t H, int64_t Tl, int64_t D, int causal,
                            const char *op) {
    memset(g, 0, sizeof *g);
    g->cp = cp; g->dev = bt_device_of(t); g->dt = t->dtype; g->sdt = bt__par_sdt(t->dtype);
    g->B = B; g->H = H; g->D = D;
    g->W = cp->x.comm->size; g->r = cp->x.comm->rank; g->causal = causal != 0;
    g->es = (int64_t)bt_dtype_size(g->dt); g->ses = (int64_t)bt_dtype_size(g->sdt);
    if (Tl <= 0 || Tl % 2)
        bt_error("%s: each rank holds two zig-zag chunks, so its %lld tokens must be even and > 0 (%s)", op, (long long)Tl, bt__par_s(t));
    g->c = Tl / 2;
    if (g->D <= 0 || (g->dev.type == BT_GPU && g->D > 128)) bt_error("%s: head dim %lld (1..128 on the GPU)", op, (long long)g->D);
    if (g->dev.type == BT_GPU && g->dt == BT_F64) bt_error("%s: f64 is CPU-only, got %s", op, bt__par_s(t));
    if (cp->kv == BT_CP_ALLTOALL && g->H % g->W)
        bt_error("%s: the all-to-all strategy scatters heads: %lld heads do not divide over %d ranks", op, (long long)g->H, g->W);
}
/* tile (query half a, key half b) of the step holding rank j's K/V: -1 skipped, 0 full, 1 causal */
static int bt__cp_tile_kind(const bt__cp_geo *g, int j, int a, int b) {
    if (!g->causal) return 0;
    int cq = a ? 2 * g->W - 1 - g->r : g->r, ck = b ? 2 * g->W - 1 - j : j;
    return ck > cq ? -1 : ck == cq ? 1 : 0;
}
/* a [B, H, T, D] tensor (D contiguous) from token t0 */
static bt__cp_mat bt__cp_view(bt_tensor *t, int64_t t0) {
    bt__cp_mat m;
    m.p = bt__par_at(t, t0 * t->stride[2]);
    m.s[0] = t->stride[0]; m.s[1] = t->stride[1]; m.s[2] = t->stride[2];
    return m;
}
static bt__cp_mat bt__cp_dense(char *p, int64_t H, int64_t T, int64_t D) {
    bt__cp_mat m;
    m.p = p; m.s[0] = H * T * D; m.s[1] = T * D; m.s[2] = D;
    return m;
}
/* packed K/V [2 (k, v), 2 (half), B, H, c, D]: half b of k (which 0) or v (which 1) */
static bt__cp_mat bt__cp_kv_mat(const bt__cp_geo *g, char *kv, int which, int b) {
    return bt__cp_dense(kv + (which * 2 + b) * bt__cp_half(g) * g->es, g->H, g->c, g->D);
}
static bt_tensor *bt__cp_pack(const bt__cp_geo *g, bt_tensor *k4, bt_tensor *v4) {
    int64_t d[6] = {2, 2, g->B, g->H, g->c, g->D};
    int perm[5] = {2, 0, 1, 3, 4};
    bt_tensor *kv = bt_empty(bt_shapev(6, d), g->dt, g->dev);
    int64_t s5[5] = {g->B, g->H, 2, g->c, g->D};    /* [B, H, 2c, D] seen as [B, H, 2, c, D] */
    for (int i = 0; i < 2; i++) bt_copy_(bt_select(kv, 0, i), bt_permute(bt_view(i ? v4 : k4, bt_shapev(5, s5)), perm));
    return kv;
}
/* dst [B, H, 2c, D] (a view: any strides, D contiguous) <- acc [2, B, H, c, D] of any dtype */
static void bt__cp_unpack(const bt__cp_geo *g, bt_tensor *dst, bt_tensor *acc) {
    int64_t s5[5] = {g->B, g->H, 2, g->c, g->D}, a5[5] = {2, g->B, g->H, g->c, g->D};
    int perm[5] = {2, 0, 1, 3, 4};
    bt_copy_(bt_permute(bt_view(dst, bt_shapev(5, s5)), perm), bt_reshape(acc, bt_shapev(5, a5)));
}

/* ---- ring / all-gather: tiles of one K/V block merged into the accumulators ---- */
typedef struct {
    bt_tensor *q4, *o4, *g4;    /* the rank's q, final output (backward), d output (backward): [B, H, 2c, D] */
    char *oacc, *lacc;          /* forward: fp32 (f64) [2, B, H, c, D] and [2, B, H, c]; backward: lacc = the final lse */
    char *ot, *lt;              /* forward scratch: a tile's output (dt) and lse */
    char *dq, *gq, *gk, *gv;    /* backward: dq accumulator (stat dtype, [2, ..]) and a tile's gradients (dt) */
} bt__cp_work;

static void bt__cp_fwd_block(const bt__cp_geo *g, const bt__cp_work *w, char *kv, int j) {
    int64_t half = bt__cp_half(g), rows = bt__cp_rows(g);
    for (int a = 0; a < 2; a++)
        for (int b = 0; b < 2; b++) {
            int kind = bt__cp_tile_kind(g, j, a, b);
            if (kind < 0) continue;
            bt__cp_tile_fwd(g->dev, g->dt, g->sdt, bt__cp_dense(w->ot, g->H, g->c, g->D), w->lt, bt__cp_view(w->q4, a * g->c),
                            bt__cp_kv_mat(g, kv, 0, b), bt__cp_kv_mat(g, kv, 1, b), g->B, g->H, g->c, g->D, kind);
            bt__par_merge(g->dev, g->dt, g->sdt, w->oacc + a * half * g->ses, w->lacc + a * rows * g->ses, w->ot, w->lt, rows, g->D);
        }
}
/* dq and dkv (stat dtype, [2 (k, v), 2, ..]) += the tiles' gradients for K/V block kv of rank j */
static void bt__cp_bwd_block(const bt__cp_geo *g, const bt__cp_work *w, char *kv, int j, char *dkv) {
    int64_t half = bt__cp_half(g), rows = bt__cp_rows(g);
    for (int a = 0; a < 2; a++)
        for (int b = 0; b < 2; b++) {
            int kind = bt__cp_tile_kind(g, j, a, b);
            if (kind < 0) continue;
            bt__cp_tile_bwd(g->dev, g->dt, g->sdt, bt__cp_dense(w->gq, g->H, g->c, g->D), bt__cp_dense(w->gk, g->H, g->c, g->D),
                            bt__cp_dense(w->gv, g->H, g->c, g->D), bt__cp_view(w->g4, a * g->c), bt__cp_view(w->q4, a * g->c),
                            bt__cp_kv_mat(g, kv, 0, b), bt__cp_kv_mat(g, kv, 1, b), bt__cp_view(w->o4, a * g->c),
                            w->lacc + a * rows * g->ses, g->B, g->H, g->c, g->D, kind);
            bt__par_acc(g->dev, g->dt, g->sdt, w->dq + a * half * g->ses, w->gq, half);
            bt__par_acc(g->dev, g->dt, g->sdt, dkv + b * half * g->ses, w->gk, half);
            bt__par_acc(g->dev, g->dt, g->sdt, dkv + (2 + b) * half * g->ses, w->gv, half);
        }
}

/* Step s holds rank (r - s) mod W's K/V: kv0 (its own) at step 0, then buf[(s - 1) % 2]. The
   transfer for step s + 1 (send the block in hand to r + 1, receive r - 1's into the other buffer)
   runs on the comm stream during step s's tiles; it overwrites the buffer step s - 1 used, so it
   waits for that step's tiles first. The compute stream waits for the transfer before step s + 1. */
static void bt__cp_ring_fwd(const bt__cp_geo *g, const bt__cp_work *w, bt_tensor *kv0) {
    bt__par_ctx *x = &g->cp->x;
    int W = g->W, r = g->r;
    int64_t n = bt_numel(kv0);
    bt_tensor *buf[2] = {NULL, NULL};
    if (W > 1) { buf[0] = bt_empty(bt_shape1(n), g->dt, g->dev); buf[1] = bt_empty(bt_shape1(n), g->dt, g->dev); }
    void *cs = bt__par_comm(x), *ks = bt__par_compute(x), *done_prev = NULL;
    bt__par_fence_in(x);
    for (int s = 0; s < W; s++) {
        char *cur = s == 0 ? (char *)bt_data_ptr(kv0) : (char *)bt_data_ptr(buf[(s - 1) % 2]);
        void *recv = NULL;
        if (s < W - 1) {
            if (s >= 2) bt__par_wait(x, cs, done_prev);
            bt__par_send_recv(x->comm, g->dev, cur, (r + 1) % W, bt_data_ptr(buf[s % 2]), (r - 1 + W) % W, n, g->dt, cs);
            recv = bt__par_mark(x, cs);
        }
        bt__cp_fwd_block(g, w, cur, (r - s + W) % W);
        done_prev = bt__par_mark(x, ks);
        bt__par_wait(x, ks, recv);
    }
}
/* one all-gather of every rank's K/V, overlapped with the local block's tiles */
static void bt__cp_allgather_fwd(const bt__cp_geo *g, const bt__cp_work *w, bt_tensor *kv0) {
    bt__par_ctx *x = &g->cp->x;
    int64_t n = bt_numel(kv0);
    bt_tensor *all = bt_empty(bt_shape1(g->W * n), g->dt, g->dev);
    bt__par_fence_in(x);
    bt__par_all_gather(x->comm, g->dev, bt_data_ptr(kv0), bt_data_ptr(all), n, g->dt, bt__par_comm(x));
    void *ev = bt__par_mark(x, bt__par_comm(x));
    bt__cp_fwd_block(g, w, (char *)bt_data_ptr(kv0), g->r);
    bt__par_wait(x, bt__par_compute(x), ev);
    for (int s = 1; s < g->W; s++) {      /* the ring's order: the same merges, the same bits */
        int j = (g->r - s + g->W) % g->W;
        bt__cp_fwd_block(g, w, bt__par_at(all, j * n), j);
    }
}
/* Backward ring: K/V travel as in the forward; each block's dK/dV partial travels with it. Step s:
   the tiles' gradients for block j = r - s go to G (at step 0 straight into P[cur]); then P[cur]
   (received from r - 1 at step s - 1: the partial of ranks j .. r - 1) += G and is sent on to
   r + 1 while P[other] receives r - 1's partial for block j - 1. The transfer overlaps the next
   step's tiles; after W steps P[cur] holds this rank's own dK/dV. Returns it. */
static bt_tensor *bt__cp_ring_bwd(const bt__cp_geo *g, const bt__cp_work *w, bt_tensor *kv0) {
    bt__par_ctx *x = &g->cp->x;
    int W = g->W, r = g->r, pc = 0;
    int64_t n = bt_numel(kv0);
    bt_tensor *buf[2] = {NULL, NULL}, *P[2], *G = bt_empty(bt_shape1(n), g->sdt, g->dev);
    P[0] = bt_empty(bt_shape1(n), g->sdt, g->dev); P[1] = bt_empty(bt_shape1(n), g->sdt, g->dev);
    if (W > 1) { buf[0] = bt_empty(bt_shape1(n), g->dt, g->dev); buf[1] = bt_empty(bt_shape1(n), g->dt, g->dev); }
    void *cs = bt__par_comm(x), *ks = bt__par_compute(x), *done_prev = NULL, *dkv_recv = NULL;
    bt__par_fence_in(x);
    for (int s = 0; s < W; s++) {
        char *cur = s == 0 ? (char *)bt_data_ptr(kv0) : (char *)bt_data_ptr(buf[(s - 1) % 2]);
        void *kv_recv = NULL;
        if (s < W - 1) {
            if (s >= 2) bt__par_wait(x, cs, done_prev);
            bt__par_send_recv(x->comm, g->dev, cur, (r + 1) % W, bt_data_ptr(buf[s % 2]), (r - 1 + W) % W, n, g->dt, cs);
            kv_recv = bt__par_mark(x, cs);
        }
        bt_tensor *acc = s == 0 ? P[pc] : G;
        bt_zero_(acc);
        bt__cp_bwd_block(g, w, cur, (r - s + W) % W, (char *)bt_data_ptr(acc));
        done_prev = bt__par_mark(x, ks);
        if (s > 0) {
            bt__par_wait(x, ks, dkv_recv);
            bt__par_acc(g->dev, g->sdt, g->sdt, bt_data_ptr(P[pc]), bt_data_ptr(G), n);
        }
        bt__par_wait(x, cs, bt__par_mark(x, ks));
        bt__par_send_recv(x->comm, g->dev, bt_data_ptr(P[pc]), (r + 1) % W, bt_data_ptr(P[1 - pc]), (r - 1 + W) % W, n, g->sdt, cs);
        dkv_recv = bt__par_mark(x, cs);
        pc = 1 - pc;
        bt__par_wait(x, ks, kv_recv);
    }
    bt__par_wait(x, ks, dkv_recv);
    return P[pc];
}
/* gather every K/V again (overlapped with the local tiles), every block's partial in one buffer,
   reduce-scattered to the owners */
static bt_tensor *bt__cp_allgather_bwd(const bt__cp_geo *g, const bt__cp_work *w, bt_tensor *kv0) {
    bt__par_ctx *x = &g->cp->x;
    int64_t n = bt_numel(kv0);
    bt_tensor *all = bt_empty(bt_shape1(g->W * n), g->dt, g->dev), *dall = bt_zeros(bt_shape1(g->W * n), g->sdt, g->dev);
    bt_tensor *mine = bt_empty(bt_shape1(n), g->sdt, g->dev);
    bt__par_fence_in(x);
    bt__par_all_gather(x->comm, g->dev, bt_data_ptr(kv0), bt_data_ptr(all), n, g->dt, bt__par_comm(x));
    void *ev = bt__par_mark(x, bt__par_comm(x));
    bt__cp_bwd_block(g, w, (char *)bt_data_ptr(kv0), g->r, bt__par_at(dall, g->r * n));
    bt__par_wait(x, bt__par_compute(x), ev);
    for (int s = 1; s < g->W; s++) {
        int j = (g->r - s + g->W) % g->W;
        bt__cp_bwd_block(g, w, bt__par_at(all, j * n), j, bt__par_at(dall, j * n));
    }
    bt__par_fence_in(x);
    bt__par_reduce_scatter(x->comm, g->dev, bt_data_ptr(dall), bt_data_ptr(mine), n, g->sdt, bt__par_comm(x));
    bt__par_fence_out(x);
    return mine;
}
/* forward of ring / all-gather: writes o4, returns the final lse [2, B, H, c] (stat dtype) */
static bt_tensor *bt__cp_kv_forward(const bt__cp_geo *g, bt_tensor *q4, bt_tensor *k4, bt_tensor *v4, bt_tensor *o4) {
    bt_tensor *kv0 = bt__cp_pack(g, k4, v4);
    bt_tensor *oacc = bt_zeros(bt_shape1(2 * bt__cp_half(g)), g->sdt, g->dev);
    bt_tensor *lacc = bt_full(bt_shape1(2 * bt__cp_rows(g)), -INFINITY, g->sdt, g->dev);   /* no key seen yet */
    bt_tensor *ot = bt_empty(bt_shape1(bt__cp_half(g)), g->dt, g->dev), *lt = bt_empty(bt_shape1(bt__cp_rows(g)), g->sdt, g->dev);
    bt__cp_work w;
    memset(&w, 0, sizeof w);
    w.q4 = q4; w.oacc = (char *)bt_data_ptr(oacc); w.lacc = (char *)bt_data_ptr(lacc); w.ot = (char *)bt_data_ptr(ot); w.lt = (char *)bt_data_ptr(lt);
    if (g->cp->kv == BT_CP_RING) bt__cp_ring_fwd(g, &w, kv0);
    else bt__cp_allgather_fwd(g, &w, kv0);
    bt__cp_unpack(g, o4, oacc);
    return lacc;
}
static void bt__cp_kv_backward(const bt__cp_geo *g, bt_tensor *q4, bt_tensor *k4, bt_tensor *v4, bt_tensor *o4, bt_tensor *lse,
                               bt_tensor *g4, bt_tensor *dq4, bt_tensor *dk4, bt_tensor *dv4) {
    int64_t half = bt__cp_half(g);
    bt_tensor *kv0 = bt__cp_pack(g, k4, v4), *dq = bt_zeros(bt_shape1(2 * half), g->sdt, g->dev);
    bt_tensor *t3 = bt_empty(bt_shape1(3 * half), g->dt, g->dev);
    bt__cp_work w;
    memset(&w, 0, sizeof w);
    w.q4 = q4; w.o4 = o4; w.g4 = g4; w.lacc = (char *)bt_data_ptr(lse); w.dq = (char *)bt_data_ptr(dq);
    w.gq = (char *)bt_data_ptr(t3); w.gk = w.gq + half * g->es; w.gv = w.gk + half * g->es;
    bt_tensor *dkv = g->cp->kv == BT_CP_RING ? bt__cp_ring_bwd(g, &w, kv0) : bt__cp_allgather_bwd(g, &w, kv0);
    bt__cp_unpack(g, dq4, dq);
    bt__cp_unpack(g, dk4, bt_narrow(dkv, 0, 0, 2 * half));
    bt__cp_unpack(g, dv4, bt_narrow(dkv, 0, 2 * half, 2 * half));
}

/* ---- all-to-all (Ulysses): all T tokens of H / W heads per rank ---- */
/* full [.., T, D] <-> blocks [W, .., 2c, D]: block p's halves are chunks p and 2W - 1 - p */
static void bt__cp_place(const bt__cp_geo *g, bt_tensor *full, bt_tensor *blocks, int to_full) {
    int td = full->ndim - 2;
    for (int p = 0; p < g->W; p++) {
        bt_tensor *bp = bt_select(blocks, 0, p);
        for (int h = 0; h < 2; h++) {
            int64_t chunk = h ? 2 * g->W - 1 - p : p;
            bt_tensor *fv = bt_narrow(full, td, chunk * g->c, g->c), *bv = bt_narrow(bp, td, h * g->c, g->c);
            if (to_full) bt_copy_(fv, bv); else bt_copy_(bv, fv);
        }
    }
}
/* t [B, H, 2c, D] <-> slots [W, B, H/W, 2c, D]: head group p in slot p */
static bt_tensor *bt__cp_head_groups(const bt__cp_geo *g, bt_tensor *t) {
    int64_t s5[5] = {g->B, g->W, g->H / g->W, 2 * g->c, g->D};
    int perm[5] = {1, 0, 2, 3, 4};
    return bt_permute(bt_view(t, bt_shapev(5, s5)), perm);
}
static bt_tensor *bt__cp_a2a(const bt__cp_geo *g, bt_tensor *send) {
    bt__par_ctx *x = &g->cp->x;
    bt_tensor *recv = bt_empty(bt_shape_of(send), send->dtype, g->dev);
    bt__par_fence_in(x);
    bt__par_all_to_all(x->comm, g->dev, bt_data_ptr(send), bt_data_ptr(recv), bt_numel(send) / g->W, send->dtype, bt__par_comm(x));
    bt__par_fence_out(x);
    return recv;
}
/* q4, k4, v4 -> o4; saves [3]: the full-sequence q, k, v of this rank's heads [3, B, H/W, T, D],
   their output [B, H/W, T, D] and lse */
static void bt__cp_a2a_forward(const bt__cp_geo *g, bt_tensor *q4, bt_tensor *k4, bt_tensor *v4, bt_tensor *o4, bt_tensor **save) {
    int64_t Hl = g->H / g->W, Tl = 2 * g->c, T = g->W * Tl, blk = g->B * Hl * T * g->D;
    int64_t s6[6] = {g->W, 3, g->B, Hl, Tl, g->D}, f5[5] = {3, g->B, Hl, T, g->D}, o5[5] = {g->W, g->B, Hl, Tl, g->D};
    bt_tensor *in3[3] = {q4, k4, v4};
    bt_tensor *S = bt_empty(bt_shapev(6, s6), g->dt, g->dev);
    for (int i = 0; i < 3; i++) bt_copy_(bt_select(S, 1, i), bt__cp_head_groups(g, in3[i]));
    bt_tensor *R = bt__cp_a2a(g, S), *QKV = bt_empty(bt_shapev(5, f5), g->dt, g->dev);
    bt__cp_place(g, QKV, R, 1);
    bt_tensor *O = bt_empty(bt_shape4(g->B, Hl, T, g->D), g->dt, g->dev), *L = bt_empty(bt_shape1(g->B * Hl * T), g->sdt, g->dev);
    char *base = (char *)bt_data_ptr(QKV);
    bt__cp_tile_fwd(g->dev, g->dt, g->sdt, bt__cp_dense((char *)bt_data_ptr(O), Hl, T, g->D), bt_data_ptr(L),
                    bt__cp_dense(base, Hl, T, g->D), bt__cp_dense(base + blk * g->es, Hl, T, g->D),
                    bt__cp_dense(base + 2 * blk * g->es, Hl, T, g->D), g->B, Hl, T, g->D, g->causal);
    bt_tensor *SO = bt_empty(bt_shapev(5, o5), g->dt, g->dev);
    bt__cp_place(g, O, SO, 0);
    bt_copy_(bt__cp_head_groups(g, o4), bt__cp_a2a(g, SO));
    save[0] = QKV; save[1] = O; save[2] = L;
}
static void bt__cp_a2a_backward(const bt__cp_geo *g, bt_tensor *QKV, bt_tensor *O, bt_tensor *L, bt_tensor *g4, bt_tensor *dq4,
                                bt_tensor *dk4, bt_tensor *dv4) {
    int64_t Hl = g->H / g->W, Tl = 2 * g->c, T = g->W * Tl, blk = g->B * Hl * T * g->D;
    int64_t s6[6] = {g->W, 3, g->B, Hl, Tl, g->D}, o5[5] = {g->W, g->B, Hl, Tl, g->D};
    bt_tensor *SG = bt_empty(bt_shapev(5, o5), g->dt, g->dev);
    bt_copy_(SG, bt__cp_head_groups(g, g4));
    bt_tensor *GO = bt_empty(bt_shape4(g->B, Hl, T, g->D), g->dt, g->dev), *dQKV = bt_empty(bt_shape_of(QKV), g->dt, g->dev);
    bt__cp_place(g, GO, bt__cp_a2a(g, SG), 1);
    char *qb = (char *)bt_data_ptr(QKV), *db = (char *)bt_data_ptr(dQKV);
    bt__cp_tile_bwd(g->dev, g->dt, g->sdt, bt__cp_dense(db, Hl, T, g->D), bt__cp_dense(db + blk * g->es, Hl, T, g->D),
                    bt__cp_dense(db + 2 * blk * g->es, Hl, T, g->D), bt__cp_dense((char *)bt_data_ptr(GO), Hl, T, g->D),
                    bt__cp_dense(qb, Hl, T, g->D), bt__cp_dense(qb + blk * g->es, Hl, T, g->D), bt__cp_dense(qb + 2 * blk * g->es, Hl, T, g->D),
                    bt__cp_dense((char *)bt_data_ptr(O), Hl, T, g->D), bt_data_ptr(L), g->B, Hl, T, g->D, g->causal);
    bt_tensor *SD = bt_empty(bt_shapev(6, s6), g->dt, g->dev);
    bt__cp_place(g, dQKV, SD, 0);
    bt_tensor *RD = bt__cp_a2a(g, SD), *out3[3] = {dq4, dk4, dv4};
    for (int i = 0; i < 3; i++) bt_copy_(bt__cp_head_groups(g, out3[i]), bt_select(RD, 1, i));
}

/* ---- the op: separate q, k, v (mode 0) or a packed projection (mode 1) ---- */
/* saved: ring/all-gather: q, k, v (mode 0) or qkv (mode 1), then the output and the lse;
   all-to-all: QKV, O, L of bt__cp_a2a_forward */
static bt_tensor *bt__cp_heads(bt_tensor *t, int64_t H, int64_t C, int part) {   /* [B, T, W] cols part C .. as [B, H, T, D] */
    int perm[4] = {0, 2, 1, 3};
    return bt_permute(bt_view(bt_narrow(t, 2, part * C, C), bt_shape4(t->shape[0], t->shape[1], H, C / H)), perm);
}
static void bt__cp_attention_back(bt_node *nd, bt_tensor *g, bt_tensor **gin) {
    bt_cp *cp = (bt_cp *)bt__par_ctx_of(nd);
    int causal = (int)nd->i[1], packed = (int)nd->i[2];
    int64_t H = nd->i[3];
    bt_device dev = bt_device_of(g);
    int pg = bt__par_dev_enter(dev);
    bt_tensor *gc = packed ? bt_contiguous(g) : bt__par_rows_dense(g), *q4, *k4 = NULL, *v4 = NULL, *o4 = NULL, *g4, *d4[3];
    if (packed) {
        int64_t C = nd->in_shape[0].d[2] / 3;
        bt_tensor *gqkv = bt_empty(nd->in_shape[0], g->dtype, dev);
        for (int i = 0; i < 3; i++) d4[i] = bt__cp_heads(gqkv, H, C, i);
        g4 = bt__cp_heads(gc, H, C, 0);
        q4 = cp->kv == BT_CP_ALLTOALL ? d4[0] : bt__cp_heads(nd->saved[0], H, C, 0);
        if (cp->kv != BT_CP_ALLTOALL) {
            k4 = bt__cp_heads(nd->saved[0], H, C, 1);
            v4 = bt__cp_heads(nd->saved[0], H, C, 2);
            o4 = bt__cp_heads(nd->saved[1], H, C, 0);
        }
        gin[0] = gqkv;
    } else {
        for (int i = 0; i < 3; i++) d4[i] = gin[i] = bt_empty(nd->in_shape[i], g->dtype, dev);
        g4 = gc;
        q4 = cp->kv == BT_CP_ALLTOALL ? d4[0] : nd->saved[0];
        if (cp->kv != BT_CP_ALLTOALL) { k4 = nd->saved[1]; v4 = nd->saved[2]; o4 = nd->saved[3]; }
    }
    bt__cp_geo geo;
    bt__cp_geo_init(&geo, cp, g, q4->shape[0], q4->shape[1], q4->shape[2], q4->shape[3], causal, "cp_attention backward");
    if (cp->kv == BT_CP_ALLTOALL) bt__cp_a2a_backward(&geo, nd->saved[0], nd->saved[1], nd->saved[2], g4, d4[0], d4[1], d4[2]);
    else bt__cp_kv_backward(&geo, q4, k4, v4, o4, nd->saved[packed ? 2 : 4], g4, d4[0], d4[1], d4[2]);
    bt__par_dev_leave(pg);
}
/* q4, k4, v4: [B, H, 2c, D] views; o4: where the output goes; in/n_in: the node's inputs; out: the
   tensor the node is recorded on */
static bt_tensor *bt__cp_run(const bt__cp_geo *geo, bt_tensor *q4, bt_tensor *k4, bt_tensor *v4, bt_tensor *o4, bt_tensor *out,
                             bt_tensor *packed, bt_tensor **in, int n_in, int old) {
    bt_cp *cp = geo->cp;
    int causal = geo->causal;
    int64_t H = geo->H;
    bt_tensor *save[5] = {NULL, NULL, NULL, NULL, NULL};
    int ns = 0;
    if (cp->kv == BT_CP_ALLTOALL) {
        bt__cp_a2a_forward(geo, q4, k4, v4, o4, save);
        ns = 3;
    } else {
        bt_tensor *lse = bt__cp_kv_forward(geo, q4, k4, v4, o4);
        if (packed) { save[0] = packed; save[1] = NULL; save[2] = lse; ns = 3; }   /* the output is saved below */
        else { save[0] = q4; save[1] = k4; save[2] = v4; save[3] = NULL; save[4] = lse; ns = 5; }
    }
    for (int i = 0; i < ns; i++) bt_retain(save[i]);
    out = bt__par_end(old, out);
    bt_node *nd = bt__record(packed ? "cp_attention_qkv" : "cp_attention", bt__cp_attention_back, out, in, n_in);
    if (nd) {
        bt__par_node_ctx(nd, cp);
        nd->i[1] = causal != 0; nd->i[2] = packed != NULL; nd->i[3] = H;
        for (int i = 0; i < ns; i++) bt__save(nd, save[i] ? save[i] : out);   /* NULL: the output's place */
    }
    for (int i = 0; i < ns; i++) bt_release(save[i]);
    return out;
}
static void bt__cp_check(bt_cp *cp, const char *op) { if (!cp) bt_error("%s: no context-parallel context (NULL)", op); }
BTDEF bt_tensor *bt_cp_attention(bt_cp *cp, bt_tensor *q, bt_tensor *k, bt_tensor *v, int causal) {
    const char *op = "cp_attention";
    bt__cp_check(cp, op);
    bt__par_need(q, op, "q", 1); bt__par_need(k, op, "k", 1); bt__par_need(v, op, "v", 1);
    bt__par_same(q, k, 1, op); bt__par_same(q, v, 1, op);
    if (q->ndim != 4 || k->ndim != 4 || v->ndim != 4 || memcmp(q->shape, k->shape, 4 * sizeof(int64_t)) ||
        memcmp(q->shape, v->shape, 4 * sizeof(int64_t)))
        bt_error("%s: q %s, k %s, v %s must all be [B, H, 2c, D]", op, bt__par_s(q), bt__par_s(k), bt__par_s(v));
    bt_device dev = bt_device_of(q);
    bt__cp_geo geo;
    bt__cp_geo_init(&geo, cp, q, q->shape[0], q->shape[1], q->shape[2], q->shape[3], causal, op);
    int pg = bt__par_dev_enter(dev);
    bt__par_bind(&cp->x, dev, op);
    int old = bt__par_begin();
    bt_tensor *qc = bt__par_rows_dense(q), *kc = bt__par_rows_dense(k), *vc = bt__par_rows_dense(v);
    bt_tensor *o = bt_empty(bt_shape_of(q), q->dtype, dev), *in[3] = {q, k, v};
    o = bt__cp_run(&geo, qc, kc, vc, o, o, NULL, in, 3, old);
    bt__par_dev_leave(pg);
    return bt__register(o);
}
BTDEF bt_tensor *bt_cp_attention_qkv(bt_cp *cp, bt_tensor *qkv, int64_t H, int causal) {
    const char *op = "cp_attention_qkv";
    bt__cp_check(cp, op);
    bt__par_need(qkv, op, "qkv", 1);
    if (qkv->ndim != 3 || H <= 0 || qkv->shape[2] % (3 * H))
        bt_error("%s: qkv %s must be [B, T, 3C] with C a multiple of H = %lld", op, bt__par_s(qkv), (long long)H);
    bt_device dev = bt_device_of(qkv);
    int64_t C = qkv->shape[2] / 3;
    bt__cp_geo geo;
    bt__cp_geo_init(&geo, cp, qkv, qkv->shape[0], H, qkv->shape[1], C / H, causal, op);
    int pg = bt__par_dev_enter(dev);
    bt__par_bind(&cp->x, dev, op);
    int old = bt__par_begin();
    bt_tensor *qc = bt_contiguous(qkv), *out = bt_empty(bt_shape3(qkv->shape[0], qkv->shape[1], C), qkv->dtype, dev);
    out = bt__cp_run(&geo, bt__cp_heads(qc, H, C, 0), bt__cp_heads(qc, H, C, 1), bt__cp_heads(qc, H, C, 2), bt__cp_heads(out, H, C, 0), out,
                     qc, &qkv, 1, old);
    bt__par_dev_leave(pg);
    return bt__register(out);
}
/* K/V travel with H heads here (G = H / Hkv copies of each), G times the bytes of Hkv heads: the
   tiles' kernels take Hkv on the GPU, the CPU loops and the ring's buffers do not yet */
BTDEF bt_tensor *bt_cp_attention_qkv_ex(bt_cp *cp, bt_tensor *qkv, int64_t H, int64_t Hkv, const bt_rope_opts *rope, int causal) {
    const char *op = "cp_attention_qkv_ex";
    bt__cp_check(cp, op);
    if (Hkv == H && !rope) return bt_cp_attention_qkv(cp, qkv, H, causal);
    bt__par_need(qkv, op, "qkv", 1);
    if (qkv->ndim != 3 || H <= 0 || Hkv <= 0 || H % Hkv || qkv->shape[2] % (H + 2 * Hkv))
        bt_error("%s: qkv %s must be [B, T, (H + 2 Hkv) D] with Hkv = %lld dividing H = %lld", op, bt__par_s(qkv), (long long)Hkv, (long long)H);
    int64_t B = qkv->shape[0], Tl = qkv->shape[1], D = qkv->shape[2] / (H + 2 * Hkv), G = H / Hkv, c = Tl / 2;
    int W = cp->x.comm->size, r = cp->x.comm->rank;
    if (Tl <= 0 || Tl % 2) bt_error("%s: each rank holds two zig-zag chunks, so its %lld tokens must be even and > 0 (%s)", op, (long long)Tl, bt__par_s(qkv));
    bt_scope_begin();
    bt_tensor *x = bt_reshape(qkv, bt_shape4(B, Tl, H + 2 * Hkv, D)), *part[3];
    part[0] = bt_narrow(x, 2, 0, H); part[1] = bt_narrow(x, 2, H, Hkv); part[2] = bt_narrow(x, 2, H + Hkv, Hkv);
    for (int i = 0; rope && i < 2; i++) {   /* half h of the rank's tokens starts at global position bt_zigzag_start */
        bt_tensor *half[2];
        for (int h = 0; h < 2; h++) half[h] = bt_rope_ex(bt_narrow(part[i], 1, h * c, c), rope, bt_zigzag_start(Tl * W, W, r, h));
        part[i] = bt_concat(half, 2, 1);
    }
    int64_t g5[5] = {B, Tl, Hkv, G, D};
    for (int i = 1; i < 3 && G > 1; i++)   /* [B, T, Hkv, D] -> [B, T, Hkv, G, D] -> [B, T, H, D]: kv head j for query heads j G .. */
        part[i] = bt_reshape(bt_expand(bt_unsqueeze(part[i], 3), bt_shapev(5, g5)), bt_shape4(B, Tl, H, D));
    bt_tensor *o = bt_retain(bt_cp_attention_qkv(cp, bt_reshape(bt_concat(part, 3, 2), bt_shape3(B, Tl, 3 * H * D)), H, causal));
    bt_scope_end();
    return bt__register(o);
}

/* ============================================================================================
   9. fully sharded data parallelism: units, shards, gather, reduce-scatter, the update's views
   ============================================================================================ */
typedef struct { bt_fsdp *f; int u; } bt__fsdp_arg;

static int64_t bt__fsdp_n(const bt_fsdp *f, int u) { return f->units[u].hi - f->units[u].lo; }
/* the elements of unit u this rank owns: [r S, r S + k) of the unit, k = clamp(n_u - r S, 0, S) */
static int64_t bt__fsdp_owned(const bt_fsdp *f, int u) {
    int64_t k = bt__fsdp_n(f, u) - (int64_t)f->comm->rank * f->shard[u];
    return k < 0 ? 0 : k > f->shard[u] ? f->shard[u] : k;
}
static void bt__fsdp_check_unit(const bt_fsdp *f, int u, const char *op) {
    if (!f) bt_error("%s: no engine (NULL)", op);
    if (u < 0 || u >= f->n_units) bt_error("%s: unit %d; the engine has units 0..%d", op, u, f->n_units - 1);
}
/* the units tile [0, numel): sorted, no gap, no overlap, none empty */
static void bt__fsdp_check_units(const bt_fsdp_unit *units, int n, int64_t numel) {
    if (!units || n < 1) bt_error("bt_fsdp_create: no units (%d)", n);
    int64_t at = 0;
    for (int u = 0; u < n; u++) {
        int64_t lo = units[u].lo, hi = units[u].hi;
        if (hi <= lo) bt_error("bt_fsdp_create: unit %d is empty or reversed ([%lld, %lld))", u, (long long)lo, (long long)hi);
        if (lo > at)
            bt_error("bt_fsdp_create: the units do not cover the buffer: elements [%lld, %lld) are in no unit (unit %d starts at %lld)",
                     (long long)at, (long long)lo, u, (long long)lo);
        if (lo < at)
            bt_error("bt_fsdp_create: units %d and %d overlap on elements [%lld, %lld)", u - 1, u, (long long)lo, (long long)at);
        at = hi;
    }
    if (at != numel)
        bt_error("bt_fsdp_create: the units end at element %lld, the parameters' buffer holds %lld: %s", (long long)at, (long long)numel,
                 at < numel ? "the end of the buffer is in no unit" : "the units run past it");
}
/* a leaf over [off, off + k) of param (its .grad the same span of grad): 2-D [1, k] when decayed */
static bt_tensor *bt__fsdp_piece(bt_fsdp *f, int64_t off, int64_t k, int decay) {
    bt_shape sh = decay ? bt_shape2(1, k) : bt_shape1(k);
    bt_tensor *p = bt_keep(bt_view(bt_narrow(f->param, 0, off, k), sh));
    bt_set_requires_grad(p, 1);
    p->grad = bt_keep(bt_view(bt_narrow(f->grad, 0, off, k), sh));
    return p;
}
static void bt__fsdp_hook(bt_tensor *leaf, void *user) {
    bt__fsdp_arg *a = (bt__fsdp_arg *)user;
    if (leaf->grad) bt_fsdp_reduce(a->f, a->u, leaf->grad);
}

BTDEF bt_fsdp *bt_fsdp_create(bt_comm *comm, bt_device dev, bt_tensor **params, int n_params, const bt_fsdp_unit *units, int n_units,
                              bt_tensor *flat, const bt_fsdp_opts *opts) {
    if (!comm) bt_error("bt_fsdp_create: no communicator (NULL)");
    if (!params || n_params < 1) bt_error("bt_fsdp_create: no parameters (%d)", n_params);
    /* the leaves in buffer order must tile one fp32 buffer from its start */
    int64_t numel = 0, base = -1;
    for (int i = 0; i < n_params; i++) {
        bt_tensor *p = params[i];
        if (!p || p->dtype != BT_F32 || !bt_is_contiguous(p)) bt_error("bt_fsdp_create: parameter %d is not a contiguous fp32 tensor", i);
        if (p->storage != params[0]->storage) bt_error("bt_fsdp_create: parameter %d is not in parameter 0's buffer", i);
        if (base < 0 || p->offset < base) base = p->offset;
        numel += bt_numel(p);
    }
    for (int i = 0; i < n_params; i++) {   /* tiling: every leaf's end is another's start or the end (O(n^2): a few hundred leaves, once) */
        int64_t end = params[i]->offset + bt_numel(params[i]);
        int next = end == base + numel;
        for (int j = 0; j < n_params && !next; j++) next = params[j]->offset == end;
        if (!next) bt_error("bt_fsdp_create: the parameters do not tile one buffer (parameter %d ends at %lld, where no other starts)", i,
                            (long long)(end - base));
    }
    bt__fsdp_check_units(units, n_units, numel);
    bt_fsdp_opts o;
    memset(&o, 0, sizeof o);
    if (opts) o = *opts;
    if (o.align <= 0) o.align = 64;
    bt_fsdp *f = (bt_fsdp *)calloc(1, sizeof *f);
    if (f) {
        f->units = (bt_fsdp_unit *)malloc(sizeof(bt_fsdp_unit) * (size_t)n_units);
        f->shard = (int64_t *)malloc(sizeof(int64_t) * (size_t)n_units);
        f->soff = (int64_t *)malloc(sizeof(int64_t) * (size_t)(n_units + 1));
        f->pieces = (bt_tensor **)calloc((size_t)(n_params + 2 * n_units), sizeof(bt_tensor *));
        f->hook_args = calloc((size_t)n_units, sizeof(bt__fsdp_arg));
    }
    if (!f || !f->units || !f->shard || !f->soff || !f->pieces || !f->hook_args) bt_error("bt_fsdp_create: out of host memory");
    f->comm = comm; f->dev = dev; f->numel = numel; f->n_units = n_units; f->sum = o.sum;
    memcpy(f->units, units, sizeof(bt_fsdp_unit) * (size_t)n_units);
    f->soff[0] = 0;
    for (int u = 0; u < n_units; u++) {
        f->shard[u] = bt_shard_numel(bt__fsdp_n(f, u), comm->size, o.align);
        f->soff[u + 1] = f->soff[u] + f->shard[u];
        ((bt__fsdp_arg *)f->hook_args)[u].f = f;
        ((bt__fsdp_arg *)f->hook_args)[u].u = u;
    }
    bt_scope_begin();
    f->param = bt_keep(bt_zeros(bt_shape1(f->soff[n_units]), BT_F32, dev));
    f->grad = bt_keep(bt_zeros(bt_shape1(f->soff[n_units]), BT_F32, dev));
    /* the pieces: per unit, the owned range cut at the leaves' bounds (in buffer order), then the padding */
    for (int u = 0; u < n_units; u++) {
        int64_t a = units[u].lo + (int64_t)comm->rank * f->shard[u], k = bt__fsdp_owned(f, u), b = a + k;
        for (int64_t at = a; at < b;) {
            int leaf = -1;
            for (int i = 0; i < n_params && leaf < 0; i++) {
                int64_t po = params[i]->offset - base;
                if (po <= at && at < po + bt_numel(params[i])) leaf = i;
            }
            int64_t end = params[leaf]->offset - base + bt_numel(params[leaf]);
            if (end > b) end = b;
            f->pieces[f->n_pieces++] = bt__fsdp_piece(f, f->soff[u] + (at - a), end - at, params[leaf]->ndim >= 2);
            at = end;
        }
        if (k < f->shard[u]) f->pieces[f->n_pieces++] = bt__fsdp_piece(f, f->soff[u] + k, f->shard[u] - k, 0);
    }
    bt_scope_end();
    if (flat) bt_fsdp_load(f, flat, f->param);
    return f;
}
BTDEF void bt_fsdp_free(bt_fsdp *f) {
    if (!f) return;
    for (int i = 0; i < f->n_pieces; i++) bt_release(f->pieces[i]);
    bt_release(f->param); bt_release(f->grad);
    free(f->pieces); free(f->units); free(f->shard); free(f->soff); free(f->hook_args);
    free(f);
}
BTDEF bt_tensor **bt_fsdp_params(bt_fsdp *f, int *n) { *n = f->n_pieces; return f->pieces; }
BTDEF void bt_fsdp_zero_grad(bt_fsdp *f) { bt_zero_(f->grad); }

BTDEF bt_tensor *bt_fsdp_gather(bt_fsdp *f, int u, bt_dtype dt) {
    bt__fsdp_check_unit(f, u, "bt_fsdp_gather");
    if (dt != BT_F32 && dt != BT_BF16 && dt != BT_F16) bt_error("bt_fsdp_gather: dtype %s (f32, bf16 or f16)", bt_dtype_name(dt));
    int64_t S = f->shard[u], n = bt__fsdp_n(f, u), W = f->comm->size;
    int want_grad = bt_grad_enabled();
    int pg = bt__par_dev_enter(f->dev);
    int old = bt__par_begin();
    bt_tensor *mine = bt_narrow(f->param, 0, f->soff[u], S);
    if (dt != BT_F32) mine = bt_cast(mine, dt);   /* the wire and the gathered buffer carry the compute dtype */
    bt_tensor *all = bt_empty(bt_shape1(S * W), dt, f->dev);
    bt__par_all_gather(f->comm, f->dev, bt_data_ptr(mine), bt_data_ptr(all), S, dt, NULL);
    f->gathers++;
    bt_tensor *out = bt__par_end(old, S * W == n ? all : bt_narrow(all, 0, 0, n));   /* a leaf: no graph behind it */
    bt__par_dev_leave(pg);
    if (want_grad) {
        bt_set_requires_grad(out, 1);
        bt_register_grad_hook(out, bt__fsdp_hook, &((bt__fsdp_arg *)f->hook_args)[u]);
    }
    return bt__register(out);
}

BTDEF void bt_fsdp_reduce(bt_fsdp *f, int u, bt_tensor *g) {
    bt__fsdp_check_unit(f, u, "bt_fsdp_reduce");
    int64_t S = f->shard[u], n = bt__fsdp_n(f, u), W = f->comm->size;
    if (!g || bt_numel(g) != n || !bt_dtype_is_float(g->dtype))
        bt_error("bt_fsdp_reduce: unit %d's gradient must be a float tensor of %lld elements (got %s)", u, (long long)n, g ? bt__par_s(g) : "NULL");
    int pg = bt__par_dev_enter(f->dev);
    int old = bt__par_begin();
    bt_tensor *full = bt_zeros(bt_shape1(S * W), BT_F32, f->dev), *mine = bt_empty(bt_shape1(S), BT_F32, f->dev);
    bt_copy_(bt_narrow(full, 0, 0, n), bt_reshape(bt_contiguous(g), bt_shape1(n)));   /* fp32, the padding 0 */
    bt__par_reduce_scatter(f->comm, f->dev, bt_data_ptr(full), bt_data_ptr(mine), S, BT_F32, NULL);
    f->reduces++;
    bt_add_(bt_narrow(f->grad, 0, f->soff[u], S), mine, f->sum ? 1.0 : 1.0 / (double)W);
    bt__par_end(old, NULL);
    bt__par_dev_leave(pg);
}

BTDEF void bt_fsdp_mean(bt_fsdp *f, bt_tensor *x) {
    if (!x || x->dtype != BT_F32 || !bt_is_contiguous(x) || !bt_device_eq(bt_device_of(x), f->dev))
        bt_error("bt_fsdp_mean: x must be a contiguous fp32 tensor on the engine's device (got %s)", x ? bt__par_s(x) : "NULL");
    int pg = bt__par_dev_enter(f->dev);
    bt__par_all_reduce(f->comm, f->dev, bt_data_ptr(x), bt_numel(x), BT_F32, BT_RED_AVG, NULL);
    x->storage->version++;
    bt__par_dev_leave(pg);
}
BTDEF bt_tensor *bt_fsdp_grad_norm(bt_fsdp *f) {
    int pg = bt__par_dev_enter(f->dev);
    int old = bt__par_begin();
    bt_tensor *sq = bt_sumsq(f->grad);   /* the padding holds zeros */
    bt__par_all_reduce(f->comm, f->dev, bt_data_ptr(sq), 1, BT_F32, BT_RED_SUM, NULL);
    bt_tensor *norm = bt__par_end(old, bt_sqrt(sq));
    bt__par_dev_leave(pg);
    return bt__register(norm);
}

BTDEF bt_tensor *bt_fsdp_full(bt_fsdp *f, bt_tensor *x) {
    if (!x || x->dtype != BT_F32 || bt_numel(x) != f->soff[f->n_units] || !bt_is_contiguous(x))
        bt_error("bt_fsdp_full: x must be a contiguous fp32 tensor of the %lld shard elements (got %s)", (long long)f->soff[f->n_units],
                 x ? bt__par_s(x) : "NULL");
    bt_device dev = bt_device_of(x);
    int64_t W = f->comm->size;
    int pg = bt__par_dev_enter(dev);
    int old = bt__par_begin();
    bt_tensor *out = bt_empty(bt_shape1(f->numel), BT_F32, dev);
    for (int u = 0; u < f->n_units; u++) {
        int64_t S = f->shard[u];
        bt_tensor *all = bt_empty(bt_shape1(S * W), BT_F32, dev);
        bt__par_all_gather(f->comm, dev, bt__par_at(x, f->soff[u]), bt_data_ptr(all), S, BT_F32, NULL);
        bt_copy_(bt_narrow(out, 0, f->units[u].lo, bt__fsdp_n(f, u)), bt_narrow(all, 0, 0, bt__fsdp_n(f, u)));
    }
    out = bt__par_end(old, out);
    bt__par_dev_leave(pg);
    return bt__register(out);
}

BTDEF void bt_fsdp_load(bt_fsdp *f, bt_tensor *full, bt_tensor *x) {
    if (!full || full->dtype != BT_F32 || bt_numel(full) < f->numel)
        bt_error("bt_fsdp_load: the full buffer must be fp32 of at least %lld elements (got %s)", (long long)f->numel, full ? bt__par_s(full) : "NULL");
    if (!x || x->dtype != BT_F32 || bt_numel(x) != f->soff[f->n_units] || !bt_is_contiguous(x))
        bt_error("bt_fsdp_load: x must be a contiguous fp32 tensor of the %lld shard elements (got %s)", (long long)f->soff[f->n_units],
                 x ? bt__par_s(x) : "NULL");
    int old = bt__par_begin();
    bt_tensor *src = bt_reshape(bt_contiguous(full), bt_shape1(bt_numel(full)));
    bt_zero_(x);
    for (int u = 0; u < f->n_units; u++) {
        int64_t k = bt__fsdp_owned(f, u);
        if (k > 0) bt_copy_(bt_narrow(x, 0, f->soff[u], k), bt_narrow(src, 0, f->units[u].lo + (int64_t)f->comm->rank * f->shard[u], k));
    }
    bt__par_end(old, NULL);
}

/* ============================================================================================
   10. a model on the mesh: tp shards and layouts, the mesh's state, a step's reductions
   ============================================================================================ */
BTDEF bt_tp_shard bt_tp_shard_make(int kind, int64_t R, int64_t K, int ndim) {
    bt_tp_shard s;
    memset(&s, 0, sizeof s);
    s.kind = kind; s.R = R; s.K = K; s.ndim = ndim;
    return s;
}
BTDEF bt_tp_shard bt_tp_shard_packed(const int64_t *parts, int nparts, int64_t K, int ndim) {
    if (nparts < 1 || nparts > BT_TP_MAX_PARTS) bt_error("bt_tp_shard_packed: %d parts (1 to %d)", nparts, BT_TP_MAX_PARTS);
    bt_tp_shard s = bt_tp_shard_make(BT_TP_PACKED, 0, K, ndim);
    s.nparts = nparts;
    for (int i = 0; i < nparts; i++) { s.part[i] = parts[i]; s.R += parts[i]; }
    return s;
}
BTDEF bt_shape bt_tp_shard_shape(bt_tp_shard s, int tp) {
    int64_t R = s.R, K = s.K;
    if (s.kind == BT_TP_ROWS || s.kind == BT_TP_PACKED) R /= tp;
    else if (s.kind == BT_TP_COLS) K /= tp;
    return s.ndim == 1 ? bt_shape1(R * K) : bt_shape2(R, K);
}
BTDEF int64_t bt_tp_shard_numel(bt_tp_shard s, int tp) {
    bt_shape sh = bt_tp_shard_shape(s, tp);
    return sh.ndim == 1 ? sh.d[0] : sh.d[0] * sh.d[1];
}
BTDEF void bt_tp_shard_copy(bt_tp_shard s, int tp, int r, bt_tensor *local, bt_tensor *full, int to_full) {
    bt_scope_begin();
    int64_t at = 0, rows = 0;   /* PACKED: the part's first row in full, in local */
    for (int i = 0; i < (s.kind == BT_TP_PACKED ? s.nparts : 1); i++) {
        bt_tensor *v = s.kind == BT_TP_ROWS ? bt_narrow(full, 0, r * (s.R / tp), s.R / tp)
                     : s.kind == BT_TP_COLS ? bt_narrow(full, 1, r * (s.K / tp), s.K / tp)
                     : s.kind == BT_TP_PACKED ? bt_narrow(full, 0, at + r * (s.part[i] / tp), s.part[i] / tp) : full;
        bt_tensor *l = bt_view(bt_narrow(local, 0, rows * s.K, bt_numel(v)), bt_shape_of(v));
        if (to_full) bt_copy_(v, l); else bt_copy_(l, v);
        if (s.kind == BT_TP_PACKED) { at += s.part[i]; rows += s.part[i] / tp; }
    }
    bt_scope_end();
}
/* WHOLE and ROWS are one contiguous run of the whole tensor's elements; the others come from a
   whole tensor drawn on the device and sliced */
BTDEF void bt_tp_shard_normal_(bt_tp_shard s, int tp, int r, bt_tensor *local, double sd, uint64_t seed, uint64_t base) {
    bt_scope_begin();
    if (s.kind == BT_TP_WHOLE || s.kind == BT_TP_ROWS) {
        uint64_t first = s.kind == BT_TP_ROWS ? (uint64_t)r * (uint64_t)(s.R / tp) * (uint64_t)s.K : 0;
        bt_normal_(local, 0, sd, seed, base + first);
    } else {
        bt_tensor *full = bt_empty(bt_shape2(s.R, s.K), BT_F32, bt_device_of(local));
        bt_normal_(full, 0, sd, seed, base);
        bt_tp_shard_copy(s, tp, r, local, full, 0);
    }
    bt_scope_end();
}
BTDEF void bt_tp_layout_init(bt_tp_layout *l, const bt_tp_shard *s, int n, int tp) {
    memset(l, 0, sizeof *l);
    l->n = n; l->tp = tp;
    l->s = (bt_tp_shard *)malloc(sizeof(bt_tp_shard) * (size_t)n);
    l->local_off = (int64_t *)malloc(sizeof(int64_t) * (size_t)n);
    l->whole_off = (int64_t *)malloc(sizeof(int64_t) * (size_t)n);
    if (!l->s || !l->local_off || !l->whole_off) bt_error("tp layout: out of host memory");
    memcpy(l->s, s, sizeof(bt_tp_shard) * (size_t)n);
    /* tp 1: every leaf is whole, the buffer the 1-process one */
    for (int i = 0; i < n; i++) if (tp == 1 || s[i].kind == BT_TP_WHOLE) l->whole_numel += bt_tp_shard_numel(s[i], tp);
    int64_t mark[2] = {0, l->whole_numel};   /* the next whole tensor's offset, the next shard's */
    for (int i = 0; i < n; i++) {
        int64_t k = bt_tp_shard_numel(s[i], tp);
        int split = tp > 1 && s[i].kind != BT_TP_WHOLE;
        l->local_off[i] = mark[split]; mark[split] += k;
        l->whole_off[i] = l->num_params; l->num_params += s[i].R * s[i].K;
    }
    l->local_numel = mark[1];
}
BTDEF void bt_tp_layout_of(bt_tp_layout *l, bt_tp_shard_fn of, const void *cfg, int n, int tp) {
    bt_tp_shard *s = (bt_tp_shard *)malloc(sizeof(bt_tp_shard) * (size_t)(n > 0 ? n : 1));
    if (!s) bt_error("tp layout: out of host memory");
    for (int i = 0; i < n; i++) s[i] = of(cfg, i);
    bt_tp_layout_init(l, s, n, tp);
    free(s);
}
BTDEF int64_t bt_tp_local_numel(bt_tp_shard_fn of, const void *cfg, int n, int tp, int64_t *whole) {
    bt_tp_layout l;
    bt_tp_layout_of(&l, of, cfg, n, tp);
    int64_t local = l.local_numel;
    if (whole) *whole = l.whole_numel;
    bt_tp_layout_free(&l);
    return local;
}
BTDEF void bt_tp_layout_free(bt_tp_layout *l) {
    free(l->s); free(l->local_off); free(l->whole_off);
    memset(l, 0, sizeof *l);
}
BTDEF void bt_tp_layout_map(const bt_tp_layout *l, int rank, bt_tensor *local, bt_tensor *whole, const int64_t *whole_off, int to_whole) {
    if (!whole_off) whole_off = l->whole_off;
    bt_scope_begin();
    for (int i = 0; i < l->n; i++) {
        bt_tp_shard s = l->s[i];
        bt_tensor *full = bt_view(bt_narrow(whole, 0, whole_off[i], s.R * s.K), bt_shape2(s.R, s.K));
        bt_tp_shard_copy(s, l->tp, rank, bt_narrow(local, 0, l->local_off[i], bt_tp_shard_numel(s, l->tp)), full, to_whole);
    }
    bt_scope_end();
}

BTDEF bt_par *bt_par_open(const bt_par_opts *o, bt_dist *d, int on_gpu) {
    bt_par *p = (bt_par *)calloc(1, sizeof *p);
    if (!p) bt_error("tp/cp: out of host memory");
    bt_mesh mesh;
    if (bt_mesh_init(&mesh, d->world, o->tp, o->cp)) bt_error("tp/cp: %s", bt_dist_error());
    p->tp = o->tp; p->cp = o->cp; p->dp = mesh.dp; p->sp = o->sp; p->on_cpu = !on_gpu; p->dist = d;
    p->tp_rank = bt_mesh_coord(&mesh, d->rank, BT_MESH_TP);
    p->cp_rank = bt_mesh_coord(&mesh, d->rank, BT_MESH_CP);
    p->dp_rank = bt_mesh_coord(&mesh, d->rank, BT_MESH_DP);
    bt_comm *tpc = NULL, *cpc = NULL;
    if (on_gpu) {
        bt_dist_mesh_comms(d, &mesh, NULL, &tpc, &cpc);
        p->dpcp_comm = bt_dist_split(d, d->world_comm, p->tp_rank, d->rank, "dpcp");
    } else {                        /* the store path: the one parallel axis spans the world */
        tpc = o->tp > 1 ? d->world_comm : NULL;
        cpc = o->cp > 1 ? d->world_comm : NULL;
    }
    bt_tp_opts to;
    memset(&to, 0, sizeof to);
    to.sp = o->sp; to.async = o->async_tp; to.deterministic = o->deterministic;
    if (o->tp > 1) p->tpc = bt_tp_create(tpc, &to);
    if (o->cp > 1) {
        bt_cp_kv kv = BT_CP_RING;
        if (o->cp_comm && bt_cp_kv_parse(o->cp_comm, &kv)) bt_error("cp: K/V strategy '%s' is not ring, allgather or alltoall", o->cp_comm);
        p->cpc = bt_cp_create(cpc, kv);
        if (!on_gpu) p->cp_sum = bt_tp_create(cpc, NULL);
    }
    for (int k = 0; k < 3 && on_gpu; k++) p->stage_ev[k] = bt_event_create_timed(bt_cuda_device(d->device));
    p->Tl = o->T / o->cp;
    p->pos = (int32_t *)malloc(sizeof(int32_t) * (size_t)p->Tl);
    p->loc_in = (int32_t *)malloc(sizeof(int32_t) * (size_t)o->B * p->Tl);
    p->loc_tg = (int32_t *)malloc(sizeof(int32_t) * (size_t)o->B * p->Tl);
    if (!p->pos || !p->loc_in || !p->loc_tg) bt_error("tp/cp: out of host memory");
    for (int j = 0; j < p->Tl; j++) p->pos[j] = (int32_t)bt_zigzag_global(o->T, o->cp, p->cp_rank, j);
    return p;
}
BTDEF void bt_par_free(bt_par *p) {
    if (!p) return;
    bt_tp_free(p->tpc); bt_cp_free(p->cpc); bt_tp_free(p->cp_sum);
    for (int k = 0; k < 3; k++) if (p->stage_ev[k]) bt_event_destroy(p->stage_ev[k]);
    bt_tp_layout_free(&p->lay);
    free(p->pos); free(p->loc_in); free(p->loc_tg);
    free(p);
}
BTDEF void bt_par_set_layout(bt_par *p, bt_tp_shard_fn of, const void *cfg, int n) {
    bt_tp_layout_free(&p->lay);
    bt_tp_layout_of(&p->lay, of, cfg, n, p->tp);
}
BTDEF void bt_par_batch(bt_par *p, const int32_t *inputs, const int32_t *targets, int B, int T, bt_device dev,
                        bt_tensor **idx, bt_tensor **tgt) {
    if (p->cp == 1) return;
    for (int b = 0; b < B; b++)
        for (int j = 0; j < p->Tl; j++) {
            p->loc_in[(size_t)b * p->Tl + j] = inputs[(size_t)b * T + p->pos[j]];
            p->loc_tg[(size_t)b * p->Tl + j] = targets[(size_t)b * T + p->pos[j]];
        }
    *idx = bt_from_data(p->loc_in, bt_shape2(B, p->Tl), BT_I32, dev);
    *tgt = bt_from_data(p->loc_tg, bt_shape2(B, p->Tl), BT_I32, dev);
}
BTDEF void bt_par_tp_sum(bt_par *p, bt_tensor *t) { bt_tp_reduce_grad(p->tpc, t); }
/* Both reductions (the dp x cp buckets', this one over tp) are sums, so their order is free; only
   the place differs. ddp: all of the buffer's whole span. ZeRO-1: the buckets reduced the last
   micro-batch's gradients to the owners, so only the rank's range of flat_grad holds them.
   ZeRO-2: every micro-batch was reduced to the owners and folded into the fp32 sum (of the sums
   over the micro-batches: linear, the same). The tp peers of a rank own the same range of buffers
   laid out alike, so each takes part with as many elements. */
BTDEF void bt_par_reduce_grads(bt_par *p, bt_tensor *flat_grad, const bt_zero *z) {
    if (p->cp_sum) {
        bt_tp_reduce_grad(p->cp_sum, flat_grad);
        bt_mul_scalar_(flat_grad, 1.0 / p->cp);
    }
    if (p->sp && p->tpc) {
        bt_scope_begin();
        int64_t W = p->lay.whole_numel;
        bt_tensor *g = z && z->stage ? bt_narrow(bt_zero_grads(z, flat_grad), 0, 0, bt_zero_below(z, W)) : bt_narrow(flat_grad, 0, 0, W);
        if (bt_numel(g) > 0) bt_tp_reduce_grad(p->tpc, g);
        bt_scope_end();
    }
}
BTDEF void bt_par_mean(bt_par *p, bt_tensor *t) {
    if (!p->on_cpu) { bt_all_reduce(p->dist->world_comm, bt_data_ptr(t), bt_data_ptr(t), 1, BT_F32, BT_RED_AVG, NULL); return; }
    if (!p->cp_sum) return;
    bt_tp_reduce_grad(p->cp_sum, t);
    bt_mul_scalar_(t, 1.0 / p->cp);
}
BTDEF bt_tensor *bt_par_grad_norm(bt_par *p, bt_tensor *flat_grad) {
    int64_t W = p->lay.whole_numel, n = p->lay.local_numel;
    bt_tensor *sq = bt_sumsq(bt_narrow(flat_grad, 0, W, n - W));
    bt_tp_reduce_grad(p->tpc, sq);
    return bt_sqrt(bt_add(sq, bt_sumsq(bt_narrow(flat_grad, 0, 0, W))));
}
/* No host sync, so a checkpoint's copies of it overlap the next step. Memory: tp x numel(x) for
   the gather (every tp rank) and num_params for the whole (rank 0). */
BTDEF bt_tensor *bt_par_gather_whole(bt_par *p, bt_tensor *x) {
    int old = bt_set_grad_enabled(0), rank0 = p->dist->rank == 0;
    int64_t n = bt_numel(x);
    bt_scope_begin();
    bt_tensor *all = bt_tp_all_gather(p->tpc, bt_view(x, bt_shape2(1, n))), *whole = NULL;   /* [tp, n] */
    if (rank0) {
        whole = bt_keep(bt_empty(bt_shape1(p->lay.num_params), BT_F32, bt_device_of(x)));
        for (int r = 0; r < p->tp; r++) bt_tp_layout_map(&p->lay, r, bt_select(all, 0, r), whole, NULL, 1);
    }
    bt_scope_end();
    bt_set_grad_enabled(old);
    return whole;
}
BTDEF bt_tensor *bt_par_shard_of_whole(bt_par *p, bt_tensor *whole, int64_t n) {
    bt_tensor *local = bt_zeros(bt_shape1(n), BT_F32, bt_device_of(whole));
    bt_tp_layout_map(&p->lay, p->tp_rank, local, whole, NULL, 0);
    return local;
}
/* Where a step's time goes, for async against sync TP: timed events read after the step's host
   sync; the communication async TP hides is the difference of the two runs' stage times. */
BTDEF void bt_par_stage_mark(bt_par *p, bt_device dev, int k) {
    if (p->stage_ev[k]) bt_event_record(p->stage_ev[k], bt_stream_current(dev));
}
BTDEF void bt_par_stage_report(bt_par *p, char *json, size_t cap) {
    if (!p->stage_ev[0]) return;
    p->fwd_ms = bt_event_elapsed_ms(p->stage_ev[0], p->stage_ev[1]);
    p->bwd_ms = bt_event_elapsed_ms(p->stage_ev[1], p->stage_ev[2]);
    size_t len = strlen(json);
    snprintf(json + len, cap - len, ", \"fwd_ms\": %.3f, \"bwd_ms\": %.3f", p->fwd_ms, p->bwd_ms);
}

#endif /* BT_PARALLEL_IMPLEMENTATION_DONE */
#endif /* BT_PARALLEL_IMPLEMENTATION */
