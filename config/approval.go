package config

import (
	"cmp"
	"fmt"
	"net/url"
	"time"
)

// Defaults and bounds of approval.
const (
	DefaultApprovalTimeout        = 60 * time.Second
	DefaultApprovalMaxPending     = 8
	DefaultApprovalWebhookTimeout = 5 * time.Second
	MaxApprovalTimeout            = 30 * time.Minute
	MaxApprovalPending            = 1024
)

// Approval is approval: how requests the policy asks about (an ask rule, or
// on_unmatched "ask") are held for a person's answer (the daemon's
// /v1/approvals, `airlock approve`, the webhook).
type Approval struct {
	// Timeout is how long a request is held; then it is denied with reason
	// approval_timeout (default 60s, at most 30m).
	Timeout Duration `yaml:"timeout"`
	// MaxPendingPerSandbox bounds the requests of one sandbox held at once;
	// one more is denied at once with reason approval_limit (default 8).
	MaxPendingPerSandbox int `yaml:"max_pending_per_sandbox"`
	// Webhook, when set, is POSTed each question as JSON (the API's
	// Approval object); the answer comes back through the API.
	Webhook ApprovalWebhook `yaml:"webhook"`
}

// ApprovalWebhook is approval.webhook.
type ApprovalWebhook struct {
	// URL is http(s)://host[:port]/path, no credentials; empty: no webhook.
	// It is dialed through the gateway's address guard: a loopback or
	// private address needs upstream.allow_cidrs.
	URL string `yaml:"url"`
	// Timeout bounds one POST (default 5s).
	Timeout Duration `yaml:"timeout"`
}

func (a *Approval) applyDefaults() {
	a.Timeout = cmp.Or(a.Timeout, Duration(DefaultApprovalTimeout))
	a.MaxPendingPerSandbox = cmp.Or(a.MaxPendingPerSandbox, DefaultApprovalMaxPending)
	a.Webhook.Timeout = cmp.Or(a.Webhook.Timeout, Duration(DefaultApprovalWebhookTimeout))
}

func (a *Approval) validate() error {
	if t := time.Duration(a.Timeout); t < time.Second || t > MaxApprovalTimeout {
		return fmt.Errorf("approval.timeout: %s is not between 1s and %s", t, MaxApprovalTimeout)
	}
	if n := a.MaxPendingPerSandbox; n < 1 || n > MaxApprovalPending {
		return fmt.Errorf("approval.max_pending_per_sandbox: %d is not between 1 and %d", n, MaxApprovalPending)
	}
	if t := time.Duration(a.Webhook.Timeout); t < 100*time.Millisecond || t > time.Minute {
		return fmt.Errorf("approval.webhook.timeout: %s is not between 100ms and 1m", t)
	}
	if a.Webhook.URL == "" {
		return nil
	}
	u, err := url.Parse(a.Webhook.URL)
	switch {
	case err != nil:
		return fmt.Errorf("approval.webhook.url: %w", err)
	case u.Scheme != "http" && u.Scheme != "https" || u.Host == "":
		return fmt.Errorf("approval.webhook.url: %q is not http(s)://host[:port]/path", a.Webhook.URL)
	case u.User != nil:
		return fmt.Errorf("approval.webhook.url: credentials in the URL are refused")
	}
	return nil
}
