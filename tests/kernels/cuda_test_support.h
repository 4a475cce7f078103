// GoogleTest helpers shared by the CUDA kernel tests: skip (with the reason) when no device is
// usable, and assert that a CUDA call succeeded.
#pragma once

#include <gtest/gtest.h>

#include "kernels/cuda/device_probe.h"

#define ZS_SKIP_WITHOUT_GPU()                                                              \
  do {                                                                                     \
    if (const std::string reason = ::zs::kernels::NoCudaDeviceReason(); !reason.empty()) { \
      GTEST_SKIP() << "no CUDA device: " << reason;                                        \
    }                                                                                      \
  } while (0)

#define ZS_CUDA_OK(expr) ASSERT_EQ((expr), cudaSuccess) << #expr
