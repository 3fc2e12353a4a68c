# The component layering of src/ (see CMakeLists.txt and
# docs/architecture.md): every `#include "<component>/..."` in
# src/<component>/ must name the component itself, a component below it, or
# the public headers (gpufeed/); the Python binding (python/src) includes
# public headers only. Run on every build (target gpufeed_layering):
#
#   cmake -DSOURCE_DIR=<repo> -P cmake/check_layering.cmake
#
# Keep ALLOWED_<c> in step with the DEPS of gpufeed_component(<c>) in
# CMakeLists.txt: those make a call into a component above fail to link;
# this makes the include fail first, with the file and line.
cmake_minimum_required(VERSION 3.18)

set(ALLOWED_util "")
set(ALLOWED_io util)
set(ALLOWED_storage io util)
set(ALLOWED_format storage io util)
set(ALLOWED_tools format storage io util)
set(ALLOWED_embedding format storage io util)
set(ALLOWED_decode util)
set(ALLOWED_batch util)
set(ALLOWED_device batch util)
set(ALLOWED_pipeline embedding format storage decode batch device io util)
set(COMPONENTS util io storage format tools embedding decode batch device pipeline)

set(problems "")
file(GLOB component_dirs LIST_DIRECTORIES true "${SOURCE_DIR}/src/*")
foreach(dir ${component_dirs})
  if(NOT IS_DIRECTORY "${dir}")
    continue()
  endif()
  get_filename_component(component "${dir}" NAME)
  if(NOT component IN_LIST COMPONENTS)
    string(APPEND problems "src/${component}/: not a known component (add it to "
                           "cmake/check_layering.cmake and CMakeLists.txt)\n")
    continue()
  endif()
  file(GLOB sources "${dir}/*.h" "${dir}/*.cc" "${dir}/*.cu")
  foreach(source ${sources})
    file(STRINGS "${source}" lines REGEX "^[ \t]*#[ \t]*include[ \t]+\"[a-z_]+/")
    foreach(line ${lines})
      string(REGEX REPLACE "^[ \t]*#[ \t]*include[ \t]+\"([a-z_]+)/.*$" "\\1" used "${line}")
      if(used STREQUAL "gpufeed" OR used STREQUAL component)
        continue()
      endif()
      if(NOT used IN_LIST ALLOWED_${component})
        file(RELATIVE_PATH shown "${SOURCE_DIR}" "${source}")
        string(APPEND problems "${shown}: ${line}: ${component}/ may include only "
                               "${ALLOWED_${component}} (and gpufeed/)\n")
      endif()
    endforeach()
  endforeach()
endforeach()

file(GLOB binding_sources "${SOURCE_DIR}/python/src/*.cc" "${SOURCE_DIR}/python/src/*.h")
foreach(source ${binding_sources})
  file(STRINGS "${source}" lines REGEX "^[ \t]*#[ \t]*include[ \t]+\"[a-z_]+/")
  foreach(line ${lines})
    string(REGEX REPLACE "^[ \t]*#[ \t]*include[ \t]+\"([a-z_]+)/.*$" "\\1" used "${line}")
    if(NOT used STREQUAL "gpufeed")
      file(RELATIVE_PATH shown "${SOURCE_DIR}" "${source}")
      string(APPEND problems "${shown}: ${line}: the binding uses the public API only\n")
    endif()
  endforeach()
endforeach()

if(problems)
  message(FATAL_ERROR "component layering broken:\n${problems}")
endif()
