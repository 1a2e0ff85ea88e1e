#include <check.h>
Suite *make_mmvq_gpu_suite(void) { return suite_create("mmvq_gpu"); }
