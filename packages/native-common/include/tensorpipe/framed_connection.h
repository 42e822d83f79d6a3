// The native connection core every transport shares: the JS object, its
// queue of frame reads served in order from whatever bytes have arrived,
// how a failure is told (to the read waiting, or to onFailure when nothing
// waits), and its place in the environment's lifecycle. A transport
// derives from FramedConnection<Itself> and supplies its byte I/O:
//
//   Progress Consume(FrameRead& op);  // feed `op` from the bytes at hand
//   void ArmRead();                   // wait for bytes while reads wait
//   void StopIo();                    // stop waiting for anything (failed)
//   bool HasUnreadBytes() const;      // bytes here that no read has taken
//   bool HasPendingInput() const;     // the peer sent bytes no read has taken
//   void CloseAll();                  // close everything (JS close, teardown)
//   Napi::Value Write(const Napi::CallbackInfo&), LocalAddress, RemoteAddress
//   int SocketFd();                   // the connected socket, -1 if none (closed)
//
// and calls PumpReads() when bytes arrive, Fail()/Broke() when the byte
// source ends, and Released() once its last handle is closed.
#pragma once

#include <napi.h>
#include <uv.h>

#include <array>
#include <cmath>
#include <deque>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "tensorpipe/addon_data.h"
#include "tensorpipe/descriptor_shortage.h"
#include "tensorpipe/env_lifecycle.h"
#include "tensorpipe/frame_io.h"
#include "tensorpipe/napi_helpers.h"
#include "tensorpipe/peer_process.h"

namespace tensorpipe_js {

template <typename T>
class FramedConnection : public Napi::ObjectWrap<T>, public EnvResource {
 public:
  using Progress = FrameRead::Progress;

  // The methods every transport's connection has, for DefineClass, with
  // `extra` ones of its own.
  static Napi::Function DefineConnection(Napi::Env env, const char* name,
                                         std::vector<typename Napi::ObjectWrap<T>::PropertyDescriptor> extra = {}) {
    std::vector<typename Napi::ObjectWrap<T>::PropertyDescriptor> methods = {
        Napi::ObjectWrap<T>::InstanceMethod("write", &T::Write),
        Napi::ObjectWrap<T>::InstanceMethod("read", &T::Read),
        Napi::ObjectWrap<T>::InstanceMethod("close", &T::Close),
        Napi::ObjectWrap<T>::InstanceMethod("localAddress", &T::LocalAddress),
        Napi::ObjectWrap<T>::InstanceMethod("remoteAddress", &T::RemoteAddress),
        Napi::ObjectWrap<T>::InstanceMethod("onFailure", &T::OnFailure),
        Napi::ObjectWrap<T>::InstanceMethod("provePeerProcess", &T::ProvePeerProcessOf),
        Napi::ObjectWrap<T>::InstanceMethod("hasPendingInput", &T::HasPendingInputOf),
        Napi::ObjectWrap<T>::InstanceMethod("serveArrived", &T::ServeArrivedOf),
    };
    methods.insert(methods.end(), extra.begin(), extra.end());
    return Napi::ObjectWrap<T>::DefineClass(env, name, methods);
  }

  FramedConnection(const Napi::CallbackInfo& info, const char* resourceName) : Napi::ObjectWrap<T>(info) {
    if (info.Length() != 1 || !info[0].IsExternal()) {
      throw Napi::TypeError::New(info.Env(), std::string(resourceName) + " is made by connect() or a listener");
    }
    asyncContext_ = std::make_unique<Napi::AsyncContext>(info.Env(), resourceName, info.This().As<Napi::Object>());
  }

  void Teardown() override { self().CloseAll(); }

 protected:
  enum class State { kStarting, kOpen, kFailed, kClosed };

