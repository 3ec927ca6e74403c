/*
 * tests/unit/main.c - runs one unit-test module by name (or all of them).
 *
 * CTest registers `gpusched_unit <module>` once per module, so a failure
 * names its module; `gpusched_unit` alone runs every module.
 */
#include <stdlib.h>
#include <sys/stat.h>

#include "test.h"
#include "test_list.h"

int test_failures;
int test_checks;

const char *test_openb_dir(void)
{
    static char path[4096];
    const char *shared = getenv("GPUSCHED_SHARED_DIR");
    struct stat st;

    snprintf(path, sizeof path, "%s/data/openb", shared ? shared : "../shared");
    if (stat(path, &st) != 0 || !S_ISDIR(st.st_mode)) {
        printf("SKIP: openb trace not found at %s (set GPUSCHED_SHARED_DIR)\n", path);
        return NULL;
    }
    return path;
}

static int run(const struct unit_test *t)
{
    int before = test_failures, checks = test_checks;
    int rc = t->fn();
    int failed = test_failures - before;

    printf("%-20s %s (%d checks, %d failed)\n", t->name,
           (failed || rc) ? "FAIL" : "ok", test_checks - checks, failed);
    return failed || rc;
}

int main(int argc, char **argv)
{
    int bad = 0, ran = 0;

    for (const struct unit_test *t = unit_tests; t->name; t++) {
        if (argc > 1 && strcmp(argv[1], t->name) != 0)
            continue;
        bad += run(t);
        ran++;
    }
    if (ran == 0) {
        fprintf(stderr, "no unit test module named '%s'\n", argc > 1 ? argv[1] : "");
        return 2;
    }
    printf("%d passed, %d failed\n", ran - bad, bad);
    return bad ? 1 : 0;
}
