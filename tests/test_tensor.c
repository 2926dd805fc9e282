/* test_tensor.c - bt_tensor.h without the math: creation, dtypes and their conversions, views and
   storage sharing, copies, Philox random numbers, ownership and scopes, and the argument checks of
   every op (a clear error naming the op, never a crash). */
#include "bt_autograd.h"
#include "bt_optim.h"
#include "tests/bt_test.h"
/* BT_EXPECT_ERROR's setjmp: its saved handler is never written after the setjmp, so gcc's
   -Wclobbered warning about it is a false positive */
#pragma GCC diagnostic ignored "-Wclobbered"
#include <stdlib.h>
#include <stdint.h>

#define CPU bt_cpu()

static size_t allocated(void) { return bt_alloc_stats(CPU).allocated; }
static double at2(bt_tensor *t, int64_t i, int64_t j) { int64_t ix[2] = {i, j}; return bt_get(t, ix); }
static double at3(bt_tensor *t, int64_t i, int64_t j, int64_t k) { int64_t ix[3] = {i, j, k}; return bt_get(t, ix); }
static uint32_t f32_bits(float f) { uint32_t u; memcpy(&u, &f, 4); return u; }
static float bits_f32(uint32_t u) { float f; memcpy(&f, &u, 4); return f; }

/* ---------------------------------------------------------------------------------------------
   creation
   --------------------------------------------------------------------------------------------- */
static void test_creation(void) {
    bt_scope_begin();
    bt_tensor *e = bt_empty(bt_shape3(2, 3, 4), BT_F32, CPU);
    BT_CHECK(e->ndim == 3 && bt_numel(e) == 24 && bt_is_contiguous(e), "empty: %s", bt_shape_str(e, (char[64]){0}, 64));
    BT_CHECK(e->stride[0] == 12 && e->stride[1] == 4 && e->stride[2] == 1, "strides %lld %lld %lld",
             (long long)e->stride[0], (long long)e->stride[1], (long long)e->stride[2]);
    bt_tensor *z = bt_zeros(bt_shape2(5, 7), BT_F64, CPU);
    int zero = 1;
    for (int i = 0; i < 35; i++) zero &= ((double *)bt_data_ptr(z))[i] == 0.0;
    BT_CHECK(zero, "zeros not zero");
    bt_dtype dts[] = {BT_F32, BT_F64, BT_BF16, BT_F16, BT_I32, BT_U16, BT_I64};
    for (int k = 0; k < 7; k++) {
        bt_tensor *f = bt_full(bt_shape2(3, 5), 3.0, dts[k], CPU);
        int ok = 1;
        for (int i = 0; i < 3; i++) for (int j = 0; j < 5; j++) ok &= at2(f, i, j) == 3.0;
        BT_CHECK(ok && f->dtype == dts[k], "full 3.0 as %s", bt_dtype_name(dts[k]));
        BT_CHECK(bt_dtype_size(dts[k]) * 15 <= bt_alloc_size(f->storage->data), "storage too small for %s", bt_dtype_name(dts[k]));
    }
    bt_tensor *s = bt_scalar(-2.5, BT_F32, CPU);
    BT_CHECK(s->ndim == 0 && bt_numel(s) == 1 && bt_item(s) == -2.5, "scalar: ndim %d item %g", s->ndim, bt_item(s));
    float data[6] = {1, -2, 3.5f, 4, 5, -6.25f};
    bt_tensor *d = bt_from_data(data, bt_shape2(2, 3), BT_F32, CPU);
    data[0] = 99;   /* a copy: later writes to the source do not show */
    BT_CHECK(at2(d, 0, 0) == 1 && at2(d, 1, 2) == -6.25 && at2(d, 0, 2) == 3.5, "from_data values");
    bt_tensor *b = bt_from_blob(data, bt_shape2(3, 2), BT_F32, CPU);
    data[5] = 42;   /* a wrap: writes through either side show on the other */
    BT_CHECK(at2(b, 0, 0) == 99 && at2(b, 2, 1) == 42, "from_blob does not alias: %g %g", at2(b, 0, 0), at2(b, 2, 1));
    bt_fill_(b, 7);
    BT_CHECK(data[3] == 7, "fill_ through a blob did not reach the host array");
    for (int k = 0; k < 4; k++) {
        bt_tensor *a = bt_arange(13, dts[k == 3 ? 4 : k], CPU);
        int ok = a->ndim == 1 && a->shape[0] == 13;
        for (int64_t i = 0; i < 13; i++) ok &= bt_get(a, &i) == (double)i;
        BT_CHECK(ok, "arange 13 as %s", bt_dtype_name(a->dtype));
    }
    bt_tensor *a0 = bt_arange(0, BT_F32, CPU);
    BT_CHECK(bt_numel(a0) == 0, "arange(0) has %lld elements", (long long)bt_numel(a0));
    bt_tensor *ez = bt_zeros(bt_shape2(0, 5), BT_F32, CPU);
    BT_CHECK(bt_numel(ez) == 0 && ez->shape[1] == 5, "zero-size tensor");
    double v[6];
    bt_to_host(d, v, BT_F64);
    BT_CHECK(v[0] == 1 && v[1] == -2 && v[2] == 3.5, "to_host f64: %g %g %g", v[0], v[1], v[2]);
    bt_scope_end();
}

/* ---------------------------------------------------------------------------------------------
   dtypes: bf16 and f16 round to nearest even, subnormals, inf, NaN
   --------------------------------------------------------------------------------------------- */
