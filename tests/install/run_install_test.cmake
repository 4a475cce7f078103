# cmake -P script of install_test (see CMakeLists.txt): install, check the layout, build the
# consumer and README.md's example against the prefix only (without the CUDA toolkit), run them,
# check that they link no CUDA or NCCL library; with the GPU components installed, build a
# consumer of zerostack::nccl and check that it has the nccl backend and the cuda device. Any
# failure is a FATAL_ERROR naming the step.
foreach(var BUILD_DIR PREFIX CONSUMER_SOURCE CONSUMER_BUILD GENERATOR CXX_COMPILER README)
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

# README.md's example, literally: the ```cpp block between the install_test markers.
file(READ ${README} readme)
set(begin_marker "<!-- install_test: readme_example.cc begin -->")
set(end_marker "<!-- install_test: readme_example.cc end -->")
string(FIND "${readme}" "${begin_marker}" begin_at)
string(FIND "${readme}" "${end_marker}" end_at)
if(begin_at EQUAL -1 OR end_at EQUAL -1 OR end_at LESS begin_at)
  message(FATAL_ERROR "install_test: ${README} lacks the example markers '${begin_marker}' and "
                      "'${end_marker}'")
endif()
string(LENGTH "${begin_marker}" begin_length)
math(EXPR begin_at "${begin_at} + ${begin_length}")
math(EXPR example_length "${end_at} - ${begin_at}")
string(SUBSTRING "${readme}" ${begin_at} ${example_length} example)
string(STRIP "${example}" example)
if(NOT example MATCHES "^```cpp\n(.*)\n```$")
  message(FATAL_ERROR "install_test: between the README markers there must be one ```cpp "
                      "block, found:\n${example}")
endif()
set(example "${CMAKE_MATCH_1}")
string(FIND "${example}" "```" fence)
if(NOT fence EQUAL -1)
  message(FATAL_ERROR "install_test: more than one code block between the README markers")
endif()
set(example_file ${CONSUMER_BUILD}-src/readme_example.cc)
file(REMOVE_RECURSE ${CONSUMER_BUILD}-src ${CONSUMER_BUILD}-run ${CONSUMER_BUILD}-gpu)
file(WRITE ${example_file} "${example}\n")

# Only the prefix: no package registry, no build tree, no system install of zerostack; and no
# CUDA toolkit: a CPU-only client must not need it, whatever the package was built with.
run_step("configure the consumer (CUDAToolkit disabled)"
         ${CMAKE_COMMAND} -S ${CONSUMER_SOURCE} -B ${CONSUMER_BUILD} -G ${GENERATOR}
         -DCMAKE_CXX_COMPILER=${CXX_COMPILER} -DCMAKE_PREFIX_PATH=${PREFIX}
         -Dzerostack_DIR=${PREFIX}/lib/cmake/zerostack
         -DCMAKE_FIND_USE_PACKAGE_REGISTRY=OFF -DCMAKE_DISABLE_FIND_PACKAGE_CUDAToolkit=ON
         -DCMAKE_DISABLE_FIND_PACKAGE_CCCL=ON -DZS_README_EXAMPLE=${example_file} ${flags})
run_step("build the consumer and the README example" ${CMAKE_COMMAND} --build ${CONSUMER_BUILD})
run_step("run the consumer" ${CONSUMER_BUILD}/zerostack_consumer)
message(STATUS "consumer output:\n${step_output}")
set(cpu_output "${step_output}")
file(MAKE_DIRECTORY ${CONSUMER_BUILD}-run)  # the example writes its export and checkpoint here
execute_process(COMMAND ${CONSUMER_BUILD}/readme_example WORKING_DIRECTORY ${CONSUMER_BUILD}-run
                RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "install_test: README.md's example failed (${rc}):\n${out}\n${err}")
endif()
if(NOT EXISTS ${CONSUMER_BUILD}-run/linear.safetensors OR NOT EXISTS ${CONSUMER_BUILD}-run/ckpt)
  message(FATAL_ERROR "install_test: README.md's example wrote no export or checkpoint:\n${out}")
endif()
message(STATUS "install_test: run README.md's example: ok\n${out}")