  // A new connection object, owned by the environment and kept alive
  // (whatever JS holds on to) until Released().
  static T* Make(Napi::Env env, Napi::Object* out) {
    *out = GetAddonData(env)->connectionConstructor.New({Napi::External<void>::New(env, nullptr)});
    T* c = T::Unwrap(*out);
    LifecycleOf(env).Own(c);
    c->Ref();
    return c;
  }

  // The last handle is closed: nothing of the environment is held any more.
  void Released() {
    LifecycleOf(this->Env()).Released(this);
    this->Unref();
  }

  // read(target: ArrayBufferView | null, maxLength, callback(err, frame),
  // lend?) -> false when queued, or the result at once: true (read into
  // target), a Uint8Array or an Error. The frame is fresh memory, or with
  // `lend` and small, lent (LentFrames). With nothing queued before it, a
  // frame already here completes at once, even from inside a completion
  // callback: order cannot change.
  Napi::Value Read(const Napi::CallbackInfo& info) {
    Napi::Env env = info.Env();
    if (state_ == State::kClosed || state_ == State::kStarting) {
      throw CodedError(env, "ERR_TP_CLOSED", "connection is closed");
    }
    if (!spareRead_) spareRead_ = std::make_unique<FrameRead>();
    FrameRead& op = *spareRead_;
    op.Assign(info);
    if (reads_.empty()) {
      Progress p = self().Consume(op);
      if (p == Progress::kDone) return ResultOf(env, op);
      if (p == Progress::kError) {
        // Made before Fail(), whose callbacks may read again and reuse `op`.
        Napi::Value failure = FailureFor(op);
        Fail(0);
        return failure;
      }
    }
    if (state_ == State::kFailed) return FailureFor(op);
    op.Wait(info);
    reads_.push_back(std::move(spareRead_));
    self().ArmRead();
    return Napi::Boolean::New(env, false);
  }

  // onFailure(callback(err)): told when the connection fails while no read
  // waits and nothing is left to read, so that an idle peer's death is
  // not missed.
  Napi::Value OnFailure(const Napi::CallbackInfo& info) {
    onFailure_ = Napi::Persistent(info[0].As<Napi::Function>());
    return info.Env().Undefined();
  }

  // hasPendingInput(): whether the peer sent bytes that no read has taken
  // yet, so that a listener does not take a busy loop's backlog for a
  // silent peer.
  Napi::Value HasPendingInputOf(const Napi::CallbackInfo& info) {
    return Napi::Boolean::New(info.Env(), state_ == State::kOpen && self().HasPendingInput());
  }

  // serveArrived(): serves the reads that wait from bytes already here,
  // now rather than when the loop next polls this connection.
  Napi::Value ServeArrivedOf(const Napi::CallbackInfo& info) {
    if (state_ == State::kOpen && !reads_.empty() && self().HasUnreadBytes()) PumpReads();
    return info.Env().Undefined();
  }

