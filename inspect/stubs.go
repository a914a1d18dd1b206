package inspect

import "errors"

func (s *Scanner) scanResponse(string, []byte) []Finding    { return nil }
func parseJSONRPC([]byte, Limits) (*JSONRPC, error)         { return nil, errors.New("todo") }
func parseLLM(string, string, []byte, Limits) (*LLM, error) { return nil, nil }

// JSONFields returns the string leaves of a JSON body as fields (Name is the
// leaf's path, "messages[0].content"), for ScanFields; bounded by lim.
func JSONFields(where string, body []byte, lim Limits) ([]Field, error) { return nil, nil }
