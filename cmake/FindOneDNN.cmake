# FindOneDNN: Intel's oneDNN (Debian: libdnnl-dev), the host backend's float convolutions.
# Used by strata's build and installed with its package (strataConfig.cmake's optional
# component dnnl). Not oneDNN's own dnnl-config.cmake: Debian's build carries an OpenCL GPU
# runtime whose imported target wants OpenCL's development files, which strata never uses.
#
# Defines OneDNN_FOUND, OneDNN_VERSION (from dnnl_version.h) and OneDNN::dnnl.
find_path(OneDNN_INCLUDE_DIR oneapi/dnnl/dnnl.hpp)
find_library(OneDNN_LIBRARY dnnl)
mark_as_advanced(OneDNN_INCLUDE_DIR OneDNN_LIBRARY)
set(OneDNN_VERSION "")
if(OneDNN_INCLUDE_DIR AND EXISTS "${OneDNN_INCLUDE_DIR}/oneapi/dnnl/dnnl_version.h")
  file(STRINGS "${OneDNN_INCLUDE_DIR}/oneapi/dnnl/dnnl_version.h" _v REGEX "#define DNNL_VERSION_(MAJOR|MINOR|PATCH) ")
  string(REGEX REPLACE ".*MAJOR ([0-9]+).*MINOR ([0-9]+).*PATCH ([0-9]+).*" "\\1.\\2.\\3" OneDNN_VERSION "${_v}")
  unset(_v)
endif()

include(FindPackageHandleStandardArgs)
find_package_handle_standard_args(OneDNN REQUIRED_VARS OneDNN_LIBRARY OneDNN_INCLUDE_DIR
                                  VERSION_VAR OneDNN_VERSION)

if(OneDNN_FOUND AND NOT TARGET OneDNN::dnnl)
  add_library(OneDNN::dnnl UNKNOWN IMPORTED)
  # dl: the host backend looks omp_set_num_threads up in the OpenMP runtime libdnnl loads
  set_target_properties(OneDNN::dnnl PROPERTIES
    IMPORTED_LOCATION "${OneDNN_LIBRARY}"
    INTERFACE_INCLUDE_DIRECTORIES "${OneDNN_INCLUDE_DIR}"
    INTERFACE_LINK_LIBRARIES "${CMAKE_DL_LIBS}")
endif()
