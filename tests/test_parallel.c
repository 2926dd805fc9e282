/* test_parallel.c - bt_parallel.h on the CPU: the pure helpers (vocabulary shard bounds, zig-zag
   chunks and their causal balance, the mesh coordinates that pick them), every op with one rank
   against bt_tensor's plain op, and every op with 2 and 3 ranks (forked processes whose
   collectives go through the TCP store) against the plain op on the full tensors. All in f64,
   forward and backward, random inputs; the multi-rank runs cover sequence parallelism, the
   asynchronous chunked linear layers and the three K/V strategies of context parallelism. */
#define _POSIX_C_SOURCE 200809L
#include "bt_autograd.h"
#include "bt_parallel.h"
#include "tests/bt_test.h"
#include "tests/proc_test.h"

#include <stdlib.h>
#include <unistd.h>
#include <signal.h>
#include <sys/wait.h>

#define TOL BT_TOL_F64   /* f64 against f64: only the summation order differs */

/* ---- helpers ------------------------------------------------------------------------------ */

static bt_tensor *rnd(bt_shape s, uint64_t seed) { return bt_randn(s, BT_F64, bt_cpu(), seed); }
/* loss = sum(y * r): a random linear functional, so every gradient is exercised */
static bt_tensor *dot(bt_tensor *y, bt_tensor *r) { return bt_sum(bt_mul(y, r), NULL, 0, 0); }
/* rank r's slice of dim -2 (sequence parallelism's layout) */
static bt_tensor *seq_slice(bt_tensor *t, int r, int W) {
    int64_t n = t->shape[t->ndim - 2] / W;
    return bt_contiguous(bt_narrow(t, t->ndim - 2, r * n, n));
}
static bt_tensor *attn_ref(bt_tensor *q, bt_tensor *k, bt_tensor *v, int causal) {
    if (causal) return bt_attention(q, k, v);
    return bt_matmul(bt_softmax(bt_scale(bt_matmul_t(q, k, 0, 1), 1.0 / sqrt((double)q->shape[3]))), v);
}

/* a failure inside a rank process: printed, counted, reported through the exit code */
static int rank_fails;
static void expect_close(int rank, const char *what, bt_tensor *got, bt_tensor *want) {
    double e = bt_test_relerr_t(got, want);
    if (!(e <= TOL)) { fprintf(stderr, "  FAIL rank %d: %s: relative error %.3g\n", rank, what, e); rank_fails++; }
}
#define CLOSE(what, got, want) do { double e__ = bt_test_relerr_t((got), (want)); \
    BT_CHECK(e__ <= TOL, "%s: relative error %.3g", what, e__); } while (0)

static bt_dist *one_rank(void) {
    static bt_dist_env env;
    bt_dist_opts o;
    return one_rank_init(&env, &o, 1);
}

/* ---- 1. pure helpers ---------------------------------------------------------------------- */

static void test_vocab_shard(void) {
    static const int64_t vps[] = {16, 50304, 96, 7};
    for (int vi = 0; vi < 4; vi++)
        for (int tp = 1; tp <= 8; tp++) {
            int64_t Vp = vps[vi], lo = -1, hi = -1, next = 0;
            if (Vp % tp) {
                BT_CHECK(bt_vocab_shard(Vp, tp, 0, &lo, &hi) == -1 && strstr(bt_parallel_error(), "equal shards"), "Vp %lld tp %d: %s",
                         (long long)Vp, tp, bt_parallel_error());
                continue;
            }
            for (int r = 0; r < tp; r++) {   /* consecutive, equal, covering [0, Vp) */
                BT_CHECK(bt_vocab_shard(Vp, tp, r, &lo, &hi) == 0 && lo == next && hi - lo == Vp / tp, "Vp %lld tp %d rank %d: [%lld, %lld)",
                         (long long)Vp, tp, r, (long long)lo, (long long)hi);
                next = hi;
            }
            BT_CHECK(next == Vp, "Vp %lld tp %d: shards end at %lld", (long long)Vp, tp, (long long)next);
        }
    int64_t lo = 0, hi = 0;
    BT_CHECK(bt_vocab_shard(16, 4, 4, &lo, &hi) == -1 && strstr(bt_parallel_error(), "rank 4 of a group of 4"), "%s", bt_parallel_error());
    /* GPT-2: V = 50257 real classes in Vp = 50304 rows */
    BT_CHECK(bt_vocab_shard_valid(50257, 0, 25152) == 25152 && bt_vocab_shard_valid(50257, 25152, 50304) == 25105, "tp 2");
    BT_CHECK(bt_vocab_shard_valid(50257, 44016, 50304) == 6241, "tp 8, last shard");
    BT_CHECK(bt_vocab_shard_valid(10, 12, 16) == 0 && bt_vocab_shard_valid(10, 8, 12) == 2, "a shard of padding only");
    int64_t total = 0;   /* the valid columns of all shards are the vocabulary */
    for (int r = 0; r < 8; r++) { bt_vocab_shard(50304, 8, r, &lo, &hi); total += bt_vocab_shard_valid(50257, lo, hi); }
    BT_CHECK(total == 50257, "valid columns add to %lld", (long long)total);
}

