/* test_fused_gpu.cu - tests/test_fused.c on every GPU (fused ops vs the unfused ones, there) */
#include "bt_autograd.h"
#include "tests/bt_test.h"
#define TEST_FUSED_GPU
#include "tests/test_fused.c"

int main(void) {
    if (bt_cuda_device_count() == 0) { bt_test__cur_name = "test_linear_cross_entropy"; BT_SKIP("no CUDA device"); bt_test__skipped++; }
    else BT_RUN(test_linear_cross_entropy);
    return bt_test_summary("test_fused_gpu");
}
