# Shared by the opforge CMake packages that ship a runtime plugin library (ort_plugin, trt_plugin).

# Installs `target` (its file named by its SONAME, `library`) with build_info.json and
# `<library>.manifest.json`, both configured from the package's cmake/*.json.in. The manifest's
# `ops` (OPFORGE_MANIFEST_OPS) are every op of the spec these kernels come from (OPFORGE_KERNELS_OPS),
# as the loader's manifest schema lists them; its sha256 is taken from the file as installed (after
# any install-time strip).
function(opforge_install_library target library who)
  set(ops "")
  foreach(op IN LISTS OPFORGE_KERNELS_OPS)
    list(APPEND ops
         "{\"domain\": \"${OPFORGE_KERNELS_DOMAIN}\", \"name\": \"${op}\", \"version\": ${OPFORGE_KERNELS_DOMAIN_VERSION}}")
  endforeach()
  list(JOIN ops ", " OPFORGE_MANIFEST_OPS)
  set(OPFORGE_MANIFEST_OPS "[${OPFORGE_MANIFEST_OPS}]")
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

# cudart is shared, found at run time in the CUDA runtime wheel a CUDA build depends on
# (site-packages/nvidia/cu<major>/lib; CUDA 12: nvidia/cuda_runtime/lib) through the RUNPATH, else
# wherever the dynamic loader finds it. A static cudart would bind the build host's glibc symbol
# versions (dl*, pthread_* @GLIBC_2.34 on glibc 2.36: manylinux_2_34, measured).
function(opforge_cudart_from_wheel target)
  string(REGEX MATCH "^[0-9]+" _major "${CMAKE_CUDA_COMPILER_VERSION}")
  if(_major GREATER_EQUAL 13)
    set(_dir "nvidia/cu${_major}/lib")
  else()
    set(_dir "nvidia/cuda_runtime/lib")
  endif()
  set_target_properties(${target} PROPERTIES CUDA_RUNTIME_LIBRARY Shared
                        INSTALL_RPATH "$ORIGIN/../${_dir}")
endfunction()