/* pairs (query, key) with key <= query between the positions of two ranks */
static int64_t causal_pairs(const int32_t *qp, const int32_t *kp, int64_t n) {
    int64_t w = 0;
    for (int64_t i = 0; i < n; i++)
        for (int64_t j = 0; j < n; j++) w += kp[j] <= qp[i];
    return w;
}

static void test_zigzag(void) {
    static const int64_t Ts[] = {8, 16, 96, 1024, 24};
    for (int ti = 0; ti < 5; ti++)
        for (int cp = 1; cp <= 8; cp++) {
            int64_t T = Ts[ti];
            if (T % (2 * cp)) {
                BT_CHECK(bt_zigzag_check(T, cp) == -1 && strstr(bt_parallel_error(), "equal chunks"), "T %lld cp %d", (long long)T, cp);
                continue;
            }
            int64_t n = T / cp, c = n / 2;
            int32_t *pos = (int32_t *)malloc(sizeof(int32_t) * (size_t)T);
            int *seen = (int *)calloc((size_t)T, sizeof(int));
            for (int r = 0; r < cp; r++) {
                BT_CHECK(bt_zigzag_positions(T, cp, r, pos + r * n) == 0, "positions");
                BT_CHECK(bt_zigzag_start(T, cp, r, 0) == r * c && bt_zigzag_start(T, cp, r, 1) == (2 * cp - 1 - r) * c, "starts");
                for (int64_t i = 0; i < n; i++) {
                    seen[pos[r * n + i]]++;
                    BT_CHECK(bt_zigzag_global(T, cp, r, i) == pos[r * n + i], "global of local %lld", (long long)i);
                    if (i % c) BT_CHECK(pos[r * n + i] == pos[r * n + i - 1] + 1, "a chunk is consecutive");
                }
            }
            int once = 1;
            for (int64_t p = 0; p < T; p++) once &= seen[p] == 1;
            BT_CHECK(once, "T %lld cp %d: every position exactly once", (long long)T, cp);
            /* balance: each rank's causal work is the same, and so is every ring step off the
               diagonal (2 c^2 pairs: that is why a step's tiles take the same time on every rank) */
            int64_t w0 = 0;
            for (int r = 0; r < cp; r++) {
                int64_t w = 0;
                for (int j = 0; j < cp; j++) {
                    int64_t wj = causal_pairs(pos + r * n, pos + j * n, n);
                    if (j != r) BT_CHECK(wj == 2 * c * c, "T %lld cp %d: ranks %d x %d: %lld pairs", (long long)T, cp, r, j, (long long)wj);
                    w += wj;
                }
                if (r == 0) w0 = w;
                BT_CHECK(w == w0, "T %lld cp %d: rank %d has %lld pairs, rank 0 %lld", (long long)T, cp, r, (long long)w, (long long)w0);
            }
            if (cp > 1) {   /* the plain split is unbalanced: its last rank does the most */
                int32_t *a = (int32_t *)malloc(sizeof(int32_t) * (size_t)n), *b = (int32_t *)malloc(sizeof(int32_t) * (size_t)n);
                for (int64_t i = 0; i < n; i++) { a[i] = (int32_t)i; b[i] = (int32_t)((cp - 1) * n + i); }
                int64_t first = causal_pairs(a, a, n), last = 0;
                for (int j = 0; j < cp; j++) {
                    for (int64_t i = 0; i < n; i++) a[i] = (int32_t)(j * n + i);
                    last += causal_pairs(b, a, n);
                }
                BT_CHECK(last > 2 * first, "contiguous split: %lld vs %lld", (long long)last, (long long)first);
                free(a); free(b);
            }
            free(pos); free(seen);
        }
    int32_t p[4];
    BT_CHECK(bt_zigzag_positions(8, 2, 2, p) == -1 && strstr(bt_parallel_error(), "rank 2 of 2"), "%s", bt_parallel_error());
}

