/* placeholder while building */
#include <check.h>
Suite *make_nvrtc_suite(void) { return suite_create("nvrtc"); }
