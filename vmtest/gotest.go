package vmtest

import (
	"regexp"
	"strconv"
	"strings"
)

// TestResult is one test (or subtest) of a binary's -test.v output.
type TestResult struct {
	Name    string   `json:"name"`
	Status  string   `json:"status"` // pass, fail, skip
	Seconds float64  `json:"seconds"`
	Output  []string `json:"output,omitempty"`
	Reason  string   `json:"reason,omitempty"` // a skip's reason
}

var (
	resultRE = regexp.MustCompile(`^(\s*)--- (PASS|FAIL|SKIP): (\S+) \(([0-9.]+)s\)`)
	headerRE = regexp.MustCompile(`^=== (RUN|CONT|NAME|PAUSE)\s+(\S+)`)
	fileRE   = regexp.MustCompile(`^\s*[\w.-]+\.go:\d+: `)
)

// ParseTestOutput reads `go test -v` output (a test binary run with
// -test.v) and returns its leaf tests: a test with subtests is represented
// by them. Output lines are attributed to the test the stream says is
// running (=== RUN/CONT/NAME) or, without -v, to the result line they follow.
func ParseTestOutput(lines []string) []TestResult {
	var all []TestResult
	out := map[string][]string{}
	cur := ""
	for _, line := range lines {
		if m := headerRE.FindStringSubmatch(line); m != nil {
			cur = m[2]
			continue
		}
		if m := resultRE.FindStringSubmatch(line); m != nil {
			secs, _ := strconv.ParseFloat(m[4], 64)
			all = append(all, TestResult{Name: m[3], Status: strings.ToLower(m[2]), Seconds: secs})
			cur = m[3]
			continue
		}
		if cur != "" && strings.HasPrefix(line, "    ") {
			out[cur] = append(out[cur], strings.TrimSpace(line))
		}
	}
	var leaves []TestResult
	for _, r := range all {
		parent := false
		for _, o := range all {
			if strings.HasPrefix(o.Name, r.Name+"/") {
				parent = true
				break
			}
		}
		if parent {
			continue
		}
		r.Output = out[r.Name]
		if r.Status == "skip" {
			for _, l := range r.Output {
				r.Reason = fileRE.ReplaceAllString(l, "")
				break
			}
		}
		leaves = append(leaves, r)
	}
	return leaves
}