static void test_zigzag_shard(void) {
    bt_scope_begin();
    int cp = 3;
    int64_t T = 12, n = T / cp;
    bt_tensor *x = bt_test_leaf_of(rnd(bt_shape3(2, T, 5), 11)), *r = rnd(bt_shape3(2, n, 5), 12);
    int32_t pos[4];
    for (int k = 0; k < cp; k++) {
        bt_tensor *s = bt_zigzag_shard(x, 1, cp, k);
        bt_zigzag_positions(T, cp, k, pos);
        for (int64_t i = 0; i < n; i++) CLOSE("shard rows", bt_select(s, 1, i), bt_select(x, 1, pos[i]));
        bt_backward(dot(s, r));                  /* the gradient lands on the rank's positions */
    }
    bt_tensor *want = bt_zeros(bt_shape3(2, T, 5), BT_F64, bt_cpu());
    for (int k = 0; k < cp; k++) {
        bt_zigzag_positions(T, cp, k, pos);
        for (int64_t i = 0; i < n; i++) bt_copy_(bt_select(want, 1, pos[i]), bt_select(r, 1, i));
    }
    CLOSE("shard gradient", x->grad, want);
    bt_tensor *ids = bt_arange(T, BT_I32, bt_cpu());   /* i32 too: targets and position ids */
    bt_tensor *s = bt_zigzag_shard(ids, 0, cp, 1);
    bt_zigzag_positions(T, cp, 1, pos);
    int ok = 1;
    for (int64_t i = 0; i < n; i++) ok &= (int)bt_get(s, &i) == pos[i];
    BT_CHECK(ok, "i32 shard = the positions");
    BT_EXPECT_ERROR(bt_zigzag_shard(ids, 0, 5, 0), "zig-zag");
    bt_scope_end();
}

/* the dp x tp x cp mesh picks each rank's vocabulary shard (tp coordinate) and tokens (cp
   coordinate): within a dp replica every (vocabulary row, position) pair is held exactly once */
static void test_mesh_use(void) {
    int64_t Vp = 48, T = 16;
    for (int tp = 1; tp <= 4; tp *= 2)
        for (int cp = 1; cp <= 4; cp *= 2) {
            bt_mesh m;
            int world = 2 * tp * cp;
            BT_CHECK(bt_mesh_init(&m, world, tp, cp) == 0 && m.dp == 2, "mesh");
            for (int dpi = 0; dpi < m.dp; dpi++) {
                int *cover = (int *)calloc((size_t)(Vp * T), sizeof(int));
                for (int rank = 0; rank < world; rank++) {
                    if (bt_mesh_coord(&m, rank, BT_MESH_DP) != dpi) continue;
                    int ti = bt_mesh_coord(&m, rank, BT_MESH_TP), ci = bt_mesh_coord(&m, rank, BT_MESH_CP);
                    int64_t lo = 0, hi = 0;
                    int32_t pos[16];
                    BT_CHECK(bt_vocab_shard(Vp, bt_mesh_size(&m, BT_MESH_TP), ti, &lo, &hi) == 0, "shard");
                    BT_CHECK(bt_zigzag_positions(T, bt_mesh_size(&m, BT_MESH_CP), ci, pos) == 0, "positions");
                    for (int64_t v = lo; v < hi; v++)
                        for (int64_t i = 0; i < T / cp; i++) cover[v * T + pos[i]]++;
                }
                int once = 1;
                for (int64_t i = 0; i < Vp * T; i++) once &= cover[i] == 1;
                BT_CHECK(once, "tp %d cp %d dp %d: every (row, position) once", tp, cp, dpi);
                free(cover);
            }
        }
}

