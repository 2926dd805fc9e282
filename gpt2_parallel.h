/* gpt2_parallel.h - GPT-2 under tensor and context parallelism: which part of each tensor a rank
   holds, its init and file order, and the forward pass's parallel parts (bt_parallel.h's ops).

   USAGE
     #define GPT2_PARALLEL_IMPLEMENTATION in *one* C/CUDA file, then #include "gpt2_parallel.h".
     It needs gpt2.h and bt_parallel.h (which brings bt_dist.h).

     gpt2_par *p = gpt2_par_open(&opts, dist, on_gpu);     // a collective: the mesh's communicators
     gpt2_build_tp(&m, cfg, dev, opts.tp, p->tp_rank, 1, BT_F32);   // or gpt2_build_padded when tp = 1
     gpt2_par_attach(p, &m);                                 // the model's forward now runs split
     ... gpt2_par_batch for each batch, gpt2_loss, bt_backward, gpt2_par_reduce_grads ...
     gpt2_par_free(p);                                       // before bt_dist_shutdown

   The processes form a mesh dp x tp x cp (bt_dist.h: rank = (dp_i cp + cp_i) tp + tp_i).
   Tensor parallelism (Megatron's split): rank r of a tp group holds
       wte         rows [r Vp/tp, (r+1) Vp/tp): the vocabulary-parallel embedding and the fused
                   vocabulary-parallel loss (max and sum-exp all-reduced; no logits gathered)
       qkvw, qkvb  the q, k and v rows of its H/tp heads (column-parallel: the heads' attention
                   is local)
       projw       columns [r C/tp, ..): row-parallel, its partial sums all-reduced
       fcw, fcb    rows [r 4C/tp, ..): column-parallel
       fcprojw     columns [r 4C/tp, ..): row-parallel
   and the other tensors whole (wpe, the layernorms, the row-parallel layers' biases). With sp the
   activations between the parallel regions hold T/tp of the sequence, so the whole tensors'
   gradients come from the rank's slice only: they are summed over the tp group after backward.
   Every shard element is drawn at its whole-model file offset, so a tp run starts from the
   1-GPU weights of its seed; model files hold the whole model in llm.c's order and checkpoints
   (weights and AdamW's m and v, which follow the weights element for element) the 1-GPU
   buffer's: shards gathered on save, sliced on load, so files move between layouts.
   Context parallelism: rank i of a cp group holds the zig-zag chunks i and 2 cp - 1 - i of every
   sequence (tokens, targets and positions, bt_zigzag_global); attention is bt_cp_attention_qkv
   with the chosen K/V strategy, every other op works per token. A rank's loss is its tokens'
   mean; the cp ranks hold equal token counts, so the mean of their means is the sequence's mean
   and the gradients are averaged over the dp x cp group (DDP's communicator, dpcp_comm).
   On CPUs the collectives go through the TCP store: tp or cp (one of them) spans every process,
   and the cp group's gradients are summed through the store too.
*/
#ifndef GPT2_PARALLEL_H
#define GPT2_PARALLEL_H
#include "gpt2.h"
#include "bt_parallel.h"

typedef struct {
    int tp, cp;              /* group sizes (1: none) */
    int sp, async_tp;        /* sequence parallelism, overlapped tp collectives (bt_tp_opts) */
    int deterministic;
    const char *cp_comm;     /* ring | allgather | alltoall (NULL: ring) */
    int B, T;                /* the micro-batch's rows and sequence length */
} gpt2_par_opts;

typedef struct gpt2_par {
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
    gpt2 whole;                /* rank 0 with tp > 1: the gathered model for the outputs */
} gpt2_par;

