package client_test

import (
	"errors"
	"slices"
	"testing"

	"github.com/airlock-dev/airlock/api"
)

// TestUpdateSandbox: UpdateSandbox sends PATCH /v1/sandboxes/{id} with the
// fields given (and only them) and returns the sandbox after the change; an
// error the daemon returns is an *api.Error naming the field.
func TestUpdateSandbox(t *testing.T) {
	srv, c := newFake(t)
	sb := newSandbox(t, c, api.CreateSandboxRequest{Labels: map[string]string{"team": "ml"}, Allow: []string{"a.example.com"}})
	prod := "prod"
	got, err := c.UpdateSandbox(t.Context(), sb.ID, api.UpdateSandboxRequest{
		AllowAdd: []string{"b.example.com"}, AllowRemove: []string{"a.example.com"},
		Labels: map[string]*string{"tier": &prod, "team": nil},
	})
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(got.Allow, []string{"b.example.com"}) || got.Labels["tier"] != "prod" || got.Labels["team"] != "" {
		t.Errorf("got allow %q labels %v, want [b.example.com] and tier=prod alone", got.Allow, got.Labels)
	}
	ups := srv.Updates()
	if len(ups) != 1 || ups[0].Allow != nil || ups[0].Mode != "" {
		t.Errorf("requests: got %+v, want one without allow or mode", ups)
	}
	_, err = c.UpdateSandbox(t.Context(), sb.ID, api.UpdateSandboxRequest{AllowRemove: []string{"nope.example.com"}})
	var ae *api.Error
	if !errors.As(err, &ae) || ae.Code != api.CodeInvalidField || ae.Field != "allow_remove[0]" {
		t.Errorf("removing an absent entry: got %v, want invalid_field allow_remove[0]", err)
	}
	_, err = c.UpdateSandbox(t.Context(), "sb-nope", api.UpdateSandboxRequest{Mode: "report"})
	if !errors.As(err, &ae) || ae.Code != api.CodeNotFound {
		t.Errorf("unknown sandbox: got %v, want not_found", err)
	}
}
