// One copy of gobn per process.
//
// Two copies of libgobn.so from different files (an installed wheel's and a
// checkout's build, say) would register every op and kernel twice: TensorFlow
// aborts the process on an op registered twice outside tf.load_op_library,
// and a kernel registered twice fails every call of its op ("Multiple
// OpKernel registrations match"). Files that are the same file (a link, a
// second path) are one copy already: the dynamic loader maps a file once.
//
// The library is linked with the soname GOBN_SONAME (the Makefile), so the loader
// finds a copy mapped before this one by that name, whatever its file
// (dlopen with RTLD_NOLOAD); gobn_copy_marker tells that copy from this one.
// A second copy registers nothing but an op definition that fails to parse,
// so that tf.load_op_library (and tf.LoadLibrary in Go) raises an error that
// names both files, and the first copy's ops and kernels keep working. The
// Python package looks for the loaded copy the same way before it loads one.
//
// TensorFlow reports every failed op definition inside a sentence of its own
// ("Trouble parsing ... from Attr(...) for Op ...", "Invalid name: ...",
// "Op with name ..."): the C API has no way to fail a registration with a
// library's message alone. So the refusal is one attr spec, which TensorFlow
// quotes whole, and the Python package, once imported, raises that sentence
// alone from tf.load_op_library (gobn._library.unwrap_second_copy_refusal).

#define _GNU_SOURCE
#include <dlfcn.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>

#include "gobn.h"

// A data object rather than a function, so that no compiler folds it with
// another: its address is this copy's own (the library is linked
// -Bsymbolic, so this copy's references bind to it).
const char gobn_copy_marker[] = GOBN_SONAME;

// This copy's file, resolved to an absolute path while the library loads
// (the working directory may change later), or "" if the loader cannot tell.
static char this_file[PATH_MAX];

const char* gobn_library_file(void) { return this_file; }

const char* gobn_other_copy(void) {
  Dl_info info;
  if (dladdr(gobn_copy_marker, &info) != 0 && info.dli_fname != NULL &&
      realpath(info.dli_fname, this_file) == NULL) {
    snprintf(this_file, sizeof this_file, "%s", info.dli_fname);
  }
  void* handle = dlopen(GOBN_SONAME, RTLD_LAZY | RTLD_NOLOAD);
  if (handle == NULL) return NULL;
  const char* file = NULL;
  const void* marker = dlsym(handle, "gobn_copy_marker");
  const char* (*other_file)(void) = (const char* (*)(void))dlsym(handle, "gobn_library_file");
  if (marker != NULL && marker != gobn_copy_marker) {
    // Copies of gobn are never unloaded (Go links c-shared libraries
    // -z nodelete), so the other's file name stays valid after dlclose.
    file = other_file != NULL ? other_file() : "another file";
  }
  dlclose(handle);
  return file;
}

void gobn_refuse_second_copy(const char* first) {
  char spec[2048];
  snprintf(spec, sizeof spec,
           "[gobn] libgobn.so is loaded already, from %s; this process cannot load a second copy, from %s: "
           "use the first (gobn.ops, or the module tf.load_op_library returned for it)",
           first[0] != '\0' ? first : "another file", this_file[0] != '\0' ? this_file : "another file");
  TF_OpDefinitionBuilder* builder = TF_NewOpDefinitionBuilder("Gobn>SecondCopy");
  // Not an attr spec: the op fails to register, with spec quoted in its
  // message (the Python package finds it there by this op's name).
  TF_OpDefinitionBuilderAddAttr(builder, spec);
  TF_Status* status = TF_NewStatus();
  TF_RegisterOpDefinition(builder, status);  // takes the builder
  TF_DeleteStatus(status);
}