  // provePeerProcess(pid) -> [real, effective, saved, fs] uids of process
  // `pid`, once the kernel's records show it holds the other end of the
  // socket (peer_process.h); else throws ERR_TP_PERMISSION_DENIED.
  Napi::Value ProvePeerProcessOf(const Napi::CallbackInfo& info) {
    Napi::Env env = info.Env();
    if (info.Length() < 1 || !info[0].IsNumber()) {
      throw CodedError(env, "ERR_TP_INVALID_ARG", "provePeerProcess(pid) takes a pid");
    }
    const double pid = info[0].As<Napi::Number>().DoubleValue();
    if (state_ == State::kClosed || state_ == State::kStarting) {
      throw CodedError(env, "ERR_TP_CLOSED", "connection is closed");
    }
    const int fd = self().SocketFd();
    if (fd < 0) throw CodedError(env, "ERR_TP_CLOSED", "connection is closed");
    if (!(pid >= 1 && pid <= 0x7fffffff && std::floor(pid) == pid)) {
      throw CodedError(env, "ERR_TP_PERMISSION_DENIED",
                       "pid " + Napi::Value(info[0]).ToString().Utf8Value() + " is not a process");
    }
    std::array<uid_t, 4> uids{};
    std::string why;
    if (!ProvePeerProcess(fd, static_cast<pid_t>(pid), &uids, &why)) {
      if (PeerHungUp(fd)) throw CodedError(env, "ERR_TP_PEER_CLOSED", "peer closed the connection");
      // The proof needs descriptors of its own (netlink, /proc): without
      // them it proved nothing either way.
      if (int shortage = DescriptorShortage(fd)) {
        Napi::Error err = UvError(env, uv_translate_sys_error(shortage), "provePeerProcess");
        err.Set(
            "message",
            Napi::String::New(
                env, std::string("cannot prove which process is the peer: this process is out of file descriptors (") +
                         (shortage == EMFILE ? "EMFILE" : "ENFILE") + "); raise `ulimit -n`"));
        throw err;
      }
      throw CodedError(env, "ERR_TP_PERMISSION_DENIED",
                       "process " + std::to_string(static_cast<pid_t>(pid)) + " is not the peer: " + why);
    }
    Napi::Array out = Napi::Array::New(env, uids.size());
    for (uint32_t i = 0; i < uids.size(); i++) out.Set(i, Napi::Number::New(env, uids[i]));
    return out;
  }

  Napi::Value Close(const Napi::CallbackInfo& info) {
    self().CloseAll();
    return info.Env().Undefined();
  }

  // Completes, in order, the reads that the bytes at hand finish. Called
  // inside a handle scope, which holds the first read's values; each later
  // one gets a scope of its own (Node-API allocates each), so that a pump
  // of thousands does not pile their values up.
  void PumpReads() {
    if (pumping_) return;
    pumping_ = true;
    Napi::Env env = this->Env();
    bool first = true;
    while (!reads_.empty() && state_ == State::kOpen) {
      Progress p = self().Consume(*reads_.front());
      if (p == Progress::kNeedMore) break;
      std::unique_ptr<FrameRead> op = std::move(reads_.front());
      reads_.pop_front();
      std::optional<Napi::HandleScope> scope;
      if (!first) scope.emplace(env);
      first = false;
      if (p == Progress::kError) {
        Fail(0);
        InvokeCallback(op->callback, *asyncContext_, {FailureFor(*op)});
        break;
      }
      napi_value result = ResultOf(env, *op);
      InvokeCallback(op->callback, *asyncContext_, {env.Null(), result});
      Recycle(std::move(op));
    }
    pumping_ = false;
    self().ArmRead();
  }

  Napi::Value ResultOf(Napi::Env env, FrameRead& op) {
    if (LentFrames::Takes(op)) return lent_.View(env, op);
    return GetAddonData(env)->results.Result(env, op);
  }

  // A read that waited and finished becomes the spare, its target let go:
  // the next read that has to wait (a pipe's next descriptor, nearly
  // always) takes it, the memory it had and the reference to its callback,
  // instead of making all three again. Closing lets the callback go too,
  // and the callback itself may have closed the connection.
  void Recycle(std::unique_ptr<FrameRead> op) {
    if (spareRead_ || state_ == State::kClosed) return;
    op->keepTarget.Reset();
    spareRead_ = std::move(op);
  }

  // Reading ended: `status` is a libuv error (UV_EOF...), or 0 for the
  // protocol error already recorded in protocolError_.
  void Fail(int status) {
    if (state_ != State::kOpen) return;
    state_ = State::kFailed;
    if (status != 0 && failStatus_ == 0 && protocolError_.empty()) failStatus_ = status;
    self().StopIo();
  }

