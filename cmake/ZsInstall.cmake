# Install and package: `cmake --install <build> --prefix P` puts
#   P/lib/libzs_*.a                     every library target of ZS_LIBRARY_TARGETS
#   P/include/zerostack/runtime/**.h    headers by their source path (also kernels/, optimizers/,
#                                       offload/), so "runtime/base/status.h" resolves from
#                                       P/include/zerostack, and the umbrella
#                                       P/include/zerostack/zerostack.h (<zerostack/zerostack.h>)
#   P/lib/cmake/zerostack/              zerostackConfig.cmake, its version file and the targets:
#                                       zerostackTargets.cmake (CPU), zerostackCudaTargets.cmake
#                                       (the cuda and nccl components, in a build with CUDA)
# Consumers: find_package(zerostack CONFIG REQUIRED) and link zerostack::zerostack (CPU); add
# COMPONENTS cuda nccl and link zerostack::cuda / zerostack::nccl for the GPU parts
# ([Note: optional components] below).
# Included at the end of the top-level CMakeLists, so every library target exists already; the
# dependencies the config file finds are read from the libraries' link interfaces, so a layer
# that adds a dependency needs no change here (only a mapping below if its namespace is new).
include(CMakePackageConfigHelpers)

set(ZS_INSTALL_CMAKEDIR lib/cmake/zerostack)

# ---- zerostack::zerostack and the components ---------------------------------------------
# [Note: optional components] A CPU-only program must link no CUDA or NCCL library (they are
# large, and need a driver to load), and a package built without CUDA must be usable without the
# toolkit. So the libraries that need CUDA are components (zs_add_library(... COMPONENT)):
#   zerostack::zerostack  every layer that runs on CPUs, plus <zerostack/zerostack.h>
#   zerostack::cuda       the CUDA device ("cuda:N"), the CUDA kernels, the GPU token dispatch
#   zerostack::nccl       the nccl backend (and zerostack::cuda)
# A backend or device kind of a component registers itself in the programs that link it: the
# generated registration calls a weak hook that linking the component provides
# (zs_generate_builtins, cmake/ZsTargets.cmake), so no #ifdef and no separate build of zs_comm
# or zs_device. The components are a second export set, loaded by zerostackConfig.cmake (after
# finding the CUDA toolkit) only when find_package asks for them (COMPONENTS cuda nccl). In this
# tree the same targets exist, empty in a build without CUDA, for the programs that use a GPU.
# A component adds to zerostack::zerostack (link both); it does not include it.
set(ZS_CPU_TARGETS ${ZS_LIBRARY_TARGETS})
set(ZS_CUDA_EXPORT_TARGETS ${ZS_COMPONENT_TARGETS_cuda} ${ZS_COMPONENT_TARGETS_nccl})
if(ZS_CUDA_EXPORT_TARGETS)
  list(REMOVE_ITEM ZS_CPU_TARGETS ${ZS_CUDA_EXPORT_TARGETS})
endif()

add_library(zerostack INTERFACE)
add_library(zerostack::zerostack ALIAS zerostack)
target_link_libraries(zerostack INTERFACE ${ZS_CPU_TARGETS})
target_include_directories(zerostack INTERFACE $<BUILD_INTERFACE:${PROJECT_SOURCE_DIR}/include>
                                               $<INSTALL_INTERFACE:include>)
add_library(zerostack_cuda INTERFACE)
add_library(zerostack::cuda ALIAS zerostack_cuda)
set_target_properties(zerostack_cuda PROPERTIES EXPORT_NAME cuda)
target_link_libraries(zerostack_cuda INTERFACE ${ZS_COMPONENT_TARGETS_cuda})
add_library(zerostack_nccl INTERFACE)
add_library(zerostack::nccl ALIAS zerostack_nccl)
set_target_properties(zerostack_nccl PROPERTIES EXPORT_NAME nccl)
target_link_libraries(zerostack_nccl INTERFACE zerostack_cuda ${ZS_COMPONENT_TARGETS_nccl})
set(ZS_CUDA_EXPORT_INTERFACES "")
if(ZS_COMPONENT_TARGETS_cuda)
  list(APPEND ZS_CUDA_EXPORT_INTERFACES zerostack_cuda)
endif()
if(ZS_COMPONENT_TARGETS_nccl)
  list(APPEND ZS_CUDA_EXPORT_INTERFACES zerostack_nccl)
