package client_test

import (
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"

	"github.com/airlock-dev/airlock/api"
	"github.com/airlock-dev/airlock/client"
	"github.com/airlock-dev/airlock/client/clienttest"
)

// rawExec serves body as the response of every request.
func rawExec(t *testing.T, body string) *client.Client {
	t.Helper()
	sock := clienttest.Serve(t, http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "application/x-ndjson")
		io.WriteString(w, body)
	}))
	c := client.New(sock)
	t.Cleanup(c.Close)
	return c
}

const (
	started = `{"type":"started","exec_id":"x1","pid":7}` + "\n"
	exit0   = `{"type":"exit","result":{"exec_id":"x1","exit_status":0,"exit_code":0}}` + "\n"
)

// TestExecStreamErrors: a broken or truncated stream is an error naming the
// problem, never a result.
func TestExecStreamErrors(t *testing.T) {
	tests := []struct {
		name string
		body string
		want string
		code string
	}{
		{"no exit frame", started + `{"type":"stdout","data":"aGk="}` + "\n", "stream ended before its exit frame", ""},
		{"empty stream", "", "stream ended before its exit frame", ""},
		{"error first", `{"type":"error","error":{"code":"unavailable","message":"shutting down"}}` + "\n", "shutting down", api.CodeUnavailable},
		{"error after start", started + `{"type":"error","error":{"code":"internal","message":"exec lost"}}` + "\n", "exec lost", api.CodeInternal},
		{"not json", started + "garbage\n", "bad frame", ""},
		{"bad base64", started + `{"type":"stdout","data":"!!"}` + "\n", "data", ""},
		{"unknown type", started + `{"type":"video"}` + "\n", `unknown frame type "video"`, ""},
		{"exit without result", started + `{"type":"exit"}` + "\n", "without a result", ""},
		{"first frame is output", `{"type":"stdout","data":"aGk="}` + "\n", `first frame is "stdout"`, ""},
		{"line too long", started + `{"type":"stdout","data":"` + strings.Repeat("A", 17<<20) + `"}` + "\n", "longer than", ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := rawExec(t, tt.body)
			res, err := c.Exec(t.Context(), "sb", api.ExecRequest{Argv: []string{"x"}}, client.ExecIO{})
			if err == nil || !strings.Contains(err.Error(), tt.want) || res != nil {
				t.Fatalf("got %+v, %v; want an error naming %q", res, err, tt.want)
			}
			if client.Code(err) != tt.code {
				t.Errorf("code: got %q, want %q", client.Code(err), tt.code)
			}
		})
	}
}

// TestExecFirstFrameExit: a command that could not be started may answer
// with its exit frame alone.
func TestExecFirstFrameExit(t *testing.T) {
	c := rawExec(t, `{"type":"exit","result":{"exec_id":"x1","exit_status":127,"exit_code":127,"error":"no such file"}}`+"\n")
	res, err := c.Exec(t.Context(), "sb", api.ExecRequest{Argv: []string{"x"}}, client.ExecIO{})
	if err != nil || res.ExitStatus != 127 || res.Error != "no such file" {
		t.Fatalf("got %+v, %v; want exit 127 with the error", res, err)
	}
}

// TestExecStdinError: a stdin stream the daemon refuses while the command
// runs is reported beside the result, not lost. The fake sends the exit frame
// only after it refused the stream.
func TestExecStdinError(t *testing.T) {
	refused := make(chan struct{})
	sock := clienttest.Serve(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if strings.HasSuffix(r.URL.Path, "/stdin") {
			w.WriteHeader(500)
			fmt.Fprint(w, `{"code":"internal","message":"stdin broke"}`)
			close(refused)
			return
		}
		w.Header().Set("Content-Type", "application/x-ndjson")
		io.WriteString(w, started)
		w.(http.Flusher).Flush()
		<-refused
		io.WriteString(w, exit0)
	}))
	c := client.New(sock)
	defer c.Close()
	res, err := c.Exec(t.Context(), "sb", api.ExecRequest{Argv: []string{"x"}}, client.ExecIO{Stdin: strings.NewReader("abc")})
	var se *client.StdinError
	if res == nil || res.ExitStatus != 0 || !errors.As(err, &se) || client.Code(err) != api.CodeInternal {
		t.Fatalf("got %+v, %v; want the result and a *StdinError with the daemon's code", res, err)
	}
}

