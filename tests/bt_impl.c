/* bt_impl.c - every header's implementation in one translation unit (stb's "define it in one file").
   make compiles it once per build flavour (build/cpu/bt_impl.o with cc, build/asan/ with ASan and
   UBSan, build/cuda/ with nvcc, where it holds every kernel) and links that object into the
   programs and the tests that do not compile the implementations themselves; those define
   BT_LINKED when they include train_gpt2.c, which then leaves its implementation defines out. */
#define _POSIX_C_SOURCE 200809L   /* bt_data.h, bt_dist.h, bt_ckpt.h: POSIX.1-2008 */
#define BT_ALLOC_IMPLEMENTATION
#define BT_TENSOR_IMPLEMENTATION
#define BT_AUTOGRAD_IMPLEMENTATION
#define BT_OPTIM_IMPLEMENTATION
#define BT_DATA_IMPLEMENTATION
#define BT_DIST_IMPLEMENTATION
#define BT_CKPT_IMPLEMENTATION
#define BT_PARALLEL_IMPLEMENTATION
#define GPT2_IMPLEMENTATION
#define GPT2_IO_IMPLEMENTATION
#define GPT2_PARALLEL_IMPLEMENTATION
#ifdef BT_MLIR
#define BT_MLIR_IMPLEMENTATION
#include "bt_mlir.h"
#endif
#include "bt_autograd.h"
#include "bt_optim.h"
#include "bt_data.h"
#include "bt_dist.h"
#include "bt_ckpt.h"
#include "bt_parallel.h"
#include "gpt2_io.h"
#include "gpt2_parallel.h"
