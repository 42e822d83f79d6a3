#include "shared_segments.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>
#include <uv.h>

#include <cerrno>
#include <cstring>
#include <string>
#include <vector>

#include "tensorpipe/napi_helpers.h"

#ifndef SYS_pidfd_getfd
#define SYS_pidfd_getfd 438
#endif
#ifndef MADV_POPULATE_READ
#define MADV_POPULATE_READ 22
#endif
#ifndef SYS_pidfd_open
#define SYS_pidfd_open 434
#endif

namespace tensorpipe_js {

SharedSegment::~SharedSegment() {
  munmap(base, size);
  if (fd >= 0) ::close(fd);
}

namespace {

// What a reader insists on before it maps a peer's segment: the peer can
// then neither shrink it under a view (a read past its end would raise
// SIGBUS here) nor drop the seal.
constexpr int kRequiredSeals = F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL;

SharedSegments* (*segmentsOf)(Napi::Env) = nullptr;

uint32_t Register(Napi::Env env, std::shared_ptr<SharedSegment> segment) {
  SharedSegments* all = segmentsOf(env);
  uint32_t id = all->nextId++;
  all->byId.emplace(id, std::move(segment));
  return id;
}

// [id, value]: a segment's number for JS, and what it needs beside it.
Napi::Value SegmentAnd(Napi::Env env, uint32_t id, double value) {
  Napi::Array out = Napi::Array::New(env, 2);
  out.Set(0u, Napi::Number::New(env, id));
  out.Set(1u, Napi::Number::New(env, value));
  return out;
}

std::shared_ptr<SharedSegment> Lookup(Napi::Env env, const Napi::Value& id) {
  SharedSegments* all = segmentsOf(env);
  auto it = all->byId.find(id.As<Napi::Number>().Uint32Value());
  if (it == all->byId.end()) throw Napi::Error::New(env, "no such shared segment");
  return it->second;
}

// Whether every page of a mapping is in memory already: a read fault on a
// hole of a shared memfd would allocate a page for it, charged to this side.
bool Resident(char* base, uint64_t size) {
  long page = sysconf(_SC_PAGESIZE);
  std::vector<unsigned char> in((size + page - 1) / page);
  if (mincore(base, size, in.data()) != 0) return false;
  for (unsigned char c : in) {
    if ((c & 1) == 0) return false;
  }
  return true;
}

// createSegment(bytes, sparse) -> [id, fd]: a sealed memfd of `bytes`,
// mapped here with every page allocated (`sparse`: none, as a hostile
// writer's would be, for the tests).
Napi::Value CreateSegment(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  uint64_t size = static_cast<uint64_t>(info[0].As<Napi::Number>().DoubleValue());
  bool sparse = info[1].ToBoolean();
  int fd = memfd_create("tensorpipe-js pool", MFD_CLOEXEC | MFD_ALLOW_SEALING);
  if (fd < 0) throw UvError(env, uv_translate_sys_error(errno), "memfd_create");
  if (ftruncate(fd, static_cast<off_t>(size)) != 0 || fcntl(fd, F_ADD_SEALS, kRequiredSeals) != 0) {
    int err = errno;
    ::close(fd);
    throw UvError(env, uv_translate_sys_error(err), "memfd seal");
  }
  // Its pages present at once: a pool's segment is used over and over, a
  // fault per page of each first use cost more than the copy it saves, and
  // the reader maps only segments whose memory is all there.
  void* p = mmap(nullptr, size, PROT_READ | PROT_WRITE, MAP_SHARED | (sparse ? 0 : MAP_POPULATE), fd, 0);
  if (p == MAP_FAILED) {
    int err = errno;
    ::close(fd);
    throw UvError(env, uv_translate_sys_error(err), "mmap", "a pool segment of " + std::to_string(size) + " bytes");
  }
  uint32_t id = Register(env, std::make_shared<SharedSegment>(static_cast<char*>(p), size, fd));
  return SegmentAnd(env, id, fd);
}

// attachSegment(pidfd, remoteFd, maxBytes) -> [id, bytes]: takes the peer's
// fd `remoteFd` through the pidfd of the process proven to be the peer,
// and maps it if it is a sealed memfd of at most maxBytes.
Napi::Value AttachSegment(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  int pidfd = info[0].As<Napi::Number>().Int32Value();
  int remoteFd = info[1].As<Napi::Number>().Int32Value();
  uint64_t maxBytes = static_cast<uint64_t>(info[2].As<Napi::Number>().DoubleValue());
  long fd = syscall(SYS_pidfd_getfd, pidfd, remoteFd, 0);
  if (fd < 0) {
    int err = errno;
    if (err == EBADF) {
      throw CodedError(
          env, "ERR_TP_PROTOCOL",
          "peer announced a pool segment as fd " + std::to_string(remoteFd) + ", which it does not have open");
    }
    if (err == EPERM || err == EACCES) {
      throw CodedError(env, "ERR_TP_PERMISSION_DENIED",
                       "the peer's pool segment cannot be taken (pidfd_getfd: " + std::string(strerror(err)) + ")");
    }
    throw UvError(env, uv_translate_sys_error(err), "pidfd_getfd");
  }
  int seals = fcntl(static_cast<int>(fd), F_GET_SEALS);
  struct stat st;
  bool ok = seals >= 0 && (seals & kRequiredSeals) == kRequiredSeals && fstat(static_cast<int>(fd), &st) == 0 &&
            S_ISREG(st.st_mode) && st.st_size > 0 && static_cast<uint64_t>(st.st_size) <= maxBytes;
  if (!ok) {
    ::close(static_cast<int>(fd));
    throw CodedError(env, "ERR_TP_PROTOCOL",
                     "peer announced fd " + std::to_string(remoteFd) +
                         " as a pool segment, but it is not a sealed memfd of at most " + std::to_string(maxBytes) +
                         " bytes");
  }
  uint64_t size = static_cast<uint64_t>(st.st_size);
  void* p = mmap(nullptr, size, PROT_READ | PROT_WRITE, MAP_SHARED, static_cast<int>(fd), 0);
  int err = errno;
  ::close(static_cast<int>(fd));
  if (p == MAP_FAILED) throw UvError(env, uv_translate_sys_error(err), "mmap", "the peer's pool segment");
  char* base = static_cast<char*>(p);
  if (!Resident(base, size)) {
    munmap(base, size);
    throw CodedError(env, "ERR_TP_PROTOCOL",
                     "peer announced a pool segment of " + std::to_string(size) +
                         " bytes whose memory it has not all allocated: mapping it here would cost this side the rest");
  }
  // The page tables now, not a fault per page at the first read of each slot.
  madvise(base, size, MADV_POPULATE_READ);
  uint32_t id = Register(env, std::make_shared<SharedSegment>(base, size, -1));
  return SegmentAnd(env, id, static_cast<double>(size));
}

bool InSegment(const SharedSegment& s, uint64_t offset, uint64_t length) {
  return offset <= s.size && length <= s.size - offset;
}

// viewSegment(id, offset, length) -> ArrayBuffer over those bytes; it
// keeps the segment mapped until it is collected.
Napi::Value ViewSegment(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  std::shared_ptr<SharedSegment> s = Lookup(env, info[0]);
  uint64_t offset = static_cast<uint64_t>(info[1].As<Napi::Number>().DoubleValue());
  uint64_t length = static_cast<uint64_t>(info[2].As<Napi::Number>().DoubleValue());
  if (length == 0 || !InSegment(*s, offset, length)) throw Napi::RangeError::New(env, "view out of its segment");
  auto* hold = new std::shared_ptr<SharedSegment>(s);
  return Napi::ArrayBuffer::New(
      env, s->base + offset, length, [](Napi::Env, void*, std::shared_ptr<SharedSegment>* h) { delete h; }, hold);
}

// copyFromSegment(id, offset, length, target): for a reader that gave its
// own memory (read() with an allocation).
Napi::Value CopyFromSegment(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  std::shared_ptr<SharedSegment> s = Lookup(env, info[0]);
  uint64_t offset = static_cast<uint64_t>(info[1].As<Napi::Number>().DoubleValue());
  uint64_t length = static_cast<uint64_t>(info[2].As<Napi::Number>().DoubleValue());
  ByteSpan target;
  if (!GetBytes(info[3], &target) || target.length < length) throw Napi::RangeError::New(env, "target too small");
  if (!InSegment(*s, offset, length)) throw Napi::RangeError::New(env, "copy out of its segment");
  std::memcpy(target.data, s->base + offset, length);
  return env.Undefined();
}

// detachBuffer(arrayBuffer): its views read as empty from now on.
Napi::Value DetachBuffer(const Napi::CallbackInfo& info) {
  Napi::ArrayBuffer ab = info[0].As<Napi::ArrayBuffer>();
  if (!ab.IsDetached()) ab.Detach();
  return info.Env().Undefined();
}

// closeSegment(id): forgets it; the mapping goes with its last view.
Napi::Value CloseSegment(const Napi::CallbackInfo& info) {
  segmentsOf(info.Env())->byId.erase(info[0].As<Napi::Number>().Uint32Value());
  return info.Env().Undefined();
}

// probeSharedSegments() -> null when a pool can work here, else why not.
Napi::Value ProbeSharedSegments(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  int fd = memfd_create("tensorpipe-js probe", MFD_CLOEXEC | MFD_ALLOW_SEALING);
  if (fd < 0) return Napi::String::New(env, std::string("memfd_create fails here: ") + strerror(errno));
  long pidfd = syscall(SYS_pidfd_open, getpid(), 0);
  std::string problem;
  if (pidfd < 0) {
    problem = std::string("pidfd_open fails here (Linux 5.3 has it): ") + strerror(errno);
  } else {
    long got = syscall(SYS_pidfd_getfd, pidfd, fd, 0);
    if (got < 0)
      problem = std::string("pidfd_getfd fails here (Linux 5.6 has it): ") + strerror(errno);
    else
      ::close(static_cast<int>(got));
    ::close(static_cast<int>(pidfd));
  }
  ::close(fd);
  return problem.empty() ? env.Null() : Napi::String::New(env, problem);
}

}  // namespace

void RegisterSharedSegments(Napi::Env env, Napi::Object exports, SharedSegments* (*of)(Napi::Env)) {
  segmentsOf = of;
  exports.Set("createSegment", Napi::Function::New(env, CreateSegment, "createSegment"));
  exports.Set("attachSegment", Napi::Function::New(env, AttachSegment, "attachSegment"));
  exports.Set("viewSegment", Napi::Function::New(env, ViewSegment, "viewSegment"));
  exports.Set("copyFromSegment", Napi::Function::New(env, CopyFromSegment, "copyFromSegment"));
  exports.Set("detachBuffer", Napi::Function::New(env, DetachBuffer, "detachBuffer"));
  exports.Set("closeSegment", Napi::Function::New(env, CloseSegment, "closeSegment"));
  exports.Set("probeSharedSegments", Napi::Function::New(env, ProbeSharedSegments, "probeSharedSegments"));
}

}  // namespace tensorpipe_js
