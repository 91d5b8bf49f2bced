package kernels

import (
	"fmt"
	"strings"
	"testing"
	"testing/fstest"

	"github.com/stretchr/testify/require"
)

// The plans of machines this one is not: the machine is an argument of
// planFor, so a 128-core server's plan is tested here like this VM's.
var planMachines = []struct {
	name string
	m    Machine
}{
	// The 2-core VM make bench runs on, which reports its host's 260 MiB L3.
	{"2-core VM", Machine{Cores: 2, L2: 2 << 20, L3: 260 << 20, L3Cores: 2}},
	// A Xeon of the AMX generation, 16 cores of one socket's 105 MiB L3.
	{"16-core Xeon", Machine{Cores: 16, L2: 2 << 20, L3: 105 << 20, L3Cores: 16}},
	// EPYCs: an L3 of 32 MiB for each 8 cores (16 CPUs with SMT).
	{"64-core EPYC", Machine{Cores: 64, L2: 1 << 20, L3: 32 << 20, L3Cores: 16}},
	{"128-core EPYC, two sockets", Machine{Cores: 128, L2: 1 << 20, L3: 32 << 20, L3Cores: 16}},
}

// planShape is one call's shape: N, C, S, layout, and its element's bytes
// (2 for Half and BFloat16).
type planShape struct {
	N, C, S int64
	layout  Layout
	size    int
}

func (s planShape) dims() Dims { return Dims{N: s.N, C: s.C, S: s.S, Layout: s.layout} }

func (s planShape) String() string {
	l := "NHWC"
	if s.layout == ChannelsFirst {
		l = "NCHW"
	}
	return fmt.Sprintf("%s %dx%dx%d %dB", l, s.N, s.C, s.S, s.size)
}

// planShapes: make bench's suite, ResNet-50's batch-norm shapes at batch
// 32, the shapes of the many-core issue, and odd ones.
func planShapes() []planShape {
	var out []planShape
	for _, hc := range [][2]int64{{112, 64}, {56, 64}, {56, 256}, {28, 128}, {28, 512}, {14, 256}, {14, 1024}, {7, 512}, {7, 2048}} {
		for _, l := range []Layout{ChannelsLast, ChannelsFirst} {
			out = append(out, planShape{8, hc[1], hc[0] * hc[0], l, 4})
		}
		out = append(out, planShape{8, hc[1], hc[0] * hc[0], ChannelsLast, 2})
	}
	for _, hc := range [][2]int64{{112, 64}, {56, 64}, {56, 128}, {56, 256}, {28, 128}, {28, 256}, {28, 512}, {14, 256}, {14, 512}, {14, 1024}, {7, 512}, {7, 2048}} {
		out = append(out, planShape{32, hc[1], hc[0] * hc[0], ChannelsLast, 4})
	}
	out = append(out,
		planShape{2, 64, 8 * 28 * 28, ChannelsLast, 4}, planShape{32, 1024, 1, ChannelsLast, 4},
		planShape{1, 64, 49, ChannelsLast, 4}, planShape{16, 64, 784, ChannelsLast, 4},
		planShape{4, 128, 3136, ChannelsLast, 4}, planShape{8, 512, 196, ChannelsLast, 4},
		planShape{8, 64, 784, ChannelsFirst, 4}, planShape{32, 256, 49, ChannelsLast, 4},
		planShape{8, 64, 784, ChannelsLast, 2},
		// odd: one channel, three channels, a channel period, rows longer
		// than a block, planes of one element, empty tensors, runs of odd
		// lengths.
		planShape{1, 1, 1 << 22, ChannelsFirst, 4}, planShape{1 << 20, 3, 1, ChannelsLast, 4},
		planShape{4096, 100, 9, ChannelsLast, 4}, planShape{3, 20000, 30, ChannelsLast, 4},
		planShape{1 << 16, 16, 1, ChannelsFirst, 4}, planShape{0, 64, 49, ChannelsFirst, 4},
		planShape{3, 0, 4, ChannelsLast, 4}, planShape{5, 33, 99999, ChannelsFirst, 2},
		planShape{7, 37, 5003, ChannelsFirst, 8}, planShape{64, 40, 100, ChannelsFirst, 4},
	)
	return out
}

