#include "shm_listener.h"

#include <fcntl.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstddef>
#include <cstring>

#include "tensorpipe/addon_data.h"
#include "tensorpipe/descriptor_shortage.h"
#include "tensorpipe/napi_helpers.h"

namespace tensorpipe_js {

namespace {

// How long accepting pauses when the process is out of descriptors and
// the backlog cannot even be shed (no reserve descriptor either).
constexpr uint64_t kAcceptRetryMs = 100;

// How long a peer may say nothing before, out of descriptors, it goes (ms):
// a real one greets as it connects.
constexpr uint64_t kSilentGraceMs = 250;

// The descriptors a connection takes until its handshake is done, at most:
// its socket with its memfd until sent, or the peer's memfd after.
constexpr int kHandshakeDescriptors = 2;

// Connections accepted on one turn of the loop at most.
constexpr int kAcceptsPerTurn = 16;

// The reserve descriptor of libuv's EMFILE trick: any cheap one will do.
int OpenReserve() { return open("/", O_RDONLY | O_CLOEXEC); }

}  // namespace

socklen_t AbstractAddress(const std::string& name, struct sockaddr_un* addr) {
  std::memset(addr, 0, sizeof(*addr));
  addr->sun_family = AF_UNIX;
  std::memcpy(addr->sun_path + 1, name.data(), name.size());
  return static_cast<socklen_t>(offsetof(struct sockaddr_un, sun_path) + 1 + name.size());
}

ShmOptions OptionsFrom(Napi::Value value) {
  ShmOptions o;
  if (!value.IsObject()) return o;
  Napi::Object obj = value.As<Napi::Object>();
  if (obj.Has("ringSize")) o.ringSize = static_cast<uint64_t>(obj.Get("ringSize").As<Napi::Number>().DoubleValue());
  if (obj.Has("allowOtherUsers")) o.allowOtherUsers = obj.Get("allowOtherUsers").ToBoolean();
  if (obj.Has("spinMicros"))
    o.spinMicros = static_cast<uint64_t>(obj.Get("spinMicros").As<Napi::Number>().DoubleValue());
  return o;
}

// { handshakeTimeout (ms), maxPendingHandshakes }: JS checked them; 0 or
// absent leaves a bound off.
HandshakeBounds BoundsFrom(Napi::Value value) {
  HandshakeBounds b;
  if (!value.IsObject()) return b;
  Napi::Object obj = value.As<Napi::Object>();
  auto number = [&](const char* key, double fallback) {
    Napi::Value v = obj.Get(key);
    return v.IsNumber() ? v.As<Napi::Number>().DoubleValue() : fallback;
  };
  double timeout = number("handshakeTimeout", static_cast<double>(b.timeoutMs));
  // Past 2^40 ms (35 years) is no deadline: uv_now() + it must not wrap.
  b.timeoutMs = timeout > 0 && timeout < 1099511627776.0 ? static_cast<uint64_t>(std::ceil(timeout)) : 0;
  double pending = number("maxPendingHandshakes", static_cast<double>(b.maxPending));
  b.maxPending = pending >= 1 && pending < 1e15 ? static_cast<size_t>(pending) : 0;
  return b;
}

Napi::Function ShmListener::Define(Napi::Env env) {
  return DefineClass(env, "ShmListener",
                     {
                         InstanceMethod<&ShmListener::Address>("address"),
                         InstanceMethod<&ShmListener::Close>("close"),
                     });
}

// new ShmListener(name, options, onConnection(err, connection), bounds?)
ShmListener::ShmListener(const Napi::CallbackInfo& info) : Napi::ObjectWrap<ShmListener>(info) {
  Napi::Env env = info.Env();
  name_ = info[0].As<Napi::String>().Utf8Value();
  options_ = OptionsFrom(info[1]);
  bounds_ = BoundsFrom(info[3]);
  struct sockaddr_un addr;
  if (name_.empty() || name_.size() > sizeof(addr.sun_path) - 2) {
    throw CodedError(env, "ERR_TP_INVALID_ARG", "shm listener name must have 1 to 106 bytes");
  }
  socklen_t len = AbstractAddress(name_, &addr);
  // What may call into JS comes first: a worker being terminated fails such
  // calls, and a socket made before would leak.
  onConnection_ = Napi::Persistent(info[2].As<Napi::Function>());
  asyncContext_ = std::make_unique<Napi::AsyncContext>(env, "tensorpipe.ShmListener", info.This().As<Napi::Object>());
  fd_ = socket(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  if (fd_ < 0) throw UvError(env, uv_translate_sys_error(errno), "socket");
  if (bind(fd_, reinterpret_cast<struct sockaddr*>(&addr), len) != 0 || listen(fd_, SOMAXCONN) != 0) {
    int err = errno;
    ::close(fd_);
    fd_ = -1;
    throw UvError(env, uv_translate_sys_error(err), "listen");
  }
  reserveFd_ = OpenReserve();
  if (reserveFd_ < 0) {
    int err = errno;
    ::close(fd_);
    fd_ = -1;
    throw UvError(env, uv_translate_sys_error(err), "open");
  }
  uv_loop_t* loop = GetAddonData(env)->loop();
  uv_poll_init(loop, poll_.Make(this), fd_);
  uv_poll_start(poll_.get(), UV_READABLE, OnReadable);
  // Never what keeps the process alive: the poll (or the handshakes) do.
  uv_timer_init(loop, timer_.Make(this));
  timer_.Unref();
  openHandles_ = 2;
  Ref();
  LifecycleOf(env).Own(this);
}

// Only if the environment went without teardown: nothing may point back here.
ShmListener::~ShmListener() {
  for (ShmConnection* c : starting_) c->watcher_ = nullptr;
}

void ShmListener::OnReadable(uv_poll_t* handle, int status, int events) {
  auto* self = static_cast<ShmListener*>(handle->data);
  if (self->closed_) return;
  Napi::Env env = self->Env();
  FromLoop(env, [&] { self->Accept(env); });
}

void ShmListener::Accept(Napi::Env env) {
  // A few at a time: the descriptors of those dropped come back only once
  // the loop has closed their handles, so a backlog of thousands taken in
  // one go would run this process out of them (and shed the real peers
  // queued behind). The poll fires again on the next turn.
  for (int taken = 0; taken < kAcceptsPerTurn; taken++) {
    // A connection takes a socket and a memfd: without room
    // for them its handshake would fail, so silent peers make room first,
    // and accepting waits for the loop to close them.
    if (!starting_.empty() && !HasDescriptors(fd_, kHandshakeDescriptors) && DropSilent(env)) {
      PauseAccepting();
      return;
    }
    int sock = accept4(fd_, nullptr, nullptr, SOCK_NONBLOCK | SOCK_CLOEXEC);
    if (sock < 0) {
      int err = errno;
      if (err == EINTR || err == ECONNABORTED) continue;
      if (err == EAGAIN || err == EWOULDBLOCK) return;
      if (err == EMFILE || err == ENFILE) {
        // Silent peers hold the descriptors: they go first. Else the backlog goes.
        if (DropSilent(env))
          PauseAccepting();
        else
          ShedBacklog(env);
        if (!closed_ && CanCallIntoJs(env)) {
          Napi::HandleScope scope(env);
          Napi::Error e = UvError(env, uv_translate_sys_error(err), "accept");
          e.Set("message",
                Napi::String::New(env, std::string("this process is out of file descriptors (") +
                                           (err == EMFILE ? "EMFILE" : "ENFILE") +
                                           "): connections are turned away until some close; raise `ulimit -n`"));
          Report(e.Value());
        }
      } else {
        Napi::HandleScope scope(env);
        Report(UvError(env, uv_translate_sys_error(err), "accept").Value());
      }
      return;
    }
    // Silent peers cannot keep this one out: the oldest of them goes,
    // unless its greeting came meanwhile (a last look finishes it instead).
    while (bounds_.maxPending != 0 && starting_.size() >= bounds_.maxPending) {
      Napi::HandleScope scope(env);
      ShmConnection* oldest = starting_.front();
      oldest->TryGreeting();
      if (!closed_ && CanCallIntoJs(env) && !starting_.empty() && starting_.front() == oldest) {
        DropOldest(env, "shm handshake dropped for a newer connection, with maxPendingHandshakes (" +
                            std::to_string(bounds_.maxPending) + ") under way");
      }
      if (closed_ || !CanCallIntoJs(env)) {
        ::close(sock);
        return;
      }
    }
    Napi::HandleScope scope(env);
    try {
      Napi::Object object = ShmConnection::Create(env, sock, options_, onConnection_.Value());
      ShmConnection* connection = ShmConnection::Unwrap(object);
      Watch(connection);
      // A real peer sent its greeting as soon as it connected: it is most
      // likely here, and the handshake done before any later connection in
      // the backlog (a flood of silent ones) could push this one out.
      connection->TryGreeting();
    } catch (const Napi::Error& e) {
      Report(e.Value());
    }
    if (closed_ || !CanCallIntoJs(env)) return;
  }
}

// accept4 found no descriptor for the next connection: it stays in the
// backlog, and the level-triggered poll would fire again at once, spinning
// the loop until a descriptor frees up. libuv's trick: the reserve goes, to
// accept and close at once everything waiting (those peers see EOF), and
// comes back. Without a reserve (taken meanwhile), accepting pauses for a
// moment instead.
void ShmListener::ShedBacklog(Napi::Env env) {
  if (reserveFd_ >= 0) {
    ::close(reserveFd_);
    reserveFd_ = -1;
    for (;;) {
      int sock = accept4(fd_, nullptr, nullptr, SOCK_CLOEXEC);
      if (sock >= 0) {
        ::close(sock);
        continue;
      }
      if (errno == EINTR || errno == ECONNABORTED) continue;
      break;
    }
    reserveFd_ = OpenReserve();
  }
  if (reserveFd_ < 0) {
    uv_poll_stop(poll_.get());
    resumeAt_ = uv_now(GetAddonData(env)->loop()) + kAcceptRetryMs;
    ArmTimer();
  }
}

// Until the next turn of the loop, when it has closed the handles (and so
// the descriptors) of the connections dropped on this one: accepting now
// would find none free, and shed the real peers queued.
void ShmListener::PauseAccepting() {
  if (closed_) return;
  uv_poll_stop(poll_.get());
  resumeAt_ = uv_now(GetAddonData(Env())->loop());
  ArmTimer();
}

// Out of descriptors: drops the handshakes silent for kSilentGraceMs or
// more, unless a last look finds their greeting. Whether any went.
bool ShmListener::DropSilent(Napi::Env env) {
  uint64_t now = uv_now(GetAddonData(env)->loop());
  bool dropped = false;
  while (!closed_ && !starting_.empty() && now - starting_.front()->handshakeBegan_ >= kSilentGraceMs) {
    Napi::HandleScope scope(env);
    ShmConnection* oldest = starting_.front();
    oldest->TryGreeting();
    if (closed_ || !CanCallIntoJs(env)) return true;
    if (starting_.empty() || starting_.front() != oldest) continue;
    DropOldest(env, "shm handshake dropped: it had sent nothing while this process was out of file descriptors");
    dropped = true;
    if (closed_ || !CanCallIntoJs(env)) return true;
  }
  return dropped;
}

void ShmListener::Watch(ShmConnection* c) {
  uint64_t now = uv_now(GetAddonData(Env())->loop());
  c->watcher_ = this;
  c->handshakeBegan_ = now;
  c->handshakeDeadline_ = bounds_.timeoutMs != 0 ? now + bounds_.timeoutMs : UINT64_MAX;
  c->watchEntry_ = starting_.insert(starting_.end(), c);
  if (starting_.size() == 1) ArmTimer();
}

void ShmListener::Forget(ShmConnection* c) {
  starting_.erase(c->watchEntry_);
  c->watcher_ = nullptr;
  // The timer, due for the one that left, finds the next one when it fires.
}

bool ShmListener::DropOldest(Napi::Env env, const std::string& message) {
  if (starting_.empty()) return false;
  ShmConnection* c = starting_.front();
  starting_.pop_front();
  c->watcher_ = nullptr;
  std::string from = " (peer pid " + std::to_string(c->peerPid_) + ")";
  c->CloseAll();
  Report(CodedError(env, "ERR_TP_TIMEOUT", message + from).Value());
  return true;
}

// Due at the oldest handshake's deadline or when accepting resumes,
// whichever comes first; stopped when neither is ahead.
void ShmListener::ArmTimer() {
  if (closed_) return;
  uint64_t due = resumeAt_ != 0 ? resumeAt_ : UINT64_MAX;
  if (!starting_.empty()) due = std::min(due, starting_.front()->handshakeDeadline_);
  if (due == UINT64_MAX) {
    uv_timer_stop(timer_.get());
    return;
  }
  uint64_t now = uv_now(GetAddonData(Env())->loop());
  uv_timer_start(timer_.get(), OnTimer, due > now ? due - now : 0, 0);
}

void ShmListener::OnTimer(uv_timer_t* handle) {
  auto* self = static_cast<ShmListener*>(handle->data);
  if (self->closed_) return;
  Napi::Env env = self->Env();
  FromLoop(env, [&] {
    uint64_t now = uv_now(GetAddonData(env)->loop());
    if (self->resumeAt_ != 0 && now >= self->resumeAt_) {
      self->resumeAt_ = 0;
      if (self->reserveFd_ < 0) self->reserveFd_ = OpenReserve();
      uv_poll_start(self->poll_.get(), UV_READABLE, OnReadable);
    }
    const std::string message = "shm handshake not done within " + std::to_string(self->bounds_.timeoutMs) + " ms";
    while (!self->closed_ && !self->starting_.empty() && self->starting_.front()->handshakeDeadline_ <= now) {
      Napi::HandleScope scope(env);
      self->DropOldest(env, message);
      if (!CanCallIntoJs(env)) return;
    }
    self->ArmTimer();
  });
}

void ShmListener::Report(Napi::Value error) { InvokeCallback(onConnection_, *asyncContext_, {error}); }

Napi::Value ShmListener::Address(const Napi::CallbackInfo& info) { return Napi::String::New(info.Env(), name_); }

Napi::Value ShmListener::Close(const Napi::CallbackInfo& info) {
  CloseSocket();
  return info.Env().Undefined();
}

// Stops accepting, and drops the handshakes not done yet (as the core's
// Listener drops its own on close), silently.
void ShmListener::CloseSocket() {
  if (closed_) return;
  closed_ = true;
  // The descriptor closes a loop turn later, once the poll handle has; a
  // connect until then would be taken into the backlog and reset. Shut down,
  // the socket refuses it (ECONNREFUSED) as a closed one does.
  if (fd_ >= 0) ::shutdown(fd_, SHUT_RDWR);
  std::list<ShmConnection*> starting;
  starting.swap(starting_);
  for (ShmConnection* c : starting) {
    c->watcher_ = nullptr;
    c->CloseAll();
  }
  poll_.Close(OnHandleClosed, this);
  timer_.Close(OnHandleClosed, this);
}

void ShmListener::OnHandleClosed(void* listener) {
  auto* self = static_cast<ShmListener*>(listener);
  if (--self->openHandles_ != 0) return;
  for (int* fd : {&self->fd_, &self->reserveFd_}) {
    if (*fd >= 0) ::close(*fd);
    *fd = -1;
  }
  LifecycleOf(self->Env()).Released(self);
  self->Unref();
}

}  // namespace tensorpipe_js