/* reference bf16 rounding done by hand on the bits: RNE on the low 16 bits */
static uint16_t ref_bf16(float f) {
    uint32_t u = f32_bits(f);
    if ((u & 0x7fffffffu) > 0x7f800000u) return 0x7fc0 | (uint16_t)((u >> 16) & 0x8000);
    uint32_t lo = u & 0xffff, hi = u >> 16;
    if (lo > 0x8000 || (lo == 0x8000 && (hi & 1))) hi++;
    return (uint16_t)hi;
}
/* the value of an f16 bit pattern, by the IEEE definition */
static double f16_value(uint16_t h) {
    int s = h >> 15, e = (h >> 10) & 31, m = h & 1023;
    double v = e == 0 ? ldexp(m, -24) : e == 31 ? (m ? NAN : INFINITY) : ldexp(1024 + m, e - 25);
    return s ? -v : v;
}
/* the nearest f16 to x, ties to even, by search over the 65536 patterns' neighbours */
static uint16_t ref_f16(double x) {
    if (x != x) return 0x7e00;
    uint16_t sign = signbit(x) ? 0x8000 : 0; double a = fabs(x);
    if (a >= 65520.0) return sign | 0x7c00;      /* halfway between 65504 and 2^16 rounds to inf */
    uint16_t best = 0; double bd = INFINITY;
    for (uint32_t h = 0; h < 0x7c00; h++) {
        double d = fabs(f16_value((uint16_t)h) - a);
        if (d < bd || (d == bd && !(h & 1))) { bd = d; best = (uint16_t)h; }
    }
    return sign | best;
}
static void test_dtype_conversions(void) {
    bt_scope_begin();
    /* bf16: a spread of floats, including exact ties on both parities, subnormals, inf, NaN */
    float xs[] = {1.0f, -1.0f, 0.0f, -0.0f, 3.14159265f, 1e-40f, -1e-41f, 65504.0f, 3.4e38f, INFINITY, -INFINITY,
                  bits_f32(0x3f808000u) /* tie, even below: rounds down */, bits_f32(0x3f818000u) /* tie, odd: up */,
                  bits_f32(0x3f808001u) /* above the tie: up */, bits_f32(0x7f7fffffu) /* max float -> inf */,
                  bits_f32(0x00018000u) /* subnormal tie */, 1.00390625f, 0.1f, -123.456f};
    int nx = (int)(sizeof xs / sizeof xs[0]);
    bt_tensor *x = bt_from_data(xs, bt_shape1(nx), BT_F32, CPU);
    bt_tensor *h = bt_cast(x, BT_BF16);
    BT_CHECK(h->dtype == BT_BF16, "cast dtype");
    const uint16_t *hb = (const uint16_t *)bt_data_ptr(h);
    for (int i = 0; i < nx; i++)
        BT_CHECK(hb[i] == ref_bf16(xs[i]), "bf16(%a): got 0x%04x, want 0x%04x", xs[i], hb[i], ref_bf16(xs[i]));
    bt_tensor *back = bt_cast(h, BT_F32);
    for (int i = 0; i < nx; i++) {
        float want = bits_f32((uint32_t)ref_bf16(xs[i]) << 16), got = ((float *)bt_data_ptr(back))[i];
        BT_CHECK(f32_bits(got) == f32_bits(want), "bf16 -> f32 of %a: got %a want %a", xs[i], got, want);
    }
    float nanv = NAN;
    bt_tensor *n1 = bt_cast(bt_from_data(&nanv, bt_shape1(1), BT_F32, CPU), BT_BF16);
    BT_CHECK(isnan(bt_item(n1)), "bf16 NaN became %g", bt_item(n1));
    float snan = bits_f32(0x7f800001u);   /* a NaN whose payload is only in the low bits: must stay NaN */
    bt_tensor *n2 = bt_cast(bt_from_data(&snan, bt_shape1(1), BT_F32, CPU), BT_BF16);
    BT_CHECK(isnan(bt_item(n2)), "bf16 of a low-payload NaN became %g", bt_item(n2));

    /* f16: every f16 value survives f16 -> f32 -> f16; random and tie cases round as IEEE says */
    uint16_t *all = (uint16_t *)malloc(sizeof(uint16_t) * 65536);
    for (int i = 0; i < 65536; i++) all[i] = (uint16_t)i;
    bt_tensor *hall = bt_from_data(all, bt_shape1(65536), BT_F16, CPU);
    bt_tensor *fall = bt_cast(hall, BT_F32), *hall2 = bt_cast(fall, BT_F16);
    int bad_val = 0, bad_rt = 0;
    for (int i = 0; i < 65536; i++) {
        double want = f16_value((uint16_t)i), got = ((float *)bt_data_ptr(fall))[i];
        uint16_t rt = ((uint16_t *)bt_data_ptr(hall2))[i];
        if (want == want) { if (got != want || signbit(got) != signbit(want)) bad_val++; if (rt != i) bad_rt++; }
        else { if (got == got) bad_val++; if (!isnan(f16_value(rt))) bad_rt++; }
    }
    BT_CHECK(bad_val == 0, "%d f16 patterns decode wrongly", bad_val);
    BT_CHECK(bad_rt == 0, "%d f16 patterns do not round-trip", bad_rt);
    free(all);
    float fs[] = {1.0f + 1.0f / 2048 /* tie: even down */, 1.0f + 3.0f / 2048 /* tie: odd up */, 65504.0f, 65519.0f,
                  65520.0f /* rounds to inf */, 6.103515625e-05f /* smallest normal */, 5.9604645e-08f /* smallest subnormal */,
                  2.98023224e-08f /* half of it: tie to 0 */, 2.99e-08f /* just above: rounds up */, 8.940697e-08f /* 1.5 ulp tie: to 2 */,
                  3.0517578e-05f /* subnormal */, -0.0f, 1e-10f, -7e4f, 0.333333f, 1000.1f, INFINITY, -INFINITY};
    int nf = (int)(sizeof fs / sizeof fs[0]);
    bt_tensor *hf = bt_cast(bt_from_data(fs, bt_shape1(nf), BT_F32, CPU), BT_F16);
    for (int i = 0; i < nf; i++) {
        uint16_t got = ((uint16_t *)bt_data_ptr(hf))[i], want = ref_f16(fs[i]);
        BT_CHECK(got == want, "f16(%a): got 0x%04x want 0x%04x", fs[i], got, want);
    }
    bt_tensor *r = bt_randn(bt_shape1(3000), BT_F32, CPU, 71);
    bt_mul_scalar_(r, 100.0);
    bt_tensor *rh = bt_cast(r, BT_F16);
    int bad = 0;
    for (int i = 0; i < 3000; i += 7) bad += ((uint16_t *)bt_data_ptr(rh))[i] != ref_f16(((float *)bt_data_ptr(r))[i]);
    BT_CHECK(bad == 0, "%d random values round wrongly to f16", bad);
    bt_tensor *nh = bt_cast(bt_from_data(&nanv, bt_shape1(1), BT_F32, CPU), BT_F16);
    BT_CHECK(isnan(bt_item(nh)), "f16 NaN became %g", bt_item(nh));
    /* integer dtypes and f64 through a chain of casts */
    double dv[4] = {-3.0, 7.0, 65535.0, 1e12};
    bt_tensor *d64 = bt_from_data(dv, bt_shape1(4), BT_F64, CPU);
    BT_CHECK(bt_item(bt_narrow(bt_cast(d64, BT_I64), 0, 3, 1)) == 1e12, "f64 -> i64");
    BT_CHECK(bt_item(bt_narrow(bt_cast(d64, BT_I32), 0, 0, 1)) == -3, "f64 -> i32");
    BT_CHECK(bt_item(bt_narrow(bt_cast(d64, BT_U16), 0, 2, 1)) == 65535, "f64 -> u16");
    BT_CHECK(bt_cast(d64, BT_F64) == d64, "cast to the same dtype should return the tensor itself");
    bt_scope_end();
}