endif()

# ---- walk the link interfaces -------------------------------------------------------------
# zs_walk_links(targets... EXTRA out IMPORTED out): non-imported targets that the libraries link
# but that are not zerostack libraries (e.g. the NCCL wrapper of cmake/ZsCuda.cmake) join the
# export set (EXTRA); imported ones become dependencies (IMPORTED).
function(zs_walk_links)
  cmake_parse_arguments(ARG "" "EXTRA;IMPORTED" "TARGETS" ${ARGN})
  set(extra "")
  set(imported "")
  set(seen "")
  set(queue ${ARG_TARGETS})
  while(queue)
    list(POP_FRONT queue target)
    if(target IN_LIST seen)
      continue()
    endif()
    list(APPEND seen ${target})
    get_target_property(links ${target} INTERFACE_LINK_LIBRARIES)
    if(NOT links)
      continue()
    endif()
    foreach(link IN LISTS links)
      string(REGEX REPLACE "^\\$<LINK_ONLY:(.+)>$" "\\1" link "${link}")
      if(link MATCHES "^\\$<" OR NOT TARGET ${link})
        continue()  # a generator expression, a flag or a plain library file
      endif()
      get_target_property(aliased ${link} ALIASED_TARGET)
      if(aliased)
        set(link ${aliased})
      endif()
      get_target_property(is_imported ${link} IMPORTED)
      if(is_imported)
        list(APPEND imported ${link})
      elseif(NOT link IN_LIST ZS_LIBRARY_TARGETS AND NOT link IN_LIST extra)
        list(APPEND extra ${link})
        list(APPEND queue ${link})
      else()
        list(APPEND queue ${link})
      endif()
    endforeach()
  endwhile()
  list(REMOVE_DUPLICATES imported)
  set(${ARG_EXTRA} ${extra} PARENT_SCOPE)
  set(${ARG_IMPORTED} ${imported} PARENT_SCOPE)
endfunction()

# zs_dependency_lines(OUT var DONE var IMPORTED targets...): the find_dependency lines of the
# config file for the imported targets, one per namespace not in the list DONE names (which it
# extends).
function(zs_dependency_lines)
  cmake_parse_arguments(ARG "" "OUT;DONE" "IMPORTED" ${ARGN})
  set(deps "")
  set(done ${${ARG_DONE}})
  foreach(dep IN LISTS ARG_IMPORTED)
    if(dep MATCHES "^PkgConfig::(.+)$")
      set(prefix ${CMAKE_MATCH_1})
      if(dep IN_LIST done)
        continue()
      endif()
      list(APPEND done ${dep})
      set(module "${${prefix}_MODULE_NAME}")
      if(NOT module)
        string(TOLOWER ${prefix} module)
      endif()
      string(APPEND deps "if(NOT TARGET ${dep})\n"
                         "  pkg_check_modules(${prefix} REQUIRED QUIET IMPORTED_TARGET "
                         "${module})\nendif()\n")
      continue()
    endif()
    string(REGEX REPLACE "::.*$" "" ns "${dep}")
    if(ns IN_LIST done)
      continue()
    endif()
    list(APPEND done ${ns})
    if(ns STREQUAL "CUDA")
      string(APPEND deps "find_dependency(CUDAToolkit)\n")
    elseif(ns STREQUAL "CCCL")
      string(APPEND deps
             "find_dependency(CCCL CONFIG HINTS \"${CUDAToolkit_LIBRARY_DIR}/cmake\")\n")
    elseif(ns STREQUAL "OpenMP")
      string(APPEND deps "find_dependency(OpenMP)\n")
    elseif(ns STREQUAL "BLAS" OR ns STREQUAL "LAPACK" OR ns STREQUAL "hwy"
           OR ns STREQUAL "spdlog" OR ns STREQUAL "CLI11")
      string(APPEND deps "find_dependency(${ns})\n")
    else()
      message(WARNING "zerostack install: libraries link ${dep}; the generated config guesses "
                      "find_dependency(${ns}). Add a mapping in cmake/ZsInstall.cmake if wrong.")
      string(APPEND deps "find_dependency(${ns})\n")
    endif()
  endforeach()
  set(${ARG_OUT} "${deps}" PARENT_SCOPE)
  set(${ARG_DONE} ${done} PARENT_SCOPE)
endfunction()