// TestExecWriterError: an output writer that fails ends the exec with the
// writer's error.
func TestExecWriterError(t *testing.T) {
	c := rawExec(t, started+`{"type":"stderr","data":"aGk="}`+"\n"+exit0)
	_, err := c.Exec(t.Context(), "sb", api.ExecRequest{Argv: []string{"x"}}, client.ExecIO{Stderr: failWriter{}})
	if err == nil || !strings.Contains(err.Error(), "writing its stderr") {
		t.Fatalf("got %v, want the writer's failure", err)
	}
}

type failWriter struct{}

func (failWriter) Write([]byte) (int, error) { return 0, errors.New("disk full") }

func TestFramesIterator(t *testing.T) {
	c := rawExec(t, started+`{"type":"stdout","data":"aGk="}`+"\n"+`{"type":"stderr","data":"eW8="}`+"\n"+exit0)
	s, err := c.StartExec(t.Context(), "sb", api.ExecRequest{Argv: []string{"x"}})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	var got []string
	for f, err := range s.Frames() {
		if err != nil {
			t.Fatal(err)
		}
		got = append(got, f.Type+":"+string(client.Data(f)))
	}
	if want := "started:,stdout:hi,stderr:yo,exit:"; strings.Join(got, ",") != want {
		t.Errorf("got %v, want %s", got, want)
	}
	if s.ExecID() != "x1" || s.PID() != 7 || s.Result() == nil {
		t.Errorf("stream: id %q pid %d result %+v", s.ExecID(), s.PID(), s.Result())
	}
}

// TestEventParsing: the text/event-stream format as a browser reads it:
// comments skipped, data lines joined, CRLF line ends, events without data
// dropped, the default type "message".
func TestEventParsing(t *testing.T) {
	body := ": ping\n\n" +
		"event: decision\ndata: {\"record\":\ndata: {\"host\":\"a\"}}\n\n" +
		"event: nothing\n\n" +
		"event: sandbox\r\ndata: {\"sandbox\":{\"id\":\"s\",\"state\":\"stopped\"}}\r\n\r\n" +
		"data: {\"dropped\":3}\n\n" +
		"event: decision\ndata: not json\n\n"
	sock := clienttest.Serve(t, http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "text/event-stream")
		io.WriteString(w, body)
	}))
	c := client.New(sock)
	defer c.Close()
	es, err := c.Events(t.Context(), "s")
	if err != nil {
		t.Fatal(err)
	}
	defer es.Close()
	var got []string
	var last error
	for ev, err := range es.All() {
		if err != nil {
			last = err
			break
		}
		switch {
		case ev.Record != nil:
			got = append(got, ev.Type+":"+fmt.Sprint(ev.Record["host"]))
		case ev.Sandbox != nil:
			got = append(got, ev.Type+":"+ev.Sandbox.State)
		default:
			got = append(got, fmt.Sprintf("%s:%d", ev.Type, ev.Dropped))
		}
	}
	if want := "decision:a,sandbox:stopped,message:3"; strings.Join(got, ",") != want {
		t.Errorf("got %v, want %s", got, want)
	}
	if last == nil || !strings.Contains(last.Error(), "decision event") {
		t.Errorf("bad data: got %v, want an error naming the event", last)
	}
}

func TestEventsWrongContentType(t *testing.T) {
	sock := clienttest.Serve(t, http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		io.WriteString(w, "{}")
	}))
	c := client.New(sock)
	defer c.Close()
	if _, err := c.Events(t.Context(), "s"); err == nil || !strings.Contains(err.Error(), "text/event-stream") {
		t.Fatalf("got %v, want a refusal naming the content type", err)
	}
}
