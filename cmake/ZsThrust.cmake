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
# cmake/ZsCuda.cmake already found CCCL (CUDA builds), that is reused. Without a toolkit, the
# headers of Debian's libthrust-dev (Thrust 1.17, installed by scripts/setup.sh only where no
# toolkit is) serve the CPU path.
include_guard(GLOBAL)

if(NOT TARGET CCCL::CCCL OR NOT COMMAND thrust_create_target)
  find_package(CUDAToolkit QUIET)
  if(CUDAToolkit_FOUND)
    find_package(CCCL CONFIG QUIET HINTS "${CUDAToolkit_LIBRARY_DIR}/cmake")
  endif()
endif()

if(TARGET CCCL::CCCL AND COMMAND thrust_create_target)
  thrust_create_target(zs_thrust_cpp HOST CPP DEVICE CPP GLOBAL)
  set(zs_thrust_systems "CPP")
  if(ZS_HAVE_CUDA)
    thrust_create_target(zs_thrust_cuda HOST CPP DEVICE CUDA GLOBAL)
    string(APPEND zs_thrust_systems ", CUDA")
  endif()
  message(STATUS "zerostack: Thrust ${THRUST_VERSION} from CCCL, systems: ${zs_thrust_systems}")
else()
  # No CUDA toolkit (a machine without one): the CPU path needs only Thrust's headers, which
  # scripts/setup.sh then installs from Debian (libthrust-dev, Thrust 1.17; it installs it only
  # where no toolkit is, so a CUDA build never mixes the two).
  find_path(ZS_THRUST_INCLUDE_DIR thrust/version.h
            DOC "Thrust headers, used when no CUDA toolkit (CCCL) is found")
  if(NOT ZS_THRUST_INCLUDE_DIR)
    message(FATAL_ERROR
      "zerostack: runtime/parallel/expert needs Thrust: from a CUDA toolkit's CCCL (looked for "
      "nvcc via CUDAToolkit_ROOT, PATH and /usr/local/cuda) or, without a toolkit, Debian's "
      "libthrust-dev. Run scripts/setup.sh, or pass -DCUDAToolkit_ROOT=<toolkit> or "
      "-DZS_THRUST_INCLUDE_DIR=<dir holding thrust/>.")
  endif()
  add_library(zs_thrust_cpp INTERFACE IMPORTED GLOBAL)
  target_include_directories(zs_thrust_cpp SYSTEM INTERFACE "${ZS_THRUST_INCLUDE_DIR}")
  target_compile_definitions(zs_thrust_cpp INTERFACE
    THRUST_HOST_SYSTEM=THRUST_HOST_SYSTEM_CPP THRUST_DEVICE_SYSTEM=THRUST_DEVICE_SYSTEM_CPP)
  message(STATUS "zerostack: Thrust headers from ${ZS_THRUST_INCLUDE_DIR} (no CUDA toolkit), "
                 "system: CPP")
endif()
