package inspect_test

import (
	"bufio"
	"crypto/sha1"
	"crypto/sha256"
	"encoding/base32"
	"encoding/base64"
	"encoding/hex"
	"fmt"
	"math/rand/v2"
	"os"
	"regexp"
	"strings"
	"testing"

	"github.com/airlock-dev/airlock/inspect"
)

// benignNames are DNS names and URL paths of ordinary agent traffic: every
// tarball and module path of the repository's go.sum and the npm metadata
// in inspecttest, git object ids, UUIDs in REST paths, registry digests and
// CDN names.
func benignNames(t *testing.T) (dns, paths []string) {
	t.Helper()
	f, err := os.Open("../go.sum")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fs := strings.Fields(sc.Text())
		if len(fs) < 2 {
			continue
		}
		v := strings.TrimSuffix(fs[1], "/go.mod")
		paths = append(paths, "/"+fs[0]+"/@v/"+v+".zip", "/lookup/"+fs[0]+"@"+v)
		host, _, _ := strings.Cut(fs[0], "/")
		dns = append(dns, host)
	}
	for _, name := range []string{"npm-express.json", "npm-lodash.json", "npm-_modelcontextprotocol_sdk.json", "npm-chalk.json"} {
		b, err := os.ReadFile("inspecttest/testdata/" + name)
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range regexp.MustCompile(`https://registry\.npmjs\.org(/[^"]+)`).FindAllSubmatch(b, -1) {
			paths = append(paths, string(m[1]))
		}
	}
	r := rand.New(rand.NewPCG(1, 2))
	for i := range 200 {
		sum := sha1.Sum([]byte(fmt.Sprint(i)))
		d := sha256.Sum256([]byte(fmt.Sprint(i)))
		u := fmt.Sprintf("%08x-%04x-4%03x-a%03x-%012x", r.Uint32(), r.Uint32()&0xffff, r.Uint32()&0xfff, r.Uint32()&0xfff, r.Uint64()&0xffffffffffff)
		paths = append(paths,
			"/golang/go/commit/"+hex.EncodeToString(sum[:]),
			"/v2/library/alpine/blobs/sha256:"+hex.EncodeToString(d[:]),
			"/api/v1/projects/"+u+"/tasks",
			"/assets/index-"+hex.EncodeToString(d[:4])+".js",
		)
		dns = append(dns, fmt.Sprintf("d%013x.cloudfront.net", r.Uint64()&0xfffffffffffff), fmt.Sprintf("e%d.dscb.akamaiedge.net", r.IntN(99999)),
			u+".mock.example.com")
	}
	dns = append(dns, "_acme-challenge.www.example.com", "a1b2c3d4e5f6-1234567890.us-east-1.elb.amazonaws.com",
		"1234567890-abcdefghijklmnopqrstuvwxyz012345.apps.googleusercontent.com", "my-bucket-name-2024.s3.us-west-2.amazonaws.com")
	return dns, paths
}

// TestEntropyRates prints the entropy detector's rate on benign names and
// on exfiltration-shaped ones (random hex, base32, base36 labels; base64url
// path segments), and holds the benign rate under 1%.
func TestEntropyRates(t *testing.T) {
	s := newScanner(t, nil)
	dns, paths := benignNames(t)
	flagged := func(where, v string) bool {
		for _, f := range s.Scan(where, []byte(v)) {
			if f.Class == inspect.ClassEntropy || f.Class == inspect.ClassEncoded {
				return true
			}
		}
		return false
	}
	benign, benignHit := 0, 0
	for _, d := range dns {
		benign++
		if flagged(inspect.WhereDNS, d) {
			benignHit++
			t.Logf("benign name flagged: %s", d)
		}
	}
	for _, p := range paths {
		benign++
		if flagged(inspect.WherePath, p) {
			benignHit++
			t.Logf("benign path flagged: %s", p)
		}
	}
	r := rand.New(rand.NewPCG(3, 4))
	attacks, attackHit := 0, 0
	for i := range 300 {
		data := make([]byte, 12+r.IntN(20))
		for j := range data {
			data[j] = byte(r.IntN(256))
		}
		var label string
		switch i % 3 {
		case 0:
			label = hex.EncodeToString(data)
		case 1:
			label = strings.ToLower(strings.TrimRight(base32.StdEncoding.EncodeToString(data), "="))
		default:
			label = strings.ToLower(base32.HexEncoding.WithPadding(base32.NoPadding).EncodeToString(data))
		}
		label = label[:min(len(label), 63)]
		attacks += 2
		if flagged(inspect.WhereDNS, label+".t.attacker.example") {
			attackHit++
		}
		if flagged(inspect.WherePath, "/c/"+base64.RawURLEncoding.EncodeToString(data)) {
			attackHit++
		}
	}
	t.Logf("entropy: benign names and paths flagged %d/%d (%.2f%%); exfiltration-shaped flagged %d/%d (%.2f%%)",
		benignHit, benign, 100*float64(benignHit)/float64(benign), attackHit, attacks, 100*float64(attackHit)/float64(attacks))
	if benignHit*100 > benign {
		t.Errorf("benign flagged %d of %d, want under 1%%", benignHit, benign)
	}
	if attackHit*10 < attacks*9 {
		t.Errorf("exfiltration-shaped flagged %d of %d, want at least 90%%", attackHit, attacks)
	}
}
