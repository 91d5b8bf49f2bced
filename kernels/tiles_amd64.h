// The float32 sums of the AVX-512 channels-last tiles (tile_amd64.s,
// mask_amd64.s): eight sums in Z0-Z7 over 16 rows at most, added into
// float64 sums in memory; and the constants of FusedBatchNormGradEx's
// masked loops (MASK_CONSTANTS, below).

// FOLD(z, y, p, off) adds the sixteen float32 sums z (y its low half) into
// the float64 sums at off(p), Y20 and Z21-Z22 temporaries.
#define FOLD(z, y, p, off) \
	VEXTRACTF32X8 $1, z, Y20; \
	VCVTPS2PD     y, Z21; \
	VADDPD        off(p), Z21, Z21; \
	VMOVUPD       Z21, off(p); \
	VCVTPS2PD     Y20, Z22; \
	VADDPD        off+64(p), Z22, Z22; \
	VMOVUPD       Z22, off+64(p)

// FOLD_TILE adds a tile's eight sums, Σdy of 64 channels in Z0-Z3 and
// Σdy·(x−mean) in Z4-Z7, into the float64 sums at R8 and R9.
#define FOLD_TILE \
	FOLD(Z0, Y0, R8, 0); \
	FOLD(Z1, Y1, R8, 128); \
	FOLD(Z2, Y2, R8, 256); \
	FOLD(Z3, Y3, R8, 384); \
	FOLD(Z4, Y4, R9, 0); \
	FOLD(Z5, Y5, R9, 128); \
	FOLD(Z6, Y6, R9, 256); \
	FOLD(Z7, Y7, R9, 384)

// FOLD_START takes the next min(CX, 16) rows into BX, out of CX, and clears
// the eight sums Z0-Z7.
#define FOLD_START \
	MOVQ    $16, BX; \
	CMPQ    CX, BX; \
	CMOVQLT CX, BX; \
	SUBQ    BX, CX; \
	VXORPS  Z0, Z0, Z0; \
	VXORPS  Z1, Z1, Z1; \
	VXORPS  Z2, Z2, Z2; \
	VXORPS  Z3, Z3, Z3; \
	VXORPS  Z4, Z4, Z4; \
	VXORPS  Z5, Z5, Z5; \
	VXORPS  Z6, Z6, Z6; \
	VXORPS  Z7, Z7, Z7

// MASK_CONSTANTS sets what FusedBatchNormGradEx's masked loops compare y
// with and form m from (mask_amd64.s, planes_amd64.s): 0 in Z24, 6 in Z25
// and 1 in Z26.
#define MASK_CONSTANTS \
	VXORPS       Z24, Z24, Z24; \
	MOVL         $0x40c00000, AX; \
	VPBROADCASTD AX, Z25; \
	MOVL         $0x3f800000, AX; \
	VPBROADCASTD AX, Z26