static void test_cp_kv_names(void) {
    for (int i = 0; i < 3; i++) {
        bt_cp_kv k = BT_CP_RING;
        BT_CHECK(bt_cp_kv_parse(bt_cp_kv_name((bt_cp_kv)i), &k) == 0 && (int)k == i, "round trip %d", i);
    }
    bt_cp_kv k;
    BT_CHECK(bt_cp_kv_parse("ulysses", &k) == -1 && strstr(bt_parallel_error(), "expected ring, allgather or alltoall"), "%s",
             bt_parallel_error());
}

/* ---- 2. the ops: with W ranks (W = 1 in this process, 2 or 3 in forked ones) against the
   plain op on the full tensors. Each check returns its failures through expect_close. ---- */

typedef struct { int sp, async, chunks; } tp_mode;

static bt_tp *make_tp(bt_comm *c, tp_mode md) {
    bt_tp_opts o;
    memset(&o, 0, sizeof o);
    o.sp = md.sp; o.async = md.async; o.chunks = md.chunks;
    return bt_tp_create(c, &o);
}
static const char *mode_name(tp_mode md) {
    static char buf[64];
    snprintf(buf, sizeof buf, "sp %d async %d chunks %d", md.sp, md.async, md.chunks);
    return buf;
}

/* column-parallel: w's rows split; the output stays split (its columns) */
static void check_col(bt_comm *c, tp_mode md) {
    int W = c->size, r = c->rank;
    int64_t B = 4, T = 4 * W, C = 6, O = 5 * W, Ol = O / W;
    bt_scope_begin();
    bt_tp *tp = make_tp(c, md);
    bt_tensor *x = rnd(bt_shape3(B, T, C), 1), *w = rnd(bt_shape2(O, C), 2), *b = rnd(bt_shape1(O), 3), *R = rnd(bt_shape3(B, T, O), 4);
    bt_tensor *xr = bt_test_leaf_of(x), *wr = bt_test_leaf_of(w), *br = bt_test_leaf_of(b), *yr = bt_linear(xr, wr, br);
    bt_backward(dot(yr, R));
    bt_tensor *xl = bt_test_leaf_of(md.sp ? seq_slice(x, r, W) : x), *wl = bt_test_leaf_of(bt_narrow(w, 0, r * Ol, Ol)), *bl = bt_test_leaf_of(bt_narrow(b, 0, r * Ol, Ol));
    bt_tensor *y = bt_tp_linear_col(tp, xl, wl, bl);
    expect_close(r, "linear_col y", y, bt_narrow(yr, 2, r * Ol, Ol));
    bt_backward(dot(y, bt_narrow(R, 2, r * Ol, Ol)));
    expect_close(r, "linear_col dx", xl->grad, md.sp ? seq_slice(xr->grad, r, W) : xr->grad);
    expect_close(r, "linear_col dw", wl->grad, bt_narrow(wr->grad, 0, r * Ol, Ol));
    expect_close(r, "linear_col db", bl->grad, bt_narrow(br->grad, 0, r * Ol, Ol));
    bt_tp_free(tp);
    bt_scope_end();
}
/* row-parallel: w's columns split, the input's features too; the bias added once */
static void check_row(bt_comm *c, tp_mode md) {
    int W = c->size, r = c->rank;
    int64_t B = 4, T = 4 * W, I = 4 * W, Il = I / W, O = 7;
    bt_scope_begin();
    bt_tp *tp = make_tp(c, md);
    bt_tensor *x = rnd(bt_shape3(B, T, I), 5), *w = rnd(bt_shape2(O, I), 6), *b = rnd(bt_shape1(O), 7), *R = rnd(bt_shape3(B, T, O), 8);
    bt_tensor *xr = bt_test_leaf_of(x), *wr = bt_test_leaf_of(w), *br = bt_test_leaf_of(b), *yr = bt_linear(xr, wr, br);
    bt_backward(dot(yr, R));
    bt_tensor *xl = bt_test_leaf_of(bt_narrow(x, 2, r * Il, Il)), *wl = bt_test_leaf_of(bt_narrow(w, 1, r * Il, Il)), *bl = bt_test_leaf_of(b);
    bt_tensor *y = bt_tp_linear_row(tp, xl, wl, bl);
    expect_close(r, "linear_row y", y, md.sp ? seq_slice(yr, r, W) : yr);
    bt_backward(dot(y, md.sp ? seq_slice(R, r, W) : R));
    if (md.sp) bt_tp_reduce_grad(tp, bl->grad);   /* the bias saw only this rank's tokens */
    expect_close(r, "linear_row dx", xl->grad, bt_narrow(xr->grad, 2, r * Il, Il));
    expect_close(r, "linear_row dw", wl->grad, bt_narrow(wr->grad, 1, r * Il, Il));
    expect_close(r, "linear_row db", bl->grad, br->grad);
    bt_tp_free(tp);
    bt_scope_end();
}
/* an MLP block: col -> gelu -> row, entering and leaving the TP region once each way */
static void check_mlp(bt_comm *c, tp_mode md) {
    int W = c->size, r = c->rank;
    int64_t B = 4, T = 4 * W, C = 5, Hd = 3 * W, Hl = Hd / W;
    bt_scope_begin();
    bt_tp *tp = make_tp(c, md);
    bt_tensor *x = rnd(bt_shape3(B, T, C), 9), *w1 = rnd(bt_shape2(Hd, C), 10), *w2 = rnd(bt_shape2(C, Hd), 11), *R = rnd(bt_shape3(B, T, C), 12);
    bt_tensor *xr = bt_test_leaf_of(x), *w1r = bt_test_leaf_of(w1), *w2r = bt_test_leaf_of(w2);
    bt_tensor *yr = bt_linear(bt_gelu(bt_linear(xr, w1r, NULL)), w2r, NULL);
    bt_backward(dot(yr, R));
    bt_tensor *xl = bt_test_leaf_of(md.sp ? seq_slice(x, r, W) : x), *w1l = bt_test_leaf_of(bt_narrow(w1, 0, r * Hl, Hl)), *w2l = bt_test_leaf_of(bt_narrow(w2, 1, r * Hl, Hl));
    bt_tensor *y = bt_tp_linear_row(tp, bt_gelu(bt_tp_linear_col(tp, xl, w1l, NULL)), w2l, NULL);
    expect_close(r, "mlp y", y, md.sp ? seq_slice(yr, r, W) : yr);
    bt_backward(dot(y, md.sp ? seq_slice(R, r, W) : R));
    expect_close(r, "mlp dx", xl->grad, md.sp ? seq_slice(xr->grad, r, W) : xr->grad);
    expect_close(r, "mlp dw1", w1l->grad, bt_narrow(w1r->grad, 0, r * Hl, Hl));
    expect_close(r, "mlp dw2", w2l->grad, bt_narrow(w2r->grad, 1, r * Hl, Hl));
    bt_tp_free(tp);
    bt_scope_end();
}
static bt_tensor *rand_ids(bt_shape s, int64_t V, int ign_every, uint64_t seed) {   /* ids in [0, V), some -1 */
    bt_tensor *t = bt_empty(s, BT_I32, bt_cpu());
    int32_t *p = (int32_t *)bt_data_ptr(t);
    for (int64_t i = 0; i < bt_numel(t); i++)
        p[i] = ign_every && i % ign_every == 3 ? -1 : (int32_t)(bt_philox_uniform(seed, (uint64_t)i) * (double)V);
    return t;
}
static void check_embedding(bt_comm *c, tp_mode md) {
    int W = c->size, r = c->rank;
    int64_t B = 2, T = 4 * W, C = 6, Vp = 6 * W, Vs = Vp / W;
    bt_scope_begin();
    bt_tp *tp = make_tp(c, md);
    bt_tensor *tab = rnd(bt_shape2(Vp, C), 13), *idx = rand_ids(bt_shape2(B, T), Vp, 0, 14), *R = rnd(bt_shape3(B, T, C), 15);
    bt_tensor *tr = bt_test_leaf_of(tab), *yr = bt_embedding(tr, idx);
    bt_backward(dot(yr, R));
    bt_tensor *tl = bt_test_leaf_of(bt_narrow(tab, 0, r * Vs, Vs)), *y = bt_tp_embedding(tp, tl, idx);
    expect_close(r, "embedding y", y, md.sp ? seq_slice(yr, r, W) : yr);
    bt_backward(dot(y, md.sp ? seq_slice(R, r, W) : R));
    expect_close(r, "embedding dtable", tl->grad, bt_narrow(tr->grad, 0, r * Vs, Vs));
    bt_tp_free(tp);
    bt_scope_end();
}
/* the loss of each rank's vocabulary columns; V < Vp: the last shard holds padding columns */
static void check_xent(bt_comm *c, tp_mode md) {
    int W = c->size, r = c->rank;
    int64_t B = 2, T = 4 * W, Vp = 6 * W, Vs = Vp / W, V = Vp - 4;
    bt_scope_begin();
    bt_tp *tp = make_tp(c, md);
    bt_tensor *z = rnd(bt_shape3(B, T, Vp), 16), *tg = rand_ids(bt_shape2(B, T), V, 5, 17);
    bt_tensor *zr = bt_test_leaf_of(z), *lr = bt_cross_entropy(zr, tg, V, -1);
    bt_backward(lr);
    bt_tensor *zl = bt_test_leaf_of(bt_narrow(z, 2, r * Vs, Vs)), *l = bt_tp_cross_entropy(tp, zl, tg, V, -1);
    expect_close(r, "cross_entropy loss", l, lr);
    bt_backward(l);
    expect_close(r, "cross_entropy dlogits", zl->grad, bt_narrow(zr->grad, 2, r * Vs, Vs));
    bt_tp_free(tp);
    bt_scope_end();
}
static void check_linear_xent(bt_comm *c, tp_mode md) {
    int W = c->size, r = c->rank;
    int64_t B = 2, T = 4 * W, C = 5, Vp = 6 * W, Vs = Vp / W, V = Vp - 3;
    bt_scope_begin();
    bt_tp *tp = make_tp(c, md);
    bt_tensor *x = rnd(bt_shape3(B, T, C), 18), *w = rnd(bt_shape2(Vp, C), 19), *tg = rand_ids(bt_shape2(B, T), V, 7, 20);
    bt_tensor *xr = bt_test_leaf_of(x), *wr = bt_test_leaf_of(w), *lr = bt_linear_cross_entropy(xr, wr, tg, V, -1);
    bt_backward(lr);
    size_t old = bt_linear_cross_entropy_chunk((size_t)(Vs * 8 * 3));   /* 3 rows a chunk: several chunks */
    bt_tensor *xl = bt_test_leaf_of(md.sp ? seq_slice(x, r, W) : x), *wl = bt_test_leaf_of(bt_narrow(w, 0, r * Vs, Vs));
    bt_tensor *l = bt_tp_linear_cross_entropy(tp, xl, wl, tg, V, -1);
    bt_linear_cross_entropy_chunk(old);
    expect_close(r, "linear_cross_entropy loss", l, lr);
    bt_backward(l);
    expect_close(r, "linear_cross_entropy dx", xl->grad, md.sp ? seq_slice(xr->grad, r, W) : xr->grad);
    expect_close(r, "linear_cross_entropy dw", wl->grad, bt_narrow(wr->grad, 0, r * Vs, Vs));
    bt_tp_free(tp);
    bt_scope_end();
}
static void check_tp_all(bt_comm *c) {
    static const tp_mode modes[] = {{0, 0, 4}, {1, 0, 4}, {0, 1, 4}, {1, 1, 4}, {1, 1, 2}, {0, 1, 3}};
    for (int i = 0; i < 6; i++) {
        int before = rank_fails;
        check_col(c, modes[i]); check_row(c, modes[i]); check_mlp(c, modes[i]);
        if (i < 2) { check_embedding(c, modes[i]); check_xent(c, modes[i]); check_linear_xent(c, modes[i]); }
        if (rank_fails > before) fprintf(stderr, "  (rank %d: those were with %s)\n", c->rank, mode_name(modes[i]));
    }
}

