// The uv transport's native half: TCP listeners and connections on the
// libuv loop Node itself runs, so no extra thread and no hop between loops.
#include <napi.h>
#include <uv.h>

#include <memory>
#include <string>

#include "handed_socket.h"
#include "tensorpipe/napi_helpers.h"
#include "uv_addon_data.h"
#include "uv_connection.h"
#include "uv_listener.h"

namespace tensorpipe_js {
namespace {

struct ConnectRequest {
  uv_connect_t req;
  uint32_t peerTimeoutMs = 0;
  Napi::FunctionReference callback;
  Napi::ObjectReference connection;
  std::unique_ptr<Napi::AsyncContext> asyncContext;
};

void OnConnect(uv_connect_t* req, int status) {
  std::unique_ptr<ConnectRequest> request(static_cast<ConnectRequest*>(req->data));
  Napi::Env env = request->callback.Env();
  FromLoop(env, [&] {
    UvConnection* connection = UvConnection::Unwrap(request->connection.Value());
    if (connection->closed()) {
      InvokeCallback(request->callback, *request->asyncContext, {UvError(env, UV_ECANCELED, "connect").Value()});
      return;
    }
    if (status < 0) {
      connection->CloseAll();
      InvokeCallback(request->callback, *request->asyncContext, {UvError(env, status, "connect").Value()});
      return;
    }
    connection->Start(request->peerTimeoutMs);
    InvokeCallback(request->callback, *request->asyncContext, {env.Null(), request->connection.Value()});
  });
}

// connect(host, port, bindHost | null, peerTimeoutMs, callback(err,
// connection)) -> the connection, so that a caller may close() it to cancel.
Napi::Value Connect(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  std::string host = info[0].As<Napi::String>();
  int port = info[1].As<Napi::Number>().Int32Value();
  uint32_t peerTimeoutMs = info[3].As<Napi::Number>().Uint32Value();
  Napi::Function callback = info[4].As<Napi::Function>();
  struct sockaddr_storage addr;
  int r = ParseIpAddress(host, port, &addr);
  if (r < 0) throw UvError(env, r, "connect (address)");
  Napi::Object object;
  UvConnection* connection = UvConnection::Create(env, GetAddonData(env)->loop(), &object);
  if (info[2].IsString()) {
    struct sockaddr_storage local;
    r = ParseIpAddress(info[2].As<Napi::String>(), 0, &local);
    if (r == 0) r = uv_tcp_bind(connection->handle(), reinterpret_cast<struct sockaddr*>(&local), 0);
    if (r < 0) {
      connection->CloseAll();
      throw UvError(env, r, "bind");
    }
  }
  auto request = std::make_unique<ConnectRequest>();
  request->callback = Napi::Persistent(callback);
  request->peerTimeoutMs = peerTimeoutMs;
  request->connection = Napi::Persistent(object);
  request->asyncContext = std::make_unique<Napi::AsyncContext>(env, "tensorpipe.UvConnect");
  request->req.data = request.get();
  r = uv_tcp_connect(&request->req, connection->handle(), reinterpret_cast<struct sockaddr*>(&addr), OnConnect);
  if (r < 0) {
    connection->CloseAll();
    throw UvError(env, r, "connect");
  }
  request.release();
  return object;
}

Napi::Object Init(Napi::Env env, Napi::Object exports) {
  UvAddonData* data = AddonEnv::Install<UvAddonData>(env);
  Napi::Function connection = UvConnection::Define(env);
  Napi::Function listener = UvListener::Define(env);
  data->connectionConstructor = Napi::Persistent(connection);
  data->handedSocketConstructor = Napi::Persistent(HandedSocket::Define(env));
  exports.Set("UvConnection", connection);
  exports.Set("UvListener", listener);
  exports.Set("connect", Napi::Function::New(env, Connect, "connect"));
  return exports;
}

}  // namespace
}  // namespace tensorpipe_js

static Napi::Object InitAddon(Napi::Env env, Napi::Object exports) { return tensorpipe_js::Init(env, exports); }

NODE_API_MODULE(tensorpipe_uv, InitAddon)
