/* cmd/version.c - `gpusched version`: release and git revision. */
#include <stdio.h>

#include "cmd/cmd.h"
#include "version.h"

int cmd_version(int argc, char **argv)
{
    (void)argc;
    (void)argv;
    printf("gpusched %s (%s)\n", GPUSCHED_VERSION, GPUSCHED_GIT);
    return 0;
}
