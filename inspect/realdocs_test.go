package inspect_test

import (
	"go/build"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"testing"

	"github.com/airlock-dev/airlock/inspect"
	"github.com/airlock-dev/airlock/inspect/inspecttest"
)

// realDocs gathers real documents available offline: READMEs, licenses and
// Markdown in the Go module cache and the Go tree, /usr/share/doc, and the
// npm registry metadata in inspecttest/testdata. At most max files, each
// under 1 MiB.
func realDocs(t *testing.T, max int) map[string][]byte {
	t.Helper()
	roots := []string{filepath.Join(build.Default.GOROOT), "/usr/share/doc", "inspecttest/testdata"}
	if out, err := exec.Command("go", "env", "GOMODCACHE").Output(); err == nil {
		roots = append([]string{strings.TrimSpace(string(out))}, roots...)
	}
	docs := map[string][]byte{}
	for _, root := range roots {
		var paths []string
		filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
			if err != nil {
				return nil
			}
			if d.IsDir() {
				if strings.Count(strings.TrimPrefix(p, root), "/") > 6 || d.Name() == "testdata" && root != "inspecttest/testdata" || d.Name() == "cache" {
					return filepath.SkipDir
				}
				return nil
			}
			n := strings.ToLower(d.Name())
			if strings.HasPrefix(n, "readme") || strings.HasPrefix(n, "license") || n == "copyright" || strings.HasSuffix(n, ".md") || strings.HasSuffix(n, ".json") && root == "inspecttest/testdata" {
				if !strings.HasSuffix(n, ".gz") {
					paths = append(paths, p)
				}
			}
			return nil
		})
		sort.Strings(paths)
		for _, p := range paths {
			if len(docs) >= max {
				return docs
			}
			b, err := os.ReadFile(p)
			if err != nil || len(b) == 0 || len(b) > 1<<20 {
				continue
			}
			docs[p] = b
		}
	}
	return docs
}

func contentType(p string) string {
	switch strings.ToLower(filepath.Ext(p)) {
	case ".json":
		return "application/json"
	case ".md":
		return "text/markdown"
	case ".html", ".htm":
		return "text/html"
	}
	return "text/plain"
}

// TestRealDocumentRates measures the detectors on real documents read as a
// response (injected instructions) and sent as a request body (credentials):
// the rates are printed; no document may be blocked by the default policy,
// and at most 1% may carry a high-confidence injection finding.
func TestRealDocumentRates(t *testing.T) {
	if testing.Short() {
		t.Skip("reads a few thousand files")
	}
	maxDocs := 3000
	if raceOn {
		maxDocs = 300 // the rates over all of them: go test -run TestRealDocumentRates ./inspect/
	}
	docs := realDocs(t, maxDocs)
	if len(docs) < 100 {
		t.Skipf("found only %d documents offline", len(docs))
	}
	s := newScanner(t, nil)
	var high, medium, low, blocked int
	for p, b := range docs {
		conf := ""
		for _, f := range s.ScanResponse(contentType(p), b) {
			if confRank(f.Confidence) > confRank(conf) {
				conf = f.Confidence
			}
		}
		switch conf {
		case inspect.High:
			high++
			t.Logf("high injection finding in %s", p)
		case inspect.Medium:
			medium++
			t.Logf("medium injection finding in %s", p)
		case inspect.Low:
			low++
		}
		if fs := s.Scan("body", b); inspecttest.Blocks(fs) {
			blocked++
			t.Logf("blocking credential finding in %s: %+v", p, fs)
		}
	}
	n := len(docs)
	pc := func(k int) float64 { return 100 * float64(k) / float64(n) }
	t.Logf("%d real documents: responses flagged high %d (%.2f%%), medium %d (%.2f%%), low %d (%.2f%%); as request bodies blocked %d (%.2f%%)",
		n, high, pc(high), medium, pc(medium), low, pc(low), blocked, pc(blocked))
	if high*100 > n {
		t.Errorf("%d of %d documents carry a high-confidence injection finding, want at most 1%%", high, n)
	}
}

func confRank(c string) int {
	switch c {
	case inspect.High:
		return 3
	case inspect.Medium:
		return 2
	case inspect.Low:
		return 1
	}
	return 0
}
