/* test_tokenizer.c — placeholder being replaced */
#include <check.h>
#include <string.h>
#include "forge_vocab_hf.h"
#include "tokenizer.h"

static memra_vocab_hf *g_vocab;
static memra_tokenizer *g_tok;

static void setup_vocab(void)
{
    memra_err err;
    memra_err_clear(&err);
    int rc = memra_vocab_hf_load_qwen35(NULL, NULL, 0, &g_vocab, &err);
    ck_assert_msg(rc == MEMRA_OK, "%s", err.msg);
    rc = memra_tokenizer_open(&g_vocab->desc, &g_tok, &err);
    ck_assert_msg(rc == MEMRA_OK, "%s", err.msg);
}

static void teardown_vocab(void)
{
    memra_tokenizer_close(g_tok);
    memra_vocab_hf_free(g_vocab);
}

START_TEST(test_probe)
{
    static const int32_t want[] = {109266, 3709, 96748, 6115, 113128, 17, 15, 17, 21, 95859, 23, 96212, 16, 18, 95971, 10838, 236, 231};
    const char *s = "你好，世界！今天是2026年8月13日 🎉";
    memra_token_buf b = {0};
    memra_err err;
    memra_err_clear(&err);
    ck_assert_int_eq(memra_tokenizer_encode(g_tok, s, strlen(s), 0, &b, &err), MEMRA_OK);
    ck_assert_uint_eq(b.n, 18);
    for (size_t i = 0; i < b.n; i++)
        ck_assert_int_eq(b.ids[i], want[i]);
    memra_token_buf_free(&b);
}
END_TEST

Suite *make_tokenizer_suite(void)
{
    Suite *s = suite_create("tokenizer");
    TCase *tc = tcase_create("real");
    tcase_add_unchecked_fixture(tc, setup_vocab, teardown_vocab);
    tcase_add_test(tc, test_probe);
    suite_add_tcase(s, tc);
    return s;
}
