//go:build cuda

package cuda

import (
	"bytes"
	"debug/elf"
	"encoding/binary"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestFatbinHoldsTheTable checks that each cubin of the embedded fatbin
// defines exactly the kernels of the table (Kernels), which this package
// numbers and launches by name.
func TestFatbinHoldsTheTable(t *testing.T) {
	const (
		magic    = 0xBA55ED50
		kindELF  = 2
		stoEntry = 0x10 // STO_CUDA_ENTRY: a kernel
	)
	le := binary.LittleEndian
	require.Equal(t, uint32(magic), le.Uint32(fatbin))
	off, end := int(le.Uint16(fatbin[6:])), len(fatbin)
	require.Equal(t, end, off+int(le.Uint64(fatbin[8:])))
	cubins := 0
	for off < end {
		// Each entry: kind (2 bytes), version (2), header size (4), payload
		// size (8), ...; its payload follows its header.
		kind, header, size := le.Uint16(fatbin[off:]), int(le.Uint32(fatbin[off+4:])), int(le.Uint64(fatbin[off+8:]))
		payload := fatbin[off+header : off+header+size]
		off += header + size
		if kind != kindELF {
			continue
		}
		cubins++
		// A cubin's ELF version fields carry CUDA's ABI version, which
		// debug/elf refuses: read it as version 1 (EV_CURRENT).
		cubin := bytes.Clone(payload)
		cubin[elf.EI_VERSION] = byte(elf.EV_CURRENT)
		le.PutUint32(cubin[20:], uint32(elf.EV_CURRENT)) // e_version
		f, err := elf.NewFile(bytes.NewReader(cubin))
		require.NoError(t, err)
		syms, err := f.Symbols()
		require.NoError(t, err)
		var entries []string
		for _, s := range syms {
			if elf.ST_TYPE(s.Info) == elf.STT_FUNC && s.Other&stoEntry != 0 {
				entries = append(entries, s.Name)
			}
		}
		require.ElementsMatch(t, kernelNames(), entries, "cubin %d", cubins)
	}
	require.Positive(t, cubins)
}
