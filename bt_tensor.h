/* bt_tensor.h - BluTrain-C tensors, v0.1: dtypes, storage, views, devices, and every op with its
   forward and backward math.

   USAGE
     #define BT_TENSOR_IMPLEMENTATION   (and BT_ALLOC_IMPLEMENTATION) in *one* C file, then
     #include "bt_tensor.h". Compiled by nvcc (-x cu) the CUDA path is built too (bt_kernels.cuh).

     bt_tensor *x = bt_randn(bt_shape2(4, 8), BT_F32, bt_cpu(), 1234);
     bt_tensor *w = bt_randn(bt_shape2(8, 3), BT_F32, bt_cpu(), 99);
     bt_set_requires_grad(w, 1);
     bt_scope_begin();                        // every tensor an op makes from here is released...
     bt_tensor *loss = bt_mean(bt_tanh(bt_matmul(x, w)), NULL, 0, 0);
     bt_backward(loss);                       // (bt_autograd.h) w->grad now holds dloss/dw
     bt_scope_end();                          // ...here, unless bt_retain()ed
     bt_release(x); bt_release(w);

   MODEL
     A tensor is a view (dtype, device, shape, element strides, element offset) over a refcounted
     storage. Views (bt_view, bt_transpose, bt_permute, bt_narrow, bt_expand, ...) share the
     storage and the storage's version counter; an in-place op bumps the counter, and autograd
     refuses to use a saved tensor whose version moved. Ops take any strides and call
     bt_contiguous internally where their kernel needs it.

   OWNERSHIP
     A tensor starts with one reference. While a scope is open (bt_scope_begin / bt_scope_end,
     nestable) each tensor an op returns is also registered with the innermost scope, which drops
     that reference at its end: a training step frees its temporaries without calling bt_release.
     bt_retain keeps one past its scope; with no scope open, the caller owns the result.

   DEVICES AND STREAMS
     A tensor lives on one device (bt_cpu() or bt_cuda_device(i)); an op's inputs share it. Every
     GPU op runs on its tensors' own device (a device guard makes it the current CUDA device for
     the op and gives the caller's back after) and on that device's current stream: the top of
     the device's stream stack (bt_stream_push / bt_stream_pop), else the device's own stream.
     Work on different streams is ordered by events only (bt_event_record, bt_stream_wait_event);
     nothing in the library synchronizes a whole device. The host waits only where a value must
     reach it: bt_item, bt_to_host, bt_synchronize (bt_to_host_async does not wait).

   ERRORS
     Every op checks its arguments (shapes, dtypes, devices) and raises bt_error naming the op,
     the shapes and the dtypes; see bt_alloc.h for the handler.

   AUTOGRAD
     When grad mode is on and an input requires grad, an op records a node (its backward
     function, the inputs, the tensors it saved). bt_autograd.h runs the graph.

   THE OP LIST
     The elementwise ops are one X-macro list (BT_UNARY_OPS, BT_BINARY_OPS, below): each op's
     value and derivative are written once, and the CPU loops, the CUDA kernels, the tests and
     bt_mlir.h expand the list. Dtypes likewise (BT_DTYPES).

   SECTIONS (implementation)
     1. the op list's CPU reference
     2. errors, devices and streams, storage, tensor lifetime, scopes
     3. creation, random numbers (Philox), copies, device moves
     4. the autograd node record
     5. views
     6. ops: elementwise, scalar, broadcasting binary, reductions, matmul, then (bt_nn.h, included
        there) GPT-2's fused MLP, softmax, layernorm, rmsnorm, swiglu, rope, embedding,
        cross-entropy, attention, the FP8 linear layer; then concat/split, casts
*/
#ifndef BT_TENSOR_H
#define BT_TENSOR_H

#include "bt_alloc.h"
#include <stdint.h>
#include <stddef.h>
#include <string.h>
#include <math.h>
#include <float.h>

#ifdef __CUDACC__
#define BT_HOSTDEV __host__ __device__
#else
#define BT_HOSTDEV
#endif

/* ---- dtypes: X(NAME, name, bytes) once; the enum, bt_dtype_size and bt_dtype_name expand it.
   The float dtypes come first (bt_dtype_is_float relies on it). The two FP8 formats come last and
   are storage dtypes, not compute ones: a tensor of them holds the bytes of a scaled cast (the
   FP8 linear layer's quantised operands, bt_linear_fp8), so that an autograd node can save them,
   a device move or a checkpoint can carry them and bt_to_host / bt_cast can read them, while every
   op refuses them as it refuses integers (bt_dtype_is_float is 0). That costs two lines here and a
   case each in bt__ld / bt__st, and no op or kernel changes; bytes private to one op would have
   needed a second way to save and free memory on a node. ---- */
#define BT_DTYPES(X) X(F32, f32, 4) X(F64, f64, 8) X(BF16, bf16, 2) X(F16, f16, 2) \
                     X(I32, i32, 4) X(U16, u16, 2) X(I64, i64, 8) X(F8E4M3, f8e4m3, 1) X(F8E5M2, f8e5m2, 1)

/* ---- the elementwise op list ----
   Each unary op once: X(NAME, name, f(x), f'(x)). Both expressions are written over x, y = f(x)
   and constants BT_C(c) in a type bt_op_t that the expanding code typedefs (double in the CPU
   loops, float in the CUDA kernels), with the math BT_M_EXP, BT_M_LOG, BT_M_SQRT, BT_M_TANH.
   The enum bt_unary_op, the op names, the CPU loops, the kernels, the op tests and bt_mlir.h
   all expand this list; a new line is a new op everywhere, bt_<name>(x) included.
   Binary ops: X(NAME, name, a op b, d/da, d/db). Their backward in bt_tensor.h applies these
   partials as graph ops, so that add's backward moves no data. */
#define BT_C(c) ((bt_op_t)(c))
#define BT_SIGM(x) (BT_C(1) / (BT_C(1) + BT_M_EXP(-(x))))
#define BT_GELU_U(x) (BT_C(0.7978845608028654) * ((x) + BT_C(0.044715) * (x) * (x) * (x)))  /* sqrt(2/pi) (x + 0.044715 x^3) */
#define BT_GELU(x) (BT_C(0.5) * (x) * (BT_C(1) + BT_M_TANH(BT_GELU_U(x))))                    /* GPT-2's tanh form */
#define BT_GELU_GRAD(x) (BT_C(0.5) * (BT_C(1) + BT_M_TANH(BT_GELU_U(x))) + BT_C(0.5) * (x) \
    * (BT_C(1) - BT_M_TANH(BT_GELU_U(x)) * BT_M_TANH(BT_GELU_U(x))) * BT_C(0.7978845608028654) \
    * (BT_C(1) + BT_C(3 * 0.044715) * (x) * (x)))
#define BT_UNARY_OPS(X) \
    X(NEG,     neg,     -x,                          BT_C(-1)) \
    X(EXP,     exp,     BT_M_EXP(x),                 y) \
    X(LOG,     log,     BT_M_LOG(x),                 BT_C(1) / x) \
    X(SQRT,    sqrt,    BT_M_SQRT(x),                BT_C(0.5) / y) \
    X(RSQRT,   rsqrt,   BT_C(1) / BT_M_SQRT(x),      BT_C(-0.5) * y * y * y) \
    X(TANH,    tanh,    BT_M_TANH(x),                BT_C(1) - y * y) \
    X(SIGMOID, sigmoid, BT_SIGM(x),                  y * (BT_C(1) - y)) \
    X(SILU,    silu,    x * BT_SIGM(x),              BT_SIGM(x) * (BT_C(1) + x * (BT_C(1) - BT_SIGM(x)))) \
    X(RELU,    relu,    x > BT_C(0) ? x : BT_C(0),   x > BT_C(0) ? BT_C(1) : BT_C(0)) \
    X(GELU,    gelu,    BT_GELU(x),                  BT_GELU_GRAD(x)) \
    X(SQUARE,  square,  x * x,                       BT_C(2) * x) \
    X(RECIP,   recip,   BT_C(1) / x,                 -y * y)
#define BT_BINARY_OPS(X) \
    X(ADD, add, a + b, BT_C(1),     BT_C(1)) \
    X(SUB, sub, a - b, BT_C(1),     BT_C(-1)) \
    X(MUL, mul, a * b, b,           a) \
    X(DIV, div, a / b, BT_C(1) / b, -a / (b * b))

/* The math of the op list for double and (CUDA C++) float: one name, the type's own function. */
#ifdef __cplusplus
static inline BT_HOSTDEV float bt_m_exp(float x) { return expf(x); }
static inline BT_HOSTDEV float bt_m_log(float x) { return logf(x); }
static inline BT_HOSTDEV float bt_m_sqrt(float x) { return sqrtf(x); }
static inline BT_HOSTDEV float bt_m_tanh(float x) { return tanhf(x); }
static inline BT_HOSTDEV double bt_m_exp(double x) { return exp(x); }
static inline BT_HOSTDEV double bt_m_log(double x) { return log(x); }
static inline BT_HOSTDEV double bt_m_sqrt(double x) { return sqrt(x); }
static inline BT_HOSTDEV double bt_m_tanh(double x) { return tanh(x); }
#define BT_M_EXP(x) bt_m_exp(x)
#define BT_M_LOG(x) bt_m_log(x)
#define BT_M_SQRT(x) bt_m_sqrt(x)
#define BT_M_TANH(x) bt_m_tanh(x)
#else
#define BT_M_EXP(x) exp(x)
#define BT_M_LOG(x) log(x)
#define BT_M_SQRT(x) sqrt(x)
#define BT_M_TANH(x) tanh(x)
#endif

