// Force-included (-include) into every host translation unit of a library built with GCC against
// libstdc++ (opforge_torch, opforge_ort, opforge_trt), so the library runs on glibc 2.28
// (manylinux_2_28: RHEL 8, Debian 10, Ubuntu 20.04) whatever glibc the build machine has.
//
// The linker binds each glibc function to the *default* version of the glibc it links against.
// Two kinds of reference pin a library to a newer glibc than its code needs:
//  - functions that glibc 2.29 re-versioned with the same meaning (exp, log, pow: new versions
//    without the SVID error wrapper). `.symver` binds them to the x86-64 base version instead.
//  - `__libc_single_threaded` (glibc 2.32), read by libstdc++'s shared_ptr/atomic helpers when
//    <sys/single_threaded.h> exists. A hidden definition of our own, always 0 ("maybe more than
//    one thread"), makes libstdc++ take its atomic path every time: correct on any glibc.
// ci/wheels.py checks the repaired wheel's tag: a reference this file misses fails the release
// with the symbol named.
#ifndef OPFORGE_KERNELS_GLIBC_FLOOR_H_
#define OPFORGE_KERNELS_GLIBC_FLOOR_H_

#if defined(__x86_64__) && defined(__linux__) && !defined(__CUDA_ARCH__)
#include <features.h>
#if defined(__GLIBC__)

__asm__(".symver exp,exp@GLIBC_2.2.5");
__asm__(".symver log,log@GLIBC_2.2.5");
__asm__(".symver pow,pow@GLIBC_2.2.5");

#if __GLIBC_PREREQ(2, 32)
#ifdef __cplusplus
extern "C" {
#endif
// weak: every translation unit carries it, the link keeps one; hidden: never exported, never
// bound to glibc's.
__attribute__((weak, visibility("hidden"))) char __libc_single_threaded = 0;
#ifdef __cplusplus
}
#endif
#endif  // __GLIBC_PREREQ(2, 32)

#endif  // __GLIBC__
#endif  // x86-64 Linux host code

#endif  // OPFORGE_KERNELS_GLIBC_FLOOR_H_
