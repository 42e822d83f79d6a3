# One place for the boilerplate every tensorpipe-js addon needs:
#   include(<native-common>/cmake/TensorPipeAddon.cmake)
#   tensorpipe_addon(<target> <sources...>)
# builds <target>.node against Node-API 8 (cmake-js in N-API mode), with
# node-addon-api, Node's own libuv headers and the shared headers here.
cmake_minimum_required(VERSION 3.18)

set(TENSORPIPE_NATIVE_COMMON_DIR "${CMAKE_CURRENT_LIST_DIR}/..")
# What an addon built on framed_connection.h (a transport's connections)
# compiles besides its own sources: tensorpipe_addon(<target> ... ${TENSORPIPE_CONNECTION_SOURCES}).
set(TENSORPIPE_CONNECTION_SOURCES "${TENSORPIPE_NATIVE_COMMON_DIR}/src/peer_process.cc")

function(_tensorpipe_node_eval out expr)
  execute_process(
    COMMAND node -p "${expr}"
    WORKING_DIRECTORY "${CMAKE_SOURCE_DIR}"
    OUTPUT_VARIABLE value
    OUTPUT_STRIP_TRAILING_WHITESPACE
    RESULT_VARIABLE rc)
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "node -p '${expr}' failed")
  endif()
  set(${out} "${value}" PARENT_SCOPE)
endfunction()

# libuv's uv.h comes with Node's headers (<prefix>/include/node), the ones
# npm builds addons against; libuv1-dev is the fallback.
_tensorpipe_node_eval(_node_include "require('path').resolve(process.execPath, '../../include/node')")
find_path(TENSORPIPE_UV_INCLUDE_DIR uv.h HINTS "${_node_include}" PATH_SUFFIXES node)
if(NOT TENSORPIPE_UV_INCLUDE_DIR)
  message(FATAL_ERROR "uv.h not found: install Node's headers (they sit in ${_node_include}) or libuv1-dev")
endif()
_tensorpipe_node_eval(TENSORPIPE_NAPI_INCLUDE_DIR "require('node-addon-api').include_dir")

function(tensorpipe_addon target)
  add_library(${target} SHARED ${ARGN} ${CMAKE_JS_SRC})
  set_target_properties(${target} PROPERTIES PREFIX "" SUFFIX ".node" CXX_STANDARD 17 CXX_STANDARD_REQUIRED ON)
  target_include_directories(${target} PRIVATE
    ${CMAKE_JS_INC}
    "${TENSORPIPE_NAPI_INCLUDE_DIR}"
    "${TENSORPIPE_UV_INCLUDE_DIR}"
    "${TENSORPIPE_NATIVE_COMMON_DIR}/include")
  # A worker terminated while it calls into an addon (loading it, say)
  # cannot take a JS exception any more; without SWALLOW, node-addon-api
  # turns that into a C++ exception nobody catches, and the process aborts.
  target_compile_definitions(${target} PRIVATE NAPI_VERSION=8 NAPI_CPP_EXCEPTIONS NODE_ADDON_API_DISABLE_DEPRECATED
    NODE_API_SWALLOW_UNTHROWABLE_EXCEPTIONS)
  target_compile_options(${target} PRIVATE -Wall -Wextra -Wno-unused-parameter -fvisibility=hidden)
  target_link_libraries(${target} PRIVATE ${CMAKE_JS_LIB})
endfunction()