/* ---------------------------------------------------------------------------------------------
   views share storage
   --------------------------------------------------------------------------------------------- */
static void test_views(void) {
    bt_scope_begin();
    bt_tensor *a = bt_arange(24, BT_F32, CPU);
    bt_tensor *v = bt_view(a, bt_shape3(2, -1, 4));
    BT_CHECK(v->ndim == 3 && v->shape[1] == 3, "view with -1: shape [%lld, %lld, %lld]", (long long)v->shape[0], (long long)v->shape[1], (long long)v->shape[2]);
    BT_CHECK(v->storage == a->storage, "view does not share storage");
    BT_CHECK(at3(v, 1, 2, 3) == 23 && at3(v, 0, 1, 2) == 6, "view values");
    /* write through a transposed view, read through the original and another view */
    bt_tensor *t = bt_transpose(v, 0, 2);            /* [4, 3, 2] */
    BT_CHECK(t->shape[0] == 4 && t->shape[2] == 2 && !bt_is_contiguous(t), "transpose shape/contiguity");
    BT_CHECK(at3(t, 3, 2, 1) == 23 && at3(t, 1, 0, 1) == 13, "transpose values %g %g", at3(t, 3, 2, 1), at3(t, 1, 0, 1));
    bt_tensor *sel = bt_select(t, 2, 1);             /* [4, 3]: elements of v[1] transposed */
    BT_CHECK(sel->ndim == 2 && at2(sel, 2, 1) == 12 + 4 + 2, "select value %g", at2(sel, 2, 1));
    bt_fill_(sel, -1);
    int ok = 1;
    for (int i = 0; i < 24; i++) ok &= ((float *)bt_data_ptr(a))[i] == (i >= 12 ? -1 : i);
    BT_CHECK(ok, "write through a select of a transpose did not land in the right elements");
    uint32_t ver = a->storage->version;
    bt_tensor *nr = bt_narrow(v, 1, 1, 2);           /* [2, 2, 4] at offset 4 */
    BT_CHECK(nr->offset == 4 && at3(nr, 0, 0, 0) == 4 && at3(nr, 0, 1, 3) == 11, "narrow offset/values");
    bt_add_(nr, bt_full(bt_shape1(4), 100, BT_F32, CPU), 1.0);
    BT_CHECK(a->storage->version > ver, "in-place add did not bump the shared version");
    BT_CHECK(((float *)bt_data_ptr(a))[5] == 105 && ((float *)bt_data_ptr(a))[3] == 3 && ((float *)bt_data_ptr(a))[16] == 99,
             "add_ through a narrow view: %g %g %g", ((float *)bt_data_ptr(a))[5], ((float *)bt_data_ptr(a))[3], ((float *)bt_data_ptr(a))[16]);
    /* permute */
    int perm[3] = {2, 0, 1};
    bt_tensor *p = bt_permute(v, perm);              /* [4, 2, 3], p[k, i, j] = v[i, j, k] */
    ok = p->shape[0] == 4 && p->shape[1] == 2 && p->shape[2] == 3;
    for (int i = 0; i < 2; i++) for (int j = 0; j < 3; j++) for (int k = 0; k < 4; k++) ok &= at3(p, k, i, j) == at3(v, i, j, k);
    BT_CHECK(ok, "permute");
    /* reshape: a view when the strides allow, a copy when not */
    bt_tensor *r1 = bt_reshape(v, bt_shape2(6, 4));
    BT_CHECK(r1->storage == a->storage, "reshape of a contiguous tensor should be a view");
    bt_tensor *r2 = bt_reshape(t, bt_shape2(-1, 6));
    BT_CHECK(r2->storage != a->storage && r2->shape[0] == 4 && bt_is_contiguous(r2), "reshape of a transpose should copy");
    ok = 1;
    for (int64_t i = 0; i < 24; i++) ok &= at2(r2, i / 6, i % 6) == at3(t, i / 6, (i % 6) / 2, i % 2);
    BT_CHECK(ok, "reshape-copy values");
    BT_EXPECT_ERROR(bt_view(t, bt_shape1(24)), "cannot be viewed");
    /* a view of a transpose that keeps the strides compatible: merging the last two dims of [4, 3, 2]^T... */
    bt_tensor *tt = bt_transpose(bt_view(a, bt_shape2(4, 6)), 0, 1);   /* [6, 4], strides (1, 6) */
    bt_tensor *tv = bt_view(tt, bt_shape3(2, 3, 4));                     /* splitting dim 0 is legal */
    BT_CHECK(tv->storage == a->storage && at3(tv, 1, 2, 3) == at2(tt, 5, 3), "view splitting a strided dim");
    BT_EXPECT_ERROR(bt_view(tt, bt_shape1(24)), "view");
    /* expand with broadcasting, unsqueeze / squeeze */
    bt_tensor *col = bt_from_data((float[3]){1, 2, 3}, bt_shape2(3, 1), BT_F32, CPU);
    bt_tensor *ex = bt_expand(col, bt_shape3(2, 3, 5));
    BT_CHECK(ex->stride[0] == 0 && ex->stride[2] == 0 && ex->storage == col->storage, "expand strides %lld %lld", (long long)ex->stride[0], (long long)ex->stride[2]);
    BT_CHECK(at3(ex, 1, 2, 4) == 3 && at3(ex, 0, 0, 3) == 1, "expand values");
    ((float *)bt_data_ptr(col))[1] = 20;
    BT_CHECK(at3(ex, 1, 1, 0) == 20, "expand does not see writes to its source");
    BT_EXPECT_ERROR(bt_expand(col, bt_shape2(4, 5)), "expand");
    bt_tensor *u = bt_unsqueeze(v, 1);
    BT_CHECK(u->ndim == 4 && u->shape[1] == 1 && u->shape[2] == 3 && bt_is_contiguous(u), "unsqueeze(1)");
    bt_tensor *u2 = bt_unsqueeze(v, -1);
    BT_CHECK(u2->ndim == 4 && u2->shape[3] == 1 && at3(v, 1, 2, 3) == ({ int64_t ix[4] = {1, 2, 3, 0}; bt_get(u2, ix); }), "unsqueeze(-1)");
    bt_tensor *sq = bt_squeeze(u, 1);
    BT_CHECK(sq->ndim == 3 && sq->shape[1] == 3 && sq->storage == a->storage, "squeeze");
    BT_EXPECT_ERROR(bt_squeeze(v, 0), "squeeze");
    bt_scope_end();
}

