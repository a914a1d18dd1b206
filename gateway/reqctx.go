package gateway

import (
	"bufio"
	"net"
	"net/http"
	"net/netip"
	"sync/atomic"
	"time"

	"github.com/airlock-dev/airlock/audit"
	"github.com/airlock-dev/airlock/inspect"
	"github.com/airlock-dev/airlock/policy"
	"github.com/airlock-dev/airlock/secrets"
)

// reqCtx is the one per-request (or per-tunnel, per-connection) context: created
// once by the listener side, filled by the stages, read by the one deferred
// audit call.
type reqCtx struct {
	g    *Gateway
	cc   *clientConn
	sess *httpSession // HTTP kinds and CONNECT: the session the request came on
	id   string
	kind policy.Kind

	start     time.Time
	policyDur time.Duration
	dialDur   time.Duration

	// Destination, normalized.
	host    string
	port    int
	ip      netip.Addr // the address dialed (or refused)
	sni     string
	origDst netip.AddrPort
	carries policy.Kind // CONNECT: what the tunnel turned out to carry (tls, http, tcp)
	named   bool        // kind tcp: host is the name the sandbox resolved to origDst
	socks   bool        // a SOCKS5 CONNECT (socks.go): answered in SOCKS, decided as kind connect
	parent  string      // the parent proxy's host:port, when the dial went through it

	// carriedDecided: what the CONNECT carried was decided a second time
	// (decideCarried); the record holds that decision.
	carriedDecided bool

	// HTTP.
	req        *http.Request
	scheme     string
	status     int
	keepAlive  bool   // the client connection may carry another request
	grpcStatus string // a gRPC call's grpc-status: the refusal's, or the upstream's

	// Raw inputs of the transparent listener (tls, tcp).
	br *bufio.Reader // holds the peeked bytes

	// approval is a person's answer to what the policy asked (approval.go).
	approval *Answer

	// Content inspection (inspect.go): findings of the URL, headers and a
	// body read before policy; the streamed body's own; parsed protocols.
	findings []inspect.Finding
	body     *inspectBody
	late     *lateFindings // a websocket's messages (wsinspect.go)
	wsScan   *wsScan
	bodyRead bool // the body was read whole before policy
	jsonrpc  *policy.JSONRPC
	llm      *policy.LLM

	in      policy.Input
	inHTTP  policy.HTTP            // what in.HTTP points to for kind http (buildInput)
	dctx    decisionCtx            // the context of rc's first decision (decisionCtx)
	dctxSet bool                   // dctx was handed out
	adm     *admitted              // what a long-lived connection was admitted with (redecide.go)
	admHeld admitted               // what adm points to: held here, not allocated per request
	revoked atomic.Pointer[denial] // set by Redecide when it closed the connection
	dec     policy.Decision
	decided bool
	mitm    bool
	applied *secrets.Applied  // what Inject did; scrubs the response, audited
	res     audit.Reservation // room reserved for the next record written

	up    *upstreamConn // HTTP: the upstream connection used
	upRaw net.Conn      // tunnels: the upstream connection
	route *route        // CONNECT: the checked destination, connected once the tunnel is decided

	bytesUp, bytesDown int64
	tunnel             bool // a close record follows the decision record
	opened             bool // the decision record was written
	responded          bool // bytes of a response already went to the client
	err                error
}

func (g *Gateway) newReqCtx(cc *clientConn, sess *httpSession) *reqCtx {
	return &reqCtx{g: g, cc: cc, sess: sess, id: g.newID(), start: time.Now()}
}

// admit keeps a as rc's admission and returns where it is held.
func (rc *reqCtx) admit(a admitted) *admitted {
	rc.admHeld = a
	return &rc.admHeld
}

// decisionCtx returns the context of one policy decision for rc: the one
// rc holds for its first, a new one for any later (a decider may still hold
// an earlier one, so none is reset).
func (rc *reqCtx) decisionCtx(timeout time.Duration) *decisionCtx {
	if rc.dctxSet {
		return newDecisionCtx(timeout)
	}
	rc.dctxSet = true
	rc.dctx.deadline = time.Now().Add(timeout)
	return &rc.dctx
}

func kindOfMode(m listenerMode) policy.Kind {
	if m == modeExplicit {
		return policy.KindHTTP
	}
	return policy.KindTCP
}
