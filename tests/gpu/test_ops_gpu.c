#include <check.h>
Suite *make_ops_gpu_suite(void) { return suite_create("ops_gpu"); }