/* contiguous, clone, copy_ between strided views and dtypes */
static void test_copies(void) {
    bt_scope_begin();
    bt_tensor *x = bt_randn(bt_shape3(3, 4, 5), BT_F32, CPU, 11);
    BT_CHECK(bt_contiguous(x) == x, "contiguous of a contiguous tensor should be itself");
    bt_tensor *t = bt_transpose(x, 0, 2);
    bt_tensor *c = bt_contiguous(t);
    int ok = c != t && bt_is_contiguous(c) && c->storage != x->storage;
    for (int i = 0; i < 5; i++) for (int j = 0; j < 4; j++) for (int k = 0; k < 3; k++) ok &= at3(c, i, j, k) == at3(x, k, j, i);
    BT_CHECK(ok, "contiguous of a transpose");
    bt_tensor *cl = bt_clone(x);
    BT_CHECK(cl->storage != x->storage && memcmp(bt_data_ptr(cl), bt_data_ptr(x), 60 * 4) == 0, "clone");
    bt_fill_(cl, 0);
    BT_CHECK(at3(x, 2, 3, 4) != 0, "clone shares storage");
    /* strided -> strided, f32 -> f64 and f64 -> bf16 */
    bt_tensor *dst = bt_zeros(bt_shape3(5, 4, 6), BT_F64, CPU);
    bt_tensor *dv = bt_narrow(dst, 2, 2, 3);          /* [5, 4, 3], not contiguous */
    bt_copy_(dv, t);
    ok = 1;
    for (int i = 0; i < 5; i++) for (int j = 0; j < 4; j++) for (int k = 0; k < 6; k++) {
        double want = k >= 2 && k < 5 ? (double)(float)at3(x, k - 2, j, i) : 0.0;
        ok &= at3(dst, i, j, k) == want;
    }
    BT_CHECK(ok, "copy_ between strided views, f32 -> f64");
    bt_tensor *hb = bt_empty(bt_shape3(4, 3, 5), BT_BF16, CPU);
    bt_copy_(bt_transpose(hb, 0, 1), x);
    ok = 1;
    for (int i = 0; i < 3; i++) for (int j = 0; j < 4; j++) for (int k = 0; k < 5; k++) {
        float v = (float)at3(x, i, j, k);
        ok &= at3(hb, j, i, k) == (double)bits_f32((uint32_t)ref_bf16(v) << 16);
    }
    BT_CHECK(ok, "copy_ into a transposed bf16 view");
    /* an expanded source */
    bt_tensor *row = bt_randn(bt_shape1(5), BT_F64, CPU, 12);
    bt_tensor *m = bt_empty(bt_shape2(3, 5), BT_F32, CPU);
    bt_copy_(m, bt_expand(row, bt_shape2(3, 5)));
    ok = 1;
    for (int64_t i = 0; i < 3; i++) for (int64_t j = 0; j < 5; j++) ok &= at2(m, i, j) == (double)(float)bt_get(row, &j);
    BT_CHECK(ok, "copy_ from an expanded f64 source");
    BT_EXPECT_ERROR(bt_copy_(m, x), "copy_");
    bt_scope_end();
}

