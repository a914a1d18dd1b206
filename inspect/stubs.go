package inspect

import "errors"

type ruleSet struct{}

func defaultRules() (*ruleSet, error)            { return &ruleSet{}, nil }
func (r *ruleSet) known(string) bool             { return false }
func (r *ruleSet) ids() []string                 { return nil }
func (s *Scanner) scan(string, []byte) []Finding { return nil }
func (s *Scanner) scanFields([]Field) []Finding  { return nil }
func (st *Stream) write(p []byte) int            { return len(p) }
func (st *Stream) flush()                        {}

type windows struct{}

func newWindows(int) *windows                               { return &windows{} }
func (w *windows) add(*Scanner, string, []Field) []Finding  { return nil }
func (w *windows) forget(string)                            {}
func (s *Scanner) scanResponse(string, []byte) []Finding    { return nil }
func parseJSONRPC([]byte, Limits) (*JSONRPC, error)         { return nil, errors.New("todo") }
func parseLLM(string, string, []byte, Limits) (*LLM, error) { return nil, nil }
func (c *Canaries) forSandbox(string) CanarySet             { return CanarySet{} }
func (cs CanarySet) environ(env []string) []string          { return env }
func (cs CanarySet) plant(string) ([]string, error)         { return nil, nil }

// JSONFields returns the string leaves of a JSON body as fields (Name is the
// leaf's path, "messages[0].content"), for ScanFields; bounded by lim.
func JSONFields(where string, body []byte, lim Limits) ([]Field, error) { return nil, nil }
