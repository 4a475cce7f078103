# zs_add_library(NAME SOURCES ... DEPS ... [COMPONENT cuda|nccl]): one static library per layer.
# Headers are included by their path from the repository root ("runtime/base/status.h"), both in
# the build tree and once installed (under include/zerostack/).
# COMPONENT: the library needs the CUDA toolkit (cuda) or NCCL (nccl). It is left out of
# zerostack::zerostack and goes into zerostack::<component> instead, so a CPU-only program links
# no CUDA library ([Note: optional components] in cmake/ZsInstall.cmake). Targets by component
# are in ZS_COMPONENT_TARGETS_<component>.
set(ZS_LIBRARY_TARGETS "" CACHE INTERNAL "")
set(ZS_COMPONENT_TARGETS_cuda "" CACHE INTERNAL "")
set(ZS_COMPONENT_TARGETS_nccl "" CACHE INTERNAL "")
function(zs_add_library name)
  cmake_parse_arguments(ARG "" "COMPONENT" "SOURCES;DEPS;PRIVATE_DEPS" ${ARGN})
  add_library(${name} STATIC ${ARG_SOURCES})
  add_library(zerostack::${name} ALIAS ${name})
  target_include_directories(${name} PUBLIC $<BUILD_INTERFACE:${PROJECT_SOURCE_DIR}>
                                            $<BUILD_INTERFACE:${PROJECT_BINARY_DIR}/generated>
                                            $<INSTALL_INTERFACE:include/zerostack>)
  target_link_libraries(${name} PUBLIC ${ARG_DEPS} PRIVATE ${ARG_PRIVATE_DEPS})
  set(ZS_LIBRARY_TARGETS ${ZS_LIBRARY_TARGETS} ${name} CACHE INTERNAL "")
  if(ARG_COMPONENT)
    if(NOT ARG_COMPONENT MATCHES "^(cuda|nccl)$")
      message(FATAL_ERROR "zs_add_library(${name}): COMPONENT ${ARG_COMPONENT} is not cuda or nccl")
    endif()
    set(ZS_COMPONENT_TARGETS_${ARG_COMPONENT} ${ZS_COMPONENT_TARGETS_${ARG_COMPONENT}} ${name}
        CACHE INTERNAL "")
  endif()
endfunction()

# zs_generate_builtins(TEMPLATE in OUTPUT out PAIRS "target;factory;..." DECL fmt CALL fmt
#                      [OPTIONAL_PAIRS "target;factory;..." OPTIONAL_DECL fmt OPTIONAL_CALL fmt
#                       HOOK_TEMPLATE in] TARGETS_VAR var): the one mechanism behind "build
# flags only decide whether a backend (or device kind) exists".
# - PAIRS: built-ins every program gets. For each (target, factory) it appends DECL and CALL
#   (statements without their final ';') with "@F@" replaced by the factory name to @ZS_DECLS@ /
#   @ZS_CALLS@ of TEMPLATE, writes OUTPUT, and returns the targets to link in TARGETS_VAR.
# - OPTIONAL_PAIRS: built-ins of a component library (CUDA, NCCL) that only the programs linking
#   it get ([Note: optional components] in cmake/ZsInstall.cmake). Each gets a hook, an
#   extern "C" function named zs_optional_<factory> ("@H@"), written from HOOK_TEMPLATE
#   (@ZS_HOOK@, @ZS_FACTORY@) into the component target; OUTPUT declares it weak
#   (OPTIONAL_DECL) and calls it only when it is linked (OPTIONAL_CALL). The target's link
#   interface carries --undefined=<hook>, so linking the component pulls the hook (and with it
#   the backend) out of its static archive. The targets are not returned in TARGETS_VAR.
function(zs_generate_builtins)
  cmake_parse_arguments(ARG "" "TEMPLATE;OUTPUT;DECL;CALL;OPTIONAL_DECL;OPTIONAL_CALL;HOOK_TEMPLATE;TARGETS_VAR"
                        "PAIRS;OPTIONAL_PAIRS" ${ARGN})
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
  set(pending ${ARG_OPTIONAL_PAIRS})
  while(pending)
    list(POP_FRONT pending target factory)
    set(ZS_HOOK zs_optional_${factory})
    set(ZS_FACTORY ${factory})
    foreach(part DECL CALL)
      string(REPLACE "@F@" "${factory}" text "${ARG_OPTIONAL_${part}}")
      string(REPLACE "@H@" "${ZS_HOOK}" text "${text}")
      string(APPEND ZS_${part}S "${text}" ";" "\n")
    endforeach()
    set(hook_file ${PROJECT_BINARY_DIR}/generated/${ZS_HOOK}.cc)
    configure_file(${ARG_HOOK_TEMPLATE} ${hook_file} @ONLY)
    target_sources(${target} PRIVATE ${hook_file})
    target_link_options(${target} INTERFACE "LINKER:--undefined=${ZS_HOOK}")
  endwhile()
  configure_file(${ARG_TEMPLATE} ${ARG_OUTPUT} @ONLY)
  set(${ARG_TARGETS_VAR} ${targets} PARENT_SCOPE)
endfunction()
