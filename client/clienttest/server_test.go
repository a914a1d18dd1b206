package clienttest

import (
	"regexp"
	"slices"
	"sort"
	"testing"

	"github.com/airlock-dev/airlock/api/apitest"
)

// notFaked are the routes of api/openapi.json the fake does not serve, and
// why: no client in this repository calls them through the fake.
var notFaked = map[string]string{}

// TestRoutesMatchOpenAPI: every route the fake serves is in api/openapi.json,
// and every route there is served by the fake or listed in notFaked with a
// reason.
func TestRoutesMatchOpenAPI(t *testing.T) {
	c, err := apitest.Load()
	if err != nil {
		t.Fatal(err)
	}
	var served, inDoc []string
	for pattern := range (&Server{}).routes() {
		served = append(served, shape(pattern))
	}
	for _, r := range c.Routes() {
		inDoc = append(inDoc, shape(r))
	}
	sort.Strings(served)
	for _, r := range served {
		if !slices.Contains(inDoc, r) {
			t.Errorf("the fake serves %s; api/openapi.json does not describe it", r)
		}
	}
	for _, r := range inDoc {
		if !slices.Contains(served, r) && notFaked[r] == "" {
			t.Errorf("api/openapi.json describes %s; the fake neither serves it nor says why not (notFaked)", r)
		}
	}
}

var param = regexp.MustCompile(`\{[^}]*\}`)

// shape is a route with its parameters unnamed: the fake's {exec} is the
// document's {exec_id}.
func shape(route string) string { return param.ReplaceAllString(route, "{}") }
