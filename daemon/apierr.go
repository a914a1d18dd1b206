package daemon

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"reflect"
	"slices"
	"strings"

	"github.com/airlock-dev/airlock/api"
)

// maxAPIBody bounds a JSON request body on the control API.
const maxAPIBody = 1 << 20

// apiErr builds an api.Error; field may be "".
func apiErr(code, field, format string, args ...any) *api.Error {
	return &api.Error{Code: code, Field: field, Message: fmt.Sprintf(format, args...)}
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}

func writeError(w http.ResponseWriter, e *api.Error) {
	writeJSON(w, api.StatusOf(e.Code), e)
}

// decodeBody reads one JSON object from r's body into v strictly: at most
// maxAPIBody bytes, no unknown field, no trailing data. Errors name the field
// at fault ("limits.memory"). An empty body decodes as {} when emptyOK.
func decodeBody(r *http.Request, v any, emptyOK bool) *api.Error {
	data, err := io.ReadAll(io.LimitReader(r.Body, maxAPIBody+1))
	if err != nil {
		return apiErr(api.CodeBadRequest, "", "request body: %v", err)
	}
	if len(data) > maxAPIBody {
		return apiErr(api.CodeTooLarge, "", "request body: over %d bytes", maxAPIBody)
	}
	if len(bytes.TrimSpace(data)) == 0 {
		if emptyOK {
			return nil
		}
		return apiErr(api.CodeBadRequest, "", "request body: empty, want a JSON object")
	}
	dec := json.NewDecoder(bytes.NewReader(data))
	var raw json.RawMessage
	if err := dec.Decode(&raw); err != nil {
		return apiErr(api.CodeBadRequest, "", "request body: %v", err)
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		return apiErr(api.CodeBadRequest, "", "request body: trailing data after the JSON object")
	}
	return decodeStrict(raw, reflect.ValueOf(v).Elem(), "")
}

// decodeStrict decodes the JSON object raw into the struct rv field by field,
// so an unknown field or a value a field refuses (a size "12Q", a string for
// a number) is reported with its path. Keys match json tags exactly.
func decodeStrict(raw json.RawMessage, rv reflect.Value, prefix string) *api.Error {
	what := "request body"
	if prefix != "" {
		what = strings.TrimSuffix(prefix, ".")
	}
	if bytes.Equal(bytes.TrimSpace(raw), []byte("null")) {
		return nil
	}
	var obj map[string]json.RawMessage
	if err := json.Unmarshal(raw, &obj); err != nil {
		return apiErr(api.CodeBadRequest, strings.TrimSuffix(prefix, "."), "%s: want a JSON object", what)
	}
	fields := jsonFields(rv.Type())
	keys := make([]string, 0, len(obj))
	for k := range obj {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	for _, k := range keys {
		idx, ok := fields[k]
		if !ok {
			return apiErr(api.CodeBadRequest, prefix+k, "unknown field %q", prefix+k)
		}
		fv := rv.FieldByIndex(idx)
		if isPlainStruct(fv.Type()) {
			if e := decodeStrict(obj[k], fv, prefix+k+"."); e != nil {
				return e
			}
			continue
		}
		// An optional object (*api.Pod, *api.Inbound) is as strict as an
		// embedded one; null leaves it nil.
		if fv.Kind() == reflect.Pointer && isPlainStruct(fv.Type().Elem()) {
			if bytes.Equal(bytes.TrimSpace(obj[k]), []byte("null")) {
				continue
			}
			v := reflect.New(fv.Type().Elem())
			if e := decodeStrict(obj[k], v.Elem(), prefix+k+"."); e != nil {
				return e
			}
			fv.Set(v)
			continue
		}
		if err := json.Unmarshal(obj[k], fv.Addr().Interface()); err != nil {
			return apiErr(api.CodeInvalidField, prefix+k, "%s: %s", prefix+k, jsonErrText(err))
		}
	}
	return nil
}

// jsonFields maps each json name of t's fields (embedded structs flattened)
// to its index.
func jsonFields(t reflect.Type) map[string][]int {
	out := map[string][]int{}
	for i := 0; i < t.NumField(); i++ {
		f := t.Field(i)
		if !f.IsExported() {
			continue
		}
		name, _, _ := strings.Cut(f.Tag.Get("json"), ",")
		if name == "-" {
			continue
		}
		if f.Anonymous && name == "" && f.Type.Kind() == reflect.Struct {
			for k, idx := range jsonFields(f.Type) {
				out[k] = append([]int{i}, idx...)
			}
			continue
		}
		if name == "" {
			name = f.Name
		}
		out[name] = []int{i}
	}
	return out
}

// isPlainStruct: a struct decoded field by field (not one with its own
// UnmarshalJSON or UnmarshalText, like time.Time).
func isPlainStruct(t reflect.Type) bool {
	if t.Kind() != reflect.Struct {
		return false
	}
	p := reflect.PointerTo(t)
	return !p.Implements(reflect.TypeFor[json.Unmarshaler]()) &&
		!p.Implements(reflect.TypeFor[interface{ UnmarshalText([]byte) error }]())
}

// jsonErrText says what was wrong with a value without the decoder's Go type
// names.
func jsonErrText(err error) string {
	var te *json.UnmarshalTypeError
	if errors.As(err, &te) {
		return fmt.Sprintf("got a JSON %s, want %s", te.Value, jsonKind(te.Type))
	}
	return err.Error()
}

func jsonKind(t reflect.Type) string {
	switch t.Kind() {
	case reflect.String:
		return "a string"
	case reflect.Bool:
		return "true or false"
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64,
		reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		return "an integer"
	case reflect.Float32, reflect.Float64:
		return "a number"
	case reflect.Slice, reflect.Array:
		return "an array"
	case reflect.Map, reflect.Struct:
		return "an object"
	}
	return t.String()
}
