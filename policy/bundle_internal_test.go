package policy

import (
	"net/http"
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
			if got := c.Transport.(*http.Transport).ResponseHeaderTimeout; got != tt.want {
				t.Fatalf("got %v, want %v", got, tt.want)
			}
		})
	}
}
