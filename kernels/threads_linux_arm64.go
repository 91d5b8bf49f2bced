package kernels

import "syscall"

const sysGetcpu = syscall.SYS_GETCPU