/* ---- shards ---- */
enum { GPT2_SHARD_WHOLE, GPT2_SHARD_ROWS, GPT2_SHARD_QKV, GPT2_SHARD_COLS };
typedef struct { int kind; int64_t R, K; int ndim; } gpt2_shard;   /* of the whole tensor [R, K] (K = 1: a vector) */
BTDEF gpt2_shard gpt2_shard_of(const gpt2_config *c, int leaf);   /* leaf in gpt2_build's order */
BTDEF bt_shape gpt2_shard_shape(gpt2_shard s, int tp);
BTDEF int64_t gpt2_leaf_file_base(const gpt2_config *c, int i);   /* leaf i's whole tensor in llm.c's order */
/* the parameters a rank of a tp-way model holds; *whole (may be NULL): those of its whole tensors */
BTDEF int64_t gpt2_local_numel(const gpt2_config *cfg, int tp, int64_t *whole);
/* rank r's shard: gpt2_build_padded's leaves, each its shard's shape, the whole tensors first in the
   buffer; num_params stays the whole model's, flat_numel is the shard's (padded to pad_to) */
BTDEF void gpt2_build_tp(gpt2 *m, gpt2_config cfg, bt_device dev, int tp, int r, int64_t pad_to, bt_dtype grad_dt);
BTDEF int64_t gpt2_par_whole_numel(const gpt2 *m);   /* the whole tensors' span at the buffer's start */
/* rank's shard (mem: [flat_numel]) to or from the whole model in llm.c's file order */
BTDEF void gpt2_par_to_file_order(const gpt2 *m, int rank, const float *mem, float *file);
/* this rank's shard of whole ([num_params] in the 1-GPU buffer's order) as a new [flat_numel] tensor */
BTDEF bt_tensor *gpt2_par_shard_of_whole(const gpt2 *m, bt_tensor *whole);

/* ---- the mesh and a step ---- */
BTDEF gpt2_par *gpt2_par_open(const gpt2_par_opts *o, bt_dist *d, int on_gpu);   /* a collective */
BTDEF void gpt2_par_attach(gpt2_par *p, gpt2 *m);   /* m's forward, init and file order go split */
BTDEF void gpt2_par_free(gpt2_par *p);
/* a batch's rows (full sequences: inputs, targets [B, T] on the host) -> this rank's zig-zag tokens
   (cp > 1; else *idx, *tgt are left as they are) */
BTDEF void gpt2_par_batch(gpt2_par *p, const int32_t *inputs, const int32_t *targets, int B, int T, bt_device dev,
                          bt_tensor **idx, bt_tensor **tgt);
/* after a step's backward passes: with sp the whole tensors' gradients summed over tp (of flat_grad,
   or with ZeRO (z->stage > 0) of this rank's reduced range); on CPUs the gradients' mean over cp */
BTDEF void gpt2_par_reduce_grads(gpt2_par *p, gpt2 *m, const bt_zero *z);
BTDEF void gpt2_par_mean(gpt2_par *p, bt_tensor *t);              /* t (fp32, one element) := its mean over the ranks */
BTDEF void gpt2_par_tp_sum(gpt2_par *p, bt_tensor *t);            /* t := its sum over the tp group */
BTDEF bt_tensor *gpt2_par_grad_norm(gpt2_par *p, gpt2 *m);       /* without ZeRO */
/* x (a tp rank's [flat_numel] buffer: weights, AdamW's m or v) gathered into the whole model's
   1-GPU order on rank 0 ([num_params], owned by the caller; NULL elsewhere); a collective */
BTDEF bt_tensor *gpt2_par_gather_whole(gpt2_par *p, gpt2 *m, bt_tensor *x);
/* m itself, or with tp > 1 its shards gathered into a whole model on rank 0 (NULL elsewhere) */
BTDEF gpt2 *gpt2_par_whole_model(gpt2_par *p, gpt2 *m);
/* the compute stream's time of the last micro-batch's forward (k 0 -> 1) and backward (1 -> 2) */
BTDEF void gpt2_par_stage_mark(gpt2_par *p, bt_device dev, int k);
BTDEF void gpt2_par_stage_report(gpt2_par *p, char *json, size_t cap);   /* read, and appended to json */
#endif /* GPT2_PARALLEL_H */

