package sim

import (
	"go/parser"
	"go/token"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/xdpshield/xdpshield/internal/testutil"
)

// module is the module path of the repository (go.mod).
const module = "xdpshield"

// moduleImports returns the packages of this module that the non-test Go
// files of package path import, read from the sources under root.
func moduleImports(t *testing.T, root, path string) []string {
	t.Helper()
	files, err := filepath.Glob(filepath.Join(root, strings.TrimPrefix(path, module), "*.go"))
	require.NoError(t, err)
	var out []string
	for _, f := range files {
		if strings.HasSuffix(f, "_test.go") {
			continue
		}
		af, err := parser.ParseFile(token.NewFileSet(), f, nil, parser.ImportsOnly)
		require.NoError(t, err)
		for _, imp := range af.Imports {
			p, err := strconv.Unquote(imp.Path.Value)
			require.NoError(t, err)
			if p == module || strings.HasPrefix(p, module+"/") {
				out = append(out, p)
			}
		}
	}
	return out
}

// TestSimStaysGeneric: the simulator drives any program of bpf/ and knows
// none of them: neither sim nor any package of this module it imports,
// however indirectly, imports the shield (shield/... holds the shield's
// glue and data-plane tests, shield/datapath). Read from the sources, as
// `go list -deps ./sim` would, so it needs no toolchain; a test binary run
// without them (a VM) skips, the host's run checks.
func TestSimStaysGeneric(t *testing.T) {
	root := ".."
	testutil.RepoFile(t, root, "go.mod")
	seen := map[string][]string{module + "/sim": nil} // package -> the chain that imports it
	queue := []string{module + "/sim"}
	for len(queue) > 0 {
		p := queue[0]
		queue = queue[1:]
		imps := moduleImports(t, root, p)
		if p == module+"/sim" && len(imps) == 0 {
			// Not proof of anything unless the sources were read.
			files, _ := filepath.Glob(filepath.Join(root, "sim", "*.go"))
			require.NotEmpty(t, files, "no Go files read in sim")
		}
		for _, imp := range imps {
			if _, ok := seen[imp]; ok {
				continue
			}
			chain := append(slices.Clone(seen[p]), p)
			seen[imp] = chain
			shieldPkg := imp == module+"/shield" || strings.HasPrefix(imp, module+"/shield/")
			if !assert.Falsef(t, shieldPkg, "%s imports %s: the simulator must not know the shield (move the shield's part to shield/datapath)", strings.Join(chain, " -> "), imp) {
				continue
			}

			queue = append(queue, imp)
		}
	}
}