var planJobs = []job{jobTraining, jobSweep, jobReduce, jobApply}

func planCall(s planShape, j job, ownAligned bool) call {
	return call{dims: s.dims(), job: j, size: s.size, half: s.size == 2, ownAligned: ownAligned && s.size == 4}
}

// TestPlansCoverEveryElement checks every plan's cuts: the chunks cover the
// tensor, start on rows of the period and on blocks, and are many enough
// for the workers; by-channel units cover the channels with runs the
// prefetcher follows; the workers fit the cores; x_backprop streams only
// where the plan may.
func TestPlansCoverEveryElement(t *testing.T) {
	for _, pm := range planMachines {
		for _, s := range planShapes() {
			for _, j := range planJobs {
				for _, own := range []bool{false, true} {
					c := planCall(s, j, own)
					p := planFor(c, pm.m, DefaultTuning())
					what := fmt.Sprintf("%s: %v job %d own %v: %+v", pm.name, s, j, own, p)
					n := s.dims().Len()
					require.GreaterOrEqual(t, p.Workers, 1, what)
					require.LessOrEqual(t, p.Workers, pm.m.Cores, what)
					require.Equal(t, pm.m.Cores, p.Cores, what)
					if n == 0 {
						require.Equal(t, 1, p.Workers, what)
						continue
					}
					require.Positive(t, p.Align, what)
					if p.Period.Layout == ChannelsLast && p.L <= maxBlockLen {
						require.Zero(t, p.Align%p.L, "%s: chunks start on rows", what)
					}
					require.LessOrEqual(t, p.Chunks, maxChunks, what)
					blocks, least, most := (n+p.Align-1)/p.Align, n, 0
					for r, end := 0, 0; r < p.Chunks; r++ {
						lo, hi := p.Chunk(r)
						require.Equal(t, end, lo, "%s: chunk %d does not start where the last ended", what, r)
						require.Less(t, lo, hi, "%s: chunk %d is empty", what, r)
						require.Zero(t, lo%p.Align, "%s: chunk %d starts inside a block", what, r)
						if hi < n {
							least, most = min(least, (hi-lo)/p.Align), max(most, (hi-lo)/p.Align)
						}
						end = hi
					}
					_, hi := p.Chunk(p.Chunks - 1)
					require.Equal(t, n, hi, "%s: elements left out", what)
					if p.Chunks > 2 {
						require.LessOrEqual(t, most-least, 1, "%s: chunks of %d to %d of %d blocks", what, least, most, blocks)
					}
					require.Positive(t, p.SumsBlock, what)
					require.Positive(t, p.ApplyBlock, what)
					if p.Form == FormByChannel {
						C, S := int(s.C), int(s.S)
						require.Contains(t, []job{jobTraining, jobSweep}, j, what)
						require.Equal(t, ChannelsFirst, s.layout, what)
						require.GreaterOrEqual(t, p.Units*p.UnitChannels, C, what)
						require.Less(t, (p.Units-1)*p.UnitChannels, C, what)
						require.LessOrEqual(t, p.Workers, p.Units, what)
						if p.Units > 1 {
							require.GreaterOrEqual(t, p.UnitChannels*S, minUnitRun, "%s: short runs", what)
						}
					} else {
						require.LessOrEqual(t, p.Workers, p.Chunks, what)
					}
					if p.Stream {
						require.True(t, own && s.size == 4, what)
						require.Contains(t, []job{jobTraining, jobApply}, j, what)
						require.GreaterOrEqual(t, n*4, streamFrom(pm.m, DefaultTuning()), what)
					}
					require.Equal(t, p.Form == FormPasses, p.Affine, what)
					require.GreaterOrEqual(t, p.Folds, 1, what)
					if p.Folds > 1 {
						require.NotContains(t, []Form{FormByChannel, FormApply}, p.Form, what)
						require.LessOrEqual(t, p.Folds, p.Workers, what)
						require.LessOrEqual(t, p.Folds*foldAlign, int(s.C), "%s: a range of fewer channels than a vector", what)
						require.GreaterOrEqual(t, 2*p.Chunks*p.L/p.Folds, foldGrain, "%s: ranges of too few sums", what)
					}
				}
			}
		}
	}
}

