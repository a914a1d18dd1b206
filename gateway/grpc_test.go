package gateway

import (
	"bufio"
	"context"
	"crypto/tls"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/status"
	"google.golang.org/grpc/tap"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/airlock-dev/airlock/audit"
	"github.com/airlock-dev/airlock/policy"
	"github.com/airlock-dev/airlock/secrets"
)

// grpcEcho is a gRPC upstream with a hand-written service (no generated
// code): unary Say and Secret, bidirectional Chat. It counts every stream
// that reaches it by method, before any handler runs (tap).
type grpcEcho struct {
	addr string
	port int
	mu   sync.Mutex
	seen map[string]int
	chat []string // every Chat message received
}

const (
	echoSay    = "/airlock.test.Echo/Say"
	echoSecret = "/airlock.test.Echo/Secret"
	echoChat   = "/airlock.test.Echo/Chat"
)

func (e *grpcEcho) count(method string) int {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.seen[method]
}

func echoUnary(prefix string) func(any, context.Context, func(any) error, grpc.UnaryServerInterceptor) (any, error) {
	return func(_ any, _ context.Context, dec func(any) error, _ grpc.UnaryServerInterceptor) (any, error) {
		in := new(wrapperspb.StringValue)
		if err := dec(in); err != nil {
			return nil, err
		}
		if in.Value == "fail" {
			return nil, status.Error(codes.NotFound, "no such thing")
		}
		return wrapperspb.String(prefix + in.Value), nil
	}
}

func (e *grpcEcho) chatSeen() []string {
	e.mu.Lock()
	defer e.mu.Unlock()
	return append([]string(nil), e.chat...)
}

var echoDesc = grpc.ServiceDesc{
	ServiceName: "airlock.test.Echo",
	HandlerType: (*any)(nil),
	Methods: []grpc.MethodDesc{
		{MethodName: "Say", Handler: echoUnary("echo ")},
		{MethodName: "Secret", Handler: echoUnary("secret ")},
	},
	Streams: []grpc.StreamDesc{{
		StreamName: "Chat", ServerStreams: true, ClientStreams: true,
		Handler: func(srv any, s grpc.ServerStream) error {
			e, _ := srv.(*grpcEcho)
			for {
				in := new(wrapperspb.StringValue)
				if err := s.RecvMsg(in); err == io.EOF {
					return nil
				} else if err != nil {
					return err
				}
				if e != nil {
					e.mu.Lock()
					e.chat = append(e.chat, in.Value)
					e.mu.Unlock()
				}
				if err := s.SendMsg(wrapperspb.String("chat " + in.Value)); err != nil {
					return err
				}
			}
		},
	}},
}

// newGRPCEcho serves the echo service over TLS with cert on loopback.
func newGRPCEcho(t testing.TB, cert tls.Certificate) *grpcEcho {
	t.Helper()
	e := &grpcEcho{seen: map[string]int{}}
	srv := grpc.NewServer(
		grpc.Creds(credentials.NewTLS(&tls.Config{Certificates: []tls.Certificate{cert}})),
		grpc.InTapHandle(func(ctx context.Context, info *tap.Info) (context.Context, error) {
			e.mu.Lock()
			e.seen[info.FullMethodName]++
			e.mu.Unlock()
			return ctx, nil
		}),
	)
	srv.RegisterService(&echoDesc, e)
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go srv.Serve(l)
	t.Cleanup(srv.Stop)
	e.addr = l.Addr().String()
	e.port = l.Addr().(*net.TCPAddr).Port
	return e
}

// connectVia opens a CONNECT tunnel to target through the explicit proxy.
func connectVia(ctx context.Context, proxy, target string) (net.Conn, error) {
	var d net.Dialer
	c, err := d.DialContext(ctx, "tcp", proxy)
	if err != nil {
		return nil, err
	}
	c.SetDeadline(time.Now().Add(10 * time.Second))
	fmt.Fprintf(c, "CONNECT %s HTTP/1.1\r\nHost: %s\r\n\r\n", target, target)
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		c.Close()
		return nil, err
	}
	if resp.StatusCode != 200 {
		c.Close()
		return nil, fmt.Errorf("CONNECT %s: %s", target, resp.Status)
	}
	c.SetDeadline(time.Time{})
	return c, nil
}

// grpcClientVia is a gRPC client of target reached through the harness's
// explicit proxy, trusting the interception CA.
func grpcClientVia(t testing.TB, h *harness, host string, port int) *grpc.ClientConn {
	t.Helper()
	target := host + ":" + strconv.Itoa(port)
	cc, err := grpc.NewClient("passthrough:///"+target,
		grpc.WithTransportCredentials(credentials.NewTLS(&tls.Config{RootCAs: h.pki.mitmCAPool, ServerName: host})),
		grpc.WithContextDialer(func(ctx context.Context, _ string) (net.Conn, error) {
			return connectVia(ctx, h.explicit, target)
		}))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cc.Close() })
	return cc
}

