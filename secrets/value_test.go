package secrets

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"testing"

	"gopkg.in/yaml.v3"

	"github.com/airlock-dev/airlock/audit"
)

const canary = "canary-S3cr3t/Value+with=odd&chars_0123456789"

func TestValueNeverPrints(t *testing.T) {
	v := newValue(canary)
	type inner struct {
		hidden Value
		Shown  Value
	}
	holder := inner{hidden: v, Shown: v}
	ptr := &holder
	wrapped := fmt.Errorf("outer: %w", fmt.Errorf("inner %v", v))
	outputs := map[string]string{}
	for _, verb := range []string{"%v", "%+v", "%#v", "%s", "%q", "%x", "%X", "%d", "%10.3s", "%T"} {
		outputs["value "+verb] = fmt.Sprintf(verb, v)
		outputs["struct "+verb] = fmt.Sprintf(verb, holder)
		outputs["ptr "+verb] = fmt.Sprintf(verb, ptr)
		outputs["slice "+verb] = fmt.Sprintf(verb, []Value{v})
		outputs["map "+verb] = fmt.Sprintf(verb, map[string]Value{"k": v})
	}
	outputs["String"] = v.String()
	outputs["GoString"] = v.GoString()
	outputs["error chain"] = wrapped.Error()
	outputs["unwrapped"] = errors.Unwrap(wrapped).Error()
	j, err := json.Marshal(holder)
	if err != nil {
		t.Fatal(err)
	}
	outputs["json"] = string(j)
	txt, _ := v.MarshalText()
	outputs["text"] = string(txt)
	y, err := yaml.Marshal(map[string]Value{"k": v})
	if err != nil {
		t.Fatal(err)
	}
	outputs["yaml"] = string(y)
	var logs bytes.Buffer
	jl := slog.New(slog.NewJSONHandler(&logs, nil))
	jl.Info("msg", "v", v, "any", any(v), "holder", holder, "err", wrapped)
	tl := slog.New(slog.NewTextHandler(&logs, nil))
	tl.Info("msg", "v", v, "holder", holder, slog.Any("group", []Value{v}))
	outputs["slog"] = logs.String()
	if _, err := v.GobEncode(); err == nil {
		t.Error("GobEncode: got nil error, want a refusal")
	}

	for name, out := range outputs {
		for _, form := range CanaryForms(canary) {
			if strings.Contains(out, form) {
				t.Errorf("%s: output %q contains a form of the value", name, out)
			}
		}
	}
	for _, name := range []string{"value %v", "value %+v", "value %#v", "value %s", "value %x", "String", "GoString", "text"} {
		if outputs[name] != audit.Redacted {
			t.Errorf("%s: got %q, want %q", name, outputs[name], audit.Redacted)
		}
	}
	if string(j) != `{"Shown":"[REDACTED]"}` {
		t.Errorf("json: got %s, want {\"Shown\":\"[REDACTED]\"}", j)
	}
	if v.reveal() != canary {
		t.Errorf("reveal: got a different value")
	}
}