/* ---------------------------------------------------------------------------------------------
   Philox
   --------------------------------------------------------------------------------------------- */
static void test_philox(void) {
    bt_scope_begin();
    int64_t n = 100000;
    bt_tensor *a = bt_randn(bt_shape1(n), BT_F64, CPU, 1234), *b = bt_randn(bt_shape1(n), BT_F64, CPU, 1234);
    bt_tensor *c = bt_randn(bt_shape1(n), BT_F64, CPU, 1235);
    BT_CHECK(memcmp(bt_data_ptr(a), bt_data_ptr(b), n * 8) == 0, "randn not deterministic for a seed");
    int64_t same = 0;
    for (int64_t i = 0; i < n; i++) same += ((double *)bt_data_ptr(a))[i] == ((double *)bt_data_ptr(c))[i];
    BT_CHECK(same < 5, "seeds 1234 and 1235 agree in %lld places", (long long)same);
    double s = 0, s2 = 0;
    for (int64_t i = 0; i < n; i++) { double v = ((double *)bt_data_ptr(a))[i]; s += v; s2 += v * v; }
    double mean = s / n, sd = sqrt(s2 / n - mean * mean);
    /* the standard error of the mean is 1/sqrt(n) = 0.0032, of the std about 0.0022: 5 sigma */
    BT_CHECK(fabs(mean) < 0.016 && fabs(sd - 1) < 0.012, "randn mean %g std %g", mean, sd);
    int64_t in_tail = 0;
    for (int64_t i = 0; i < n; i++) in_tail += fabs(((double *)bt_data_ptr(a))[i]) > 1.959964;
    BT_CHECK(fabs((double)in_tail / n - 0.05) < 0.004, "randn: %g of samples beyond 1.96 sigma (want 0.05)", (double)in_tail / n);
    bt_tensor *u = bt_rand(bt_shape1(n), BT_F32, CPU, 77), *u2 = bt_rand(bt_shape1(n), BT_F32, CPU, 78);
    double mn = 1, mx = 0, us = 0; int64_t agree = 0, bins[10] = {0};
    for (int64_t i = 0; i < n; i++) {
        double v = ((float *)bt_data_ptr(u))[i];
        mn = fmin(mn, v); mx = fmax(mx, v); us += v; agree += v == ((float *)bt_data_ptr(u2))[i];
        bins[(int)(v * 10)]++;
    }
    BT_CHECK(mn >= 0 && mx < 1 && mn < 1e-3 && mx > 1 - 1e-3, "uniform range [%g, %g]", mn, mx);
    BT_CHECK(fabs(us / n - 0.5) < 0.005, "uniform mean %g", us / n);
    for (int k = 0; k < 10; k++) BT_CHECK(fabs(bins[k] - n / 10.0) < 600, "uniform bin %d has %lld", k, (long long)bins[k]);
    BT_CHECK(agree < 20, "rand seeds 77 and 78 agree in %lld places", (long long)agree);
    /* offset: element i of a fill at offset o is element o + i of a fill at offset 0 (every lane phase) */
    bt_tensor *base = bt_empty(bt_shape1(64), BT_F64, CPU);
    bt_normal_(base, 0, 1, 99, 0);
    bt_tensor *ub = bt_empty(bt_shape1(64), BT_F64, CPU);
    bt_uniform_(ub, -2, 3, 99, 0);
    for (int o = 0; o < 9; o++) {
        bt_tensor *x = bt_empty(bt_shape1(40), BT_F64, CPU), *y = bt_empty(bt_shape1(40), BT_F64, CPU);
        bt_normal_(x, 0, 1, 99, (uint64_t)o);
        bt_uniform_(y, -2, 3, 99, (uint64_t)o);
        int okn = 1, oku = 1;
        for (int i = 0; i < 40; i++) {
            okn &= ((double *)bt_data_ptr(x))[i] == ((double *)bt_data_ptr(base))[o + i];
            oku &= ((double *)bt_data_ptr(y))[i] == ((double *)bt_data_ptr(ub))[o + i];
        }
        BT_CHECK(okn && oku, "offset %d: normal %d uniform %d", o, okn, oku);
    }
    double lo = 1e9, hi = -1e9;
    for (int i = 0; i < 64; i++) { double v = ((double *)bt_data_ptr(ub))[i]; lo = fmin(lo, v); hi = fmax(hi, v); }
    BT_CHECK(lo >= -2 && hi < 3 && hi - lo > 3, "uniform_(-2, 3) range [%g, %g]", lo, hi);
    /* mean/std arguments, and a fill of a strided view touches only the view */
    bt_tensor *g = bt_zeros(bt_shape2(200, 300), BT_F32, CPU);
    bt_tensor *gv = bt_narrow(g, 1, 100, 100);
    bt_normal_(gv, 3.0, 0.5, 5, 0);
    double gs = 0, gs2 = 0; int outside = 0;
    for (int i = 0; i < 200; i++) for (int j = 0; j < 300; j++) {
        double v = at2(g, i, j);
        if (j < 100 || j >= 200) outside += v != 0; else { gs += v; gs2 += v * v; }
    }
    double gm = gs / 20000, gsd = sqrt(gs2 / 20000 - gm * gm);
    BT_CHECK(outside == 0 && fabs(gm - 3) < 0.02 && fabs(gsd - 0.5) < 0.02, "normal_(3, 0.5) on a view: mean %g std %g, %d outside", gm, gsd, outside);
    /* the same numbers whatever the dtype (up to its rounding) */
    bt_tensor *af = bt_randn(bt_shape1(1000), BT_F32, CPU, 1234);
    int okd = 1;
    for (int i = 0; i < 1000; i++) okd &= ((float *)bt_data_ptr(af))[i] == (float)((double *)bt_data_ptr(a))[i];
    BT_CHECK(okd, "randn f32 differs from randn f64 rounded");
    BT_EXPECT_ERROR(bt_normal_(bt_zeros(bt_shape1(3), BT_I32, CPU), 0, 1, 1, 0), "normal_");
    bt_scope_end();
}