// grpcPolicy allows the echo service's Say and Chat methods on api.example
// (intercepted) and nothing else: Secret falls to the default deny.
const grpcPolicy = `package airlock.egress

allow if {
	input.kind in {"connect", "tls"}
	input.destination.host == "api.example"
}

mitm if {
	input.kind in {"connect", "tls"}
	input.destination.host == "api.example"
}

allow if {
	input.kind == "http"
	input.destination.host == "api.example"
	input.http.method == "POST"
	input.http.path in {"/airlock.test.Echo/Say", "/airlock.test.Echo/Chat"}
}
`

func grpcEngine(t testing.TB) policy.Decider {
	t.Helper()
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "policy.rego"), []byte(grpcPolicy), 0o644); err != nil {
		t.Fatal(err)
	}
	eng, err := policy.New(policy.Config{Dir: dir, Presets: []string{policy.PresetNone}, EvalTimeout: 10 * time.Second}, nil)
	if err != nil {
		t.Fatal(err)
	}
	return eng
}

// gRPC through interception with the real policy engine: a Rego rule on
// input.http.path allows one method and not another. The denied call sees
// PERMISSION_DENIED naming the reason and decision, the upstream never sees
// it; the upstream's own status (a trailer) reaches the client; a
// bidirectional stream flows message by message; one audit record per call.
func TestGRPCThroughInterception(t *testing.T) {
	pki := newTestPKI(t)
	echo := newGRPCEcho(t, pki.leaf(t, "api.example"))
	h := newHarness(t, grpcEngine(t), names("api.example"), pki)
	h.dialer.allow(echo.addr)
	cc := grpcClientVia(t, h, "api.example", echo.port)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()

	out := new(wrapperspb.StringValue)
	if err := cc.Invoke(ctx, echoSay, wrapperspb.String("hi"), out); err != nil || out.Value != "echo hi" {
		t.Fatalf("allowed method: got %q, %v, want %q", out.Value, err, "echo hi")
	}
	err := cc.Invoke(ctx, echoSay, wrapperspb.String("fail"), out)
	if st := status.Convert(err); st.Code() != codes.NotFound || st.Message() != "no such thing" {
		t.Fatalf("upstream status: got %v %q, want NotFound (the grpc-status trailer passes)", st.Code(), st.Message())
	}
	err = cc.Invoke(ctx, echoSecret, wrapperspb.String("hi"), out)
	st := status.Convert(err)
	if st.Code() != codes.PermissionDenied || !strings.Contains(st.Message(), "default_deny") || !strings.Contains(st.Message(), "decision ") {
		t.Fatalf("denied method: got %v %q, want PermissionDenied naming default_deny and the decision", st.Code(), st.Message())
	}
	if n := echo.count(echoSecret); n != 0 {
		t.Fatalf("upstream saw %d calls of the denied method, want 0", n)
	}

	stream, err := cc.NewStream(ctx, &echoDesc.Streams[0], echoChat)
	if err != nil {
		t.Fatal(err)
	}
	for i := range 3 {
		msg := "m" + strconv.Itoa(i)
		if err := stream.SendMsg(wrapperspb.String(msg)); err != nil {
			t.Fatalf("send %d: %v", i, err)
		}
		in := new(wrapperspb.StringValue)
		if err := stream.RecvMsg(in); err != nil || in.Value != "chat "+msg {
			t.Fatalf("recv %d: got %q, %v (a stream buffered until the end would hang here)", i, in.Value, err)
		}
	}
	stream.CloseSend()
	if err := stream.RecvMsg(new(wrapperspb.StringValue)); err != io.EOF {
		t.Fatalf("end of stream: got %v, want io.EOF", err)
	}

	// One record per call, with the call's grpc-status (the upstream's
	// trailer, or the refusal's).
	for _, tc := range []struct {
		name     string
		path     string
		decision string
		grpc     []string
	}{
		{"Say", echoSay, audit.DecisionAllow, []string{"0", "5"}},
		{"Secret", echoSecret, audit.DecisionDeny, []string{"7"}},
		{"Chat", echoChat, audit.DecisionAllow, []string{"0"}},
	} {
		var got []string
		for _, r := range h.log.Match(func(r audit.Record) bool { return r.Kind == "http" && r.Path == tc.path }) {
			if r.Decision != tc.decision || r.Method != "POST" || string(r.Extra["http_version"]) != `"2"` {
				t.Fatalf("%s: record %+v, want %s POST http_version 2", tc.name, r, tc.decision)
			}
			got = append(got, string(r.Extra["grpc_status"]))
		}
		slices.Sort(got)
		if !slices.Equal(got, tc.grpc) {
			t.Fatalf("%s: records' grpc_status %v, want %v (one record per call)", tc.name, got, tc.grpc)
		}
	}
}

