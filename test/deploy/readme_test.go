package deploy

import (
	"bufio"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"

	"helm.sh/helm/v3/pkg/strvals"
)

// readmeBlock is one fenced code block of deploy/README.md.
type readmeBlock struct {
	lang, text string
	line       int
}

func deployReadme(t *testing.T) []readmeBlock {
	t.Helper()
	f, err := os.Open(filepath.Join(deployDir, "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var out []readmeBlock
	var cur *readmeBlock
	sc := bufio.NewScanner(f)
	for n := 1; sc.Scan(); n++ {
		line := sc.Text()
		switch {
		case cur == nil && strings.HasPrefix(line, "```"):
			cur = &readmeBlock{lang: strings.TrimPrefix(line, "```"), line: n}
		case cur != nil && line == "```":
			out = append(out, *cur)
			cur = nil
		case cur != nil:
			cur.text += line + "\n"
		}
	}
	return out
}

// TestDeployReadme runs deploy/README.md's examples as far as they run
// offline: every helm command line renders the chart with its --set values
// and passes the checks; kubectl apply -k names the kustomization; the config
// list shown is the one the chart renders; every airlock command line parses
// (its subcommand and flags exist).
func TestDeployReadme(t *testing.T) {
	bin := filepath.Join(t.TempDir(), "airlock")
	if out, err := exec.Command("go", "build", "-o", bin, "../../cmd/airlock").CombinedOutput(); err != nil {
		t.Fatalf("build: %v\n%s", err, out)
	}
	var helms, kubectls, airlocks, jsons, images int
	for _, b := range deployReadme(t) {
		switch b.lang {
		case "sh":
			for i, line := range strings.Split(strings.TrimSpace(b.text), "\n") {
				where := b.line + 1 + i
				fields := strings.Fields(line)
				switch {
				case len(fields) > 2 && fields[0] == "helm":
					helms++
					checkHelmLine(t, where, fields)
				case len(fields) > 0 && fields[0] == "kubectl":
					kubectls++
					if len(fields) != 4 || strings.Join(fields[:3], " ") != "kubectl apply -k" || (fields[3] != "deploy/" && fields[3] != "deploy/monitoring") {
						t.Errorf("README.md:%d: %q: only kubectl apply -k deploy/ or deploy/monitoring is checked", where, line)
						continue
					}
					if docs := kustomizeBuild(t, fields[3]); len(docs) == 0 {
						t.Errorf("README.md:%d: %s builds nothing", where, fields[3])
					}
				case len(fields) > 0 && slices.Contains([]string{"make", "podman", "docker", "skopeo"}, fields[0]):
					images++
					checkImageLine(t, where, line)
				case len(fields) > 0 && fields[0] == "airlock":
					airlocks++
					checkAirlockLine(t, bin, where, fields[1:])
				default:
					t.Errorf("README.md:%d: %q is not a command this test checks", where, line)
				}
			}
		case "json":
			jsons++
			var got, want any
			if err := json.Unmarshal([]byte(b.text), &got); err != nil {
				t.Fatalf("README.md:%d: %v", b.line, err)
			}
			o := decodeAll(t, renderChart(t, nil))
			if err := json.Unmarshal([]byte(o.configMap.Data["05-airlock.conflist"]), &want); err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(got, want) {
				t.Errorf("README.md:%d: the config list shown is not the one the chart renders:\n%s", b.line, o.configMap.Data["05-airlock.conflist"])
			}
		}
	}
	if helms < 2 || kubectls < 2 || airlocks < 2 || jsons < 1 || images < 3 {
		t.Fatalf("checked %d helm, %d kubectl, %d airlock, %d image lines and %d JSON blocks: the README lost its examples", helms, kubectls, airlocks, images, jsons)
	}
}

// checkImageLine checks a line that builds or loads the image: `make image`
// is a Makefile target with help, an engine's build line is the one the
// Containerfile's header shows, and a load line is one `make image` prints
// (with its default IMAGE_DIR and IMAGE_TAG).
func checkImageLine(t *testing.T, where int, line string) {
	t.Helper()
	read := func(p string) string {
		b, err := os.ReadFile(filepath.Join(deployDir, "..", p))
		if err != nil {
			t.Fatal(err)
		}
		return string(b)
	}
	var ok bool
	switch f := strings.Fields(line); f[0] {
	case "make":
		ok = len(f) == 2 && strings.Contains(read("Makefile"), "\n"+f[1]+": build ## ")
	case "podman", "docker":
		ok = strings.Contains(read("Containerfile"), "\n#   "+line+"\n")
	case "skopeo":
		mk := strings.NewReplacer("$(IMAGE_DIR)", "bin/image", "$(IMAGE_TAG)", "0.1.0").Replace(read("Makefile"))
		ok = strings.Contains(mk, "@echo \"  "+line)
	}
	if !ok {
		t.Errorf("README.md:%d: %q is not a make target, the Containerfile's build line or a load line make image prints", where, line)
	}
}

// checkHelmLine renders `helm install|upgrade NAME CHART [flags]` as helm
// would and checks the result.
func checkHelmLine(t *testing.T, where int, f []string) {
	t.Helper()
	if (f[1] != "install" && f[1] != "upgrade") || len(f) < 4 || f[3] != "deploy/helm/airlock" {
		t.Errorf("README.md:%d: want helm install|upgrade NAME deploy/helm/airlock ..., got %v", where, f)
		return
	}
	values := map[string]any{}
	for i := 4; i < len(f); i++ {
		switch f[i] {
		case "--create-namespace":
		case "--namespace":
			i++
		case "--set":
			i++
			if i == len(f) {
				t.Errorf("README.md:%d: --set without a value", where)
				return
			}
			if err := strvals.ParseInto(f[i], values); err != nil {
				t.Errorf("README.md:%d: --set %s: %v", where, f[i], err)
				return
			}
		default:
			t.Errorf("README.md:%d: helm flag %s is not checked here", where, f[i])
			return
		}
	}
	docs, err := render(values)
	if err != nil {
		t.Errorf("README.md:%d: %v", where, err)
		return
	}
	if errs := failures(func(r reporter) { checkDeployment(r, decodeAll(r, docs)) }); len(errs) > 0 {
		t.Errorf("README.md:%d: %v", where, errs)
	}
}

// checkAirlockLine runs the command with --help after its subcommand words,
// so an unknown subcommand or flag fails without doing the work.
func checkAirlockLine(t *testing.T, bin string, where int, args []string) {
	t.Helper()
	words := 0
	for words < len(args) && words < 2 && !strings.HasPrefix(args[words], "-") {
		words++
	}
	full := append(append(append([]string{}, args[:words]...), "--help"), args[words:]...)
	if out, err := exec.Command(bin, full...).CombinedOutput(); err != nil {
		t.Errorf("README.md:%d: airlock %s: %v\n%s", where, strings.Join(full, " "), err, out)
	}
}
