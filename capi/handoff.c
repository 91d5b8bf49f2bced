// Kernel calls handed to Go's own threads (GOBN_HANDOFF=1, handoff.go).
//
// A TensorFlow thread that calls into Go through a cgo callback leaves its
// P, Go's token to run Go code, in the "system call" state when it returns;
// Go's monitor thread (sysmon) then takes it back, and polls every 20 us for
// a millisecond after each such retake and each callback that wakes it
// (docs/performance.md). Here the TensorFlow thread does every call of
// TensorFlow's C API itself, and hands Go a job that Go reads and writes in
// memory alone: Go's side never calls C, nor makes a system call that Go's
// scheduler sees, so a TensorFlow thread never holds a P and sysmon stays
// asleep between calls.

#define _GNU_SOURCE
#include <errno.h>
#include <linux/futex.h>
#include <sched.h>
#include <stdint.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "gobn.h"

gobn_job_queue gobn_jobs;
int gobn_handoff_fd = -1;

static void lock_jobs(void) {
  while (__atomic_exchange_n(&gobn_jobs.lock, 1, __ATOMIC_ACQUIRE)) sched_yield();
}

static void unlock_jobs(void) { __atomic_store_n(&gobn_jobs.lock, 0, __ATOMIC_RELEASE); }

// run queues job, counts it on fd and returns once Go is done with it.
static void run(gobn_job* job, int fd) {
  lock_jobs();
  if (gobn_jobs.tail != NULL) {
    gobn_jobs.tail->next = job;
  } else {
    gobn_jobs.head = job;
  }
  gobn_jobs.tail = job;
  unlock_jobs();
  const uint64_t one = 1;
  while (write(fd, &one, sizeof one) < 0 && errno == EINTR) {
  }
  while (__atomic_load_n(&job->state, __ATOMIC_ACQUIRE) == 0) {
    syscall(SYS_futex, &job->state, FUTEX_WAIT_PRIVATE, 0, NULL, NULL, 0);
  }
  while (__atomic_load_n(&job->state, __ATOMIC_ACQUIRE) != 2) sched_yield();
}

static int64_t elements(const int64_t* dims, int n) {
  int64_t e = 1;
  for (int i = 0; i < n; i++) e *= dims[i];
  return e;
}

int gobn_handoff(const gobn_kernel* k, TF_OpKernelContext* ctx) {
  const int fd = __atomic_load_n(&gobn_handoff_fd, __ATOMIC_ACQUIRE);
  if (fd < 0) return 0;
  gobn_job job;
  job.next = NULL;
  job.kernel = k->handle;
  job.num_outputs = k->num_outputs;
  job.cpu = sched_getcpu();
  job.state = 0;
  job.code = TF_OK;
  job.message[0] = '\0';
  TF_Tensor* held[GOBN_MAX_INPUTS + GOBN_MAX_OUTPUTS];  // the inputs, then the outputs
  int fetched = 0;
  TF_Status* status = TF_NewStatus();
  TF_Code code = gobn_inputs(ctx, job.in, GOBN_MAX_INPUTS, &job.num_inputs, &fetched, status);
  int taken = code != TF_OK || job.num_inputs <= GOBN_MAX_INPUTS;
  for (int i = 0; i < fetched; i++) {
    held[i] = job.in[i].tensor;
    if (job.in[i].ndims > GOBN_INLINE_DIMS) taken = 0;
  }
  int n = fetched;
  // The outputs as the kernel allocates them once it has validated the
  // inputs; the Go side validates them here before it writes any (a call
  // that fails leaves them unwritten, which TensorFlow discards).
  for (int i = 0; taken && code == TF_OK && i < k->num_outputs; i++) {
    const gobn_output_spec* s = &k->outputs[i];
    static const int64_t empty_vector[1] = {0};
    const int64_t* dims = empty_vector;
    int ndims = 1;
    if (s->dims >= 0) {
      dims = job.in[s->dims].dims;
      ndims = job.in[s->dims].ndims;
    } else if (s->dims == GOBN_SCALAR) {
      dims = NULL;
      ndims = 0;
    }
    if (s->reuse != 0) {
      code = gobn_forward_or_allocate(ctx, i, held, s->reuse, dims, ndims, &job.out[i], status);
    } else {
      code = gobn_allocate(ctx, i, (TF_DataType)s->dtype, dims, ndims,
                           (size_t)elements(dims, ndims) * TF_DataTypeSize((TF_DataType)s->dtype), &job.out[i], status);
    }
    if (code == TF_OK) held[n++] = job.out[i].tensor;
  }
  if (taken && code == TF_OK) {
    run(&job, fd);
    code = (TF_Code)job.code;
    if (code != TF_OK) TF_SetStatus(status, code, job.message);
  }
  if (taken && code != TF_OK) TF_OpKernelContext_Failure(ctx, status);
  gobn_delete_tensors(held, n);
  TF_DeleteStatus(status);
  return taken;
}
