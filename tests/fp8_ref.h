/* fp8_ref.h - float64 references for the FP8 tests (tests/test_fp8.c on the CPU, tests/test_fp8_gpu.cu
   on a GPU), written from the formats' definitions and not from bt_tensor.h's code:
     fr_decode   a code's value from sign, exponent and mantissa (ldexp in double)
     fr_encode   the nearest finite value by scanning every code (ties to the even code, saturation
                 at the largest finite value, NaN -> 0x7f): slow and obviously right
     fr_gemm     C = sa sb A B^T (+ bias) in double from fp8 codes, and each element's S = sa sb sum
                 |a_k b_k| + |bias|, the scale of its rounding error
     fr_check    |got - ref| <= u_acc S + u_out (|ref| + u_acc S) + tiny per element: u_acc bounds
                 the accumulation (fp32 sums of exact products: (K + 4) 2^-24), u_out the one
                 rounding to the output's dtype (2^-24 f32, 2^-11 f16, 2^-8 bf16), tiny that
                 rounding's absolute error below the dtype's normal range (f16: 2^-25)
   Needs bt_tensor.h (dtypes, bt_fp8_scale_of); C and C++ (the CUDA test). */
#ifndef FP8_REF_H
#define FP8_REF_H
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

static int fr_maxcode(bt_dtype fmt) { return fmt == BT_F8E5M2 ? 0x7b : 0x7e; }
static double fr_maxval(bt_dtype fmt) { return fmt == BT_F8E5M2 ? 57344.0 : 448.0; }
/* the value of a code by the definition; NAN for NaN codes, +-INFINITY for e5m2's infinities */
static double fr_decode(int code, bt_dtype fmt) {
    int sign = code & 0x80, m = fmt == BT_F8E5M2 ? 2 : 3, bias = fmt == BT_F8E5M2 ? 15 : 7;
    int e = (code & 0x7f) >> m, man = code & ((1 << m) - 1);
    double v;
    if (fmt == BT_F8E4M3 && e == 15 && man == 7) return NAN;
    if (fmt == BT_F8E5M2 && e == 31) { if (man) return NAN; v = INFINITY; }
    else if (e == 0) v = ldexp((double)man, 1 - bias - m);                       /* m / 2^m 2^(1 - bias) */
    else v = ldexp(1.0 + (double)man / (double)(1 << m), e - bias);
    return sign ? -v : v;
}
/* the nearest finite code to v: saturating, ties to the even code, NaN -> 0x7f */
static int fr_encode(float v, bt_dtype fmt) {
    if (v != v) return 0x7f;
    int sign = signbit(v) ? 0x80 : 0, best = 0;
    double a = fabs((double)v), bd = INFINITY;
    if (a >= fr_maxval(fmt)) return sign | fr_maxcode(fmt);
    for (int c = 0; c <= fr_maxcode(fmt); c++) {      /* the non-negative finite codes, in increasing value */
        double d = fabs(fr_decode(c, fmt) - a);
        if (d < bd || (d == bd && !(c & 1))) { bd = d; best = c; }
    }
    return sign | best;
}
static float fr_amax(const float *x, long n) {
    float m = 0;
    for (long i = 0; i < n; i++) { if (x[i] != x[i]) return x[i]; if (fabsf(x[i]) > m) m = fabsf(x[i]); }
    return m;
}
/* q = fp8(x * (1 / s)) with the f32 operations the library defines (one division, one multiply each) */
static void fr_quantize(const float *x, long n, float s, bt_dtype fmt, uint8_t *q) {
    float r = 1.f / s;
    for (long i = 0; i < n; i++) q[i] = (uint8_t)fr_encode(x[i] * r, fmt);
}
/* t [cols, rows] = the transpose of a [rows, cols] */
static void fr_transpose(const uint8_t *a, long rows, long cols, uint8_t *t) {
    for (long i = 0; i < rows; i++)
        for (long j = 0; j < cols; j++) t[j * rows + i] = a[i * cols + j];
}
/* C [M, N] = sa sb A [M, K] B [N, K]^T + bias [N] (bias may be NULL), S as above */
static void fr_gemm(const uint8_t *A, bt_dtype fa, double sa, const uint8_t *B, bt_dtype fb, double sb, const double *bias, long M,
                    long N, long K, double *C, double *S) {
    double da[256], db[256];                            /* fr_decode of every code */
    for (int c = 0; c < 256; c++) { da[c] = fr_decode(c, fa); db[c] = fr_decode(c, fb); }
    for (long i = 0; i < M; i++)
        for (long j = 0; j < N; j++) {
            double s = 0, sabs = 0;
            for (long k = 0; k < K; k++) {
                double p = da[A[i * K + k]] * db[B[j * K + k]];
                s += p; sabs += fabs(p);
            }
            C[i * N + j] = sa * sb * s + (bias ? bias[j] : 0);
            S[i * N + j] = sa * sb * sabs + (bias ? fabs(bias[j]) : 0);
        }
}
/* the unit roundoff of a rounding to dt, and half its smallest subnormal (the absolute error of a
   rounding below its normal range) */
static double fr_unit(bt_dtype dt) { return dt == BT_BF16 ? ldexp(1, -8) : dt == BT_F16 ? ldexp(1, -11) : dt == BT_F64 ? ldexp(1, -53) : ldexp(1, -24); }
static double fr_tiny(bt_dtype dt) { return dt == BT_BF16 ? ldexp(1, -134) : dt == BT_F16 ? ldexp(1, -25) : dt == BT_F64 ? ldexp(1, -1075) : ldexp(1, -150); }
/* the largest |got - ref| / bound over n elements (<= 1: within the bound everywhere), the output
   rounded to dt; *worst_i its index */
static double fr_check(const double *got, const double *ref, const double *S, long n, double u_acc, bt_dtype dt, long *worst_i) {
    double worst = 0, u_out = fr_unit(dt), tiny = fr_tiny(dt);
    if (worst_i) *worst_i = 0;
    for (long i = 0; i < n; i++) {
        double e = u_acc * S[i], bound = e + u_out * (fabs(ref[i]) + e) + tiny + 1e-300;
        double r = fabs(got[i] - ref[i]) / bound;
        if (r != r) { if (worst_i) *worst_i = i; return NAN; }
        if (r > worst) { worst = r; if (worst_i) *worst_i = i; }
    }
    return worst;
}
#endif /* FP8_REF_H */