/* ============================================================================================== */
#ifdef GPT2_PARALLEL_IMPLEMENTATION
#ifndef GPT2_PARALLEL_IMPLEMENTATION_DONE
#define GPT2_PARALLEL_IMPLEMENTATION_DONE
#include <math.h>
#include <stdlib.h>
#include <string.h>

/* ---- shards: which part of each whole tensor a rank holds ---- */
static gpt2_shard gpt2__shard(int kind, int64_t R, int64_t K, int ndim) { gpt2_shard s; s.kind = kind; s.R = R; s.K = K; s.ndim = ndim; return s; }
BTDEF gpt2_shard gpt2_shard_of(const gpt2_config *c, int leaf) {
    int64_t C = c->C;
    if (leaf == 0) return gpt2__shard(GPT2_SHARD_ROWS, c->Vp, C, 2);
    if (leaf == 1) return gpt2__shard(GPT2_SHARD_WHOLE, c->maxT, C, 2);
    if (leaf >= 2 + 12 * c->L) return gpt2__shard(GPT2_SHARD_WHOLE, C, 1, 1);
    switch ((leaf - 2) % 12) {
    case 2: return gpt2__shard(GPT2_SHARD_QKV, 3 * C, C, 2);      /* qkvw */
    case 3: return gpt2__shard(GPT2_SHARD_QKV, 3 * C, 1, 1);      /* qkvb */
    case 4: return gpt2__shard(GPT2_SHARD_COLS, C, C, 2);         /* projw */
    case 8: return gpt2__shard(GPT2_SHARD_ROWS, 4 * C, C, 2);     /* fcw */
    case 9: return gpt2__shard(GPT2_SHARD_ROWS, 4 * C, 1, 1);     /* fcb */
    case 10: return gpt2__shard(GPT2_SHARD_COLS, C, 4 * C, 2);    /* fcprojw */
    default: return gpt2__shard(GPT2_SHARD_WHOLE, C, 1, 1);      /* ln1w ln1b projb ln2w ln2b fcprojb */
    }
}
BTDEF bt_shape gpt2_shard_shape(gpt2_shard s, int tp) {
    int64_t R = s.R, K = s.K;
    if (s.kind == GPT2_SHARD_ROWS || s.kind == GPT2_SHARD_QKV) R /= tp;
    else if (s.kind == GPT2_SHARD_COLS) K /= tp;
    return s.ndim == 1 ? bt_shape1(R * K) : bt_shape2(R, K);
}
/* rank r's elements of the whole tensor full [R, K] as a view whose row-major order is the
   shard's (QKV: [3, R/3/tp, K], the q, k and v rows of the rank's heads) */
