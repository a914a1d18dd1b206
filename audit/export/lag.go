package export

import (
	"bytes"
	"encoding/json"
	"io"
	"os"
)

// lastSeq reads the seq of path's last whole line from its last 64 KiB
// (0 when there is none there).
func lastSeq(path string) (uint64, error) {
	f, err := os.Open(path)
	if err != nil {
		return 0, err
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return 0, err
	}
	n := min(st.Size(), 64<<10)
	buf := make([]byte, n)
	if _, err := f.ReadAt(buf, st.Size()-n); err != nil && err != io.EOF {
		return 0, err
	}
	end := bytes.LastIndexByte(buf, '\n')
	if end < 0 {
		return 0, nil
	}
	start := bytes.LastIndexByte(buf[:end], '\n') + 1
	if start == 0 && n < st.Size() {
		return 0, nil // the line began before the window
	}
	var head struct {
		Seq uint64 `json:"seq"`
	}
	if json.Unmarshal(buf[start:end], &head) != nil {
		return 0, nil
	}
	return head.Seq, nil
}
