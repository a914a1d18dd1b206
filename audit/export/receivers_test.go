package export

import (
	"bytes"
	"os"

	"github.com/airlock-dev/airlock/audit/export/exporttest"
)

// fileReceiver is a JSONL file sink's output; it cannot be down.
type fileReceiver struct{ path string }

func (r *fileReceiver) Endpoint() string { return r.path }
func (r *fileReceiver) SetDown(bool)     {}
func (r *fileReceiver) CAFile() string   { return "" }
func (r *fileReceiver) TLSName() string  { return "" }
func (r *fileReceiver) Got() *exporttest.Received {
	b, _ := os.ReadFile(r.path)
	rec := &exporttest.Received{}
	for _, l := range bytes.Split(b, []byte("\n")) {
		if len(l) > 0 {
			rec.Add(l)
		}
	}
	return rec
}