static bt_tensor *gpt2__shard_view(bt_tensor *full, gpt2_shard s, int tp, int r) {
    switch (s.kind) {
    case GPT2_SHARD_ROWS: return bt_narrow(full, 0, r * (s.R / tp), s.R / tp);
    case GPT2_SHARD_COLS: return bt_narrow(full, 1, r * (s.K / tp), s.K / tp);
    case GPT2_SHARD_QKV: return bt_narrow(bt_view(full, bt_shape3(3, s.R / 3, s.K)), 1, r * (s.R / 3 / tp), s.R / 3 / tp);
    default: return full;
    }
}
/* leaf i's shard of rank r (local: its elements, 1-D) to or from the whole tensor full [R, K] */
static void gpt2__shard_copy(const gpt2_config *c, int i, int tp, int r, bt_tensor *local, bt_tensor *full, int to_full) {
    bt_tensor *v = gpt2__shard_view(full, gpt2_shard_of(c, i), tp, r), *l = bt_view(local, bt_shape_of(v));
    if (to_full) bt_copy_(v, l); else bt_copy_(l, v);
}
BTDEF int64_t gpt2_leaf_file_base(const gpt2_config *c, int i) {
    int64_t sz[P_COUNT], off[P_COUNT], total = 0;
    gpt2_param_sizes(c, sz);
    for (int k = 0; k < P_COUNT; k++) { off[k] = total; total += sz[k]; }
    if (i < 2) return off[i == 0 ? P_WTE : P_WPE];
    if (i >= 2 + 12 * c->L) return off[i == 2 + 12 * c->L ? P_LNFW : P_LNFB];
    int k = P_LN1W + (i - 2) % 12, l = (i - 2) / 12;   /* the 12 layer kinds in the enum's order */
    return off[k] + l * (sz[k] / c->L);
}
BTDEF int64_t gpt2_local_numel(const gpt2_config *cfg, int tp, int64_t *whole) {
    int64_t local = 0, w = 0;
    for (int i = 0; i < 4 + 12 * cfg->L; i++) {
        gpt2_shard s = gpt2_shard_of(cfg, i);
        bt_shape sh = gpt2_shard_shape(s, tp);
        int64_t k = sh.ndim == 1 ? sh.d[0] : sh.d[0] * sh.d[1];
        local += k;
        if (s.kind == GPT2_SHARD_WHOLE) w += k;
    }
    if (whole) *whole = w;
    return local;
}
static const gpt2_split *gpt2__tp_split(void);
/* With sp the whole tensors' gradients are one span of flat_grad, summed over tp by one collective.
   The shard's init and file order are its own at once (gpt2__split_tp); its forward pass needs the
   mesh (gpt2_par_attach). */
BTDEF void gpt2_build_tp(gpt2 *m, gpt2_config cfg, bt_device dev, int tp, int r, int64_t pad_to, bt_dtype grad_dt) {
    memset(m, 0, sizeof *m);
    m->cfg = cfg; m->device = dev; m->tp = tp; m->tp_rank = r;
    if (tp > 1) m->split = gpt2__tp_split();
    int n = 4 + 12 * cfg.L;
    int64_t whole, local = gpt2_local_numel(&cfg, tp, &whole);
    int64_t mark[2] = {0, whole};   /* the next whole tensor's offset, the next shard's */
    m->num_params = gpt2_num_params(&cfg);
    m->flat_numel = (local + pad_to - 1) / pad_to * pad_to;
    m->flat = bt_zeros(bt_shape1(m->flat_numel), BT_F32, dev);
    m->flat_grad = bt_zeros(bt_shape1(m->flat_numel), grad_dt, dev);
    m->params = (bt_tensor **)calloc((size_t)n, sizeof(bt_tensor *));
    m->file_off = (int64_t *)calloc((size_t)n, sizeof(int64_t));
    m->layers = (gpt2_layer *)calloc((size_t)cfg.L, sizeof(gpt2_layer));
    if (!m->params || !m->file_off || !m->layers) bt_error("gpt2_build_tp: out of host memory");
    for (int i = 0; i < n; i++) {
        gpt2_shard s = gpt2_shard_of(&cfg, i);
        bt_tensor *p = gpt2_leaf(m, &mark[s.kind != GPT2_SHARD_WHOLE], gpt2_leaf_file_base(&cfg, i), gpt2_shard_shape(s, tp));
        if (i < 2) *(i == 0 ? &m->wte : &m->wpe) = p;
        else if (i >= 2 + 12 * cfg.L) *(i == 2 + 12 * cfg.L ? &m->lnfw : &m->lnfb) = p;
        else {
            gpt2_layer *y = &m->layers[(i - 2) / 12];
            bt_tensor **slot[12] = {&y->ln1w, &y->ln1b, &y->qkvw, &y->qkvb, &y->projw, &y->projb,
                                    &y->ln2w, &y->ln2b, &y->fcw, &y->fcb, &y->fcprojw, &y->fcprojb};
            *slot[(i - 2) % 12] = p;
        }
    }
}
static int64_t gpt2__leaf_off(const gpt2 *m, int i) { return m->params[i]->offset - m->flat->offset; }
BTDEF int64_t gpt2_par_whole_numel(const gpt2 *m) {
    int64_t n = 0;
    for (int i = 0; i < m->n_params; i++) if (gpt2_shard_of(&m->cfg, i).kind == GPT2_SHARD_WHOLE) n += bt_numel(m->params[i]);
    return n;
}
/* off[i] = leaf i's offset in the 1-GPU flat buffer (gpt2_build_padded: leaf order, whole tensors) */
static int64_t *gpt2__whole_offsets(const gpt2_config *c) {
    int64_t at = 0, *off = (int64_t *)malloc(sizeof(int64_t) * (size_t)(4 + 12 * c->L));
    if (!off) bt_error("tp: out of host memory");
    for (int i = 0; i < 4 + 12 * c->L; i++) { gpt2_shard s = gpt2_shard_of(c, i); off[i] = at; at += s.R * s.K; }
    return off;
}
/* Between rank's shard (local: [flat_numel], the weights or AdamW's m or v, which follow them
   element for element) and the whole model (whole: [num_params], leaf i at off[i]: llm.c's order
   with m->file_off, the 1-GPU buffer's with gpt2__whole_offsets); both on one device */
