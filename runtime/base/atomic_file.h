// Durable and atomic file writes: a file a reader sees either whole (the new text) or not at
// all, never cut short by a full disk or a crash part-way.
//
// Contract
// - WriteFileDurably writes `text` to `path` (created or truncated) and fsyncs it; a crash may
//   leave it partly written. SyncDirectory fsyncs a directory, making the renames and new
//   names in it durable.
// - [Note: atomic write] WriteFileAtomically writes `text` to "<path>.tmp.<pid>" in the same
//   directory, fsyncs it, renames it over `path` and fsyncs the directory. On any error the
//   temporary file is removed and `path` is as it was (absent, or its old text). The pid keeps
//   two processes writing the same path from sharing a temporary file; the last rename wins.
// - CheckWritableDirectory is the check a program makes before hours of work whose result
//   goes to `path`: the directory `path` would be created in exists and a file can be created
//   (and is removed) there. It cannot promise the space the final write will need.
// - Errors are IoError (NotFound for a missing directory, InvalidArgument for a directory
//   that is a file or a `path` that is a directory) and name the path, what was being
//   done (creating, writing, fsync of, renaming) and the errno's text ("No space left on
//   device", "File too large"). Blocking file-system calls on the calling thread; any thread.
#pragma once

#include <string>
#include <string_view>

#include "runtime/base/status.h"

namespace zs {

Status WriteFileDurably(const std::string& path, std::string_view text);
Status SyncDirectory(const std::string& dir);
Status WriteFileAtomically(const std::string& path, std::string_view text);
Status CheckWritableDirectory(const std::string& path);

// The temporary file WriteFileAtomically writes `path` through in this process.
std::string AtomicWriteTempPath(const std::string& path);

}  // namespace zs
