/* bt_all.h - every BluTrain-C header in one include, and with BT_ALL_IMPLEMENTATION defined first,
   every implementation: the one translation unit that holds them (stb's "in one file").

     #define BT_ALL_IMPLEMENTATION       // in one C/CUDA file only
     #include "bt_all.h"

   The library (bt_*.h; bt_mlir.h too in a build with -DBT_MLIR) and the models (gpt2.h,
   gpt2_io.h, gpt2_parallel.h; llama.h, llama_io.h, llama_parallel.h). Their implementations need POSIX.1-2008: this
   file asks for it when the includer did not. train_gpt2.c includes it; make compiles tests/bt_impl.c (nothing but this)
   once per build flavour and links that object into the tests. */
#ifdef BT_ALL_IMPLEMENTATION
#if !defined(_POSIX_C_SOURCE) && !defined(_XOPEN_SOURCE) && !defined(_GNU_SOURCE)
#define _POSIX_C_SOURCE 200809L
#endif
#define BT_ALLOC_IMPLEMENTATION
#define BT_TENSOR_IMPLEMENTATION
#define BT_AUTOGRAD_IMPLEMENTATION
#define BT_OPTIM_IMPLEMENTATION
#define BT_DATA_IMPLEMENTATION
#define BT_CHART_IMPLEMENTATION
#define BT_DIST_IMPLEMENTATION
#define BT_CKPT_IMPLEMENTATION
#define BT_PARALLEL_IMPLEMENTATION
#define GPT2_IMPLEMENTATION
#define GPT2_IO_IMPLEMENTATION
#define GPT2_PARALLEL_IMPLEMENTATION
#define LLAMA_IMPLEMENTATION
#define LLAMA_IO_IMPLEMENTATION
#define LLAMA_PARALLEL_IMPLEMENTATION
#ifdef BT_MLIR
#define BT_MLIR_IMPLEMENTATION
#endif
#endif
#ifdef BT_MLIR
#include "bt_mlir.h"
#endif
#include "bt_autograd.h"
#include "bt_optim.h"
#include "bt_data.h"
#include "bt_chart.h"
#include "bt_dist.h"
#include "bt_ckpt.h"
#include "bt_parallel.h"
#include "gpt2_io.h"
#include "gpt2_parallel.h"
#include "llama_io.h"
#include "llama_parallel.h"
