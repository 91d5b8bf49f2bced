// The done callback of an asynchronous kernel (GOBN_ASYNC=1, register.c).
//
// TensorFlow 2.21's C API hands compute_async the address of its
// ComputeAsync's own by-value callback (tensorflow/c/kernels.cc), which is
// gone once compute_async returns; its implementation of the opaque
// TF_AsyncOpKernelDoneCallback is a std::function<void()> (libstdc++'s, as
// TensorFlow's Linux wheels are built). So a kernel that finishes later
// moves it into a callback of its own before compute_async returns, and
// frees and runs that one when it is done. Built without exceptions: nothing here may
// unwind into C or Go.

#include <atomic>
#include <functional>
#include <new>
#include <utility>

extern "C" {
// As tensorflow/c/kernels.h declares them (gobn.h includes that header; this
// file, compiled as C++ without TensorFlow's include path, does not).
typedef struct TF_AsyncOpKernelDoneCallback TF_AsyncOpKernelDoneCallback;
void TF_RunAsyncOpKernelDoneCallback(TF_AsyncOpKernelDoneCallback* done);

using DoneCallback = std::function<void()>;

// The copies kept and not yet run, for the tests.
static std::atomic<long long> kept_callbacks;

// gobn_keep_done returns a copy of done that takes over its state
// (TensorFlow's ComputeAsync does nothing with done once compute_async
// returns, so moving costs no allocation of the state, and cannot throw),
// or NULL when there is no memory for one (done is then untouched, and the
// caller finishes the call before it returns).
TF_AsyncOpKernelDoneCallback* gobn_keep_done(TF_AsyncOpKernelDoneCallback* done) noexcept {
  auto* kept = new (std::nothrow) DoneCallback(std::move(*reinterpret_cast<DoneCallback*>(done)));
  if (kept != nullptr) kept_callbacks.fetch_add(1);
  return reinterpret_cast<TF_AsyncOpKernelDoneCallback*>(kept);
}

// gobn_run_done frees a copy of gobn_keep_done and runs it: freed and
// counted first, since TensorFlow may act on the call's end (and a test
// read the count) as soon as it runs.
void gobn_run_done(TF_AsyncOpKernelDoneCallback* kept) noexcept {
  auto* p = reinterpret_cast<DoneCallback*>(kept);
  DoneCallback done = std::move(*p);
  delete p;
  kept_callbacks.fetch_sub(1);
  TF_RunAsyncOpKernelDoneCallback(reinterpret_cast<TF_AsyncOpKernelDoneCallback*>(&done));
}

long long gobn_kept_callbacks(void) noexcept { return kept_callbacks.load(); }
}
