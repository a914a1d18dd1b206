package config

import (
	"bytes"
	"reflect"
	"regexp"
	"strings"
	"testing"
)

// TestExampleIsTheDefault: the example's active keys are the defaults, so a
// reader who copies it changes nothing until they edit a value.
func TestExampleIsTheDefault(t *testing.T) {
	got, err := Decode(bytes.NewReader(Example()))
	if err != nil {
		t.Fatalf("the example does not decode: %v", err)
	}
	want := Default()
	emptyToNil(reflect.ValueOf(&got).Elem())
	if !reflect.DeepEqual(got, want) {
		t.Errorf("decoded example differs from Default():\ngot  %+v\nwant %+v", got, want)
	}
}

// emptyToNil sets v's empty slices and maps to nil, so "[]" in the example
// compares equal to an absent key.
func emptyToNil(v reflect.Value) {
	switch v.Kind() {
	case reflect.Slice, reflect.Map:
		if v.Len() == 0 && v.CanSet() {
			v.Set(reflect.Zero(v.Type()))
		}
	case reflect.Struct:
		for i := range v.NumField() {
			emptyToNil(v.Field(i))
		}
	}
}

// TestExampleNamesEveryKey: every key of the schema appears in the example,
// as an active line or a commented one, under its section.
func TestExampleNamesEveryKey(t *testing.T) {
	text := string(Example())
	for _, path := range yamlKeys(reflect.TypeFor[Config](), "") {
		section, key, _ := strings.Cut(path, ".")
		if key == "" {
			key, section = section, ""
		}
		leaf := key[strings.LastIndex(key, ".")+1:]
		re := regexp.MustCompile(`(?m)^[ #]*(- )?` + regexp.QuoteMeta(leaf) + `:|[{,] ?` + regexp.QuoteMeta(leaf) + `:`)
		start := 0
		if section != "" {
			start = strings.Index(text, "\n"+section+":\n")
			if start < 0 {
				t.Errorf("section %s: missing from the example", section)
				continue
			}
		}
		end := len(text)
		if section != "" {
			if next := regexp.MustCompile(`\n[a-z_]+:\n`).FindStringIndex(text[start+1:]); next != nil {
				end = start + 1 + next[0]
			}
		}
		if !re.MatchString(text[start:end]) {
			t.Errorf("%s: not in the example's %s section", path, section)
		}
	}
}

// yamlKeys lists the dotted yaml key paths of t's fields, recursing into
// structs, pointers to structs and slices of structs.
func yamlKeys(t reflect.Type, prefix string) []string {
	for t.Kind() == reflect.Pointer || t.Kind() == reflect.Slice {
		t = t.Elem()
	}
	if t.Kind() != reflect.Struct {
		return nil
	}
	var out []string
	for f := range t.Fields() {
		tag, _, _ := strings.Cut(f.Tag.Get("yaml"), ",")
		if tag == "" || tag == "-" || !f.IsExported() {
			continue
		}
		p := prefix + tag
		out = append(out, p)
		ft := f.Type
		for ft.Kind() == reflect.Pointer || ft.Kind() == reflect.Slice {
			ft = ft.Elem()
		}
		if ft.Kind() == reflect.Struct && ft.PkgPath() == t.PkgPath() && ft.NumField() > 0 && !isScalar(ft) {
			out = append(out, yamlKeys(ft, p+".")...)
		}
	}
	return out
}

// isScalar: config's own types that read from one scalar (FreeSpace).
func isScalar(t reflect.Type) bool {
	return t == reflect.TypeFor[FreeSpace]()
}
