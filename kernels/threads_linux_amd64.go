package kernels

// sysGetcpu is getcpu(2)'s number, which package syscall leaves out on amd64.
const sysGetcpu = 309
