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
	line, err := lastLine(path)
	if err != nil || line == nil {
		return 0, err
	}
	var head struct {
		Seq uint64 `json:"seq"`
	}
	if json.Unmarshal(line, &head) != nil {
		return 0, nil
	}
	return head.Seq, nil
}

// lastLine returns path's last whole line if it lies within the last 64 KiB
// (nil otherwise, or for an empty file).
func lastLine(path string) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return nil, err
	}
	n := min(st.Size(), 64<<10)
	buf := make([]byte, n)
	if _, err := f.ReadAt(buf, st.Size()-n); err != nil && err != io.EOF {
		return nil, err
	}
	end := bytes.LastIndexByte(buf, '\n')
	if end < 0 {
		return nil, nil
	}
	start := bytes.LastIndexByte(buf[:end], '\n') + 1
	if start == 0 && n < st.Size() {
		return nil, nil // the line began before the window
	}
	return buf[start:end], nil
}
