package policy

import (
	"bytes"
	"compress/gzip"
	"fmt"
	"io"
	"net/http"
)

// MaxBundleSize bounds a whole bundle, both as downloaded (the gzipped
// tarball) and unpacked (every file of it together). OPA's reader bounds
// each file (MaxBundleFileSize) but keeps them all in memory before it
// verifies the signature, so without this a server, or anyone on the path to
// it, could send many files of zeros a few kilobytes each when gzipped and
// exhaust the gateway's memory, signed bundles or not.
const MaxBundleSize = 64 << 20

// errBundleTooLarge is the refusal of a bundle over MaxBundleSize.
var errBundleTooLarge = fmt.Errorf("bundle over %d bytes (gzipped or unpacked)", MaxBundleSize)

// readBundleCapped reads a gzipped tarball of at most limit bytes and checks
// that it unpacks to at most limit bytes, without keeping what it unpacks.
// A stream that is not gzip is returned as read: OPA's reader names the
// problem.
func readBundleCapped(r io.Reader, limit int64) ([]byte, error) {
	raw, err := io.ReadAll(io.LimitReader(r, limit+1))
	if err != nil {
		return nil, err
	}
	if int64(len(raw)) > limit {
		return nil, errBundleTooLargeN(limit)
	}
	zr, err := gzip.NewReader(bytes.NewReader(raw))
	if err != nil {
		return raw, nil
	}
	// A corrupt stream's error is left to OPA's reader, which names it.
	if n, _ := io.Copy(io.Discard, io.LimitReader(zr, limit+1)); n > limit {
		return nil, errBundleTooLargeN(limit)
	}
	return raw, nil
}

func errBundleTooLargeN(limit int64) error {
	if limit == MaxBundleSize {
		return errBundleTooLarge
	}
	return fmt.Errorf("bundle over %d bytes (gzipped or unpacked)", limit)
}

// cappedTransport answers a bundle download (a 200) with its body read
// through readBundleCapped: an oversized one becomes a body whose reading
// fails, so OPA's reader refuses the bundle (stage verify) before it holds
// any of it.
type cappedTransport struct {
	next  http.RoundTripper
	limit int64
}

func (c cappedTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	resp, err := c.next.RoundTrip(req)
	if err != nil || resp.StatusCode != http.StatusOK || resp.Body == nil {
		return resp, err
	}
	raw, rerr := readBundleCapped(resp.Body, c.limit)
	resp.Body.Close()
	if rerr != nil {
		resp.Body = io.NopCloser(errReader{rerr})
	} else {
		resp.Body = io.NopCloser(bytes.NewReader(raw))
	}
	resp.ContentLength = -1
	return resp, nil
}

// errReader fails every read with err.
type errReader struct{ err error }

func (e errReader) Read([]byte) (int, error) { return 0, e.err }
