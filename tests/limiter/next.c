/*
 * tests/limiter/next.c - libraries that look themselves up through
 * dlsym(RTLD_NEXT) and dlsym(RTLD_DEFAULT), as interposers and OpenMP
 * runtimes (ompt_start_tool) do. glibc answers both relative to the object
 * that called dlsym, so a preloaded dlsym must pass them on with the
 * caller's return address intact (src/limiter/lim_hook.c). Built three
 * times:
 *   NEXT_A  nt_who(): 100 + the next nt_who after this library (-1 when the
 *           lookup comes back to this one: it would call itself forever);
 *   NEXT_B  nt_who(): 2;
 *   NEXT_C  nt_local(): 1 when RTLD_DEFAULT finds nt_c_only, defined here,
 *           in a library opened RTLD_LOCAL (only its own scope has it).
 */
#include <dlfcn.h>

#if defined(NEXT_A)
int nt_who(void)
{
    int (*next)(void) = (int (*)(void))dlsym(RTLD_NEXT, "nt_who");
    if (!next)
        return 1;
    if (next == nt_who)
        return -1;
    return 100 + next();
}
#elif defined(NEXT_B)
int nt_who(void)
{
    return 2;
}

int nt_b(void) /* what the program needs of this library, so it is loaded */
{
    return 0;
}
#elif defined(NEXT_C)
int nt_c_only(void)
{
    return 7;
}

int nt_local(void)
{
    int (*f)(void) = (int (*)(void))dlsym(RTLD_DEFAULT, "nt_c_only");
    return f && f() == 7;
}
#else
#include <stdio.h>

int nt_who(void);
int nt_b(void);

/* lim_next: prints "next <nt_who()> local <nt_local()>". */
int main(void)
{
    void *h = dlopen("libnextc.so", RTLD_NOW | RTLD_LOCAL);
    int (*local)(void) = h ? (int (*)(void))dlsym(h, "nt_local") : NULL;
    printf("next %d local %d\n", nt_who() + nt_b(), local ? local() : -1);
    return 0;
}
#endif
