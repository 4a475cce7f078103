# ZsThrust: Thrust from the CUDA toolkit's CCCL headers, for code that the C++ compiler builds
# (and, when ZS_HAVE_CUDA, for .cu files that nvcc builds). Included by the targets that use
# Thrust (runtime/parallel/expert); include_guard makes a second include a no-op.
#
# Defines two imported INTERFACE targets (GLOBAL):
#   zs_thrust_cpp   host and device system CPP: Thrust's sequential C++ backend, compiled by g++
#                   in every build (also -DZS_WITH_CUDA=OFF and the sanitizer builds). Why CPP
#                   and not OMP: ranks already run as threads (one per core), so OpenMP teams
#                   inside a rank would oversubscribe the cores, and libgomp is not instrumented
#                   for ThreadSanitizer (its barriers show up as false races). A CPU call site
#                   names thrust::cpp::par, so the choice is made in code, not by this macro.
#   zs_thrust_cuda  (ZS_HAVE_CUDA only) host CPP, device CUDA, for .cu files (thrust::cuda::par).
# Link them PRIVATE and wrapped in $<BUILD_INTERFACE:...>: the Thrust headers stay private to
# the .cc/.cu files that use them, so installed zerostack headers and the package config need
# no CCCL (cmake/ZsInstall.cmake skips generator expressions).
#
# How the headers are found, without enabling the CUDA language: find_package(CUDAToolkit)
# locates the toolkit (CUDAToolkit_ROOT, nvcc on PATH, /usr/local/cuda), then
# find_package(CCCL CONFIG) looks beside its libraries (<toolkit>/lib64/cmake/cccl). When
# cmake/ZsCuda.cmake already found CCCL (CUDA builds), that is reused. No toolkit at all is a
# configure error: scripts/setup.sh installs it, and Debian's libthrust-dev (Thrust 1.17) must
# not stand in for it.
include_guard(GLOBAL)

if(NOT TARGET CCCL::CCCL OR NOT COMMAND thrust_create_target)
  find_package(CUDAToolkit QUIET)
  if(NOT CUDAToolkit_FOUND)
    message(FATAL_ERROR
      "zerostack: Thrust (CCCL) comes from the CUDA toolkit, and no toolkit was found (looked "
      "for nvcc via CUDAToolkit_ROOT, PATH and /usr/local/cuda). runtime/parallel/expert needs "
      "its headers also in CPU-only builds: run scripts/setup.sh, or pass "
      "-DCUDAToolkit_ROOT=<toolkit>.")
  endif()
  find_package(CCCL CONFIG QUIET HINTS "${CUDAToolkit_LIBRARY_DIR}/cmake")
  if(NOT CCCL_FOUND)
    message(FATAL_ERROR
      "zerostack: CUDA toolkit ${CUDAToolkit_VERSION} found at '${CUDAToolkit_BIN_DIR}', but "
      "not its CCCL package (looked for cccl-config.cmake under "
      "'${CUDAToolkit_LIBRARY_DIR}/cmake'). Reinstall the toolkit with scripts/setup.sh.")
  endif()
endif()

thrust_create_target(zs_thrust_cpp HOST CPP DEVICE CPP GLOBAL)
set(zs_thrust_systems "CPP")
if(ZS_HAVE_CUDA)
  thrust_create_target(zs_thrust_cuda HOST CPP DEVICE CUDA GLOBAL)
  string(APPEND zs_thrust_systems ", CUDA")
endif()
message(STATUS "zerostack: Thrust ${THRUST_VERSION} from CCCL, systems: ${zs_thrust_systems}")
