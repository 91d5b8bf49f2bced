package recipe_test

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/gobn/gobn/internal/recipe"
	"github.com/gobn/gobn/opdef"
)

// root is the repository.
const root = "../.."

func TestEveryKindIsComplete(t *testing.T) {
	for _, kind := range opdef.Kinds() {
		require.Empty(t, recipe.Missing(root, kind), kind)
	}
}

// TestANewKindIsNamedFileByFile: a kind opdef does not have lacks every
// piece, each named by its file, in the recipe's order.
func TestANewKindIsNamedFileByFile(t *testing.T) {
	missing := recipe.Missing(root, recipe.Throwaway.Kind)
	require.Len(t, missing, len(recipe.Pieces), "%q", missing)
	for i, p := range recipe.Pieces {
		require.True(t, strings.HasPrefix(missing[i], recipe.Path(p, "Throwaway")+": "), "%q, want %s first", missing[i], p)
	}
	require.Equal(t, "kernels/throwaway.go", recipe.Path(recipe.Pieces[1], "Throwaway"))
}

// TestMissingDeviceFunctions: a kind's kernels whose calls batchnorm.cu
// does not define lack them there, named; a launch file of the kind's own
// and its kernel are found.
func TestMissingDeviceFunctions(t *testing.T) {
	dir := t.TempDir()
	require.NoError(t, recipe.WriteThrowawayKernels(dir, recipe.ThrowawayCPUFields, recipe.ThrowawayGPUFields))
	launch := filepath.Join(dir, "kernels", "cuda", "throwaway.go")
	src, err := os.ReadFile(launch)
	require.NoError(t, err)
	src = append(src, []byte(`var _ = addKernels(cudaspec.FinalizeKernel("finalize_x", "finalize_x(p)", nil),`+
		` cudaspec.LayoutKernels("mask", "mask_{L}<{T}, {V}, {U}>(p)", cudaspec.Layouts, cudaspec.Elems...))`+"\n")...)
	require.NoError(t, os.WriteFile(launch, src, 0o644))
	cu := filepath.Join(dir, "kernels", "cuda", "batchnorm.cu")
	require.NoError(t, os.WriteFile(cu, []byte("__device__ void mask_cl(const gobn_params& p) {}\n"), 0o644))
	var found []string
	for _, m := range recipe.Missing(dir, "Throwaway") {
		if strings.HasPrefix(m, "kernels/") {
			found = append(found, m)
		}
	}
	require.Equal(t, []string{
		"kernels/throwaway_test.go: no such file",
		"kernels/cuda/batchnorm.cu: no device function finalize_x, mask_cf, which kernels/cuda/throwaway.go's kernels call",
	}, found)
}

// recipeList returns the files CONTRIBUTING.md's list of a new kind's
// files names, in order.
func recipeList(t *testing.T, contributing string) []string {
	begin := strings.Index(contributing, "<!-- the files of a new kind")
	end := strings.Index(contributing, "<!-- end of the files of a new kind -->")
	require.True(t, begin >= 0 && end > begin, "CONTRIBUTING.md has no marked list of a new kind's files")
	var files []string
	for _, m := range regexp.MustCompile("(?m)^\\d+\\. `([^`]+)`").FindAllStringSubmatch(contributing[begin:end], -1) {
		files = append(files, m[1])
	}
	return files
}

func readContributing(t *testing.T) string {
	b, err := os.ReadFile(filepath.Join(root, "CONTRIBUTING.md"))
	require.NoError(t, err)
	return string(b)
}

func TestContributingListsThePieces(t *testing.T) {
	require.Equal(t, recipe.Pieces, recipeList(t, readContributing(t)))
	require.LessOrEqual(t, len(recipe.Pieces), 8, "a new kind is at most eight files by hand")
}

// repoPath is a path CONTRIBUTING.md names in code: a folder or file of the
// repository (build outputs aside), {kind} standing for a kind.
var repoPath = regexp.MustCompile("`([a-z_][\\w.{}-]*/[\\w./{}-]*|[\\w{}-]+\\.(?:go|py|cu|cuh|json|md|h|c|toml|sh))`")

// TestEveryPathContributingNamesExists: every file and folder CONTRIBUTING.md
// names exists, a path of {kind} for every kind of opdef.
func TestEveryPathContributingNamesExists(t *testing.T) {
	found := map[string]bool{}
	for _, m := range repoPath.FindAllStringSubmatch(readContributing(t), -1) {
		found[m[1]] = true
	}
	require.NotEmpty(t, found)
	for path := range found {
		if strings.HasPrefix(path, "build/") || strings.HasPrefix(path, "dist/") {
			continue // what make builds
		}
		for _, kind := range opdef.Kinds() {
			p := strings.ReplaceAll(path, "{kind}", kind.SnakeCase())
			if _, err := os.Stat(filepath.Join(root, p)); err != nil {
				// a file named alone: somewhere in the repository
				matches, _ := filepath.Glob(filepath.Join(root, "*", p))
				deeper, _ := filepath.Glob(filepath.Join(root, "*", "*", p))
				require.True(t, len(matches)+len(deeper) > 0 && !strings.Contains(p, "/"), "CONTRIBUTING.md names %s, which does not exist", p)
			}
			if !strings.Contains(path, "{kind}") {
				break
			}
		}
	}
}
