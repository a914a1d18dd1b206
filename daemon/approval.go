package daemon

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"log/slog"
	"net"
	"slices"
	"strconv"
	"sync"
	"time"

	"github.com/airlock-dev/airlock/api"
	"github.com/airlock-dev/airlock/audit"
	"github.com/airlock-dev/airlock/config"
	"github.com/airlock-dev/airlock/gateway"
	"github.com/airlock-dev/airlock/ipguard"
	"github.com/airlock-dev/airlock/oplog"
	"github.com/airlock-dev/airlock/policy"
)

// A person in the loop: the approvals broker is the gateway's Approver.
// A request the policy asks about is held here (the gateway keeps its
// connection) until an answer comes through the API (POST
// /v1/approvals/{id}: `airlock approve`, a client, whatever received the
// webhook), the time-out (approval.timeout, then approval_timeout) or
// never, past approval.max_pending_per_sandbox held at once
// (approval_limit at once). Every question and every answer is an audit
// record of kind approval naming who answered.
//
// Who may answer: root, and the uid that owns the sandbox (the owner of a
// daemon sandbox; an attached namespace or airlock run's sandbox has only
// root). A process inside the sandbox never may, whatever its uid: the
// daemon's socket is hidden from sandboxes, and a caller whose network
// namespace is the sandbox's is refused (approvals.inSandbox).

// approvals holds the questions waiting for an answer.
type approvals struct {
	timeout time.Duration
	maxPer  int
	log     audit.Logger
	logger  *slog.Logger
	// owner says who owns a sandbox besides root (ok false: none).
	owner func(sandbox string) (uid int, ok bool)
	// inSandbox reports whether the caller's process runs inside the
	// sandbox (its network namespace).
	inSandbox func(c caller, sandbox string) bool
	// addAllow adds an entry to a sandbox's allow list for caller c (the
	// answer policy).
	addAllow func(c caller, sandbox, entry string) *api.Error
	// notify is called with each new question (the webhook); nil: none.
	notify func(a api.Approval)

	mu      sync.Mutex
	pending map[string]*held
	per     map[string]int                  // held, by sandbox
	grants  map[string]map[string]time.Time // sandbox -> host:port (or host:*) -> until
	subs    map[*approvalSub]struct{}
}

var _ gateway.Approver = (*approvals)(nil)

// held is one question waiting; a DNS question for a name already asked
// about joins it (a resolver asks A and AAAA at once, and again on its
// own time-out).
type held struct {
	a     api.Approval
	owner int           // -1: root only
	done  chan struct{} // closed with ans set
	ans   gateway.Answer
	timer *time.Timer
}

// approvalSub is one follow stream.
type approvalSub struct {
	c      caller
	ch     chan api.Approval
	closed bool
}

func newApprovals(timeout time.Duration, maxPer int, log audit.Logger, logger *slog.Logger) *approvals {
	return &approvals{timeout: timeout, maxPer: maxPer, log: log, logger: logger,
		owner:     func(string) (int, bool) { return 0, false },
		inSandbox: func(caller, string) bool { return false },
		pending:   map[string]*held{}, per: map[string]int{}, grants: map[string]map[string]time.Time{}, subs: map[*approvalSub]struct{}{}}
}

// forLife is the expiry of a grant for the sandbox's life.
var forLife = time.Date(9999, 1, 1, 0, 0, 0, 0, time.UTC)

// grantKeys are the grants that let q pass: its host and port, its host
// on any port (a DNS question approved for the sandbox, or once for the
// connection that follows it).
func grantKeys(q gateway.Question) []string {
	return []string{net.JoinHostPort(q.Host, strconv.Itoa(q.Port)), q.Host + ":*"}
}

