// The done callback of an asynchronous kernel (GOBN_ASYNC=1, register.c).
//
// TensorFlow 2.21's C API hands compute_async the address of its
// ComputeAsync's own by-value callback (tensorflow/c/kernels.cc), which is
// gone once compute_async returns; its implementation of the opaque
// TF_AsyncOpKernelDoneCallback is a std::function<void()>. So a kernel that
// finishes later keeps a copy, made here before compute_async returns, and
// runs and frees that copy when it is done.

#include <functional>

extern "C" {
// As tensorflow/c/kernels.h declares it (gobn.h includes that header; this
// file, compiled as C++ without TensorFlow's include path, does not).
typedef struct TF_AsyncOpKernelDoneCallback TF_AsyncOpKernelDoneCallback;

TF_AsyncOpKernelDoneCallback* gobn_keep_done(TF_AsyncOpKernelDoneCallback* done) {
  auto* kept = new std::function<void()>(*reinterpret_cast<std::function<void()>*>(done));
  return reinterpret_cast<TF_AsyncOpKernelDoneCallback*>(kept);
}

// What TF_RunAsyncOpKernelDoneCallback does, then the copy is freed.
void gobn_run_done(TF_AsyncOpKernelDoneCallback* kept) {
  auto* f = reinterpret_cast<std::function<void()>*>(kept);
  (*f)();
  delete f;
}
}