/* ---------------------------------------------------------------------------------------------
   ownership and scopes
   --------------------------------------------------------------------------------------------- */
static void test_scopes(void) {
    size_t base = allocated();
    bt_scope_begin();
    bt_tensor *a = bt_randn(bt_shape2(100, 100), BT_F32, CPU, 1);
    bt_tensor *b = bt_exp(bt_add(a, a));
    BT_CHECK(allocated() >= base + 3 * 40000, "three 40 KB tensors live: allocated %zu, base %zu", allocated(), base);
    bt_tensor *kept = bt_keep(bt_mul(b, b));
    size_t before_inner = allocated();
    bt_scope_begin();                                 /* nested */
    bt_tensor *inner = bt_tanh(kept);
    bt_tensor *inner_kept = bt_keep(bt_sqrt(bt_exp(inner)));
    BT_CHECK(allocated() == before_inner + 3 * bt_alloc_size(inner->storage->data), "three more tensors live");
    bt_scope_end();
    BT_CHECK(allocated() == before_inner + bt_alloc_size(inner_kept->storage->data), "inner scope end: %zu -> %zu",
             before_inner, allocated());
    bt_scope_end();
    size_t after = allocated();
    BT_CHECK(after >= base + 2 * 40000 && after <= base + 2 * 41000, "after the scopes: %zu over base (2 kept tensors)", after - base);
    BT_CHECK(kept->refcount == 1 && inner_kept->refcount == 1, "kept refcounts %d %d", kept->refcount, inner_kept->refcount);
    bt_release(kept);
    bt_release(inner_kept);
    BT_CHECK(allocated() == base, "not everything freed: %zu vs %zu", allocated(), base);
    /* a retained tensor outlives its scope, and its views keep the storage alive */
    bt_scope_begin();
    bt_tensor *r = bt_retain(bt_randn(bt_shape2(50, 50), BT_F64, CPU, 2));
    bt_tensor *view = bt_retain(bt_transpose(r, 0, 1));
    bt_scope_end();
    bt_release(r);
    BT_CHECK(allocated() > base && view->storage->refcount == 1, "a view does not keep its storage");
    bt_release(view);
    BT_CHECK(allocated() == base, "view release: %zu vs %zu", allocated(), base);
    /* keep of a tensor not in the innermost scope is an error */
    bt_scope_begin();
    bt_tensor *outer = bt_zeros(bt_shape1(4), BT_F32, CPU);
    bt_scope_begin();
    BT_EXPECT_ERROR(bt_keep(outer), "keep");
    bt_scope_end();
    bt_scope_end();
    BT_EXPECT_ERROR(bt_scope_end(), "scope_end");
    BT_CHECK(allocated() == base, "scopes leaked: %zu vs %zu", allocated(), base);
}

/* with no scope open, the caller owns every result: releasing them frees everything, even when
   the op made temporaries of its own (reshape of a strided tensor, batched matmul, vector matmul,
   add_ with a scale, concat of many pieces, grad norm) */
static void test_no_scope_ownership(void) {
    size_t base = allocated();
    bt_tensor *x = bt_randn(bt_shape3(2, 3, 4), BT_F32, CPU, 3);
    bt_set_requires_grad(x, 1);
    bt_tensor *w = bt_randn(bt_shape2(4, 5), BT_F32, CPU, 4);
    bt_tensor *t = bt_transpose(x, 1, 2);
    bt_tensor *r = bt_reshape(t, bt_shape2(2, 12));
    bt_tensor *y = bt_randn(bt_shape3(2, 4, 3), BT_F32, CPU, 5);
    bt_tensor *mm = bt_matmul(x, y);                  /* batched: the batch path */
    bt_tensor *mt = bt_matmul_t(y, x, 1, 1);          /* transposes */
    bt_tensor *v = bt_randn(bt_shape1(4), BT_F32, CPU, 6);
    bt_tensor *mv = bt_matmul(x, v), *vm = bt_matmul(v, w);
    bt_tensor *acc = bt_zeros(bt_shape2(4, 5), BT_F32, CPU);
    bt_add_(acc, w, 0.5);
    bt_tensor *pieces[10];
    for (int i = 0; i < 10; i++) pieces[i] = bt_select(x, 2, i % 4);
    bt_tensor *cat = bt_concat(pieces, 10, 1);
    bt_tensor *sq = bt_mul(r, r), *loss = bt_sum(sq, NULL, 0, 0);
    int ok = 1;
    for (int i = 0; i < 20; i++) ok &= ((float *)bt_data_ptr(acc))[i] == 0.5f * ((float *)bt_data_ptr(w))[i];
    BT_CHECK(ok, "add_ with alpha 0.5");
    BT_CHECK(mv->ndim == 2 && mv->shape[1] == 3 && vm->ndim == 1 && vm->shape[0] == 5 && cat->shape[1] == 30, "shapes");
    bt_tensor *all[] = {t, r, mm, mt, mv, vm, cat, sq};
    for (int i = 0; i < 8; i++) bt_release(all[i]);
    for (int i = 0; i < 10; i++) bt_release(pieces[i]);
    bt_backward(loss);
    bt_tensor *gn = bt_grad_norm(&x, 1);
    double gx = 0;
    for (int i = 0; i < 24; i++) { double g = ((float *)bt_data_ptr(x->grad))[i]; gx += g * g; }
    BT_CHECK(fabs(bt_item(gn) - sqrt(gx)) < 1e-5 * sqrt(gx), "grad_norm %g vs %g", bt_item(gn), sqrt(gx));
    bt_release(gn); bt_release(loss);
    bt_release(x); bt_release(w); bt_release(y); bt_release(v); bt_release(acc);
    BT_CHECK(allocated() == base, "ops without a scope leaked: %zu bytes over base", allocated() - base);
}

