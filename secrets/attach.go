package secrets

import (
	"context"
	"errors"
	"fmt"
	"regexp"
	"strconv"
	"sync"
)

// Bindings attached through the daemon API.
//
// A binding is chosen by the secrets file's owner (root), never by a caller:
// a caller names a binding by its id (BindingConfig.ID), and only a binding
// with an attach block may be named. Root may attach any such binding; any
// other caller only one whose attach.uids lists its uid. A caller never names
// a secret, a source, a file or a host: what a binding reaches and where its
// value comes from stay root's. Nothing here returns a value: Attach answers
// with the binding's id, secret id, destination, mode and the value's keyed
// fingerprint (the audit log's).
//
// Labels are chosen by the caller too, so a binding selected by labels is
// usable by any caller that sets them; attach with uids is the way to give
// one secret to some callers only.

// AttachConfig makes a binding attachable at sandbox creation.
type AttachConfig struct {
	// UIDs are the callers other than root that may attach the binding.
	// Empty: root only.
	UIDs []int `yaml:"uids"`
}

var bindingIDRE = sync.OnceValue(func() *regexp.Regexp { return regexp.MustCompile(`^[a-z0-9][a-z0-9._-]{0,62}$`) })

func (b *BindingConfig) validateAttach() error {
	if b.ID != "" && !bindingIDRE().MatchString(b.ID) {
		return fmt.Errorf("id: %q is not 1-63 of a-z 0-9 . _ - starting with a letter or digit", b.ID)
	}
	if b.Attach == nil {
		return nil
	}
	if b.ID == "" {
		return errors.New("attach: the binding needs an id (callers name it)")
	}
	for _, u := range b.Attach.UIDs {
		if u < 0 {
			return fmt.Errorf("attach.uids: %d is not a uid", u)
		}
	}
	return nil
}

// AttachError refuses a binding a caller asked for. It names the binding and
// says whether it exists for the caller; Forbidden distinguishes "not granted"
// from "no such attachable binding" for the API's status code, but both read
// the same to a caller who may not see the file.
type AttachError struct {
	Binding   string
	Forbidden bool
}

func (e *AttachError) Error() string {
	if e.Forbidden {
		return fmt.Sprintf("secret binding %q is not granted to this caller", e.Binding)
	}
	return fmt.Sprintf("secret binding %q is not an attachable binding", e.Binding)
}

// AttachedBinding describes an attached binding without its value.
type AttachedBinding struct {
	ID     string
	Secret string
	Host   string
	Port   int
	Mode   string
	// Fingerprint is the current value's keyed fingerprint, as in audit
	// records; empty when the source cannot be read now (Err says why).
	Fingerprint string
	Version     string
	Err         string
}

// Attach binds the named bindings to a sandbox for a caller (uid; 0 is root).
// It is all or nothing: one refused id refuses all, and nothing is attached.
// Call it before Placeholders for the sandbox; Forget detaches.
func (in *Injector) Attach(sandboxID string, uid int, ids []string) ([]AttachedBinding, error) {
	if sandboxID == "" {
		return nil, errors.New("secrets: attach: empty sandbox id")
	}
	set := map[string]bool{}
	var picked []*binding
	for _, id := range ids {
		if set[id] {
			return nil, fmt.Errorf("secrets: attach: binding %q named twice", id)
		}
		b := in.attachable(id)
		if b == nil {
			return nil, &AttachError{Binding: id}
		}
		if uid != 0 && !b.attachUIDs[uid] {
			return nil, &AttachError{Binding: id, Forbidden: true}
		}
		set[id] = true
		picked = append(picked, b)
	}
	if len(picked) == 0 {
		return nil, nil
	}
	in.mu.Lock()
	if in.attached[sandboxID] != nil {
		in.mu.Unlock()
		return nil, fmt.Errorf("secrets: attach: sandbox %s already has bindings", sandboxID)
	}
	in.attached[sandboxID] = set
	in.mu.Unlock()
	out := make([]AttachedBinding, 0, len(picked))
	for _, b := range picked {
		out = append(out, in.describe(b))
	}
	return out, nil
}

func (in *Injector) attachable(id string) *binding {
	for _, b := range in.bindings {
		if b.id == id && b.attachUIDs != nil {
			return b
		}
	}
	return nil
}

func (in *Injector) describe(b *binding) AttachedBinding {
	a := AttachedBinding{ID: b.id, Secret: b.secret.cfg.ID, Host: b.host, Port: b.port, Mode: b.mode}
	if b.aws != nil {
		a.Mode = "aws_sigv4"
	}
	v, err := b.secret.get(context.Background())
	if err != nil {
		a.Err = "the source cannot be read now"
		return a
	}
	a.Fingerprint, a.Version = v.fp, v.id
	return a
}

// attachedTo returns the binding ids attached to a sandbox; the map is
// never changed after it is stored, so it is read without the lock.
func (in *Injector) attachedTo(sandboxID string) map[string]bool {
	if sandboxID == "" {
		return nil
	}
	in.mu.Lock()
	defer in.mu.Unlock()
	return in.attached[sandboxID]
}

// applies reports whether b applies to sb: its selector matches, or it was
// attached to sb (att is attachedTo(sb.ID)).
func (b *binding) applies(sb Sandbox, att map[string]bool) bool {
	return b.matchSandbox(sb) || (b.id != "" && att[b.id])
}

// String names the attached binding for logs and the CLI.
func (a AttachedBinding) String() string {
	return a.ID + " (" + a.Secret + " -> " + a.Host + ":" + strconv.Itoa(a.Port) + ")"
}
