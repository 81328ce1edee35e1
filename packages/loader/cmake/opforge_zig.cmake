# Included before project(): with OPFORGE_ZIG set, C and C++ are compiled and linked by zig's clang
# for an older glibc, so the wheel's libraries run on glibc OPFORGE_GLIBC (default 2.28,
# manylinux_2_28) whatever glibc the build machine has. Inputs (-D or environment):
#   OPFORGE_ZIG    a zig executable (e.g. the `ziglang` wheel's: python -m ziglang env); unset: the
#                  default compilers, and the libraries need the build machine's glibc
#   OPFORGE_GLIBC  the glibc the libraries may require, MAJOR.MINOR (default 2.28)
# zig links its libc++ statically (hidden by the version scripts): no C++ type crosses the loader's
# C ABI, so the host's standard library never meets another one.
function(opforge_zig_compilers who)
  set(zig "${OPFORGE_ZIG}")
  if(NOT zig)
    set(zig "$ENV{OPFORGE_ZIG}")
  endif()
  if(NOT zig)
    message(STATUS "${who}: OPFORGE_ZIG unset: default compilers (the libraries need this machine's glibc)")
    return()
  endif()
  if(NOT EXISTS "${zig}")
    message(FATAL_ERROR "${who}: OPFORGE_ZIG=${zig}: expected a zig executable there, found none")
  endif()
  set(glibc "${OPFORGE_GLIBC}")
  if(NOT glibc)
    set(glibc "$ENV{OPFORGE_GLIBC}")
  endif()
  if(NOT glibc)
    set(glibc "2.28")
  endif()
  if(NOT glibc MATCHES "^2\\.[0-9]+$")
    message(FATAL_ERROR "${who}: OPFORGE_GLIBC: expected a glibc version like 2.28, got '${glibc}'")
  endif()
  cmake_host_system_information(RESULT arch QUERY OS_PLATFORM)  # before project(): x86_64, aarch64
  set(target "${arch}-linux-gnu.${glibc}")
  # CMake wants one executable per compiler: a wrapper script each.
  set(dir "${CMAKE_BINARY_DIR}/opforge-zig")
  foreach(pair "cc;zig-cc" "c++;zig-c++")
    list(GET pair 0 mode)
    list(GET pair 1 name)
    file(WRITE "${dir}/${name}" "#!/bin/sh\nexec \"${zig}\" ${mode} -target ${target} \"$@\"\n")
    file(CHMOD "${dir}/${name}" PERMISSIONS OWNER_READ OWNER_WRITE OWNER_EXECUTE GROUP_READ GROUP_EXECUTE WORLD_READ WORLD_EXECUTE)
  endforeach()
  # zig's libc++ and libunwind come with debug info: without this, libraries 10-30x their size
  set(CMAKE_SHARED_LINKER_FLAGS_INIT "-Wl,--strip-debug" PARENT_SCOPE)
  set(CMAKE_C_COMPILER "${dir}/zig-cc" PARENT_SCOPE)
  set(CMAKE_CXX_COMPILER "${dir}/zig-c++" PARENT_SCOPE)
  message(STATUS "${who}: compilers: zig (${zig}) for ${target}: the libraries need glibc ${glibc} at most")
endfunction()
