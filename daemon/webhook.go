package daemon

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"net/netip"
	"syscall"
	"time"

	"github.com/airlock-dev/airlock/api"
	"github.com/airlock-dev/airlock/config"
	"github.com/airlock-dev/airlock/ipguard"
	"github.com/airlock-dev/airlock/oplog"
)

// The approval webhook: each question is POSTed as JSON (api.Approval) to
// approval.webhook.url, once, in the background; the answer comes back
// through the API like any other. The connection passes the gateway's
// address guard (ipguard with upstream.allow_cidrs and the daemon's own
// addresses): a webhook URL cannot reach what a sandbox could not.

// webhookPoster posts questions to one URL.
type webhookPoster struct {
	url    string
	client *http.Client
}

// webhook returns the broker's notify for cfg, dialing through guard.
func (d *Daemon) webhook(cfg config.ApprovalWebhook, guard *ipguard.Guard) func(api.Approval) {
	p := newWebhookPoster(cfg.URL, time.Duration(cfg.Timeout), guard)
	log := d.log.With(oplog.ComponentKey, "approvals")
	return func(a api.Approval) {
		go func() {
			if err := p.post(a); err != nil {
				log.Warn("approval webhook failed", oplog.SandboxKey, a.Sandbox, "approval_id", a.ID, oplog.ErrorKey, err)
			}
		}()
	}
}

func newWebhookPoster(url string, timeout time.Duration, guard *ipguard.Guard) *webhookPoster {
	dialer := &net.Dialer{Timeout: timeout, Control: func(_, address string, _ syscall.RawConn) error {
		ap, err := netip.ParseAddrPort(address)
		if err != nil {
			return fmt.Errorf("webhook: %w", err)
		}
		return guard.Check(ap.Addr().Unmap())
	}}
	tr := &http.Transport{DialContext: dialer.DialContext, Proxy: nil, TLSHandshakeTimeout: timeout, MaxIdleConns: 1}
	return &webhookPoster{url: url, client: &http.Client{Transport: tr, Timeout: timeout,
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}}
}

// post sends one question; a status other than 2xx is an error.
func (p *webhookPoster) post(a api.Approval) error {
	body, err := json.Marshal(a)
	if err != nil {
		return err
	}
	req, err := http.NewRequestWithContext(context.Background(), http.MethodPost, p.url, bytes.NewReader(body))
	if err != nil {
		return err
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := p.client.Do(req)
	if err != nil {
		return err
	}
	resp.Body.Close()
	if resp.StatusCode/100 != 2 {
		return fmt.Errorf("webhook answered %s", resp.Status)
	}
	return nil
}