// Approve holds q until it is answered or times out.
func (b *approvals) Approve(ctx context.Context, q gateway.Question) gateway.Answer {
	now := time.Now()
	b.mu.Lock()
	for _, k := range grantKeys(q) {
		if exp, ok := b.grants[q.Sandbox][k]; ok && now.Before(exp) {
			b.mu.Unlock()
			return gateway.Answer{Allow: true, Reason: gateway.ReasonApprovedSandbox, Msg: "approved earlier for this sandbox: " + k}
		}
	}
	if q.Kind == policy.KindDNS {
		for _, h := range b.pending {
			if h.a.Sandbox == q.Sandbox && h.a.Kind == string(policy.KindDNS) && h.a.Host == q.Host {
				b.mu.Unlock()
				return b.wait(ctx, h)
			}
		}
	}
	if n := b.per[q.Sandbox]; n >= b.maxPer {
		b.mu.Unlock()
		return gateway.Answer{Reason: gateway.ReasonApprovalLimit,
			Msg: fmt.Sprintf("sandbox %s has %d requests waiting for approval, approval.max_pending_per_sandbox is %d", q.Sandbox, n, b.maxPer)}
	}
	h := &held{done: make(chan struct{}), owner: -1, a: api.Approval{
		ID: newApprovalID(), Sandbox: q.Sandbox, RequestID: q.ID, Kind: string(q.Kind), Host: q.Host, Port: q.Port,
		Method: q.Method, Path: q.Path, Msg: q.Msg, AskedAt: now.UTC(), ExpiresAt: now.Add(b.timeout).UTC(), State: api.ApprovalPending}}
	if uid, ok := b.owner(q.Sandbox); ok {
		h.owner = uid
	}
	b.pending[h.a.ID] = h
	b.per[q.Sandbox]++
	b.mu.Unlock()
	if err := b.log.Log(questionRecord(h.a)); err != nil {
		b.logger.Error("audit approval question", oplog.SandboxKey, q.Sandbox, oplog.ErrorKey, err)
		b.resolve(h.a.ID, gateway.Answer{Reason: gateway.ReasonApprovalUnavailable, Msg: "the audit log refused the question"}, "", "", false)
		return h.ans
	}
	b.publish(h.a, h.owner)
	if b.notify != nil {
		b.notify(h.a)
	}
	b.mu.Lock()
	if _, ok := b.pending[h.a.ID]; ok {
		timeout := b.timeout
		h.timer = time.AfterFunc(timeout, func() {
			b.resolve(h.a.ID, gateway.Answer{Reason: gateway.ReasonApprovalTimeout,
				Msg: fmt.Sprintf("nobody answered in %s (approval.timeout)", timeout)}, api.ApprovalTimedOut, "timeout", true)
		})
	}
	b.mu.Unlock()
	return b.wait(ctx, h)
}

// wait waits for h's answer; a request that ends first stops waiting (the
// question stays for the others joined to it, until its time-out).
func (b *approvals) wait(ctx context.Context, h *held) gateway.Answer {
	select {
	case <-h.done:
		return h.ans
	case <-ctx.Done():
		return gateway.Answer{Reason: gateway.ReasonApprovalTimeout, Msg: "the request ended before an answer"}
	}
}

// resolve ends a pending approval with ans (state and by for the view and
// the record; audited unless record is false). It reports whether id was
// still pending.
func (b *approvals) resolve(id string, ans gateway.Answer, state, by string, record bool) bool {
	b.mu.Lock()
	h, ok := b.pending[id]
	if ok {
		delete(b.pending, id)
		if b.per[h.a.Sandbox]--; b.per[h.a.Sandbox] <= 0 {
			delete(b.per, h.a.Sandbox)
		}
		if h.timer != nil {
			h.timer.Stop()
		}
		h.a.State, h.a.By = state, by
		h.a.Answer = answerOf(ans.Reason)
		if ans.Allow && h.a.Kind == string(policy.KindDNS) && ans.Reason == gateway.ReasonApprovedOnce {
			// The name's approval covers the connection that follows it.
			b.grantLocked(h.a.Sandbox, h.a.Host+":*", time.Now().Add(b.timeout))
		}
	}
	b.mu.Unlock()
	if !ok {
		return false
	}
	if record {
		if err := b.log.Log(answerRecord(h.a, ans)); err != nil {
			b.logger.Error("audit approval answer", oplog.SandboxKey, h.a.Sandbox, oplog.ErrorKey, err)
		}
		b.publish(h.a, h.owner)
	}
	h.ans = ans
	close(h.done)
	return true
}

func (b *approvals) grantLocked(sandbox, key string, until time.Time) {
	if b.grants[sandbox] == nil {
		b.grants[sandbox] = map[string]time.Time{}
	}
	b.grants[sandbox][key] = until
}

