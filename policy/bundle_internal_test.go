package policy

import (
	"bytes"
	"compress/gzip"
	"crypto/rand"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/open-policy-agent/opa/v1/plugins/rest"
)

// TestBundleClientNeverUnbounded: while the downloader long-polls it asks
// for no response header timeout; the client still bounds the wait by the
// long-polling timeout plus longPollGrace, so a server that holds a request
// forever cannot stop later updates.
func TestBundleClientNeverUnbounded(t *testing.T) {
	a := &bundleAuth{longPoll: 30 * time.Second}
	for _, tt := range []struct {
		name string
		secs *int64
		want time.Duration
	}{
		{name: "long poll", secs: new(int64), want: 30*time.Second + longPollGrace},
		{name: "plain poll", secs: func() *int64 { n := int64(10); return &n }(), want: 10 * time.Second},
	} {
		t.Run(tt.name, func(t *testing.T) {
			c, err := a.NewClient(rest.Config{ResponseHeaderTimeoutSeconds: tt.secs})
			if err != nil {
				t.Fatal(err)
			}
			ct, ok := c.Transport.(cappedTransport)
			if !ok || ct.limit != MaxBundleSize {
				t.Fatalf("transport %T: want the size cap of MaxBundleSize", c.Transport)
			}
			if got := ct.next.(*http.Transport).ResponseHeaderTimeout; got != tt.want {
				t.Fatalf("got %v, want %v", got, tt.want)
			}
		})
	}
}

// TestReadBundleCapped: the cap applies to the gzipped stream and to what
// it unpacks to; a stream that is not gzip is handed on for OPA to name.
func TestReadBundleCapped(t *testing.T) {
	gz := func(b []byte) []byte {
		var buf bytes.Buffer
		zw := gzip.NewWriter(&buf)
		zw.Write(b)
		zw.Close()
		return buf.Bytes()
	}
	random := make([]byte, 4096)
	rand.Read(random)
	for _, tt := range []struct {
		name string
		in   []byte
		err  bool
	}{
		{name: "small", in: gz([]byte("hello")), err: false},
		{name: "at the limit unpacked", in: gz(make([]byte, 1000)), err: false},
		{name: "over the limit unpacked", in: gz(make([]byte, 1001)), err: true},
		{name: "over the limit gzipped", in: gz(random), err: true},
		{name: "not gzip", in: []byte("not a tarball"), err: false},
	} {
		t.Run(tt.name, func(t *testing.T) {
			got, err := readBundleCapped(bytes.NewReader(tt.in), 1000)
			if tt.err {
				if err == nil || !strings.Contains(err.Error(), "bundle over 1000 bytes") {
					t.Fatalf("got %d bytes, %v; want the size refused", len(got), err)
				}
				return
			}
			if err != nil || !bytes.Equal(got, tt.in) {
				t.Fatalf("got %d bytes, %v; want the input back", len(got), err)
			}
		})
	}
}
