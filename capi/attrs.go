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

func (a constructionAttrs) float(name string) (float32, error) {
	cname := C.CString(name)
	defer C.free(unsafe.Pointer(cname))
	var v C.float
	C.TF_OpKernelConstruction_GetAttrFloat(a.ctx, cname, &v, a.status)
	return float32(v), statusError(a.status)
}

func (a constructionAttrs) int(name string) (int64, error) {
	cname := C.CString(name)
	defer C.free(unsafe.Pointer(cname))
	var v C.int64_t
	C.TF_OpKernelConstruction_GetAttrInt64(a.ctx, cname, &v, a.status)
	return int64(v), statusError(a.status)
}

func (a constructionAttrs) bool(name string) (bool, error) {
	cname := C.CString(name)
	defer C.free(unsafe.Pointer(cname))
	var v C.TF_Bool
	C.TF_OpKernelConstruction_GetAttrBool(a.ctx, cname, &v, a.status)
	return v != 0, statusError(a.status)
}

func (a constructionAttrs) dtype(name string) (opdef.DType, error) {
	cname := C.CString(name)
	defer C.free(unsafe.Pointer(cname))
	var v C.TF_DataType
	C.TF_OpKernelConstruction_GetAttrType(a.ctx, cname, &v, a.status)
	return opdef.DType(v), statusError(a.status)
}

func (a constructionAttrs) string(name string) (string, error) {
	cname := C.CString(name)
	defer C.free(unsafe.Pointer(cname))
	var listSize, totalSize C.int32_t
	C.TF_OpKernelConstruction_GetAttrSize(a.ctx, cname, &listSize, &totalSize, a.status)
	if err := statusError(a.status); err != nil {
		return "", err
	}
	buf := make([]byte, int(totalSize)+1)
	C.TF_OpKernelConstruction_GetAttrString(a.ctx, cname, (*C.char)(unsafe.Pointer(&buf[0])), C.size_t(len(buf)), a.status)
	if err := statusError(a.status); err != nil {
		return "", err
	}
	return string(buf[:totalSize]), nil
}
