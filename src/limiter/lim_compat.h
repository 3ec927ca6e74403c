/*
 * limiter/lim_compat.h - the glibc ABI libgpusched-cuda.so is linked for.
 *
 * The library is preloaded into images of any age, but is built on Debian
 * 12 (glibc 2.36), where dlopen, dlvsym, pthread_create and pthread_once
 * carry the version GLIBC_2.34 and fstat GLIBC_2.33: an image with an older
 * glibc (Ubuntu 20.04: 2.31) would refuse to load it. These directives bind
 * the references to the versions every glibc since 2.2.5 provides (in
 * libdl.so.2 and libpthread.so.0 before 2.34, which the library therefore
 * names as DT_NEEDED), so it loads on glibc 2.17 and later. Force-included
 * (-include) into the library's sources only; tests/blackbox/test_limiter.py
 * checks the resulting version floor.
 */
#ifndef GPUSCHED_LIM_COMPAT_H
#define GPUSCHED_LIM_COMPAT_H

/* x86-64 only: other architectures keep the build machine's versions */
#if defined(__x86_64__) && defined(__linux__)
__asm__(".symver dlopen,dlopen@GLIBC_2.2.5");
__asm__(".symver dlvsym,dlvsym@GLIBC_2.2.5");
__asm__(".symver pthread_create,pthread_create@GLIBC_2.2.5");
__asm__(".symver pthread_once,pthread_once@GLIBC_2.2.5");
#define LIM_OLD_GLIBC_ABI 1 /* lim_ledger.c: fstat through the system call */
#endif

#endif