/* attention over T = 2 W c tokens, each rank holding its zig-zag pair of chunks */
static void check_cp(bt_comm *c, bt_cp_kv kv, int causal) {
    int W = c->size, r = c->rank;
    int64_t B = 2, H = 6, D = 4, T = 2 * W * 3;
    char what[96];
    bt_scope_begin();
    bt_cp *cp = bt_cp_create(c, kv);
    bt_tensor *q = rnd(bt_shape4(B, H, T, D), 21), *k = rnd(bt_shape4(B, H, T, D), 22), *v = rnd(bt_shape4(B, H, T, D), 23);
    bt_tensor *R = rnd(bt_shape4(B, H, T, D), 24);
    bt_tensor *qr = bt_test_leaf_of(q), *kr = bt_test_leaf_of(k), *vr = bt_test_leaf_of(v), *yr = attn_ref(qr, kr, vr, causal);
    bt_backward(dot(yr, R));
    bt_tensor *ql = bt_test_leaf_of(bt_zigzag_shard(q, 2, W, r)), *kl = bt_test_leaf_of(bt_zigzag_shard(k, 2, W, r)), *vl = bt_test_leaf_of(bt_zigzag_shard(v, 2, W, r));
    bt_tensor *y = bt_cp_attention(cp, ql, kl, vl, causal);
    snprintf(what, sizeof what, "cp %s causal %d: y", bt_cp_kv_name(kv), causal);
    expect_close(r, what, y, bt_zigzag_shard(yr, 2, W, r));
    bt_backward(dot(y, bt_zigzag_shard(R, 2, W, r)));
    bt_tensor *got[3] = {ql->grad, kl->grad, vl->grad}, *want[3] = {qr->grad, kr->grad, vr->grad};
    for (int i = 0; i < 3; i++) {
        snprintf(what, sizeof what, "cp %s causal %d: d%c", bt_cp_kv_name(kv), causal, "qkv"[i]);
        expect_close(r, what, got[i], bt_zigzag_shard(want[i], 2, W, r));
    }
    bt_cp_free(cp);
    bt_scope_end();
}
/* GPT-2's packed projection [B, T, 3C] against bt_attention_qkv */
static void check_cp_qkv(bt_comm *c, bt_cp_kv kv) {
    int W = c->size, r = c->rank;
    int64_t B = 2, H = 6, C = 12, T = 2 * W * 2;
    char what[96];
    bt_scope_begin();
    bt_cp *cp = bt_cp_create(c, kv);
    bt_tensor *x = rnd(bt_shape3(B, T, 3 * C), 25), *R = rnd(bt_shape3(B, T, C), 26);
    bt_tensor *xr = bt_test_leaf_of(x), *yr = bt_attention_qkv(xr, H);
    bt_backward(dot(yr, R));
    bt_tensor *xl = bt_test_leaf_of(bt_zigzag_shard(x, 1, W, r)), *y = bt_cp_attention_qkv(cp, xl, H, 1);
    snprintf(what, sizeof what, "cp qkv %s: y", bt_cp_kv_name(kv));
    expect_close(r, what, y, bt_zigzag_shard(yr, 1, W, r));
    bt_backward(dot(y, bt_zigzag_shard(R, 1, W, r)));
    snprintf(what, sizeof what, "cp qkv %s: dqkv", bt_cp_kv_name(kv));
    expect_close(r, what, xl->grad, bt_zigzag_shard(xr->grad, 1, W, r));
    bt_cp_free(cp);
    bt_scope_end();
}
static void check_cp_all(bt_comm *c) {
    for (int kv = 0; kv < 3; kv++) {
        check_cp(c, (bt_cp_kv)kv, 1);
        check_cp(c, (bt_cp_kv)kv, 0);
        check_cp_qkv(c, (bt_cp_kv)kv);
    }
}

