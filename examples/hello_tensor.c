/* hello_tensor.c - the smallest program on the headers: two tensors, an op chain, its gradient.
   It is the README's first example, built and run by make test:

     cc -O3 -std=c11 -fopenmp -I. examples/hello_tensor.c -o hello_tensor -lm && ./hello_tensor

   loss = mean(tanh(x w)) for x [4, 8], w [8, 3]; bt_backward fills w->grad with d loss / d w,
   checked here against a central difference of the loss (it exits 1 when they disagree). */
#define BT_ALLOC_IMPLEMENTATION
#define BT_TENSOR_IMPLEMENTATION
#define BT_AUTOGRAD_IMPLEMENTATION
#include "bt_autograd.h"          /* brings bt_tensor.h and bt_alloc.h */
#include <math.h>
#include <stdio.h>

static double loss_of(bt_tensor *x, bt_tensor *w) {   /* the forward pass alone, in a scope of its own */
    bt_scope_begin();
    double l = bt_item(bt_mean(bt_tanh(bt_matmul(x, w)), NULL, 0, 0));
    bt_scope_end();
    return l;
}

int main(void) {
    bt_tensor *x = bt_randn(bt_shape2(4, 8), BT_F32, bt_cpu(), 1);
    bt_tensor *w = bt_randn(bt_shape2(8, 3), BT_F32, bt_cpu(), 2);
    bt_set_requires_grad(w, 1);
    bt_scope_begin();                                  /* the temporaries die at the scope's end */
    bt_tensor *loss = bt_mean(bt_tanh(bt_matmul(x, w)), NULL, 0, 0);
    bt_backward(loss);                                 /* w->grad = d loss / d w */
    printf("loss %.6f\n", bt_item(loss));
    bt_scope_end();

    /* d loss / d w[0][0] by a central difference, against the backward pass's */
    const int64_t at[2] = {0, 0};
    float *w00 = (float *)bt_data_ptr(w);              /* a CPU tensor's first element */
    double g = bt_get(w->grad, at), h = 1e-2, keep = *w00;
    *w00 = (float)(keep + h); double up = loss_of(x, w);
    *w00 = (float)(keep - h); double down = loss_of(x, w);
    *w00 = (float)keep;
    double fd = (up - down) / (2 * h);
    printf("d loss / d w[0][0]: backward %.6f, central difference %.6f\n", g, fd);
    bt_release(x); bt_release(w);
    return fabs(g - fd) <= 1e-3 * fmax(1.0, fabs(fd)) ? 0 : 1;
}
