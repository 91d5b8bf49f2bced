// The done callback of an asynchronous kernel (GOBN_ASYNC=1, register.c).
//
// TensorFlow 2.21's C API hands compute_async the address of its
// ComputeAsync's own by-value callback (tensorflow/c/kernels.cc), which is
// gone once compute_async returns; its implementation of the opaque
// TF_AsyncOpKernelDoneCallback is a std::function<void()> (libstdc++'s, as
// TensorFlow's Linux wheels are built). So a kernel that finishes later
// keeps a copy, made here before compute_async returns, and runs and frees
// that copy when it is done. Built without exceptions: nothing here may
// unwind into C or Go.

#include <atomic>
#include <functional>
#include <new>

extern "C" {
// As tensorflow/c/kernels.h declares them (gobn.h includes that header; this
// file, compiled as C++ without TensorFlow's include path, does not).
typedef struct TF_AsyncOpKernelDoneCallback TF_AsyncOpKernelDoneCallback;
void TF_RunAsyncOpKernelDoneCallback(TF_AsyncOpKernelDoneCallback* done);

using DoneCallback = std::function<void()>;

// The copies kept and not yet run, for the tests.
static std::atomic<long long> kept_callbacks;

// gobn_keep_done returns a copy of done, or NULL when there is no memory for
// one (the caller then finishes the call before it returns).
TF_AsyncOpKernelDoneCallback* gobn_keep_done(TF_AsyncOpKernelDoneCallback* done) noexcept {
  auto* kept = new (std::nothrow) DoneCallback(*reinterpret_cast<DoneCallback*>(done));
  if (kept != nullptr) kept_callbacks.fetch_add(1);
  return reinterpret_cast<TF_AsyncOpKernelDoneCallback*>(kept);
}

// gobn_run_done runs a copy of gobn_keep_done and frees it.
void gobn_run_done(TF_AsyncOpKernelDoneCallback* kept) noexcept {
  TF_RunAsyncOpKernelDoneCallback(kept);
  delete reinterpret_cast<DoneCallback*>(kept);
  kept_callbacks.fetch_sub(1);
}

long long gobn_kept_callbacks(void) noexcept { return kept_callbacks.load(); }
}