zs_walk_links(TARGETS ${ZS_CPU_TARGETS} EXTRA zs_export_extra IMPORTED zs_imported)
zs_walk_links(TARGETS ${ZS_CUDA_EXPORT_TARGETS} EXTRA zs_cuda_extra IMPORTED zs_cuda_imported)
if(zs_export_extra AND zs_cuda_extra)
  list(REMOVE_ITEM zs_cuda_extra ${zs_export_extra})
endif()
foreach(zs_dep IN LISTS zs_imported)
  if(zs_dep MATCHES "^(CUDA|CCCL)::")
    message(FATAL_ERROR "zerostack install: a CPU library links ${zs_dep}; mark the library "
                        "COMPONENT cuda ([Note: optional components])")
  endif()
endforeach()

# The dependency lines of zerostackConfig.cmake: the baseline every build has, then one per
# namespace of the imported targets found above; the components' own ones apart.
set(zs_deps "find_dependency(Threads)\nfind_dependency(fmt)\nfind_dependency(nlohmann_json)\n")
string(APPEND zs_deps "find_dependency(PkgConfig)\n")
string(APPEND zs_deps "if(NOT TARGET PkgConfig::LIBFABRIC)\n"
                      "  pkg_check_modules(LIBFABRIC REQUIRED QUIET IMPORTED_TARGET libfabric)\n"
                      "endif()\n")
set(zs_done Threads fmt nlohmann_json PkgConfig::LIBFABRIC)
zs_dependency_lines(OUT zs_cpu_lines DONE zs_done IMPORTED ${zs_imported})
string(APPEND zs_deps "${zs_cpu_lines}")
set(ZS_CONFIG_DEPENDENCIES "${zs_deps}")
set(zs_cuda_done ${zs_done})
zs_dependency_lines(OUT ZS_CONFIG_CUDA_DEPENDENCIES DONE zs_cuda_done IMPORTED ${zs_cuda_imported})

# ---- install rules ------------------------------------------------------------------------
install(TARGETS ${ZS_CPU_TARGETS} ${zs_export_extra} zerostack
        EXPORT zerostackTargets
        ARCHIVE DESTINATION lib
        LIBRARY DESTINATION lib
        RUNTIME DESTINATION bin)
if(ZS_CUDA_EXPORT_TARGETS)
  install(TARGETS ${ZS_CUDA_EXPORT_TARGETS} ${zs_cuda_extra} ${ZS_CUDA_EXPORT_INTERFACES}
          EXPORT zerostackCudaTargets
          ARCHIVE DESTINATION lib
          LIBRARY DESTINATION lib
          RUNTIME DESTINATION bin)
  install(EXPORT zerostackCudaTargets NAMESPACE zerostack:: DESTINATION ${ZS_INSTALL_CMAKEDIR})
endif()
foreach(zs_dir runtime kernels optimizers offload)
  if(IS_DIRECTORY ${PROJECT_SOURCE_DIR}/${zs_dir})
    install(DIRECTORY ${PROJECT_SOURCE_DIR}/${zs_dir}/ DESTINATION include/zerostack/${zs_dir}
            FILES_MATCHING PATTERN "*.h"
            PATTERN "*_impl.h" EXCLUDE)  # private to a target's sources (zero_engine_impl.h)
  endif()
endforeach()
install(FILES ${PROJECT_SOURCE_DIR}/include/zerostack/zerostack.h DESTINATION include/zerostack)

install(EXPORT zerostackTargets NAMESPACE zerostack:: DESTINATION ${ZS_INSTALL_CMAKEDIR})
configure_package_config_file(${PROJECT_SOURCE_DIR}/cmake/zerostackConfig.cmake.in
                              ${PROJECT_BINARY_DIR}/zerostackConfig.cmake
                              INSTALL_DESTINATION ${ZS_INSTALL_CMAKEDIR})
# 0.x: minor versions may break the API.
write_basic_package_version_file(${PROJECT_BINARY_DIR}/zerostackConfigVersion.cmake
                                 VERSION ${PROJECT_VERSION} COMPATIBILITY SameMinorVersion)
install(FILES ${PROJECT_BINARY_DIR}/zerostackConfig.cmake
              ${PROJECT_BINARY_DIR}/zerostackConfigVersion.cmake
        DESTINATION ${ZS_INSTALL_CMAKEDIR})
