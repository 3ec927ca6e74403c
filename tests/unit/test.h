/*
 * tests/unit/test.h - the smallest assertion kit that names what failed.
 *
 * Each tests/unit/test_<module>.c defines `int test_<module>(void)` and
 * returns the number of failed checks (0 = pass). ASSERT_* print the
 * expression, both values, file and line, count the failure and go on, so
 * one run shows every broken check of a module.
 */
#ifndef GPUSCHED_TEST_H
#define GPUSCHED_TEST_H

#include <inttypes.h>
#include <stdio.h>
#include <string.h>

extern int test_failures;
extern int test_checks;

#define TEST_FAIL_(fmt, ...)                                                   \
    do {                                                                       \
        test_failures++;                                                       \
        fprintf(stderr, "%s:%d: " fmt "\n", __FILE__, __LINE__, __VA_ARGS__);  \
    } while (0)

#define ASSERT_TRUE(e)                                                         \
    do {                                                                       \
        test_checks++;                                                         \
        if (!(e)) TEST_FAIL_("ASSERT_TRUE(%s) failed", #e);                    \
    } while (0)

#define ASSERT_EQ(a, b)                                                        \
    do {                                                                       \
        long long a_ = (long long)(a), b_ = (long long)(b);                    \
        test_checks++;                                                         \
        if (a_ != b_)                                                          \
            TEST_FAIL_("ASSERT_EQ(%s, %s): %lld != %lld", #a, #b, a_, b_);     \
    } while (0)

#define ASSERT_NEAR(a, b, eps)                                                 \
    do {                                                                       \
        double a_ = (double)(a), b_ = (double)(b);                             \
        test_checks++;                                                         \
        if (a_ - b_ > (eps) || b_ - a_ > (eps))                                \
            TEST_FAIL_("ASSERT_NEAR(%s, %s): %g vs %g", #a, #b, a_, b_);       \
    } while (0)

#define ASSERT_STREQ(a, b)                                                     \
    do {                                                                       \
        const char *a_ = (a), *b_ = (b);                                       \
        test_checks++;                                                         \
        if (!a_ || !b_ || strcmp(a_, b_) != 0)                                 \
            TEST_FAIL_("ASSERT_STREQ(%s, %s): \"%s\" != \"%s\"", #a, #b,       \
                       a_ ? a_ : "(null)", b_ ? b_ : "(null)");                \
    } while (0)

/* Substring check, for error messages that must name a field. */
#define ASSERT_CONTAINS(hay, needle)                                           \
    do {                                                                       \
        const char *h_ = (hay), *n_ = (needle);                                \
        test_checks++;                                                         \
        if (!h_ || !strstr(h_, n_))                                            \
            TEST_FAIL_("ASSERT_CONTAINS(%s, \"%s\"): got \"%s\"", #hay, n_,    \
                       h_ ? h_ : "(null)");                                    \
    } while (0)

/* Returns the directory of ../shared/data/openb, or NULL (and prints a skip
 * message) when the trace is absent. */
const char *test_openb_dir(void);

#endif
