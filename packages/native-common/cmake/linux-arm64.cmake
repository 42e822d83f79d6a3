# Cross-compiling addons for linux-arm64 (glibc) with Debian's
# g++-aarch64-linux-gnu: `cmake-js compile --arch arm64
# --CDCMAKE_TOOLCHAIN_FILE=<this file>`. Libraries and packages are looked
# for in the target's root only, so that the build machine's (its CUDA
# toolkit, say) are never linked into an arm64 binary.
set(CMAKE_SYSTEM_NAME Linux)
set(CMAKE_SYSTEM_PROCESSOR aarch64)
set(CMAKE_C_COMPILER aarch64-linux-gnu-gcc)
set(CMAKE_CXX_COMPILER aarch64-linux-gnu-g++)
set(CMAKE_STRIP aarch64-linux-gnu-strip)
set(CMAKE_FIND_ROOT_PATH /usr/aarch64-linux-gnu)
set(CMAKE_FIND_ROOT_PATH_MODE_PROGRAM NEVER)
set(CMAKE_FIND_ROOT_PATH_MODE_LIBRARY ONLY)
set(CMAKE_FIND_ROOT_PATH_MODE_PACKAGE ONLY)
set(CMAKE_FIND_ROOT_PATH_MODE_INCLUDE BOTH)
