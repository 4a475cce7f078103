#include "runtime/base/process_stat.h"

#include <fmt/format.h>
#include <signal.h>

#include <cerrno>
#include <cstdlib>
#include <fstream>
#include <sstream>
#include <string>

namespace zs {

StatusOr<ProcessStat> ParseProcessStat(std::string_view line) {
  const size_t close = line.rfind(')');
  std::istringstream fields(
      std::string(close == std::string_view::npos ? std::string_view() : line.substr(close + 1)));
  ProcessStat stat;
  std::string field;
  for (int index = 3; index <= 22; ++index) {  // fields 3 (state) .. 22 (starttime)
    if (!(fields >> field)) {
      return InternalError(fmt::format("process stat line '{}' has no field {}", line, index));
    }
    if (index == 3) stat.state = field[0];
  }
  stat.start_time = std::strtoull(field.c_str(), nullptr, 10);
  return stat;
}

StatusOr<ProcessStat> ReadProcessStat(pid_t pid) {
  const std::string path = fmt::format("/proc/{}/stat", pid);
  std::ifstream in(path);
  std::string line;
  if (!in || !std::getline(in, line)) return NotFoundError(fmt::format("cannot read {}", path));
  StatusOr<ProcessStat> stat = ParseProcessStat(line);
  if (!stat.ok()) return InternalError(fmt::format("{}: {}", path, stat.status().message()));
  return stat;
}

bool ProcessGone(pid_t pid, uint64_t start_time) {
  if (pid <= 0) return false;
  if (::kill(pid, 0) != 0 && errno == ESRCH) return true;
  const StatusOr<ProcessStat> stat = ReadProcessStat(pid);
  if (!stat.ok()) return false;                               // cannot tell: assume alive
  if (stat->state == 'Z' || stat->state == 'X') return true;  // killed, not yet reaped
  return start_time != 0 && stat->start_time != start_time;   // pid reused
}

}  // namespace zs
