// The lifecycle every tensorpipe-js addon shares: what an addon owns in one
// Node environment (the main thread or a worker), and its release when that
// environment goes (worker.terminate(), a worker's natural end,
// process.exit(), a normal exit).
//
// Node frees a worker's wrapped objects and closes its loop once the
// environment's cleanup hooks are done. An addon whose libuv handles,
// thread-pool jobs or threads outlive that calls into freed memory (a
// SIGSEGV) or leaves the loop unclosable (an abort). So each addon keeps an
// EnvLifecycle in its instance data and registers everything it starts
// with it. The lifecycle's async cleanup hook asks each of them to let go,
// and holds the environment (and so the memory of the JS objects they
// reference) until the last has said it is done.
#pragma once

#include <napi.h>
#include <uv.h>

#include <unordered_set>
#include <vector>

namespace tensorpipe_js {

class EnvLifecycle;

// Something an addon started in one environment: a handle, a job on the
// thread pool, a thread.
class EnvResource {
 public:
  EnvResource() = default;
  EnvResource(const EnvResource&) = delete;
  EnvResource& operator=(const EnvResource&) = delete;
  virtual ~EnvResource() = default;

  // The environment is going: stop calling into JS, close handles, cancel
  // or wait for jobs, stop and join threads. Once nothing is left (now, or
  // later from a close or completion callback), call lifecycle.Released(this).
  virtual void Teardown() = 0;
};

class EnvLifecycle {
 public:
  explicit EnvLifecycle(napi_env env) {
    napi_get_uv_event_loop(env, &loop_);
    napi_add_async_cleanup_hook(env, OnCleanup, this, &hook_);
  }
  EnvLifecycle(const EnvLifecycle&) = delete;
  EnvLifecycle& operator=(const EnvLifecycle&) = delete;

  uv_loop_t* loop() const { return loop_; }

  // True once the environment is going: nothing may call into JS any more.
  bool tearingDown() const { return tearingDown_; }

  void Own(EnvResource* r) { resources_.insert(r); }

  // `r` holds nothing of this environment any more. It may be deleted now.
  void Released(EnvResource* r) {
    resources_.erase(r);
    if (tearingDown_ && resources_.empty()) Finish();
  }

 private:
  static void OnCleanup(napi_async_cleanup_hook_handle, void* arg) {
    auto* self = static_cast<EnvLifecycle*>(arg);
    self->tearingDown_ = true;
    // Teardown() may release at once, and so change the set.
    std::vector<EnvResource*> all(self->resources_.begin(), self->resources_.end());
    for (EnvResource* r : all) {
      if (self->resources_.count(r) != 0) r->Teardown();
    }
    if (self->resources_.empty()) self->Finish();
  }

  void Finish() {
    if (hook_ == nullptr) return;
    napi_async_cleanup_hook_handle hook = hook_;
    hook_ = nullptr;
    napi_remove_async_cleanup_hook(hook);
  }

  uv_loop_t* loop_ = nullptr;
  napi_async_cleanup_hook_handle hook_ = nullptr;
  bool tearingDown_ = false;
  std::unordered_set<EnvResource*> resources_;
};

// A job on the thread pool of the environment's loop. The environment waits
// for it: at teardown a job not started yet is cancelled, one running
// finishes first (it may write into memory the environment owns).
class PoolJob : public EnvResource {
 public:
  // Queues the job: Run() on a pool thread, then Done() on the loop, then
  // the job deletes itself. A libuv error comes back (the job is then
  // deleted, never run).
  int Queue(EnvLifecycle& lifecycle) {
    lifecycle_ = &lifecycle;
    req_.data = this;
    int r = uv_queue_work(lifecycle.loop(), &req_, OnRun, OnDone);
    if (r < 0) {
      delete this;
      return r;
    }
    lifecycle.Own(this);
    return 0;
  }

 protected:
  virtual void Run() = 0;
  // `status` is UV_ECANCELED for a job cancelled before it ran.
  virtual void Done(int status) = 0;
  // False for a job that must run even when its environment goes (it
  // waits for work already handed to a device, say).
  virtual bool Cancellable() const { return true; }

 private:
  void Teardown() override {
    if (Cancellable()) uv_cancel(reinterpret_cast<uv_req_t*>(&req_));
  }

  static void OnRun(uv_work_t* req) { static_cast<PoolJob*>(req->data)->Run(); }
  static void OnDone(uv_work_t* req, int status) {
    auto* job = static_cast<PoolJob*>(req->data);
    job->Done(status);
    job->lifecycle_->Released(job);
    delete job;
  }

  uv_work_t req_;
  EnvLifecycle* lifecycle_ = nullptr;
};

// The base of every addon's per-environment data.
struct AddonEnv {
  explicit AddonEnv(napi_env env) : lifecycle(env) {}
  virtual ~AddonEnv() = default;
  EnvLifecycle lifecycle;

  // Makes T (an AddonEnv) this environment's instance data, freed by Node
  // with the environment, after the cleanup hook is done.
  template <typename T>
  static T* Install(Napi::Env env) {
    T* data = new T(env);
    env.SetInstanceData<AddonEnv>(data);
    return data;
  }

  template <typename T>
  static T* Get(Napi::Env env) {
    return static_cast<T*>(env.GetInstanceData<AddonEnv>());
  }
};

inline EnvLifecycle& LifecycleOf(Napi::Env env) { return env.GetInstanceData<AddonEnv>()->lifecycle; }

// False once this environment is going: from worker.terminate() on, before
// any cleanup hook runs, Node lets no JS run, and a Node-API call that
// would run some fails. libuv callbacks check this before they make any JS
// value or call: a failed call there would abort the process. The probe is
// a call that could run JS (ToBoolean never does), so Node-API refuses it
// exactly when JS cannot run. Called inside a handle scope, which keeps the
// probe's two values: a scope of its own would cost an allocation (Node-API
// allocates each scope), and a completion asks twice.
inline bool CanCallIntoJs(Napi::Env env) {
  AddonEnv* data = env.GetInstanceData<AddonEnv>();
  if (data != nullptr && data->lifecycle.tearingDown()) return false;
  napi_value value;
  napi_value coerced;
  return napi_get_boolean(env, true, &value) == napi_ok && napi_coerce_to_bool(env, value, &coerced) == napi_ok;
}

}  // namespace tensorpipe_js
