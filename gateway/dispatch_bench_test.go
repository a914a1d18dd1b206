package gateway

import (
	"bufio"
	"context"
	"net/http"
	"strings"
	"testing"

	"github.com/elazarl/goproxy"
)

// BenchmarkGoproxyDispatch: what goproxy's dispatch adds to a kept-alive
// request of the explicit proxy (the request's context, ServeHTTP, the
// handler chain, the copy of the empty response), the pipeline left out.
func BenchmarkGoproxyDispatch(b *testing.B) {
	ec := &explicitConn{}
	ec.d.w = explicitWriter{c: ec, header: http.Header{}}
	ec.d.ctx = context.WithValue(context.Background(), explicitConnKey, ec)
	// newExplicitProxy's settings, with a handler that leaves the pipeline out.
	p2 := goproxy.NewProxyHttpServer()
	p2.Verbose, p2.KeepHeader, p2.KeepAcceptEncoding = false, true, true
	p2.OnRequest().DoFunc(func(r *http.Request, _ *goproxy.ProxyCtx) (*http.Request, *http.Response) {
		d := dispatchOf(r)
		d.served = true
		d.done = http.Response{StatusCode: 200, Header: d.w.header, Body: http.NoBody, Request: r}
		return r, &d.done
	})
	ec.d.proxy = p2
	raw := "GET http://pypi.org/simple/x/ HTTP/1.1\r\nHost: pypi.org\r\nUser-Agent: pip/24.0\r\nAccept: */*\r\nAccept-Encoding: gzip\r\n\r\n"
	req, err := http.ReadRequest(bufio.NewReader(strings.NewReader(raw)))
	if err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	for b.Loop() {
		d := &ec.d
		d.served = false
		clear(d.w.header)
		r := req.WithContext(d.ctx)
		d.proxy.ServeHTTP(&d.w, r)
	}
}