static void gpt2__shards_map(const gpt2 *m, int rank, bt_tensor *local, bt_tensor *whole, const int64_t *off, int to_whole) {
    bt_scope_begin();
    for (int i = 0; i < m->n_params; i++) {
        gpt2_shard s = gpt2_shard_of(&m->cfg, i);
        bt_tensor *full = bt_view(bt_narrow(whole, 0, off[i], s.R * s.K), bt_shape2(s.R, s.K));
        gpt2__shard_copy(&m->cfg, i, m->tp, rank, bt_narrow(local, 0, gpt2__leaf_off(m, i), bt_numel(m->params[i])), full, to_whole);
    }
    bt_scope_end();
}
/* the same in host memory, the whole model in llm.c's file order (model files) */
static void gpt2__shards_file(const gpt2 *m, int rank, float *mem, float *file, int to_file) {
    bt_scope_begin();
    gpt2__shards_map(m, rank, bt_from_blob(mem, bt_shape1(m->flat_numel), BT_F32, bt_cpu()),
                     bt_from_blob(file, bt_shape1(m->num_params), BT_F32, bt_cpu()), m->file_off, to_file);
    bt_scope_end();
}
BTDEF void gpt2_par_to_file_order(const gpt2 *m, int rank, const float *mem, float *file) { gpt2__shards_file(m, rank, (float *)mem, file, 1); }
static void gpt2__to_file_order(const gpt2 *m, const float *mem, float *file) { gpt2__shards_file(m, m->tp_rank, (float *)mem, file, 1); }
static void gpt2__from_file_order(const gpt2 *m, const float *file, float *mem) { gpt2__shards_file(m, m->tp_rank, mem, (float *)file, 0); }
BTDEF bt_tensor *gpt2_par_shard_of_whole(const gpt2 *m, bt_tensor *whole) {
    int64_t *off = gpt2__whole_offsets(&m->cfg);
    bt_tensor *local = bt_zeros(bt_shape1(m->flat_numel), BT_F32, bt_device_of(whole));
    gpt2__shards_map(m, m->tp_rank, local, whole, off, 0);
    free(off);
    return local;
}
/* gpt2_init on a shard: every element drawn at its whole-model file offset (a strided shard
   through a whole tensor made on the device and sliced), so the shards are the 1-GPU weights */
