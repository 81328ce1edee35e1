# cmake -DLIBRARY=<file> -DNAME= -DVERSION= -DKIND= -DAPI_VERSION= -DSDK_MIN= [-DSDK_MAX=]
#       -DOPS=<domain:Op:major>,... -P opforge_write_manifest.cmake
# Writes <LIBRARY>.manifest.json (format: packages/loader/manifest.schema.json) with the sha256
# of the file as it is now.
foreach(required LIBRARY NAME VERSION KIND API_VERSION SDK_MIN OPS)
  if(NOT DEFINED ${required} OR "${${required}}" STREQUAL "")
    message(FATAL_ERROR "opforge_write_manifest: ${required} is required")
  endif()
endforeach()
file(SHA256 "${LIBRARY}" digest)
get_filename_component(file_name "${LIBRARY}" NAME)
string(REPLACE "," ";" op_list "${OPS}")
set(ops_json "")
foreach(op IN LISTS op_list)
  string(REPLACE ":" ";" parts "${op}")
  list(LENGTH parts n)
  if(NOT n EQUAL 3)
    message(FATAL_ERROR "opforge_write_manifest: op '${op}': expected domain:Name:major")
  endif()
  list(GET parts 0 domain)
  list(GET parts 1 name)
  list(GET parts 2 major)
  if(ops_json)
    string(APPEND ops_json ",\n")
  endif()
  string(APPEND ops_json "    {\"domain\": \"${domain}\", \"name\": \"${name}\", \"version\": ${major}}")
endforeach()
if(DEFINED SDK_MAX AND NOT "${SDK_MAX}" STREQUAL "")
  set(sdk_max "\"${SDK_MAX}\"")
else()
  set(sdk_max "null")
endif()
file(WRITE "${LIBRARY}.manifest.json" "{
  \"manifest_version\": 1,
  \"name\": \"${NAME}\",
  \"library\": \"${file_name}\",
  \"version\": \"${VERSION}\",
  \"kind\": \"${KIND}\",
  \"api_version\": ${API_VERSION},
  \"sdk\": {\"min\": \"${SDK_MIN}\", \"max\": ${sdk_max}},
  \"ops\": [
${ops_json}
  ],
  \"sha256\": \"${digest}\"
}
")
