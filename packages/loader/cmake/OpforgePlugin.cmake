# opforge_add_plugin(<target> NAME <plugin name> VERSION <x.y.z> OPS <domain:Op:major>...
#                    SOURCES <files>... [SDK_MIN <v>] [SDK_MAX <v>] [SOVERSION <n>])
#
# Builds lib<target>.so.<SOVERSION> (default 1) the way the opforge host expects: SONAME, hidden
# visibility, a version script exporting only opforge_plugin_entry, no undefined symbols, and
# <library file>.manifest.json written next to it after every link with the library's sha256.
# Defines OPFORGE_PLUGIN_VERSION="<x.y.z>" for the sources.
include_guard(GLOBAL)

set(_OPFORGE_PLUGIN_CMAKE_DIR "${CMAKE_CURRENT_LIST_DIR}")

function(opforge_add_plugin target)
  cmake_parse_arguments(P "" "NAME;VERSION;SDK_MIN;SDK_MAX;SOVERSION" "OPS;SOURCES" ${ARGN})
  foreach(required NAME VERSION OPS SOURCES)
    if(NOT P_${required})
      message(FATAL_ERROR "opforge_add_plugin(${target}): ${required} is required")
    endif()
  endforeach()
  if(NOT P_SDK_MIN)
    set(P_SDK_MIN "${OPFORGE_PLUGIN_SDK_MIN}")
  endif()
  if(NOT P_SOVERSION)
    set(P_SOVERSION 1)
  endif()
  add_library(${target} SHARED ${P_SOURCES})
  target_link_libraries(${target} PRIVATE opforge::plugin_sdk)
  target_compile_definitions(${target} PRIVATE OPFORGE_PLUGIN_VERSION="${P_VERSION}")
  set_target_properties(${target} PROPERTIES
    PREFIX "lib" SOVERSION ${P_SOVERSION}
    C_VISIBILITY_PRESET hidden CXX_VISIBILITY_PRESET hidden VISIBILITY_INLINES_HIDDEN ON
    POSITION_INDEPENDENT_CODE ON)
  target_link_options(${target} PRIVATE
    "LINKER:--version-script=${_OPFORGE_PLUGIN_CMAKE_DIR}/opforge_plugin.map"
    "LINKER:--no-undefined" "LINKER:-z,defs")
  string(REPLACE ";" "," ops_arg "${P_OPS}")
  add_custom_command(TARGET ${target} POST_BUILD
    COMMAND ${CMAKE_COMMAND}
      "-DLIBRARY=$<TARGET_FILE:${target}>" "-DNAME=${P_NAME}" "-DVERSION=${P_VERSION}"
      "-DKIND=opforge" "-DAPI_VERSION=${OPFORGE_PLUGIN_API_VERSION}"
      "-DSDK_MIN=${P_SDK_MIN}" "-DSDK_MAX=${P_SDK_MAX}" "-DOPS=${ops_arg}"
      -P "${_OPFORGE_PLUGIN_CMAKE_DIR}/opforge_write_manifest.cmake"
    COMMENT "opforge: manifest for ${target}"
    VERBATIM)
endfunction()
