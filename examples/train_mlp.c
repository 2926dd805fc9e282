/* train_mlp.c - a small MLP trained with AdamW: the headers used as a library, on a CPU or a GPU.
   Built and run by make test (the CPU build) and by the GPU suite (the CUDA build):

     cc -O3 -std=c11 -fopenmp -I. examples/train_mlp.c -o train_mlp -lm && ./train_mlp
     nvcc -O3 -std=c++17 -x cu -gencode=arch=compute_90a,code=sm_90a -Xcompiler -fopenmp -I. \
          examples/train_mlp.c -o train_mlp_cuda -lcublas -lcublasLt -lgomp -lm && ./train_mlp_cuda --device cuda

   The task: 2-D points in four interleaved spirals, labelled by their spiral (a classic that a
   linear model cannot fit). The model: linear 2 -> 64, GELU, linear 64 -> 64, GELU, linear
   64 -> 4, cross-entropy; AdamW on the six tensors, the gradients zeroed before each backward.
   It prints the loss and the accuracy every 50 steps and exits 0 when the final accuracy
   reaches 90% (1 otherwise; 77, the skip code, when --device cuda finds no GPU). */
#define BT_ALLOC_IMPLEMENTATION
#define BT_TENSOR_IMPLEMENTATION
#define BT_AUTOGRAD_IMPLEMENTATION
#define BT_OPTIM_IMPLEMENTATION
#include "bt_autograd.h"
#include "bt_optim.h"
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum { N = 1024, CLASSES = 4, HIDDEN = 64, STEPS = 200 };
static const double PI = 3.14159265358979323846;

/* N points, N / CLASSES per spiral: radius r in (0, 1], angle 7 r + the spiral's offset, plus noise */
static void make_spirals(float *xy, int32_t *label) {
    for (int i = 0; i < N; i++) {
        int c = i % CLASSES;
        double r = (double)(i / CLASSES + 1) / (N / CLASSES);
        double a = 7.0 * r + 2.0 * PI * c / CLASSES + 0.15 * (bt_philox_uniform(5, (uint64_t)i) - 0.5);
        xy[2 * i] = (float)(r * cos(a)); xy[2 * i + 1] = (float)(r * sin(a));
        label[i] = c;
    }
}

int main(int argc, char **argv) {
    bt_device dev = bt_cpu();
    if (argc == 3 && !strcmp(argv[1], "--device") && !strcmp(argv[2], "cuda")) {
        if (bt_cuda_device_count() == 0) { printf("train_mlp: no GPU (or a CPU build): skipped\n"); return 77; }
        dev = bt_cuda_device(0);
    } else if (argc != 1) {
        fprintf(stderr, "usage: train_mlp [--device cuda]\n");
        return 2;
    }
    float xy[2 * N];
    int32_t label[N];
    make_spirals(xy, label);
    bt_tensor *x = bt_from_data(xy, bt_shape2(N, 2), BT_F32, dev), *y = bt_from_data(label, bt_shape1(N), BT_I32, dev);

    /* the parameters: weights N(0, 1/fan_in), biases 0 */
    const int64_t shape[3][2] = {{HIDDEN, 2}, {HIDDEN, HIDDEN}, {CLASSES, HIDDEN}};
    bt_tensor *params[6];
    for (int l = 0; l < 3; l++) {
        params[2 * l] = bt_randn(bt_shape2(shape[l][0], shape[l][1]), BT_F32, dev, 100 + (uint64_t)l);
        bt_mul_scalar_(params[2 * l], 1.0 / sqrt((double)shape[l][1]));
        params[2 * l + 1] = bt_zeros(bt_shape1(shape[l][0]), BT_F32, dev);
    }
    for (int i = 0; i < 6; i++) bt_set_requires_grad(params[i], 1);
    bt_adamw opt;
    bt_adamw_init(&opt, params, 6, 0.9f, 0.999f, 1e-8f, 0.0f, 1.0f);

    double loss = 0, acc = 0;
    for (int step = 1; step <= STEPS; step++) {
        bt_zero_grad(params, 6);                       /* bt_adamw_step leaves the gradients: zero them */
        bt_scope_begin();
        bt_tensor *h = bt_gelu(bt_linear(x, params[0], params[1]));
        h = bt_gelu(bt_linear(h, params[2], params[3]));
        bt_tensor *logits = bt_linear(h, params[4], params[5]), *l = bt_cross_entropy(logits, y, CLASSES, -1);
        bt_backward(l);
        loss = bt_item(l);
        if (step % 50 == 0) {                           /* accuracy: the largest logit's class */
            float lg[N * CLASSES];
            bt_to_host(logits, lg, BT_F32);
            int right = 0;
            for (int i = 0; i < N; i++) {
                int best = 0;
                for (int c = 1; c < CLASSES; c++) if (lg[i * CLASSES + c] > lg[i * CLASSES + best]) best = c;
                right += best == label[i];
            }
            acc = (double)right / N;
            printf("step %3d | loss %.4f | accuracy %.1f%%\n", step, loss, 100 * acc);
        }
        bt_scope_end();
        bt_adamw_step(&opt, 1e-2f * (float)(0.5 * (1 + cos(PI * step / STEPS))));   /* cosine to 0 */
    }
    printf("%s: final loss %.4f, accuracy %.1f%%\n", dev.type == BT_GPU ? "cuda" : "cpu", loss, 100 * acc);
    bt_adamw_free(&opt);
    for (int i = 0; i < 6; i++) bt_release(params[i]);
    bt_release(x); bt_release(y);
    return acc >= 0.9 ? 0 : 1;
}