#ifdef __cplusplus
extern "C" {
#endif

/* ---- dtypes ---- */
#define BT__X(N, n, b) BT_##N,
typedef enum { BT_DTYPES(BT__X) BT_NDTYPES } bt_dtype;
#undef BT__X
static inline int bt_dtype_is_float(bt_dtype dt) { return dt <= BT_F16; }

/* ---- op kinds shared with the kernels ---- */
#define BT__X(N, n, f, df) BT_UOP_##N,
typedef enum { BT_UNARY_OPS(BT__X) BT_NUOPS } bt_unary_op;
#undef BT__X
#define BT__X(N, n, f, da, db) BT_BOP_##N,
typedef enum { BT_BINARY_OPS(BT__X) BT_NBOPS } bt_binary_op;
#undef BT__X
static inline const char *bt_unary_op_name(bt_unary_op op) {
#define BT__X(N, n, f, df) #n,
    static const char *names[BT_NUOPS] = {BT_UNARY_OPS(BT__X)};
#undef BT__X
    return (unsigned)op < BT_NUOPS ? names[op] : "?";
}
static inline const char *bt_binary_op_name(bt_binary_op op) {
#define BT__X(N, n, f, da, db) #n,
    static const char *names[BT_NBOPS] = {BT_BINARY_OPS(BT__X)};
#undef BT__X
    return (unsigned)op < BT_NBOPS ? names[op] : "?";
}
/* the list's f(x), f'(x) and a op b in double: its CPU reference */
BTDEF double bt_unary_op_eval(bt_unary_op op, double x);
BTDEF double bt_unary_op_grad(bt_unary_op op, double x);
BTDEF double bt_binary_op_eval(bt_binary_op op, double a, double b);
typedef enum { BT_REDUCE_SUM = 0, BT_REDUCE_MEAN, BT_REDUCE_MAX } bt_reduce_op;
typedef enum { BT_MATMUL_FP32 = 0, BT_MATMUL_TF32 = 1 } bt_matmul_precision;

/* ---- dtype sizes and names, element loads and stores: inline, shared by the CPU code and the
   kernels (so a conversion gives the same bits on both sides) ---- */
static inline size_t bt_dtype_size(bt_dtype dt) {
#define BT__X(N, n, b) b,
    static const size_t sizes[BT_NDTYPES] = {BT_DTYPES(BT__X)};
#undef BT__X
    return (unsigned)dt < BT_NDTYPES ? sizes[dt] : 0;
}
static inline const char *bt_dtype_name(bt_dtype dt) {
#define BT__X(N, n, b) #n,
    static const char *names[BT_NDTYPES] = {BT_DTYPES(BT__X)};
#undef BT__X
    return (unsigned)dt < BT_NDTYPES ? names[dt] : "?";
}
/* bf16: the top half of an fp32, rounded to nearest even (NaN kept quiet). */
static inline BT_HOSTDEV float bt__bf16_to_f32(uint16_t h) { uint32_t u = (uint32_t)h << 16; float f; memcpy(&f, &u, 4); return f; }
static inline BT_HOSTDEV uint16_t bt__f32_to_bf16(float f) {
    uint32_t u; memcpy(&u, &f, 4);
    if ((u & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((u >> 16) | 0x40);
    u += 0x7fffu + ((u >> 16) & 1);
    return (uint16_t)(u >> 16);
}
/* An f32 as two 16-bit halves, exact both ways: hi = its top half rounded to nearest with ties away
   from zero (a bf16 of the value; NaN kept a quiet NaN), lo = its bottom half as it is. hi was
   rounded up exactly when lo >= 0x8000, so (hi - that) << 16 | lo is the f32 again. (Ties to even
   cannot be undone from 32 bits: two neighbours would share hi and lo.) */
static inline BT_HOSTDEV uint16_t bt__f32_hi16(float f) {
    uint32_t u; memcpy(&u, &f, 4);
    if ((u & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((u >> 16) | 0x40);
    return (uint16_t)((u + 0x8000u) >> 16);
}
static inline BT_HOSTDEV uint16_t bt__f32_lo16(float f) { uint32_t u; memcpy(&u, &f, 4); return (uint16_t)u; }
static inline BT_HOSTDEV float bt__f32_join16(uint16_t hi, uint16_t lo) {
    uint32_t u = ((uint32_t)(uint16_t)(hi - (lo >= 0x8000u)) << 16) | lo; float f; memcpy(&f, &u, 4); return f;
}
/* IEEE half <-> float, round to nearest even, subnormals and infinities handled. */
static inline BT_HOSTDEV float bt__f16_to_f32(uint16_t h) {
    uint32_t sign = (uint32_t)(h & 0x8000) << 16, exp = (h >> 10) & 0x1f, man = h & 0x3ff, u;
    if (exp == 0x1f) u = sign | 0x7f800000u | (man << 13);
    else if (exp) u = sign | ((exp + 112) << 23) | (man << 13);
    else if (!man) u = sign;
    else { int e = -1; do { e++; man <<= 1; } while (!(man & 0x400)); u = sign | ((uint32_t)(112 - e) << 23) | ((man & 0x3ff) << 13); }
    float f; memcpy(&f, &u, 4); return f;
}
static inline BT_HOSTDEV uint16_t bt__f32_to_f16(float f) {
    uint32_t u; memcpy(&u, &f, 4);
    uint32_t sign = (u >> 16) & 0x8000, a = u & 0x7fffffffu;
    if (a > 0x7f800000u) return (uint16_t)(sign | 0x7e00);
    if (a >= 0x477ff000u) return (uint16_t)(sign | 0x7c00);           /* overflow -> inf */
    if (a < 0x38800000u) {                                           /* subnormal half */
        if (a < 0x33000000u) return (uint16_t)sign;
        uint32_t man = (a & 0x7fffff) | 0x800000; int shift = 126 - (int)(a >> 23);
        uint32_t half = man >> shift, rem = man & ((1u << shift) - 1), mid = 1u << (shift - 1);
        if (rem > mid || (rem == mid && (half & 1))) half++;
        return (uint16_t)(sign | half);
    }
    uint32_t h = ((a - 0x38000000u) >> 13), rem = a & 0x1fff;
    if (rem > 0x1000 || (rem == 0x1000 && (h & 1))) h++;
    return (uint16_t)(sign | h);
}
/* ---- FP8: OCP 8-bit floats, sign | exponent | mantissa, bias 2^(E-1) - 1 ----
   e4m3 ("fn": finite and NaN only) 1.4.3, bias 7: normals (1 + m/8) 2^(e-7) for e = 1..15, largest
     448 = 0x7e; subnormals m 2^-9 (e = 0); 0x7f / 0xff are NaN; no infinities.
   e5m2 (IEEE-like) 1.5.2, bias 15: normals (1 + m/4) 2^(e-15) for e = 1..30, largest 57344 = 0x7b;
     subnormals m 2^-16; e = 31 is +-inf (m = 0, 0x7c / 0xfc) or NaN (m != 0).
   Encoding rounds to nearest, ties to even, and SATURATES: any |f| at or past the largest finite
   value (infinities too) gives that value with f's sign, the convention of scaled casts (a value
   past the scale's range is clipped, never turned into inf or NaN) and of PTX's
   cvt.rn.satfinite.{e4m3,e5m2}x2.f32, which the CUDA kernels use: the two give the same bytes
   (tests/test_fp8_gpu.cu). NaN encodes as 0x7f in both formats (the sign dropped, as the hardware
   does). Subnormal results are exact RNE too; an f32 subnormal is far below half the smallest fp8
   subnormal and gives a signed zero. A double (bt__st) is rounded to f32 first, as bf16's is. */
#define BT_F8E4M3_MAX 448.0f
#define BT_F8E5M2_MAX 57344.0f
/* fp8 with m mantissa bits and exponent bias b -> f32 (exact); NaN and inf codes handled by the callers */
static inline BT_HOSTDEV float bt__f8_to_f32(uint8_t v, int m, int b) {
    uint32_t sign = (uint32_t)(v & 0x80) << 24, e = (uint32_t)(v & 0x7f) >> m, man = v & ((1u << m) - 1), u;
    float f;
    if (e) u = sign | ((e + 127 - (uint32_t)b) << 23) | (man << (23 - m));
    else {                                            /* man 2^(1 - b - m), exact in f32 */
        uint32_t ulp = (uint32_t)(127 + 1 - b - m) << 23; memcpy(&f, &ulp, 4);
        f *= (float)man;
        memcpy(&u, &f, 4); u |= sign;
    }
    memcpy(&f, &u, 4); return f;
}
/* f32 -> fp8 with m mantissa bits, bias b, largest finite value maxf (its f32 bits) = code maxcode */
static inline BT_HOSTDEV uint8_t bt__f32_to_f8(float f, int m, int b, uint32_t maxf, uint8_t maxcode) {
    uint32_t u; memcpy(&u, &f, 4);
    uint8_t sign = (uint8_t)((u >> 24) & 0x80);
    uint32_t a = u & 0x7fffffffu;
    if (a > 0x7f800000u) return 0x7f;                  /* NaN */
    if (a >= maxf) return (uint8_t)(sign | maxcode);   /* saturate (inf included) */
    int e = (int)(a >> 23) - 127;                      /* |f| = 1.mant 2^e */
    if (e >= 1 - b) {                                  /* an fp8 normal: keep the top m of 23 mantissa bits */
        int sh = 23 - m;                               /* + (half - 1) + the kept lsb: ties go to even */
        uint32_t r = a + ((1u << (sh - 1)) - 1) + ((a >> sh) & 1);
        return (uint8_t)(sign | ((r >> sh) - ((uint32_t)(127 - b) << m)));   /* a carry moves the exponent */
    }
    /* an fp8 subnormal: k = RNE(|f| / 2^(1 - b - m)) = RNE(sig / 2^sh), sig the 24-bit significand;
       sh >= 21 here, and k = 2^m is the smallest normal's code */
    int sh = 24 - b - m - e;
    if (a < 0x00800000u || sh > 24) return sign;      /* below half the smallest subnormal: a signed zero */
    uint32_t sig = (a & 0x7fffffu) | 0x800000u, k = sig >> sh, rem = sig & ((1u << sh) - 1), half = 1u << (sh - 1);
    if (rem > half || (rem == half && (k & 1))) k++;
    return (uint8_t)(sign | k);
}
static inline BT_HOSTDEV float bt__f8e4m3_to_f32(uint8_t v) {
    if ((v & 0x7f) == 0x7f) { uint32_t u = 0x7fc00000u; float f; memcpy(&f, &u, 4); return f; }
    return bt__f8_to_f32(v, 3, 7);
}
static inline BT_HOSTDEV float bt__f8e5m2_to_f32(uint8_t v) {
    if ((v & 0x7c) == 0x7c) {                         /* exponent 31: inf (mantissa 0) or NaN */
        uint32_t u = (v & 3) ? 0x7fc00000u : ((uint32_t)(v & 0x80) << 24) | 0x7f800000u; float f; memcpy(&f, &u, 4); return f;
    }
    return bt__f8_to_f32(v, 2, 15);
}
static inline BT_HOSTDEV uint8_t bt__f32_to_f8e4m3(float f) { return bt__f32_to_f8(f, 3, 7, 0x43e00000u, 0x7e); }      /* 448 */
static inline BT_HOSTDEV uint8_t bt__f32_to_f8e5m2(float f) { return bt__f32_to_f8(f, 2, 15, 0x47600000u, 0x7b); }     /* 57344 */

/* element i of a buffer of dtype dt, as double; and the reverse. The CPU reference paths compute
   through these, so one loop serves every dtype; the generic copy kernels use them too, so a
   conversion gives the same bits on both sides. */
static inline BT_HOSTDEV double bt__ld(const void *p, bt_dtype dt, int64_t i) {
    switch (dt) {
    case BT_F32: return ((const float *)p)[i];
    case BT_F64: return ((const double *)p)[i];
    case BT_BF16: return bt__bf16_to_f32(((const uint16_t *)p)[i]);
    case BT_F16: return bt__f16_to_f32(((const uint16_t *)p)[i]);
    case BT_I32: return ((const int32_t *)p)[i];
    case BT_U16: return ((const uint16_t *)p)[i];
    case BT_I64: return (double)((const int64_t *)p)[i];
    case BT_F8E4M3: return bt__f8e4m3_to_f32(((const uint8_t *)p)[i]);
    case BT_F8E5M2: return bt__f8e5m2_to_f32(((const uint8_t *)p)[i]);
    default: return 0;
    }
}
static inline BT_HOSTDEV void bt__st(void *p, bt_dtype dt, int64_t i, double v) {
    switch (dt) {
    case BT_F32: ((float *)p)[i] = (float)v; break;
    case BT_F64: ((double *)p)[i] = v; break;
    case BT_BF16: ((uint16_t *)p)[i] = bt__f32_to_bf16((float)v); break;
    case BT_F16: ((uint16_t *)p)[i] = bt__f32_to_f16((float)v); break;
    case BT_I32: ((int32_t *)p)[i] = (int32_t)v; break;
    case BT_U16: ((uint16_t *)p)[i] = (uint16_t)v; break;
    case BT_I64: ((int64_t *)p)[i] = (int64_t)v; break;
    case BT_F8E4M3: ((uint8_t *)p)[i] = bt__f32_to_f8e4m3((float)v); break;
    case BT_F8E5M2: ((uint8_t *)p)[i] = bt__f32_to_f8e5m2((float)v); break;
    default: break;
    }
}



/* ---- Philox4x32-10: counter-based RNG, the same bits on the CPU and the GPU ----
   A random stream is (seed, index): element `index` of a fill uses the counter index / 4 and takes
   lane index % 4 of the four output words. Uniforms are (w >> 8) * 2^-24 in [0, 1). Normals use
   Box-Muller on the lane pair (0,1) or (2,3) of the same counter, in double precision. */
static inline BT_HOSTDEV void bt_philox4x32(uint64_t counter, uint64_t seed, uint32_t out[4]) {
    uint32_t c0 = (uint32_t)counter, c1 = (uint32_t)(counter >> 32), c2 = 0, c3 = 0;
    uint32_t k0 = (uint32_t)seed, k1 = (uint32_t)(seed >> 32);
    for (int r = 0; r < 10; r++) {
        uint64_t p0 = (uint64_t)0xD2511F53u * c0, p1 = (uint64_t)0xCD9E8D57u * c2;
        uint32_t n0 = (uint32_t)(p1 >> 32) ^ c1 ^ k0, n2 = (uint32_t)(p0 >> 32) ^ c3 ^ k1;
        c1 = (uint32_t)p1; c3 = (uint32_t)p0; c0 = n0; c2 = n2;
        k0 += 0x9E3779B9u; k1 += 0xBB67AE85u;
    }
    out[0] = c0; out[1] = c1; out[2] = c2; out[3] = c3;
}
static inline BT_HOSTDEV double bt_philox_uniform(uint64_t seed, uint64_t index) {
    uint32_t w[4]; bt_philox4x32(index >> 2, seed, w);
    return (double)(w[index & 3] >> 8) * (1.0 / 16777216.0);
}
static inline BT_HOSTDEV double bt_philox_normal(uint64_t seed, uint64_t index) {
    uint32_t w[4]; bt_philox4x32(index >> 2, seed, w);
    int pair = (int)(index & 2), second = (int)(index & 1);
    double u1 = ((double)w[pair] + 1.0) * (1.0 / 4294967296.0);      /* (0, 1] */
    double u2 = (double)w[pair + 1] * (1.0 / 4294967296.0);          /* [0, 1) */
    double r = sqrt(-2.0 * log(u1)), th = 6.283185307179586 * u2;
    return second ? r * sin(th) : r * cos(th);
}

/* ---- shapes ---- */
#define BT_MAX_DIMS 8
typedef struct { int ndim; int64_t d[BT_MAX_DIMS]; } bt_shape;
static inline bt_shape bt_shape1(int64_t a) { bt_shape s = {1, {a}}; return s; }
static inline bt_shape bt_shape2(int64_t a, int64_t b) { bt_shape s = {2, {a, b}}; return s; }
static inline bt_shape bt_shape3(int64_t a, int64_t b, int64_t c) { bt_shape s = {3, {a, b, c}}; return s; }
static inline bt_shape bt_shape4(int64_t a, int64_t b, int64_t c, int64_t d) { bt_shape s = {4, {a, b, c, d}}; return s; }
BTDEF bt_shape bt_shapev(int ndim, const int64_t *dims);

/* ---- storage and tensor ---- */
typedef struct bt_storage {
    void *data;
    size_t nbytes;
    bt_device device;
    int refcount;
    uint32_t version;        /* bumped by every in-place write to any view of it */
    int external;            /* 1: data not owned (bt_from_blob), never freed */
    float *colsum;           /* owned, GPU, may be NULL: the column sums of the data as [rows, colsum_cols], */
    int64_t colsum_cols;     /* left by the kernel that wrote it (a layernorm's gx, attention's gqkv); valid while */
    uint32_t colsum_version; /* version is still colsum_version (bt__cached_colsum) */
    int64_t halves;          /* > 0: its first `halves` f32 elements are held in two 16-bit halves, the
                                high ones (a bf16 array) in bytes [0, 2 halves), the low ones in
                                [2 halves, 4 halves) (bt_f32_split_, bt_optim.h); 0: plain */
    int lazy;                /* 1: data is taken at its first use (bt_data_ptr), zero-filled, and given
                                back by bt_lazy_drop; NULL data then reads as zeros (bt_zeros_lazy) */
    struct bt_storage *next_free;   /* the recycled-storage list */
} bt_storage;

struct bt_node;
struct bt_hook;
struct bt_tensor;
typedef int (*bt_rows_hook_fn)(struct bt_tensor *leaf, struct bt_tensor *idx, struct bt_tensor *rows, void *user);
typedef struct bt_tensor {
    bt_storage *storage;
    int64_t offset;                       /* in elements */
    int ndim;
    int64_t shape[BT_MAX_DIMS];
    int64_t stride[BT_MAX_DIMS];          /* in elements */
    bt_dtype dtype;
    int refcount;
    int requires_grad;
    struct bt_tensor *grad;               /* owned; accumulated by backward */
    struct bt_node *grad_fn;              /* owned reference; NULL for leaves */
    int output_index;                     /* which output of grad_fn this is */
    int retain_grad;                      /* non-leaf that keeps its .grad */
    const char *name;                     /* optional, for messages */
    int grad_pending;                     /* engine scratch: edges still to deliver (leaves) */
    struct bt_hook *hooks;                /* gradient-ready hooks (bt_autograd.h), owned */
    bt_rows_hook_fn rows_hook;            /* bt_set_rows_hook */
    void *rows_user;
    struct bt_tensor *next_free;          /* the recycled-tensor list */
} bt_tensor;

/* ---- devices, streams, events ----
   An op runs on its tensors' device: a device guard makes that the current CUDA device for the
   op and gives the caller's back after it, so nothing depends on which device the caller left
   current. It runs on that device's CURRENT stream: the top of the device's stream stack, else
   the device's own non-blocking stream. Streams and events are cudaStream_t / cudaEvent_t held
   as void *, so C code without CUDA headers can pass them around. Work on two streams is
   ordered only by events (bt_event_record, then bt_stream_wait_event), never by a device-wide
   sync. Memory allocated while a stream is current belongs to that stream's pool: a block freed
   there is reused only by later work on the same stream, so a tensor made on one stream and read
   on another must stay alive (referenced) until that read has finished. */
BTDEF int bt_cuda_device_count(void);                   /* 0 in a CPU build or with no GPU */
BTDEF const char *bt_device_name(bt_device dev);        /* "cpu", or the GPU's product name */
BTDEF void bt_device_memory(bt_device dev, size_t *free_bytes, size_t *total_bytes);   /* a GPU's, now */
BTDEF void *bt_stream_create(bt_device dev);            /* a new non-blocking stream on dev */
BTDEF void bt_stream_destroy(bt_device dev, void *stream);   /* waits for its work first */
BTDEF void bt_stream_push(bt_device dev, void *stream); /* dev's ops run on stream until the pop */
BTDEF void bt_stream_pop(bt_device dev);
BTDEF void *bt_stream_current(bt_device dev);           /* NULL for the CPU */
BTDEF void *bt_event_create(bt_device dev);
BTDEF void bt_event_destroy(void *event);
BTDEF void bt_event_record(void *event, void *stream);  /* completes when stream's work so far has */
BTDEF void bt_stream_wait_event(void *stream, void *event);  /* stream's later work waits for it */
BTDEF void bt_event_synchronize(void *event);           /* the host waits for it */
BTDEF int bt_event_done(void *event);                   /* 1 when complete, without waiting */
/* an event that also keeps the time it completed, for bt_event_elapsed_ms (timing costs a little:
   the plain bt_event_create is for ordering) */
BTDEF void *bt_event_create_timed(bt_device dev);
BTDEF float bt_event_elapsed_ms(void *start, void *end);   /* both timed and complete */
BTDEF void bt_synchronize(bt_device dev);               /* the host waits for dev's current stream */

/* ---- CUDA graphs: a device's work captured once, replayed with one launch ----
     bt_graph *g = bt_graph_capture_begin(dev);   // dev's current stream records instead of running
     ... ops on dev (memory from g's private pool, bt_alloc.h) ...
     bt_graph_capture_end(g);                     // instantiated; nothing has run yet
     bt_graph_launch(g);                          // on dev's current stream, as often as wanted
     bt_graph_free(g);                            // the graph, then its pool
   A replay reads and writes the addresses of the capture: inputs are copied into tensors made
   before it, results read from tensors made before it; the temporaries' blocks stay in the pool
   (free between replays: work on the same stream may borrow them, bt_graph_pool). Nothing in a
   capture may make the host wait for the device (bt_item, bt_to_host, bt_synchronize) or upload
   host data (bt_from_data, bt_to from the CPU): CUDA refuses it, and that error, like any error
   raised while capturing, abandons the capture (the stream runs work again, the pool is popped)
   and is raised again naming the capture. One capture at a time per process. */
typedef struct bt_graph bt_graph;
BTDEF bt_graph *bt_graph_capture_begin(bt_device dev);
BTDEF void bt_graph_capture_end(bt_graph *g);
BTDEF void bt_graph_launch(bt_graph *g);
BTDEF void bt_graph_free(bt_graph *g);                  /* NULL is a no-op */
BTDEF int bt_graph_pool(const bt_graph *g);             /* its private pool's id */

/* ---- lifetime and scopes ---- */
BTDEF bt_tensor *bt_retain(bt_tensor *t);
BTDEF void bt_release(bt_tensor *t);               /* NULL is a no-op */
BTDEF void bt_scope_begin(void);
BTDEF void bt_scope_end(void);
/* scopes open now: an error handler that longjmps out of ops closes those opened since it was set */
BTDEF int bt_scope_depth(void);
BTDEF bt_tensor *bt_keep(bt_tensor *t);            /* take t out of the innermost scope: caller owns it */
/* close the innermost scope but for t, which moves to the enclosing one: a model's layer in its own
   scope frees the layer's temporaries that no backward node saved (a cast's input, say) at the
   layer's end instead of at the step's. Outside any enclosing scope the caller owns t, as an op's result. */
BTDEF bt_tensor *bt_scope_return(bt_tensor *t);

/* ---- properties ---- */
static inline bt_device bt_device_of(const bt_tensor *t) { return t->storage->device; }
BTDEF int64_t bt_numel(const bt_tensor *t);
/* how many bias gradients took the column sums a backward pass left (a test and bench hook) */
BTDEF int64_t bt_grad_colsum_reuses(void);
BTDEF int bt_is_contiguous(const bt_tensor *t);
BTDEF void *bt_data_ptr(const bt_tensor *t);        /* storage data + offset, in bytes */
BTDEF bt_shape bt_shape_of(const bt_tensor *t);
BTDEF const char *bt_shape_str(const bt_tensor *t, char *buf, size_t n);  /* "[2, 3] f32 cpu" */

/* ---- creation ---- */
BTDEF bt_tensor *bt_empty(bt_shape shape, bt_dtype dt, bt_device dev);
BTDEF bt_tensor *bt_zeros(bt_shape shape, bt_dtype dt, bt_device dev);
BTDEF bt_tensor *bt_full(bt_shape shape, double value, bt_dtype dt, bt_device dev);
BTDEF bt_tensor *bt_scalar(double value, bt_dtype dt, bt_device dev);     /* 0-dim */
BTDEF bt_tensor *bt_from_data(const void *data, bt_shape shape, bt_dtype dt, bt_device dev);  /* copies host data */
BTDEF bt_tensor *bt_from_blob(void *data, bt_shape shape, bt_dtype dt, bt_device dev);        /* wraps, no copy */
BTDEF bt_tensor *bt_arange(int64_t n, bt_dtype dt, bt_device dev);
/* Philox fills; (seed, offset) names the random stream, see bt_philox_uniform. The same seed and
   offset give the same numbers on every device. */
BTDEF bt_tensor *bt_rand(bt_shape shape, bt_dtype dt, bt_device dev, uint64_t seed);
BTDEF bt_tensor *bt_randn(bt_shape shape, bt_dtype dt, bt_device dev, uint64_t seed);
BTDEF void bt_uniform_(bt_tensor *t, double lo, double hi, uint64_t seed, uint64_t offset);
BTDEF void bt_normal_(bt_tensor *t, double mean, double std, uint64_t seed, uint64_t offset);
BTDEF void bt_fill_(bt_tensor *t, double value);
BTDEF void bt_zero_(bt_tensor *t);
/* Zeros whose memory is taken only when something uses the data (bt_data_ptr: allocated and
   filled with zeros then, on the device's current stream; inside a CUDA graph's capture the fill is
   part of the graph) and given back by bt_lazy_drop, after which the tensor is zeros again and
   takes memory anew at its next use. A model's gradients made this way hold no memory from the
   optimizer step to the first gradient the next backward pass writes (bt_grads_lazy, bt_optim.h). */
BTDEF bt_tensor *bt_zeros_lazy(bt_shape shape, bt_dtype dt, bt_device dev);
BTDEF void bt_lazy_drop(bt_tensor *t);        /* t's storage must be lazy (bt_zeros_lazy) */
BTDEF int bt_lazy_held(const bt_tensor *t);   /* 1: t's storage holds memory now (or is not lazy) */

/* ---- copies, devices, dtypes ---- */
BTDEF bt_tensor *bt_contiguous(bt_tensor *t);       /* t itself (retained) when already contiguous */
BTDEF bt_tensor *bt_clone(bt_tensor *t);
BTDEF void bt_copy_(bt_tensor *dst, bt_tensor *src);  /* same shape, any dtypes/devices/strides */
BTDEF bt_tensor *bt_to(bt_tensor *t, bt_device dev);  /* differentiable */
BTDEF bt_tensor *bt_cast(bt_tensor *t, bt_dtype dt);  /* differentiable for float dtypes */
/* t as dtype cache->dtype, where cache already holds that cast of t (the caller keeps it current):
   no kernel runs; the backward casts the gradient back to t's dtype, as bt_cast's does. Mixed
   precision uses it to cast the weights once per optimizer step, not once per micro-batch. */
BTDEF bt_tensor *bt_cast_cached(bt_tensor *t, bt_tensor *cache);
BTDEF void bt_to_host(bt_tensor *t, void *dst, bt_dtype dt);   /* copy all elements, converted to dt */
/* The same without waiting: the copy runs on `stream` (NULL: t's current stream) after the work
   already queued on t's current stream, and `event` (may be NULL) is recorded behind it; read dst
   after the event. dst should be pinned (bt_alloc(bt_pinned_host(), ...)) for the copy to be
   asynchronous. t must stay unchanged until the event (a CPU t is copied at once). */
BTDEF void bt_to_host_async(bt_tensor *t, void *dst, bt_dtype dt, void *stream, void *event);
BTDEF double bt_item(bt_tensor *t);                 /* one-element tensor -> double (syncs a GPU) */
BTDEF double bt_get(bt_tensor *t, const int64_t *index);  /* one element, for tests */

/* ---- views (share storage; differentiable) ---- */
BTDEF bt_tensor *bt_view(bt_tensor *t, bt_shape shape);          /* one dim may be -1; needs compatible strides */
BTDEF bt_tensor *bt_reshape(bt_tensor *t, bt_shape shape);       /* view when possible, else a copy */
BTDEF bt_tensor *bt_transpose(bt_tensor *t, int d0, int d1);
BTDEF bt_tensor *bt_permute(bt_tensor *t, const int *perm);
BTDEF bt_tensor *bt_narrow(bt_tensor *t, int dim, int64_t start, int64_t len);
BTDEF bt_tensor *bt_select(bt_tensor *t, int dim, int64_t index);  /* drops dim */
BTDEF bt_tensor *bt_expand(bt_tensor *t, bt_shape shape);        /* broadcast size-1 dims (stride 0) */
BTDEF bt_tensor *bt_unsqueeze(bt_tensor *t, int dim);
BTDEF bt_tensor *bt_squeeze(bt_tensor *t, int dim);

/* ---- grad mode ---- */
BTDEF int bt_grad_enabled(void);
BTDEF int bt_set_grad_enabled(int on);              /* returns the previous mode */
BTDEF void bt_set_requires_grad(bt_tensor *t, int on);  /* leaves only */

/* ---- precision ---- */
BTDEF void bt_set_matmul_precision(bt_matmul_precision p);
BTDEF bt_matmul_precision bt_get_matmul_precision(void);
/* Deterministic GPU work: no float atomics (the embedding backward sorts instead) and no matmul
   autotuning (each shape's algorithm is cuBLASLt's first pick): two runs give the same bits. */
BTDEF void bt_set_deterministic(int on);
BTDEF int bt_get_deterministic(void);
/* Fusions, all on by default. A flag left out gives the plain path that fusion replaces (the same
   math, rounded differently): for tests that check both, and for measuring what a fusion gains.
   Returns the previous flags. */
#define BT_FUSE_EPILOGUES 1   /* bias, GELU, GELU gradient and residual add in cuBLASLt's matmul
                                 epilogues (bt_linear_add, bt_mlp_gelu; GPU) */
#define BT_FUSE_XENT      2   /* bt_linear_cross_entropy's loss and logit gradient in one pass (GPU) */
#define BT_FUSE_COLSUM    4   /* bias gradients from the column sums that a layernorm or attention
                                 backward leaves on its input gradient (GPU) */
#define BT_FUSE_NORM_FP8  8   /* a layernorm's or RMSNorm's output cast to FP8 by the norm's own kernel,
                                 never stored in bf16 (bt_layernorm_linear_fp8 and the like; GPU,
                                 delayed recipe): the same bits as without */
#define BT_FUSE_ALL       15
BTDEF int bt_set_fusions(int flags);
/* Activation recomputation (a saved-tensor policy: less memory for a little more work): with
   BT_RECOMPUTE_GELU the fused bt_mlp_gelu keeps the pre-activation h for its backward but not
   gelu(h), which its backward remakes with one elementwise kernel and frees after use (GPU path;
   the unfused ops save what they always did); bt_layernorm_mlp_gelu also remakes its layernorm's
   output there, and bt_mlp_gelu_fp8 the e4m3 gelu(h)^T (both devices). Returns the previous flags.
   The other flags are read by the models (gpt2.h), which wrap a part of each block in
   bt_checkpoint (bt_autograd.h): only the part's input is kept, the rest remade in the backward.
   ATTN: the attention sublayer (ln1, qkv, attention, projection, residual add); MLP: the MLP
   sublayer (ln2, fc, gelu, projection, residual add); BLOCK: the whole block (ATTN and MLP are
   then ignored). NORM: a layernorm's (or RMSNorm's) output feeding a linear is not kept but remade
   in the backward from its input (kept anyway) by the forward's own op, the same bits
   (bt_layernorm_linear, bt_rmsnorm_linear on every device; bt_layernorm_mlp_gelu's fused GPU path):
   B T C activations less for each, for one more normalisation pass (read x, write the output) in
   the backward. */
#define BT_RECOMPUTE_GELU  1
#define BT_RECOMPUTE_ATTN  2
#define BT_RECOMPUTE_MLP   4
#define BT_RECOMPUTE_BLOCK 8
#define BT_RECOMPUTE_NORM  16
BTDEF int bt_set_recompute(int flags);
BTDEF int bt_get_recompute(void);

/* ---- ops (differentiable unless noted) ---- */
/* elementwise, one function per line of BT_UNARY_OPS: bt_neg, bt_exp, bt_log, bt_sqrt, bt_rsqrt,
   bt_tanh, bt_sigmoid, bt_silu, bt_relu, bt_gelu (GPT-2's tanh form), bt_square, bt_recip */
#define BT__X(N, n, f, df) BTDEF bt_tensor *bt_##n(bt_tensor *x);
BT_UNARY_OPS(BT__X)
#undef BT__X
/* scalar: alpha * x + beta */
BTDEF bt_tensor *bt_affine(bt_tensor *x, double alpha, double beta);
BTDEF bt_tensor *bt_scale(bt_tensor *x, double alpha);
BTDEF bt_tensor *bt_add_scalar(bt_tensor *x, double beta);
/* broadcasting binary (numpy rules) */
BTDEF bt_tensor *bt_add(bt_tensor *a, bt_tensor *b);
BTDEF bt_tensor *bt_sub(bt_tensor *a, bt_tensor *b);
BTDEF bt_tensor *bt_mul(bt_tensor *a, bt_tensor *b);
BTDEF bt_tensor *bt_div(bt_tensor *a, bt_tensor *b);
/* in place, not differentiable through (bumps the version): a += alpha * b */
BTDEF void bt_add_(bt_tensor *a, bt_tensor *b, double alpha);
BTDEF void bt_mul_scalar_(bt_tensor *a, double alpha);
/* reductions over the listed dims (dims == NULL or ndims == 0: all); keepdim keeps them as size 1 */
BTDEF bt_tensor *bt_sum(bt_tensor *x, const int *dims, int ndims, int keepdim);
BTDEF bt_tensor *bt_mean(bt_tensor *x, const int *dims, int ndims, int keepdim);
BTDEF bt_tensor *bt_max(bt_tensor *x, int dim, int keepdim);     /* gradient to the (first) argmax */
BTDEF bt_tensor *bt_argmax(bt_tensor *x, int dim);               /* i32, not differentiable */
/* matmul: [.., M, K] x [.., K, N] -> [.., M, N], batch dims broadcast; 1-D b is a vector.
   transa/transb: use the transpose of the last two dims. */
BTDEF bt_tensor *bt_matmul(bt_tensor *a, bt_tensor *b);
BTDEF bt_tensor *bt_matmul_t(bt_tensor *a, bt_tensor *b, int transa, int transb);
/* y = x w^T + b: x [.., in], w [out, in] (PyTorch's layout), b [out] or NULL */
BTDEF bt_tensor *bt_linear(bt_tensor *x, bt_tensor *w, bt_tensor *b);
/* GPT-2's MLP, linear(gelu(linear(x, w1, b1)), w2, b2) with w1 [hid, in], w2 [out, hid], plus the
   residual r when r != NULL (r of the output's shape), as one op: on a GPU the bias and GELU ride
   the first GEMM's epilogue, r the second's C input, and the backward's GELU gradient and both
   bias gradients ride GEMMs too (BT_FUSE_EPILOGUES); elsewhere the ops it names. */
BTDEF bt_tensor *bt_mlp_gelu(bt_tensor *x, bt_tensor *w1, bt_tensor *b1, bt_tensor *w2, bt_tensor *b2, bt_tensor *r);
/* linear(layernorm(x, lnw, lnb, eps), w, b), and linear(rmsnorm(x, nw, eps), w, b); with
   BT_RECOMPUTE_NORM the normalised x is remade in the backward instead of kept (bt_set_recompute) */
BTDEF bt_tensor *bt_layernorm_linear(bt_tensor *x, bt_tensor *lnw, bt_tensor *lnb, double eps, bt_tensor *w, bt_tensor *b);
BTDEF bt_tensor *bt_rmsnorm_linear(bt_tensor *x, bt_tensor *nw, double eps, bt_tensor *w, bt_tensor *b);
/* bt_mlp_gelu(bt_layernorm(x, lnw, lnb, eps), w1, b1, w2, b2, r): the same values and gradients;
   with BT_RECOMPUTE_GELU on the fused path the MLP keeps not the layernorm's output but x (which
   the layernorm's own node keeps), and its backward remakes the output with the forward's kernel
   (the same bits): one B T C activation less a layer, for one more layernorm pass. */
BTDEF bt_tensor *bt_layernorm_mlp_gelu(bt_tensor *x, bt_tensor *lnw, bt_tensor *lnb, double eps, bt_tensor *w1, bt_tensor *b1,
                                       bt_tensor *w2, bt_tensor *b2, bt_tensor *r);
/* r + linear(x, w, b), r of the output's shape: the residual add rides the GEMM on a GPU (its C
   input with beta = 1) when fused epilogues are on; elsewhere bt_add(r, bt_linear(x, w, b)) */
BTDEF bt_tensor *bt_linear_add(bt_tensor *x, bt_tensor *w, bt_tensor *b, bt_tensor *r);
/* ---- FP8 linear layers: bt_linear_fp8 (the op in bt_nn.h, its kernels in bt_fp8.cuh) ----
   y = x w^T (+ b) with the matrix products in FP8 on a GPU of compute capability 8.9+ (Ada, Hopper),
   emulated on the CPU with the same bytes. x [.., K] and w [N, K] (f32, bf16 or f16 on a GPU; any
   float dtype on the CPU), b [N] or NULL, all of one dtype, which y [.., N] and the gradients have.
     forward   qx = e4m3(x / sx), qw = e4m3(w / sw); y = (sx sw) qx qw^T + b
     backward  qg = e5m2(gy / sg); dx = (sg sw) qg qw, dw = (sg sx) qg^T qx, db = sum of gy's rows
   The products accumulate in fp32 (on the CPU: f32 products of the decoded values, exact, in an f32
   sum) and are rounded once to y's dtype. The quantised x and w (their transposes, as the GPU's FP8
   layout wants them) are kept from the forward for the backward; master weights, the optimizer,
   norms, attention and the loss are untouched (their own ops, in bf16 or f32).
   Per-tensor scales, s = amax / fmax (fmax 448 for e4m3, 57344 for e5m2; bt_fp8_scale_of), and a
   cast q = fp8(t * (1 / s)): t's largest magnitude lands on fmax, and dequantising is q s. The
   reciprocal is one f32 division per tensor, the product one f32 multiply per element, then one
   RNE saturating rounding: the CPU and the kernels do exactly these operations, so bytes agree.
   Recipes (bt_fp8_opts.recipe), per tensor x, w and gy:
     BT_FP8_CURRENT  s from the tensor's own amax now: an amax pass, then the cast (two reads).
     BT_FP8_DELAYED  s = max(amax history) / fmax, the history of the last n steps' amaxes; the cast
                     measures the tensor's amax in the same pass (one read), and bt_fp8_update, once
                     per optimizer step, pushes the step's amax (the largest over its micro-batches)
                     into the history and computes the next scale. A tensor with no amax in its
                     history yet (its first casts, before the update that records them) scales as
                     CURRENT does.
   The state of one layer lives in one f32 tensor [3, 2 + n] on its device, a row per tensor
   (BT_FP8_X, BT_FP8_W, BT_FP8_G): [0] the amax of the casts since the last update, [1] the scale
   that DELAYED casts use now, [2 .. 2 + n) the amax history, newest first: a checkpoint saves it as
   it is (and sets `primed` again on load). `primed` lives on the host, so choosing a cast's path
   needs no device read. */
typedef enum { BT_FP8_CURRENT = 0, BT_FP8_DELAYED = 1 } bt_fp8_recipe;
enum { BT_FP8_X = 0, BT_FP8_W = 1, BT_FP8_G = 2, BT_FP8_ROLES = 3 };
/* what a cast quantises (bt_fp8.cuh's bt_k_fp8_cast_act): the tensor, GELU of it, it times GELU's
   derivative, SwiGLU of it, or SwiGLU's gradient */
typedef enum { BT_FP8_ACT_X = 0, BT_FP8_ACT_GELU = 1, BT_FP8_ACT_DGELU = 2, BT_FP8_ACT_SWIGLU = 3, BT_FP8_ACT_DSWIGLU = 4 } bt_fp8_act;
/* which FP8 products run in cuBLASLt's fast accumulation (the tensor cores' partial sums kept in their
   own precision, never promoted to fp32: faster, less exact), bits of bt_fp8_opts.fast_accum: the
   forward products y = x w^T (a sum over the layer's input width), and the block linears' input
   gradients dx = g w (a sum over its output width). The weight gradients (a sum over the batch's
   tokens) and the FP8 head's dx (over the vocabulary) always promote: their sums are many times
   longer (16K-262K tokens, 50K words at GPT-2's), and a head's dx in fast accumulation broke the loss
   curve's bar (docs/fp8.md). */
enum { BT_FP8_FAST_FWD = 1, BT_FP8_FAST_DX = 2 };
typedef struct {
    bt_fp8_recipe recipe;
    int history;        /* n, the amax history's length (1 to 1024; DELAYED) */
    int fast_accum;     /* BT_FP8_FAST_FWD | BT_FP8_FAST_DX bits (0: every product promotes). CPU: no effect. */
} bt_fp8_opts;
typedef struct {
    bt_fp8_opts opts;
    bt_tensor *buf;     /* f32 [3, 2 + history], owned (a reference) */
    unsigned primed;    /* bit r: tensor r's history holds an amax (an update followed one of its casts) */
    unsigned seen;      /* bit r: tensor r was cast since the last update */
} bt_fp8_state;
/* a default: CURRENT, history 16, fast_accum 0 */
BTDEF bt_fp8_opts bt_fp8_default_opts(void);
/* the floats a state holds: 3 (2 + history) */
BTDEF int64_t bt_fp8_state_floats(const bt_fp8_opts *o);
/* st's buffer on dev: buf (a contiguous f32 tensor of bt_fp8_state_floats elements on dev, e.g. a
   slice of a model's flat buffer; retained) or, when NULL, a new one. Either way it is set to the
   start: amaxes and histories 0, scales 1, primed and seen 0. o NULL: the default. */
BTDEF void bt_fp8_state_init(bt_fp8_state *st, const bt_fp8_opts *o, bt_device dev, bt_tensor *buf);
BTDEF void bt_fp8_state_free(bt_fp8_state *st);
/* after an optimizer step, for each tensor: history <- [amax, history[0 .. n-2]], amax <- 0, scale <-
   bt_fp8_scale_of(largest finite history entry); primed |= seen, seen <- 0. On st's device, no host
   wait. */
BTDEF void bt_fp8_update(bt_fp8_state *st);
/* A model's bank of n states, slices of one f32 buffer of n bt_fp8_state_floats (a checkpoint saves
   it whole): made on dev when *states is NULL, else reused (the same n and state size, or an error
   naming who); every state set to the start. _free releases them and NULLs both. */
BTDEF void bt_fp8_bank_reset(bt_fp8_state **states, bt_tensor **buf, int64_t n, const bt_fp8_opts *o, bt_device dev, const char *who);
BTDEF void bt_fp8_bank_free(bt_fp8_state **states, bt_tensor **buf, int64_t n);
/* bt_fp8_update of every state of a bank, in one kernel on a GPU (the same rows: a step of GPT-2
   124M updates 48 states, 48 launches of ~3 us otherwise) */
BTDEF void bt_fp8_bank_update(bt_fp8_state *states, bt_tensor *buf, int64_t n);
/* the op; st (not NULL) must outlive the graph that the call records */
BTDEF bt_tensor *bt_linear_fp8(bt_tensor *x, bt_tensor *w, bt_tensor *b, bt_fp8_state *st);
/* r + bt_linear_fp8(x, w, b, st), r of the output's shape and dtype: the add rides the product (one
   rounding of the f32 sum; on a GPU cuBLASLt's beta = 1 with r as its C), r's gradient is y's */
BTDEF bt_tensor *bt_linear_add_fp8(bt_tensor *x, bt_tensor *w, bt_tensor *b, bt_tensor *r, bt_fp8_state *st);
/* GPT-2's MLP with both linears in FP8: r + bt_linear_fp8(gelu(bt_linear_fp8(x, w1, b1, s1)), w2, b2,
   s2) (r may be NULL; b1, b2 may be NULL), the same values, states and gradients as that
   composition (but for b1's gradient, the same column sums added in another order). On a GPU gelu
   rides the second linear's cast (bt_k_fp8_cast_act: gelu(h) is never written in bf16) and its
   derivative the first linear's gradient cast, with b1's gradient from the same pass: per element
   of the hidden [.., hid] 16 bytes of bf16 traffic less in the forward and 24 in the backward.
   Kept for the backward: h (bf16, as bt_gelu keeps it) and the four quantised transposes. With
   BT_RECOMPUTE_GELU (bt_set_recompute) the e4m3 gelu(h)^T is not kept but remade from h in the
   backward, with the forward's scale: the same bytes, hid bytes a row less. */
BTDEF bt_tensor *bt_mlp_gelu_fp8(bt_tensor *x, bt_tensor *w1, bt_tensor *b1, bt_tensor *w2, bt_tensor *b2, bt_tensor *r,
                                 bt_fp8_state *s1, bt_fp8_state *s2);
/* bt_linear_fp8(bt_layernorm(x, lnw, lnb, eps), w, b, st), bt_mlp_gelu_fp8(bt_layernorm(x, lnw, lnb,
   eps), w1, b1, w2, b2, r, s1, s2), and the same with bt_rmsnorm(x, nw, eps) before bt_linear_fp8
   or bt_mlp_swiglu_fp8: the same values, states and gradients. On a GPU with the delayed recipe,
   once the input's history holds an amax (BT_FUSE_NORM_FP8; bt_k_layernorm_fp8, bt_k_rmsnorm_fp8),
   the norm's kernel writes the e4m3 bytes of its output itself and a byte transpose makes x^T: the
   output is never stored in bf16 (per element 3 bytes of traffic less: its write and the cast's
   read, against the transpose's byte read) and one node holds both ops (it keeps x and the norm's
   statistics, as the norm's node does). Otherwise, the composition. */
BTDEF bt_tensor *bt_layernorm_linear_fp8(bt_tensor *x, bt_tensor *lnw, bt_tensor *lnb, double eps, bt_tensor *w, bt_tensor *b,
                                         bt_fp8_state *st);
BTDEF bt_tensor *bt_layernorm_mlp_gelu_fp8(bt_tensor *x, bt_tensor *lnw, bt_tensor *lnb, double eps, bt_tensor *w1, bt_tensor *b1,
                                           bt_tensor *w2, bt_tensor *b2, bt_tensor *r, bt_fp8_state *s1, bt_fp8_state *s2);
BTDEF bt_tensor *bt_rmsnorm_linear_fp8(bt_tensor *x, bt_tensor *nw, double eps, bt_tensor *w, bt_tensor *b, bt_fp8_state *st);
BTDEF bt_tensor *bt_rmsnorm_mlp_swiglu_fp8(bt_tensor *x, bt_tensor *nw, double eps, bt_tensor *w13, bt_tensor *w2, bt_tensor *r,
                                           bt_fp8_state *s1, bt_fp8_state *s2);
/* A Llama's MLP with both linears in FP8: r + bt_linear_fp8(bt_swiglu(bt_linear_fp8(x, w13, NULL, s1)), w2,
   NULL, s2) (r may be NULL; w13 [2F, in]: gate's F rows, then up's), the same values, states and
   gradients as that composition. On a GPU SwiGLU rides the second linear's cast (its output is
   never written in bf16) and its gradient the first linear's gradient cast (nor is [ga | gu]):
   per element of the hidden [.., F] in bf16, 4 bytes of traffic less in the forward (y's write
   and read) and 8 in the backward ([ga | gu]'s). Kept for the backward: [gate | up] (bf16, as
   bt_swiglu keeps it) and the four quantised transposes. On a GPU F must be a multiple of 16. */
BTDEF bt_tensor *bt_mlp_swiglu_fp8(bt_tensor *x, bt_tensor *w13, bt_tensor *w2, bt_tensor *r, bt_fp8_state *s1, bt_fp8_state *s2);
/* bt_linear_cross_entropy with its three products in FP8 when a gradient is wanted (the head of a
   language model): the logits z = (sx sw) qx qw^T from e4m3 x and w, the logit gradient dz cast to
   e5m2 for dx = (sg sw) qg qw and dw = (sg sx) qg^T qx (summed over the chunks in fp32), each
   chunk's x and dz cast before its products with st's recipe (current: the chunk's own amax;
   delayed: the history's scale, the amax recorded being the largest over the chunks). A chunk holds
   2 bytes a logit more (the e5m2 dz and its transpose), so it has fewer rows. Without a gradient
   (grad mode off, validation) it is bt_linear_cross_entropy. On a GPU the rows of x, C and Vp must
   be multiples of 16. */
BTDEF bt_tensor *bt_linear_cross_entropy_fp8(bt_tensor *x, bt_tensor *w, bt_tensor *targets, int64_t V, int ignore_index,
                                             bt_fp8_state *st);
/* the scale of a tensor whose largest magnitude is amax, cast to a format whose largest finite value
   is fmax: amax / fmax in f32, at least FLT_MIN (so 1 / s stays finite); 1 when amax is 0, inf or
   NaN (nothing to scale, or nothing sensible: a NaN stays NaN in the cast, an inf saturates) */
static inline BT_HOSTDEV float bt_fp8_scale_of(float amax, float fmax) {
    if (!(amax > 0.f) || !(amax <= FLT_MAX)) return 1.f;
    float s = amax / fmax;
    return s < FLT_MIN ? FLT_MIN : s;
}
static inline BT_HOSTDEV float bt_fp8_max(bt_dtype fmt) { return fmt == BT_F8E5M2 ? BT_F8E5M2_MAX : BT_F8E4M3_MAX; }
/* the format of each tensor of the state: e4m3 for x and w, e5m2 for the gradient */
static inline BT_HOSTDEV bt_dtype bt_fp8_format(int role) { return role == BT_FP8_G ? BT_F8E5M2 : BT_F8E4M3; }
/* one element of a scaled cast: fp8(t * r), r = 1 / s */
static inline BT_HOSTDEV uint8_t bt_fp8_quantize(float t, float r, bt_dtype fmt) {
    float v = t * r;
    return fmt == BT_F8E5M2 ? bt__f32_to_f8e5m2(v) : bt__f32_to_f8e4m3(v);
}
static inline BT_HOSTDEV float bt_fp8_decode(uint8_t q, bt_dtype fmt) { return fmt == BT_F8E5M2 ? bt__f8e5m2_to_f32(q) : bt__f8e4m3_to_f32(q); }
/* |v|'s f32 bits: for non-negative floats the bits order as the values do (NaN above inf), so an
   amax is an unsigned max, exact in any order (the GPU's atomicMax on these bits) */
static inline BT_HOSTDEV uint32_t bt__abs_bits(float v) { uint32_t u; memcpy(&u, &v, 4); return u & 0x7fffffffu; }
/* bt_fp8_update on one row [amax, scale, history[n]] of a state whose format's largest value is fmax */
static inline BT_HOSTDEV void bt__fp8_roll(float *row, int n, float fmax) {
    for (int i = n - 1; i > 0; i--) row[2 + i] = row[1 + i];
    row[2] = row[0]; row[0] = 0.f;
    float m = 0.f;
    for (int i = 0; i < n; i++) if (row[2 + i] > m && row[2 + i] <= FLT_MAX) m = row[2 + i];   /* NaN and inf skipped */
    row[1] = bt_fp8_scale_of(m, fmax);
}
/* ---- a model's parameters from gathered units (fully sharded data parallelism) ----
   When a model's weights live as shards elsewhere (bt_parallel.h's bt_fsdp; trainer.h's --dp fsdp),
   its forward (gpt2.h, llama.h) fetches each unit's full parameters just before the unit runs. A
   unit is a span [lo[u], lo[u + 1]) of the model's flat fp32 buffer (offsets from its start);
   src->gather(ctx, u, dt) returns unit u's parameters: [lo[u + 1] - lo[u]] in dt, a tensor of the
   current scope; with grad mode on a leaf whose gradient hook takes its gradient away once final.
   Between bt_units_begin(s, u, dt) and bt_units_end(s, u), bt_units_param gives a leaf of unit u
   as a view of that tensor; _end drops the set's pointer only (the scope and the graph hold the
   tensor: its release is theirs). A block whose unit is gathered inside a bt_checkpoint region
   (bt_autograd.h) is gathered again by the backward's remake, whose leaf then takes the block's
   gradient: one block's full parameters alive at a time, for one more forward of the blocks.
   bt_units_run is that region without grad mode: fn(ctx, &x) in a scope of its own, so the unit it
   gathers goes at its end (bt_checkpoint without grad mode is fn in the caller's scope, which would
   keep every block's unit until the pass ends). */
typedef struct bt_units {
    bt_tensor *(*gather)(void *ctx, int unit, bt_dtype dt);
    void *ctx;
} bt_units;
typedef struct {
    const bt_units *src;   /* NULL: off (the model's own leaves) */
    const char *who;       /* the model, for errors */
    int n;                 /* units */
    int64_t *lo;           /* [n + 1]: unit u is elements [lo[u], lo[u + 1]) of the flat buffer */
    bt_tensor **w;         /* [n]: unit u while gathered (begin .. end), else NULL */
} bt_unit_set;
/* s takes its parameters from src (NULL: off again) in the n units bounded by lo[0 .. n]
   (increasing); who names the model in errors. The set starts zeroed (memset); _free ends it. */
BTDEF void bt_units_set(bt_unit_set *s, const bt_units *src, const int64_t *lo, int n, const char *who);
BTDEF void bt_units_free(bt_unit_set *s);
BTDEF void bt_units_begin(bt_unit_set *s, int u, bt_dtype dt);   /* unit u gathered (no-op when off) */
BTDEF void bt_units_end(bt_unit_set *s, int u);
/* leaf p, a view of the flat buffer flat, as a view of its gathered unit (an error naming the unit
   when it is not gathered) */
BTDEF bt_tensor *bt_units_param(const bt_unit_set *s, const bt_tensor *p, const bt_tensor *flat);
BTDEF bt_tensor *bt_units_run(bt_tensor *(*fn)(void *ctx, bt_tensor **in), void *ctx, bt_tensor *x);
/* softmax family, over the last dim */
BTDEF bt_tensor *bt_softmax(bt_tensor *x);
BTDEF bt_tensor *bt_log_softmax(bt_tensor *x);
/* layernorm over the last dim; w, b [C] (either may be NULL) */
BTDEF bt_tensor *bt_layernorm(bt_tensor *x, bt_tensor *w, bt_tensor *b, double eps);
/* Llama's RMSNorm over the last dim C: y = (x / sqrt(mean_j x_j^2 + eps)) w, w [C] or NULL. The
   statistic 1/rms per row is f32 (f64 for f64 x) and saved for the backward. Rounding, as
   transformers' LlamaRMSNorm (normalise in fp32, cast back, then multiply by the weight): the
   normalised x is rounded to x's dtype before the product with w, and the product rounded again
   (two roundings in bf16/f16; in f32 exactly transformers' fp32 arithmetic, up to its rsqrt's last
   bit). The backward is the exact gradient of the unrounded formula. GPU: f32, bf16, f16. */
BTDEF bt_tensor *bt_rmsnorm(bt_tensor *x, bt_tensor *w, double eps);
/* SwiGLU on a packed projection: x [.., 2F] holds the gate then the up projection (gate FIRST:
   x[..., :F] is gate, x[..., F:] is up) -> silu(gate) * up [.., F]. A Llama MLP is then
   linear(swiglu(linear(n, w13)), w2) with w13 [2F, C] = concat(gate_proj.weight, up_proj.weight)
   along dim 0 (stack transformers' two weights on import). Rounding as transformers' act_fn(gate)
   * up: silu(gate) rounded to x's dtype, then the product rounded. The backward writes both halves
   of the [.., 2F] gradient in one pass. (Under tensor parallelism shard gate and up alike and keep
   each shard's [gate_k | up_k] packed: a plain split of the packed rows is not gate-first per shard.) */
BTDEF bt_tensor *bt_swiglu(bt_tensor *x);
/* Rotary position embedding, transformers' Llama convention (rotate_half): x [B, T, H, D], D even,
   token t at position p = pos0 + t (pos0 > 0: generation after a KV cache of pos0 tokens). For
   i < D/2, with angle a = p inv_freq[i] and inv_freq[i] = theta^(-2i/D):
     y[i] = x[i] cos a - x[i + D/2] sin a,   y[i + D/2] = x[i + D/2] cos a + x[i] sin a.
   inv_freq and the angle are fp32 in every dtype, computed as LlamaRotaryEmbedding does
   (rope_type "default": 1 / theta^(float(2i) / D), then float(p) * inv_freq in fp32); cos and sin of
   that fp32 angle are evaluated in fp32 (GPU) or double (CPU; f64 on both), and the rotation runs in
   fp32 (f64 for f64) with one rounding to x's dtype. transformers instead rounds cos and sin to x's
   dtype and each product: in bf16 the two differ by about a bf16 ulp; in f32 they agree to fp32
   rounding. x may be any strided view (q or k as a narrow of a qkv buffer [B, T, H + 2 Hkv, D] or a
   select of [B, T, 3, H, D]): the CPU reads any strides, the GPU kernel any strides on B, T, H with
   D's stride 1 (other views are copied first). y is a new contiguous [B, T, H, D]. Backward: the
   rotation by -a. D <= 512. */
BTDEF bt_tensor *bt_rope(bt_tensor *x, double theta, int64_t pos0);
/* RoPE with frequency scaling. factor == 0: the default above. factor > 0: Llama 3.1's rope_type
   "llama3" (transformers' _compute_llama3_parameters): with wavelen = 2 pi / inv_freq, low = Lmax /
   low_freq_factor, high = Lmax / high_freq_factor (Lmax = original_max_position_embeddings): wavelen
   < high keeps inv_freq, wavelen > low divides it by factor, in between it is interpolated with
   s = (Lmax / wavelen - low_freq_factor) / (high_freq_factor - low_freq_factor):
   (1 - s) inv_freq / factor + s inv_freq. (Llama 3.1: theta 500000, factor 8, 1, 4, 8192.) */
typedef struct bt_rope_opts {
    double theta;
    double factor, low_freq_factor, high_freq_factor;
    int64_t original_max_position_embeddings;
} bt_rope_opts;
BTDEF bt_tensor *bt_rope_ex(bt_tensor *x, const bt_rope_opts *o, int64_t pos0);
/* the D/2 fp32 inverse frequencies bt_rope_ex uses (out[D/2]) */
BTDEF void bt_rope_inv_freq(const bt_rope_opts *o, int64_t D, float *out);
/* embedding: table [V, C], idx i32 of any shape -> [idx.shape.., C]; backward = scatter-add */
BTDEF bt_tensor *bt_embedding(bt_tensor *table, bt_tensor *idx);
/* An embedding's backward into leaf (its table, or the table cast from it) first offers the
   gradient as rows, leaf.grad[idx[i], :] += rows[i, :] (idx i32 [n], rows [n, C] contiguous, on
   the device's current stream), to fn; when fn returns 1 it has taken them and the lookup adds
   nothing to leaf.grad (bt_dist.h's data parallelism all-gathers the rows instead of all-reducing
   a whole [V, C] table). fn NULL removes the hook. */
BTDEF void bt_set_rows_hook(bt_tensor *leaf, bt_rows_hook_fn fn, void *user);
/* cross-entropy: logits [.., Vp] (only the first V columns are classes; V <= 0 means all),
   targets i32 [..]; mean over the rows whose target != ignore_index -> scalar f32 */
BTDEF bt_tensor *bt_cross_entropy(bt_tensor *logits, bt_tensor *targets, int64_t V, int ignore_index);
/* the same without the mean: each row's loss, logsumexp_{j<V} z - z_target, as targets' shape
   [..] in f32 (f64 for f64 logits), 0 on ignored rows (per-token losses: scoring a continuation,
   evaluating a multiple-choice ending) */
BTDEF bt_tensor *bt_cross_entropy_rows(bt_tensor *logits, bt_tensor *targets, int64_t V, int ignore_index);
/* cross_entropy(linear(x, w), targets, V, ignore_index) without the [rows, Vp] logits: x [.., C],
   w [Vp, C], the logits made a bounded chunk of rows at a time (bt_linear_cross_entropy_chunk sets
   the chunk's bytes, default 1 GiB, and returns the old value; 0 only asks) */
BTDEF bt_tensor *bt_linear_cross_entropy(bt_tensor *x, bt_tensor *w, bt_tensor *targets, int64_t V, int ignore_index);
BTDEF size_t bt_linear_cross_entropy_chunk(size_t bytes);
/* the additive mask of n new positions after len cached ones: [n, len + n], 0 where new position i
   may see key j (j <= len + i), -inf elsewhere, in dt on dev (KV-cache generation) */
BTDEF bt_tensor *bt_causal_mask(int n, int len, bt_dtype dt, bt_device dev);
/* causal self-attention: q [B, H, T, D], k, v [B, Hkv, T, D] -> softmax(q k^T / sqrt(D) + causal mask) v,
   [B, H, T, D]. Hkv = H: multi-head; Hkv dividing H: grouped-query attention, query head h attending
   with key/value head h / (H / Hkv), read in place (no repeated copy of K, V) */
BTDEF bt_tensor *bt_attention(bt_tensor *q, bt_tensor *k, bt_tensor *v);
/* the same on a packed projection: qkv [B, T, 3C] holds q, k, v side by side (C = H D each) ->
   [B, T, C]. q, k, v are read in place and their gradients written into one [B, T, 3C] buffer,
   so the projection stays one matmul in both directions. */
BTDEF bt_tensor *bt_attention_qkv(bt_tensor *qkv, int64_t H);
/* the same with Hkv key/value heads (dividing H) and RoPE: qkv [B, T, (H + 2 Hkv) D] holds H query
   heads, then Hkv key heads, then Hkv value heads (Llama's fused projection) -> [B, T, H D]. rope
   (NULL: none) rotates q and k at positions 0 .. T - 1 (bt_rope_ex's convention) into one packed
   buffer with v, which the kernels read in place and the backward keeps; the backward writes the
   gradients of q, k (each group's sum) and v into one [B, T, (H + 2 Hkv) D] buffer and rotates those
   of q and k back in place. bt_attention_qkv(qkv, H) is bt_attention_qkv_ex(qkv, H, H, NULL). */
BTDEF bt_tensor *bt_attention_qkv_ex(bt_tensor *qkv, int64_t H, int64_t Hkv, const bt_rope_opts *rope);
/* concat along dim; split into pieces of the given sizes (returns n tensors into out) */
BTDEF bt_tensor *bt_concat(bt_tensor **ts, int n, int dim);
BTDEF void bt_split(bt_tensor *x, const int64_t *sizes, int n, int dim, bt_tensor **out);

/* ============================================================================================
   The autograd node (data only; bt_autograd.h runs the graph). Declared here because every op
   records its node next to its forward code.
   ============================================================================================ */
#define BT_NODE_MAX_IN 8
#define BT_NODE_MAX_SAVED 12
typedef struct bt_node bt_node;
/* backward(node, gout, gin): gin[i] receives the gradient for input i, or stays NULL when the
   input needs none (node->next[i] is empty) or gets zero. Runs with grad mode off, inside a scope. */
typedef void (*bt_backward_fn)(bt_node *n, bt_tensor *gout, bt_tensor **gin);
struct bt_node {
    const char *op;
    bt_backward_fn backward;
    int n_in;
    struct { bt_node *node; bt_tensor *leaf; } next[BT_NODE_MAX_IN];   /* where gin[i] goes */
    bt_shape in_shape[BT_NODE_MAX_IN];
    bt_dtype in_dtype[BT_NODE_MAX_IN];
    bt_device in_device[BT_NODE_MAX_IN];
    bt_tensor *saved[BT_NODE_MAX_SAVED];
    uint32_t saved_version[BT_NODE_MAX_SAVED];
    int n_saved;
    double f[4];                  /* op parameters */
    int64_t i[BT_MAX_DIMS + 2];
    int refcount;                 /* grad_fn pointers of tensors + edges of consumer nodes */
    uint64_t seq;                 /* creation order: backward runs newest first among ready nodes */
    uint64_t pass;                /* engine scratch: the backward pass that last visited it */
    int consumed;                 /* the backward pass has run it */
    int deps;                     /* engine scratch */
    bt_tensor *grad;              /* engine scratch: accumulated gradient of the output */
    void *aux;                    /* host data of the op (bt_checkpoint's function and context), */
    void (*aux_free)(void *);     /* freed by aux_free (if set) with the saved tensors */
    bt_node *next_free;           /* the recycled-node list */
};
BTDEF void bt_node_release(bt_node *n);
/* A gradient-ready hook of a leaf (bt_autograd.h registers and fires them; a tensor owns its list) */
typedef void (*bt_grad_hook_fn)(bt_tensor *leaf, void *user);
typedef struct bt_hook { bt_grad_hook_fn fn; void *user; bt_tensor *leaf; struct bt_hook *next; } bt_hook;
BTDEF int bt__needs_grad(bt_tensor *t);
BTDEF bt_node *bt__record(const char *op, bt_backward_fn fn, bt_tensor *out, bt_tensor **inputs, int n_in);
BTDEF void bt__save(bt_node *n, bt_tensor *t);
/* a node without inputs for out (a gradient ends there; bt_checkpoint's boundary), whatever the grad mode */
BTDEF bt_node *bt__record_source(const char *op, bt_backward_fn fn, bt_tensor *out);
BTDEF bt_tensor *bt__register(bt_tensor *t);   /* hand a fresh (+1) tensor to the current scope */

#ifdef __cplusplus
}
#endif
#if defined(BT_CUDA) && !defined(BT_KERNELS_CUH)   /* nvcc: the kernels' declarations too (bt_k_*), for code
                                                      that calls them directly (unless it included them first) */
#include "bt_kernels.cuh"
#endif
#endif /* BT_TENSOR_H */


#ifdef BT_TENSOR_IMPLEMENTATION
#ifndef BT_TENSOR_IMPLEMENTATION_DONE
#define BT_TENSOR_IMPLEMENTATION_DONE

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <stdarg.h>

/* ============================================================================================
   1. the op list's CPU reference
   ============================================================================================ */
BTDEF double bt_unary_op_eval(bt_unary_op op, double x) {
    typedef double bt_op_t;
    switch (op) {
#define BT__X(N, n, f, df) case BT_UOP_##N: return f;
    BT_UNARY_OPS(BT__X)
#undef BT__X
    default: return NAN;
    }
}
BTDEF double bt_unary_op_grad(bt_unary_op op, double x) {
    typedef double bt_op_t;
    switch (op) {
#define BT__X(N, n, f, df) case BT_UOP_##N: { bt_op_t y = f; (void)y; return df; }
    BT_UNARY_OPS(BT__X)
#undef BT__X
    default: return NAN;
    }
}
BTDEF double bt_binary_op_eval(bt_binary_op op, double a, double b) {
    switch (op) {
#define BT__X(N, n, f, da, db) case BT_BOP_##N: return f;
    BT_BINARY_OPS(BT__X)
#undef BT__X
    default: return NAN;
    }
}

#ifdef BT_CUDA
#ifndef BT_KERNELS_IMPLEMENTATION
#define BT_KERNELS_IMPLEMENTATION
#endif
#include "bt_kernels.cuh"
#endif

/* ============================================================================================
   2. errors, devices and streams, storage, tensor lifetime, scopes
   ============================================================================================ */
/* the global state of this header, all resettable through its setters */
static struct {
    int grad_enabled;
    bt_matmul_precision precision;
    int deterministic;
    uint64_t node_seq;
    bt_tensor *free_tensors;      /* freelist: op results cost no malloc once warm */
    bt_node *free_nodes;
    bt_storage *free_storages;
    bt_tensor **scope_items; int scope_n, scope_cap;   /* registered tensors, stack */
    int *scope_marks; int scope_depth, scope_marks_cap;
    int fusions;                  /* BT_FUSE_* flags */
    int recompute;                /* BT_RECOMPUTE_* flags */
} bt__g = { 1, BT_MATMUL_FP32, 0, 0, NULL, NULL, NULL, NULL, 0, 0, NULL, 0, 0, BT_FUSE_ALL, 0 };

static void *bt__xmalloc(size_t n, const char *what) {
    void *p = malloc(n ? n : 1);
    if (!p) bt_error("out of host memory allocating %zu bytes for %s", n, what);
    return p;
}
static void *bt__xrealloc(void *p, size_t n, const char *what) {
    void *q = realloc(p, n ? n : 1);
    if (!q) bt_error("out of host memory growing %s to %zu bytes", what, n);
    return q;
}

BTDEF int bt_grad_enabled(void) { return bt__g.grad_enabled; }
BTDEF int bt_set_grad_enabled(int on) { int old = bt__g.grad_enabled; bt__g.grad_enabled = on != 0; return old; }
BTDEF void bt_set_matmul_precision(bt_matmul_precision p) { bt__g.precision = p; }
BTDEF bt_matmul_precision bt_get_matmul_precision(void) { return bt__g.precision; }
BTDEF int bt_set_fusions(int flags) { int old = bt__g.fusions; bt__g.fusions = flags & BT_FUSE_ALL; return old; }
static int bt__fused(int flag) { return (bt__g.fusions & flag) != 0; }
BTDEF int bt_set_recompute(int flags) { int old = bt__g.recompute; bt__g.recompute = flags; return old; }
BTDEF int bt_get_recompute(void) { return bt__g.recompute; }
BTDEF void bt_set_deterministic(int on) {
    bt__g.deterministic = on != 0;
#ifdef BT_CUDA
    if (on) bt_k_matmul_set_autotune(0);
#endif
}
BTDEF int bt_get_deterministic(void) { return bt__g.deterministic; }

/* ---- devices, streams, events ----
   A GPU branch runs inside BT__ON_GPU(dev, s) { ... }: the device guard makes dev the current
   CUDA device for the block and restores the caller's device after it, and s is dev's current
   stream. No return, goto or break out of the block. */
#ifdef BT_CUDA
#define BT__CUDA_CHECK(call, op) do { cudaError_t e__ = (call); \
    if (e__ != cudaSuccess) bt_error("%s: %s", op, cudaGetErrorString(e__)); } while (0)
typedef struct { int prev, dev, active; cudaStream_t stream; } bt__gpu_guard;
static bt__gpu_guard bt__gpu_enter(bt_device dev) {
    bt__gpu_guard g;
    g.dev = dev.index; g.active = 1;
    g.stream = bt_k_current_stream(g.dev);        /* checks the device and initializes it */
    BT__CUDA_CHECK(cudaGetDevice(&g.prev), "device guard");
    if (g.prev != g.dev) BT__CUDA_CHECK(cudaSetDevice(g.dev), "device guard");
    return g;
}
static void bt__gpu_leave(bt__gpu_guard *g) { if (g->prev != g->dev) BT__CUDA_CHECK(cudaSetDevice(g->prev), "device guard"); }
#define BT__ON_GPU(dev, s) \
    for (bt__gpu_guard bt__gg = bt__gpu_enter(dev); bt__gg.active; bt__gpu_leave(&bt__gg)) \
        for (cudaStream_t s = bt__gg.stream; bt__gg.active; bt__gg.active = 0)
#define BT__ON_DEVICE(dev) \
    for (bt__gpu_guard bt__gg = bt__gpu_enter(dev); bt__gg.active; bt__gpu_leave(&bt__gg), bt__gg.active = 0)
#endif

static void bt__need_gpu(bt_device dev, const char *fn) {
    if (dev.type != BT_GPU) bt_error("%s: %s is not a GPU", fn, dev.type == BT_CPU ? "the CPU" : "the device");
#ifdef BT_CUDA
    if (dev.index < 0 || dev.index >= bt_k_device_count())
        bt_error("%s: cuda:%d does not exist (%d GPUs visible)", fn, dev.index, bt_k_device_count());
#else
    bt_error("%s: cuda:%d requested, but this binary was built without CUDA (build with nvcc)", fn, dev.index);
#endif
}
BTDEF int bt_cuda_device_count(void) {
#ifdef BT_CUDA
    return bt_k_device_count();
#else
    return 0;
#endif
}
BTDEF void bt_device_memory(bt_device dev, size_t *free_bytes, size_t *total_bytes) {
    *free_bytes = *total_bytes = 0;
    bt__need_gpu(dev, "bt_device_memory");
#ifdef BT_CUDA
    BT__ON_DEVICE(dev) BT__CUDA_CHECK(cudaMemGetInfo(free_bytes, total_bytes), "bt_device_memory");
#endif
}
BTDEF const char *bt_device_name(bt_device dev) {
    if (dev.type == BT_CPU) return "cpu";
    bt__need_gpu(dev, "bt_device_name");
#ifdef BT_CUDA
    static char names[BT_MAX_GPUS][256];
    if (!names[dev.index][0]) {
        cudaDeviceProp prop;
        BT__CUDA_CHECK(cudaGetDeviceProperties(&prop, dev.index), "bt_device_name");
        snprintf(names[dev.index], sizeof names[dev.index], "%s", prop.name);
    }
    return names[dev.index];
#else
    return "?";
#endif
}
BTDEF void *bt_stream_current(bt_device dev) {
    if (dev.type == BT_CPU) return NULL;
    bt__need_gpu(dev, "bt_stream_current");
#ifdef BT_CUDA
    return (void *)bt_k_current_stream(dev.index);
#else
    return NULL;
#endif
}
BTDEF void *bt_stream_create(bt_device dev) {
    bt__need_gpu(dev, "bt_stream_create");
    void *s = NULL;
#ifdef BT_CUDA
    BT__ON_DEVICE(dev) BT__CUDA_CHECK(cudaStreamCreateWithFlags((cudaStream_t *)&s, cudaStreamNonBlocking), "bt_stream_create");
#endif
    return s;
}
BTDEF void bt_stream_destroy(bt_device dev, void *stream) {
    if (!stream) return;
    bt__need_gpu(dev, "bt_stream_destroy");
#ifdef BT_CUDA
    bt_k_forget_stream(dev.index, (cudaStream_t)stream);
    BT__CUDA_CHECK(cudaStreamSynchronize((cudaStream_t)stream), "bt_stream_destroy");
    BT__CUDA_CHECK(cudaStreamDestroy((cudaStream_t)stream), "bt_stream_destroy");
#endif
}
BTDEF void bt_stream_push(bt_device dev, void *stream) {
    bt__need_gpu(dev, "bt_stream_push");
#ifdef BT_CUDA
    bt_k_push_stream(dev.index, (cudaStream_t)stream);
#else
    (void)stream;
#endif
}
BTDEF void bt_stream_pop(bt_device dev) {
    bt__need_gpu(dev, "bt_stream_pop");
#ifdef BT_CUDA
    bt_k_pop_stream(dev.index);
#endif
}
static void *bt__event_new(bt_device dev, int timed, const char *who) {
    bt__need_gpu(dev, who);
    void *e = NULL;
#ifdef BT_CUDA
    BT__ON_DEVICE(dev) BT__CUDA_CHECK(cudaEventCreateWithFlags((cudaEvent_t *)&e, timed ? cudaEventDefault : cudaEventDisableTiming), who);
#else
    (void)timed;
#endif
    return e;
}
BTDEF void *bt_event_create(bt_device dev) { return bt__event_new(dev, 0, "bt_event_create"); }
BTDEF void *bt_event_create_timed(bt_device dev) { return bt__event_new(dev, 1, "bt_event_create_timed"); }
BTDEF float bt_event_elapsed_ms(void *start, void *end) {
    float ms = 0;
#ifdef BT_CUDA
    BT__CUDA_CHECK(cudaEventElapsedTime(&ms, (cudaEvent_t)start, (cudaEvent_t)end), "bt_event_elapsed_ms");
#else
    (void)start; (void)end; bt_error("bt_event_elapsed_ms: this binary was built without CUDA");
#endif
    return ms;
}
BTDEF void bt_event_destroy(void *event) {
#ifdef BT_CUDA
    if (event) BT__CUDA_CHECK(cudaEventDestroy((cudaEvent_t)event), "bt_event_destroy");
#else
    (void)event;
#endif
}
BTDEF void bt_event_record(void *event, void *stream) {
#ifdef BT_CUDA
    BT__CUDA_CHECK(cudaEventRecord((cudaEvent_t)event, (cudaStream_t)stream), "bt_event_record");
#else
    (void)event; (void)stream; bt_error("bt_event_record: this binary was built without CUDA");
#endif
}
BTDEF void bt_stream_wait_event(void *stream, void *event) {
#ifdef BT_CUDA
    BT__CUDA_CHECK(cudaStreamWaitEvent((cudaStream_t)stream, (cudaEvent_t)event, 0), "bt_stream_wait_event");
#else
    (void)event; (void)stream; bt_error("bt_stream_wait_event: this binary was built without CUDA");
#endif
}
BTDEF void bt_event_synchronize(void *event) {
#ifdef BT_CUDA
    BT__CUDA_CHECK(cudaEventSynchronize((cudaEvent_t)event), "bt_event_synchronize");
#else
    (void)event;
#endif
}
BTDEF int bt_event_done(void *event) {
#ifdef BT_CUDA
    cudaError_t e = cudaEventQuery((cudaEvent_t)event);
    if (e == cudaErrorNotReady) { (void)cudaGetLastError(); return 0; }
    BT__CUDA_CHECK(e, "bt_event_done");
#else
    (void)event;
#endif
    return 1;
}
BTDEF void bt_synchronize(bt_device dev) {
    if (dev.type == BT_CPU) return;
    bt__need_gpu(dev, "bt_synchronize");
#ifdef BT_CUDA
    bt_k_synchronize(dev.index);
#endif
}

/* ---- CUDA graphs ---- */
struct bt_graph {
    bt_device dev;
    int pool;                      /* the private pool of its temporaries */
    void *stream;                  /* the captured stream */
    void *exec;                    /* cudaGraphExec_t, once captured */
    bt_error_fn prev_fn;           /* the error handler outside the capture */
    void *prev_user;
};
#ifdef BT_CUDA
static int bt__graph_next_pool = 1 << 24;   /* ids above those a program picks by hand */
/* end a capture that failed: the stream leaves capture mode, the pool and the handler return */
static void bt__graph_abandon(bt_graph *g) {
    cudaGraph_t graph = NULL;
    BT__ON_DEVICE(g->dev) {
        if (cudaStreamEndCapture((cudaStream_t)g->stream, &graph) == cudaSuccess && graph) cudaGraphDestroy(graph);
        (void)cudaGetLastError();
    }
    bt_alloc_pool_pop(g->dev);
    bt_set_error_handler(g->prev_fn, g->prev_user);
}
static void bt__graph_on_error(const char *msg, void *user) {
    bt_graph *g = (bt_graph *)user;
    bt__graph_abandon(g);
    bt_error("%s (raised while capturing a CUDA graph on cuda:%d: the capture is abandoned; host syncs and host "
             "uploads cannot be captured)", msg, g->dev.index);
}
#endif
BTDEF bt_graph *bt_graph_capture_begin(bt_device dev) {
    bt__need_gpu(dev, "bt_graph_capture_begin");
    bt_graph *g = (bt_graph *)calloc(1, sizeof *g);
    if (!g) bt_error("bt_graph_capture_begin: out of host memory");
#ifdef BT_CUDA
    bt_error_fn fn; void *user;
    bt_get_error_handler(&fn, &user);
    if (fn == bt__graph_on_error) { free(g); bt_error("bt_graph_capture_begin: a capture is already under way on cuda:%d", ((bt_graph *)user)->dev.index); }
    g->dev = dev; g->pool = bt__graph_next_pool++; g->stream = bt_stream_current(dev);
    g->prev_fn = fn; g->prev_user = user;
    bt_alloc_pool_push(dev, g->pool);
    cudaError_t e = cudaSuccess;
    /* thread-local: another thread's unsafe call (a checkpoint writer's) does not break this capture */
    BT__ON_DEVICE(dev) e = cudaStreamBeginCapture((cudaStream_t)g->stream, cudaStreamCaptureModeThreadLocal);
    if (e != cudaSuccess) {
        bt_alloc_pool_pop(dev); bt_alloc_pool_release(dev, g->pool); free(g);
        bt_error("bt_graph_capture_begin on cuda:%d: %s", dev.index, cudaGetErrorString(e));
    }
    bt_set_error_handler(bt__graph_on_error, g);
#endif
    return g;
}
BTDEF void bt_graph_capture_end(bt_graph *g) {
    if (!g || g->exec) bt_error("bt_graph_capture_end: %s", g ? "this graph was already captured" : "graph is NULL");
#ifdef BT_CUDA
    cudaGraph_t graph = NULL;
    cudaError_t e = cudaSuccess;
    BT__ON_DEVICE(g->dev) {
        e = cudaStreamEndCapture((cudaStream_t)g->stream, &graph);
        /* each kernel keeps the priority of the stream it was captured from (a high-priority
           communication stream's kernels keep taking SMs first, as they do eagerly) */
        if (e == cudaSuccess) e = cudaGraphInstantiate((cudaGraphExec_t *)&g->exec, graph, cudaGraphInstantiateFlagUseNodePriority);
        if (graph) cudaGraphDestroy(graph);
        if (e != cudaSuccess) (void)cudaGetLastError();
    }
    bt_alloc_pool_pop(g->dev);
    bt_set_error_handler(g->prev_fn, g->prev_user);
    if (e != cudaSuccess) {
        g->exec = NULL;
        bt_error("bt_graph_capture_end on cuda:%d: %s (something in the capture was not capturable: a host sync, an upload, "
                 "or work on another stream that was not joined back)", g->dev.index, cudaGetErrorString(e));
    }
#endif
}
BTDEF void bt_graph_launch(bt_graph *g) {
    if (!g || !g->exec) bt_error("bt_graph_launch: %s", g ? "the graph was not captured (bt_graph_capture_end)" : "graph is NULL");
#ifdef BT_CUDA
    BT__ON_GPU(g->dev, s) BT__CUDA_CHECK(cudaGraphLaunch((cudaGraphExec_t)g->exec, s), "bt_graph_launch");
#endif
}
BTDEF void bt_graph_free(bt_graph *g) {
    if (!g) return;
#ifdef BT_CUDA
    /* a launch still running is freed when it completes; the pool's segments go back through
       cudaFree, which waits for the device */
    if (g->exec) BT__ON_DEVICE(g->dev) BT__CUDA_CHECK(cudaGraphExecDestroy((cudaGraphExec_t)g->exec), "bt_graph_free");
    bt_alloc_pool_release(g->dev, g->pool);
#endif
    free(g);
}
BTDEF int bt_graph_pool(const bt_graph *g) { return g ? g->pool : 0; }

static void *bt__stream_for(bt_device dev) { return bt_stream_current(dev); }
static void bt__check_device(bt_device dev, const char *op) {
    if (dev.type == BT_CPU && dev.index == 0) return;
    if (dev.type == BT_CPU) bt_error("%s: the pinned host pool holds bt_alloc blocks, not tensors (use bt_cpu())", op);
    bt__need_gpu(dev, op);
}

/* a storage record over data (refcount 1), recycled from the free list when one is there */
static bt_storage *bt__storage_struct(void *data, size_t nbytes, bt_device dev, int external) {
    bt_storage *s = bt__g.free_storages;
    if (s) bt__g.free_storages = s->next_free;
    else s = (bt_storage *)bt__xmalloc(sizeof *s, "a storage");
    memset(s, 0, sizeof *s);
    s->data = data; s->nbytes = nbytes; s->device = dev; s->refcount = 1; s->external = external;
    return s;
}
static bt_storage *bt__storage_new(size_t nbytes, bt_device dev) {
    bt__check_device(dev, "alloc");
    return bt__storage_struct(bt_alloc(dev, nbytes, bt__stream_for(dev)), nbytes, dev, 0);
}
static void bt__storage_release(bt_storage *s) {
    if (!s || --s->refcount > 0) return;
    if (!s->external) bt_free(s->data);
    if (s->colsum) bt_free(s->colsum);
    s->next_free = bt__g.free_storages; bt__g.free_storages = s;
}

static bt_tensor *bt__tensor_struct(void) {
    bt_tensor *t = bt__g.free_tensors;
    if (t) bt__g.free_tensors = t->next_free; else t = (bt_tensor *)bt__xmalloc(sizeof *t, "a tensor");
    memset(t, 0, sizeof *t);
    t->refcount = 1;
    return t;
}
static void bt__set_contiguous_strides(bt_tensor *t) {
    int64_t st = 1;
    for (int d = t->ndim - 1; d >= 0; d--) { t->stride[d] = st; st *= t->shape[d]; }
}
static void bt__check_shape(bt_shape s, const char *op) {
    if (s.ndim < 0 || s.ndim > BT_MAX_DIMS) bt_error("%s: %d dims (at most %d)", op, s.ndim, BT_MAX_DIMS);
    for (int d = 0; d < s.ndim; d++)
        if (s.d[d] < 0) bt_error("%s: negative size %lld in dim %d", op, (long long)s.d[d], d);
}
/* a fresh contiguous tensor (+1 reference, not registered in a scope) */
static bt_tensor *bt__new(bt_shape shape, bt_dtype dt, bt_device dev) {
    bt__check_shape(shape, "empty");
    if ((unsigned)dt >= BT_NDTYPES) bt_error("empty: unknown dtype %d", (int)dt);
    int64_t n = 1;
    for (int d = 0; d < shape.ndim; d++) n *= shape.d[d];
    bt_tensor *t = bt__tensor_struct();
    t->storage = bt__storage_new((size_t)n * bt_dtype_size(dt), dev);
    t->ndim = shape.ndim; t->dtype = dt;
    memcpy(t->shape, shape.d, sizeof(int64_t) * shape.ndim);
    bt__set_contiguous_strides(t);
    return t;
}
/* a new view struct over t's storage (+1, no graph node), same metadata */
static bt_tensor *bt__alias(bt_tensor *t) {
    bt_tensor *v = bt__tensor_struct();
    v->storage = t->storage; t->storage->refcount++;
    v->offset = t->offset; v->ndim = t->ndim; v->dtype = t->dtype;
    memcpy(v->shape, t->shape, sizeof v->shape); memcpy(v->stride, t->stride, sizeof v->stride);
    return v;
}
/* the same with its own geometry: ndim dims of shape and stride (elements) from element offset */
static bt_tensor *bt__view_raw(bt_tensor *t, int ndim, const int64_t *shape, const int64_t *stride, int64_t offset) {
    bt_tensor *v = bt__alias(t);
    v->ndim = ndim; v->offset = offset;
    memcpy(v->shape, shape, sizeof(int64_t) * (size_t)ndim); memcpy(v->stride, stride, sizeof(int64_t) * (size_t)ndim);
    return v;
}
/* a contiguous t read as `shape` (same elements, row-major) */
static bt_tensor *bt__view_dense(bt_tensor *t, bt_shape shape) {
    bt_tensor *v = bt__alias(t);
    v->ndim = shape.ndim;
    memcpy(v->shape, shape.d, sizeof(int64_t) * (size_t)shape.ndim);
    bt__set_contiguous_strides(v);
    return v;
}

static void bt__free_hooks(bt_tensor *t) {
    for (bt_hook *h = t->hooks, *nx; h; h = nx) { nx = h->next; free(h); }
    t->hooks = NULL;
}
BTDEF bt_tensor *bt_retain(bt_tensor *t) { if (t) t->refcount++; return t; }
BTDEF void bt_release(bt_tensor *t) {
    if (!t) return;
    if (t->refcount <= 0) bt_error("bt_release: tensor %p released more often than retained", (void *)t);
    if (--t->refcount > 0) return;
    bt_release(t->grad);
    if (t->grad_fn) bt_node_release(t->grad_fn);
    bt__storage_release(t->storage);
    bt__free_hooks(t);
    t->next_free = bt__g.free_tensors; bt__g.free_tensors = t;
}

BTDEF void bt_scope_begin(void) {
    if (bt__g.scope_depth == bt__g.scope_marks_cap) {
        bt__g.scope_marks_cap = bt__g.scope_marks_cap ? 2 * bt__g.scope_marks_cap : 16;
        bt__g.scope_marks = (int *)bt__xrealloc(bt__g.scope_marks, sizeof(int) * bt__g.scope_marks_cap, "the scope stack");
    }
    bt__g.scope_marks[bt__g.scope_depth++] = bt__g.scope_n;
}
BTDEF int bt_scope_depth(void) { return bt__g.scope_depth; }
BTDEF void bt_scope_end(void) {
    if (bt__g.scope_depth == 0) bt_error("bt_scope_end without bt_scope_begin");
    int mark = bt__g.scope_marks[--bt__g.scope_depth];
    while (bt__g.scope_n > mark) bt_release(bt__g.scope_items[--bt__g.scope_n]);
    if (bt__g.scope_depth == 0) {     /* outermost scope closed: give the stack's memory back */
        free(bt__g.scope_items); bt__g.scope_items = NULL; bt__g.scope_cap = 0;
        free(bt__g.scope_marks); bt__g.scope_marks = NULL; bt__g.scope_marks_cap = 0;
    }
}
BTDEF bt_tensor *bt__register(bt_tensor *t) {
    if (bt__g.scope_depth == 0) return t;
    if (bt__g.scope_n == bt__g.scope_cap) {
        bt__g.scope_cap = bt__g.scope_cap ? 2 * bt__g.scope_cap : 256;
        bt__g.scope_items = (bt_tensor **)bt__xrealloc(bt__g.scope_items, sizeof(bt_tensor *) * bt__g.scope_cap, "a scope");
    }
    bt__g.scope_items[bt__g.scope_n++] = t;
    return t;
}
BTDEF bt_tensor *bt_keep(bt_tensor *t) {
    int lo = bt__g.scope_depth ? bt__g.scope_marks[bt__g.scope_depth - 1] : 0;
    for (int i = bt__g.scope_n - 1; i >= lo; i--)
        if (bt__g.scope_items[i] == t) {
            memmove(bt__g.scope_items + i, bt__g.scope_items + i + 1, sizeof(bt_tensor *) * (bt__g.scope_n - i - 1));
            bt__g.scope_n--;
            return t;
        }
    bt_error("bt_keep: tensor %p is not in the innermost scope", (void *)t);
    return t;
}
BTDEF bt_tensor *bt_scope_return(bt_tensor *t) {
    if (bt__g.scope_depth < 1) bt_error("bt_scope_return: no scope open (tensor %p)", (void *)t);
    bt_keep(t);
    bt_scope_end();
    return bt__register(t);
}

BTDEF bt_shape bt_shapev(int ndim, const int64_t *dims) {
    bt_shape s; memset(&s, 0, sizeof s);
    if (ndim < 0 || ndim > BT_MAX_DIMS) bt_error("bt_shapev: %d dims (at most %d)", ndim, BT_MAX_DIMS);
    s.ndim = ndim;
    for (int i = 0; i < ndim; i++) s.d[i] = dims[i];
    return s;
}
BTDEF int64_t bt_numel(const bt_tensor *t) {
    int64_t n = 1;
    for (int d = 0; d < t->ndim; d++) n *= t->shape[d];
    return n;
}
BTDEF int bt_is_contiguous(const bt_tensor *t) {
    int64_t st = 1;
    for (int d = t->ndim - 1; d >= 0; d--) {
        if (t->shape[d] != 1 && t->stride[d] != st) return 0;
        st *= t->shape[d];
    }
    return 1;
}
/* a lazy storage's memory, taken at its first use: nbytes from the device's allocator, zeros */
static void bt__lazy_take(bt_storage *s) {
    s->data = bt_alloc(s->device, s->nbytes, bt__stream_for(s->device));
    if (s->device.type == BT_GPU) {
#ifdef BT_CUDA
        BT__ON_GPU(s->device, stream) BT__CUDA_CHECK(cudaMemsetAsync(s->data, 0, s->nbytes, stream), "lazy zeros");
#endif
    } else if (s->nbytes) memset(s->data, 0, s->nbytes);
}
static inline void *bt__storage_data(bt_storage *s) {
    if (!s->data && s->lazy) bt__lazy_take(s);
    return s->data;
}
BTDEF void *bt_data_ptr(const bt_tensor *t) {
    return (char *)bt__storage_data(t->storage) + t->offset * (int64_t)bt_dtype_size(t->dtype);
}
BTDEF bt_shape bt_shape_of(const bt_tensor *t) { return bt_shapev(t->ndim, t->shape); }
BTDEF const char *bt_shape_str(const bt_tensor *t, char *buf, size_t n) {
    size_t k = 0;
    k += (size_t)snprintf(buf + k, n - k, "[");
    for (int d = 0; d < t->ndim && k < n; d++) k += (size_t)snprintf(buf + k, n - k, d ? ", %lld" : "%lld", (long long)t->shape[d]);
    if (k < n) {
        bt_device dev = bt_device_of(t);
        if (dev.type == BT_CPU) snprintf(buf + k, n - k, "] %s cpu", bt_dtype_name(t->dtype));
        else snprintf(buf + k, n - k, "] %s cuda:%d", bt_dtype_name(t->dtype), dev.index);
    }
    return buf;
}
/* "[2, 3] f32 cpu" of a tensor, in a rotating static buffer: for error messages only */
static const char *bt__s(const bt_tensor *t) {
    static char bufs[4][160]; static int k;
    k = (k + 1) & 3;
    if (!t) return "(null)";
    return bt_shape_str(t, bufs[k], sizeof bufs[k]);
}
static const char *bt__shape_s(bt_shape s) {
    static char bufs[4][128]; static int k;
    k = (k + 1) & 3;
    size_t n = 0; char *b = bufs[k];
    n += (size_t)snprintf(b + n, 128 - n, "[");
    for (int d = 0; d < s.ndim && n < 128; d++) n += (size_t)snprintf(b + n, 128 - n, d ? ", %lld" : "%lld", (long long)s.d[d]);
    if (n < 128) snprintf(b + n, 128 - n, "]");
    return b;
}
static void bt__need(bt_tensor *t, const char *op, const char *arg) {
    if (!t) bt_error("%s: %s is NULL", op, arg);
    if (t->refcount <= 0) bt_error("%s: %s was already released", op, arg);
}
/* an f32 tensor in the part of its storage held in two halves (bt_optim.h) has no f32 bytes to read
   or write there: the ops that move data refuse it */
static void bt__no_halves(const bt_tensor *t, const char *op) {
    const bt_storage *s = t->storage;
    if (s && s->halves && t->dtype == BT_F32 && t->offset < s->halves)
        bt_error("%s: %s is f32 held in two halves (bt_adamw_split, bt_f32_split_): join them first (bt_f32_join_)", op, bt__s((bt_tensor *)t));
}
static void bt__need_float(bt_tensor *t, const char *op, const char *arg) {
    bt__need(t, op, arg);
    if (!bt_dtype_is_float(t->dtype)) bt_error("%s: %s must be a float tensor, got %s", op, arg, bt__s(t));
}
static void bt__same_device(bt_tensor *a, bt_tensor *b, const char *op) {
    if (!bt_device_eq(bt_device_of(a), bt_device_of(b)))
        bt_error("%s: tensors on different devices: %s and %s", op, bt__s(a), bt__s(b));
}
static void bt__same_dtype(bt_tensor *a, bt_tensor *b, const char *op) {
    if (a->dtype != b->dtype) bt_error("%s: dtypes differ: %s and %s", op, bt__s(a), bt__s(b));
}
static int bt__norm_dim(int dim, int ndim, const char *op) {
    int d = dim < 0 ? dim + ndim : dim;
    if (d < 0 || d >= ndim) bt_error("%s: dim %d out of range for %d dims", op, dim, ndim);
    return d;
}
static int bt__is_gpu(const bt_tensor *t) { return bt_device_of(t).type == BT_GPU; }
/* CPU loops go parallel past this many elements */
#define BT__PAR_MIN 32768

/* ============================================================================================
   3. creation, random numbers, copies, device moves
   ============================================================================================ */
/* storage offset of element `lin` (row-major linear index) of a strided view */
static inline int64_t bt__offset_of(const int64_t *shape, const int64_t *stride, int ndim, int64_t lin) {
    int64_t off = 0;
    for (int d = ndim - 1; d >= 0; d--) { int64_t q = lin / shape[d]; off += (lin - q * shape[d]) * stride[d]; lin = q; }
    return off;
}

BTDEF bt_tensor *bt_empty(bt_shape shape, bt_dtype dt, bt_device dev) { return bt__register(bt__new(shape, dt, dev)); }

BTDEF void bt_fill_(bt_tensor *t, double value) {
    bt__need(t, "fill_", "t");
    t->storage->version++;
    if (!bt_is_contiguous(t)) {     /* a strided view: fill a contiguous temp, copy it in */
        bt_tensor *tmp = bt__new(bt_shape_of(t), t->dtype, bt_device_of(t));
        bt_fill_(tmp, value); bt_copy_(t, tmp); bt_release(tmp);
        return;
    }
    int64_t n = bt_numel(t); void *p = bt_data_ptr(t); bt_dtype dt = t->dtype;
    if (bt__is_gpu(t)) {
#ifdef BT_CUDA
        BT__ON_GPU(bt_device_of(t), stream) bt_k_fill(dt, p, value, n, stream);
#endif
        return;
    }
    if (dt == BT_F32) { float v = (float)value, *q = (float *)p;
        #pragma omp parallel for if (n > BT__PAR_MIN)
        for (int64_t i = 0; i < n; i++) q[i] = v;
        return; }
    #pragma omp parallel for if (n > BT__PAR_MIN)
    for (int64_t i = 0; i < n; i++) bt__st(p, dt, i, value);
}
BTDEF void bt_zero_(bt_tensor *t) { bt_fill_(t, 0.0); }
BTDEF bt_tensor *bt_zeros(bt_shape shape, bt_dtype dt, bt_device dev) {
    bt_tensor *t = bt__new(shape, dt, dev); bt_fill_(t, 0.0); return bt__register(t);
}
BTDEF bt_tensor *bt_zeros_lazy(bt_shape shape, bt_dtype dt, bt_device dev) {
    bt__check_shape(shape, "zeros_lazy");
    if ((unsigned)dt >= BT_NDTYPES) bt_error("zeros_lazy: unknown dtype %d", (int)dt);
    bt__check_device(dev, "zeros_lazy");
    int64_t n = 1;
    for (int d = 0; d < shape.ndim; d++) n *= shape.d[d];
    bt_tensor *t = bt__tensor_struct();
    t->storage = bt__storage_struct(NULL, (size_t)n * bt_dtype_size(dt), dev, 0);
    t->storage->lazy = 1;
    t->ndim = shape.ndim; t->dtype = dt;
    memcpy(t->shape, shape.d, sizeof(int64_t) * shape.ndim);
    bt__set_contiguous_strides(t);
    return bt__register(t);
}
BTDEF void bt_lazy_drop(bt_tensor *t) {
    bt__need(t, "lazy_drop", "t");
    bt_storage *s = t->storage;
    if (!s->lazy) bt_error("lazy_drop: %s is not a lazy tensor (bt_zeros_lazy)", bt__s(t));
    if (!s->data) return;
    bt_free(s->data);   /* stream-ordered: work already queued on the stream still reads it first */
    s->data = NULL;
    s->version++;       /* zeros again */
}
BTDEF int bt_lazy_held(const bt_tensor *t) { return t && (!t->storage->lazy || t->storage->data != NULL); }
BTDEF bt_tensor *bt_full(bt_shape shape, double value, bt_dtype dt, bt_device dev) {
    bt_tensor *t = bt__new(shape, dt, dev); bt_fill_(t, value); return bt__register(t);
}
BTDEF bt_tensor *bt_scalar(double value, bt_dtype dt, bt_device dev) {
    bt_shape s; memset(&s, 0, sizeof s); return bt_full(s, value, dt, dev);
}
#ifdef BT_CUDA
/* A copy from pageable host memory makes the host wait for the stream, which would stall the
   host behind the GPU at every batch upload. Small uploads go through a ring of pinned staging
   buffers per device instead (from bt_alloc's pinned pool): the host copies into a free slot and
   returns at once; a slot is reused only after the event recorded behind its copy has passed
   (with 4 slots, in practice never waited). */
#define BT__STAGE_SLOTS 4
#define BT__STAGE_MAX ((size_t)64 << 20)
typedef struct { void *buf; size_t cap; cudaEvent_t done; int used; } bt__stage_slot;
static struct { bt__stage_slot slot[BT__STAGE_SLOTS]; int next; } bt__stage[BT_MAX_GPUS];
/* the caller holds the device guard of dev (the event is made on the current device) */
static void bt__upload_staged(void *dst, int dev, const void *src, size_t nbytes, cudaStream_t stream) {
    bt__stage_slot *sl = &bt__stage[dev].slot[bt__stage[dev].next];
    bt__stage[dev].next = (bt__stage[dev].next + 1) % BT__STAGE_SLOTS;
    if (sl->used) BT__CUDA_CHECK(cudaEventSynchronize(sl->done), "upload to GPU");
    else BT__CUDA_CHECK(cudaEventCreateWithFlags(&sl->done, cudaEventDisableTiming), "upload to GPU");
    if (sl->cap < nbytes) {
        bt_free(sl->buf);
        sl->cap = nbytes < 65536 ? 65536 : nbytes;
        sl->buf = bt_alloc(bt_pinned_host(), sl->cap, NULL);
    }
    memcpy(sl->buf, src, nbytes);
    BT__CUDA_CHECK(cudaMemcpyAsync(dst, sl->buf, nbytes, cudaMemcpyHostToDevice, stream), "upload to GPU");
    BT__CUDA_CHECK(cudaEventRecord(sl->done, stream), "upload to GPU");
    sl->used = 1;
}
#endif
static void bt__upload(void *dst, bt_device dev, const void *src, size_t nbytes) {
    if (dev.type == BT_CPU) { if (nbytes) memcpy(dst, src, nbytes); return; }
#ifdef BT_CUDA
    if (nbytes == 0) return;
    BT__ON_GPU(dev, stream) {
        if (nbytes <= BT__STAGE_MAX) bt__upload_staged(dst, dev.index, src, nbytes, stream);
        else BT__CUDA_CHECK(cudaMemcpyAsync(dst, src, nbytes, cudaMemcpyHostToDevice, stream), "upload to GPU");
    }
#else
    (void)dst; (void)src; (void)nbytes;
#endif
}
/* the host waits for the copy (and for the work queued before it on dev's current stream) */
static void bt__download(void *dst, const void *src, bt_device dev, size_t nbytes) {
    if (dev.type == BT_CPU) { if (nbytes) memcpy(dst, src, nbytes); return; }
#ifdef BT_CUDA
    BT__ON_GPU(dev, stream) {
        BT__CUDA_CHECK(cudaMemcpyAsync(dst, src, nbytes, cudaMemcpyDeviceToHost, stream), "download from GPU");
        BT__CUDA_CHECK(cudaStreamSynchronize(stream), "download from GPU");
    }
#else
    (void)dst; (void)src; (void)nbytes;
#endif
}
BTDEF bt_tensor *bt_from_data(const void *data, bt_shape shape, bt_dtype dt, bt_device dev) {
    if (!data) bt_error("from_data: data is NULL");
    bt_tensor *t = bt__new(shape, dt, dev);
    bt__upload(bt_data_ptr(t), dev, data, (size_t)bt_numel(t) * bt_dtype_size(dt));
    return bt__register(t);
}
BTDEF bt_tensor *bt_from_blob(void *data, bt_shape shape, bt_dtype dt, bt_device dev) {
    if (!data) bt_error("from_blob: data is NULL");
    bt__check_shape(shape, "from_blob");
    bt__check_device(dev, "from_blob");
    bt_tensor *t = bt__tensor_struct();
    t->ndim = shape.ndim; t->dtype = dt;
    memcpy(t->shape, shape.d, sizeof(int64_t) * shape.ndim);
    bt__set_contiguous_strides(t);
    t->storage = bt__storage_struct(data, (size_t)bt_numel(t) * bt_dtype_size(dt), dev, 1);
    return bt__register(t);
}
BTDEF bt_tensor *bt_arange(int64_t n, bt_dtype dt, bt_device dev) {
    bt_tensor *t = bt__new(bt_shape1(n), dt, bt_cpu());
    for (int64_t i = 0; i < n; i++) bt__st(bt_data_ptr(t), dt, i, (double)i);
    if (dev.type == BT_CPU) return bt__register(t);
    bt_tensor *g = bt_to(t, dev); bt_release(t);
    return g;
}

/* fill with (seed, offset + i) of a Philox stream: uniform in [lo, hi) or normal(mean, std) */
static void bt__random_fill(bt_tensor *t, int normal, double a, double b, uint64_t seed, uint64_t offset) {
    bt__need_float(t, normal ? "normal_" : "uniform_", "t");
    if (!bt_is_contiguous(t)) {
        bt_tensor *tmp = bt__new(bt_shape_of(t), t->dtype, bt_device_of(t));
        bt__random_fill(tmp, normal, a, b, seed, offset); bt_copy_(t, tmp); bt_release(tmp);
        return;
    }
    t->storage->version++;
    int64_t n = bt_numel(t); void *p = bt_data_ptr(t); bt_dtype dt = t->dtype;
    if (bt__is_gpu(t)) {
#ifdef BT_CUDA
        BT__ON_GPU(bt_device_of(t), stream) {
            if (normal) bt_k_normal(dt, p, n, seed, offset, a, b, stream);
            else bt_k_uniform(dt, p, n, seed, offset, a, b, stream);
        }
#endif
        return;
    }
    #pragma omp parallel for if (n > 4096)
    for (int64_t i = 0; i < n; i++) {
        double r = normal ? a + b * bt_philox_normal(seed, offset + (uint64_t)i)
                          : a + (b - a) * bt_philox_uniform(seed, offset + (uint64_t)i);
        bt__st(p, dt, i, r);
    }
}
BTDEF void bt_uniform_(bt_tensor *t, double lo, double hi, uint64_t seed, uint64_t offset) { bt__random_fill(t, 0, lo, hi, seed, offset); }
BTDEF void bt_normal_(bt_tensor *t, double mean, double std, uint64_t seed, uint64_t offset) { bt__random_fill(t, 1, mean, std, seed, offset); }
BTDEF bt_tensor *bt_rand(bt_shape shape, bt_dtype dt, bt_device dev, uint64_t seed) {
    bt_tensor *t = bt__new(shape, dt, dev); bt__random_fill(t, 0, 0.0, 1.0, seed, 0); return bt__register(t);
}
BTDEF bt_tensor *bt_randn(bt_shape shape, bt_dtype dt, bt_device dev, uint64_t seed) {
    bt_tensor *t = bt__new(shape, dt, dev); bt__random_fill(t, 1, 0.0, 1.0, seed, 0); return bt__register(t);
}

/* dst = src elementwise on one device, any strides on either side, dtype converted */
static void bt__copy_same_device(bt_tensor *dst, bt_tensor *src) {
    int64_t n = bt_numel(dst);
    if (n == 0) return;
    if (bt__is_gpu(dst)) {
#ifdef BT_CUDA
        BT__ON_GPU(bt_device_of(dst), stream) {
            if (bt_is_contiguous(dst))
                bt_k_copy_strided(dst->dtype, bt_data_ptr(dst), src->dtype, bt_data_ptr(src), src->ndim, src->shape,
                                  src->stride, stream);
            else
                bt_k_copy_general(dst->dtype, bt_data_ptr(dst), dst->stride, src->dtype, bt_data_ptr(src), src->stride,
                                  src->ndim, src->shape, stream);
        }
#endif
        return;
    }
    void *d = bt_data_ptr(dst); const void *s = bt_data_ptr(src);
    int dc = bt_is_contiguous(dst), sc = bt_is_contiguous(src);
    if (dc && sc && dst->dtype == src->dtype) { memcpy(d, s, (size_t)n * bt_dtype_size(dst->dtype)); return; }
    #pragma omp parallel for if (n > BT__PAR_MIN)
    for (int64_t i = 0; i < n; i++) {
        int64_t so = sc ? i : bt__offset_of(src->shape, src->stride, src->ndim, i);
        int64_t doff = dc ? i : bt__offset_of(dst->shape, dst->stride, dst->ndim, i);
        bt__st(d, dst->dtype, doff, bt__ld(s, src->dtype, so));
    }
}
#ifdef BT_CUDA
/* dst (on one GPU) = src (on another), both contiguous: the copy runs on dst's current stream
   after the work queued on src's, and src's stream then waits for it, so that src's memory is
   not reused by src's stream before the copy has read it. */
static void bt__copy_peer(bt_tensor *dst, bt_tensor *src, size_t nbytes) {
    bt_device dd = bt_device_of(dst), sd = bt_device_of(src);
    void *src_done = bt_event_create(sd), *copied = bt_event_create(dd);
    bt_event_record(src_done, bt_stream_current(sd));
    bt_stream_wait_event(bt_stream_current(dd), src_done);
    BT__ON_GPU(dd, stream) {
        BT__CUDA_CHECK(cudaMemcpyPeerAsync(bt_data_ptr(dst), dd.index, bt_data_ptr(src), sd.index, nbytes, stream), "copy_ between GPUs");
        BT__CUDA_CHECK(cudaEventRecord((cudaEvent_t)copied, stream), "copy_ between GPUs");
    }
    bt_stream_wait_event(bt_stream_current(sd), copied);
    bt_event_destroy(src_done); bt_event_destroy(copied);   /* destroyed once they complete */
}
#endif
BTDEF void bt_copy_(bt_tensor *dst, bt_tensor *src) {
    bt__need(dst, "copy_", "dst"); bt__need(src, "copy_", "src");
    if (dst->ndim != src->ndim || memcmp(dst->shape, src->shape, sizeof(int64_t) * dst->ndim))
        bt_error("copy_: shapes differ: dst %s, src %s", bt__s(dst), bt__s(src));
    bt__no_halves(dst, "copy_"); bt__no_halves(src, "copy_");
    dst->storage->version++;
    if (bt_device_eq(bt_device_of(dst), bt_device_of(src))) { bt__copy_same_device(dst, src); return; }
    /* across devices: make src one contiguous block, move the bytes, then convert on dst's side */
    bt_tensor *cs = bt_is_contiguous(src) ? bt_retain(src) : bt__new(bt_shape_of(src), src->dtype, bt_device_of(src));
    if (cs != src) bt__copy_same_device(cs, src);
    bt_tensor *moved = bt__new(bt_shape_of(src), src->dtype, bt_device_of(dst));
    size_t nbytes = (size_t)bt_numel(src) * bt_dtype_size(src->dtype);
    if (bt__is_gpu(src) && bt__is_gpu(dst)) {
#ifdef BT_CUDA
        bt__copy_peer(moved, cs, nbytes);
#endif
    } else if (bt__is_gpu(src)) bt__download(bt_data_ptr(moved), bt_data_ptr(cs), bt_device_of(src), nbytes);
    else bt__upload(bt_data_ptr(moved), bt_device_of(dst), bt_data_ptr(cs), nbytes);
    bt__copy_same_device(dst, moved);
    bt_release(moved); bt_release(cs);
}
/* contiguous copy of t with dtype dt on t's device (+1) */
static bt_tensor *bt__contig_as(bt_tensor *t, bt_dtype dt) {
    bt__no_halves(t, "copy");
    if (t->dtype == dt && bt_is_contiguous(t)) return bt_retain(t);
    bt_tensor *c = bt__new(bt_shape_of(t), dt, bt_device_of(t));
    bt__copy_same_device(c, t);
    return c;
}
static bt_tensor *bt__contig(bt_tensor *t) { return bt__contig_as(t, t->dtype); }

/* ============================================================================================
   4. the autograd node record (before the views, which record nodes too)
   ============================================================================================ */
BTDEF int bt__needs_grad(bt_tensor *t) { return t && (t->requires_grad || t->grad_fn); }

BTDEF void bt_set_requires_grad(bt_tensor *t, int on) {
    bt__need(t, "set_requires_grad", "t");
    if (t->grad_fn) bt_error("set_requires_grad: %s is the result of an op (%s), not a leaf", bt__s(t), t->grad_fn->op);
    if (on && !bt_dtype_is_float(t->dtype)) bt_error("set_requires_grad: only float tensors can require grad, got %s", bt__s(t));
    t->requires_grad = on != 0;
}

static bt_node *bt__node_alloc(void) {
    bt_node *n = bt__g.free_nodes;
    if (n) bt__g.free_nodes = n->next_free; else n = (bt_node *)bt__xmalloc(sizeof *n, "an autograd node");
    memset(n, 0, sizeof *n);
    return n;
}
/* Drop one reference; a node whose count reaches 0 releases what it saved and its edges. Done with
   an explicit stack: a long graph must not overflow the C stack. */
BTDEF void bt_node_release(bt_node *n) {
    bt_node *stack_buf[64]; bt_node **stack = stack_buf; int sp = 0, cap = 64;
    stack[sp++] = n;
    while (sp) {
        bt_node *m = stack[--sp];
        if (--m->refcount > 0) continue;
        for (int s = 0; s < m->n_saved; s++) bt_release(m->saved[s]);
        bt_release(m->grad);
        if (m->aux_free) m->aux_free(m->aux);
        for (int i = 0; i < m->n_in; i++) {
            bt_release(m->next[i].leaf);
            if (!m->next[i].node) continue;
            if (sp == cap) {
                bt_node **ns = (bt_node **)bt__xmalloc(sizeof(bt_node *) * cap * 2, "the node release stack");
                memcpy(ns, stack, sizeof(bt_node *) * sp);
                if (stack != stack_buf) free(stack);
                stack = ns; cap *= 2;
            }
            stack[sp++] = m->next[i].node;
        }
        m->next_free = bt__g.free_nodes; bt__g.free_nodes = m;
    }
    if (stack != stack_buf) free(stack);
}

/* When grad mode is on and an input needs grad: a node for `out` with edges to the inputs'
   producers (or to the leaves themselves). Returns NULL when no gradient flows. */
BTDEF bt_node *bt__record(const char *op, bt_backward_fn fn, bt_tensor *out, bt_tensor **inputs, int n_in) {
    if (!bt__g.grad_enabled) return NULL;
    int any = 0;
    for (int i = 0; i < n_in; i++) any |= bt__needs_grad(inputs[i]);
    if (!any) return NULL;
    if (n_in > BT_NODE_MAX_IN) bt_error("%s: %d inputs recorded (at most %d)", op, n_in, BT_NODE_MAX_IN);
    bt_node *n = bt__node_alloc();
    n->op = op; n->backward = fn; n->n_in = n_in; n->refcount = 1; n->seq = ++bt__g.node_seq;
    for (int i = 0; i < n_in; i++) {
        bt_tensor *x = inputs[i];
        if (!x) continue;
        n->in_shape[i] = bt_shape_of(x); n->in_dtype[i] = x->dtype; n->in_device[i] = bt_device_of(x);
        if (x->grad_fn) { n->next[i].node = x->grad_fn; x->grad_fn->refcount++; }
        else if (x->requires_grad) n->next[i].leaf = bt_retain(x);
    }
    out->grad_fn = n; out->requires_grad = 1;
    return n;
}
BTDEF void bt__save(bt_node *n, bt_tensor *t) {
    if (n->n_saved == BT_NODE_MAX_SAVED) bt_error("%s: too many saved tensors", n->op);
    n->saved_version[n->n_saved] = t->storage->version;
    /* n's own output is saved as a plain alias of its storage: saving the output itself would make
       a cycle (output -> grad_fn n -> saved output) that leaks a graph dropped without backward */
    n->saved[n->n_saved++] = t->grad_fn == n ? bt__alias(t) : bt_retain(t);
}
BTDEF bt_node *bt__record_source(const char *op, bt_backward_fn fn, bt_tensor *out) {
    if (out->grad_fn) bt_error("%s: the tensor already has a node (%s)", op, out->grad_fn->op);
    bt_node *n = bt__node_alloc();
    n->op = op; n->backward = fn; n->n_in = 0; n->refcount = 1; n->seq = ++bt__g.node_seq;
    out->grad_fn = n; out->requires_grad = 1;
    return n;
}
static int bt__wants(bt_node *n, int i) { return n->next[i].node || n->next[i].leaf; }

/* ============================================================================================
   5. views: they share the storage; each records a node whose backward maps the gradient back
   ============================================================================================ */
static void bt__reshape_back(bt_node *n, bt_tensor *g, bt_tensor **gin) { gin[0] = bt_reshape(g, n->in_shape[0]); }

/* strides that let shape `to` view a tensor of shape/stride `from`; 0 if impossible */
static int bt__view_strides(const bt_tensor *t, bt_shape to, int64_t *out) {
    int64_t n = bt_numel(t);
    if (n == 0) { int64_t st = 1; for (int d = to.ndim - 1; d >= 0; d--) { out[d] = st; st *= to.d[d] > 0 ? to.d[d] : 1; } return 1; }
    /* walk chunks of `from` that are contiguous among themselves; `to` dims must tile each chunk */
    int fi = t->ndim - 1, ti = to.ndim - 1;
    while (fi >= 0 || ti >= 0) {
        while (fi >= 0 && t->shape[fi] == 1) fi--;
        while (ti >= 0 && to.d[ti] == 1) { out[ti] = 1; ti--; }
        if (fi < 0 && ti < 0) break;
        if (fi < 0 || ti < 0) return 0;
        int64_t chunk = t->shape[fi], base = t->stride[fi];
        int f0 = fi;
        while (f0 > 0 && (t->shape[f0 - 1] == 1 || t->stride[f0 - 1] == t->stride[f0] * t->shape[f0])) {
            if (t->shape[f0 - 1] != 1) chunk *= t->shape[f0 - 1];
            f0--;
        }
        int64_t acc = 1;
        while (ti >= 0 && acc < chunk) {
            out[ti] = base * acc;
            acc *= to.d[ti]; ti--;
            while (ti >= 0 && to.d[ti] == 1 && acc < chunk) { out[ti] = base * acc; ti--; }
        }
        if (acc != chunk) return 0;
        fi = f0 - 1;
    }
    return 1;
}
static bt_shape bt__resolve_minus_one(bt_tensor *t, bt_shape shape, const char *op) {
    int neg = -1; int64_t known = 1;
    if (shape.ndim > BT_MAX_DIMS || shape.ndim < 0) bt_error("%s: %d dims", op, shape.ndim);
    for (int d = 0; d < shape.ndim; d++) {
        if (shape.d[d] == -1) { if (neg >= 0) bt_error("%s: more than one -1 in %s", op, bt__shape_s(shape)); neg = d; }
        else if (shape.d[d] < 0) bt_error("%s: bad size in %s", op, bt__shape_s(shape));
        else known *= shape.d[d];
    }
    int64_t n = bt_numel(t);
    if (neg >= 0) {
        if (known == 0 || n % known) bt_error("%s: cannot view %s as %s", op, bt__s(t), bt__shape_s(shape));
        shape.d[neg] = n / known; known *= shape.d[neg];
    }
    if (known != n) bt_error("%s: %s has %lld elements, %s has %lld", op, bt__s(t), (long long)n, bt__shape_s(shape), (long long)known);
    bt__check_shape(shape, op);
    return shape;
}
static bt_tensor *bt__view_as(bt_tensor *t, bt_shape shape, const int64_t *strides, const char *op) {
    bt_tensor *v = bt__alias(t);
    v->ndim = shape.ndim;
    memcpy(v->shape, shape.d, sizeof(int64_t) * shape.ndim);
    memcpy(v->stride, strides, sizeof(int64_t) * shape.ndim);
    bt__record(op, bt__reshape_back, v, &t, 1);
    return bt__register(v);
}
BTDEF bt_tensor *bt_view(bt_tensor *t, bt_shape shape) {
    bt__need(t, "view", "t");
    shape = bt__resolve_minus_one(t, shape, "view");
    int64_t st[BT_MAX_DIMS];
    if (!bt__view_strides(t, shape, st))
        bt_error("view: %s (strides not compatible) cannot be viewed as %s; use bt_reshape", bt__s(t), bt__shape_s(shape));
    return bt__view_as(t, shape, st, "view");
}
BTDEF bt_tensor *bt_reshape(bt_tensor *t, bt_shape shape) {
    bt__need(t, "reshape", "t");
    shape = bt__resolve_minus_one(t, shape, "reshape");
    int64_t st[BT_MAX_DIMS];
    if (bt__view_strides(t, shape, st)) return bt__view_as(t, shape, st, "reshape");
    bt_scope_begin();                         /* differentiable copy, then a view of it; the copy is */
    bt_tensor *v = bt_retain(bt_view(bt_contiguous(t), shape));   /* ours alone, the view the caller's */
    bt_scope_end();
    return bt__register(v);
}
static void bt__permute_back(bt_node *n, bt_tensor *g, bt_tensor **gin) {
    int inv[BT_MAX_DIMS];
    for (int d = 0; d < g->ndim; d++) inv[n->i[d]] = d;
    gin[0] = bt_permute(g, inv);
}
BTDEF bt_tensor *bt_permute(bt_tensor *t, const int *perm) {
    bt__need(t, "permute", "t");
    int seen[BT_MAX_DIMS] = {0};
    for (int d = 0; d < t->ndim; d++) {
        if (perm[d] < 0 || perm[d] >= t->ndim || seen[perm[d]]++) bt_error("permute: bad permutation for %s", bt__s(t));
    }
    bt_tensor *v = bt__alias(t);
    for (int d = 0; d < t->ndim; d++) { v->shape[d] = t->shape[perm[d]]; v->stride[d] = t->stride[perm[d]]; }
    bt_node *n = bt__record("permute", bt__permute_back, v, &t, 1);
    if (n) for (int d = 0; d < t->ndim; d++) n->i[d] = perm[d];
    return bt__register(v);
}
BTDEF bt_tensor *bt_transpose(bt_tensor *t, int d0, int d1) {
    bt__need(t, "transpose", "t");
    d0 = bt__norm_dim(d0, t->ndim, "transpose"); d1 = bt__norm_dim(d1, t->ndim, "transpose");
    int perm[BT_MAX_DIMS];
    for (int d = 0; d < t->ndim; d++) perm[d] = d;
    perm[d0] = d1; perm[d1] = d0;
    return bt_permute(t, perm);
}
/* gradient of a slice: zeros of the input's shape with g copied into the slice */
static void bt__narrow_back(bt_node *n, bt_tensor *g, bt_tensor **gin) {
    bt_tensor *z = bt_zeros(n->in_shape[0], g->dtype, bt_device_of(g));
    bt_tensor *slice = bt_narrow(z, (int)n->i[0], n->i[1], n->i[2]);
    if (n->i[3]) slice = bt_squeeze(slice, (int)n->i[0]);     /* select dropped the dim */
    bt_copy_(slice, g);
    gin[0] = z;
}
static bt_tensor *bt__slice(bt_tensor *t, int dim, int64_t start, int64_t len, int drop, const char *op) {
    bt_tensor *v = bt__alias(t);
    v->offset += start * t->stride[dim];
    v->shape[dim] = len;
    if (drop) {
        for (int d = dim; d < t->ndim - 1; d++) { v->shape[d] = v->shape[d + 1]; v->stride[d] = v->stride[d + 1]; }
        v->ndim--;
    }
    bt_node *n = bt__record(op, bt__narrow_back, v, &t, 1);
    if (n) { n->i[0] = dim; n->i[1] = start; n->i[2] = len; n->i[3] = drop; }
    return bt__register(v);
}
BTDEF bt_tensor *bt_narrow(bt_tensor *t, int dim, int64_t start, int64_t len) {
    bt__need(t, "narrow", "t");
    dim = bt__norm_dim(dim, t->ndim, "narrow");
    if (start < 0 || len < 0 || start + len > t->shape[dim])
        bt_error("narrow: [%lld, %lld) out of range for dim %d of %s", (long long)start, (long long)(start + len), dim, bt__s(t));
    return bt__slice(t, dim, start, len, 0, "narrow");
}
BTDEF bt_tensor *bt_select(bt_tensor *t, int dim, int64_t index) {
    bt__need(t, "select", "t");
    dim = bt__norm_dim(dim, t->ndim, "select");
    if (index < 0 || index >= t->shape[dim]) bt_error("select: index %lld out of range for dim %d of %s", (long long)index, dim, bt__s(t));
    return bt__slice(t, dim, index, 1, 1, "select");
}
static void bt__expand_back(bt_node *n, bt_tensor *g, bt_tensor **gin);
BTDEF bt_tensor *bt_expand(bt_tensor *t, bt_shape shape) {
    bt__need(t, "expand", "t");
    bt__check_shape(shape, "expand");
    if (shape.ndim < t->ndim) bt_error("expand: %s has more dims than %s", bt__s(t), bt__shape_s(shape));
    bt_tensor *v = bt__alias(t);
    int lead = shape.ndim - t->ndim;
    v->ndim = shape.ndim;
    for (int d = 0; d < shape.ndim; d++) {
        int64_t src = d < lead ? 1 : t->shape[d - lead];
        if (src != shape.d[d] && src != 1) { bt_release(v); bt_error("expand: cannot expand %s to %s", bt__s(t), bt__shape_s(shape)); }
        v->shape[d] = shape.d[d];
        v->stride[d] = (d < lead || src != shape.d[d]) ? 0 : t->stride[d - lead];
    }
    bt__record("expand", bt__expand_back, v, &t, 1);
    return bt__register(v);
}
BTDEF bt_tensor *bt_unsqueeze(bt_tensor *t, int dim) {
    bt__need(t, "unsqueeze", "t");
    if (dim < 0) dim += t->ndim + 1;
    if (dim < 0 || dim > t->ndim || t->ndim == BT_MAX_DIMS) bt_error("unsqueeze: dim %d invalid for %s", dim, bt__s(t));
    bt_shape s = bt_shape_of(t); int64_t st[BT_MAX_DIMS];
    for (int d = t->ndim; d > dim; d--) { s.d[d] = s.d[d - 1]; st[d] = t->stride[d - 1]; }
    for (int d = 0; d < dim; d++) st[d] = t->stride[d];
    s.d[dim] = 1; st[dim] = dim < t->ndim ? t->stride[dim] * t->shape[dim] : 1; s.ndim++;
    return bt__view_as(t, s, st, "unsqueeze");
}
BTDEF bt_tensor *bt_squeeze(bt_tensor *t, int dim) {
    bt__need(t, "squeeze", "t");
    dim = bt__norm_dim(dim, t->ndim, "squeeze");
    if (t->shape[dim] != 1) bt_error("squeeze: dim %d of %s is not 1", dim, bt__s(t));
    bt_shape s; int64_t st[BT_MAX_DIMS]; s.ndim = 0;
    for (int d = 0; d < t->ndim; d++) if (d != dim) { st[s.ndim] = t->stride[d]; s.d[s.ndim++] = t->shape[d]; }
    return bt__view_as(t, s, st, "squeeze");
}

/* ============================================================================================
   6. ops
   ============================================================================================ */
/* ---- identity-like ops: contiguous, clone, to, cast ---- */
static void bt__identity_back(bt_node *n, bt_tensor *g, bt_tensor **gin) { (void)n; gin[0] = bt_retain(g); bt__register(gin[0]); }
static void bt__to_back(bt_node *n, bt_tensor *g, bt_tensor **gin) { gin[0] = bt_to(g, n->in_device[0]); }
static void bt__cast_back(bt_node *n, bt_tensor *g, bt_tensor **gin) { gin[0] = bt_cast(g, n->in_dtype[0]); }

BTDEF bt_tensor *bt_contiguous(bt_tensor *t) {
    bt__need(t, "contiguous", "t");
    if (bt_is_contiguous(t)) return bt__register(bt_retain(t));
    bt_tensor *c = bt__contig(t);
    bt__record("contiguous", bt__identity_back, c, &t, 1);
    return bt__register(c);
}
BTDEF bt_tensor *bt_clone(bt_tensor *t) {
    bt__need(t, "clone", "t");
    bt_tensor *c = bt__new(bt_shape_of(t), t->dtype, bt_device_of(t));
    bt__copy_same_device(c, t);
    bt__record("clone", bt__identity_back, c, &t, 1);
    return bt__register(c);
}
BTDEF bt_tensor *bt_to(bt_tensor *t, bt_device dev) {
    bt__need(t, "to", "t");
    bt__check_device(dev, "to");
    if (bt_device_eq(bt_device_of(t), dev)) return bt__register(bt_retain(t));
    bt_tensor *c = bt__new(bt_shape_of(t), t->dtype, dev);
    bt_copy_(c, t);
    bt__record("to", bt__to_back, c, &t, 1);
    return bt__register(c);
}
BTDEF bt_tensor *bt_cast(bt_tensor *t, bt_dtype dt) {
    bt__need(t, "cast", "t");
    if ((unsigned)dt >= BT_NDTYPES) bt_error("cast: unknown dtype %d", (int)dt);
    if (t->dtype == dt) return bt__register(bt_retain(t));
    bt_tensor *c = bt__contig_as(t, dt);
    if (bt_dtype_is_float(dt)) bt__record("cast", bt__cast_back, c, &t, 1);
    return bt__register(c);
}
BTDEF bt_tensor *bt_cast_cached(bt_tensor *t, bt_tensor *cache) {
    bt__need_float(t, "cast_cached", "t"); bt__need_float(cache, "cast_cached", "cache");
    bt__same_device(t, cache, "cast_cached");
    if (t->ndim != cache->ndim || memcmp(t->shape, cache->shape, sizeof(int64_t) * t->ndim))
        bt_error("cast_cached: cache %s does not have the shape of %s", bt__s(cache), bt__s(t));
    bt_tensor *c = bt__alias(cache);
    bt__record("cast", bt__cast_back, c, &t, 1);
    return bt__register(c);
}
static void bt__check_async_errors(bt_device dev);
BTDEF void bt_to_host(bt_tensor *t, void *dst, bt_dtype dt) {
    bt__need(t, "to_host", "t");
    bt__no_halves(t, "to_host");
    bt_tensor *c = bt__is_gpu(t) ? bt__contig_as(t, dt) : bt_retain(t);
    if (bt__is_gpu(t)) {
        bt__download(dst, bt_data_ptr(c), bt_device_of(c), (size_t)bt_numel(c) * bt_dtype_size(dt));
        bt__check_async_errors(bt_device_of(c));
    } else {
        bt_tensor *h = bt_from_blob(dst, bt_shape_of(t), dt, bt_cpu());
        bt__copy_same_device(h, c);
        if (bt__g.scope_depth == 0) bt_release(h);
    }
    bt_release(c);
}
BTDEF void bt_to_host_async(bt_tensor *t, void *dst, bt_dtype dt, void *stream, void *event) {
    bt__need(t, "to_host_async", "t");
    bt__no_halves(t, "to_host_async");
    if (!bt__is_gpu(t)) { bt_to_host(t, dst, dt); return; }
#ifdef BT_CUDA
    bt_device dev = bt_device_of(t);
    void *cur = bt_stream_current(dev), *s = stream ? stream : cur;
    if (s != cur) {                             /* s waits for the work that produced t */
        void *ready = bt_event_create(dev);
        bt_event_record(ready, cur);
        bt_stream_wait_event(s, ready);
        bt_event_destroy(ready);
    }
    bt_stream_push(dev, s);                     /* a conversion runs on s and its memory is s's */
    bt_tensor *c = bt__contig_as(t, dt);
    BT__ON_GPU(dev, st) {
        BT__CUDA_CHECK(cudaMemcpyAsync(dst, bt_data_ptr(c), (size_t)bt_numel(c) * bt_dtype_size(dt), cudaMemcpyDeviceToHost, st),
                       "to_host_async");
        if (event) BT__CUDA_CHECK(cudaEventRecord((cudaEvent_t)event, st), "to_host_async");
    }
    bt_release(c);
    bt_stream_pop(dev);
#else
    (void)stream; (void)event; (void)dst; (void)dt;
#endif
}
BTDEF double bt_item(bt_tensor *t) {
    bt__need(t, "item", "t");
    if (bt_numel(t) != 1) bt_error("item: %s has %lld elements, not 1", bt__s(t), (long long)bt_numel(t));
    double v; bt_to_host(t, &v, BT_F64);
    return v;
}
BTDEF double bt_get(bt_tensor *t, const int64_t *index) {
    bt__need(t, "get", "t");
    int64_t off = t->offset;
    for (int d = 0; d < t->ndim; d++) {
        if (index[d] < 0 || index[d] >= t->shape[d]) bt_error("get: index %lld out of range in dim %d of %s", (long long)index[d], d, bt__s(t));
        off += index[d] * t->stride[d];
    }
    double v;
    if (!bt__is_gpu(t)) return bt__ld(bt__storage_data(t->storage), t->dtype, off);
    char buf[8] = {0};
    bt__download(buf, (char *)bt__storage_data(t->storage) + off * (int64_t)bt_dtype_size(t->dtype), bt_device_of(t), bt_dtype_size(t->dtype));
    v = bt__ld(buf, t->dtype, 0);
    return v;
}

/* Errors a kernel can only flag (an embedding index or a target out of range) land in one device
   int per GPU; it is read at the next host sync (bt_item, bt_to_host), never on the hot path. */
#ifdef BT_CUDA
static int *bt__bad_flag[BT_MAX_GPUS];
static int *bt__bad(bt_device dev) {
    if (!bt__bad_flag[dev.index]) {
        bt__bad_flag[dev.index] = (int *)bt_alloc(dev, sizeof(int), bt__stream_for(dev));
        BT__ON_GPU(dev, stream) BT__CUDA_CHECK(cudaMemsetAsync(bt__bad_flag[dev.index], 0, sizeof(int), stream), "error flag");
    }
    return bt__bad_flag[dev.index];
}
#endif
/* after a host sync on dev: raise the error a kernel flagged there */
static void bt__check_async_errors(bt_device dev) {
#ifdef BT_CUDA
    if (dev.type != BT_GPU || !bt__bad_flag[dev.index]) return;
    int bad = 0;
    BT__ON_GPU(dev, stream) {
        BT__CUDA_CHECK(cudaMemcpyAsync(&bad, bt__bad_flag[dev.index], sizeof(int), cudaMemcpyDeviceToHost, stream), "error flag");
        BT__CUDA_CHECK(cudaStreamSynchronize(stream), "error flag");
        if (bad) BT__CUDA_CHECK(cudaMemsetAsync(bt__bad_flag[dev.index], 0, sizeof(int), stream), "error flag");
    }
    if (bad)
        bt_error("embedding or cross_entropy on cuda:%d: an index or target was out of range (found after the kernel ran; those rows were not read)", dev.index);
#else
    (void)dev;
#endif
}

/* ---- fp32 math for the CPU loops (elementwise ops, the loss over the vocabulary, attention) ----
   x = n ln2 + r with n = round(x / ln2), |r| <= ln2 / 2 (ln 2 in two parts, so n ln2 is exact);
   q = e^r - 1 = r (1 + r/2 + r^2/6 + ... + r^7/8!) (truncation < 1e-9 relative); e^x = 2^n (1 + q)
   and e^x - 1 = 2^n (1 + q) - 1, with 2^n applied as two powers of two 2^h 2^l (h = floor(n/2)), so
   that results near overflow and in the subnormal range come out right (x is clamped to [-104, 89],
   past which e^x rounds to 0 or infinity anyway), and e^x - 1 = q exactly when n = 0. Within ~2 ulp;
   no branch and no call, so loops over these vectorise (the reductions through `omp simd`, which
   lets the compiler reorder the float sums). */
#ifdef __FMA__
#define BT__FMAF(a, b, c) fmaf(a, b, c)
#else
#define BT__FMAF(a, b, c) ((a) * (b) + (c))
#endif
/* 2^i for i in [-126, 127] */
static inline float bt__pow2i(int32_t i) {
    int32_t e = (int32_t)((uint32_t)(i + 127) << 23);
    float s;
    memcpy(&s, &e, 4);
    return s;
}
/* q = e^r - 1, and *h, *l with 2^n = *h * *l */
static inline float bt__exp_parts(float x, float *h, float *l) {
    x = -104.f > x ? -104.f : x;              /* written so that NaN stays NaN (max/min operand order) */
    x = 89.f < x ? 89.f : x;
    float t = BT__FMAF(x, 1.44269504088896341f, 12582912.f);   /* + 1.5 * 2^23: n in the low bits */
    float nf = t - 12582912.f;
    float r = BT__FMAF(nf, -0.693145751953125f, x);
    r = BT__FMAF(nf, -1.42860682030941723e-6f, r);
    float p = BT__FMAF(r, 1.f / 40320, 1.f / 5040);
    p = BT__FMAF(r, p, 1.f / 720); p = BT__FMAF(r, p, 1.f / 120); p = BT__FMAF(r, p, 1.f / 24);
    p = BT__FMAF(r, p, 1.f / 6); p = BT__FMAF(r, p, 0.5f); p = BT__FMAF(r, p, 1.f);
    int32_t ti;
    memcpy(&ti, &t, 4);
    int32_t n = ti - 0x4b400000, nh = n >> 1;
    *h = bt__pow2i(nh);
    *l = bt__pow2i(n - nh);
    return r * p;
}
static inline float bt__expf(float x) { float h, l, q = bt__exp_parts(x, &h, &l); return BT__FMAF(h, q, h) * l; }
/* 2^n (1 + q) - 1 = (2^h (1 + q) - 2^-l) 2^l: exact powers of two but for the one rounding */
static inline float bt__expm1f(float x) { float h, l, q = bt__exp_parts(x, &h, &l); return BT__FMAF(h, q, h - 1.f / l) * l; }
/* tanh |x| = -m / (m + 2) with m = e^(-2|x|) - 1: no cancellation near 0 */
static inline float bt__tanhf(float x) {
    float m = bt__expm1f(-2.f * fabsf(x));
    return copysignf(-m / (m + 2.f), x);
}
/* max of z[0, n) (NaNs skipped) */
static float bt__max_f32(const float *z, int64_t n) {
    float m = -INFINITY;
    #pragma omp simd reduction(max : m)
    for (int64_t j = 0; j < n; j++) m = z[j] > m ? z[j] : m;
    return m;
}
/* sum of e^(z_j - m) over [0, n): float lanes within blocks of 1024 terms, the blocks added in double */
static double bt__sum_exp_f32(const float *z, int64_t n, float m) {
    double total = 0;
    for (int64_t j0 = 0; j0 < n; j0 += 1024) {
        int64_t j1 = j0 + 1024 < n ? j0 + 1024 : n;
        float s = 0;
        #pragma omp simd reduction(+ : s)
        for (int64_t j = j0; j < j1; j++) s += bt__expf(z[j] - m);
        total += s;
    }
    return total;
}

/* The op list in float for fp32 tensors on the CPU: out = f(x), or out = g f'(x) when g is given,
   each op's f and f' as BT_UNARY_OPS writes them, with float math (exp and tanh above; logf, sqrtf). */
#pragma push_macro("BT_M_EXP")
#pragma push_macro("BT_M_LOG")
#pragma push_macro("BT_M_SQRT")
#pragma push_macro("BT_M_TANH")
#undef BT_M_EXP
#undef BT_M_LOG
#undef BT_M_SQRT
#undef BT_M_TANH
#define BT_M_EXP(x) bt__expf(x)
#define BT_M_LOG(x) logf(x)
#define BT_M_SQRT(x) sqrtf(x)
#define BT_M_TANH(x) bt__tanhf(x)
static void bt__unary_f32(bt_unary_op op, float *out, const float *xp, const float *g, int64_t n) {
    typedef float bt_op_t;
    switch (op) {
#define BT__X(N, n_, f, df) case BT_UOP_##N: \
        if (!g) { \
            _Pragma("omp parallel for simd if (n > BT__PAR_MIN)") \
            for (int64_t i = 0; i < n; i++) { bt_op_t x = xp[i]; out[i] = f; } \
        } else { \
            _Pragma("omp parallel for simd if (n > BT__PAR_MIN)") \
            for (int64_t i = 0; i < n; i++) { bt_op_t x = xp[i], y = f; (void)y; out[i] = g[i] * (df); } \
        } \
        break;
    BT_UNARY_OPS(BT__X)
#undef BT__X
    default: break;
    }
}
#pragma pop_macro("BT_M_EXP")
#pragma pop_macro("BT_M_LOG")
#pragma pop_macro("BT_M_SQRT")
#pragma pop_macro("BT_M_TANH")
/* ---- unary elementwise: f(x) of the op list (BT_UNARY_OPS); backward gx = g f'(x), f' from x ---- */
/* a new tensor f(x) (g NULL) or g f'(x) (g of x's shape and dtype), x and g contiguous, no node: the
   op's forward and backward, and the CPU side of ops that fold f into another pass (bt_mlp_gelu_fp8) */
static bt_tensor *bt__unary_eval(bt_unary_op op, bt_tensor *x, bt_tensor *g) {
    bt_tensor *y = bt__new(bt_shape_of(x), x->dtype, bt_device_of(x));
    int64_t nel = bt_numel(x);
    if (bt__is_gpu(x)) {
#ifdef BT_CUDA
        BT__ON_GPU(bt_device_of(x), stream) {
            if (g) bt_k_unary_backward(op, x->dtype, bt_data_ptr(y), bt_data_ptr(g), bt_data_ptr(x), nel, stream);
            else bt_k_unary(op, x->dtype, bt_data_ptr(y), bt_data_ptr(x), nel, stream);
        }
#endif
        return y;
    }
    const void *xp = bt_data_ptr(x), *gp = g ? bt_data_ptr(g) : NULL; void *yp = bt_data_ptr(y);
    bt_dtype dt = x->dtype;
    if (dt == BT_F32) bt__unary_f32(op, (float *)yp, (const float *)xp, (const float *)gp, nel);
    else if (g) {
        #pragma omp parallel for if (nel > BT__PAR_MIN)
        for (int64_t i = 0; i < nel; i++) bt__st(yp, dt, i, bt__ld(gp, dt, i) * bt_unary_op_grad(op, bt__ld(xp, dt, i)));
    } else {
        #pragma omp parallel for if (nel > BT__PAR_MIN)
        for (int64_t i = 0; i < nel; i++) bt__st(yp, dt, i, bt_unary_op_eval(op, bt__ld(xp, dt, i)));
    }
    return y;
}
static void bt__unary_back(bt_node *n, bt_tensor *g, bt_tensor **gin) {
    bt_tensor *gc = bt__contig(g);
    gin[0] = bt__register(bt__unary_eval((bt_unary_op)n->i[0], n->saved[0], gc));
    bt_release(gc);
}
static bt_tensor *bt__unary(bt_unary_op op, bt_tensor *x) {
    const char *name = bt_unary_op_name(op);
    bt__need_float(x, name, "x");
    bt_tensor *xc = bt__contig(x);
    bt_tensor *y = bt__unary_eval(op, xc, NULL);
    bt_node *n = bt__record(name, bt__unary_back, y, &x, 1);
    if (n) { n->i[0] = op; bt__save(n, xc); }
    bt_release(xc);
    return bt__register(y);
}
#define BT__X(N, n, f, df) BTDEF bt_tensor *bt_##n(bt_tensor *x) { return bt__unary(BT_UOP_##N, x); }
BT_UNARY_OPS(BT__X)
#undef BT__X

/* ---- scalar affine: alpha x + beta ---- */
static void bt__affine_into(bt_tensor *out, bt_tensor *xc, double alpha, double beta) {
    int64_t nel = bt_numel(xc);
    if (bt__is_gpu(xc)) {
#ifdef BT_CUDA
        BT__ON_GPU(bt_device_of(xc), stream) bt_k_affine(xc->dtype, bt_data_ptr(out), bt_data_ptr(xc), alpha, beta, nel, stream);
#endif
        return;
    }
    const void *xp = bt_data_ptr(xc); void *yp = bt_data_ptr(out); bt_dtype dt = xc->dtype;
    #pragma omp parallel for if (nel > BT__PAR_MIN)
    for (int64_t i = 0; i < nel; i++) bt__st(yp, dt, i, alpha * bt__ld(xp, dt, i) + beta);
}
static void bt__affine_back(bt_node *n, bt_tensor *g, bt_tensor **gin) { gin[0] = bt_scale(g, n->f[0]); }
BTDEF bt_tensor *bt_affine(bt_tensor *x, double alpha, double beta) {
    bt__need_float(x, "affine", "x");
    bt_tensor *xc = bt__contig(x);
    bt_tensor *y = bt__new(bt_shape_of(x), x->dtype, bt_device_of(x));
    bt__affine_into(y, xc, alpha, beta);
    bt_release(xc);
    bt_node *n = bt__record("affine", bt__affine_back, y, &x, 1);
    if (n) { n->f[0] = alpha; n->f[1] = beta; }      /* beta: unused by the backward; bt_mlir.h's capture reads it */
    return bt__register(y);
}
BTDEF bt_tensor *bt_scale(bt_tensor *x, double alpha) { return bt_affine(x, alpha, 0.0); }
BTDEF bt_tensor *bt_add_scalar(bt_tensor *x, double beta) { return bt_affine(x, 1.0, beta); }
BTDEF void bt_mul_scalar_(bt_tensor *a, double alpha) {
    bt__need_float(a, "mul_scalar_", "a");
    if (bt__g.grad_enabled && bt__needs_grad(a)) bt_error("mul_scalar_: in-place write to %s, which requires grad, while grad mode is on", bt__s(a));
    if (!bt_is_contiguous(a)) { bt_tensor *c = bt__contig(a); bt__affine_into(c, c, alpha, 0); bt_copy_(a, c); bt_release(c); return; }
    a->storage->version++;
    bt__affine_into(a, a, alpha, 0);
}

/* ---- broadcasting binary ---- */
static bt_shape bt__broadcast_shapes(bt_tensor *a, bt_tensor *b, const char *op) {
    bt_shape s; s.ndim = a->ndim > b->ndim ? a->ndim : b->ndim;
    for (int d = 0; d < s.ndim; d++) {
        int da = d - (s.ndim - a->ndim), db = d - (s.ndim - b->ndim);
        int64_t x = da >= 0 ? a->shape[da] : 1, y = db >= 0 ? b->shape[db] : 1;
        if (x != y && x != 1 && y != 1) bt_error("%s: shapes %s and %s do not broadcast (dim %d: %lld vs %lld)", op, bt__s(a), bt__s(b), d, (long long)x, (long long)y);
        s.d[d] = x == 1 ? y : x;
    }
    return s;
}
/* element strides of t read as shape s (0 on broadcast dims) */
static void bt__broadcast_strides(bt_tensor *t, bt_shape s, int64_t *st) {
    for (int d = 0; d < s.ndim; d++) {
        int dt = d - (s.ndim - t->ndim);
        st[d] = (dt < 0 || t->shape[dt] == 1) ? 0 : t->stride[dt];
    }
}
/* out (contiguous, shape s) = a op b, a and b read through broadcast strides */
static void bt__binary_into(bt_binary_op op, bt_tensor *out, bt_tensor *a, bt_tensor *b) {
    bt_shape s = bt_shape_of(out);
    int64_t sa[BT_MAX_DIMS], sb[BT_MAX_DIMS];
    bt__broadcast_strides(a, s, sa); bt__broadcast_strides(b, s, sb);
    int64_t nel = bt_numel(out);
    if (bt__is_gpu(out)) {
#ifdef BT_CUDA
        BT__ON_GPU(bt_device_of(out), stream) bt_k_binary(op, out->dtype, bt_data_ptr(out), bt_data_ptr(a), sa, bt_data_ptr(b), sb, s.ndim, s.d, stream);
#endif
        return;
    }
    const void *ap = bt_data_ptr(a), *bp = bt_data_ptr(b); void *op_ = bt_data_ptr(out); bt_dtype dt = out->dtype;
    int fast = bt_is_contiguous(a) && bt_is_contiguous(b) && bt_numel(a) == nel && bt_numel(b) == nel;
    if (fast && dt == BT_F32) {               /* the op list's a op b in float, one vectorised loop per op */
        const float *x = (const float *)ap, *y = (const float *)bp; float *z = (float *)op_;
        typedef float bt_op_t;
        switch (op) {
#define BT__X(N, n_, f, da, db) case BT_BOP_##N: \
            _Pragma("omp parallel for simd if (nel > BT__PAR_MIN)") \
            for (int64_t i = 0; i < nel; i++) { bt_op_t a = x[i], b = y[i]; z[i] = f; } \
            break;
        BT_BINARY_OPS(BT__X)
#undef BT__X
        default: break;
        }
        return;
    }
    #pragma omp parallel for if (nel > BT__PAR_MIN)
    for (int64_t i = 0; i < nel; i++) {
        int64_t ia = fast ? i : bt__offset_of(s.d, sa, s.ndim, i), ib = fast ? i : bt__offset_of(s.d, sb, s.ndim, i);
        bt__st(op_, dt, i, bt_binary_op_eval(op, bt__ld(ap, dt, ia), bt__ld(bp, dt, ib)));
    }
}
/* the gradient of an input broadcast from shape `to`: sum g over the broadcast dims */
static bt_tensor *bt__sum_to(bt_tensor *g, bt_shape to) {
    int dims[BT_MAX_DIMS], nd = 0, lead = g->ndim - to.ndim;
    for (int d = 0; d < g->ndim; d++)
        if (d < lead || (to.d[d - lead] == 1 && g->shape[d] != 1)) dims[nd++] = d;
    if (nd == 0) return bt_reshape(g, to);
    return bt_reshape(bt_sum(g, dims, nd, 1), to);
}
static void bt__expand_back(bt_node *n, bt_tensor *g, bt_tensor **gin) { gin[0] = bt__sum_to(g, n->in_shape[0]); }
static void bt__binary_back(bt_node *n, bt_tensor *g, bt_tensor **gin) {
    bt_binary_op op = (bt_binary_op)n->i[0];
    bt_tensor *a = n->n_saved ? n->saved[0] : NULL, *b = n->n_saved ? n->saved[1] : NULL;
    if (bt__wants(n, 0)) {
        bt_tensor *ga = op == BT_BOP_MUL ? bt_mul(g, b) : op == BT_BOP_DIV ? bt_div(g, b) : g;
        gin[0] = bt__sum_to(ga, n->in_shape[0]);
    }
    if (bt__wants(n, 1)) {
        bt_tensor *gb = op == BT_BOP_ADD ? g : op == BT_BOP_SUB ? bt_neg(g) : op == BT_BOP_MUL ? bt_mul(g, a)
                      : bt_neg(bt_div(bt_mul(g, a), bt_mul(b, b)));
        gin[1] = bt__sum_to(gb, n->in_shape[1]);
    }
}
static bt_tensor *bt__binary(bt_binary_op op, bt_tensor *a, bt_tensor *b) {
    const char *name = bt_binary_op_name(op);
    bt__need_float(a, name, "a"); bt__need_float(b, name, "b");
    bt__same_device(a, b, name); bt__same_dtype(a, b, name);
    bt_shape s = bt__broadcast_shapes(a, b, name);
    bt_tensor *out = bt__new(s, a->dtype, bt_device_of(a));
    bt__binary_into(op, out, a, b);
    bt_tensor *in[2] = {a, b};
    bt_node *n = bt__record(name, bt__binary_back, out, in, 2);
    if (n) { n->i[0] = op; if (op == BT_BOP_MUL || op == BT_BOP_DIV) { bt__save(n, a); bt__save(n, b); } }
    return bt__register(out);
}
BTDEF bt_tensor *bt_add(bt_tensor *a, bt_tensor *b) { return bt__binary(BT_BOP_ADD, a, b); }
BTDEF bt_tensor *bt_sub(bt_tensor *a, bt_tensor *b) { return bt__binary(BT_BOP_SUB, a, b); }
BTDEF bt_tensor *bt_mul(bt_tensor *a, bt_tensor *b) { return bt__binary(BT_BOP_MUL, a, b); }
BTDEF bt_tensor *bt_div(bt_tensor *a, bt_tensor *b) { return bt__binary(BT_BOP_DIV, a, b); }
BTDEF void bt_add_(bt_tensor *a, bt_tensor *b, double alpha) {
    bt__need_float(a, "add_", "a"); bt__need_float(b, "add_", "b");
    bt__same_device(a, b, "add_"); bt__same_dtype(a, b, "add_");
    if (bt__g.grad_enabled && bt__needs_grad(a)) bt_error("add_: in-place write to %s, which requires grad, while grad mode is on", bt__s(a));
    bt_shape s = bt__broadcast_shapes(a, b, "add_");
    if (s.ndim != a->ndim || memcmp(s.d, a->shape, sizeof(int64_t) * s.ndim)) bt_error("add_: %s does not broadcast into %s", bt__s(b), bt__s(a));
    int old = bt_set_grad_enabled(0);
    bt_scope_begin();                        /* alpha * b is a temporary of this call */
    bt_tensor *bs = bt_retain(alpha == 1.0 ? b : bt_scale(b, alpha));
    bt_scope_end();
    if (bt_is_contiguous(a)) { a->storage->version++; bt__binary_into(BT_BOP_ADD, a, a, bs); }
    else { bt_tensor *t = bt__new(s, a->dtype, bt_device_of(a)); bt__binary_into(BT_BOP_ADD, t, a, bs); bt_copy_(a, t); bt_release(t); }
    bt_release(bs);
    bt_set_grad_enabled(old);
}

/* ---- reductions ---- */
/* reduce the dims of x marked in mask; out has the kept dims (size 1 where reduced if keepdim).
   argmax (max only) receives [kept] int32 positions along the single reduced dim. */
static bt_tensor *bt__reduce(bt_tensor *x, const int *mask, bt_reduce_op op, int keepdim, bt_tensor **argmax) {
    bt_shape out_s; out_s.ndim = 0;
    int64_t r = 1;
    for (int d = 0; d < x->ndim; d++) {
        if (mask[d]) { r *= x->shape[d]; if (keepdim) out_s.d[out_s.ndim++] = 1; }
        else out_s.d[out_s.ndim++] = x->shape[d];
    }
    /* reduced dims consecutive (ignoring size 1): read x as [outer, r, inner]; else move them last */
    int first = -1, last = -1, gap = 0;
    for (int d = 0; d < x->ndim; d++) if (mask[d] && x->shape[d] != 1) { if (first < 0) first = d; else if (last != d - 1) { for (int e = last + 1; e < d; e++) if (x->shape[e] != 1) gap = 1; } last = d; }
    bt_tensor *xc;
    int64_t outer = 1, inner = 1;
    if (!gap) {
        xc = bt__contig(x);
        for (int d = 0; d < x->ndim; d++) {
            if (first >= 0 && d < first) outer *= x->shape[d];
            else if (first >= 0 && d > last) inner *= x->shape[d];
            else if (first < 0) outer *= x->shape[d];
        }
    } else {
        int perm[BT_MAX_DIMS], k = 0;
        for (int d = 0; d < x->ndim; d++) if (!mask[d]) { perm[k++] = d; outer *= x->shape[d]; }
        for (int d = 0; d < x->ndim; d++) if (mask[d]) perm[k++] = d;
        int64_t shape[BT_MAX_DIMS], stride[BT_MAX_DIMS];
        for (int d = 0; d < x->ndim; d++) { shape[d] = x->shape[perm[d]]; stride[d] = x->stride[perm[d]]; }
        bt_tensor *p = bt__view_raw(x, x->ndim, shape, stride, x->offset);
        xc = bt__contig(p); bt_release(p);
    }
    bt_tensor *out = bt__new(out_s, x->dtype, bt_device_of(x));
    if (argmax) *argmax = bt__new(out_s, BT_I32, bt_device_of(x));
    if (bt__is_gpu(x)) {
#ifdef BT_CUDA
        BT__ON_GPU(bt_device_of(x), stream) bt_k_reduce(op, x->dtype, bt_data_ptr(out), argmax ? (int32_t *)bt_data_ptr(*argmax) : NULL, bt_data_ptr(xc), outer, r, inner, stream);
#endif
    } else {
        const void *xp = bt_data_ptr(xc); void *op_ = bt_data_ptr(out); bt_dtype dt = x->dtype;
        int32_t *am = argmax ? (int32_t *)bt_data_ptr(*argmax) : NULL;
        #pragma omp parallel for if (outer * inner * r > BT__PAR_MIN)
        for (int64_t oi = 0; oi < outer * inner; oi++) {
            int64_t o = oi / inner, i = oi % inner, base = o * r * inner + i;
            double acc = op == BT_REDUCE_MAX ? -INFINITY : 0; int32_t best = 0;
            for (int64_t j = 0; j < r; j++) {
                double v = bt__ld(xp, dt, base + j * inner);
                if (op == BT_REDUCE_MAX) { if (v > acc || (j == 0)) { acc = v; best = (int32_t)j; } }
                else acc += v;
            }
            if (op == BT_REDUCE_MEAN) acc /= (double)(r ? r : 1);
            bt__st(op_, dt, oi, acc);
            if (am) am[oi] = best;
        }
    }
    bt_release(xc);
    return out;
}
static void bt__sum_back(bt_node *n, bt_tensor *g, bt_tensor **gin) {
    /* g has the kept-dims shape of keepdim; view it with 1s in the reduced dims, then expand */
    bt_shape in = n->in_shape[0], ks = in;
    for (int d = 0; d < in.ndim; d++) if (n->i[d]) ks.d[d] = 1;
    bt_tensor *e = bt_expand(bt_reshape(g, ks), in);
    gin[0] = n->f[0] != 1.0 ? bt_scale(e, n->f[0]) : e;
}
static bt_tensor *bt__sum_mean(bt_tensor *x, const int *dims, int ndims, int keepdim, int mean) {
    const char *name = mean ? "mean" : "sum";
    bt__need_float(x, name, "x");
    int mask[BT_MAX_DIMS] = {0};
    if (!dims || ndims == 0) for (int d = 0; d < x->ndim; d++) mask[d] = 1;
    for (int k = 0; k < ndims && dims; k++) mask[bt__norm_dim(dims[k], x->ndim, name)] = 1;
    bt_tensor *out = bt__reduce(x, mask, mean ? BT_REDUCE_MEAN : BT_REDUCE_SUM, keepdim, NULL);
    bt_node *n = bt__record(name, bt__sum_back, out, &x, 1);
    if (n) {
        int64_t r = 1;
        for (int d = 0; d < x->ndim; d++) { n->i[d] = mask[d]; if (mask[d]) r *= x->shape[d]; }
        n->f[0] = mean ? 1.0 / (double)(r ? r : 1) : 1.0;
    }
    return bt__register(out);
}
BTDEF bt_tensor *bt_sum(bt_tensor *x, const int *dims, int ndims, int keepdim) { return bt__sum_mean(x, dims, ndims, keepdim, 0); }
BTDEF bt_tensor *bt_mean(bt_tensor *x, const int *dims, int ndims, int keepdim) { return bt__sum_mean(x, dims, ndims, keepdim, 1); }

/* d max / dx: the gradient goes to the (first) argmax of each reduced row */
static void bt__max_back(bt_node *n, bt_tensor *g, bt_tensor **gin) {
    bt_tensor *am = n->saved[0];
    int dim = (int)n->i[0];
    bt_shape in = n->in_shape[0];
    int64_t outer = 1, r = in.d[dim], inner = 1;
    for (int d = 0; d < dim; d++) outer *= in.d[d];
    for (int d = dim + 1; d < in.ndim; d++) inner *= in.d[d];
    bt_tensor *gc = bt__contig(g);
    bt_tensor *gx = bt__new(in, g->dtype, bt_device_of(g));
    bt_fill_(gx, 0.0);
    if (bt__is_gpu(g)) {
#ifdef BT_CUDA
        BT__ON_GPU(bt_device_of(g), stream) bt_k_scatter_rows(g->dtype, bt_data_ptr(gx), bt_data_ptr(gc), (const int32_t *)bt_data_ptr(am), outer, r, inner, stream);
#endif
    } else {
        const int32_t *a = (const int32_t *)bt_data_ptr(am);
        for (int64_t oi = 0; oi < outer * inner; oi++) {
            int64_t o = oi / inner, i = oi % inner;
            bt__st(bt_data_ptr(gx), g->dtype, o * r * inner + (int64_t)a[oi] * inner + i, bt__ld(bt_data_ptr(gc), g->dtype, oi));
        }
    }
    bt_release(gc);
    gin[0] = bt__register(gx);
}
BTDEF bt_tensor *bt_max(bt_tensor *x, int dim, int keepdim) {
    bt__need_float(x, "max", "x");
    dim = bt__norm_dim(dim, x->ndim, "max");
    if (x->shape[dim] == 0) bt_error("max: dim %d of %s is empty", dim, bt__s(x));
    int mask[BT_MAX_DIMS] = {0}; mask[dim] = 1;
    bt_tensor *am = NULL;
    bt_tensor *out = bt__reduce(x, mask, BT_REDUCE_MAX, keepdim, &am);
    bt_node *n = bt__record("max", bt__max_back, out, &x, 1);
    if (n) { n->i[0] = dim; bt__save(n, am); }
    bt_release(am);
    return bt__register(out);
}
BTDEF bt_tensor *bt_argmax(bt_tensor *x, int dim) {
    bt__need_float(x, "argmax", "x");
    dim = bt__norm_dim(dim, x->ndim, "argmax");
    if (x->shape[dim] == 0) bt_error("argmax: dim %d of %s is empty", dim, bt__s(x));
    int mask[BT_MAX_DIMS] = {0}; mask[dim] = 1;
    bt_tensor *am = NULL;
    bt_release(bt__reduce(x, mask, BT_REDUCE_MAX, 0, &am));
    return bt__register(am);
}

/* ---- matmul ---- */
/* C[M, N] = alpha op(A) op(B) + beta C (+ bias[N]), fp32, row-major, where op(A) [M, K] is A or, with
   ta, A^T read from A [K, M] in place (likewise op(B) [K, N] and tb): no transpose is materialised.
   The scheme is BLIS's. K is cut into KC slices. For each slice a KC x NC panel of op(B) is packed
   into NR-column micro-panels (k-major, the edge zero-padded); the packing reads either layout,
   which is where a transposed B goes. op(A) = A is read in place, MR rows at a time; A transposed
   is packed an MC x KC block at a time into MR-row micro-panels (k-major), as is a ragged last tile.
   The micro-kernel holds an MR x NR tile of C in registers over the whole slice: per k it loads NR
   floats of B, broadcasts MR floats of A and issues MR x NR / VW vector FMAs. The KC x NR micro-panel
   of B (32 KiB) stays in L1 while the block's MR-row strips of A stream past it from L2.
   Traffic: op(B) is packed once per MC rows of C (each packed float feeds 2 MC flops); A is read
   once per NC columns. The first K slice applies beta and the bias; later ones add.
   Work is split into tasks, each an MC x NC block of C over one part of K, shrinking the blocks
   (or, when K is long next to M and N, splitting K into parts summed at the end in a fixed order)
   until there are BT__TASKS of them; the split depends on the shape only, so the result does not
   depend on the number of threads. OpenMP hands the tasks out one at a time (a thread that the OS
   delays does not hold the others up); each thread packs into its own buffers.
   Vector width: AVX-512 (16 floats), else AVX2 + FMA (8), else a portable scalar kernel; the
   Makefile builds with -march=native. `make BLAS=1` (BT_BLAS) routes this through cblas_sgemm. */
#if defined(__AVX512F__)
#include <immintrin.h>
typedef __m512 bt__vf;
#define BT__VW 16
#define BT__MR 12                             /* 12 x 32: 24 accumulators of the 32 zmm registers */
#define BT__NV 2
#define bt__vzero() _mm512_setzero_ps()
#define bt__vld(p) _mm512_loadu_ps(p)
#define bt__vst(p, v) _mm512_storeu_ps(p, v)
#define bt__vbc(x) _mm512_set1_ps(x)
#define bt__vfma(a, b, c) _mm512_fmadd_ps(a, b, c)
#define bt__vmul(a, b) _mm512_mul_ps(a, b)
#define bt__vadd(a, b) _mm512_add_ps(a, b)
#elif defined(__AVX2__) && defined(__FMA__)
#include <immintrin.h>
typedef __m256 bt__vf;
#define BT__VW 8
#define BT__MR 6                              /* 6 x 16: 12 accumulators of the 16 ymm registers */
#define BT__NV 2
#define bt__vzero() _mm256_setzero_ps()
#define bt__vld(p) _mm256_loadu_ps(p)
#define bt__vst(p, v) _mm256_storeu_ps(p, v)
#define bt__vbc(x) _mm256_set1_ps(x)
#define bt__vfma(a, b, c) _mm256_fmadd_ps(a, b, c)
#define bt__vmul(a, b) _mm256_mul_ps(a, b)
#define bt__vadd(a, b) _mm256_add_ps(a, b)
#else
typedef float bt__vf;                         /* portable: one float per "vector" */
#define BT__VW 1
#define BT__MR 4
#define BT__NV 8
#define bt__vzero() 0.f
#define bt__vld(p) (*(p))
#define bt__vst(p, v) (*(p) = (v))
#define bt__vbc(x) (x)
#define bt__vfma(a, b, c) ((a) * (b) + (c))
#define bt__vmul(a, b) ((a) * (b))
#define bt__vadd(a, b) ((a) + (b))
#endif
#define BT__NR (BT__VW * BT__NV)
#define BT__KC 256                            /* a KC x NR micro-panel of B: 32 KiB with AVX-512 */
#define BT__MC (BT__MR * 48)                  /* an MC x KC block of A: 576 KiB with AVX-512 (L2) */
#define BT__NC (BT__NR * 16)
#define BT__TASKS 8
#define BT__GEMM_PAR_FLOPS 2000000.0          /* smaller products run on one thread */

typedef struct {
    const float *A, *B, *bias;
    float *C;
    int64_t M, N, K, ldc;
    int ta, tb;
    float alpha, beta;
} bt__sgemm_args;

/* Ap <- op(A)[i0 : i0 + mc, k0 : k0 + kc] as MR-row micro-panels, each kc x MR (k-major); rows at or
   past M are zeros. A transposed (A [K, M]) is read a row at a time, mc adjacent floats per k. */
static void bt__sgemm_pack_a(float *Ap, const bt__sgemm_args *g, int64_t i0, int64_t mc, int64_t k0, int64_t kc) {
    if (g->ta) {                              /* 16 rows of A at a time: each panel gets 16 k's in a row */
        for (int64_t k1 = 0; k1 < kc; k1 += 16)
            for (int64_t p = 0; p < mc; p += BT__MR)
                for (int64_t k = k1; k < kc && k < k1 + 16; k++) {
                    const float *s = g->A + (k0 + k) * g->M + i0 + p;
                    float *d = Ap + p * kc + k * BT__MR;
                    if (i0 + p + BT__MR <= g->M) memcpy(d, s, sizeof(float) * BT__MR);
                    else for (int64_t r = 0; r < BT__MR; r++) d[r] = i0 + p + r < g->M ? s[r] : 0.f;
                }
        return;
    }
    for (int64_t p = 0; p < mc; p += BT__MR)
        for (int64_t r = 0; r < BT__MR; r++) {
            const float *s = g->A + (i0 + p + r) * g->K + k0;
            float *d = Ap + p * kc + r;
            if (i0 + p + r < g->M) for (int64_t k = 0; k < kc; k++) d[k * BT__MR] = s[k];
            else for (int64_t k = 0; k < kc; k++) d[k * BT__MR] = 0.f;
        }
}
/* Bp <- op(B)[k0 : k0 + kc, j0 : j0 + nc] as NR-column micro-panels, each kc x NR (k-major);
   columns at or past N are zeros */
static void bt__sgemm_pack_b(float *Bp, const bt__sgemm_args *g, int64_t j0, int64_t nc, int64_t k0, int64_t kc) {
    for (int64_t q = 0; q < nc; q += BT__NR, Bp += BT__NR * kc) {
        int64_t nr = g->N - j0 - q < BT__NR ? g->N - j0 - q : BT__NR;
        if (!g->tb && nr == BT__NR) {         /* B [K, N]: NR adjacent floats per k, a plain copy */
            for (int64_t k = 0; k < kc; k++) memcpy(Bp + k * BT__NR, g->B + (k0 + k) * g->N + j0 + q, sizeof(float) * BT__NR);
        } else if (!g->tb) {
            for (int64_t k = 0; k < kc; k++)
                for (int64_t j = 0; j < BT__NR; j++) Bp[k * BT__NR + j] = j < nr ? g->B[(k0 + k) * g->N + j0 + q + j] : 0.f;
        } else {                              /* B [N, K]: one column of op(B) at a time, unit stride */
            for (int64_t j = 0; j < BT__NR; j++) {
                const float *s = g->B + (j0 + q + j) * g->K + k0;
                if (j < nr) for (int64_t k = 0; k < kc; k++) Bp[k * BT__NR + j] = s[k];
                else for (int64_t k = 0; k < kc; k++) Bp[k * BT__NR + j] = 0.f;
            }
        }
    }
}
/* the micro-kernel: acc = (MR x kc tile of A) Bp, an MR x NR tile, then into the mr x nr corner of C at
   c: on the first K slice C = alpha acc + beta C + bias (C not read when beta = 0), else C += alpha acc.
   Element (r, k) of the A tile is a[r ars + k acs]: a packed tile (1, MR) or op(A) = A in place (lda, 1). */
static void bt__sgemm_micro(int64_t kc, const float *a, int64_t ars, int64_t acs, const float *Bp, float *c,
                            int64_t ldc, int64_t mr, int64_t nr, float alpha, float beta, const float *bias, int first) {
    bt__vf acc[BT__MR][BT__NV];
    for (int r = 0; r < BT__MR; r++) for (int v = 0; v < BT__NV; v++) acc[r][v] = bt__vzero();
    for (int64_t k = 0; k < kc; k++, a += acs, Bp += BT__NR) {
        bt__vf b[BT__NV];
        for (int v = 0; v < BT__NV; v++) b[v] = bt__vld(Bp + v * BT__VW);
        for (int r = 0; r < BT__MR; r++) {
            bt__vf x = bt__vbc(a[r * ars]);
            for (int v = 0; v < BT__NV; v++) acc[r][v] = bt__vfma(x, b[v], acc[r][v]);
        }
    }
    if (mr == BT__MR && nr == BT__NR) {
        bt__vf va = bt__vbc(alpha), vb = bt__vbc(beta);
        for (int r = 0; r < BT__MR; r++)
            for (int v = 0; v < BT__NV; v++) {
                float *p = c + r * ldc + v * BT__VW;
                bt__vf x = bt__vmul(va, acc[r][v]);
                if (!first) x = bt__vadd(x, bt__vld(p));
                else {
                    if (beta != 0) x = bt__vfma(vb, bt__vld(p), x);
                    if (bias) x = bt__vadd(x, bt__vld(bias + v * BT__VW));
                }
                bt__vst(p, x);
            }
        return;
    }
    float t[BT__MR * BT__NR];                 /* a ragged edge: through memory */
    for (int r = 0; r < BT__MR; r++) for (int v = 0; v < BT__NV; v++) bt__vst(t + r * BT__NR + v * BT__VW, acc[r][v]);
    for (int64_t r = 0; r < mr; r++)
        for (int64_t j = 0; j < nr; j++) {
            float *p = c + r * ldc + j, x = alpha * t[r * BT__NR + j];
            if (!first) x += *p;
            else { if (beta != 0) x += beta * *p; if (bias) x += bias[j]; }
            *p = x;
        }
}
/* C[i0 : i0 + mc, j0 : j0 + nc] over k in [kb, ke); Ap (mc x KC) and Bp (KC x NC) the caller's buffers.
   A transposed is packed a block at a time; op(A) = A is read in place (its MR rows stream through
   L1 while a B micro-panel stays there), but for the ragged last rows, packed as one tile. */
static void bt__sgemm_block(const bt__sgemm_args *g, float *Ap, float *Bp, int64_t i0, int64_t mc, int64_t j0,
                            int64_t nc, int64_t kb, int64_t ke) {
    for (int64_t k0 = kb;; k0 += BT__KC) {    /* at least one slice: K = 0 still writes beta C + bias */
        int64_t kc = ke - k0 < BT__KC ? ke - k0 : BT__KC;
        bt__sgemm_pack_b(Bp, g, j0, nc, k0, kc);
        if (g->ta) bt__sgemm_pack_a(Ap, g, i0, mc, k0, kc);
        for (int64_t p = 0; p < mc; p += BT__MR) {
            int64_t mr = mc - p < BT__MR ? mc - p : BT__MR;
            const float *a = g->ta ? Ap + p * kc : g->A + (i0 + p) * g->K + k0;
            int64_t ars = g->ta ? 1 : g->K, acs = g->ta ? BT__MR : 1;
            if (!g->ta && mr < BT__MR) { bt__sgemm_pack_a(Ap, g, i0 + p, mr, k0, kc); a = Ap; ars = 1; acs = BT__MR; }
            for (int64_t q = 0; q < nc; q += BT__NR)
                bt__sgemm_micro(kc, a, ars, acs, Bp + q * kc, g->C + (i0 + p) * g->ldc + j0 + q, g->ldc, mr,
                                nc - q < BT__NR ? nc - q : BT__NR, g->alpha, g->beta, g->bias ? g->bias + j0 + q : NULL,
                                k0 == kb);
        }
        if (k0 + kc >= ke) break;
    }
}
static int64_t bt__cdiv(int64_t a, int64_t b) { return (a + b - 1) / b; }
/* the task grid: block sizes mc x nc (multiples of MR, NR) and K parts ks, from the shape alone */
static void bt__sgemm_grid(int64_t M, int64_t N, int64_t K, int64_t *mc, int64_t *nc, int64_t *ks) {
    *mc = bt__cdiv(M, BT__MR) * BT__MR; if (*mc > BT__MC) *mc = BT__MC;
    *nc = bt__cdiv(N, BT__NR) * BT__NR; if (*nc > BT__NC) *nc = BT__NC;
    *ks = 1;
    while (bt__cdiv(M, *mc) * bt__cdiv(N, *nc) * *ks < BT__TASKS) {
        /* a smaller block repacks the other operand once more (K x N or M x K floats); a K part
           costs an M x N sum: split K when it is the longest side */
        if (K / (2 * *ks) >= BT__KC && K >= 2 * (M > N ? M : N)) *ks *= 2;
        else if (*mc >= *nc && *mc > BT__MR) *mc = bt__cdiv(*mc / 2, BT__MR) * BT__MR;
        else if (*nc > BT__NR) *nc = bt__cdiv(*nc / 2, BT__NR) * BT__NR;
        else break;
    }
}
static void bt__sgemm(int ta, int tb, int64_t M, int64_t N, int64_t K, float alpha, const float *A, const float *B,
                      float beta, float *C, const float *bias) {
    if (M <= 0 || N <= 0) return;
    int64_t mc, nc, ks;
    bt__sgemm_grid(M, N, K, &mc, &nc, &ks);
    int64_t nib = bt__cdiv(M, mc), njb = bt__cdiv(N, nc), ntask = nib * njb * ks, kpart = bt__cdiv(K, ks);
    /* K parts after the first go to scratch C's (beta 0, no bias), added to C below */
    float *part = ks > 1 ? (float *)bt_alloc(bt_cpu(), sizeof(float) * (size_t)((ks - 1) * M * N), NULL) : NULL;
    int64_t kcmax = K < BT__KC ? K : BT__KC;
    size_t abytes = (sizeof(float) * (size_t)(mc * kcmax) + 63) / 64 * 64, bbytes = sizeof(float) * (size_t)(kcmax * nc);
    int failed = 0;
    #pragma omp parallel if (2.0 * M * N * K > BT__GEMM_PAR_FLOPS && ntask > 1)
    {
        /* this thread's packing buffers (64-byte aligned), from the caching allocator (thread-safe):
           a malloc of this size per call would map and unmap fresh pages each time */
        char *raw = (char *)bt_try_alloc(bt_cpu(), abytes + bbytes, NULL);
        float *Ap = (float *)raw, *Bp = raw ? (float *)(raw + abytes) : NULL;
        if (!raw) {
            #pragma omp atomic write
            failed = 1;
        }
        #pragma omp for schedule(dynamic, 1)
        for (int64_t t = 0; t < ntask; t++) {
            if (!raw) continue;
            int64_t kp = t / (nib * njb), jb = t / nib % njb, ib = t % nib;
            bt__sgemm_args g = {A, B, bias, C, M, N, K, N, ta, tb, alpha, beta};
            if (kp > 0) { g.C = part + (kp - 1) * M * N; g.bias = NULL; g.beta = 0; }
            int64_t i0 = ib * mc, j0 = jb * nc, kb = kp * kpart, ke = kb + kpart < K ? kb + kpart : K;
            bt__sgemm_block(&g, Ap, Bp, i0, M - i0 < mc ? M - i0 : mc, j0, N - j0 < nc ? N - j0 : nc, kb, ke);
        }
        bt_free(raw);
    }
    if (failed) { bt_free(part); bt_error("matmul: out of host memory for the %zu-byte packing buffers", abytes + bbytes); }
    if (part) {
        #pragma omp parallel for if (M * N > BT__PAR_MIN)
        for (int64_t i = 0; i < M * N; i++)
            for (int64_t p = 0; p < ks - 1; p++) C[i] += part[p * M * N + i];
        bt_free(part);
    }
}
#ifdef BT_BLAS
#include <cblas.h>
/* the same product through the system BLAS (make BLAS=1): bias and beta folded into C first */
static void bt__sgemm_blas(int ta, int tb, int64_t M, int64_t N, int64_t K, float alpha, const float *A, const float *B,
                           float beta, float *C, const float *bias) {
    if (M <= 0 || N <= 0) return;
    if (bias) {
        for (int64_t i = 0; i < M; i++)
            for (int64_t j = 0; j < N; j++) C[i * N + j] = (beta != 0 ? beta * C[i * N + j] : 0.f) + bias[j];
        beta = 1;
    }
    cblas_sgemm(CblasRowMajor, ta ? CblasTrans : CblasNoTrans, tb ? CblasTrans : CblasNoTrans, (int)M, (int)N, (int)K,
                alpha, A, ta ? (int)M : (int)(K ? K : 1), B, tb ? (int)(K ? K : 1) : (int)N, beta, C, (int)N);
}
#endif
/* one matrix product on the CPU for any float dtype (fp32 blocked; others through double) */
static void bt__cpu_gemm(bt_dtype dt, void *C, const void *A, const void *B, const void *bias, int64_t M, int64_t N,
                         int64_t K, int ta, int tb, double alpha, double beta) {
    if (dt == BT_F32) {
#ifdef BT_BLAS
        bt__sgemm_blas(ta, tb, M, N, K, (float)alpha, (const float *)A, (const float *)B, (float)beta, (float *)C, (const float *)bias);
        (void)bt__sgemm;                      /* ours stays compiled: bench/bench_cpu.c compares the two */
#else
        bt__sgemm(ta, tb, M, N, K, (float)alpha, (const float *)A, (const float *)B, (float)beta, (float *)C, (const float *)bias);
#endif
        return;
    }
    #pragma omp parallel for if (M * N * K > 100000)
    for (int64_t i = 0; i < M; i++)
        for (int64_t j = 0; j < N; j++) {
            double s = 0;
            for (int64_t k = 0; k < K; k++)
                s += bt__ld(A, dt, ta ? k * M + i : i * K + k) * bt__ld(B, dt, tb ? j * K + k : k * N + j);
            double v = alpha * s + (beta != 0 ? beta * bt__ld(C, dt, i * N + j) : 0) + (bias ? bt__ld(bias, dt, j) : 0);
            bt__st(C, dt, i * N + j, v);
        }
}
/* batched product on a's device; strides in elements between matrices (0 = broadcast) */
static void bt__gemm(bt_dtype dt, bt_device dev, void *C, const void *A, const void *B, const void *bias, int64_t M,
                     int64_t N, int64_t K, int ta, int tb, int64_t batch, int64_t sA, int64_t sB, int64_t sC,
                     double alpha, double beta) {
    if (dev.type == BT_GPU) {
#ifdef BT_CUDA
        BT__ON_GPU(dev, stream) bt_k_matmul(dt, C, A, B, bias, M, N, K, ta, tb, batch, sA, sB, sC, (float)alpha, (float)beta, bt__g.precision, stream);
#endif
        return;
    }
    size_t es = bt_dtype_size(dt);
    for (int64_t b = 0; b < batch; b++)
        bt__cpu_gemm(dt, (char *)C + b * sC * es, (const char *)A + b * sA * es, (const char *)B + b * sB * es, bias,
                     M, N, K, ta, tb, alpha, beta);
}

static void bt__matmul_back(bt_node *n, bt_tensor *g, bt_tensor **gin) {
    bt_tensor *a = n->saved[0], *b = n->saved[1];
    int ta = (int)n->i[0], tb = (int)n->i[1];
    /* C = op(A) op(B): d op(A) = dC op(B)^T, d op(B) = op(A)^T dC, transposed back where A or B was */
    if (bt__wants(n, 0)) {
        bt_tensor *ga = ta ? bt_matmul_t(b, g, tb, 1) : bt_matmul_t(g, b, 0, !tb);
        gin[0] = bt__sum_to(ga, n->in_shape[0]);
    }
    if (bt__wants(n, 1)) {
        bt_tensor *aa = a, *gg = g;
        if (b->ndim == 2 && a->ndim > 2 && !ta) {      /* a 2-D weight: fold the batch into rows */
            aa = bt_reshape(a, bt_shape2(-1, a->shape[a->ndim - 1]));
            gg = bt_reshape(g, bt_shape2(-1, g->shape[g->ndim - 1]));
        }
        bt_tensor *gb = tb ? bt_matmul_t(gg, aa, 1, ta) : bt_matmul_t(aa, gg, !ta, 0);
        gin[1] = bt__sum_to(gb, n->in_shape[1]);
    }
}
BTDEF bt_tensor *bt_matmul_t(bt_tensor *a, bt_tensor *b, int ta, int tb) {
    bt__need_float(a, "matmul", "a"); bt__need_float(b, "matmul", "b");
    bt__same_device(a, b, "matmul"); bt__same_dtype(a, b, "matmul");
    if (a->ndim == 0 || b->ndim == 0) bt_error("matmul: scalar operand: %s x %s", bt__s(a), bt__s(b));
    if (a->ndim == 1 && ta) bt_error("matmul: transa with a 1-D a %s", bt__s(a));
    if (b->ndim == 1 && tb) bt_error("matmul: transb with a 1-D b %s", bt__s(b));
    if (a->ndim == 1 || b->ndim == 1) {      /* a vector: a as a row, b as a column (temporaries of this call) */
        int64_t ka = a->ndim == 1 ? a->shape[0] : a->shape[a->ndim - (ta ? 2 : 1)];
        int64_t kb = b->ndim == 1 ? b->shape[0] : b->shape[b->ndim - (tb ? 1 : 2)];
        if (ka != kb)                        /* checked before the scope opens: an error leaves no scope behind */
            bt_error("matmul: inner dims differ: %s%s x %s%s (K %lld vs %lld)", bt__s(a), ta ? "^T" : "", bt__s(b), tb ? "^T" : "", (long long)ka, (long long)kb);
        bt_scope_begin();
        bt_tensor *r = b->ndim == 1 ? bt_squeeze(bt_matmul_t(a, bt_unsqueeze(b, 1), ta, 0), -1)
                                    : bt_squeeze(bt_matmul_t(bt_unsqueeze(a, 0), b, 0, tb), -2);
        bt_retain(r);
        bt_scope_end();
        return bt__register(r);
    }
    int64_t M = ta ? a->shape[a->ndim - 1] : a->shape[a->ndim - 2], Ka = ta ? a->shape[a->ndim - 2] : a->shape[a->ndim - 1];
    int64_t Kb = tb ? b->shape[b->ndim - 1] : b->shape[b->ndim - 2], N = tb ? b->shape[b->ndim - 2] : b->shape[b->ndim - 1];
    if (Ka != Kb) bt_error("matmul: inner dims differ: %s%s x %s%s (K %lld vs %lld)", bt__s(a), ta ? "^T" : "", bt__s(b), tb ? "^T" : "", (long long)Ka, (long long)Kb);
    /* batch dims broadcast */
    int nb = (a->ndim > b->ndim ? a->ndim : b->ndim) - 2;
    bt_shape out_s; out_s.ndim = nb + 2;
    int64_t batch = 1;
    for (int d = 0; d < nb; d++) {
        int da = d - (nb - (a->ndim - 2)), db = d - (nb - (b->ndim - 2));
        int64_t x = da >= 0 ? a->shape[da] : 1, y = db >= 0 ? b->shape[db] : 1;
        if (x != y && x != 1 && y != 1) bt_error("matmul: batch dims of %s and %s do not broadcast", bt__s(a), bt__s(b));
        out_s.d[d] = x == 1 ? y : x; batch *= out_s.d[d];
    }
    out_s.d[nb] = M; out_s.d[nb + 1] = N;
    bt_tensor *out = bt__new(out_s, a->dtype, bt_device_of(a));
    bt_tensor *ac, *bc;
    int64_t sA, sB;
    if (b->ndim == 2 && !ta) {               /* fold a's batch into rows: one big product */
        ac = bt__contig(a); bc = bt__contig(b);
        bt__gemm(a->dtype, bt_device_of(a), bt_data_ptr(out), bt_data_ptr(ac), bt_data_ptr(bc), NULL, batch * M, N, Ka, 0, tb, 1, 0, 0, 0, 1.0, 0.0);
    } else {
        bt_shape as = out_s, bs = out_s;
        as.d[nb] = a->shape[a->ndim - 2]; as.d[nb + 1] = a->shape[a->ndim - 1];
        bs.d[nb] = b->shape[b->ndim - 2]; bs.d[nb + 1] = b->shape[b->ndim - 1];
        int abcast = a->ndim == 2, bbcast = b->ndim == 2;   /* a plain matrix: stride 0 over the batch */
        int old = bt_set_grad_enabled(0);    /* the expanded views are temporaries, not graph nodes */
        bt_scope_begin();
        ac = bt__contig(abcast ? a : bt_expand(a, as)); bc = bt__contig(bbcast ? b : bt_expand(b, bs));
        bt_scope_end();
        bt_set_grad_enabled(old);
        sA = abcast ? 0 : as.d[nb] * as.d[nb + 1]; sB = bbcast ? 0 : bs.d[nb] * bs.d[nb + 1];
        bt__gemm(a->dtype, bt_device_of(a), bt_data_ptr(out), bt_data_ptr(ac), bt_data_ptr(bc), NULL, M, N, Ka, ta, tb, batch, sA, sB, M * N, 1.0, 0.0);
    }
    bt_tensor *in[2] = {a, b};
    bt_node *n = bt__record("matmul", bt__matmul_back, out, in, 2);
    if (n) { n->i[0] = ta; n->i[1] = tb; bt__save(n, ac); bt__save(n, bc); }
    bt_release(ac); bt_release(bc);
    return bt__register(out);
}
BTDEF bt_tensor *bt_matmul(bt_tensor *a, bt_tensor *b) { return bt_matmul_t(a, b, 0, 0); }

/* y = x w^T + b over the last dim; backward: dx = dy w, dw = dy^T x (rows folded), db = sum dy */
/* Gradient sinks. A backward may add input i's gradient straight into the .grad of the leaf the
   edge leads to, directly or through one cast node (the bf16 compute copy of an fp32 master
   weight), instead of returning it: when that .grad exists, is contiguous, has the input's element
   count and a dtype the kernel can write (the compute dtype, or fp32 from bf16/f16 on a GPU). The
   weight gradient's GEMM then accumulates (beta = 1) into the fp32 buffer in its epilogue, and the
   bf16 temporary, the cast back and the separate add disappear. The node returns NULL for that
   input; the engine still counts the edge, so the leaf's hooks fire when its gradient is final. */
/* the leaf input i's edge leads to, directly or through one cast node; NULL if none */
static bt_tensor *bt__edge_leaf(bt_node *n, int i) {
    bt_tensor *leaf = n->next[i].leaf;
    bt_node *c = n->next[i].node;
    if (!leaf && c && c->backward == bt__cast_back && c->n_in == 1) leaf = c->next[0].leaf;
    return leaf;
}
/* a gradient we may add into in place: ours alone (no other reference, no other view) */
static int bt__exclusive(bt_tensor *t) { return t->refcount == 1 && t->storage->refcount == 1 && bt_is_contiguous(t); }
/* The gradient already summed for input i's producer node (another consumer's backward ran first,
   e.g. a residual stream's skip path before its layernorm), when a backward kernel may add its
   input gradient into it in place (exclusive, same shape and dtype): one pass over it instead of a
   separate result and an add. The engine then gets gin[i] = NULL and still counts the edge. */
static bt_tensor *bt__pending_grad_sink(bt_node *n, int i) {
    bt_node *m = n->next[i].node;
    if (!m || !m->grad || !bt__exclusive(m->grad) || m->grad->dtype != n->in_dtype[i]) return NULL;
    const bt_shape s = n->in_shape[i];
    if (m->grad->ndim != s.ndim || memcmp(m->grad->shape, s.d, sizeof(int64_t) * (size_t)s.ndim)) return NULL;
    m->grad->storage->version++;
    return m->grad;
}
static bt_tensor *bt__grad_sink(bt_node *n, int i, bt_dtype compute) {
    bt_tensor *leaf = bt__edge_leaf(n, i);
    if (!leaf || !leaf->grad || !bt_is_contiguous(leaf->grad)) return NULL;
    bt_tensor *g = leaf->grad;
    int64_t want = 1;
    for (int d = 0; d < n->in_shape[i].ndim; d++) want *= n->in_shape[i].d[d];
    if (bt_numel(g) != want) return NULL;
    int writable = g->dtype == compute || (bt__is_gpu(g) && g->dtype == BT_F32 && (compute == BT_BF16 || compute == BT_F16));
    return writable ? g : NULL;
}
/* sink += alpha op(A) op(B) ([M, N]), A and B of dtype dt */
static void bt__gemm_into(bt_tensor *sink, bt_dtype dt, const void *A, const void *B, int64_t M, int64_t N, int64_t K, int ta,
                          int tb) {
    sink->storage->version++;
    if (bt__is_gpu(sink)) {
#ifdef BT_CUDA
        BT__ON_GPU(bt_device_of(sink), stream)
            bt_k_matmul_out(dt, sink->dtype, bt_data_ptr(sink), A, B, NULL, M, N, K, ta, tb, 1, 0, 0, 0, 1.f, 1.f, bt__g.precision, stream);
#endif
        return;
    }
    bt__gemm(dt, bt_cpu(), bt_data_ptr(sink), A, B, NULL, M, N, K, ta, tb, 1, 0, 0, 0, 1.0, 1.0);
}

/* Column sums left with a gradient. A layernorm backward on a GPU also sums the columns of the gx
   it writes (in the same pass: bt_k_layernorm_backward's gx_colsum) and leaves them on gx's storage;
   the fused attention backward does the same for a packed qkv gradient
   (bt_k_attention_backward_colsum). In a residual network that gx is the output gradient of the
   linear layer before it (attention and MLP projections), gqkv that of the qkv projection, and their
   bias gradients are exactly those sums: bt__bias_grad_reduce takes them instead of reading the
   [rows, C] gradient again, when the storage has not been written since (its version) and the
   gradient covers it whole (BT_FUSE_COLSUM: both on or off). */
static int64_t bt__colsum_reuses;   /* bias gradients that took the sums left (bt_grad_colsum_reuses) */
BTDEF int64_t bt_grad_colsum_reuses(void) { return bt__colsum_reuses; }
#ifdef BT_CUDA
/* t covers its storage whole, as [rows, cols] */
static int bt__covers_storage(const bt_tensor *t, int64_t cols) {
    return t->offset == 0 && t->ndim >= 1 && t->shape[t->ndim - 1] == cols && bt_is_contiguous(t) &&
           (size_t)bt_numel(t) * bt_dtype_size(t->dtype) == t->storage->nbytes;
}
/* a [C] fp32 buffer for the column sums of gx, to be handed to the kernel that writes gx, or NULL */
static float *bt__colsum_for(bt_tensor *gx, int64_t C) {
    if (!gx || !bt__is_gpu(gx) || !bt__fused(BT_FUSE_COLSUM) || !bt__covers_storage(gx, C)) return NULL;
    return (float *)bt_alloc(bt_device_of(gx), (size_t)C * sizeof(float), bt__stream_for(bt_device_of(gx)));
}
/* after that kernel: the sums stay with gx's storage at its current version */
static void bt__colsum_leave(bt_tensor *gx, float *cs, int64_t C) {
    if (!cs) return;
    bt_storage *s = gx->storage;
    if (s->colsum) bt_free(s->colsum);
    s->colsum = cs; s->colsum_cols = C; s->colsum_version = s->version;
}
static const float *bt__cached_colsum(const bt_tensor *g2) {
    const bt_storage *s = g2->storage;
    if (!s->colsum || s->colsum_version != s->version || !bt__covers_storage(g2, s->colsum_cols) || g2->ndim != 2) return NULL;
    return s->colsum;
}
#endif
/* on a GPU: the column sums of src [rows, C] (dtype sdt) as input ib's gradient: added into the
   fp32 sink; into a bf16 sink summed in fp32 and added with one rounding (sums already made, the
   one row of fp32 that a layernorm or attention backward left, go in by that one kernel); without
   a sink summed in fp32 and returned in gin rounded to dt */
static void bt__bias_grad_sums(int ib, bt_tensor *sink, bt_dtype dt, bt_device dev, bt_dtype sdt, const void *src,
                               int64_t rows, int64_t C, bt_tensor **gin) {
#ifdef BT_CUDA
    if (sink) sink->storage->version++;
    if (sink && sink->dtype != BT_F32 && rows == 1 && sdt == BT_F32) {
        BT__ON_GPU(dev, stream) bt_k_add_f32_into(sink->dtype, bt_data_ptr(sink), (const float *)src, C, stream);
        return;
    }
    bt_tensor *acc = sink;
    if (!sink || sink->dtype != BT_F32) { acc = bt__new(bt_shape1(C), BT_F32, dev); bt_fill_(acc, 0.0); }
    BT__ON_GPU(dev, stream) bt_k_sum_rows_acc(sdt, (float *)bt_data_ptr(acc), src, rows, C, stream);
    if (acc == sink) return;
    if (sink) { BT__ON_GPU(dev, stream) bt_k_add_f32_into(sink->dtype, bt_data_ptr(sink), (const float *)bt_data_ptr(acc), C, stream); }
    else gin[ib] = bt_cast(acc, dt);   /* bt_cast registers its result */
    bt_release(acc);
#else
    (void)ib; (void)sink; (void)dt; (void)dev; (void)sdt; (void)src; (void)rows; (void)C; (void)gin;
#endif
}
/* input ib's bias gradient, the column sums of g2 [rows, out]. On a GPU, when the leaf has a .grad
   to take it (bt__grad_sink), the sums are made in fp32 from the ones left (bt__cached_colsum) or
   from g2 and added straight into the .grad (fp32, or g2's dtype with one rounding: bf16
   gradients). Else the reduction's, in gin[ib]. */
static void bt__bias_grad_reduce(bt_node *n, int ib, bt_tensor *g2, bt_tensor **gin) {
    bt_tensor *sink = bt__is_gpu(g2) ? bt__grad_sink(n, ib, g2->dtype) : NULL;
    if (sink) {
#ifdef BT_CUDA
        int64_t C = g2->shape[1];
        const float *cs = bt__cached_colsum(g2);
        if (cs) bt__colsum_reuses++;
        if (cs) bt__bias_grad_sums(ib, sink, g2->dtype, bt_device_of(g2), BT_F32, cs, 1, C, gin);   /* += the sums left */
        else bt__bias_grad_sums(ib, sink, g2->dtype, bt_device_of(g2), g2->dtype, bt_data_ptr(g2), g2->shape[0], C, gin);
#endif
        return;
    }
    int mask[2] = {1, 0};
    gin[ib] = bt__register(bt__reduce(g2, mask, BT_REDUCE_SUM, 0, NULL));
}
/* the weight gradient of y = x w^T (+ b) for input iw, dw = g2^T x2 ([out, in], the rows summed),
   and, when ib >= 0, the bias gradient for input ib: into the leaves' .grad where bt__grad_sink
   allows (the GEMM accumulates with beta = 1), else returned in gin. The bias gradient is the
   column sums of g2 (bt_k_sum_rows_acc's fast path into the fp32 .grad on a GPU), not cuBLASLt's
   BGRADB epilogue on the weight GEMM: measured on an H100 at GPT-2's B=128 shapes, cuBLASLt runs
   that epilogue as a kernel of its own reading g2 at about 2.1 TB/s, slower than the column-sum
   kernel (bench/RESULTS.md). */
static void bt__linear_wgrad(bt_node *n, int iw, int ib, bt_tensor *g2, bt_tensor *x2, bt_tensor **gin) {
    int64_t rows = x2->shape[0], in_f = x2->shape[1], out_f = g2->shape[1];
    bt_dtype dt = g2->dtype;
    if (bt__wants(n, iw)) {
        bt_tensor *sink = bt__grad_sink(n, iw, dt);
        if (sink) bt__gemm_into(sink, dt, bt_data_ptr(g2), bt_data_ptr(x2), out_f, in_f, rows, 1, 0);   /* dw += g^T x */
        else {
            bt_tensor *gw = bt__new(bt_shape2(out_f, in_f), dt, bt_device_of(g2));
            bt__gemm(dt, bt_device_of(g2), bt_data_ptr(gw), bt_data_ptr(g2), bt_data_ptr(x2), NULL, out_f, in_f, rows, 1, 0, 1, 0, 0, 0, 1.0, 0.0);
            gin[iw] = bt__register(gw);
        }
    }
    if (ib >= 0 && bt__wants(n, ib)) bt__bias_grad_reduce(n, ib, g2, gin);
}

/* the gradients of y = x w^T (+ b) for inputs 0 (x), 1 (w) and, when it has one, 2 (b); x2: x as
   [rows, in] (the saved one, or one remade: bt_layernorm_linear) */
static void bt__linear_grads(bt_node *n, bt_tensor *g, int has_bias, bt_tensor *x2, bt_tensor **gin) {
    bt_tensor *w = n->saved[1];
    int64_t out_f = w->shape[0], in_f = w->shape[1], rows = x2->shape[0];
    bt_tensor *gc = bt__contig(g), *g2 = bt__view_dense(gc, bt_shape2(rows, out_f));
    bt_device dev = bt_device_of(g);
    if (bt__wants(n, 0)) {
        bt_tensor *gx = bt__new(n->in_shape[0], g->dtype, dev);
        bt__gemm(g->dtype, dev, bt_data_ptr(gx), bt_data_ptr(g2), bt_data_ptr(w), NULL, rows, in_f, out_f, 0, 0, 1, 0, 0, 0, 1.0, 0.0);
        gin[0] = bt__register(gx);
    }
    bt__linear_wgrad(n, 1, has_bias ? 2 : -1, g2, x2, gin);
    bt_release(g2); bt_release(gc);
}
static void bt__linear_back(bt_node *n, bt_tensor *g, bt_tensor **gin) { bt__linear_grads(n, g, n->n_in > 2, n->saved[0], gin); }
/* r + linear(x, w, b): the residual's gradient is g itself, as add's is */
static void bt__linear_add_back(bt_node *n, bt_tensor *g, bt_tensor **gin) {
    bt__linear_grads(n, g, n->i[0] != 0, n->saved[0], gin);
    if (bt__wants(n, 3)) gin[3] = bt__register(bt_retain(g));
}
/* a normalisation's input, parameters and eps, for a product that remakes its output in the backward
   instead of keeping it (bt_layernorm_linear, bt_rmsnorm_linear, bt_layernorm_mlp_gelu: bt_nn.h);
   rms: an RMSNorm (w only, b NULL), else a layernorm (w and b) */
typedef struct { bt_tensor *x, *w, *b; double eps; int rms; } bt__ln_src;
static void bt__linear_ln_back(bt_node *n, bt_tensor *g, bt_tensor **gin);   /* bt_nn.h */
/* y = x w^T (+ b); ln NULL, or x = layernorm(ln->x) (or RMSNorm) remade in the backward: the node
   keeps ln->x [rows, C], w, ln->w and a layernorm's ln->b (i[1]: a bias, i[2]: rms, f[0]: eps) in
   place of x */
static bt_tensor *bt__linear(bt_tensor *x, bt_tensor *w, bt_tensor *b, const bt__ln_src *ln) {
    bt__need_float(x, "linear", "x"); bt__need_float(w, "linear", "w");
    bt__same_device(x, w, "linear"); bt__same_dtype(x, w, "linear");
    if (w->ndim != 2 || x->ndim < 1 || x->shape[x->ndim - 1] != w->shape[1])
        bt_error("linear: x %s needs last dim = in of w %s ([out, in])", bt__s(x), bt__s(w));
    if (b) {
        bt__need_float(b, "linear", "b"); bt__same_device(x, b, "linear"); bt__same_dtype(x, b, "linear");
        if (b->ndim != 1 || b->shape[0] != w->shape[0]) bt_error("linear: bias %s must be [%lld]", bt__s(b), (long long)w->shape[0]);
    }
    int64_t in_f = w->shape[1], out_f = w->shape[0], rows = bt_numel(x) / (in_f ? in_f : 1);
    bt_tensor *xc = bt__contig(x), *wc = bt__contig(w), *bc = b ? bt__contig(b) : NULL;
    bt_tensor *x2 = bt__view_dense(xc, bt_shape2(rows, in_f));
    bt_shape os = bt_shape_of(x); os.d[os.ndim - 1] = out_f;
    bt_tensor *y = bt__new(os, x->dtype, bt_device_of(x));
    bt__gemm(x->dtype, bt_device_of(x), bt_data_ptr(y), bt_data_ptr(x2), bt_data_ptr(wc), bc ? bt_data_ptr(bc) : NULL,
             rows, out_f, in_f, 0, 1, 1, 0, 0, 0, 1.0, 0.0);
    bt_tensor *in[3] = {x, w, b};
    const char *op = !ln ? "linear" : ln->rms ? "rmsnorm_linear" : "layernorm_linear";
    bt_node *n = bt__record(op, ln ? bt__linear_ln_back : bt__linear_back, y, in, b ? 3 : 2);
    if (n && ln) {
        bt_tensor *lx = bt__view_dense(ln->x, bt_shape2(rows, in_f)), *lw = bt__contig(ln->w), *lb = ln->rms ? NULL : bt__contig(ln->b);
        bt__save(n, lx); bt__save(n, wc); bt__save(n, lw);
        if (lb) bt__save(n, lb);
        n->i[1] = b != NULL; n->i[2] = ln->rms;
        n->f[0] = ln->eps;
        bt_release(lx); bt_release(lw); bt_release(lb);
    } else if (n) { bt__save(n, x2); bt__save(n, wc); }
    bt_release(xc); bt_release(wc); bt_release(bc); bt_release(x2);
    return bt__register(y);
}
BTDEF bt_tensor *bt_linear(bt_tensor *x, bt_tensor *w, bt_tensor *b) { return bt__linear(x, w, b, NULL); }

BTDEF bt_tensor *bt_linear_add(bt_tensor *x, bt_tensor *w, bt_tensor *b, bt_tensor *r) {
    bt__need_float(x, "linear_add", "x");
    if (!r) bt_error("linear_add: no residual r (bt_linear is the op without one)");
    int fusable = bt__is_gpu(x) && bt__fused(BT_FUSE_EPILOGUES) && x->dtype != BT_F64 && r && r->dtype == x->dtype && bt__is_gpu(r) &&
                  bt_device_of(r).index == bt_device_of(x).index && w->ndim == 2 && x->ndim >= 1 && x->shape[x->ndim - 1] == w->shape[1];
    if (fusable) {   /* r must have exactly y's shape (no broadcast) */
        bt_shape os = bt_shape_of(x); os.d[os.ndim - 1] = w->shape[0];
        fusable = r->ndim == os.ndim && !memcmp(r->shape, os.d, sizeof(int64_t) * (size_t)os.ndim);
    }
    if (!fusable) return bt_add(r, bt_linear(x, w, b));      /* the ops check their operands */
    bt__need_float(w, "linear_add", "w"); bt__same_device(x, w, "linear_add"); bt__same_dtype(x, w, "linear_add");
    if (b) {
        bt__need_float(b, "linear_add", "b"); bt__same_device(x, b, "linear_add"); bt__same_dtype(x, b, "linear_add");
        if (b->ndim != 1 || b->shape[0] != w->shape[0]) bt_error("linear_add: bias %s must be [%lld]", bt__s(b), (long long)w->shape[0]);
    }
    int64_t in_f = w->shape[1], rows = bt_numel(x) / (in_f ? in_f : 1);
    bt_tensor *xc = bt__contig(x), *wc = bt__contig(w), *bc = b ? bt__contig(b) : NULL, *rc = bt__contig(r);
    bt_tensor *x2 = bt__view_dense(xc, bt_shape2(rows, in_f));
    bt_tensor *y = bt__new(bt_shape_of(r), x->dtype, bt_device_of(x));
#ifdef BT_CUDA
    BT__ON_GPU(bt_device_of(x), stream)
        bt_k_matmul_add(x->dtype, bt_data_ptr(y), bt_data_ptr(x2), bt_data_ptr(wc), bc ? bt_data_ptr(bc) : NULL, bt_data_ptr(rc), rows,
                        w->shape[0], in_f, 0, 1, bt__g.precision, stream);
#endif
    bt_tensor *in[4] = {x, w, b, r};
    bt_node *n = bt__record("linear_add", bt__linear_add_back, y, in, 4);
    if (n) { n->i[0] = b != NULL; bt__save(n, x2); bt__save(n, wc); }
    bt_release(xc); bt_release(wc); bt_release(bc); bt_release(rc); bt_release(x2);
    return bt__register(y);
}

/* the network ops (GPT-2's MLP, softmax, norms, SwiGLU, RoPE, embedding, losses, attention): bt_nn.h */
#include "bt_nn.h"

/* ---- concat / split ---- */
static void bt__concat_back(bt_node *n, bt_tensor *g, bt_tensor **gin) {
    int dim = (int)n->i[0]; int64_t off = 0;
    for (int k = 0; k < n->n_in; k++) {
        int64_t len = n->in_shape[k].d[dim];
        if (bt__wants(n, k)) gin[k] = bt_narrow(g, dim, off, len);
        off += len;
    }
}
BTDEF bt_tensor *bt_concat(bt_tensor **ts, int n, int dim) {
    if (n <= 0 || !ts) bt_error("concat: no tensors");
    for (int k = 0; k < n; k++) bt__need(ts[k], "concat", "a tensor");
    bt_tensor *a = ts[0];
    dim = bt__norm_dim(dim, a->ndim, "concat");
    bt_shape s = bt_shape_of(a); s.d[dim] = 0;
    for (int k = 0; k < n; k++) {
        bt_tensor *t = ts[k];
        bt__same_device(a, t, "concat"); bt__same_dtype(a, t, "concat");
        if (t->ndim != a->ndim) bt_error("concat: %s and %s differ in dims", bt__s(a), bt__s(t));
        for (int d = 0; d < a->ndim; d++)
            if (d != dim && t->shape[d] != a->shape[d]) bt_error("concat: %s and %s differ outside dim %d", bt__s(a), bt__s(t), dim);
        s.d[dim] += t->shape[dim];
    }
    if (n > BT_NODE_MAX_IN) {                /* more pieces than a node holds: concat in groups */
        int ng = (n + BT_NODE_MAX_IN - 1) / BT_NODE_MAX_IN;
        bt_tensor *groups[BT_NODE_MAX_IN * BT_NODE_MAX_IN];
        if (ng > BT_NODE_MAX_IN) bt_error("concat: %d tensors (at most %d)", n, BT_NODE_MAX_IN * BT_NODE_MAX_IN);
        bt_scope_begin();                    /* the groups are temporaries of this call */
        for (int gi = 0; gi < ng; gi++) {
            int lo = gi * BT_NODE_MAX_IN, cnt = n - lo < BT_NODE_MAX_IN ? n - lo : BT_NODE_MAX_IN;
            groups[gi] = bt_concat(ts + lo, cnt, dim);
        }
        bt_tensor *out = bt_retain(bt_concat(groups, ng, dim));
        bt_scope_end();
        return bt__register(out);
    }
    bt_tensor *out = bt__new(s, a->dtype, bt_device_of(a));
    int64_t off = 0;
    for (int k = 0; k < n; k++) {
        int64_t shape[BT_MAX_DIMS];
        memcpy(shape, out->shape, sizeof shape); shape[dim] = ts[k]->shape[dim];
        bt_tensor *slot = bt__view_raw(out, out->ndim, shape, out->stride, out->offset + off * out->stride[dim]);
        bt__copy_same_device(slot, ts[k]);
        bt_release(slot);
        off += ts[k]->shape[dim];
    }
    bt_node *nd = bt__record("concat", bt__concat_back, out, ts, n);
    if (nd) nd->i[0] = dim;
    return bt__register(out);
}
BTDEF void bt_split(bt_tensor *x, const int64_t *sizes, int n, int dim, bt_tensor **out) {
    bt__need(x, "split", "x");
    dim = bt__norm_dim(dim, x->ndim, "split");
    int64_t total = 0;
    for (int k = 0; k < n; k++) { if (sizes[k] < 0) bt_error("split: negative size %lld", (long long)sizes[k]); total += sizes[k]; }
    if (total != x->shape[dim]) bt_error("split: sizes add to %lld, dim %d of %s is %lld", (long long)total, dim, bt__s(x), (long long)x->shape[dim]);
    int64_t off = 0;
    for (int k = 0; k < n; k++) { out[k] = bt_narrow(x, dim, off, sizes[k]); off += sizes[k]; }
}

#endif /* BT_TENSOR_IMPLEMENTATION_DONE */
#endif /* BT_TENSOR_IMPLEMENTATION */