static void gpt2__init_tp(gpt2 *m, uint64_t seed) {
    int old = bt_set_grad_enabled(0), L = m->cfg.L;
    double std = 0.02, res_std = 0.02 / sqrt(2.0 * L);
    for (int i = 0; i < m->n_params; i++) {
        int k = i >= 2 && i < 2 + 12 * L ? (i - 2) % 12 : -1;
        double sd = i < 2 || k == 2 || k == 8 ? std : k == 4 || k == 10 ? res_std : 0;
        int one = k == 0 || k == 6 || i == 2 + 12 * L;   /* ln1w, ln2w, lnfw */
        gpt2_shard s = gpt2_shard_of(&m->cfg, i);
        bt_scope_begin();
        bt_tensor *local = bt_narrow(m->flat, 0, gpt2__leaf_off(m, i), bt_numel(m->params[i]));
        if (sd > 0 && (s.kind == GPT2_SHARD_WHOLE || s.kind == GPT2_SHARD_ROWS)) {   /* one contiguous run */
            int64_t first = s.kind == GPT2_SHARD_ROWS ? (int64_t)m->tp_rank * (s.R / m->tp) * s.K : 0;
            bt_normal_(local, 0, sd, seed, (uint64_t)(m->file_off[i] + first));
        } else if (sd > 0) {
            bt_tensor *full = bt_empty(bt_shape2(s.R, s.K), BT_F32, m->device);
            bt_normal_(full, 0, sd, seed, (uint64_t)m->file_off[i]);
            gpt2__shard_copy(&m->cfg, i, m->tp, m->tp_rank, local, full, 0);
        } else if (one) bt_fill_(local, 1.0);
        bt_scope_end();
    }
    bt_set_grad_enabled(old);
}

/* ---- the forward pass's parallel parts (gpt2.h's gpt2_split) ---- */
#define GPT2_P(x) gpt2_param_as(m, (x), dt)
/* token + position embeddings of this rank's tokens idx [B, Tl] -> [B, Tl, C] ([B, Tl/tp, C] with sp) */
static bt_tensor *gpt2__par_embed(gpt2 *m, bt_tensor *idx, bt_dtype dt) {
    gpt2_par *p = m->par;
    if (!p) bt_error("gpt2: a tensor-parallel shard's forward pass needs its mesh (gpt2_par_attach)");
    if (idx->shape[1] != p->Tl) bt_error("tp/cp forward: %lld tokens per row, the positions are set for %d", (long long)idx->shape[1], p->Tl);
    int64_t n = p->sp ? p->Tl / p->tp : p->Tl, lo = p->sp ? (int64_t)p->tp_rank * n : 0;
    bt_tensor *wte = GPT2_P(m->wte);
    bt_tensor *tok = m->tp > 1 ? bt_tp_embedding(p->tpc, wte, idx) : bt_embedding(wte, idx);
    bt_tensor *pos = bt_from_data(p->pos + lo, bt_shape1(n), BT_I32, m->device);
    return bt_add(tok, bt_embedding(GPT2_P(m->wpe), pos));
}
/* qkv column-parallel (this rank's H/tp heads), attention (the cp ring with cp > 1), the
   projection row-parallel */