// answer is POST /v1/approvals/{id} by caller c.
func (b *approvals) answer(c caller, id, answer string) (*api.Approval, *api.Error) {
	var ans gateway.Answer
	switch answer {
	case api.AnswerOnce:
		ans = gateway.Answer{Allow: true, Reason: gateway.ReasonApprovedOnce}
	case api.AnswerSandbox:
		ans = gateway.Answer{Allow: true, Reason: gateway.ReasonApprovedSandbox}
	case api.AnswerPolicy:
		ans = gateway.Answer{Allow: true, Reason: gateway.ReasonApprovedPolicy}
	case api.AnswerDeny:
		ans = gateway.Answer{Reason: gateway.ReasonApprovalDenied}
	default:
		return nil, apiErr(api.CodeInvalidField, "answer", "answer: %q is not one of once, sandbox, policy, deny", answer)
	}
	b.mu.Lock()
	h, ok := b.pending[id]
	var a api.Approval
	if ok {
		a = h.a
	}
	b.mu.Unlock()
	if !ok || !mayAnswer(c, h.owner) {
		return nil, apiErr(api.CodeNotFound, "id", "no pending approval %.80q", id)
	}
	if b.inSandbox(c, a.Sandbox) {
		return nil, apiErr(api.CodeForbidden, "", "a process inside sandbox %s may not answer its own approvals", a.Sandbox)
	}
	by := "uid " + strconv.Itoa(c.uid)
	if c.uid == 0 {
		by = "root"
	}
	// A DNS question stands for the host on every port; the allow entry
	// of a bare host is what --allow host means (DNS, 443 and 80).
	hp, entry := net.JoinHostPort(a.Host, strconv.Itoa(a.Port)), net.JoinHostPort(a.Host, strconv.Itoa(a.Port))
	if a.Kind == string(policy.KindDNS) {
		hp, entry = a.Host+":*", a.Host
	}
	ans.Msg = fmt.Sprintf("%s answered %s for %s", by, answer, hp)
	switch answer {
	case api.AnswerSandbox:
		b.mu.Lock()
		b.grantLocked(a.Sandbox, hp, forLife)
		b.mu.Unlock()
	case api.AnswerPolicy:
		if e := b.addAllow(c, a.Sandbox, entry); e != nil {
			return nil, e
		}
	}
	state := api.ApprovalApproved
	if !ans.Allow {
		state = api.ApprovalDenied
	}
	if !b.resolve(id, ans, state, by, true) {
		return nil, apiErr(api.CodeConflict, "id", "approval %s was answered or timed out meanwhile", id)
	}
	a.State, a.Answer, a.By = state, answer, by
	return &a, nil
}

// forget drops what was granted to an ended sandbox and refuses what it
// still has waiting (nobody is left to serve it).
func (b *approvals) forget(sandbox string) {
	b.mu.Lock()
	delete(b.grants, sandbox)
	var ids []string
	for id, h := range b.pending {
		if h.a.Sandbox == sandbox {
			ids = append(ids, id)
		}
	}
	b.mu.Unlock()
	for _, id := range ids {
		b.resolve(id, gateway.Answer{Reason: gateway.ReasonApprovalDenied, Msg: "the sandbox ended before an answer"}, api.ApprovalDenied, "sandbox_ended", true)
	}
}

// list is the pending approvals caller c may answer, oldest first.
func (b *approvals) list(c caller) []api.Approval {
	b.mu.Lock()
	defer b.mu.Unlock()
	out := []api.Approval{}
	for _, h := range b.pending {
		if mayAnswer(c, h.owner) {
			out = append(out, h.a)
		}
	}
	slices.SortFunc(out, func(x, y api.Approval) int { return x.AskedAt.Compare(y.AskedAt) })
	return out
}

// subscribe starts a follow stream for c: the pending approvals it may
// answer now, then each change. A reader that falls 64 behind is cut off.
func (b *approvals) subscribe(c caller) (*approvalSub, []api.Approval, func()) {
	s := &approvalSub{c: c, ch: make(chan api.Approval, 64)}
	b.mu.Lock()
	b.subs[s] = struct{}{}
	b.mu.Unlock()
	return s, b.list(c), func() {
		b.mu.Lock()
		defer b.mu.Unlock()
		if _, ok := b.subs[s]; ok {
			delete(b.subs, s)
			s.closed = true
			close(s.ch)
		}
	}
}

func (b *approvals) publish(a api.Approval, owner int) {
	b.mu.Lock()
	defer b.mu.Unlock()
	for s := range b.subs {
		if !mayAnswer(s.c, owner) {
			continue
		}
		select {
		case s.ch <- a:
		default:
			delete(b.subs, s)
			s.closed = true
			close(s.ch)
		}
	}
}

// mayAnswer: root, or the sandbox's owner (owner -1: root only).
func mayAnswer(c caller, owner int) bool { return c.root() || owner >= 0 && c.uid == owner }

