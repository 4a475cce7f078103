// TraceRecorder: one rank's timeline of spans (compute, gather, reduce, optimizer, offload I/O,
// copies), written as a Chrome trace-event JSON file that chrome://tracing and ui.perfetto.dev
// open. Tuning offload and overlap starts from this picture.
//
// Contract
// - One recorder per rank. It owns copies of every span's name and args; memory grows with the
//   number of spans until the recorder is destroyed (there is no ring buffer: record a bounded
//   number of steps).
// - Threads: Track, Record, Begin, size, ToJson and WriteJson may be called from any thread at
//   once (compute, I/O threads, comm workers). Record is a mutex'd push_back; it blocks only on
//   that mutex, never on I/O. ToJson/WriteJson copy the spans under the mutex and format them
//   outside it; WriteJson blocks the calling thread on the file write.
// - Tracks are named timelines ("compute", "gather", "offload.read", ...). Track(name) returns
//   a dense id (0, 1, ...) in first-use order; the same name always gives the same id. Look the
//   id up once and keep it: Track takes the mutex and a map lookup.
// - Span is a move-only RAII handle: it reads the clock when made and records when destroyed or
//   at End(), whichever is first. A Span from a null recorder (TraceRecorder::Begin(nullptr,
//   ...)) or a default-constructed one records nothing. The recorder must outlive its Spans.
// - Times come from std::chrono::steady_clock and are written relative to the recorder's
//   construction, in microseconds with nanosecond precision. A span that began before the
//   recorder existed gets a negative ts.
// - args_json is the text of a JSON object ("{\"unit\":\"h.3\",\"bytes\":1048576}") or empty.
//   It is copied into the file verbatim: the recorder checks only that it is braced, the caller
//   that it is valid JSON. Names are escaped (quotes, backslashes, control characters; bytes
//   that are not UTF-8 become U+FFFD).
//
// File layout (one process per rank, one thread per track):
//   {"traceEvents":[
//     {"name":"process_name","ph":"M","pid":P,"tid":0,"args":{"name":"rank N"}},
//     {"name":"process_sort_index","ph":"M","pid":P,"tid":0,"args":{"sort_index":N}},
//     {"name":"thread_name","ph":"M","pid":P,"tid":T,"args":{"name":"<track>"}},
//     {"name":"thread_sort_index","ph":"M","pid":P,"tid":T,"args":{"sort_index":<track id>}},
//     {"name":"<span>","cat":"<track>","ph":"X","pid":P,"tid":T,"ts":12.345,"dur":6.789,
//      "args":{...}},  // complete events, sorted by begin time (then longer first)
//   ...]}
// where P = TracePid(rank) = rank + 1 and T = TraceTid(track) = track + 1. [Note: pid and tid
// 0] Perfetto's trace processor treats pid 0 and tid 0 as the kernel's swapper (idle) task and
// merges or mislabels their events, so neither is ever written; the process is named "rank N"
// after the real rank.
#pragma once

#include <chrono>
#include <cstddef>
#include <map>
#include <mutex>
#include <string>
#include <string_view>
#include <vector>

#include "runtime/base/status.h"

namespace zs {

// The trace-file process id of a rank, and thread id of a track ([Note: pid and tid 0]).
inline int TracePid(int rank) { return rank + 1; }
inline int TraceTid(int track) { return track + 1; }

class TraceRecorder {
 public:
  using Clock = std::chrono::steady_clock;

  // rank >= 0. The construction time is the trace's time origin.
  explicit TraceRecorder(int rank);

  TraceRecorder(const TraceRecorder&) = delete;
  TraceRecorder& operator=(const TraceRecorder&) = delete;

  int rank() const { return rank_; }

  // The id of the track called `name`, created on first use.
  int Track(std::string_view name);

  // Records one span on `track` (an id from Track). end >= begin; args_json is a JSON object's
  // text or empty.
  void Record(int track, std::string name, Clock::time_point begin, Clock::time_point end,
              std::string args_json = {});

  class [[nodiscard]] Span;

  // A span on `track` that begins now and is recorded when it ends.
  Span Begin(int track, std::string name, std::string args_json = {});
  // The same on a recorder that may be null (tracing off): then the Span is a no-op. Callers
  // that build args_json with fmt can skip that work when maybe_null is null.
  static Span Begin(TraceRecorder* maybe_null, int track, std::string name,
                    std::string args_json = {});

  // The number of spans recorded so far.
  size_t size() const;

  // The trace as Chrome trace-event JSON (the layout above).
  std::string ToJson() const;

  // Writes ToJson() to `path` (created or truncated). IoError naming the path if the file
  // cannot be opened or written.
  Status WriteJson(const std::string& path) const;

 private:
  struct SpanRecord {
    int track;
    std::string name;
    Clock::time_point begin;
    Clock::time_point end;
    std::string args_json;
  };

  const int rank_;
  const Clock::time_point origin_;

  mutable std::mutex mu_;
  std::vector<std::string> track_names_;               // guarded by mu_; index = track id
  std::map<std::string, int, std::less<>> track_ids_;  // guarded by mu_
  std::vector<SpanRecord> spans_;                      // guarded by mu_; in record order
};

class [[nodiscard]] TraceRecorder::Span {
 public:
  Span() = default;  // records nothing
  Span(Span&& other) noexcept;
  Span& operator=(Span&& other) noexcept;  // ends this span first
  Span(const Span&) = delete;
  Span& operator=(const Span&) = delete;
  ~Span() { End(); }

  // Records the span now; later calls (and the destructor) do nothing.
  void End();

  // True until End() on a span of a real recorder.
  bool active() const { return recorder_ != nullptr; }

 private:
  friend class TraceRecorder;
  Span(TraceRecorder* recorder, int track, std::string name, std::string args_json);

  TraceRecorder* recorder_ = nullptr;  // null: records nothing
  int track_ = 0;
  std::string name_;
  std::string args_json_;
  Clock::time_point begin_;
};

// The file for one rank of a multi-rank program: "trace.json" -> "trace.rank1.json" (rank 0
// too: "trace.rank0.json"); "dir/trace" (no extension) -> "dir/trace.rank1.json"; another
// extension is kept ("t.txt" -> "t.rank1.txt").
std::string TracePathForRank(const std::string& path, int rank);

}  // namespace zs
