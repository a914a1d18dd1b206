package daemon

import (
	"errors"

	"github.com/airlock-dev/airlock/api"
	"github.com/airlock-dev/airlock/secrets"
)

// maxSecretBindings bounds CreateSandboxRequest.SecretBindings.
const maxSecretBindings = 32

// validateSecretBindings checks the shape of the binding ids a create asks
// for; whether the caller may attach them is Attach's (attachBindings).
func (d *Daemon) validateSecretBindings(ids []string) ([]string, *api.Error) {
	if len(ids) == 0 {
		return nil, nil
	}
	if d.secrets == nil {
		return nil, apiErr(api.CodeInvalidField, "secret_bindings", "secret_bindings: this daemon has no secrets file (secrets.file)")
	}
	if len(ids) > maxSecretBindings {
		return nil, apiErr(api.CodeInvalidField, "secret_bindings", "secret_bindings: %d names, at most %d", len(ids), maxSecretBindings)
	}
	for _, id := range ids {
		if id == "" {
			return nil, apiErr(api.CodeInvalidField, "secret_bindings", "secret_bindings: an empty binding id")
		}
	}
	return append([]string(nil), ids...), nil
}

// attachBindings attaches the bindings p asks for to sandbox id, for caller
// c, and records what was attached in p. A binding the caller was not
// granted is a 403, one that is not attachable a 400; either way nothing is
// attached.
func (d *Daemon) attachBindings(id string, c caller, p *createParams) *api.Error {
	if len(p.secretBindings) == 0 {
		return nil
	}
	got, err := d.secrets.Attach(id, c.uid, p.secretBindings)
	if err != nil {
		var ae *secrets.AttachError
		switch {
		case errors.As(err, &ae) && ae.Forbidden:
			return apiErr(api.CodeForbidden, "secret_bindings", "secret_bindings: %v (attach.uids in the secrets file)", ae)
		case errors.As(err, &ae):
			return apiErr(api.CodeInvalidField, "secret_bindings", "secret_bindings: %v (a binding with an id and an attach block)", ae)
		}
		return apiErr(api.CodeInternal, "secret_bindings", "secret_bindings: %v", err)
	}
	p.bindings = make([]api.SecretBinding, 0, len(got))
	for _, b := range got {
		p.bindings = append(p.bindings, api.SecretBinding{ID: b.ID, Secret: b.Secret, Host: b.Host, Port: b.Port,
			Mode: b.Mode, Fingerprint: b.Fingerprint, Version: b.Version})
	}
	return nil
}

// withAWSFile adds ~/.aws/credentials holding the sandbox's AWS placeholders
// (secrets.AWSCredentialsFileFor) to files, in a copy; it takes the place
// of a canary credentials file, since a sandbox bound to AWS has real work
// for that file. sandboxd writes a home file only where none exists, so a
// user's own file is never overwritten.
func withAWSFile(files map[string][]byte, ph map[string]string) map[string][]byte {
	data, ok := secrets.AWSCredentialsFileFor(ph)
	if !ok {
		return files
	}
	out := make(map[string][]byte, len(files)+1)
	for k, v := range files {
		out[k] = v
	}
	out[secrets.AWSCredentialsFile] = data
	return out
}
