/* gpt2_impl.h - the bt_ headers' and the model's implementations in one include, for the tests and
   tools that use GPT-2 (gpt2.h, gpt2_io.h) without the program train_gpt2.c. */
#ifndef GPT2_IMPL_H
#define GPT2_IMPL_H
#if !defined(_POSIX_C_SOURCE) && !defined(_XOPEN_SOURCE)
#define _POSIX_C_SOURCE 200809L   /* bt_data.h: pread, readlink */
#endif
#define BT_ALLOC_IMPLEMENTATION
#define BT_TENSOR_IMPLEMENTATION
#define BT_AUTOGRAD_IMPLEMENTATION
#define BT_OPTIM_IMPLEMENTATION
#define BT_DATA_IMPLEMENTATION
#define BT_CKPT_IMPLEMENTATION
#define GPT2_IMPLEMENTATION
#define GPT2_IO_IMPLEMENTATION
#include "gpt2_io.h"
#include "bt_optim.h"
#endif /* GPT2_IMPL_H */
