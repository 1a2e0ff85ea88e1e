/*
 * runner.c — the Check test runner shared by every test binary.
 *
 * The suites a binary runs come from the MEMRA_SUITES X-macro list that CMake writes for it
 * (memra_area() in cmake/memra_area.cmake). Check's own environment variables select a
 * subset: CK_RUN_SUITE=gguf, CK_RUN_CASE=..., CK_FORK=no (GPU binaries must not fork).
 * Exit status is 0 only when every test passed.
 */
#include <check.h>
#include <stdlib.h>

#define X(name) Suite *make_##name##_suite(void);
MEMRA_SUITES
#undef X

int main(void)
{
    SRunner *sr = srunner_create(NULL);
#define X(name) srunner_add_suite(sr, make_##name##_suite());
    MEMRA_SUITES
#undef X
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed == 0 ? EXIT_SUCCESS : EXIT_FAILURE;
}
