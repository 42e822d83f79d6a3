// One libuv handle, owned by type (zeromq.js's UvHandle is the model).
//
// libuv may use a handle until its close callback has run, a loop turn
// after uv_close(): a handle freed sooner is memory libuv writes into. So
// a UvHandle allocates its handle zeroed, and Close() (or the destructor)
// closes it and frees it in the close callback, then tells the owner, if
// it asked, that the handle is gone. A handle that was never initialised
// (its init failed, or was never called) may not be passed to uv_close():
// it is freed at once.
#pragma once

#include <uv.h>

#include <utility>

namespace tensorpipe_js {

template <typename T>
class UvHandle {
 public:
  // Told once the handle is freed: the owner's last word on it.
  using Closed = void (*)(void* owner);

  UvHandle() = default;
  UvHandle(const UvHandle&) = delete;
  UvHandle& operator=(const UvHandle&) = delete;
  UvHandle(UvHandle&& other) noexcept : box_(std::exchange(other.box_, nullptr)) {}
  UvHandle& operator=(UvHandle&& other) noexcept {
    if (this != &other) {
      Close();
      box_ = std::exchange(other.box_, nullptr);
    }
    return *this;
  }
  ~UvHandle() { Close(); }

  // A fresh handle for the caller to initialise (uv_timer_init(loop, h)...),
  // its `data` pointing at `owner`. An open one is closed first.
  T* Make(void* owner) {
    Close();
    box_ = new Box{};
    box_->handle.data = owner;
    return &box_->handle;
  }

  T* get() const { return box_ == nullptr ? nullptr : &box_->handle; }
  T* operator->() const { return get(); }
  explicit operator bool() const { return box_ != nullptr; }
  uv_handle_t* handle() const { return reinterpret_cast<uv_handle_t*>(get()); }
  uv_stream_t* stream() const { return reinterpret_cast<uv_stream_t*>(get()); }

  bool IsActive() const { return box_ != nullptr && uv_is_active(handle()) != 0; }
  // Whether the handle keeps the loop alive (a handle never initialised has no say).
  void Ref() const {
    if (Initialised()) uv_ref(handle());
  }
  void Unref() const {
    if (Initialised()) uv_unref(handle());
  }

  // Closes the handle: it is freed once libuv is done with it, and then
  // `closed(owner)` runs. Returns whether that is still to come: false when
  // there was no handle, or one never initialised (freed now, nobody told).
  bool Close(Closed closed = nullptr, void* owner = nullptr) {
    Box* box = std::exchange(box_, nullptr);
    if (box == nullptr) return false;
    if (box->handle.type == UV_UNKNOWN_HANDLE) {
      delete box;
      return false;
    }
    box->closed = closed;
    box->owner = owner;
    uv_close(reinterpret_cast<uv_handle_t*>(&box->handle), [](uv_handle_t* h) {
      // The handle is the box's first member: its address is the box's.
      Box* done = reinterpret_cast<Box*>(h);
      Closed then = done->closed;
      void* to = done->owner;
      delete done;
      if (then != nullptr) then(to);
    });
    return true;
  }

 private:
  struct Box {
    T handle;
    Closed closed = nullptr;
    void* owner = nullptr;
  };

  bool Initialised() const { return box_ != nullptr && box_->handle.type != UV_UNKNOWN_HANDLE; }

  Box* box_ = nullptr;
};

}  // namespace tensorpipe_js
