/* test_base.c — error records, strerror, the qtype table. */
#include <check.h>
#include <string.h>

#include "err.h"
#include "qtype.h"

START_TEST(test_strerror_total)
{
    for (int c = 0; c <= MEMRA_ERR_INTERNAL; c++)
        ck_assert_ptr_nonnull(memra_strerror(c));
    ck_assert_str_eq(memra_strerror(MEMRA_OK), "ok");
    ck_assert_str_eq(memra_strerror(9999), "unknown error code");
}
END_TEST

START_TEST(test_err_first_failure_wins)
{
    memra_err e;
    memra_err_clear(&e);
    ck_assert_int_eq(MEMRA_FAIL(&e, MEMRA_ERR_FORMAT, "first %d", 1), MEMRA_ERR_FORMAT);
    ck_assert_int_eq(MEMRA_FAIL(&e, MEMRA_ERR_IO, "second"), MEMRA_ERR_IO);
    ck_assert_int_eq(e.code, MEMRA_ERR_FORMAT);
    ck_assert_str_eq(e.msg, "first 1");
    ck_assert_int_eq(MEMRA_FAIL(NULL, MEMRA_ERR_IO, "dropped"), MEMRA_ERR_IO);
}
END_TEST

START_TEST(test_qtype_table)
{
    /* Sizes from spec/gguf-and-quants.md §2. */
    ck_assert_uint_eq(memra_qtype_get(MEMRA_QT_Q4_K)->block_bytes, 144);
    ck_assert_uint_eq(memra_qtype_get(MEMRA_QT_Q6_K)->block_bytes, 210);
    ck_assert_uint_eq(memra_qtype_get(MEMRA_QT_NVFP4)->block_elems, 64);
    ck_assert_uint_eq(memra_qtype_get(MEMRA_QT_MXFP4)->block_bytes, 17);
    static const int removed[] = {4, 5, 31, 32, 33, 36, 37, 38, 41, 1000};
    for (size_t i = 0; i < sizeof removed / sizeof removed[0]; i++)
        ck_assert_ptr_null(memra_qtype_get((uint32_t)removed[i]));
    ck_assert_int_eq(memra_qtype_from_name("Q4_K"), MEMRA_QT_Q4_K);
    ck_assert_int_eq(memra_qtype_from_name("bogus"), -1);
}
END_TEST

Suite *make_base_suite(void)
{
    Suite *s = suite_create("base");
    TCase *tc = tcase_create("core");
    tcase_add_test(tc, test_strerror_total);
    tcase_add_test(tc, test_err_first_failure_wins);
    tcase_add_test(tc, test_qtype_table);
    suite_add_tcase(s, tc);
    return s;
}
