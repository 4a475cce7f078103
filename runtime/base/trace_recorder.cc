#include "runtime/base/trace_recorder.h"

#include <fmt/format.h>

#include <algorithm>
#include <cerrno>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <iterator>
#include <utility>

namespace zs {
namespace {

// The length of the well-formed UTF-8 sequence at s[i], or 0 if it is not one (RFC 3629: no
// overlong forms, no surrogates, nothing past U+10FFFF).
size_t Utf8SequenceLength(std::string_view s, size_t i) {
  const auto byte = [&](size_t k) { return static_cast<unsigned char>(s[k]); };
  const unsigned char c = byte(i);
  size_t len = 0;
  unsigned char lo = 0x80, hi = 0xBF;  // the allowed range of the second byte
  if (c >= 0xC2 && c <= 0xDF) {
    len = 2;
  } else if (c >= 0xE0 && c <= 0xEF) {
    len = 3;
    if (c == 0xE0) lo = 0xA0;
    if (c == 0xED) hi = 0x9F;
  } else if (c >= 0xF0 && c <= 0xF4) {
    len = 4;
    if (c == 0xF0) lo = 0x90;
    if (c == 0xF4) hi = 0x8F;
  } else {
    return 0;
  }
  if (i + len > s.size()) return 0;
  if (byte(i + 1) < lo || byte(i + 1) > hi) return 0;
  for (size_t k = 2; k < len; ++k) {
    if (byte(i + k) < 0x80 || byte(i + k) > 0xBF) return 0;
  }
  return len;
}

// Appends `s` as a JSON string literal (with its quotes).
void AppendJsonString(std::string& out, std::string_view s) {
  out += '"';
  for (size_t i = 0; i < s.size();) {
    const unsigned char c = static_cast<unsigned char>(s[i]);
    if (c >= 0x80) {
      const size_t len = Utf8SequenceLength(s, i);
      if (len == 0) {
        out += "\\ufffd";
        i += 1;
      } else {
        out.append(s.substr(i, len));
        i += len;
      }
      continue;
    }
    switch (c) {
      case '"':
        out += "\\\"";
        break;
      case '\\':
        out += "\\\\";
        break;
      case '\b':
        out += "\\b";
        break;
      case '\f':
        out += "\\f";
        break;
      case '\n':
        out += "\\n";
        break;
      case '\r':
        out += "\\r";
        break;
      case '\t':
        out += "\\t";
        break;
      default:
        if (c < 0x20) {
          fmt::format_to(std::back_inserter(out), "\\u{:04x}", static_cast<unsigned>(c));
        } else {
          out += static_cast<char>(c);
        }
    }
    ++i;
  }
  out += '"';
}

// Nanoseconds as microseconds with exactly three decimals ("-1.500", "12.345"): exact, and
// independent of floating-point formatting.
std::string FormatMicros(int64_t ns) {
  const bool negative = ns < 0;
  const uint64_t abs_ns = negative ? uint64_t(0) - uint64_t(ns) : uint64_t(ns);
  return fmt::format("{}{}.{:03}", negative ? "-" : "", abs_ns / 1000, abs_ns % 1000);
}

bool IsBracedObject(std::string_view text) {
  const size_t first = text.find_first_not_of(" \t\r\n");
  const size_t last = text.find_last_not_of(" \t\r\n");
  return first != std::string_view::npos && text[first] == '{' && text[last] == '}';
}

}  // namespace

TraceRecorder::TraceRecorder(int rank) : rank_(rank), origin_(Clock::now()) {
  ZS_CHECK(rank >= 0, "TraceRecorder: rank {} is negative", rank);
}

int TraceRecorder::Track(std::string_view name) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = track_ids_.find(name);
  if (it != track_ids_.end()) return it->second;
  const int id = static_cast<int>(track_names_.size());
  track_names_.emplace_back(name);
  track_ids_.emplace(std::string(name), id);
  return id;
}

void TraceRecorder::Record(int track, std::string name, Clock::time_point begin,
                           Clock::time_point end, std::string args_json) {
  ZS_CHECK(end >= begin, "TraceRecorder: span '{}' ends {} ns before it begins", name,
           std::chrono::duration_cast<std::chrono::nanoseconds>(begin - end).count());
  ZS_CHECK(args_json.empty() || IsBracedObject(args_json),
           "TraceRecorder: args of span '{}' are not a JSON object: {}", name, args_json);
  std::lock_guard<std::mutex> lock(mu_);
  ZS_CHECK(track >= 0 && static_cast<size_t>(track) < track_names_.size(),
           "TraceRecorder: span '{}' on track {}, but only {} tracks exist", name, track,
           track_names_.size());
  spans_.push_back(SpanRecord{track, std::move(name), begin, end, std::move(args_json)});
}

TraceRecorder::Span TraceRecorder::Begin(int track, std::string name, std::string args_json) {
  return Span(this, track, std::move(name), std::move(args_json));
}

TraceRecorder::Span TraceRecorder::Begin(TraceRecorder* maybe_null, int track, std::string name,
                                         std::string args_json) {
  if (maybe_null == nullptr) return Span();
  return maybe_null->Begin(track, std::move(name), std::move(args_json));
}

size_t TraceRecorder::size() const {
  std::lock_guard<std::mutex> lock(mu_);
  return spans_.size();
}

