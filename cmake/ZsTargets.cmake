# zs_add_library(NAME SOURCES ... DEPS ...): one static library per layer. Headers are included
# by their path from the repository root ("runtime/base/status.h"), both in the build tree and
# once installed (under include/zerostack/).
set(ZS_LIBRARY_TARGETS "" CACHE INTERNAL "")
function(zs_add_library name)
  cmake_parse_arguments(ARG "" "" "SOURCES;DEPS;PRIVATE_DEPS" ${ARGN})
  add_library(${name} STATIC ${ARG_SOURCES})
  add_library(zerostack::${name} ALIAS ${name})
  target_include_directories(${name} PUBLIC $<BUILD_INTERFACE:${PROJECT_SOURCE_DIR}>
                                            $<BUILD_INTERFACE:${PROJECT_BINARY_DIR}/generated>
                                            $<INSTALL_INTERFACE:include/zerostack>)
  target_link_libraries(${name} PUBLIC ${ARG_DEPS} PRIVATE ${ARG_PRIVATE_DEPS})
  set(ZS_LIBRARY_TARGETS ${ZS_LIBRARY_TARGETS} ${name} CACHE INTERNAL "")
endfunction()
