# Shared by the opforge CMake packages that ship a runtime plugin library (ort_plugin, trt_plugin).

# Installs `target` (its file named by its SONAME, `library`) with build_info.json and
# `<library>.manifest.json`, both configured from the package's cmake/*.json.in. The manifest's
# sha256 is taken from the file as installed (after any install-time strip).
function(opforge_install_library target library who)
  configure_file(cmake/build_info.json.in build_info.json @ONLY)
  configure_file(cmake/manifest.json.in ${library}.manifest.json.in @ONLY)
  install(TARGETS ${target} LIBRARY DESTINATION .)
  install(FILES "${CMAKE_CURRENT_BINARY_DIR}/build_info.json" DESTINATION .)
  install(CODE "
    set(_lib \"\$ENV{DESTDIR}\${CMAKE_INSTALL_PREFIX}/${library}\")
    file(SHA256 \"\${_lib}\" _sha)
    file(READ \"${CMAKE_CURRENT_BINARY_DIR}/${library}.manifest.json.in\" _manifest)
    string(REPLACE \"__SHA256__\" \"\${_sha}\" _manifest \"\${_manifest}\")
    file(WRITE \"\${_lib}.manifest.json\" \"\${_manifest}\")
    message(STATUS \"${who}: manifest sha256 \${_sha}\")
  ")
endfunction()

# Every host translation unit of `target` (C++, and the host side of CUDA) force-includes
# opforge/kernels/platform_floor.h: the library needs glibc 2.28 at most (manylinux_2_28), whatever
# glibc the build machine has.
function(opforge_platform_floor target)
  set(floor "${OPFORGE_KERNELS_INCLUDE_DIR}/opforge/kernels/platform_floor.h")
  target_compile_options(${target} PRIVATE "SHELL:-include \"${floor}\"")
endfunction()