std::string TraceRecorder::ToJson() const {
  std::vector<std::string> tracks;
  std::vector<SpanRecord> spans;
  {
    std::lock_guard<std::mutex> lock(mu_);
    tracks = track_names_;
    spans = spans_;
  }
  // Begin order; of spans that begin together the longer (the enclosing one) comes first, so
  // viewers nest them.
  std::stable_sort(spans.begin(), spans.end(), [](const SpanRecord& a, const SpanRecord& b) {
    if (a.begin != b.begin) return a.begin < b.begin;
    return a.end > b.end;
  });

  const int pid = TracePid(rank_);
  std::string out;
  out.reserve(256 + 128 * tracks.size() + 160 * spans.size());
  out += "{\"traceEvents\":[\n";
  fmt::format_to(std::back_inserter(out),
                 "{{\"name\":\"process_name\",\"ph\":\"M\",\"pid\":{},\"tid\":0,"
                 "\"args\":{{\"name\":\"rank {}\"}}}},\n"
                 "{{\"name\":\"process_sort_index\",\"ph\":\"M\",\"pid\":{},\"tid\":0,"
                 "\"args\":{{\"sort_index\":{}}}}}",
                 pid, rank_, pid, rank_);
  for (size_t t = 0; t < tracks.size(); ++t) {
    const int tid = TraceTid(static_cast<int>(t));
    fmt::format_to(std::back_inserter(out),
                   ",\n{{\"name\":\"thread_name\",\"ph\":\"M\",\"pid\":{},\"tid\":{},"
                   "\"args\":{{\"name\":",
                   pid, tid);
    AppendJsonString(out, tracks[t]);
    fmt::format_to(std::back_inserter(out),
                   "}}}},\n{{\"name\":\"thread_sort_index\",\"ph\":\"M\",\"pid\":{},\"tid\":{},"
                   "\"args\":{{\"sort_index\":{}}}}}",
                   pid, tid, t);
  }
  const auto ns = [](Clock::duration d) {
    return static_cast<int64_t>(std::chrono::duration_cast<std::chrono::nanoseconds>(d).count());
  };
  for (const SpanRecord& span : spans) {
    out += ",\n{\"name\":";
    AppendJsonString(out, span.name);
    out += ",\"cat\":";
    AppendJsonString(out, tracks[span.track]);
    fmt::format_to(std::back_inserter(out),
                   ",\"ph\":\"X\",\"pid\":{},\"tid\":{},\"ts\":{},\"dur\":{}", pid,
                   TraceTid(span.track), FormatMicros(ns(span.begin - origin_)),
                   FormatMicros(ns(span.end - span.begin)));
    if (!span.args_json.empty()) {
      out += ",\"args\":";
      out += span.args_json;
    }
    out += '}';
  }
  out += "\n]}\n";
  return out;
}

Status TraceRecorder::WriteJson(const std::string& path) const {
  const std::string json = ToJson();
  std::FILE* file = std::fopen(path.c_str(), "w");
  if (file == nullptr) {
    return IoError(
        fmt::format("cannot open trace file '{}' for writing: {}", path, std::strerror(errno)));
  }
  const size_t written = std::fwrite(json.data(), 1, json.size(), file);
  const int write_errno = errno;
  if (written != json.size()) {
    std::fclose(file);
    return IoError(fmt::format("cannot write trace file '{}' ({} of {} bytes written): {}", path,
                               written, json.size(), std::strerror(write_errno)));
  }
  if (std::fclose(file) != 0) {
    return IoError(fmt::format("cannot write trace file '{}': {}", path, std::strerror(errno)));
  }
  return OkStatus();
}

TraceRecorder::Span::Span(TraceRecorder* recorder, int track, std::string name,
                          std::string args_json)
    : recorder_(recorder),
      track_(track),
      name_(std::move(name)),
      args_json_(std::move(args_json)),
      begin_(Clock::now()) {}

TraceRecorder::Span::Span(Span&& other) noexcept
    : recorder_(std::exchange(other.recorder_, nullptr)),
      track_(other.track_),
      name_(std::move(other.name_)),
      args_json_(std::move(other.args_json_)),
      begin_(other.begin_) {}

TraceRecorder::Span& TraceRecorder::Span::operator=(Span&& other) noexcept {
  if (this != &other) {
    End();
    recorder_ = std::exchange(other.recorder_, nullptr);
    track_ = other.track_;
    name_ = std::move(other.name_);
    args_json_ = std::move(other.args_json_);
    begin_ = other.begin_;
  }
  return *this;
}

void TraceRecorder::Span::End() {
  if (recorder_ == nullptr) return;
  TraceRecorder* recorder = std::exchange(recorder_, nullptr);
  recorder->Record(track_, std::move(name_), begin_, Clock::now(), std::move(args_json_));
}

std::string TracePathForRank(const std::string& path, int rank) {
  ZS_CHECK(rank >= 0, "TracePathForRank: rank {} is negative", rank);
  const size_t slash = path.find_last_of('/');
  const size_t name_start = slash == std::string::npos ? 0 : slash + 1;
  const size_t dot = path.find_last_of('.');
  // No extension: no dot in the file name, or only a leading one (".trace", a hidden file).
  if (dot == std::string::npos || dot <= name_start) {
    return fmt::format("{}.rank{}.json", path, rank);
  }
  return fmt::format("{}.rank{}{}", path.substr(0, dot), rank, path.substr(dot));
}

}  // namespace zs