// arithmetic is the part of a plan the result's bits depend on.
func arithmetic(p Plan) string {
	return fmt.Sprintf("%v %+v L=%d n=%d chunks %d align %d sums %d apply %d", p.Form, p.Period, p.L, p.Elements,
		p.Chunks, p.Align, p.SumsBlock, p.ApplyBlock)
}

// TestPlanArithmeticIndependentOfMachine checks that where a plan's partial
// sums start and end depends on the shape alone: the same on every machine,
// of 1 to 128 cores and any caches, and with any worker, wake, cache,
// streaming and by-channel unit settings, so that a result's bits do too.
func TestPlanArithmeticIndependentOfMachine(t *testing.T) {
	tunings := []Tuning{DefaultTuning()}
	for _, spec := range []string{"per_worker=1", "per_worker=65536,workers=3", "wake=2,l3=1048576,spin=100", "stream_bytes=4,affine=0,max_folds=1", "unit_elems=4096", "unit_elems=1048576"} {
		tu, err := ParseTuning(spec, DefaultTuning())
		require.NoError(t, err)
		tunings = append(tunings, tu)
	}
	machines := []Machine{{Cores: 1, L2: 256 << 10, L3: 4 << 20, L3Cores: 1}}
	for _, pm := range planMachines {
		machines = append(machines, pm.m)
	}
	for _, s := range planShapes() {
		for _, j := range planJobs {
			c := planCall(s, j, true)
			want := arithmetic(planFor(c, machines[0], tunings[0]))
			for _, m := range machines {
				for _, tu := range tunings {
					require.Equal(t, want, arithmetic(planFor(c, m, tu)), "%v job %d on %+v with %v", s, j, m, tu)
				}
			}
		}
	}
}

