# The version of opforge-spec: kernels/pyproject.toml's [project] version (tests/packaging keeps
# them equal). A request is served by this release if it asks for 0.1.x up to this one: 0.x
# releases may change the kernels' interface between minors.
set(PACKAGE_VERSION "0.1.0")
if(PACKAGE_FIND_VERSION VERSION_GREATER PACKAGE_VERSION OR PACKAGE_FIND_VERSION VERSION_LESS "0.1")
  set(PACKAGE_VERSION_COMPATIBLE FALSE)
else()
  set(PACKAGE_VERSION_COMPATIBLE TRUE)
  if(PACKAGE_FIND_VERSION VERSION_EQUAL PACKAGE_VERSION)
    set(PACKAGE_VERSION_EXACT TRUE)
  endif()
endif()
