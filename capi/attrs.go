package main

// #include <stdlib.h>
// #include "gobn.h"
import "C"

import (
	"unsafe"

	"github.com/gobn/gobn/opdef"
)

// constructionAttrs reads the attrs of a kernel being constructed.
type constructionAttrs struct {
	ctx    *C.TF_OpKernelConstruction
	status *C.TF_Status
}

// get runs read on the attr called name, as a C string, and returns the
// error TensorFlow set in the status.
func (a constructionAttrs) get(name string, read func(cname *C.char)) error {
	cname := C.CString(name)
	defer C.free(unsafe.Pointer(cname))
	read(cname)
	return statusError(a.status)
}

func (a constructionAttrs) float(name string) (float32, error) {
	var v C.float
	err := a.get(name, func(n *C.char) { C.TF_OpKernelConstruction_GetAttrFloat(a.ctx, n, &v, a.status) })
	return float32(v), err
}

func (a constructionAttrs) int(name string) (int64, error) {
	var v C.int64_t
	err := a.get(name, func(n *C.char) { C.TF_OpKernelConstruction_GetAttrInt64(a.ctx, n, &v, a.status) })
	return int64(v), err
}

func (a constructionAttrs) bool(name string) (bool, error) {
	var v C.TF_Bool
	err := a.get(name, func(n *C.char) { C.TF_OpKernelConstruction_GetAttrBool(a.ctx, n, &v, a.status) })
	return v != 0, err
}

func (a constructionAttrs) dtype(name string) (opdef.DType, error) {
	var v C.TF_DataType
	err := a.get(name, func(n *C.char) { C.TF_OpKernelConstruction_GetAttrType(a.ctx, n, &v, a.status) })
	return opdef.DType(v), err
}

func (a constructionAttrs) string(name string) (string, error) {
	var listSize, totalSize C.int32_t
	err := a.get(name, func(n *C.char) {
		C.TF_OpKernelConstruction_GetAttrSize(a.ctx, n, &listSize, &totalSize, a.status)
	})
	if err != nil {
		return "", err
	}
	buf := make([]byte, int(totalSize)+1)
	err = a.get(name, func(n *C.char) {
		C.TF_OpKernelConstruction_GetAttrString(a.ctx, n, (*C.char)(unsafe.Pointer(&buf[0])), C.size_t(len(buf)), a.status)
	})
	return string(buf[:totalSize]), err
}