/* ---- 3. several ranks: forked processes, collectives through the TCP store --------------- */

static void check_tp_cp_all(bt_comm *c) { check_tp_all(c); check_cp_all(c); }
static void run_world(int world) { run_store_world(world, check_tp_cp_all, &rank_fails); }
static void test_two_ranks(void) { run_world(2); }
static void test_three_ranks(void) { run_world(3); }

/* ---- 4. one rank (this process): every op equals the plain one ---------------------------- */

static void test_one_rank_tp(void) {
    bt_dist *d = one_rank();
    rank_fails = 0;
    check_tp_all(d->world_comm);
    BT_CHECK(rank_fails == 0, "%d mismatches (above)", rank_fails);
    bt_dist_shutdown(d);
}
static void test_one_rank_cp(void) {
    bt_dist *d = one_rank();
    rank_fails = 0;
    check_cp_all(d->world_comm);
    BT_CHECK(rank_fails == 0, "%d mismatches (above)", rank_fails);
    bt_dist_shutdown(d);
}

static void test_errors(void) {
    bt_dist *d = one_rank();
    bt_scope_begin();
    bt_tp *tp = bt_tp_create(d->world_comm, NULL);
    bt_cp *cp = bt_cp_create(d->world_comm, BT_CP_RING);
    bt_tensor *x = rnd(bt_shape3(2, 4, 5), 1), *w = rnd(bt_shape2(3, 6), 2), *w5 = rnd(bt_shape2(3, 5), 3), *b4 = rnd(bt_shape1(4), 4);
    BT_EXPECT_ERROR(bt_tp_linear_col(tp, x, w, NULL), "needs its last dim = in of w");
    BT_EXPECT_ERROR(bt_tp_linear_row(tp, x, w5, b4), "bias");
    BT_EXPECT_ERROR(bt_tp_linear_col(NULL, x, w5, NULL), "no tensor-parallel context");
    bt_tensor *z = rnd(bt_shape2(4, 8), 5), *tg = rand_ids(bt_shape1(4), 8, 0, 6), *tg3 = rand_ids(bt_shape1(3), 8, 0, 6);
    BT_EXPECT_ERROR(bt_tp_cross_entropy(tp, z, tg, 9, -1), "V = 9");
    BT_EXPECT_ERROR(bt_tp_cross_entropy(tp, z, tg3, 8, -1), "plus a last dim");
    BT_EXPECT_ERROR(bt_tp_cross_entropy(tp, z, z, 8, -1), "targets must be i32");
    int64_t i0 = 0;
    ((int32_t *)bt_data_ptr(tg))[2] = 8;
    BT_EXPECT_ERROR(bt_tp_cross_entropy(tp, z, tg, 8, -1), "target 8 at position 2");
    bt_tensor *idx = rand_ids(bt_shape1(3), 8, 0, 7);
    ((int32_t *)bt_data_ptr(idx))[1] = -5;
    BT_EXPECT_ERROR(bt_tp_embedding(tp, rnd(bt_shape2(8, 3), 12), idx), "id -5 at position 1");
    (void)i0;
    bt_tensor *q5 = rnd(bt_shape4(1, 2, 5, 4), 8), *q6 = rnd(bt_shape4(1, 2, 6, 4), 9), *q8 = rnd(bt_shape4(1, 2, 8, 4), 10);
    BT_EXPECT_ERROR(bt_cp_attention(cp, q5, q5, q5, 1), "must be even");
    BT_EXPECT_ERROR(bt_cp_attention(cp, q6, q8, q6, 1), "must all be [B, H, 2c, D]");
    BT_EXPECT_ERROR(bt_cp_attention_qkv(cp, rnd(bt_shape3(1, 4, 10), 11), 3, 1), "multiple of H");
    BT_EXPECT_ERROR(bt_cp_create(d->world_comm, (bt_cp_kv)7), "K/V strategy 7");
    BT_EXPECT_ERROR(bt_tp_create(NULL, NULL), "no communicator");
    BT_EXPECT_ERROR(bt_cp_create(NULL, BT_CP_RING), "no communicator");
    bt_cp_free(cp);
    bt_tp_free(tp);
    bt_scope_end();
    bt_dist_shutdown(d);
}

int main(void) {
    signal(SIGPIPE, SIG_IGN);
    /* the forked worlds first: libgomp's thread pool does not survive a fork */
    BT_RUN(test_two_ranks);
    BT_RUN(test_three_ranks);
    BT_RUN(test_vocab_shard);
    BT_RUN(test_zigzag);
    BT_RUN(test_zigzag_shard);
    BT_RUN(test_mesh_use);
    BT_RUN(test_cp_kv_names);
    BT_RUN(test_one_rank_tp);
    BT_RUN(test_one_rank_cp);
    BT_RUN(test_errors);
    return bt_test_summary("test_parallel");
}
