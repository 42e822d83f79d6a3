// Whether this process is out of file descriptors right now, found by
// asking for one more: what a transport checks when the kernel dropped
// descriptors it was handed, or when libuv turns connections away without
// a word (its EMFILE trick).
#pragma once

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>

namespace tensorpipe_js {

// 0, or EMFILE / ENFILE. `fd` is any open descriptor to duplicate.
inline int DescriptorShortage(int fd) {
  int probe = fcntl(fd, F_DUPFD_CLOEXEC, 0);
  if (probe >= 0) {
    ::close(probe);
    return 0;
  }
  return errno == EMFILE || errno == ENFILE ? errno : 0;
}

// Whether `n` more descriptors could be opened now (duplicates of `fd`,
// closed again): room for a handshake that needs that many.
inline bool HasDescriptors(int fd, int n) {
  int probes[8];
  int got = 0;
  while (got < n && got < 8) {
    int probe = fcntl(fd, F_DUPFD_CLOEXEC, 0);
    if (probe < 0) break;
    probes[got++] = probe;
  }
  bool enough = got == n;
  while (got > 0) ::close(probes[--got]);
  return enough;
}

}  // namespace tensorpipe_js
