/* bt_impl.c - every header's implementation in one translation unit (bt_all.h). make compiles it
   once per build flavour (build/cpu/bt_impl.o with cc, build/asan/ with ASan and UBSan, build/cuda/
   with nvcc, where it holds every kernel) and links that object into the programs and the tests
   that do not compile the implementations themselves (train_gpt2.c leaves its own out when
   compiled with -DBT_LINKED). */
#define BT_ALL_IMPLEMENTATION
#include "bt_all.h"
