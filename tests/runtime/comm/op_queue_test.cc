// OpQueue and CommHandle semantics: order, broken-after-failure, Wait twice, Test, the
// blocking forms on the caller's thread, and the check that catches a handle destroyed without
// Wait().
#include "runtime/comm/op_queue.h"

#include <gtest/gtest.h>

#include <chrono>
#include <future>
#include <string>
#include <thread>
#include <vector>

#include "runtime/comm/blocking_call.h"
#include "runtime/comm/comm_handle.h"

namespace zs {
namespace {

TEST(OpQueueTest, RunsOperationsInSubmissionOrder) {
  std::vector<int> ran;  // written by the worker only, read after every Wait
  std::vector<CommHandle> handles;
  {
    OpQueue queue("test queue");
    for (int i = 0; i < 100; ++i) {
      handles.push_back(queue.Submit("op " + std::to_string(i), [&ran, i] {
        ran.push_back(i);
        return OkStatus();
      }));
    }
    for (CommHandle& h : handles) EXPECT_TRUE(h.Wait().ok());
  }
  ASSERT_EQ(ran.size(), 100u);
  for (int i = 0; i < 100; ++i) EXPECT_EQ(ran[i], i);
}

TEST(OpQueueTest, BreaksAfterTheFirstFailure) {
  OpQueue queue("queue 'q'");
  bool third_ran = false;
  CommHandle first = queue.Submit("first", [] { return OkStatus(); });
  CommHandle second = queue.Submit("second", [] { return InternalError("boom in second"); });
  CommHandle third = queue.Submit("third", [&] {
    third_ran = true;
    return OkStatus();
  });
  EXPECT_TRUE(first.Wait().ok());
  Status s2 = second.Wait();
  EXPECT_EQ(s2.code(), StatusCode::kInternal);
  Status s3 = third.Wait();
  EXPECT_EQ(s3.code(), StatusCode::kAborted);
  EXPECT_NE(s3.message().find("third"), std::string::npos) << s3.ToString();
  EXPECT_NE(s3.message().find("boom in second"), std::string::npos) << s3.ToString();
  EXPECT_FALSE(third_ran);
  EXPECT_EQ(queue.broken_status().code(), StatusCode::kInternal);

  // Submitted after the failure: also aborted, never run.
  bool later_ran = false;
  CommHandle later = queue.Submit("later", [&] {
    later_ran = true;
    return OkStatus();
  });
  EXPECT_EQ(later.Wait().code(), StatusCode::kAborted);
  EXPECT_FALSE(later_ran);
}

TEST(OpQueueTest, DestructorRunsQueuedOperations) {
  std::promise<void> release;
  std::shared_future<void> released = release.get_future().share();
  int ran = 0;
  std::vector<CommHandle> handles;
  {
    OpQueue queue("draining queue");
    handles.push_back(queue.Submit("blocked", [released] {
      released.wait();
      return OkStatus();
    }));
    for (int i = 0; i < 5; ++i) {
      handles.push_back(queue.Submit("counted", [&ran] {
        ++ran;
        return OkStatus();
      }));
    }
    release.set_value();
  }  // joins after running all six
  EXPECT_EQ(ran, 5);
  for (CommHandle& h : handles) EXPECT_TRUE(h.Test());
  for (CommHandle& h : handles) EXPECT_TRUE(h.Wait().ok());
}

// [Note: blocking forms run on the caller]: inside a BlockingCallScope an idle queue runs the
// operation before Submit returns, on the submitting thread; outside it, on the worker.
TEST(OpQueueTest, BlockingCallRunsOnTheCallerWhenIdle) {
  OpQueue queue("queue");
  const std::thread::id caller = std::this_thread::get_id();
  std::thread::id ran_on;
  {
    BlockingCallScope blocking;
    CommHandle h = queue.Submit("blocking", [&] {
      ran_on = std::this_thread::get_id();
      return OkStatus();
    });
    EXPECT_TRUE(h.Test());  // already done: it ran inside Submit
    EXPECT_TRUE(h.Wait().ok());
  }
  EXPECT_EQ(ran_on, caller);
  EXPECT_EQ(queue.ran_on_caller(), 1);

  CommHandle h = queue.Submit("async", [&] {
    ran_on = std::this_thread::get_id();
    return OkStatus();
  });
  EXPECT_TRUE(h.Wait().ok());
  EXPECT_NE(ran_on, caller);
  EXPECT_EQ(queue.ran_on_caller(), 1);
  EXPECT_FALSE(BlockingCallScope::Active());
}

// A blocking call behind an operation still queued or running waits its turn on the worker:
// order is kept.
TEST(OpQueueTest, BlockingCallBehindAQueuedOperationKeepsTheOrder) {
  OpQueue queue("queue");
  std::promise<void> release;
  std::shared_future<void> released = release.get_future().share();
  std::vector<int> ran;  // written by whichever thread runs an item, one at a time
  CommHandle first = queue.Submit("gated", [&, released] {
    released.wait();
    ran.push_back(1);
    return OkStatus();
  });
  std::thread releaser([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
    release.set_value();
  });
  {
    BlockingCallScope blocking;
    CommHandle second = queue.Submit("blocking", [&] {
      ran.push_back(2);
      return OkStatus();
    });
    EXPECT_TRUE(second.Wait().ok());
  }
  releaser.join();
  EXPECT_TRUE(first.Wait().ok());
  EXPECT_EQ(ran, (std::vector<int>{1, 2}));
  EXPECT_EQ(queue.ran_on_caller(), 0);
}

// Failure semantics are the same on the caller: a failing blocking call breaks the queue, and
// a blocking call on a broken queue is aborted without running.
TEST(OpQueueTest, BlockingCallFailureBreaksTheQueue) {
  OpQueue queue("queue 'q'");
  BlockingCallScope blocking;
  CommHandle failing = queue.Submit("first", [] { return InternalError("boom on the caller"); });
  EXPECT_EQ(failing.Wait().code(), StatusCode::kInternal);
  bool ran = false;
  CommHandle later = queue.Submit("later", [&] {
    ran = true;
    return OkStatus();
  });
  Status s = later.Wait();
  EXPECT_EQ(s.code(), StatusCode::kAborted);
  EXPECT_NE(s.message().find("boom on the caller"), std::string::npos) << s.ToString();
  EXPECT_FALSE(ran);
  EXPECT_EQ(queue.broken_status().code(), StatusCode::kInternal);
}

TEST(CommHandleTest, TestIsFalseUntilTheOperationCompletes) {
  OpQueue queue("queue");
  std::promise<void> release;
  std::shared_future<void> released = release.get_future().share();
  CommHandle h = queue.Submit("gated", [released] {
    released.wait();
    return OkStatus();
  });
  EXPECT_FALSE(h.Test());
  release.set_value();
  EXPECT_TRUE(h.Wait().ok());
  EXPECT_TRUE(h.Test());
}

TEST(CommHandleTest, WaitTwiceReturnsTheSameStatus) {
  OpQueue queue("queue");
  CommHandle h = queue.Submit("failing", [] { return UnavailableError("rank 3 is gone"); });
  Status a = h.Wait();
  Status b = h.Wait();
  EXPECT_EQ(a.code(), StatusCode::kUnavailable);
  EXPECT_EQ(a.code(), b.code());
  EXPECT_EQ(a.message(), b.message());
}

TEST(CommHandleTest, EmptyAndCompletedHandles) {
  CommHandle empty;
  EXPECT_TRUE(empty.Test());
  EXPECT_TRUE(empty.Wait().ok());
  CommHandle done = CommHandle::Completed(InvalidArgumentError("bad root 9"), "broadcast");
  EXPECT_TRUE(done.Test());
  EXPECT_EQ(done.Wait().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(done.Wait().message(), "bad root 9");
}

TEST(CommHandleTest, MovedHandleCarriesTheOperation) {
  CommHandle a = CommHandle::Completed(AbortedError("x"), "op");
  CommHandle b = std::move(a);
  EXPECT_EQ(b.Wait().code(), StatusCode::kAborted);
  CommHandle c;
  c = std::move(b);  // b was waited: overwriting it is fine
  EXPECT_EQ(c.Wait().code(), StatusCode::kAborted);
}

TEST(CommHandleDeathTest, DestroyingAnUnwaitedHandleIsCaught) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  EXPECT_DEATH(
      { CommHandle h = CommHandle::Completed(OkStatus(), "all_reduce(count=4) on group 'dp'"); },
      "destroyed without Wait");
  EXPECT_DEATH(
      {
        CommHandle h = CommHandle::Completed(OkStatus(), "first");
        h = CommHandle::Completed(OkStatus(), "second");
      },
      "never waited");
}

}  // namespace
}  // namespace zs
