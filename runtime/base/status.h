// Status and StatusOr<T>: the error values of zerostack.
//
// Contract
// - Anything that touches the OS, the network, a device or a file returns a Status (or a
//   StatusOr<T>) whose message names the values involved (the key, the file, the rank, the
//   size). Library code never exits or asserts on such errors; ZS_CHECK (check.h) is for
//   programmer bugs only.
// - Status is a small value type (a code and a message), cheap to move, safe to copy and to
//   pass between threads. It is [[nodiscard]]: ignoring one is a compile warning.
// - ZS_RETURN_IF_ERROR(expr) and ZS_ASSIGN_OR_RETURN(lhs, expr) propagate errors upward.
#pragma once

#include <string>
#include <string_view>
#include <utility>
#include <variant>

#include "runtime/base/check.h"

namespace zs {

enum class StatusCode {
  kOk = 0,
  kInvalidArgument,    // the caller passed a bad value (a key, a size, a rank)
  kNotFound,           // a named thing does not exist (a file, a backend, a key)
  kOutOfMemory,        // an allocation past a tier's capacity
  kDeadlineExceeded,   // a wait ran past its timeout (a silent or mismatched peer)
  kUnavailable,        // a peer or a device is gone (a rank died, no GPU)
  kFailedPrecondition, // the call is valid but not in this state
  kAborted,            // the operation was cancelled because another one failed
  kIoError,            // the OS refused a read, write, open, ...
  kUnimplemented,      // the backend lacks this operation
  kInternal,           // a library or driver returned something unexpected
};

std::string_view StatusCodeName(StatusCode code);

class [[nodiscard]] Status {
 public:
  Status() = default;
  Status(StatusCode code, std::string message) : code_(code), message_(std::move(message)) {}

  static Status Ok() { return Status(); }

  bool ok() const { return code_ == StatusCode::kOk; }
  StatusCode code() const { return code_; }
  const std::string& message() const { return message_; }

  // "DEADLINE_EXCEEDED: all_reduce on group 'dp' ..." (or "OK").
  std::string ToString() const;

  // Returns a copy whose message is "<context>: <message>"; the code is kept.
  Status WithContext(std::string_view context) const;

  // Marks a status as deliberately ignored.
  void IgnoreError() const {}

 private:
  StatusCode code_ = StatusCode::kOk;
  std::string message_;
};

inline Status OkStatus() { return Status(); }
Status InvalidArgumentError(std::string message);
Status NotFoundError(std::string message);
Status OutOfMemoryError(std::string message);
Status DeadlineExceededError(std::string message);
Status UnavailableError(std::string message);
Status FailedPreconditionError(std::string message);
Status AbortedError(std::string message);
Status IoError(std::string message);
Status UnimplementedError(std::string message);
Status InternalError(std::string message);

// Holds either a T or a non-OK Status.
template <typename T>
class [[nodiscard]] StatusOr {
 public:
  StatusOr(const Status& status) : value_(status) {  // NOLINT: implicit by design
    ZS_CHECK(!status.ok(), "StatusOr built from an OK status without a value");
  }
  StatusOr(Status&& status) : value_(std::move(status)) {  // NOLINT
    ZS_CHECK(!std::get<Status>(value_).ok(), "StatusOr built from an OK status without a value");
  }
  StatusOr(const T& value) : value_(value) {}  // NOLINT
  StatusOr(T&& value) : value_(std::move(value)) {}  // NOLINT
  template <typename U>
    requires(std::is_constructible_v<T, U &&> && !std::is_same_v<std::decay_t<U>, Status> &&
             !std::is_same_v<std::decay_t<U>, StatusOr<T>> && !std::is_same_v<std::decay_t<U>, T>)
  StatusOr(U&& value) : value_(T(std::forward<U>(value))) {}  // NOLINT

  bool ok() const { return std::holds_alternative<T>(value_); }
  Status status() const { return ok() ? Status() : std::get<Status>(value_); }

  T& value() & {
    CheckOk();
    return std::get<T>(value_);
  }
  const T& value() const& {
    CheckOk();
    return std::get<T>(value_);
  }
  T&& value() && {
    CheckOk();
    return std::get<T>(std::move(value_));
  }
  T& operator*() & { return value(); }
  const T& operator*() const& { return value(); }
  T&& operator*() && { return std::move(*this).value(); }
  T* operator->() { return &value(); }
  const T* operator->() const { return &value(); }

 private:
  void CheckOk() const {
    ZS_CHECK(ok(), "StatusOr::value() on an error: {}", std::get<Status>(value_).ToString());
  }
  std::variant<Status, T> value_;
};

namespace internal {
inline Status AsStatus(Status s) { return s; }
template <typename T>
Status AsStatus(const StatusOr<T>& s) {
  return s.status();
}
}  // namespace internal

}  // namespace zs

#define ZS_INTERNAL_CONCAT2(a, b) a##b
#define ZS_INTERNAL_CONCAT(a, b) ZS_INTERNAL_CONCAT2(a, b)

// Returns the Status of `expr` from the enclosing function if it is not OK.
#define ZS_RETURN_IF_ERROR(expr)                                          \
  do {                                                                    \
    ::zs::Status zs_status_ = ::zs::internal::AsStatus((expr));           \
    if (!zs_status_.ok()) return zs_status_;                              \
  } while (0)

// `lhs = value of expr`, or returns its error. lhs may declare: ZS_ASSIGN_OR_RETURN(auto x, F());
#define ZS_ASSIGN_OR_RETURN(lhs, expr) \
  ZS_INTERNAL_ASSIGN_OR_RETURN(ZS_INTERNAL_CONCAT(zs_statusor_, __LINE__), lhs, expr)
#define ZS_INTERNAL_ASSIGN_OR_RETURN(tmp, lhs, expr) \
  auto tmp = (expr);                                 \
  if (!tmp.ok()) return tmp.status();                \
  lhs = std::move(tmp).value()
