# Install and package: `cmake --install <build> --prefix P` puts
#   P/lib/libzs_*.a                     every library target of ZS_LIBRARY_TARGETS
#   P/include/zerostack/runtime/**.h    headers by their source path (also kernels/, optimizers/,
#                                       offload/), so "runtime/base/status.h" resolves from
#                                       P/include/zerostack, and the umbrella
#                                       P/include/zerostack/zerostack.h (<zerostack/zerostack.h>)
#   P/lib/cmake/zerostack/              zerostackConfig.cmake, its version file and the targets
# Consumers: find_package(zerostack CONFIG REQUIRED) and link zerostack::zerostack.
# Included at the end of the top-level CMakeLists, so every library target exists already; the
# dependencies the config file finds are read from the libraries' link interfaces, so a layer
# that adds a dependency needs no change here (only a mapping below if its namespace is new).
include(CMakePackageConfigHelpers)

set(ZS_INSTALL_CMAKEDIR lib/cmake/zerostack)

# ---- zerostack::zerostack: every layer, plus <zerostack/zerostack.h> ----------------------
add_library(zerostack INTERFACE)
add_library(zerostack::zerostack ALIAS zerostack)
target_link_libraries(zerostack INTERFACE ${ZS_LIBRARY_TARGETS})
target_include_directories(zerostack INTERFACE $<BUILD_INTERFACE:${PROJECT_SOURCE_DIR}/include>
                                               $<INSTALL_INTERFACE:include>)

# ---- walk the link interfaces -------------------------------------------------------------
# Non-imported targets that the libraries link but that are not zerostack libraries (e.g. the
# NCCL wrapper of cmake/ZsCuda.cmake) join the export set; imported ones become dependencies.
set(zs_export_extra "")
set(zs_imported "")
set(zs_seen "")
set(zs_queue ${ZS_LIBRARY_TARGETS})
while(zs_queue)
  list(POP_FRONT zs_queue zs_target)
  if(zs_target IN_LIST zs_seen)
    continue()
  endif()
  list(APPEND zs_seen ${zs_target})
  get_target_property(zs_links ${zs_target} INTERFACE_LINK_LIBRARIES)
  if(NOT zs_links)
    continue()
  endif()
  foreach(zs_link IN LISTS zs_links)
    string(REGEX REPLACE "^\\$<LINK_ONLY:(.+)>$" "\\1" zs_link "${zs_link}")
    if(zs_link MATCHES "^\\$<" OR NOT TARGET ${zs_link})
      continue()  # a generator expression, a flag or a plain library file
    endif()
    get_target_property(zs_aliased ${zs_link} ALIASED_TARGET)
    if(zs_aliased)
      set(zs_link ${zs_aliased})
    endif()
    get_target_property(zs_is_imported ${zs_link} IMPORTED)
    if(zs_is_imported)
      list(APPEND zs_imported ${zs_link})
    elseif(NOT zs_link IN_LIST ZS_LIBRARY_TARGETS AND NOT zs_link IN_LIST zs_export_extra)
      list(APPEND zs_export_extra ${zs_link})
      list(APPEND zs_queue ${zs_link})
    else()
      list(APPEND zs_queue ${zs_link})
    endif()
  endforeach()
endwhile()
list(REMOVE_DUPLICATES zs_imported)

# The dependency lines of zerostackConfig.cmake: the baseline every build has, then one per
# namespace of the imported targets found above.
set(zs_deps "find_dependency(Threads)\nfind_dependency(fmt)\nfind_dependency(nlohmann_json)\n")
string(APPEND zs_deps "find_dependency(PkgConfig)\n")
string(APPEND zs_deps "if(NOT TARGET PkgConfig::LIBFABRIC)\n"
                      "  pkg_check_modules(LIBFABRIC REQUIRED QUIET IMPORTED_TARGET libfabric)\n"
                      "endif()\n")
if(ZS_HAVE_CUDA)
  string(APPEND zs_deps "find_dependency(CUDAToolkit)\n")
endif()
set(zs_done Threads fmt nlohmann_json PkgConfig::LIBFABRIC)
if(ZS_HAVE_CUDA)
  list(APPEND zs_done CUDA)
endif()
foreach(zs_dep IN LISTS zs_imported)
  if(zs_dep MATCHES "^PkgConfig::(.+)$")
    set(zs_prefix ${CMAKE_MATCH_1})
    if(zs_dep IN_LIST zs_done)
      continue()
    endif()
    list(APPEND zs_done ${zs_dep})
    set(zs_module "${${zs_prefix}_MODULE_NAME}")
    if(NOT zs_module)
      string(TOLOWER ${zs_prefix} zs_module)
    endif()
    string(APPEND zs_deps "if(NOT TARGET ${zs_dep})\n"
                          "  pkg_check_modules(${zs_prefix} REQUIRED QUIET IMPORTED_TARGET "
                          "${zs_module})\nendif()\n")
    continue()
  endif()
  string(REGEX REPLACE "::.*$" "" zs_ns "${zs_dep}")
  if(zs_ns IN_LIST zs_done)
    continue()
  endif()
  list(APPEND zs_done ${zs_ns})
  if(zs_ns STREQUAL "CUDA")
    string(APPEND zs_deps "find_dependency(CUDAToolkit)\n")
  elseif(zs_ns STREQUAL "CCCL")
    string(APPEND zs_deps
           "find_dependency(CCCL CONFIG HINTS \"${CUDAToolkit_LIBRARY_DIR}/cmake\")\n")
  elseif(zs_ns STREQUAL "OpenMP")
    string(APPEND zs_deps "find_dependency(OpenMP)\n")
  elseif(zs_ns STREQUAL "BLAS" OR zs_ns STREQUAL "LAPACK" OR zs_ns STREQUAL "hwy"
         OR zs_ns STREQUAL "spdlog" OR zs_ns STREQUAL "CLI11")
    string(APPEND zs_deps "find_dependency(${zs_ns})\n")
  else()
    message(WARNING "zerostack install: libraries link ${zs_dep}; the generated config guesses "
                    "find_dependency(${zs_ns}). Add a mapping in cmake/ZsInstall.cmake if wrong.")
    string(APPEND zs_deps "find_dependency(${zs_ns})\n")
  endif()
endforeach()
set(ZS_CONFIG_DEPENDENCIES "${zs_deps}")

# ---- install rules ------------------------------------------------------------------------
install(TARGETS ${ZS_LIBRARY_TARGETS} ${zs_export_extra} zerostack
        EXPORT zerostackTargets
        ARCHIVE DESTINATION lib
        LIBRARY DESTINATION lib
        RUNTIME DESTINATION bin)
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
