package client

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"sort"
	"strings"

	"github.com/airlock-dev/airlock/api"
)

// CreateSandbox creates a sandbox (POST /v1/sandboxes) and returns it once it
// is ready to run commands.
func (c *Client) CreateSandbox(ctx context.Context, req api.CreateSandboxRequest) (*api.Sandbox, error) {
	var sb api.Sandbox
	if err := c.doJSON(ctx, http.MethodPost, "/sandboxes", nil, req, &sb); err != nil {
		return nil, err
	}
	return &sb, nil
}

// ListSandboxes returns the sandboxes the caller may see (its own; root sees
// all) that carry every label in labels (nil: all of them).
func (c *Client) ListSandboxes(ctx context.Context, labels map[string]string) ([]api.Sandbox, error) {
	var q url.Values
	if len(labels) > 0 {
		keys := make([]string, 0, len(labels))
		for k := range labels {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		q = url.Values{}
		for _, k := range keys {
			q.Add("label", k+"="+labels[k])
		}
	}
	var out []api.Sandbox
	if err := c.doJSON(ctx, http.MethodGet, "/sandboxes", q, nil, &out); err != nil {
		return nil, err
	}
	return out, nil
}

// GetSandbox returns one sandbox: state, limits, usage now, egress counters.
func (c *Client) GetSandbox(ctx context.Context, id string) (*api.Sandbox, error) {
	var sb api.Sandbox
	if err := c.doJSON(ctx, http.MethodGet, sandboxPath(id), nil, nil, &sb); err != nil {
		return nil, err
	}
	return &sb, nil
}

// UpdateSandbox changes a running sandbox's own rules (its allow list,
// labels and, for root, mode; PATCH /v1/sandboxes/{id}) and returns the
// sandbox as it is after the change. Requests the sandbox makes from then
// on are decided under the new rules; its open tunnels and websockets that
// they refuse are closed.
func (c *Client) UpdateSandbox(ctx context.Context, id string, req api.UpdateSandboxRequest) (*api.Sandbox, error) {
	var sb api.Sandbox
	if err := c.doJSON(ctx, http.MethodPatch, sandboxPath(id), nil, req, &sb); err != nil {
		return nil, err
	}
	return &sb, nil
}

// DeleteSandbox kills every process of the sandbox, removes it, and returns
// its final state and usage.
func (c *Client) DeleteSandbox(ctx context.Context, id string) (*api.Sandbox, error) {
	var sb api.Sandbox
	if err := c.doJSON(ctx, http.MethodDelete, sandboxPath(id), nil, nil, &sb); err != nil {
		return nil, err
	}
	return &sb, nil
}

// Run creates a sandbox, runs one command in it with its whole output
// captured, and deletes it (POST /v1/run).
func (c *Client) Run(ctx context.Context, req api.RunRequest) (*api.RunResponse, error) {
	var out api.RunResponse
	if err := c.doJSON(ctx, http.MethodPost, "/run", nil, req, &out); err != nil {
		return nil, err
	}
	return &out, nil
}

// Attach gives an existing network namespace (a container's, a VM's) the
// sandbox listeners and rules (root only).
func (c *Client) Attach(ctx context.Context, req api.AttachRequest) error {
	return c.doJSON(ctx, http.MethodPost, "/attach", nil, req, nil)
}

// CheckAttach asks whether an attached namespace's rules are still as attach
// left them (root only): InForce false names what is missing in Problem.
func (c *Client) CheckAttach(ctx context.Context, id string) (*api.AttachStatus, error) {
	var out api.AttachStatus
	if err := c.doJSON(ctx, http.MethodGet, "/attach/"+url.PathEscape(id), nil, nil, &out); err != nil {
		return nil, err
	}
	return &out, nil
}

// Detach restores an attached namespace as it was (root only).
func (c *Client) Detach(ctx context.Context, id string) error {
	return c.doJSON(ctx, http.MethodDelete, "/attach/"+url.PathEscape(id), nil, nil, nil)
}

// Reload recompiles the daemon's policy (root only) and returns the revision
// in force; a reload that fails keeps the old policy and returns the error.
func (c *Client) Reload(ctx context.Context) (string, error) {
	var out struct {
		PolicyRev string `json:"policy_rev"`
	}
	if err := c.doJSON(ctx, http.MethodPost, "/policy/reload", nil, nil, &out); err != nil {
		return "", err
	}
	return out.PolicyRev, nil
}

// SummaryRow is one row of GET /v1/summary: how many decisions of a kind
// went to a destination.
type SummaryRow struct {
	Decision string `json:"decision"`
	Kind     string `json:"kind"`
	Host     string `json:"host"`
	Port     int    `json:"port"`
	Count    int    `json:"count"`
}

// Summary returns the decisions by destination since the daemon started
// (root: all sandboxes; others: their own).
func (c *Client) Summary(ctx context.Context) ([]SummaryRow, error) {
	var out []SummaryRow
	if err := c.doJSON(ctx, http.MethodGet, "/summary", nil, nil, &out); err != nil {
		return nil, err
	}
	return out, nil
}

// Health returns the state of each of the daemon's parts, its policy
// revision, pool depth, audit state and the sandboxes the caller may see.
// A daemon with a failing part answers 503: Health then returns its parts
// and an *api.Error of code unavailable naming the failing ones, so a
// caller that only checks the error fails closed.
func (c *Client) Health(ctx context.Context) (*api.Health, error) {
	resp, err := c.send(ctx, request{method: http.MethodGet, path: "/health"})
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, maxJSONBody))
	if err != nil {
		return nil, fmt.Errorf("GET /health: response: %w", err)
	}
	var h api.Health
	switch {
	case resp.StatusCode == http.StatusOK:
		if err := json.Unmarshal(body, &h); err != nil {
			return nil, fmt.Errorf("GET /health: response: %w", err)
		}
		return &h, nil
	case resp.StatusCode == http.StatusServiceUnavailable && json.Unmarshal(body, &h) == nil && len(h.Parts) > 0:
		return &h, &api.Error{Code: api.CodeUnavailable, Message: "the daemon is not healthy: " + strings.Join(h.Failing(), "; ")}
	}
	return nil, errorOf(resp, body)
}

// OpenAPI returns the daemon's OpenAPI 3 description of its API.
func (c *Client) OpenAPI(ctx context.Context) (json.RawMessage, error) {
	var doc json.RawMessage
	if err := c.doJSON(ctx, http.MethodGet, "/openapi.json", nil, nil, &doc); err != nil {
		return nil, err
	}
	return doc, nil
}
