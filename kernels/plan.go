package kernels

import (
	"fmt"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// A call is planned before it touches its tensors: planFor decides its form,
// how its work is cut and on how many workers it runs, from the call's shape
// and element type, the machine (cores and caches) and the tuning, and the
// entry points then run that plan. The plan splits into two parts:
//
//   - the arithmetic (Form, Period, Chunks, Align, SumsBlock): where the
//     partial sums start and end, so the bits of the result. It depends on
//     the shape, the element type and the tuning's switches alone: never on
//     the cores, the caches, nor how many workers run, so a result is the
//     same on 2 cores as on 128 (the vector width, AVX2 or AVX-512, still
//     changes the order of some sums);
//   - the machine's part (Workers, Units, Folds, Stream, Affine, Wake): who
//     runs the chunks and adds up their sums, and how x_backprop is stored,
//     which leaves the bits alone. By-channel units may follow the cores
//     because each channel's sums run whole planes in one order whatever
//     the unit (bychannel.go); folds, because each channel's sum adds the
//     chunks in chunk order whatever the fold's ranges.

// Machine is what a plan knows of the computer it runs on.
type Machine struct {
	// Cores is how many CPUs the process may use at once: those its
	// affinity mask allows, fewer where a cgroup's CPU quota allows fewer.
	Cores int
	// L2 is one core's L2 cache and L3 one last-level cache, in bytes;
	// L3Cores is how many CPUs share that L3.
	L2, L3, L3Cores int
}

// maxL3PerCore bounds the last-level cache a plan counts on per CPU that
// shares it. A virtual machine may report its host's whole cache, which it
// shares with the host's other guests: the 2-core Xeon VM of the records
// reports 480 MiB (an earlier one 260) for its two CPUs. There, in chains
// of calls inside TensorFlow, each call's x_backprop the next one's
// y_backprop as in a network's backward pass, x_backprops of 8.4 to 33.5
// MB took 0.70-0.98 of the time through the caches that they took
// streamed, and those of 51 and 77 MB 1.02-1.17 times as long: a quarter
// of 2·80 MiB, 40 MiB, falls between (streamFrom). At 16 MiB a CPU, as
// before, x_backprop streamed from 8 MiB on, as BenchmarkTrainingGradOutput
// had chosen Go alone, where nothing reads x_backprop after the call.
const maxL3PerCore = 80 << 20

// lastLevel returns the last-level cache the plan counts on, in bytes: the
// tuning's where it sets one, else the machine's, bounded by maxL3PerCore a
// CPU sharing it (an L2 where the machine reports no L3).
func lastLevel(m Machine, t Tuning) int {
	if t.L3 > 0 {
		return t.L3
	}
	if m.L3 <= 0 {
		return max(m.L2, 1<<20)
	}
	return min(m.L3, max(1, m.L3Cores)*maxL3PerCore)
}

// Tuning holds the plan's constants that were measured rather than derived,
// and switches for tests and benchmarks. DefaultTuning has the defaults;
// SetTuning replaces them for the process (capi reads GOBN_CPU_PLAN when the
// library loads and exports a setter, for benchmarking:
// bench/manycore.py sweeps them on a many-core machine).
type Tuning struct {
	// PerWorker, where positive, is the least number of float32 elements a
	// worker takes (half as many Half or BFloat16 ones, whose conversions
	// make them compute-bound): a call of n elements runs on at most
	// n/PerWorker workers, on the calling thread alone below twice that.
	// Zero (the default) takes it from the cores: perWorkerFor.
	PerWorker int
	// Workers caps a call's workers, the calling thread included; 0 leaves
	// the cores the process may use. A cap leaves cores to TensorFlow's own
	// threads in a step.
	Workers int
	// Wake is how many helper threads a call wakes itself, each woken one
	// then waking as many more (a tree); 0 has the call wake them all.
	Wake int
	// L3 replaces the machine's last-level cache, in bytes, where positive.
	L3 int
	// StreamBytes is, where positive, the least size of a float32
	// x_backprop with a buffer of its own that is written with
	// non-temporal stores; 0 leaves a quarter of the last-level cache (see
	// streamFrom).
	StreamBytes int
	// ByChannel runs channels-first training and inference gradients by
	// channel units (bychannel.go); Affine runs each range of a two-pass gradient's second
	// pass on the worker that summed it (pass.affine).
	ByChannel, Affine bool
	// MaxChunks, where positive, lowers maxChunks. Like ByChannel it
	// changes where partial sums start and end, so the bits: it is for
	// measuring what many chunks cost a large tensor.
	MaxChunks int
	// ChunkGrain, where positive, replaces chunkGrain (float32 elements;
	// half as many Half or BFloat16). Like MaxChunks it moves where partial
	// sums start and end, so the bits: it is for measuring how finely a
	// many-core machine's workers should share a gradient. It leaves alone
	// which gradients run by channel. A chunk is still whole blocks of the
	// pass that sums (Plan.Align: of a channels-last tensor, the whole rows
	// in 16384 elements, one at least), so a grain below a block cuts no
	// finer.
	ChunkGrain int
	// Spin is how long, in microseconds, a pinned helper thread polls for
	// its next task after a task of a call in a burst, before it sleeps on
	// its futex (threads_linux.go), and the gap between calls that makes
	// them a burst (inBurst): a call that finds its helpers polling hands
	// them their shares without waking them, which takes tens of
	// microseconds, at the cost of the time polled away from TensorFlow's
	// own threads on those cores; a call in a burst splits finer
	// (perWorkerFor) for its helpers will poll. 0 turns both off, and
	// SetTuning caps it at maxSpin.
	Spin int
	// MaxFolds, where positive, caps Plan.Folds: 1 adds up the chunks'
	// sums on the calling goroutine alone, while the helpers wait (as
	// every call of one range does). It leaves the bits alone; it is for
	// measuring what the fold's ranges save a call of many chunks of wide
	// rows.
	MaxFolds int
	// UnitElems, where positive, replaces unitElems (float32 elements;
	// half as many Half or BFloat16): the most elements of a by-channel
	// unit. It leaves the bits alone (each channel's sums run whole planes
	// in one order whatever the unit); it is for measuring the size on
	// another machine's caches.
	UnitElems int
}

// maxSpin caps Tuning.Spin: 10 ms, a TensorFlow op's time many times over,
// so that a mistyped setting cannot keep every helper thread polling.
const maxSpin = 10_000

// DefaultTuning returns the tuning a process starts with.
func DefaultTuning() Tuning {
	return Tuning{ByChannel: true, Affine: true, Spin: defaultSpin}
}

// defaultSpin is Tuning.Spin's default, in microseconds: longer than
// TensorFlow takes between two ops of a graph (a few microseconds) or to
// call a tf.function again from Python (tens), far shorter than a
// convolution's gradient between two batch norms of a training step.
// Chosen by make bench-torch's chains and make bench-models' steps.
const defaultSpin = 100

// perWorkerFor returns the least float32 elements a worker takes on a
// machine of the given cores, with polling helper threads polling for a
// task, in a call of two passes (passes: its sums, their fold, then its
// x_backprop) or of one. The cost model: a call of T on one worker takes
// about T/w + d + b on w, d the time its helpers take to start (the calling
// thread works from the start, and claims what late helpers leave) and b
// what its passes' ends cost (each waits for the last worker's last range),
// so helpers pay where T > w·(d + b). A helper asleep must be woken: d is
// some tens of microseconds on a virtual machine's idle CPU (more on a busy
// one), and the caller pays the system call that wakes it; so on few cores
// a worker takes 2^19/cores elements, from 2^16 to 2^18, shares of a
// hundred microseconds or more. A helper that polls starts within a
// microsecond: a call of one pass (by channel units, a sweep) pays from
// shares of 2^16 elements (a chunk, chunkGrain), one of two passes from
// 2^17, its three ends costing more. Both ends were measured on chains of
// FusedBatchNormGradV3 in one tf.function: asleep, 2 cores by make bench's
// oneDNN table and 16 by bench/manycore.py's sweep (bench/manycore.json;
// docs/performance.md, "The plan"); polling, 2 cores by make bench-torch's
// cases, plans alternated chain by chain in one process (NHWC 8x7x7x512 and
// 16x7x7x320, of 2^17 to 2^18 elements, ran no faster on two workers than
// on one; NCHW 8x512x7x7 by channel took 0.78 of one's time). Go alone,
// once each worker took the same block of a chain's tensors call after
// call (claims.workHome), two workers paid from 3·2^16 elements in two
// passes (BenchmarkWorkers: 0.71-0.85 of one's time on NHWC 8x7x7x512 and
// 16x7x7x320); inside TensorFlow, beside its own threads, the same two
// cases took 1.27 and 1.23 times one worker's time (make bench-torch's
// chains, the two plans' libraries alternated, best of two runs each,
// while PyTorch against itself moved 0.6-1.6x), so two passes keep 2^17.
func perWorkerFor(cores, polling int, passes bool) int {
	if polling > 0 {
		if passes {
			return 1 << 17
		}
		return 1 << 16
	}
	return max(1<<16, min(1<<18, (1<<19)/max(1, cores)))
}

var tuning atomic.Pointer[Tuning]

func init() {
	t := DefaultTuning()
	tuning.Store(&t)
}

// CurrentTuning returns the tuning the kernels plan with.
func CurrentTuning() Tuning { return *tuning.Load() }

// SetTuning replaces the tuning and returns the previous one. It is for
// tests and benchmarks; every call plans with the tuning of its start.
func SetTuning(t Tuning) Tuning {
	t.PerWorker = max(0, t.PerWorker)
	t.Workers, t.Wake, t.L3, t.StreamBytes = max(0, t.Workers), max(0, t.Wake), max(0, t.L3), max(0, t.StreamBytes)
	t.MaxChunks, t.MaxFolds, t.ChunkGrain = max(0, t.MaxChunks), max(0, t.MaxFolds), max(0, t.ChunkGrain)
	t.UnitElems = max(0, t.UnitElems)
	t.Spin = min(max(0, t.Spin), maxSpin)
	return *tuning.Swap(&t)
}

// setTuningField sets the field of the tuning that field finds to v and
// returns its previous value: the Set functions of tests and benchmarks.
func setTuningField[V any](field func(*Tuning) *V, v V) V {
	t := CurrentTuning()
	*field(&t) = v
	prev := SetTuning(t)
	return *field(&prev)
}

// tuningFields name Tuning's fields in ParseTuning's and String's spec.
var tuningFields = map[string]func(t *Tuning) any{
	"per_worker":   func(t *Tuning) any { return &t.PerWorker },
	"workers":      func(t *Tuning) any { return &t.Workers },
	"wake":         func(t *Tuning) any { return &t.Wake },
	"l3":           func(t *Tuning) any { return &t.L3 },
	"stream_bytes": func(t *Tuning) any { return &t.StreamBytes },
	"by_channel":   func(t *Tuning) any { return &t.ByChannel },
	"affine":       func(t *Tuning) any { return &t.Affine },
	"max_chunks":   func(t *Tuning) any { return &t.MaxChunks },
	"chunk_grain":  func(t *Tuning) any { return &t.ChunkGrain },
	"max_folds":    func(t *Tuning) any { return &t.MaxFolds },
	"spin":         func(t *Tuning) any { return &t.Spin },
	"unit_elems":   func(t *Tuning) any { return &t.UnitElems },
}

// ParseTuning returns base with the fields that spec sets: comma-separated
// name=value pairs, names as String writes them (per_worker, workers, wake,
// l3, stream_bytes, max_chunks, chunk_grain, max_folds, spin, unit_elems: non-negative
// integers, 0 the default, which per_worker takes from the cores;
// by_channel, affine: 0 or 1). An empty spec returns base.
func ParseTuning(spec string, base Tuning) (Tuning, error) {
	t := base
	for _, pair := range strings.Split(spec, ",") {
		pair = strings.TrimSpace(pair)
		if pair == "" {
			continue
		}
		name, value, ok := strings.Cut(pair, "=")
		name = strings.TrimSpace(name)
		field, known := tuningFields[name]
		if !ok || !known {
			return base, fmt.Errorf("gobn: CPU plan setting %q: want name=value, name one of %s", pair, tuningNames())
		}
		value = strings.TrimSpace(value)
		switch p := field(&t).(type) {
		case *int:
			v, err := strconv.Atoi(value)
			if err != nil || v < 0 {
				return base, fmt.Errorf("gobn: CPU plan setting %q: want a non-negative integer", pair)
			}
			*p = int(v)
		case *bool:
			if value != "0" && value != "1" {
				return base, fmt.Errorf("gobn: CPU plan setting %q: want 0 or 1", pair)
			}
			*p = value == "1"
		}
	}
	return t, nil
}

func tuningNames() string {
	names := make([]string, 0, len(tuningFields))
	for n := range tuningFields {
		names = append(names, n)
	}
	sort.Strings(names)
	return strings.Join(names, ", ")
}

// String writes t as ParseTuning reads it, fields in name order.
func (t Tuning) String() string {
	names := strings.Split(tuningNames(), ", ")
	parts := make([]string, len(names))
	for i, n := range names {
		switch p := tuningFields[n](&t).(type) {
		case *int:
			parts[i] = fmt.Sprintf("%s=%d", n, *p)
		case *bool:
			b := 0
			if *p {
				b = 1
			}
			parts[i] = fmt.Sprintf("%s=%d", n, b)
		}
	}
	return strings.Join(parts, ",")
}

// machineNow is the machine the kernels plan for: probed once (probeMachine,
// machine_*.go), or set by the tests.
var machineNow struct {
	once sync.Once
	m    atomic.Pointer[Machine]
}

// CurrentMachine returns the machine the kernels plan for.
func CurrentMachine() Machine {
	machineNow.once.Do(func() {
		m := probeMachine()
		machineNow.m.CompareAndSwap(nil, &m)
	})
	return *machineNow.m.Load()
}

// setMachine has the kernels plan for m and returns the machine they
// planned for before (tests).
func setMachine(m Machine) Machine {
	prev := CurrentMachine()
	machineNow.m.Store(&m)
	return prev
}

// Form is how a call runs.
type Form uint8

const (
	// FormPasses sums the chunks, forms the coefficients, then writes
	// x_backprop chunk by chunk (training; inference over wide rows beyond
	// the tiles).
	FormPasses Form = iota
	// FormByChannel runs a channels-first gradient by units of whole
	// channels (bychannel.go): training, and inference's sweep.
	FormByChannel
	// FormSweep sums and writes a scale-only x_backprop in one pass (sweep).
	FormSweep
	// FormSums only sums (GradReduce); FormApply only writes x_backprop
	// from given sums (GradApply).
	FormSums
	FormApply
)

func (f Form) String() string {
	return [...]string{"passes", "by-channel", "sweep", "sums", "apply"}[f]
}

// job is what a call computes, as the entry points ask for it.
type job uint8

const (
	jobTraining job = iota // FusedBatchNormGrad training
	jobSweep               // inference and global normalization: x_backprop scale-only
	jobReduce              // GradReduce
	jobApply               // GradApply
)

// call is what planFor knows of one call.
type call struct {
	dims Dims
	job  job
	// size is the element's bytes; half marks Half and BFloat16.
	size int
	half bool
	// ownAligned: x_backprop is float32 with a buffer of its own, 32-byte
	// aligned, and the vector loops that stream are there (streams).
	ownAligned bool
	// polling is how many helper threads poll for a task as the call
	// starts (helpersPolling): they start at once, where a sleeping one
	// starts tens of microseconds after its wake (perWorkerFor). burst: the
	// call starts within Tuning.Spin of the last call's end (inBurst), so
	// that its helpers, woken now if they sleep, will poll for the next.
	polling int
	burst   bool
}

// Plan is how one call runs.
type Plan struct {
	Form Form
	// Period is the dims the loops run over, and L its channel count
	// (Dims.periodic).
	Period Dims
	L      int
	// Elements is the tensor's element count.
	Elements int
	// Chunks ranges cut the tensor for FormPasses, FormSweep, FormSums and
	// FormApply: its blocks of Align elements (whole rows of the period, and
	// blocks of the pass that sums), shared out as evenly as whole blocks
	// allow (Chunk). Each chunk's sums are its own, added up in chunk order.
	Chunks, Align int
	// SumsBlock is the block of the sums pass (of FormSweep's fused pass;
	// of a by-channel unit's plane pieces), ApplyBlock that of the
	// x_backprop pass.
	SumsBlock, ApplyBlock int
	// Units of UnitChannels channels (the last fewer) for FormByChannel.
	Units, UnitChannels int
	// Folds is how many ranges of channels the chunks' partial sums are
	// added up in, side by side: each channel's sums still add the chunks
	// in chunk order, whatever the ranges (sumsPass.foldRange).
	Folds int
	// Workers is the most goroutines that run the call, the calling one
	// included; Cores the most the process's helpers may use together.
	Workers, Cores int
	// Stream: x_backprop written with non-temporal stores. Affine: each
	// chunk of FormPasses' second pass on the worker that summed it. Wake:
	// Tuning.Wake. Burst: the call came in a burst (call.burst), and its
	// helpers poll for the next call's tasks after theirs.
	Stream, Affine, Burst bool
	Wake                  int
}

// Chunk returns chunk r's elements, [lo, hi).
func (p Plan) Chunk(r int) (lo, hi int) { return span(p.Elements, p.Chunks, p.Align, r) }

// span returns range r of ranges that cut n elements in blocks of align
// elements (the last block shorter): the ⌈n/align⌉ blocks shared out as
// evenly as whole blocks allow, r·blocks/ranges of them before range r.
func span(n, ranges, align, r int) (lo, hi int) {
	blocks := (n + align - 1) / align
	return min(n, r*blocks/ranges*align), min(n, (r+1)*blocks/ranges*align)
}

// The plan's constants, each measured where it says.
const (
	// chunkGrain is the least float32 elements of a chunk (half as many of
	// Half or BFloat16), and maxChunks the most chunks: a chunk is what a
	// worker claims at a time. Chunks far smaller than PerWorker let up to
	// 64 workers share a gradient of a few million elements evenly, and
	// cost little besides: their partial sums, 2·L float64 a chunk, added
	// up once per call (in ranges, Plan.Folds). From 8 cores on PerWorker
	// is 2^16 too, so a gradient of a few chunks has about one a worker,
	// which helpers that start late share unevenly: Tuning.ChunkGrain
	// measures finer ones there (bench/manycore.py's sweep).
	chunkGrain = 1 << 16
	maxChunks  = 1024
	// minChunkRows: a chunk has at least this many times L elements (L the
	// period's channels, C channels first), so that its partial sums, 2·L
	// float64 added up one after the other between the passes (four at a
	// time, addVector), are an 8th of its elements at most.
	minChunkRows = 16
	// unitElems bounds the float32 elements of a by-channel unit (half as
	// many of Half or BFloat16), which unitFor takes from the core's L2.
	// Units are also at most a quarter of the last-level cache's share of
	// one CPU in bytes of one tensor, so that as many units as workers stay
	// there together.
	unitElems = 1 << 18
	// unitsPerWorker: units enough that a worker whose helpers start late
	// is not left with a share it must run alone.
	unitsPerWorker = 2
	// foldGrain is the least float64 additions of a fold's range, and
	// foldAlign the channels its ranges start on (an AVX-512 vector of
	// float64). The fold adds 2·L float64 a chunk: 2·50·2048 for NHWC
	// 32x7x7x2048, whose fifty chunks' sums took 50 µs to add up on one
	// thread (from its own caches), while sixteen workers wait. A range of
	// foldGrain reads 64 KiB of partial sums, microseconds beside a claim's
	// fraction of one.
	foldGrain = 1 << 13
	foldAlign = 8
)

// planFor plans c on machine m with tuning t. It is a pure function.
func planFor(c call, m Machine, t Tuning) Plan {
	d := c.dims
	n := d.Len()
	pd, L := d.periodic()
	cores := max(1, m.Cores)
	if t.Workers > 0 {
		cores = min(cores, t.Workers)
	}
	p := Plan{Period: pd, L: L, Elements: n, Workers: 1, Folds: 1, Cores: cores, Wake: t.Wake, Burst: c.burst}
	grain, unit := chunkGrain, unitFor(m)
	if t.UnitElems > 0 {
		unit = t.UnitElems
	}
	if c.half {
		grain, unit = grain/2, unit/2
	}
	grain = max(grain, minChunkRows*L)
	bytes := n * c.size
	cl := d.Layout == ChannelsLast
	switch c.job {
	case jobTraining:
		p.Form = FormPasses
		if t.ByChannel && !cl && byChannelShape(d, n/grain) {
			p.Form = FormByChannel
		}
	case jobSweep:
		p.Form = FormSweep
		if cl && d.C >= splitRowC && bytes > maxTiledBytes {
			p.Form = FormPasses // faster there although it reads dy twice (sweep)
		}
		if t.ByChannel && !cl && byChannelShape(d, n/grain) {
			p.Form = FormByChannel // each channel's planes summed in lanes (sweepByChannel)
		}
	case jobReduce:
		p.Form = FormSums
	case jobApply:
		p.Form = FormApply
	}
	if n == 0 {
		return p
	}
	per := t.PerWorker
	if per <= 0 {
		polling := c.polling
		if c.burst {
			polling = max(polling, 1) // what it wakes now polls for the next call
		}
		per = perWorkerFor(cores, polling, p.Form == FormPasses)
	}
	if c.half {
		per = max(1, per/2)
	}

	// The arithmetic: the sums' blocks, and chunks of whole blocks.
	switch p.Form {
	case FormSweep:
		limit := tiledBlock(bytes, fusedBlockLen)
		if cl && d.C >= splitRowC {
			limit = wideSweepBlockLen
		}
		p.SumsBlock = blockFor(pd, limit)
	case FormByChannel:
		p.SumsBlock = blockLen
	default:
		p.SumsBlock = blockFor(pd, sumsBlockLen)
	}
	p.ApplyBlock = blockFor(pd, blockLen)
	if pd.Layout == ChannelsLast && int(pd.C) > applyChunk && c.job != jobSweep {
		p.ApplyBlock = blockFor(pd, chunkRows*int(pd.C)) // rows enough for the chunks (applyRows)
	}
	// Chunks start on rows, and are whole blocks of the pass that sums (a
	// block cut short at each chunk's end costs the tiles a flush; NHWC
	// 8x14x14x1024 inference, blocks of 64 rows, lost 7 % in chunks of 66).
	switch p.Form {
	case FormApply:
		p.Align = p.ApplyBlock
	case FormByChannel:
		p.Align = blockFor(pd, blockLen)
	default:
		p.Align = p.SumsBlock
	}
	p.Chunks = 1
	cut := grain
	if t.ChunkGrain > 0 {
		cut = max(t.ChunkGrain, minChunkRows*L)
		if c.half {
			cut = max(t.ChunkGrain/2, minChunkRows*L)
		}
	}
	if chunks := n / cut; chunks >= 2 {
		chunks += chunks % 2 // two or four workers end together
		most := maxChunks
		if t.MaxChunks > 0 {
			most = min(most, t.MaxChunks)
		}
		p.Chunks = min(most, chunks, (n+p.Align-1)/p.Align)
	}

	// The machine's part.
	workers := 1
	if n >= 2*per {
		workers = min(cores, n/per)
	}
	if p.Form == FormByChannel {
		C, S := int(d.C), int(d.S)
		runChannels := unitRunChannels(S)
		llcShare := lastLevel(m, t) / max(1, m.L3Cores)
		unit = max(1, min(unit, llcShare/4/c.size))
		units := (n + unit - 1) / unit
		if workers > 1 {
			units = max(units, unitsPerWorker*workers)
		}
		units = max(1, min(units, C/runChannels))
		p.UnitChannels = (C + units - 1) / units
		p.Units = (C + p.UnitChannels - 1) / p.UnitChannels
		p.Workers = min(workers, p.Units)
	} else {
		p.Workers = min(workers, p.Chunks)
	}
	if p.Form != FormByChannel && p.Form != FormApply {
		p.Folds = max(1, min(p.Workers, 2*p.Chunks*L/foldGrain, int(d.C)/foldAlign))
		if t.MaxFolds > 0 {
			p.Folds = min(p.Folds, t.MaxFolds)
		}
	}
	p.Affine = t.Affine && p.Form == FormPasses
	if c.ownAligned && (c.job == jobTraining || c.job == jobApply) && bytes >= streamFrom(m, t) {
		p.Stream = pd.Layout == ChannelsLast && pd.C%8 == 0 || pd.Layout != ChannelsLast && pd.S%8 == 0
	}
	return p
}

// unitFor returns the most float32 elements of a by-channel unit on m: an
// eighth of a core's L2 in bytes of one tensor (2^16 elements of a 2 MiB
// L2, 2^15 of 1 MiB), so that a unit's dy, x and x_backprop, three eighths
// of it, are still in L2 when its second pass reads them, and a call has
// units enough that workers which start at different times end together;
// at most unitElems, 2^16 where the machine reports no L2. On a 2-core Xeon
// VM's 2 MiB L2, chains of make bench-torch's NCHW float32 training cases
// at two workers took 0.37-0.78 of one worker's time with units of 2^16
// (1.0 to 2.7 times the units), 0.39-0.87 with units of 2^18, what L3 held
// between the passes before (plans alternated in one process); at one
// worker the two were level within the noise.
func unitFor(m Machine) int {
	if m.L2 <= 0 {
		return 1 << 16
	}
	return max(minUnitRun, min(unitElems, m.L2/32))
}

// minUnits is the fewest units a channels-first gradient must allow (its
// channels over unitRunChannels) to run by channel, where it has that many
// chunks: the channels of a shape that allows fewer would leave a
// many-core machine's workers idle, where the two passes' chunks share.
const minUnits = 16

// byChannelShape reports whether a channels-first gradient of d, of grains
// chunk grains, runs by channel units: two grains or more, and
// channels for min(grains, minUnits) units. It depends on the shape alone,
// as the arithmetic must.
func byChannelShape(d Dims, grains int) bool {
	if grains < 2 || d.S <= 0 {
		return false
	}
	return int(d.C)/unitRunChannels(int(d.S)) >= min(grains, minUnits)
}

// unitRunChannels returns the channels a unit needs for runs of
// minUnitRun elements, planes of S elements.
func unitRunChannels(S int) int { return (minUnitRun + S - 1) / S }

// streamFrom returns the least bytes of a float32 x_backprop with a buffer
// of its own that stream: a quarter of the last-level cache (from 8 MiB, 24
// for x, dy and x_backprop, on a 32 MiB L3, x_backprop no longer stays in
// cache for whatever reads it next; BenchmarkTrainingGradOutput chose 2^21
// elements there; maxL3PerCore has what chains inside TensorFlow chose on a
// VM), or the tuning's StreamBytes.
func streamFrom(m Machine, t Tuning) int {
	if t.StreamBytes > 0 {
		return t.StreamBytes
	}
	return lastLevel(m, t) / 4
}

// plan returns the plan of a call of job over d's dy, x and dx (nil where
// the call writes none), on the current machine with the current tuning.
func plan[T Element](d Dims, j job, dy, x, dx []T) Plan {
	var zero T
	// A burst counts only where the helpers are pinned threads, which poll.
	c := call{dims: d, job: j, polling: helpersPolling(), burst: inBurst(CurrentTuning().Spin) && helperThreadsUsable()}
	switch any(zero).(type) {
	case float32:
		c.size = 4
		dx32, _ := any(dx).([]float32)
		c.ownAligned = simdApply != nil && aligned32(dx32) && &dx[0] != &dy[0] && &dx[0] != &x[0]
	case float64:
		c.size = 8
	default:
		c.size, c.half = 2, true
	}
	return planFor(c, CurrentMachine(), CurrentTuning())
}

// lastCallEnd is when the last kernel call returned, in nanoseconds since
// callEpoch (0: none has yet): every call releases its scratch last, and
// scratch.release stamps it (callEnded).
var (
	callEpoch   = time.Now()
	lastCallEnd atomic.Int64
)

// callEnded stamps the end of a kernel call.
func callEnded() { lastCallEnd.Store(max(1, int64(time.Since(callEpoch)))) }

// inBurst reports whether a call starting now comes within spinMicros of
// the last call's end: a chain of gradient calls (a benchmark's, or the
// batch norms of a network one after another with nothing long between).
func inBurst(spinMicros int) bool {
	last := lastCallEnd.Load()
	return spinMicros > 0 && last != 0 && int64(time.Since(callEpoch))-last < int64(spinMicros)*1000
}
