# cmake -P script of install_test (see CMakeLists.txt): install, check the layout, build the
# consumer against the prefix only, run it. Any failure is a FATAL_ERROR naming the step.
foreach(var BUILD_DIR PREFIX CONSUMER_SOURCE CONSUMER_BUILD GENERATOR CXX_COMPILER)
  if(NOT DEFINED ${var})
    message(FATAL_ERROR "run_install_test.cmake: -D${var}=... is required")
  endif()
endforeach()

function(run_step name)
  execute_process(COMMAND ${ARGN} RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "install_test: ${name} failed (${rc}):\n${out}\n${err}")
  endif()
  message(STATUS "install_test: ${name}: ok")
  set(step_output "${out}" PARENT_SCOPE)
endfunction()

file(REMOVE_RECURSE ${PREFIX} ${CONSUMER_BUILD})
run_step("cmake --install ${BUILD_DIR} --prefix ${PREFIX}"
         ${CMAKE_COMMAND} --install ${BUILD_DIR} --prefix ${PREFIX})

foreach(file include/zerostack/zerostack.h include/zerostack/runtime/base/status.h
             include/zerostack/runtime/comm/communicator.h
             lib/cmake/zerostack/zerostackConfig.cmake
             lib/cmake/zerostack/zerostackConfigVersion.cmake
             lib/cmake/zerostack/zerostackTargets.cmake lib/libzs_base.a)
  if(NOT EXISTS ${PREFIX}/${file})
    message(FATAL_ERROR "install_test: ${PREFIX}/${file} was not installed")
  endif()
endforeach()
# Installed headers must stand alone: none may include a file generated into the build tree.
file(GLOB_RECURSE headers ${PREFIX}/include/*.h)
foreach(header IN LISTS headers)
  file(STRINGS ${header} generated_includes REGEX "#include \"generated/")
  if(generated_includes)
    message(FATAL_ERROR "install_test: ${header} includes a generated file: ${generated_includes}")
  endif()
endforeach()

set(flags "")
if(SANITIZE STREQUAL "address")
  set(flags -DCMAKE_CXX_FLAGS=-fsanitize=address,undefined
            -DCMAKE_EXE_LINKER_FLAGS=-fsanitize=address,undefined)
elseif(SANITIZE STREQUAL "thread")
  set(flags -DCMAKE_CXX_FLAGS=-fsanitize=thread -DCMAKE_EXE_LINKER_FLAGS=-fsanitize=thread)
endif()
# Only the prefix: no package registry, no build tree, no system install of zerostack.
run_step("configure the consumer"
         ${CMAKE_COMMAND} -S ${CONSUMER_SOURCE} -B ${CONSUMER_BUILD} -G ${GENERATOR}
         -DCMAKE_CXX_COMPILER=${CXX_COMPILER} -DCMAKE_PREFIX_PATH=${PREFIX}
         -Dzerostack_DIR=${PREFIX}/lib/cmake/zerostack
         -DCMAKE_FIND_USE_PACKAGE_REGISTRY=OFF ${flags})
run_step("build the consumer" ${CMAKE_COMMAND} --build ${CONSUMER_BUILD})
run_step("run the consumer" ${CONSUMER_BUILD}/zerostack_consumer)
message(STATUS "consumer output:\n${step_output}")