// TestPlanTable pins the plans of the cases that the many-core issue
// measured, as the rules give them: the workers follow the cores and
// Tuning.PerWorker, and a channels-first gradient's units follow its
// workers (they stopped at two, then at one, where the tensor held two
// ranges of 2^18 or fewer).
func TestPlanTable(t *testing.T) {
	type row struct {
		shape        planShape
		j            job
		perWorker    int
		form         Form
		chunks       int
		workers      [4]int // by planMachines
		units        [4]int
		stream       [4]bool // with a buffer of its own
		unitChannels int     // on the 16-core Xeon
	}
	rows := []row{
		// NCHW 8x64x28x28 float32 training: by channel from two chunks on,
		// one worker from the default 2^18 elements a worker, units of an
		// eighth of the L2 in bytes of a tensor (2^16 elements of 2 MiB,
		// 2^15 of the EPYCs' 1 MiB).
		{planShape{8, 64, 784, ChannelsFirst, 4}, jobTraining, 1 << 18, FormByChannel, 6,
			[4]int{1, 1, 1, 1}, [4]int{7, 7, 13, 13}, [4]bool{}, 10},
		// 2^16 elements a worker: six workers where the cores allow, two
		// units each at least (at most 32: runs of two planes of 784).
		{planShape{8, 64, 784, ChannelsFirst, 4}, jobTraining, 1 << 16, FormByChannel, 6,
			[4]int{2, 6, 6, 6}, [4]int{7, 11, 13, 13}, [4]bool{}, 6},
		// NHWC 16x28x28x64: twelve chunks of four or five sums blocks of
		// 256 rows; three workers at 2^18 a worker, twelve at 2^16.
		{planShape{16, 64, 784, ChannelsLast, 4}, jobTraining, 1 << 18, FormPasses, 12,
			[4]int{2, 3, 3, 3}, [4]int{}, [4]bool{}, 0},
		{planShape{16, 64, 784, ChannelsLast, 4}, jobTraining, 1 << 16, FormPasses, 12,
			[4]int{2, 12, 12, 12}, [4]int{}, [4]bool{}, 0},
		// NHWC 32x112x112x64 (103 MB a tensor): 392 chunks of 2^16, a worker
		// a core up to 98 (2^18 each); x_backprop streams everywhere.
		{planShape{32, 64, 112 * 112, ChannelsLast, 4}, jobTraining, 1 << 18, FormPasses, 392,
			[4]int{2, 16, 64, 98}, [4]int{}, [4]bool{true, true, true, true}, 0},
		// NHWC 8x28x28x512 (12.8 MB): streams where a quarter of the L3 is
		// 8 MiB (the EPYCs'), not from the Xeon's 105 MiB nor the VM's 160
		// counted of 260, where it stays for the next op.
		{planShape{8, 512, 784, ChannelsLast, 4}, jobTraining, 1 << 18, FormPasses, 50,
			[4]int{2, 12, 12, 12}, [4]int{}, [4]bool{false, false, true, true}, 0},
		// NHWC 32x28x28x512 (51 MB) streams on the VM too.
		{planShape{32, 512, 784, ChannelsLast, 4}, jobTraining, 1 << 18, FormPasses, 196,
			[4]int{2, 16, 49, 49}, [4]int{}, [4]bool{true, true, true, true}, 0},
		// NHWC 32x7x7x256 inference: one pass over six chunks of four or
		// five blocks of 64 rows.
		{planShape{32, 256, 49, ChannelsLast, 4}, jobSweep, 1 << 16, FormSweep, 6,
			[4]int{2, 6, 6, 6}, [4]int{}, [4]bool{}, 0},
		// bfloat16 NHWC 8x28x28x64: chunks and workers of half the elements.
		{planShape{8, 64, 784, ChannelsLast, 2}, jobTraining, 1 << 18, FormPasses, 12,
			[4]int{2, 3, 3, 3}, [4]int{}, [4]bool{}, 0},
		// NCHW 8x2048x7x7: units of at least 21 channels (runs of 1029).
		{planShape{8, 2048, 49, ChannelsFirst, 4}, jobTraining, 1 << 18, FormByChannel, 12,
			[4]int{2, 3, 3, 3}, [4]int{13, 13, 25, 25}, [4]bool{}, 158},
		// The default, from the cores: 2^18 elements a worker on 2, 2^16
		// on 16 and more (perWorkerFor).
		{planShape{16, 64, 784, ChannelsLast, 4}, jobTraining, 0, FormPasses, 12,
			[4]int{2, 12, 12, 12}, [4]int{}, [4]bool{}, 0},
		{planShape{8, 64, 784, ChannelsFirst, 4}, jobTraining, 0, FormByChannel, 6,
			[4]int{1, 6, 6, 6}, [4]int{7, 11, 13, 13}, [4]bool{}, 6},
		// NHWC 1x7x7x64: the calling thread alone.
		{planShape{1, 64, 49, ChannelsLast, 4}, jobTraining, 1 << 18, FormPasses, 1,
			[4]int{1, 1, 1, 1}, [4]int{}, [4]bool{}, 0},
	}
	for _, r := range rows {
		tu := DefaultTuning()
		tu.PerWorker = r.perWorker
		for i, pm := range planMachines {
			p := planFor(planCall(r.shape, r.j, true), pm.m, tu)
			what := fmt.Sprintf("%v per_worker %d on the %s: %+v", r.shape, r.perWorker, pm.name, p)
			require.Equal(t, r.form, p.Form, what)
			require.Equal(t, r.chunks, p.Chunks, what)
			require.Equal(t, r.workers[i], p.Workers, what)
			require.Equal(t, r.units[i], p.Units, what)
			require.Equal(t, r.stream[i], p.Stream, what)
			if i == 1 {
				require.Equal(t, r.unitChannels, p.UnitChannels, what)
			}
		}
	}
}

