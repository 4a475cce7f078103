// Swap files: the on-disk side of an NvmeStore — what its file is called, refusing to start over
// the files of a killed run, and creating the file with its space reserved. Private to offload/.
//
// Contract
// - Plain file-system calls: no threads, no state. Every function blocks the calling host thread
//   for its system calls (a directory scan, statvfs, open, fallocate).
// - Errors name the directory or the file and the bytes involved; NvmeStore::Create documents
//   the codes. CreateSwapFile leaves nothing behind when it fails.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "runtime/base/status.h"

namespace zs {

// "<dir>/zerostack-<name>.<pid>.swap" (trailing '/'s of dir dropped).
std::string SwapFilePath(std::string_view dir, std::string_view name, int pid);

// NotFound when dir does not exist, InvalidArgument when it is not a directory.
Status CheckSwapDirectory(const std::string& dir);

// FailedPrecondition naming every zerostack-<name>.<pid>.swap in dir whose pid is gone.
Status CheckForStaleSwapFiles(const std::string& dir, const std::string& name);

// Creates `path` in `dir` (O_RDWR|O_CREAT|O_EXCL|O_DIRECT) and reserves `bytes` (a multiple of
// 4096) with fallocate; returns the descriptor, which the caller closes.
StatusOr<int> CreateSwapFile(const std::string& dir, const std::string& path, int64_t bytes);

// ENOSPC, EFBIG (RLIMIT_FSIZE, the filesystem's file size limit) and EDQUOT.
bool IsNoSpaceErrno(int error);

}  // namespace zs
