// Force-included (-include) into every host translation unit of a library built with GCC against
// the system's shared libstdc++ (opforge_torch, opforge_ort, opforge_trt), so the library needs no
// more than manylinux_2_28 (glibc 2.28, the libstdc++ of GCC 8: RHEL 8, Debian 10, Ubuntu 20.04)
// whatever GCC and glibc build it.
//
// The linker binds each reference to the *default* version of the library it links against. Three
// kinds of reference pin a library to a newer platform than its code needs:
//  - functions that glibc 2.29 re-versioned with the same meaning (exp, log, pow: new versions
//    without the SVID error wrapper) or 2.34 moved into libc (dlsym). `.symver` binds them to the
//    x86-64 base version instead.
//  - `__libc_single_threaded` (glibc 2.32), read by libstdc++'s shared_ptr/atomic helpers when
//    <sys/single_threaded.h> exists. A hidden definition of our own, always 0 ("maybe more than
//    one thread"), makes libstdc++ take its atomic path every time: correct on any glibc.
//  - `std::__throw_bad_array_new_length` (GLIBCXX_3.4.29, GCC 11), called by GCC 11+'s
//    std::allocator. A hidden copy of our own throws the same std::bad_array_new_length (CXXABI
//    1.3.8), as the manylinux toolchains' libstdc++_nonshared.a does.
// Weak: every translation unit carries the definitions, the link keeps one; hidden: never exported,
// never bound to the system's. ci/artifacts/wheels.py checks the repaired wheel's tag: a reference this file
// misses fails the release with the symbol named.
#ifndef OPFORGE_KERNELS_PLATFORM_FLOOR_H_
#define OPFORGE_KERNELS_PLATFORM_FLOOR_H_

#if defined(__x86_64__) && defined(__linux__) && !defined(__CUDA_ARCH__)
#include <features.h>
#if defined(__GLIBC__)

__asm__(".symver exp,exp@GLIBC_2.2.5");
__asm__(".symver log,log@GLIBC_2.2.5");
__asm__(".symver pow,pow@GLIBC_2.2.5");
// dlsym moved into libc in glibc 2.34 (torch >= 2.14's stable-ABI headers call it). Its base
// version lives in libdl.so.2 before 2.34 and in libc.so.6 since: a library binding it must list
// libdl.so.2 as well (opforge_torch links it with --no-as-needed).
__asm__(".symver dlsym,dlsym@GLIBC_2.2.5");

#if __GLIBC_PREREQ(2, 32)
#ifdef __cplusplus
extern "C" {
#endif
__attribute__((weak, visibility("hidden"))) char __libc_single_threaded = 0;
#ifdef __cplusplus
}
#endif
#endif  // __GLIBC_PREREQ(2, 32)

#ifdef __cplusplus
#include <new>  // names the standard library: _GLIBCXX_RELEASE for libstdc++
#endif
#if defined(__cplusplus) && defined(_GLIBCXX_RELEASE) && _GLIBCXX_RELEASE >= 11
namespace std {
__attribute__((weak, visibility("hidden"), noreturn)) void __throw_bad_array_new_length() {
  throw bad_array_new_length();
}
}  // namespace std
#endif  // libstdc++ of GCC >= 11

#endif  // __GLIBC__
#endif  // x86-64 Linux host code

#endif  // OPFORGE_KERNELS_PLATFORM_FLOOR_H_