// TestPlanFolds pins the ranges in which the chunks' partial sums are added
// up: a range of foldGrain sums or more, at most a range a worker. The
// channels-last rows of 2048 channels in fifty chunks take 25 ranges where
// the workers allow; twelve chunks of rows of 64 channels, one range (on the
// calling goroutine, twoPasses).
func TestPlanFolds(t *testing.T) {
	for _, r := range []struct {
		shape planShape
		j     job
		folds [4]int // by planMachines
	}{
		{planShape{32, 2048, 49, ChannelsLast, 4}, jobTraining, [4]int{2, 16, 25, 25}},
		{planShape{32, 512, 196, ChannelsLast, 4}, jobTraining, [4]int{2, 6, 6, 6}},
		{planShape{32, 1024, 196, ChannelsLast, 4}, jobTraining, [4]int{2, 16, 24, 24}},
		{planShape{8, 2048, 49, ChannelsLast, 4}, jobTraining, [4]int{2, 6, 6, 6}},
		{planShape{8, 1024, 196, ChannelsLast, 4}, jobSweep, [4]int{2, 6, 6, 6}},
		{planShape{8, 1024, 196, ChannelsLast, 4}, jobReduce, [4]int{2, 6, 6, 6}},
		{planShape{32, 64, 112 * 112, ChannelsLast, 4}, jobTraining, [4]int{2, 6, 6, 6}},
		{planShape{16, 64, 784, ChannelsLast, 4}, jobTraining, [4]int{1, 1, 1, 1}},
		{planShape{8, 2048, 49, ChannelsFirst, 4}, jobTraining, [4]int{1, 1, 1, 1}}, // by channel
		{planShape{8, 1024, 196, ChannelsLast, 4}, jobApply, [4]int{1, 1, 1, 1}},
	} {
		for i, pm := range planMachines {
			p := planFor(planCall(r.shape, r.j, true), pm.m, DefaultTuning())
			require.Equal(t, r.folds[i], p.Folds, "%v job %d on the %s: %+v", r.shape, r.j, pm.name, p)
			for _, most := range []int{1, 4} {
				tu := DefaultTuning()
				tu.MaxFolds = most
				capped := planFor(planCall(r.shape, r.j, true), pm.m, tu)
				require.Equal(t, min(most, r.folds[i]), capped.Folds, "max_folds=%d: %v job %d on the %s", most, r.shape, r.j, pm.name)
				capped.Folds = p.Folds
				require.Equal(t, p, capped, "max_folds changed more than the folds")
			}
		}
	}
}

