/* bt_autograd.h - BluTrain-C reverse-mode autograd engine and optimizers, v0.1.

   USAGE
     #define BT_AUTOGRAD_IMPLEMENTATION (with BT_TENSOR_ and BT_ALLOC_IMPLEMENTATION) in *one* file.

     bt_scope_begin();
     bt_tensor *loss = model_forward(...);     // ops record nodes (bt_tensor.h)
     bt_backward(loss);                        // grads accumulate into each leaf's ->grad
     bt_scope_end();
     bt_adamw_step(&opt, lr);                  // one fused update over every parameter

   THE ENGINE
     bt_backward walks the graph from the output in reverse topological order (each node runs once,
     after every consumer of its outputs has contributed its gradient). Gradients of leaves are
     accumulated (+=) into ->grad, so two backward calls add up (gradient accumulation). A node's
     saved tensors are released as soon as it has run, and the graph is freed once it has run
     (retain_graph is not supported: run the forward again). A saved tensor whose storage version
     moved since it was saved is an error naming the op (an illegal in-place write).
     Gradient-ready hooks fire for a leaf once its gradient is complete for this backward pass
     (DDP starts its all-reduce there).

   OPTIMIZERS
     AdamW (decoupled weight decay, bias correction) and SGD with momentum over a list of fp32
     parameters; optional global grad-norm clipping computed on the device without a host sync.
     bt_lr_cosine: linear warmup then cosine decay to a floor.
*/
#ifndef BT_AUTOGRAD_H
#define BT_AUTOGRAD_H
#include "bt_tensor.h"

#ifdef __cplusplus
extern "C" {
#endif

BTDEF void bt_backward(bt_tensor *out);                        /* out: one element; seed 1 */
BTDEF void bt_backward_with(bt_tensor *out, bt_tensor *gout);  /* seed gout (same shape as out) */
BTDEF void bt_free_graph(bt_tensor *out);                      /* drop the graph without running it */

typedef void (*bt_grad_hook_fn)(bt_tensor *leaf, void *user);
/* fn(leaf, user) runs when leaf's gradient is complete during a backward pass */
BTDEF void bt_register_grad_hook(bt_tensor *leaf, bt_grad_hook_fn fn, void *user);
BTDEF void bt_clear_grad_hooks(void);

BTDEF void bt_zero_grad(bt_tensor **params, int n);             /* zero existing grads in place */

/* ---- optimizers ---- */
typedef struct {
    bt_tensor **params; int n;
    float beta1, beta2, eps, weight_decay;
    float max_grad_norm;          /* > 0: clip the global L2 norm of all grads to this */
    int step;
    bt_tensor **m, **v;           /* fp32 state, one per param */
    unsigned char *decay;         /* per param: 1 = apply weight decay (default: ndim >= 2) */
    bt_tensor *grad_norm;         /* fp32 scalar on the params' device: the last step's norm */
    bt_tensor *clip_scale;        /* fp32 scalar: min(1, max_norm / norm) */
} bt_adamw;

BTDEF void bt_adamw_init(bt_adamw *opt, bt_tensor **params, int n, float beta1, float beta2, float eps,
                         float weight_decay, float max_grad_norm);
BTDEF void bt_adamw_step(bt_adamw *opt, float lr);
BTDEF void bt_adamw_free(bt_adamw *opt);

typedef struct {
    bt_tensor **params; int n;
    float momentum, weight_decay;
    bt_tensor **buf;
} bt_sgd;
BTDEF void bt_sgd_init(bt_sgd *opt, bt_tensor **params, int n, float momentum, float weight_decay);
BTDEF void bt_sgd_step(bt_sgd *opt, float lr);
BTDEF void bt_sgd_free(bt_sgd *opt);

/* global L2 norm of the grads, as an fp32 scalar tensor on the grads' device (no host sync) */
BTDEF bt_tensor *bt_grad_norm(bt_tensor **params, int n);
/* linear warmup over `warmup` steps to max_lr, then cosine to min_lr at `total` */
BTDEF double bt_lr_cosine(int step, int warmup, int total, double max_lr, double min_lr);

#ifdef __cplusplus
}
#endif
#endif /* BT_AUTOGRAD_H */