# The ELF NEEDED entries of a program.
find_program(READELF readelf REQUIRED)
function(needed_libraries program out_var)
  execute_process(COMMAND ${READELF} -d ${program} RESULT_VARIABLE rc OUTPUT_VARIABLE dynamic)
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "install_test: readelf -d ${program} failed (${rc})")
  endif()
  string(REGEX MATCHALL "\\(NEEDED\\)[^[]*\\[[^]]+\\]" entries "${dynamic}")
  set(libs "")
  foreach(entry IN LISTS entries)
    string(REGEX REPLACE ".*\\[(.+)\\]" "\\1" lib "${entry}")
    list(APPEND libs ${lib})
  endforeach()
  set(${out_var} ${libs} PARENT_SCOPE)
endfunction()

# A CPU-only client links no CUDA or NCCL library, and has neither the nccl backend nor the
# cuda device.
foreach(program zerostack_consumer readme_example)
  needed_libraries(${CONSUMER_BUILD}/${program} libs)
  if(NOT libs)
    message(FATAL_ERROR "install_test: ${program} has no NEEDED entries (readelf parse?)")
  endif()
  foreach(lib IN LISTS libs)
    if(lib MATCHES "^lib(cudart|nccl|cuda|cublas|cufft|curand|cusparse)[.-]")
      message(FATAL_ERROR "install_test: the CPU-only ${program} links ${lib} (NEEDED: ${libs})")
    endif()
  endforeach()
  message(STATUS "install_test: ${program} NEEDED: ${libs}")
endforeach()
if(cpu_output MATCHES " nccl" OR cpu_output MATCHES " cuda:")
  message(FATAL_ERROR "install_test: the CPU-only consumer has nccl or cuda:\n${cpu_output}")
endif()

# Without CUDA in the package, its config file does not look for the toolkit at all.
file(READ ${PREFIX}/lib/cmake/zerostack/zerostackConfig.cmake config_text)
string(REGEX MATCH "set\\(zerostack_WITH_CUDA ([A-Za-z0-9]+)\\)" _ "${config_text}")
set(with_cuda "${CMAKE_MATCH_1}")
string(REGEX MATCH "set\\(zerostack_WITH_NCCL ([A-Za-z0-9]+)\\)" _ "${config_text}")
set(with_nccl "${CMAKE_MATCH_1}")
if(NOT with_cuda)
  if(config_text MATCHES "CUDAToolkit" OR EXISTS ${PREFIX}/lib/cmake/zerostack/zerostackCudaTargets.cmake)
    message(FATAL_ERROR "install_test: a package without CUDA refers to the CUDA toolkit")
  endif()
  message(STATUS "install_test: package without CUDA: no GPU components to check")
  return()
endif()

# The GPU components: a client that links zerostack::nccl has the backend and the device.
set(component cuda)
if(with_nccl)
  set(component nccl)
endif()
run_step("configure the GPU consumer (COMPONENTS cuda nccl)"
         ${CMAKE_COMMAND} -S ${CONSUMER_SOURCE} -B ${CONSUMER_BUILD}-gpu -G ${GENERATOR}
         -DCMAKE_CXX_COMPILER=${CXX_COMPILER} -DCMAKE_PREFIX_PATH=${PREFIX}
         -Dzerostack_DIR=${PREFIX}/lib/cmake/zerostack
         -DCMAKE_FIND_USE_PACKAGE_REGISTRY=OFF -DZS_COMPONENTS=${component} ${flags})
run_step("build the GPU consumer" ${CMAKE_COMMAND} --build ${CONSUMER_BUILD}-gpu)
needed_libraries(${CONSUMER_BUILD}-gpu/zerostack_gpu_consumer gpu_libs)
if(NOT gpu_libs MATCHES "libcudart" OR (with_nccl AND NOT gpu_libs MATCHES "libnccl"))
  message(FATAL_ERROR "install_test: the consumer of zerostack::nccl does not link CUDA and NCCL "
                      "(NEEDED: ${gpu_libs})")
endif()
run_step("run the GPU consumer" ${CONSUMER_BUILD}-gpu/zerostack_gpu_consumer)
message(STATUS "GPU consumer output:\n${step_output}")
if(NOT step_output MATCHES "cuda:<ordinal>" OR (with_nccl AND NOT step_output MATCHES " nccl"))
  message(FATAL_ERROR "install_test: the consumer of zerostack::nccl lacks the cuda device or the "
                      "nccl backend:\n${step_output}")
endif()