// A gRPC stream of a sandbox that holds placeholders: its messages are
// checked as they stream (the body is not buffered before policy, which
// would hold a bidirectional stream until body_scan_timeout), and a message
// carrying the placeholder ends the stream, flagged, without reaching the
// server.
func TestGRPCStreamOfSandboxWithPlaceholders(t *testing.T) {
	pki := newTestPKI(t)
	echo := newGRPCEcho(t, pki.leaf(t, "api.example"))
	vf := filepath.Join(t.TempDir(), "v")
	os.WriteFile(vf, []byte(secretCanary), 0o600)
	cfg, err := secrets.Parse([]byte(fmt.Sprintf("secrets:\n  - id: api\n    file: %s\nbindings:\n  - secret: api\n    sandboxes: {ids: [sb-test]}\n    host: api.example\n    port: %d\n    header: X-Api-Key\n    template: \"{{value}}\"\n    mode: placeholder\n    placeholder_env: API_KEY\n", vf, echo.port)))
	if err != nil {
		t.Fatal(err)
	}
	inj, err := secrets.New(cfg, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	env, _ := inj.Placeholders(secrets.Sandbox{ID: "sb-test"})
	ph := env["API_KEY"]
	h := newHarness(t, grpcEngine(t), names("api.example"), pki, func(c *Config) { c.Injector = inj; c.BodyScanTimeout = 3 * time.Second })
	h.dialer.allow(echo.addr)
	cc := grpcClientVia(t, h, "api.example", echo.port)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	stream, err := cc.NewStream(ctx, &echoDesc.Streams[0], echoChat)
	if err != nil {
		t.Fatal(err)
	}
	if err := stream.SendMsg(wrapperspb.String("first")); err != nil {
		t.Fatal(err)
	}
	in := new(wrapperspb.StringValue)
	if err := stream.RecvMsg(in); err != nil || in.Value != "chat first" {
		t.Fatalf("first message: got %q, %v, want an answer before the stream ends", in.Value, err)
	}
	stream.SendMsg(wrapperspb.String("leak " + ph))
	if err := stream.RecvMsg(in); err == nil {
		t.Fatalf("message with the placeholder: got answer %q, want the stream ended", in.Value)
	}
	for _, m := range echo.chatSeen() {
		if strings.Contains(m, ph) {
			t.Fatalf("the server received the placeholder: %q", m)
		}
	}
	r := h.log.Wait(t, "flagged chat record", func(r audit.Record) bool {
		return r.Kind == "http" && r.Path == echoChat && slices.Contains(r.Flags, secrets.FlagPlaceholderLeak)
	})
	if r.Decision != audit.DecisionDeny {
		t.Fatalf("record %+v: want a deny", r)
	}
}

// gRPC through interception with content inspection on: a bidirectional
// stream still flows message by message (the body scanner holds nothing
// back), and a call carrying a credential is refused before the upstream
// sees it.
func TestGRPCWithInspection(t *testing.T) {
	pki := newTestPKI(t)
	echo := newGRPCEcho(t, pki.leaf(t, "api.example"))
	h := newHarness(t, grpcEngine(t), names("api.example"), pki, withInspector(patternInspector{}, 0))
	h.dialer.allow(echo.addr)
	cc := grpcClientVia(t, h, "api.example", echo.port)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	stream, err := cc.NewStream(ctx, &echoDesc.Streams[0], echoChat)
	if err != nil {
		t.Fatal(err)
	}
	for i := range 3 {
		msg := "m" + strconv.Itoa(i)
		if err := stream.SendMsg(wrapperspb.String(msg)); err != nil {
			t.Fatalf("send %d: %v", i, err)
		}
		in := new(wrapperspb.StringValue)
		if err := stream.RecvMsg(in); err != nil || in.Value != "chat "+msg {
			t.Fatalf("recv %d: got %q, %v (a scanner holding the body back would hang here)", i, in.Value, err)
		}
	}
	stream.CloseSend()
	// The call's headers may reach the upstream before its message; the
	// message carrying the key never does, so no echo of it comes back.
	out := new(wrapperspb.StringValue)
	err = cc.Invoke(ctx, echoSay, wrapperspb.String("key "+fakeKey), out)
	if st := status.Convert(err); st.Code() == codes.OK || strings.Contains(out.Value, fakeKey) {
		t.Fatalf("a call carrying a key: got %v %q, want it refused", st.Code(), out.Value)
	}
}