// TestPlanWorkersAtTheCrossover holds the plan's choice of workers either
// side of the crossovers of its cost model (perWorkerFor) on the 2-core VM
// and the 16-core Xeon, float32 training: with its helpers asleep and the
// call alone, two workers from 2^19 elements on 2 cores (a helper woken
// late still pays on 2^18 elements each) and one below; with a helper
// polling, or the call in a burst that leaves its helpers polling, two
// from 2^18 for NHWC's two passes and from 2^17 for NCHW's by-channel units
// (two chunks of 2^16, the least that runs by channel), one below; on 16
// cores, asleep, 2^16 elements a worker.
func TestPlanWorkersAtTheCrossover(t *testing.T) {
	xeon := planMachines[1].m
	vm := planMachines[0].m
	for _, r := range []struct {
		m         Machine
		polling   int
		burst     bool
		layout    Layout
		below, at int // elements: N·S with C = 64
	}{
		{vm, 0, false, ChannelsLast, 1<<19 - 64*64, 1 << 19},
		{vm, 0, false, ChannelsFirst, 1<<19 - 64*64, 1 << 19},
		{vm, 1, false, ChannelsLast, 1<<18 - 64*64, 1 << 18},
		{vm, 0, true, ChannelsLast, 1<<18 - 64*64, 1 << 18},
		{vm, 1, false, ChannelsFirst, 1<<17 - 64*64, 1 << 17},
		{vm, 0, true, ChannelsFirst, 1<<17 - 64*64, 1 << 17},
		{xeon, 0, false, ChannelsLast, 1<<17 - 64*64, 1 << 17},
		{xeon, 0, false, ChannelsFirst, 1<<17 - 64*64, 1 << 17},
	} {
		for _, n := range []int{r.below, r.at} {
			c := planCall(planShape{1, 64, int64(n / 64), r.layout, 4}, jobTraining, false)
			c.polling, c.burst = r.polling, r.burst
			p := planFor(c, r.m, DefaultTuning())
			want := 2
			if n < r.at {
				want = 1
			}
			require.Equal(t, want, p.Workers, "%d elements, %v, %d cores, polling %d, burst %v: %+v",
				n, r.layout, r.m.Cores, r.polling, r.burst, p)
			require.Equal(t, r.burst, p.Burst)
		}
	}
}

// TestPerWorkerFor: with helpers asleep, 2^18 elements a worker on 2
// cores, 2^16 from 8 on; with one polling, 2^17 for a call of two passes
// and 2^16 for one of one, on any.
func TestPerWorkerFor(t *testing.T) {
	for cores, want := range map[int]int{0: 1 << 18, 1: 1 << 18, 2: 1 << 18, 4: 1 << 17, 8: 1 << 16, 16: 1 << 16, 128: 1 << 16} {
		for _, passes := range []bool{false, true} {
			require.Equal(t, want, perWorkerFor(cores, 0, passes), "%d cores", cores)
		}
		require.Equal(t, 1<<17, perWorkerFor(cores, 1, true), "%d cores, a helper polling, two passes", cores)
		require.Equal(t, 1<<16, perWorkerFor(cores, 1, false), "%d cores, a helper polling, one pass", cores)
	}
}

// TestPlanTwoCoresAsBefore checks that on two cores, with the default
// tuning, every call runs on as many workers as before the plan: one per
// 2^18 elements (2^17 of Half and BFloat16), at most two.
func TestPlanTwoCoresAsBefore(t *testing.T) {
	m := planMachines[0].m
	for _, s := range planShapes() {
		for _, j := range planJobs {
			per := 1 << 18
			if s.size == 2 {
				per /= 2
			}
			p := planFor(planCall(s, j, false), m, DefaultTuning())
			require.Equal(t, max(1, min(2, s.dims().Len()/per)), p.Workers, "%v job %d", s, j)
		}
	}
}

