// StatusIs: a GoogleTest assertion on a Status: its code, and every part somewhere in its
// message (errors must name the values involved). Header-only, for tests.
//
//   EXPECT_TRUE(StatusIs(status, StatusCode::kInvalidArgument, {"stages 5", "units 4"}));
#pragma once

#include <gtest/gtest.h>

#include <initializer_list>
#include <string>

#include "runtime/base/status.h"

namespace zs {

inline ::testing::AssertionResult StatusIs(const Status& status, StatusCode code,
                                           std::initializer_list<std::string> parts) {
  if (status.code() != code) {
    return ::testing::AssertionFailure()
           << "expected " << StatusCodeName(code) << ", got " << status.ToString();
  }
  for (const std::string& part : parts) {
    if (status.message().find(part) == std::string::npos) {
      return ::testing::AssertionFailure()
             << "message lacks \"" << part << "\": " << status.ToString();
    }
  }
  return ::testing::AssertionSuccess();
}

}  // namespace zs