  // The byte source ended or broke while the connection was open: the read
  // waiting learns of it; with none waiting and nothing left to read,
  // onFailure does; otherwise the next read() will (after the frames still
  // here). Returns whether anyone was told.
  bool Broke(int status) {
    const bool idle = reads_.empty();
    Fail(status);
    Napi::HandleScope scope(this->Env());
    if (!idle) {
      FailFront(FailureFor(*reads_.front()));
      return true;
    }
    if (!self().HasUnreadBytes() && !onFailure_.IsEmpty()) {
      InvokeCallback(onFailure_, *asyncContext_, {FailureFor(FrameRead())});
      return true;
    }
    return false;
  }

  // A frame cut short by the peer's end (EOF, or a reset: a peer that dies
  // with bytes of ours unread makes its kernel answer so where it would have
  // sent EOF) is a broken connection; EOF between frames is EOF, and a reset
  // between frames is marked so, for core to tell it as the peer's end, as
  // it tells the same death over shm.
  Napi::Value FailureFor(const FrameRead& op) {
    Napi::Env env = this->Env();
    if (!protocolError_.empty()) {
      Napi::Error err = CodedError(env, "ERR_TP_PROTOCOL", protocolError_);
      // Said as a property too, so that core names its own limit without reading the words.
      if (!op.hasTarget && op.frameLength > op.maxLength) err.Set("overLimit", Napi::Boolean::New(env, true));
      return err.Value();
    }
    const bool betweenFrames = op.headerGot == 0 && !self().HasUnreadBytes();
    const bool peerEnded = failStatus_ == UV_EOF || failStatus_ == UV_ECONNRESET;
    if (peerEnded && !betweenFrames) return op.TruncationError(env).Value();
    Napi::Error err = UvError(env, failStatus_, failSyscall_, failDetail_);
    if (failStatus_ == UV_ECONNRESET && betweenFrames) err.Set("betweenFrames", Napi::Boolean::New(env, true));
    return err.Value();
  }

  void FailFront(Napi::Value error) {
    if (reads_.empty()) return;
    std::unique_ptr<FrameRead> op = std::move(reads_.front());
    reads_.pop_front();
    InvokeCallback(op->callback, *asyncContext_, {error});
  }

  // What closing drops at once: pending reads and the callback above, so
  // that a closed connection holds nothing of JS.
  void DropPending() {
    state_ = State::kClosed;
    reads_.clear();
    if (spareRead_) spareRead_->callback.Reset();
    onFailure_.Reset();
    lent_.Release();
  }

  // The frames of write(frames, callback), in memory reused by every write
  // that finishes at once; one that has to wait takes it along (TakeWrite).
  FrameWrite& NextWrite(const Napi::CallbackInfo& info) {
    if (!spareWrite_) spareWrite_ = std::make_unique<FrameWrite>();
    spareWrite_->Assign(info);
    return *spareWrite_;
  }

  // The write NextWrite made, for a write that has to wait; its JS frames
  // are held until it finishes.
  std::unique_ptr<FrameWrite> TakeWrite(const Napi::CallbackInfo& info) {
    spareWrite_->keepFrames = Napi::Persistent(info[0]);
    return std::move(spareWrite_);
  }

  State state_ = State::kStarting;
  std::deque<std::unique_ptr<FrameRead>> reads_;
  // The read tried at once, kept for the next one when it finishes at once
  // or comes back when a waiting one finishes.
  std::unique_ptr<FrameRead> spareRead_;
  std::unique_ptr<FrameWrite> spareWrite_;
  LentFrames lent_;
  // Why reading ended: a protocol violation, else a libuv status (UV_EOF...).
  std::string protocolError_;
  int failStatus_ = 0;
  // What saw the failure, and why in words where errno's name is not enough.
  const char* failSyscall_ = "read";
  std::string failDetail_;
  Napi::FunctionReference onFailure_;
  std::unique_ptr<Napi::AsyncContext> asyncContext_;

 private:
  T& self() { return static_cast<T&>(*this); }
  const T& self() const { return static_cast<const T&>(*this); }

  bool pumping_ = false;
};

}  // namespace tensorpipe_js