static bt_tensor *gpt2__par_attention(gpt2 *m, gpt2_layer *y, bt_tensor *h, bt_dtype dt) {
    gpt2_par *p = m->par;
    bt_tensor *qw = GPT2_P(y->qkvw), *qb = GPT2_P(y->qkvb), *pw = GPT2_P(y->projw), *pb = GPT2_P(y->projb);
    int64_t H = m->cfg.H / (m->tp > 1 ? m->tp : 1);
    bt_tensor *qkv = m->tp > 1 ? bt_tp_linear_col(p->tpc, h, qw, qb) : bt_linear(h, qw, qb);
    bt_tensor *a = p->cp > 1 ? bt_cp_attention_qkv(p->cpc, qkv, H, 1) : bt_attention_qkv(qkv, H);
    return m->tp > 1 ? bt_tp_linear_row(p->tpc, a, pw, pb) : bt_linear(a, pw, pb);
}
static bt_tensor *gpt2__par_mlp(gpt2 *m, gpt2_layer *y, bt_tensor *h, bt_dtype dt) {
    bt_tp *tp = m->par->tpc;
    bt_tensor *u = bt_gelu(bt_tp_linear_col(tp, h, GPT2_P(y->fcw), GPT2_P(y->fcb)));
    return bt_tp_linear_row(tp, u, GPT2_P(y->fcprojw), GPT2_P(y->fcprojb));
}
/* the vocabulary-parallel head and loss on the final layernorm's output x */
static bt_tensor *gpt2__par_loss(gpt2 *m, bt_tensor *x, bt_tensor *targets, bt_dtype dt) {
    return bt_tp_linear_cross_entropy(m->par->tpc, x, GPT2_P(m->wte), targets, m->cfg.V, -1);
}
#undef GPT2_P
static const gpt2_split gpt2__split_tp = {gpt2__par_embed, gpt2__par_attention, gpt2__par_mlp, gpt2__par_loss,
                                          gpt2__init_tp, gpt2__to_file_order, gpt2__from_file_order};
static const gpt2_split gpt2__split_cp = {gpt2__par_embed, gpt2__par_attention, NULL, NULL, NULL, NULL, NULL};
static const gpt2_split *gpt2__tp_split(void) { return &gpt2__split_tp; }

