# Shared by the opforge CMake packages that ship a runtime plugin library (ort_plugin, trt_plugin).

# OPFORGE_KERNELS_INCLUDE_DIR: the env override, else <repo_root>/kernels/include.
function(opforge_find_kernels who repo_root)
  if(DEFINED ENV{OPFORGE_KERNELS_INCLUDE_DIR} AND NOT "$ENV{OPFORGE_KERNELS_INCLUDE_DIR}" STREQUAL "")
    set(dir "$ENV{OPFORGE_KERNELS_INCLUDE_DIR}")
  else()
    set(dir "${repo_root}/kernels/include")
  endif()
  if(NOT EXISTS "${dir}/opforge/kernels/math.h")
    message(FATAL_ERROR "${who}: shared kernels not found in ${dir} (set OPFORGE_KERNELS_INCLUDE_DIR)")
  endif()
  set(OPFORGE_KERNELS_INCLUDE_DIR "${dir}" PARENT_SCOPE)
endfunction()

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
