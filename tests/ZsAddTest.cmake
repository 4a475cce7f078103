# zs_add_test(NAME SOURCES ... LIBS ... [LABELS ...] [SERIAL] [TIMEOUT s]): one GoogleTest
# binary, registered with ctest as a single test (gtest_discover_tests would run every case in
# its own process; our multi-rank tests are cheaper in one).
# Tests labelled "tsan" also build under the zs_tsan_tests target (make test-tsan).
# ZS_TEST_TIMEOUT_SCALE multiplies every timeout: emulated runs (make test-arm) are slower.
# Included by tests/CMakeLists.txt and, for ZS_KERNELS_ONLY builds, by the top level.
set(ZS_TEST_TIMEOUT_SCALE 1 CACHE STRING "Integer factor applied to every test's timeout")
if(NOT ZS_TEST_TIMEOUT_SCALE MATCHES "^[1-9][0-9]*$")
  message(FATAL_ERROR "ZS_TEST_TIMEOUT_SCALE='${ZS_TEST_TIMEOUT_SCALE}' is not a positive integer")
endif()
add_custom_target(zs_tsan_tests)
function(zs_add_test name)
  cmake_parse_arguments(ARG "SERIAL" "TIMEOUT" "SOURCES;LIBS;LABELS" ${ARGN})
  add_executable(${name} ${ARG_SOURCES})
  target_link_libraries(${name} PRIVATE ${ARG_LIBS} GTest::gtest GTest::gtest_main)
  add_test(NAME ${name} COMMAND ${name})
  if(NOT ARG_TIMEOUT)
    set(ARG_TIMEOUT 300)
  endif()
  math(EXPR ARG_TIMEOUT "${ARG_TIMEOUT} * ${ZS_TEST_TIMEOUT_SCALE}")
  set_tests_properties(${name} PROPERTIES TIMEOUT ${ARG_TIMEOUT} SKIP_RETURN_CODE 77
                                          LABELS "${ARG_LABELS}")
  if("tsan" IN_LIST ARG_LABELS)
    add_dependencies(zs_tsan_tests ${name})
  endif()
  if(ARG_SERIAL)
    set_tests_properties(${name} PROPERTIES RUN_SERIAL TRUE)
  endif()
endfunction()