/* ---- the mesh, the contexts, a step ---- */
BTDEF gpt2_par *gpt2_par_open(const gpt2_par_opts *o, bt_dist *d, int on_gpu) {
    gpt2_par *p = (gpt2_par *)calloc(1, sizeof *p);
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
BTDEF void gpt2_par_attach(gpt2_par *p, gpt2 *m) {
    m->par = p;
    m->split = m->tp > 1 ? &gpt2__split_tp : &gpt2__split_cp;
}
BTDEF void gpt2_par_free(gpt2_par *p) {
    if (!p) return;
    bt_tp_free(p->tpc); bt_cp_free(p->cpc); bt_tp_free(p->cp_sum);
    for (int k = 0; k < 3; k++) if (p->stage_ev[k]) bt_event_destroy(p->stage_ev[k]);
    gpt2_free(&p->whole);
    free(p->pos); free(p->loc_in); free(p->loc_tg);
    free(p);
}
BTDEF void gpt2_par_batch(gpt2_par *p, const int32_t *inputs, const int32_t *targets, int B, int T, bt_device dev,
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
BTDEF void gpt2_par_tp_sum(gpt2_par *p, bt_tensor *t) { bt_tp_reduce_grad(p->tpc, t); }
/* Both reductions (the dp x cp buckets', this one over tp) are sums, so their order is free; only
   the place differs. ddp: all of the buffer's whole span. ZeRO-1: the buckets reduced the last
   micro-batch's gradients to the owners, so only the rank's range of flat_grad holds them.
   ZeRO-2: every micro-batch was reduced to the owners and folded into the fp32 sum (of the sums
   over the micro-batches: linear, the same). The tp peers of a rank own the same range of buffers
   laid out alike, so each takes part with as many elements. */
BTDEF void gpt2_par_reduce_grads(gpt2_par *p, gpt2 *m, const bt_zero *z) {
    if (p->cp_sum) {
        bt_tp_reduce_grad(p->cp_sum, m->flat_grad);
        bt_mul_scalar_(m->flat_grad, 1.0 / p->cp);
    }
    if (p->sp && p->tpc) {
        bt_scope_begin();
        int64_t W = gpt2_par_whole_numel(m);
        bt_tensor *g = z && z->stage ? bt_narrow(bt_zero_grads(z, m->flat_grad), 0, 0, bt_zero_below(z, W)) : bt_narrow(m->flat_grad, 0, 0, W);
        if (bt_numel(g) > 0) bt_tp_reduce_grad(p->tpc, g);
        bt_scope_end();
    }
}
BTDEF void gpt2_par_mean(gpt2_par *p, bt_tensor *t) {
    if (!p->on_cpu) { bt_all_reduce(p->dist->world_comm, bt_data_ptr(t), bt_data_ptr(t), 1, BT_F32, BT_RED_AVG, NULL); return; }
    if (!p->cp_sum) return;
    bt_tp_reduce_grad(p->cp_sum, t);
    bt_mul_scalar_(t, 1.0 / p->cp);
}
/* the shards' squares (the buffer past the whole tensors) summed over tp, the whole tensors' once */
BTDEF bt_tensor *gpt2_par_grad_norm(gpt2_par *p, gpt2 *m) {
    if (m->tp <= 1) return bt_grad_norm(m->params, m->n_params);
    int64_t W = gpt2_par_whole_numel(m);
    bt_tensor *sq = bt_sumsq(bt_narrow(m->flat_grad, 0, W, m->flat_numel - W));
    bt_tp_reduce_grad(p->tpc, sq);
    return bt_sqrt(bt_add(sq, bt_sumsq(bt_narrow(m->flat_grad, 0, 0, W))));
}
/* No host sync, so a checkpoint's copies of it overlap the next step. Memory: tp x flat_numel for
   the gather (every tp rank) and num_params for the whole (rank 0). */
BTDEF bt_tensor *gpt2_par_gather_whole(gpt2_par *p, gpt2 *m, bt_tensor *x) {
    int old = bt_set_grad_enabled(0), rank0 = p->dist->rank == 0;
    int64_t n = m->flat_numel, *off = gpt2__whole_offsets(&m->cfg);
    bt_scope_begin();
    bt_tensor *all = bt_tp_all_gather(p->tpc, bt_view(x, bt_shape2(1, n))), *whole = NULL;   /* [tp, n] */
    if (rank0) {
        whole = bt_keep(bt_empty(bt_shape1(m->num_params), BT_F32, m->device));
        for (int r = 0; r < p->tp; r++) gpt2__shards_map(m, r, bt_select(all, 0, r), whole, off, 1);
    }
    bt_scope_end();
    free(off);
    bt_set_grad_enabled(old);
    return whole;
}
/* made once, refreshed on each call; a collective */
BTDEF gpt2 *gpt2_par_whole_model(gpt2_par *p, gpt2 *m) {
    if (m->tp <= 1) return m;
    bt_tensor *w = gpt2_par_gather_whole(p, m, m->flat);
    if (!w) return NULL;
    if (!p->whole.flat) gpt2_build(&p->whole, m->cfg, m->device);
    bt_copy_(p->whole.flat, w);   /* gpt2_build: flat_numel = num_params, no padding */
    bt_release(w);
    return &p->whole;
}
/* Where a step's time goes, for async against sync TP: timed events read after the step's host
   sync; the communication async TP hides is the difference of the two runs' stage times. */
BTDEF void gpt2_par_stage_mark(gpt2_par *p, bt_device dev, int k) {
    if (p->stage_ev[k]) bt_event_record(p->stage_ev[k], bt_stream_current(dev));
}
BTDEF void gpt2_par_stage_report(gpt2_par *p, char *json, size_t cap) {
    if (!p->stage_ev[0]) return;
    p->fwd_ms = bt_event_elapsed_ms(p->stage_ev[0], p->stage_ev[1]);
    p->bwd_ms = bt_event_elapsed_ms(p->stage_ev[1], p->stage_ev[2]);
    size_t len = strlen(json);
    snprintf(json + len, cap - len, ", \"fwd_ms\": %.3f, \"bwd_ms\": %.3f", p->fwd_ms, p->bwd_ms);
}
#endif /* GPT2_PARALLEL_IMPLEMENTATION_DONE */
#endif /* GPT2_PARALLEL_IMPLEMENTATION */