func answerOf(reason string) string {
	switch reason {
	case gateway.ReasonApprovedOnce:
		return api.AnswerOnce
	case gateway.ReasonApprovedSandbox:
		return api.AnswerSandbox
	case gateway.ReasonApprovedPolicy:
		return api.AnswerPolicy
	case gateway.ReasonApprovalDenied:
		return api.AnswerDeny
	}
	return ""
}

func newApprovalID() string {
	var b [8]byte
	_, _ = rand.Read(b[:])
	return "ap-" + hex.EncodeToString(b[:])
}

// questionRecord is the audit record of a question.
func questionRecord(a api.Approval) *audit.Record {
	extra := map[string]json.RawMessage{}
	put := func(k string, v any) { extra[k], _ = json.Marshal(v) }
	put("approval_id", a.ID)
	put("request_id", a.RequestID)
	put("request_kind", a.Kind)
	put("expires_at", a.ExpiresAt)
	return &audit.Record{ID: a.ID, Sandbox: a.Sandbox, Kind: audit.KindApproval, Host: a.Host, Port: a.Port,
		Method: a.Method, Path: a.Path, Reasons: []audit.Reason{{ID: gateway.ReasonApprovalAsked, Msg: a.Msg}}, Extra: extra}
}

// answerRecord is the audit record of an answer (or the time-out).
func answerRecord(a api.Approval, ans gateway.Answer) *audit.Record {
	extra := map[string]json.RawMessage{}
	put := func(k string, v any) { extra[k], _ = json.Marshal(v) }
	put("approval_id", a.ID)
	put("request_id", a.RequestID)
	put("by", a.By)
	decision := audit.DecisionDeny
	if ans.Allow {
		decision = audit.DecisionAllow
	}
	return &audit.Record{ID: a.ID + "/answer", Sandbox: a.Sandbox, Kind: audit.KindApproval, Decision: decision, Host: a.Host, Port: a.Port,
		Method: a.Method, Path: a.Path, Reasons: []audit.Reason{{ID: ans.Reason, Msg: ans.Msg}}, Extra: extra}
}

// buildApprovals builds the broker the DNS filter and the gateway ask
// (airlock serve only: Options.Approvals). Its sandboxes' owners and allow
// lists are looked up when a question comes, by then the registry exists;
// guard checks the webhook's addresses as the gateway checks upstreams'.
func (d *Daemon) buildApprovals(cfg config.Config, guard *ipguard.Guard) {
	b := newApprovals(time.Duration(cfg.Approval.Timeout), cfg.Approval.MaxPendingPerSandbox, d.audit, d.log.With(oplog.ComponentKey, "approvals"))
	b.owner = func(id string) (int, bool) {
		if d.reg == nil {
			return 0, false
		}
		sb, ok := d.reg.get(id)
		if !ok {
			return 0, false
		}
		return sb.owner, true
	}
	b.inSandbox = func(c caller, id string) bool {
		if d.netns == nil {
			return false
		}
		s, ok := d.netns.Get(id)
		return ok && callerInNetns(c, s.Path)
	}
	b.addAllow = d.approvePolicy
	if cfg.Approval.Webhook.URL != "" {
		b.notify = d.webhook(cfg.Approval.Webhook, guard)
	}
	d.approvals = b
}

// approvePolicy adds entry to sandbox id's allow list for caller c (the
// answer policy), audited as an update by c.
func (d *Daemon) approvePolicy(c caller, id, entry string) *api.Error {
	sb, ok := d.reg.get(id)
	if !ok {
		return apiErr(api.CodeConflict, "answer", "answer policy: %s is not a sandbox of the API (an attached or run sandbox has no allow list to add to); answer once or sandbox", id)
	}
	return d.updateSandbox(c, sb, &api.UpdateSandboxRequest{AllowAdd: []string{entry}})
}

// setTimeout changes approval.timeout for questions asked from now on.
func (b *approvals) setTimeout(d time.Duration) {
	b.mu.Lock()
	b.timeout = d
	b.mu.Unlock()
}

// dnsApprove is the DNS filter's Approve: the question asked of the broker
// as kind dns to the name, port 53.
func (d *Daemon) dnsApprove(ctx context.Context, sb policy.Sandbox, name, msg string, reasons []policy.Reason) (bool, string, string) {
	a := d.approvals.Approve(ctx, gateway.Question{Sandbox: sb.ID, Kind: policy.KindDNS, Host: name, Port: 53, Msg: msg, Reasons: reasons})
	return a.Allow, a.Reason, a.Msg
}
