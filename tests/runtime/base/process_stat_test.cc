// runtime/base/process_stat.h: this process is alive with the start time /proc gives it; a
// child is alive while it runs, gone once it is a zombie (not yet reaped) and once reaped; a
// recorded start time that does not match (a reused pid) is gone; the parser finds the fields
// after a command name holding spaces and parentheses, and names the line it cannot parse.
#include "runtime/base/process_stat.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

namespace zs {
namespace {

using ::testing::HasSubstr;

TEST(ProcessStatTest, ParsesFieldsAfterTheLastParenthesis) {
  // Fields 4..21 are zeros here; field 22 (starttime) is 98765.
  std::string line = "4321 (a (b) c) ) S";
  for (int field = 4; field <= 21; ++field) line += " 0";
  line += " 98765 1 2 3";
  const StatusOr<ProcessStat> stat = ParseProcessStat(line);
  ASSERT_TRUE(stat.ok()) << stat.status().message();
  EXPECT_EQ(stat->state, 'S');
  EXPECT_EQ(stat->start_time, 98765u);

  const StatusOr<ProcessStat> short_line = ParseProcessStat("4321 (x) Z 1 2");
  ASSERT_FALSE(short_line.ok());
  EXPECT_THAT(short_line.status().message(), HasSubstr("'4321 (x) Z 1 2' has no field 6"));
  EXPECT_FALSE(ParseProcessStat("no parenthesis at all").ok());
}

TEST(ProcessStatTest, ThisProcessIsAliveWithItsStartTime) {
  const StatusOr<ProcessStat> self = ReadProcessStat(::getpid());
  ASSERT_TRUE(self.ok()) << self.status().message();
  EXPECT_EQ(self->state, 'R');  // it is reading its own stat
  EXPECT_GT(self->start_time, 0u);
  EXPECT_FALSE(ProcessGone(::getpid()));
  EXPECT_FALSE(ProcessGone(::getpid(), self->start_time));
  EXPECT_TRUE(ProcessGone(::getpid(), self->start_time + 1));  // as if the pid were reused
  EXPECT_FALSE(ProcessGone(0));
  EXPECT_FALSE(ProcessGone(-1));
}

TEST(ProcessStatTest, ChildIsGoneOnceZombieAndOnceReaped) {
  int go[2];
  ASSERT_EQ(::pipe(go), 0);
  const pid_t child = ::fork();
  ASSERT_GE(child, 0);
  if (child == 0) {  // waits for the parent's word, then exits
    char c;
    ::close(go[1]);
    const ssize_t n = ::read(go[0], &c, 1);
    ::_exit(n == 1 ? 0 : 1);
  }
  ::close(go[0]);
  const StatusOr<ProcessStat> running = ReadProcessStat(child);
  ASSERT_TRUE(running.ok()) << running.status().message();
  EXPECT_NE(running->state, 'Z');
  EXPECT_FALSE(ProcessGone(child));
  EXPECT_FALSE(ProcessGone(child, running->start_time));
  EXPECT_TRUE(ProcessGone(child, running->start_time + 1));

  ASSERT_EQ(::write(go[1], "x", 1), 1);
  ::close(go[1]);
  siginfo_t info{};  // WNOWAIT: wait until it has exited, but leave it a zombie
  ASSERT_EQ(::waitid(P_PID, id_t(child), &info, WEXITED | WNOWAIT), 0);
  const StatusOr<ProcessStat> zombie = ReadProcessStat(child);
  ASSERT_TRUE(zombie.ok()) << zombie.status().message();
  EXPECT_EQ(zombie->state, 'Z');
  EXPECT_EQ(zombie->start_time, running->start_time);
  EXPECT_TRUE(ProcessGone(child));
  EXPECT_TRUE(ProcessGone(child, running->start_time));

  int status = 0;
  ASSERT_EQ(::waitpid(child, &status, 0), child);
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0);
  EXPECT_TRUE(ProcessGone(child));
  EXPECT_TRUE(ProcessGone(child, running->start_time));
  const StatusOr<ProcessStat> reaped = ReadProcessStat(child);
  ASSERT_FALSE(reaped.ok());
  EXPECT_EQ(reaped.status().code(), StatusCode::kNotFound);
  EXPECT_THAT(reaped.status().message(), HasSubstr("/proc/" + std::to_string(child) + "/stat"));
}

}  // namespace
}  // namespace zs
