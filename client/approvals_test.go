package client_test

import (
	"errors"
	"testing"

	"github.com/airlock-dev/airlock/api"
)

// TestApprovals: Approvals lists, FollowApprovals streams the pending ones
// then each question and answer, AnswerApproval answers; a bad answer is
// an *api.Error naming the field.
func TestApprovals(t *testing.T) {
	srv, c := newFake(t)
	srv.Ask(api.Approval{ID: "ap-1", Sandbox: "sb-1", Kind: "connect", Host: "new.example", Port: 443, Msg: "new host"})
	list, err := c.Approvals(t.Context())
	if err != nil || len(list) != 1 || list[0].ID != "ap-1" || list[0].State != api.ApprovalPending {
		t.Fatalf("Approvals: got %+v, %v", list, err)
	}
	st, err := c.FollowApprovals(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	if a, err := st.Next(); err != nil || a.ID != "ap-1" {
		t.Fatalf("first line: %+v, %v", a, err)
	}
	srv.Ask(api.Approval{ID: "ap-2", Sandbox: "sb-1", Kind: "http", Host: "new.example", Port: 443, Method: "GET", Path: "/x"})
	if a, err := st.Next(); err != nil || a.ID != "ap-2" || a.Path != "/x" {
		t.Fatalf("a new question: %+v, %v", a, err)
	}
	got, err := c.AnswerApproval(t.Context(), "ap-2", api.AnswerOnce)
	if err != nil || got.State != api.ApprovalApproved || got.Answer != api.AnswerOnce {
		t.Fatalf("AnswerApproval: %+v, %v", got, err)
	}
	if a, err := st.Next(); err != nil || a.ID != "ap-2" || a.State != api.ApprovalApproved {
		t.Fatalf("the answer on the stream: %+v, %v", a, err)
	}
	var ae *api.Error
	if _, err := c.AnswerApproval(t.Context(), "ap-1", "maybe"); !errors.As(err, &ae) || ae.Field != "answer" {
		t.Errorf("a bad answer: got %v, want invalid_field answer", err)
	}
	if _, err := c.AnswerApproval(t.Context(), "ap-9", api.AnswerDeny); !errors.As(err, &ae) || ae.Code != api.CodeNotFound {
		t.Errorf("an unknown approval: got %v, want not_found", err)
	}
}
