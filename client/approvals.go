package client

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"sync"

	"github.com/airlock-dev/airlock/api"
)

// maxApprovalLine bounds one line of the approvals stream.
const maxApprovalLine = 1 << 20

// Approvals lists the requests held for an answer that the caller may
// give (root: all; others: their sandboxes'), oldest first.
func (c *Client) Approvals(ctx context.Context) ([]api.Approval, error) {
	var out []api.Approval
	if err := c.doJSON(ctx, http.MethodGet, "/approvals", nil, nil, &out); err != nil {
		return nil, err
	}
	return out, nil
}

// AnswerApproval answers a held request: api.AnswerOnce, AnswerSandbox,
// AnswerPolicy or AnswerDeny. It returns the approval as answered.
func (c *Client) AnswerApproval(ctx context.Context, id, answer string) (*api.Approval, error) {
	var out api.Approval
	if err := c.doJSON(ctx, http.MethodPost, "/approvals/"+url.PathEscape(id), nil, api.ApprovalAnswer{Answer: answer}, &out); err != nil {
		return nil, err
	}
	return &out, nil
}

// ApprovalStream is GET /v1/approvals?follow=true: the pending approvals,
// then each new question and each answer or time-out. It does not
// reconnect.
type ApprovalStream struct {
	ctx  context.Context
	body io.ReadCloser
	r    *bufio.Reader
	once sync.Once
}

// FollowApprovals opens the approvals stream.
func (c *Client) FollowApprovals(ctx context.Context) (*ApprovalStream, error) {
	resp, err := c.do(ctx, request{method: http.MethodGet, path: "/approvals", query: url.Values{"follow": {"true"}}})
	if err != nil {
		return nil, err
	}
	if ct := resp.Header.Get("Content-Type"); !strings.HasPrefix(ct, "application/x-ndjson") {
		resp.Body.Close()
		return nil, fmt.Errorf("approvals: content type %q, want application/x-ndjson", ct)
	}
	return &ApprovalStream{ctx: ctx, body: resp.Body, r: bufio.NewReaderSize(resp.Body, 64<<10)}, nil
}

// Next returns the next approval (its State says whether it is a question
// or an answer); io.EOF when the daemon ended the stream.
func (s *ApprovalStream) Next() (api.Approval, error) {
	for {
		line, err := readLine(s.r, maxApprovalLine)
		if err != nil {
			if s.ctx.Err() != nil {
				return api.Approval{}, fmt.Errorf("approvals: %w", s.ctx.Err())
			}
			if errors.Is(err, io.EOF) {
				return api.Approval{}, io.EOF
			}
			return api.Approval{}, fmt.Errorf("approvals: %w", err)
		}
		if len(bytes.TrimSpace(line)) == 0 {
			continue // the keep-alive
		}
		var a api.Approval
		if err := json.Unmarshal(line, &a); err != nil {
			return api.Approval{}, fmt.Errorf("approvals: a line is not an Approval: %w", err)
		}
		return a, nil
	}
}

// Close ends the stream.
func (s *ApprovalStream) Close() error {
	var err error
	s.once.Do(func() { err = s.body.Close() })
	return err
}
