// Shared-memory segments for the cma channel's pool: sealed memfds that a
// writer lends slots of and its proven peer maps, so that a tensor moves
// between processes without a copy.
#pragma once

#include <napi.h>

#include <cstdint>
#include <memory>
#include <unordered_map>

namespace tensorpipe_js {

// One mapped segment; unmapped once its registry entry and every view of
// it are gone (a view may outlive its pipe, its channel and its segment's
// entry: it keeps the memory mapped).
struct SharedSegment {
  SharedSegment(char* base, uint64_t size, int fd) : base(base), size(size), fd(fd) {}
  ~SharedSegment();
  SharedSegment(const SharedSegment&) = delete;
  SharedSegment& operator=(const SharedSegment&) = delete;
  char* base;
  uint64_t size;
  // The writer's memfd, kept open for its peer to take (-1 at the reader).
  int fd;
};

// The segments of one environment, by the number JS knows them by.
struct SharedSegments {
  std::unordered_map<uint32_t, std::shared_ptr<SharedSegment>> byId;
  uint32_t nextId = 1;
};

// Adds createSegment, attachSegment, viewSegment, copyFromSegment,
// detachBuffer, closeSegment and probeSharedSegments to `exports`.
void RegisterSharedSegments(Napi::Env env, Napi::Object exports, SharedSegments* (*of)(Napi::Env));

}  // namespace tensorpipe_js