// The tuning's caps: workers leaves cores to TensorFlow's threads (a
// machine's cgroup quota does the same through Machine.Cores), max_chunks
// lowers the chunks, chunk_grain cuts finer ones (at least minChunkRows rows)
// and leaves the by-channel choice alone.
func TestPlanTuningCaps(t *testing.T) {
	s := planShape{32, 64, 112 * 112, ChannelsLast, 4}
	tu, err := ParseTuning("workers=8,max_chunks=64", DefaultTuning())
	require.NoError(t, err)
	for _, pm := range planMachines {
		p := planFor(planCall(s, jobTraining, true), pm.m, tu)
		require.Equal(t, min(8, pm.m.Cores), p.Workers, pm.name)
		require.Equal(t, min(8, pm.m.Cores), p.Cores, pm.name)
		require.Equal(t, 64, p.Chunks, pm.name)
	}
	fine, err := ParseTuning("chunk_grain=16384", DefaultTuning())
	require.NoError(t, err)
	for _, c := range []struct {
		shape  planShape
		chunks int
	}{
		{planShape{16, 64, 784, ChannelsLast, 4}, 49},         // 802,816 elements in 49 tiled sums blocks of 16384
		{planShape{8, 64, 784, ChannelsLast, 2}, 25},          // 401,408 Half elements in 25 blocks
		{planShape{32, 2048, 49, ChannelsLast, 4}, 98},        // rows of 2048: chunks of 16 rows, 32768 elements
		{planShape{32, 64, 112 * 112, ChannelsLast, 4}, 1024}, // maxChunks
		{planShape{8, 64, 784, ChannelsFirst, 4}, 24},         // still by channel, in the same units
	} {
		for _, pm := range planMachines {
			def := planFor(planCall(c.shape, jobTraining, true), pm.m, DefaultTuning())
			p := planFor(planCall(c.shape, jobTraining, true), pm.m, fine)
			require.Equal(t, c.chunks, p.Chunks, "%v on the %s", c.shape, pm.name)
			require.Equal(t, def.Form, p.Form, "%v on the %s", c.shape, pm.name)
			require.Equal(t, def.Units, p.Units, "%v on the %s", c.shape, pm.name)
		}
	}
}

func TestParseTuning(t *testing.T) {
	base := DefaultTuning()
	got, err := ParseTuning(" per_worker=131072, workers=12,wake=2,l3=0,stream_bytes=4096,by_channel=0,affine=1 ", base)
	require.NoError(t, err)
	require.Equal(t, Tuning{PerWorker: 131072, Workers: 12, Wake: 2, StreamBytes: 4096, Affine: true, Spin: defaultSpin}, got)
	got.MaxChunks, got.MaxFolds, got.Spin, got.ChunkGrain, got.UnitElems = 64, 1, 50, 16384, 1<<15
	back, err := ParseTuning(got.String(), Tuning{})
	require.NoError(t, err)
	require.Equal(t, got, back, "String and ParseTuning round trip")
	require.Equal(t, "affine=1,by_channel=0,chunk_grain=16384,l3=0,max_chunks=64,max_folds=1,per_worker=131072,spin=50,stream_bytes=4096,unit_elems=32768,wake=2,workers=12", got.String())
	same, err := ParseTuning("", base)
	require.NoError(t, err)
	require.Equal(t, base, same)
	for _, bad := range []string{"per_worker", "per_worker=-1", "workers=-1", "wake=two", "affine=yes", "threads=4", "=3"} {
		out, err := ParseTuning(bad, base)
		require.Error(t, err, bad)
		require.Equal(t, base, out, bad)
		require.True(t, strings.HasPrefix(err.Error(), "gobn: CPU plan setting"), err.Error())
	}
}

func TestSetTuningClamps(t *testing.T) {
	prev := SetTuning(Tuning{PerWorker: -5, Workers: -3, Wake: -1, L3: -1, StreamBytes: -1, MaxChunks: -1, MaxFolds: -1, Spin: -1, ChunkGrain: -1, UnitElems: -1})
	defer SetTuning(prev)
	require.Equal(t, Tuning{}, CurrentTuning())
	SetTuning(Tuning{Spin: 1_000_000_000}) // a mistyped spin: the helpers would poll for 16 minutes
	require.Equal(t, maxSpin, CurrentTuning().Spin)
}

// lastLevel counts on at most maxL3PerCore a CPU sharing the cache.
func TestLastLevel(t *testing.T) {
	require.Equal(t, 160<<20, lastLevel(planMachines[0].m, Tuning{}), "a VM's 260 MiB for 2 CPUs")
	require.Equal(t, 105<<20, lastLevel(planMachines[1].m, Tuning{}))
	require.Equal(t, 32<<20, lastLevel(planMachines[2].m, Tuning{}))
	require.Equal(t, 8<<20, lastLevel(planMachines[2].m, Tuning{L3: 8 << 20}), "the tuning's")
	require.Equal(t, 2<<20, lastLevel(Machine{L2: 2 << 20}, Tuning{}), "no L3: the L2")
}

