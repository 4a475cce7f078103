# Cross toolchain for aarch64 Linux (Debian's g++-aarch64-linux-gnu and the :arm64 -dev
# packages, installed by `scripts/setup.sh --arm`). Binaries run under qemu-aarch64 user-mode
# emulation, so ctest runs the tests as on an Arm machine: `make test-arm`.
#
# QEMU's default CPU for user mode ("max") has every extension QEMU implements (NEON, SVE,
# SVE2, 512-bit vectors), so the Highway tests that pin each supported target in turn cover the
# Arm targets compiled. The CPU is left to QEMU_CPU (no -cpu here), so a run can pick another
# vector length: make test-arm runs the suite at 512, 256 (Highway's SVE_256) and 128 bits
# (SVE2_128).
set(CMAKE_SYSTEM_NAME Linux)
set(CMAKE_SYSTEM_PROCESSOR aarch64)
set(CMAKE_C_COMPILER aarch64-linux-gnu-gcc)
set(CMAKE_CXX_COMPILER aarch64-linux-gnu-g++)
# Debian's multiarch layout: target libraries in /usr/lib/aarch64-linux-gnu, shared headers
# in /usr/include. Programs (cmake's own helpers) come from the host.
set(CMAKE_LIBRARY_ARCHITECTURE aarch64-linux-gnu)
set(CMAKE_FIND_ROOT_PATH /usr/aarch64-linux-gnu)
set(CMAKE_FIND_ROOT_PATH_MODE_PROGRAM NEVER)
set(CMAKE_FIND_ROOT_PATH_MODE_LIBRARY BOTH)
set(CMAKE_FIND_ROOT_PATH_MODE_INCLUDE BOTH)
set(CMAKE_FIND_ROOT_PATH_MODE_PACKAGE BOTH)
# -L /: the guest's loader and libc are those of Debian's libc6:arm64 (multiarch, pulled in by
# the :arm64 -dev packages), not the cross toolchain's copy in /usr/aarch64-linux-gnu. The two
# differ in their patch release, and that loader with that libc hangs in the first
# pthread_create.
set(CMAKE_CROSSCOMPILING_EMULATOR qemu-aarch64;-L;/)
# pkg-config (libfabric, OpenBLAS in a full build) must read the arm64 .pc files only.
set(ENV{PKG_CONFIG_LIBDIR} /usr/lib/aarch64-linux-gnu/pkgconfig:/usr/share/pkgconfig)
set(ENV{PKG_CONFIG_PATH} "")