/* ---------------------------------------------------------------------------------------------
   errors: every op, given bad arguments, raises an error naming the op
   --------------------------------------------------------------------------------------------- */
static void test_errors(void) {
    size_t base = allocated();
    bt_scope_begin();
    bt_tensor *a = bt_randn(bt_shape2(3, 4), BT_F32, CPU, 1), *b = bt_randn(bt_shape2(5, 6), BT_F32, CPU, 2);
    bt_tensor *d = bt_randn(bt_shape2(3, 4), BT_F64, CPU, 3), *i32 = bt_zeros(bt_shape2(3, 4), BT_I32, CPU);
    bt_tensor *v3 = bt_randn(bt_shape1(3), BT_F32, CPU, 4);
    BT_EXPECT_ERROR(bt_matmul(a, b), "matmul: inner dims differ");
    BT_EXPECT_ERROR(bt_matmul_t(a, a, 0, 0), "matmul: inner dims differ");
    BT_EXPECT_ERROR(bt_matmul(a, d), "matmul: dtypes differ");
    BT_EXPECT_ERROR(bt_matmul(a, v3), "matmul: inner dims differ");
    BT_EXPECT_ERROR(bt_matmul(bt_scalar(1, BT_F32, CPU), a), "matmul");
    BT_EXPECT_ERROR(bt_matmul(bt_randn(bt_shape3(2, 3, 4), BT_F32, CPU, 5), bt_randn(bt_shape3(3, 4, 2), BT_F32, CPU, 6)), "matmul: batch dims");
    BT_EXPECT_ERROR(bt_matmul(i32, i32), "matmul");
    BT_EXPECT_ERROR(bt_add(a, b), "add: shapes");
    BT_EXPECT_ERROR(bt_add(a, b), "do not broadcast");
    BT_EXPECT_ERROR(bt_sub(a, v3), "sub: shapes");
    BT_EXPECT_ERROR(bt_mul(a, d), "mul: dtypes differ");
    BT_EXPECT_ERROR(bt_div(a, i32), "div");
    BT_EXPECT_ERROR(bt_add_(v3, a, 1.0), "add_");
    BT_EXPECT_ERROR(bt_exp(i32), "exp");
    BT_EXPECT_ERROR(bt_gelu(NULL), "gelu");
    BT_EXPECT_ERROR(bt_affine(i32, 2, 1), "affine");
    BT_EXPECT_ERROR(bt_sum(a, (int[]){2}, 1, 0), "sum: dim 2 out of range");
    BT_EXPECT_ERROR(bt_mean(a, (int[]){-3}, 1, 0), "mean");
    BT_EXPECT_ERROR(bt_max(a, 5, 0), "max");
    BT_EXPECT_ERROR(bt_argmax(a, -3), "argmax");
    BT_EXPECT_ERROR(bt_max(bt_zeros(bt_shape2(3, 0), BT_F32, CPU), 1, 0), "max");
    BT_EXPECT_ERROR(bt_linear(a, b, NULL), "linear");
    BT_EXPECT_ERROR(bt_linear(a, bt_randn(bt_shape2(6, 4), BT_F32, CPU, 7), v3), "linear: bias");
    BT_EXPECT_ERROR(bt_softmax(bt_scalar(1, BT_F32, CPU)), "softmax");
    BT_EXPECT_ERROR(bt_log_softmax(i32), "log_softmax");
    BT_EXPECT_ERROR(bt_layernorm(a, v3, NULL, 1e-5), "layernorm: w");
    BT_EXPECT_ERROR(bt_layernorm(a, NULL, v3, 1e-5), "layernorm: b");
    BT_EXPECT_ERROR(bt_layernorm(a, NULL, NULL, 0.0), "layernorm: eps");
    BT_EXPECT_ERROR(bt_layernorm(a, bt_randn(bt_shape1(4), BT_F64, CPU, 8), NULL, 1e-5), "layernorm");
    bt_tensor *table = bt_randn(bt_shape2(10, 4), BT_F32, CPU, 9);
    int32_t idx_bad[3] = {1, 10, 2}, idx_neg[2] = {-1, 0};
    BT_EXPECT_ERROR(bt_embedding(table, bt_from_data(idx_bad, bt_shape1(3), BT_I32, CPU)), "embedding: index 10");
    BT_EXPECT_ERROR(bt_embedding(table, bt_from_data(idx_bad, bt_shape1(3), BT_I32, CPU)), "out of range");
    BT_EXPECT_ERROR(bt_embedding(table, bt_from_data(idx_neg, bt_shape1(2), BT_I32, CPU)), "embedding: index -1");
    BT_EXPECT_ERROR(bt_embedding(table, a), "embedding: idx must be i32");
    BT_EXPECT_ERROR(bt_embedding(v3, i32), "embedding: table");
    bt_tensor *logits = bt_randn(bt_shape2(3, 8), BT_F32, CPU, 10);
    int32_t tg_bad[3] = {0, 6, 1}, tg_ok[3] = {0, 5, -100};
    BT_EXPECT_ERROR(bt_cross_entropy(logits, bt_from_data(tg_bad, bt_shape1(3), BT_I32, CPU), 6, -100), "cross_entropy: target 6");
    BT_EXPECT_ERROR(bt_cross_entropy(logits, bt_from_data(tg_bad, bt_shape1(3), BT_I32, CPU), 6, -100), "out of range");
    BT_EXPECT_ERROR(bt_cross_entropy(logits, bt_from_data(tg_ok, bt_shape1(3), BT_I32, CPU), 9, -100), "cross_entropy: V");
    BT_EXPECT_ERROR(bt_cross_entropy(logits, bt_from_data(tg_ok, bt_shape1(3), BT_F32, CPU), 6, -100), "cross_entropy: targets must be i32");
    BT_EXPECT_ERROR(bt_cross_entropy(logits, bt_zeros(bt_shape1(4), BT_I32, CPU), 6, -100), "cross_entropy");
    bt_tensor *q = bt_randn(bt_shape4(1, 2, 3, 4), BT_F32, CPU, 11);
    BT_EXPECT_ERROR(bt_attention(q, q, bt_randn(bt_shape4(1, 2, 3, 5), BT_F32, CPU, 12)), "attention");
    BT_EXPECT_ERROR(bt_attention(a, a, a), "attention");
    BT_EXPECT_ERROR(bt_attention(q, bt_cast(q, BT_F64), q), "attention: dtypes differ");
    bt_tensor *cc[2] = {a, b};
    BT_EXPECT_ERROR(bt_concat(cc, 2, 0), "concat");
    BT_EXPECT_ERROR(bt_concat(cc, 0, 0), "concat");
    bt_tensor *cd[2] = {a, d};
    BT_EXPECT_ERROR(bt_concat(cd, 2, 0), "concat: dtypes differ");
    bt_tensor *many[10] = {a, a, a, a, a, a, a, a, a, d};    /* the bad piece is in the second group of 8 */
    BT_EXPECT_ERROR(bt_concat(many, 10, 1), "concat: dtypes differ");
    BT_EXPECT_ERROR(bt_matmul(bt_randn(bt_shape1(4), BT_F32, CPU, 14), a), "matmul: inner dims differ");
    BT_CHECK(bt_matmul(v3, a)->shape[0] == 4, "vector x matrix");
    BT_EXPECT_ERROR(bt_matmul_t(a, v3, 0, 1), "matmul: transb");
    bt_tensor *out[2];
    BT_EXPECT_ERROR(bt_split(a, (int64_t[]){2, 3}, 2, 1, out), "split: sizes add to 5");
    BT_EXPECT_ERROR(bt_split(a, (int64_t[]){1, 1}, 2, 3, out), "split");
    BT_EXPECT_ERROR(bt_view(a, bt_shape2(5, -1)), "view");
    BT_EXPECT_ERROR(bt_view(a, bt_shape2(-1, -1)), "view");
    BT_EXPECT_ERROR(bt_view(bt_transpose(a, 0, 1), bt_shape1(12)), "view:");
    BT_EXPECT_ERROR(bt_reshape(a, bt_shape1(13)), "reshape");
    BT_EXPECT_ERROR(bt_transpose(a, 0, 2), "transpose");
    BT_EXPECT_ERROR(bt_permute(a, (int[]){0, 0}), "permute");
    BT_EXPECT_ERROR(bt_narrow(a, 1, 2, 3), "narrow");
    BT_EXPECT_ERROR(bt_select(a, 0, 3), "select");
    BT_EXPECT_ERROR(bt_unsqueeze(a, 4), "unsqueeze");
    BT_EXPECT_ERROR(bt_empty(bt_shape2(-1, 3), BT_F32, CPU), "negative size");
    BT_EXPECT_ERROR(bt_zeros(bt_shape1(3), BT_F32, bt_cuda_device(0)), "cuda");
    BT_EXPECT_ERROR(bt_item(a), "item");
    BT_EXPECT_ERROR(bt_get(a, ((int64_t[]){3, 0})), "get");
    BT_EXPECT_ERROR(bt_set_requires_grad(i32, 1), "set_requires_grad");
    BT_EXPECT_ERROR(bt_from_data(NULL, bt_shape1(3), BT_F32, CPU), "from_data");
    BT_EXPECT_ERROR(bt_cast(a, (bt_dtype)42), "cast");
    /* in-place writes to a tensor that requires grad, with grad mode on */
    bt_tensor *p = bt_randn(bt_shape1(3), BT_F32, CPU, 13);
    bt_set_requires_grad(p, 1);
    BT_EXPECT_ERROR(bt_add_(p, v3, 1.0), "add_: in-place write");
    BT_EXPECT_ERROR(bt_mul_scalar_(p, 2.0), "mul_scalar_");
    /* still working after all those errors */
    bt_tensor *ok = bt_matmul(a, bt_transpose(a, 0, 1));
    BT_CHECK(ok->shape[0] == 3 && ok->shape[1] == 3 && bt_grad_enabled(), "ops after errors");
    bt_scope_end();
    BT_CHECK(allocated() == base, "errors leaked %lld bytes", (long long)(allocated() - base));
}

int main(void) {
    (void)bt_test_relerr;
    BT_RUN(test_creation);
    BT_RUN(test_dtype_conversions);
    BT_RUN(test_views);
    BT_RUN(test_copies);
    BT_RUN(test_philox);
    BT_RUN(test_scopes);
    BT_RUN(test_no_scope_ownership);
    BT_RUN(test_errors);
    return bt_test_summary("test_tensor");
}