func TestReadCaches(t *testing.T) {
	dir := "sys/devices/system/cpu/cpu0/cache/"
	file := func(s string) *fstest.MapFile { return &fstest.MapFile{Data: []byte(s + "\n")} }
	fsys := fstest.MapFS{
		dir + "index0/level": file("1"), dir + "index0/type": file("Data"), dir + "index0/size": file("48K"),
		dir + "index1/level": file("1"), dir + "index1/type": file("Instruction"), dir + "index1/size": file("32K"),
		dir + "index2/level": file("2"), dir + "index2/type": file("Unified"), dir + "index2/size": file("2048K"),
		dir + "index3/level": file("3"), dir + "index3/type": file("Unified"), dir + "index3/size": file("107520K"),
		dir + "index3/shared_cpu_list": file("0-15,32-47"),
	}
	require.Equal(t, Machine{L2: 2 << 20, L3: 105 << 20, L3Cores: 32}, readCaches(fsys, 64))
	noL3 := fstest.MapFS{dir + "index2/level": file("2"), dir + "index2/type": file("Unified"), dir + "index2/size": file("1M")}
	require.Equal(t, Machine{L2: 1 << 20, L3: 1 << 20, L3Cores: 1}, readCaches(noL3, 8))
	require.Equal(t, Machine{L2: defaultL2, L3: defaultL3, L3Cores: 4}, readCaches(fstest.MapFS{}, 4))
	require.Equal(t, 0, countCPUList("0-x"))
	require.Equal(t, 3, countCPUList("1,3,5"))
}

func TestCgroupCPULimit(t *testing.T) {
	file := func(s string) *fstest.MapFile { return &fstest.MapFile{Data: []byte(s + "\n")} }
	v2 := fstest.MapFS{
		"sys/fs/cgroup/cpu.max":             file("max 100000"),
		"sys/fs/cgroup/job/cpu.max":         file("1600000 100000"),
		"sys/fs/cgroup/job/task/cpu.max":    file("max 100000"),
		"sys/fs/cgroup/other/cpu.max":       file("50000 100000"),
		"sys/fs/cgroup/job/half/cpu.max":    file("150000 100000"),
		"sys/fs/cgroup/unlimited/cpu.max":   file("max 100000"),
		"sys/fs/cgroup/job/garbage/cpu.max": file("lots"),
	}
	require.Equal(t, 16, cgroupCPULimit(v2, "0::/job/task\n"), "the group above limits")
	require.Equal(t, 2, cgroupCPULimit(v2, "0::/job/half\n"), "1.5 CPUs round up")
	require.Equal(t, 1, cgroupCPULimit(v2, "0::/other\n"))
	require.Equal(t, 0, cgroupCPULimit(v2, "0::/unlimited\n"))
	require.Equal(t, 16, cgroupCPULimit(v2, "0::/job/garbage\n"))
	v1 := fstest.MapFS{
		"sys/fs/cgroup/cpu,cpuacct/docker/abc/cpu.cfs_quota_us":  file("400000"),
		"sys/fs/cgroup/cpu,cpuacct/docker/abc/cpu.cfs_period_us": file("100000"),
		"sys/fs/cgroup/cpu/cpu.cfs_quota_us":                     file("-1"),
		"sys/fs/cgroup/cpu/cpu.cfs_period_us":                    file("100000"),
	}
	require.Equal(t, 4, cgroupCPULimit(v1, "12:pids:/docker/abc\n3:cpu,cpuacct:/docker/abc\n1:name=systemd:/docker/abc\n"))
	require.Equal(t, 0, cgroupCPULimit(v1, "3:cpu,cpuacct:/\n"), "-1: no quota")
	require.Equal(t, 0, cgroupCPULimit(fstest.MapFS{}, "0::/\n"))
}
