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

# zs_generate_builtins(TEMPLATE in OUTPUT out PAIRS "target;factory;..." DECL fmt CALL fmt
#                      TARGETS_VAR var): the one mechanism behind "build flags only decide
# whether a backend (or device kind) exists". For each (target, factory) pair it appends DECL
# and CALL (statements without their final ';') with "@F@" replaced by the factory name to @ZS_DECLS@ / @ZS_CALLS@ of TEMPLATE,
# writes OUTPUT, and returns the targets to link in TARGETS_VAR.
function(zs_generate_builtins)
  cmake_parse_arguments(ARG "" "TEMPLATE;OUTPUT;DECL;CALL;TARGETS_VAR" "PAIRS" ${ARGN})
  set(ZS_DECLS "")
  set(ZS_CALLS "")
  set(targets "")
  set(pending ${ARG_PAIRS})
  while(pending)
    list(POP_FRONT pending target factory)
    list(APPEND targets ${target})
    string(REPLACE "@F@" "${factory}" decl "${ARG_DECL}")
    string(REPLACE "@F@" "${factory}" call "${ARG_CALL}")
    # DECL and CALL are statements; CMake's list syntax would eat their ';', so it is added here.
    string(APPEND ZS_DECLS "${decl}" ";" "\n")
    string(APPEND ZS_CALLS "${call}" ";" "\n")
  endwhile()
  configure_file(${ARG_TEMPLATE} ${ARG_OUTPUT} @ONLY)
  set(${ARG_TARGETS_VAR} ${targets} PARENT_SCOPE)
endfunction()
