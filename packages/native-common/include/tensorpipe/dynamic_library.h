// Libraries loaded at run time, so that an addon builds and loads where
// they are missing, and says why instead.
#pragma once

#include <dlfcn.h>

#include <cstdlib>
#include <string>

namespace tensorpipe_js {

// Opens the library that the environment variable `override` names (a path
// or a soname: a build out of the loader's path, or a stand-in for tests),
// else `soname`; nullptr, with *error set to what the loader said, where it
// does not load.
inline void* OpenLibrary(const char* override, const char* soname, std::string* error) {
  const char* name = getenv(override);
  if (name == nullptr || *name == '\0') name = soname;
  void* lib = dlopen(name, RTLD_NOW | RTLD_LOCAL);
  if (lib == nullptr) {
    const char* e = dlerror();
    *error = e ? e : std::string(name) + " did not load";
  }
  return lib;
}

}  // namespace tensorpipe_js
